"""A coding assistant: a pydantic-ai agent run as each turn (`run_model`).

The model comes from the session's pick (the `model` option), `ACP_MODEL`, or the
manifest's `llm.default_model`, through the route the editor set for the provider `main`
(`providers/set`) or the provider's usual environment variables.  `run_model` offers it
the editor's files and terminal (as the client declared them) and the session's MCP
servers, streams its text and thinking, shows each tool call, keeps its conversation with
the session (a loaded session goes on), and ends with the turn's cancel.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent as Model

from ._generated.acp import AgentBase, Turn, run_model

# No model named here: run_model picks it per turn (and the instructions come from the
# manifest's llm block).  Add your own tools with @ASSISTANT.tool_plain.
ASSISTANT: Model[None, str] = Model()


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        await run_model(turn, ASSISTANT, input)
