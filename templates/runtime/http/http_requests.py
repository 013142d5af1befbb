"""What the agent's HTTP endpoint does with a request before its ACP connection sees it:
a POST body parsed once into one JSON-RPC message (or the error answer: 400, 501), the
JSON-RPC error bodies of HTTP answers, the headers a POST reads (one pass), the answer sent before a body was read (HTTP/1.1
closes, HTTP/2 drains), an accepted POST's 202 in one write; and ``AcpApp``, the ASGI app
that hands ``/acp`` over HTTP to the server ahead of Starlette's routing."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from ..wire.http_wire import CONNECTION_ID_HEADER, ENDPOINT, SESSION_ID_HEADER, rpc_error_body

DRAIN_LIMIT = 256 * 1024 * 1024
DRAIN_SECONDS = 30.0


def error_response(
    status: int, code: int, message: str, headers: dict[str, str] | None = None
) -> Response:
    return Response(
        rpc_error_body(code, message),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


async def body_unread(scope: Scope, receive: Receive, response: Response) -> Response:
    """An answer sent before the request body was read.  HTTP/1.1: the server closes the
    connection after it, so say so (a client would otherwise reuse it and lose its next
    request).  HTTP/2: read the rest of the body and drop it (at most ``DRAIN_LIMIT`` bytes
    for ``DRAIN_SECONDS``), since Hypercorn 0.18 ends the whole connection, every other
    stream of it included, when DATA arrives for a stream that has already answered."""
    if scope.get("http_version", "1.1").startswith("1"):
        response.headers["Connection"] = "close"
        return response
    drained = 0

    async def drain() -> None:  # from ASGI receive: the body may be partly read already
        nonlocal drained
        while drained <= DRAIN_LIMIT:
            message = await receive()
            if message["type"] != "http.request":
                return
            drained += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    with contextlib.suppress(Exception):
        await asyncio.wait_for(drain(), DRAIN_SECONDS)
    return response


POST_HEADERS = frozenset(
    {b"content-type", b"content-length", CONNECTION_ID_HEADER.lower().encode()}
    | {SESSION_ID_HEADER.lower().encode(), b"traceparent", b"tracestate"}
)


def post_headers(scope: Scope) -> dict[bytes, str]:
    """The headers a POST reads (``POST_HEADERS``), in one pass over the request's: the
    first of each, as Starlette's ``Headers`` gives (ASGI names them in lower case)."""
    found: dict[bytes, str] = {}
    for key, value in scope["headers"]:
        if key in POST_HEADERS and key not in found:
            found[key] = value.decode("latin-1")
    return found


class Parsed:
    """A POST body that parsed as one JSON-RPC message (an object with a usable id)."""

    __slots__ = ("body", "msg", "rid")

    def __init__(self, msg: dict[str, Any], body: bytes) -> None:
        self.msg = msg
        self.body = body
        self.rid = msg.get("id")


def parse_post(body: bytes) -> Parsed | Response:
    try:
        msg = orjson.loads(body)
    except orjson.JSONDecodeError:
        return error_response(400, -32700, "parse error: invalid JSON")
    if type(msg) is list:
        return error_response(501, -32600, "batch requests are not supported")
    if type(msg) is not dict:
        return error_response(400, -32600, "invalid request: expected a JSON object")
    rid = msg.get("id")
    if "id" in msg and not (rid is None or type(rid) in (int, str)):
        # refused here: an unhashable id would break the routing maps below
        return error_response(400, -32600, "invalid request: id must be a string, integer or null")
    return Parsed(msg, body)


# the answer to an accepted POST: 202, empty body, in one write (what Starlette's
# ``Response(status_code=202)`` sends, without building one per prompt)
_ACCEPTED_HEADERS = [(b"content-length", b"0")]


async def send_accepted(send: Send) -> None:
    await send({"type": "http.response.start", "status": 202, "headers": _ACCEPTED_HEADERS})
    await send({"type": "http.response.body", "body": b""})


class Endpoint(Protocol):
    """What serves ``/acp`` over HTTP (http_app.AcpHttpServer)."""

    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None: ...


_OURS = frozenset({"POST", "GET", "DELETE"})  # other methods: Starlette's 405


class AcpApp(Starlette):
    """The agent's ASGI app: ``/acp`` over HTTP goes straight to the server's ``asgi`` (http_app.AcpHttpServer)
    (no routing, middleware or Request/Response objects on the per-prompt path); everything
    else (the WebSocket on ``/acp``, the info routes, lifespan) through Starlette."""

    def __init__(self, server: Endpoint, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.acp = server
        self.state.acp = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == ENDPOINT and scope["method"] in _OURS:
            scope["app"] = self
            await self.acp.asgi(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


async def read_body(headers: dict[bytes, str], receive: Receive, max_body: int) -> bytes | None:
    """A request's whole body; None past `max_body` bytes (declared or received)."""
    declared = headers.get(b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message: Message = await receive()
        if message["type"] != "http.request":  # http.disconnect
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_body:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
