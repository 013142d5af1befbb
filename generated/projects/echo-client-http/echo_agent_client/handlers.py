"""The client's handlers: the one module agentgen never rewrites.

`ClientBase` (in `_generated/dispatcher.py`) has one async method per method the
agent may call on the client (session updates, permission requests, files,
terminals, elicitation); override the ones your client handles. `agentgen regen`
lists every method here that a new protocol revision removes or changes.
"""

from __future__ import annotations

import sys
from typing import Any

from ._generated.dispatcher import ClientBase


def _wire(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    return dump(by_alias=True, exclude_unset=True, mode="json") if dump else obj


class Client(ClientBase):
    """echo-agent-client's client-side handlers."""

    async def session_update(self, params: Any) -> None:
        """Each update the agent streams. As generated: print the agent's text."""
        update = _wire(params).get("update") or {}
        content = update.get("content")
        if update.get("sessionUpdate") == "agent_message_chunk" and isinstance(content, dict):
            if content.get("type") == "text":
                sys.stdout.write(content.get("text", ""))
                sys.stdout.flush()
