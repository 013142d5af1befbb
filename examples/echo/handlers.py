"""The echo agent's handler: every text block of a prompt comes back as one message chunk.

This is `<package>/handlers.py` of the project `agentgen new --manifest
examples/echo/agent.yaml` creates: the one module agentgen never rewrites.  The manifest
has no input schema, so `input` is the prompt's ACP content blocks as they are.
"""

from __future__ import annotations

from typing import Any

from ._generated.acp import AgentBase, Turn


class Agent(AgentBase):
    """Echo: one `agent_message_chunk` per text block, same text, then the turn ends."""

    async def prompt(self, turn: Turn, input: list[dict[str, Any]]) -> None:
        for block in input:
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                await turn.send_text(block["text"])
