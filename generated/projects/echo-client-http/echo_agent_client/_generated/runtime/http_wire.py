"""The HTTP transport's wire facts, shared by the agent's server (http_app.py,
http_connection.py) and the client (http_client.py): the endpoint, the header and cookie
names, which methods name their session in a header or open one, and the JSON-RPC error
body of an HTTP error answer."""

from __future__ import annotations

from typing import Any

import orjson

from .errors import clip

ENDPOINT = "/acp"
CONNECTION_ID_HEADER = "Acp-Connection-Id"
SESSION_ID_HEADER = "Acp-Session-Id"
AFFINITY_COOKIE = "acp-replica"  # the replica a client sticks to (redis_router.py)

# the requests that carry ``Acp-Session-Id`` (the agent answers 400 without it)
SESSION_SCOPED = frozenset(
    {
        "session/prompt",
        "session/cancel",
        "session/set_mode",
        "session/set_config_option",
        "session/close",
    }
)
ATTACHING = frozenset({"session/load", "session/resume"})
OPENING = frozenset({"session/new", *ATTACHING})  # the requests that open a session
OPENING_NEEDLES = (b'"session/new"', b'"session/load"', b'"session/resume"')


def rpc_error_body(code: int, message: str, rid: Any = None) -> bytes:
    return orjson.dumps(
        {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": clip(message)}}
    )
