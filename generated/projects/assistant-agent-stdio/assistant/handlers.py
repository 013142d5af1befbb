"""The agent's handlers: the one module agentgen never rewrites.

`AgentBase` (from `_generated/acp.py`, the generated package's public face: every name
a handler uses) has one async method per protocol
method; the runtime answers them from the manifest. Override `prompt` to do your
agent's work (and any protocol method you want to answer yourself). `agentgen regen`
lists every method here that a new protocol revision removes or changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic_ai import Agent as Model

from ._generated.acp import AgentBase, Turn, run_model

if TYPE_CHECKING:
    from ._generated.acp import Input, Output

# The model's side: a pydantic-ai agent. `run_model` picks its model per turn (the
# session's pick, ACP_MODEL, the manifest's llm.default_model) and endpoint (the route the
# editor set, else the provider's environment variables), and gives it the editor's files
# and terminal and the session's MCP servers as tools. Add your own with @MODEL.tool_plain.
MODEL: Model[None, str] = Model()


class Agent(AgentBase):
    """Assistant's handlers."""

    async def prompt(self, turn: Turn, input: Input) -> Output | None:
        """One prompt: the model's turn (streamed text and thinking, its tool calls, its
        conversation kept with the session)."""
        await run_model(turn, MODEL, input)
        return None
