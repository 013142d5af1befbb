"""The HTTP transport's wire facts, shared by the agent's server (http_app.py,
http_connection.py) and the client (http_client.py): the endpoint, the header and cookie
names, which requests the client sends with a session header, and the JSON-RPC error
body of an HTTP error answer."""

from __future__ import annotations

from typing import Any

import orjson

from .errors import clip

ENDPOINT = "/acp"
CONNECTION_ID_HEADER = "Acp-Connection-Id"
SESSION_ID_HEADER = "Acp-Session-Id"
AFFINITY_COOKIE = "acp-replica"  # the replica a client sticks to (redis_router.py)

# the requests the client sends with ``Acp-Session-Id`` (the agent reads which requests
# need it from its routes: routes.session_scoped, and answers 400 without it)
SESSION_SCOPED = frozenset(
    {
        "session/prompt",
        "session/cancel",
        "session/set_mode",
        "session/set_config_option",
        "session/close",
    }
)


def rpc_error_body(code: int, message: str, rid: Any = None) -> bytes:
    return orjson.dumps(
        {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": clip(message)}}
    )
