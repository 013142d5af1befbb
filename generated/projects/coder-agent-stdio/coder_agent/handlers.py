"""The agent's handlers: the one module agentgen never rewrites.

`AgentBase` (from `_generated/acp.py`, the generated package's public face: every name
a handler uses) has one async method per protocol
method; the runtime answers them from the manifest. Override `prompt` to do your
agent's work (and any protocol method you want to answer yourself). `agentgen regen`
lists every method here that a new protocol revision removes or changes.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ._generated.acp import AgentBase, Turn

if TYPE_CHECKING:
    from ._generated.acp import Input, Output


class Agent(AgentBase):
    """Coder's handlers."""

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

    async def is_authenticated(self) -> bool:
        """Whether the user is logged in already (e.g. the credentials `login` stored):
        asked at `session/new` until `authenticate` succeeds."""
        return False

    @classmethod
    def login(cls, method_id: str, argv: list[str]) -> int:
        """The manifest's `terminal` auth method: the client runs this agent's command with
        the method's args in a terminal. Ask for the credentials, store them where
        `is_authenticated` finds them, return 0; any other status is a failed login. As
        generated it explains this and fails."""
        sys.stderr.write(
            f"{method_id}: this login is not written yet: fill in `login` and "
            "`is_authenticated` in handlers.py\n"
        )
        return 1
