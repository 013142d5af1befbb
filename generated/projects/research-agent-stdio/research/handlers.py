"""The agent's handlers: the one module agentgen never rewrites.

`AgentBase` (from `_generated/acp.py`, the generated package's public face: every name
a handler uses) has one async method per protocol
method; the runtime answers them from the manifest. Override `prompt` to do your
agent's work (and any protocol method you want to answer yourself). `agentgen regen`
lists every method here that a new protocol revision removes or changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._generated.acp import AgentBase, Turn

if TYPE_CHECKING:
    from ._generated.acp import Input, Output


class Agent(AgentBase):
    """Research Agent's handlers."""

    async def prompt(self, turn: Turn, input: Input) -> Output | None:
        """One prompt. As generated it echoes: replace it with your agent's work.

        `input` is the manifest's typed `Input` when the manifest has an input schema (a
        `str` for a text input), otherwise the prompt's ACP content blocks; `Output` is the
        manifest's output model (any value when the manifest has no output schema). Stream
        with `turn.send_text(...)`, ask the client with `turn.interrupt(name, payload)`,
        raise the manifest's errors (from `_generated.acp` too), return the output
        (or None).
        """
        for block in input:
            if block.get("type") == "text":
                await turn.send_text(block["text"])
        return None
