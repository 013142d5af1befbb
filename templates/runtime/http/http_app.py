"""ACP remote transport, agent side: the ASGI app serving Streamable HTTP (POST + SSE)
and WebSocket on `/acp` (the generated agent's entry points: http_server.py).

:class:`AcpHttpServer` answers its requests (``http_server.create_app`` makes it the app):
one ``jsonrpc.Connection`` per ACP connection, made by ``factory(sink)``, with the same
routes and handlers as stdio (http_connection.py); SSE streams are buffered in
http_streams.py; a request's body and error answers: http_requests.py.

Wire behaviour (matched to the official Python SDK, ``acp/http`` 0.12.1, and the RFD):

* ``POST /acp`` with ``Content-Type: application/json`` (else 415).  A JSON array
  (batch) is refused with 501, a non-object with 400.  ``initialize`` (a request)
  mints a connection and answers ``200`` with the JSON-RPC response as the body and
  the ``Acp-Connection-Id`` header (504 if the agent does not answer in 30 s).
  Every other POST needs ``Acp-Connection-Id`` (missing: 400, unknown: 404) and is
  answered ``202`` with an empty body; a request on a session (its route's scope and
  effect, routes.py: prompt, cancel, set_mode, set_config_option, close) also needs
  ``Acp-Session-Id`` (missing: 400); a session id the connection does not know: 404.
  Error bodies here are JSON-RPC error objects (``{"jsonrpc":"2.0","id":null,
  "error":{code,message}}``) where the SDK uses ``{"error": "..."}``: both carry the
  status code, which is what the SDK client looks at.  Malformed JSON: 400 with code
  -32700.  A body over the size limit: 413.
* ``GET /acp`` with ``Accept: text/event-stream`` (or ``*/*``; else 406) and
  ``Acp-Connection-Id`` opens the connection-scoped SSE stream; with ``Acp-Session-Id``
  too, that session's stream.  Frames are ``data: <json>\n\n``; ``: keepalive\n\n``
  every 15 s when idle.  Which frame goes to which stream (the routes' session effects,
  never a parse of the answer): http_connection.py.
* ``DELETE /acp`` with ``Acp-Connection-Id`` ends the connection (202; 400/404).
* WebSocket on ``/acp`` (``GET`` + ``Upgrade: websocket``, no subprotocol): every
  message of the connection on the one socket; the client sends ``initialize`` first;
  closing the socket ends the connection.
* ``GET /.well-known/agent.json`` (identity, links, capabilities, schemas), ``GET /health``
  (liveness), ``GET /metrics`` (Prometheus, when configured: observe/) and ``GET /ready`` (readiness: 503 with the reason while the session store
  cannot be reached) are never behind auth; everything else is.

A connection its client abandoned without ``DELETE`` (no SSE reader, no WebSocket, no
request in flight) is ended after ``idle_timeout`` seconds (600 by default; its sessions
stay in the store), and so is a WebSocket that sent nothing for that long with no request
in flight (closed with 1001).

Limits (README, "Limits of the HTTP agent"): ``max_connections`` ACP connections per
process (``initialize`` over it: 503), ``max_sessions`` per connection (a request that
would open one more: 429 over POST, an error answer over WebSocket; the connection lives
on).  Server-level ones (header timeout, keep-alive, WebSocket frame size) are set in
one place, :func:`http_launch.server_config`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from http import HTTPStatus
from typing import Any

import orjson
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from .. import observe
from ..wire.auth import Auth
from ..wire.http_wire import (
    AFFINITY_COOKIE,
    CONNECTION_ID_HEADER,
    SESSION_ID_HEADER,
    rpc_error_body,
)
from ..wire.logsafe import RateLimitedLog
from ..wire.routes import session_scoped
from .http_connection import ConnectionFactory, HttpConnection
from .http_launch import SHUTDOWN_GRACE
from .http_requests import (
    Parsed,
    body_unread,
    error_response,
    parse_post,
    post_headers,
    read_body,
    send_accepted,
)
from .http_streams import (
    DEFAULT_REPLAY_WINDOW,
    DEFAULT_STALL_TIMEOUT,
    DEFAULT_STREAM_BUFFER,
    OutStream,
)

log = logging.getLogger("acp.runtime.http")
_limited = RateLimitedLog(log)

KEEPALIVE_SECONDS = 15.0
DEFAULT_MAX_BODY = 50 * 1024 * 1024
DEFAULT_IDLE_TIMEOUT = 600.0
MAX_EVENT_ID_DIGITS = 18  # a Last-Event-ID longer than this is not one we sent
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_UNUSED_TIMEOUT = 30.0  # a connection that never opened a session, left idle
DEFAULT_MAX_PER_ADDRESS = 100  # ACP connections from one peer address
DEFAULT_MAX_SESSIONS = 100
_CID, _SID = CONNECTION_ID_HEADER.lower().encode(), SESSION_ID_HEADER.lower().encode()


class AcpHttpServer:
    def __init__(
        self,
        factory: ConnectionFactory,
        *,
        auth: Auth | None = None,
        well_known: dict[str, Any] | Callable[[], Awaitable[dict[str, Any]]] | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        stream_buffer: int = DEFAULT_STREAM_BUFFER,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
        keepalive: float = KEEPALIVE_SECONDS,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        replay_window: int = DEFAULT_REPLAY_WINDOW,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        unused_timeout: float | None = DEFAULT_UNUSED_TIMEOUT,
        max_per_address: int = DEFAULT_MAX_PER_ADDRESS,
        replica: str | None = None,
        router: Any = None,
        shutdown_grace: float = SHUTDOWN_GRACE,
    ) -> None:
        self.factory = factory
        self.unused_timeout = unused_timeout
        self.max_per_address = max_per_address
        self.per_address: dict[str | None, int] = {}
        self.shutdown_grace = shutdown_grace
        self.max_connections = max_connections
        self.max_sessions = max_sessions
        # several replicas: the affinity cookie names this one; ``router`` (redis_router.py)
        # relays requests for connections another replica owns
        self.replica = replica or (router.replica if router is not None else None)
        self.router = router
        if router is not None:
            router.on_post = self._relayed_post
            router.on_delete = self._relayed_delete
            router.open_stream = self._open_for_relay
        self.replay_window = replay_window
        self.idle_timeout = idle_timeout
        self.auth = auth or Auth([])
        self.well_known: Any = well_known or {}
        self.max_body = max_body
        self.stream_buffer = stream_buffer
        self.stall_timeout = stall_timeout
        self.keepalive = keepalive
        self.connections: dict[str, HttpConnection] = {}

    def _add(self, conn: HttpConnection) -> None:
        self.connections[conn.id] = conn
        self.per_address[conn.peer] = self.per_address.get(conn.peer, 0) + 1

    def _refused(self, peer: str | None) -> Response | None:
        """503 when the process, or this peer address, holds all the connections it may."""
        if len(self.connections) >= self.max_connections:
            return self._full()
        cap = self.max_per_address
        if peer is not None and cap > 0 and self.per_address.get(peer, 0) >= cap:
            _limited.warning(
                "per-address",
                "per-address connection limit (%d) reached: refused",
                self.max_per_address,
            )
            return error_response(
                503,
                -32600,
                f"too many connections from this address (limit {self.max_per_address}); "
                "end unused ones (DELETE) or retry later",
                {"Retry-After": "1"},
            )
        return None

    async def remove(self, cid: str) -> None:
        conn = self.connections.pop(cid, None)
        if conn is not None:
            left = self.per_address.get(conn.peer, 1) - 1
            if left > 0:
                self.per_address[conn.peer] = left
            else:
                self.per_address.pop(conn.peer, None)
            await conn.close()
            if self.router is not None:
                await self.router.forget(cid)

    async def close(self) -> None:
        for cid in list(self.connections):
            await self.remove(cid)

    async def sweep(self) -> None:
        """End connections a client abandoned (never DELETEd): no WebSocket, no SSE
        reader, no request in flight, nothing received for ``idle_timeout`` seconds.
        Their sessions stay in the store (a client comes back with session/load).  One
        that never opened a session goes after ``unused_timeout`` seconds already."""
        limits = [t for t in (self.idle_timeout, self.unused_timeout) if t]
        if not limits:
            return
        while True:
            await asyncio.sleep(min(min(limits) / 2, 30.0))
            now = time.monotonic()
            for cid, conn in list(self.connections.items()):
                if conn.busy():
                    continue
                idle = now - conn.last_seen
                unused = conn.session_count() == 0
                if (self.idle_timeout and idle > self.idle_timeout) or (
                    unused and self.unused_timeout and idle > self.unused_timeout
                ):
                    log.info("connection %s idle for %.0f s: ended", cid[:8], idle)
                    await self.remove(cid)

    # ---- HTTP -------------------------------------------------------------------
    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``/acp`` over HTTP as a plain ASGI callable: POST, GET (SSE) and DELETE."""
        method = scope["method"]
        if method == "POST":
            with observe.parent(scope["headers"]):  # the requests it feeds: `traceparent`
                response = await self.post(scope, receive)
            if response is None:
                await send_accepted(send)
                return
        else:
            response = await self.endpoint(Request(scope, receive))
        await response(scope, receive, send)

    async def _post_body(
        self, scope: Scope, receive: Receive, headers: dict[bytes, str]
    ) -> Parsed | Response:
        """A POST's checks before its body counts (auth, Content-Type, size), then the body
        parsed; an error answer where one of them refuses it."""
        denied = self.auth.check(Headers(scope=scope)) if self.auth.enabled else None
        if denied is not None:
            return await body_unread(scope, receive, denied)
        ctype = headers.get(b"content-type", "")
        if not ctype.lower().startswith("application/json"):
            return await body_unread(
                scope, receive, error_response(415, -32600, "Content-Type must be application/json")
            )
        try:
            body = await read_body(headers, receive, self.max_body)
        except ClientDisconnect:  # the peer went away mid-body: nothing to answer
            _limited.warning(
                "client-disconnect", "a client disconnected before its request body was complete"
            )
            return Response(status_code=400)
        if body is None:
            return await body_unread(
                scope,
                receive,
                error_response(413, -32600, f"request body over the {self.max_body}-byte limit"),
            )
        return parse_post(body)

    async def post(self, scope: Scope, receive: Receive) -> Response | None:
        """``POST /acp``: an error or initialize answer, or None for 202 Accepted."""
        headers = post_headers(scope)  # (auth, when on, reads them all)
        parsed = await self._post_body(scope, receive, headers)
        if isinstance(parsed, Response):
            return parsed
        msg = parsed.msg
        if msg.get("method") == "initialize" and "id" in msg:
            client = scope.get("client")
            return await self._initialize(parsed, client[0] if client else None)
        cid = headers.get(_CID)
        if cid is None:
            return error_response(400, -32600, f"missing {CONNECTION_ID_HEADER} header")
        sid = headers.get(_SID)
        known = self.connections.get(cid)
        if known is None:
            owner = await self.router.owner(cid) if self.router is not None else None
            # the owner serves it: the POST's trace context goes along (its `_meta`, in the
            # body, does anyway)
            trace = {k: v for k in ("traceparent", "tracestate") if (v := headers.get(k.encode()))}
            relayed = (
                await self.router.relay_post(owner, cid, sid, parsed.body, trace) if owner else None
            )
            if relayed is None:
                return error_response(404, -32600, "unknown connection id")
            status, content, ctype = relayed
            return Response(content, status_code=status, media_type=ctype)
        return self._post_to(known, sid, msg, parsed.body)

    async def _initialize(self, parsed: Parsed, peer: str | None) -> Response:
        """``initialize`` mints a connection; its answer is the POST's body."""
        refused = self._refused(peer)
        if refused is not None:
            return refused
        conn = HttpConnection(self, peer=peer)
        self._add(conn)
        try:
            answer = await conn.initialize(parsed.msg, parsed.body, parsed.rid)
        except TimeoutError:
            await self.remove(conn.id)
            return error_response(504, -32603, "initialize timed out")
        if b'"error"' in answer and "error" in orjson.loads(answer):
            await self.remove(conn.id)  # a refused initialize opens no connection
            return Response(answer, status_code=200, media_type="application/json")
        if self.router is not None:
            await self.router.claim(conn.id)
        response = Response(
            answer,
            status_code=200,
            media_type="application/json",
            headers={CONNECTION_ID_HEADER: conn.id},
        )
        if self.replica is not None:
            response.set_cookie(AFFINITY_COOKIE, self.replica, httponly=True, samesite="lax")
        return response

    def _post_to(
        self, conn: HttpConnection, sid: str | None, msg: dict[str, Any], body: bytes
    ) -> Response | None:
        """A POST (not initialize) for a connection this replica holds: an error answer, or
        None when the message was handed to the connection (202 Accepted)."""
        method = msg.get("method")
        conn.last_seen = time.monotonic()
        route = conn.core.route(method) if type(method) is str else None
        if sid is None and route is not None and route.handler and session_scoped(route):
            return error_response(400, -32600, f"missing {SESSION_ID_HEADER} header for {method}")
        if sid is not None and sid not in conn.sessions:
            return error_response(404, -32600, "unknown session id")
        refused = conn.admit(msg)
        if refused is not None:
            return Response(
                orjson.dumps({"jsonrpc": "2.0", "id": msg.get("id"), "error": refused.to_wire()}),
                status_code=429,
                media_type="application/json",
            )
        conn.core.feed_message(msg, body)
        return None

    def _full(self) -> Response:
        _limited.warning(
            "connections", "connection limit (%d) reached: refused", self.max_connections
        )
        return error_response(
            503,
            -32600,
            f"too many connections (limit {self.max_connections}); retry later",
            {"Retry-After": "1"},
        )

    async def get(self, request: Request) -> Response:
        denied = self.auth.check(request.headers)
        if denied is not None:
            return denied
        accept = request.headers.get("accept", "")
        if "text/event-stream" not in accept and "*/*" not in accept:
            return error_response(406, -32600, "Accept must include text/event-stream")
        cid = request.headers.get(CONNECTION_ID_HEADER)
        if cid is None:
            return error_response(400, -32600, f"missing {CONNECTION_ID_HEADER} header")
        conn = self.connections.get(cid)
        sid = request.headers.get(SESSION_ID_HEADER)
        raw_last = request.headers.get("last-event-id", "").strip()
        last = (
            int(raw_last) if raw_last.isdigit() and len(raw_last) <= MAX_EVENT_ID_DIGITS else None
        )
        if conn is None:
            owner = await self.router.owner(cid) if self.router is not None else None
            chunks = await self.router.relay_stream(owner, cid, sid, last) if owner else None
            if chunks is None:
                return error_response(404, -32600, "unknown connection id")
        else:
            if sid is not None and sid not in conn.sessions:
                return error_response(404, -32600, "unknown session id")
            chunks = self._reader(conn, sid, last)
        return StreamingResponse(
            chunks,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )

    def _reader(
        self, conn: HttpConnection, sid: str | None, last: int | None
    ) -> AsyncIterator[bytes]:
        stream = conn.sessions[sid] if sid is not None else conn.main
        token = object()
        stream.reader = token  # a newer GET of the same stream takes over
        if last is not None:
            stream.rewind(last)
        return self._sse(stream, token, conn)

    # ---- relayed from another replica (redis_router.py) ---------------------------------
    async def _relayed_post(
        self, cid: str, sid: str | None, body: bytes
    ) -> tuple[int, bytes, str | None]:
        conn = self.connections.get(cid)
        if conn is None:
            return 404, rpc_error_body(-32600, "unknown connection id"), "application/json"
        r = self._post_to(conn, sid, orjson.loads(body), body)
        if r is None:
            return 202, b"", None
        return r.status_code, bytes(r.body), r.headers.get("content-type")

    async def _relayed_delete(self, cid: str) -> int:
        if cid not in self.connections:
            return 404
        await self.remove(cid)
        return 202

    def _open_for_relay(
        self, cid: str, sid: str | None, last: int | None
    ) -> AsyncIterator[bytes] | None:
        conn = self.connections.get(cid)
        if conn is None or (sid is not None and sid not in conn.sessions):
            return None
        return self._reader(conn, sid, last)

    async def _sse(
        self, stream: OutStream, token: object, conn: HttpConnection
    ) -> AsyncIterator[bytes]:
        try:
            while stream.reader is token:
                if not await stream.wait(self.keepalive):
                    yield b": keepalive\n\n"
                    continue
                if stream.reader is not token:
                    # a newer GET took the stream over while this one waited: what is
                    # queued (rewound for it included) is the newer reader's, not ours
                    return
                events = stream.take_all()
                if not events:
                    if stream.closed:
                        return
                    continue
                yield b"".join([e for _, e in events])
        finally:
            if stream.reader is token:
                stream.reader = None  # nobody reads this stream now
            conn.last_seen = time.monotonic()

    async def delete(self, request: Request) -> Response:
        denied = self.auth.check(request.headers)
        if denied is not None:
            return denied
        cid = request.headers.get(CONNECTION_ID_HEADER)
        if cid is None:
            return error_response(400, -32600, f"missing {CONNECTION_ID_HEADER} header")
        if cid not in self.connections:
            owner = await self.router.owner(cid) if self.router is not None else None
            status = await self.router.relay_delete(owner, cid) if owner else None
            if status is None or status == HTTPStatus.NOT_FOUND:
                return error_response(404, -32600, "unknown connection id")
            return Response(status_code=status)
        await self.remove(cid)
        return Response(status_code=202)

    async def endpoint(self, request: Request) -> Response:
        """``/acp`` but POST (:meth:`asgi` answers those)."""
        if request.method == "GET":
            if request.headers.get("upgrade", "").lower() == "websocket":
                return error_response(400, -32600, "WebSocket upgrade was not completed")
            return await self.get(request)
        if request.method == "DELETE":
            return await self.delete(request)
        return error_response(405, -32600, "method not allowed")

    # ---- WebSocket --------------------------------------------------------------
    async def websocket(self, ws: WebSocket) -> None:
        peer = ws.client.host if ws.client else None
        if await self._ws_refused(ws, peer):
            return
        conn = HttpConnection(self, ws_send=lambda frame: ws.send_text(frame.decode()), peer=peer)
        self._add(conn)
        await ws.accept(headers=[(CONNECTION_ID_HEADER.lower().encode(), conn.id.encode())])
        try:
            # the upgrade request's `traceparent` is the parent of every request the
            # connection serves (a request's own `_meta.traceparent` wins)
            with observe.parent(ws.scope["headers"]):
                await self._ws_receive(ws, conn)
        except WebSocketDisconnect:
            return
        finally:
            await self.remove(conn.id)

    async def _ws_receive(self, ws: WebSocket, conn: HttpConnection) -> None:
        """A WebSocket's messages to its connection, until it closes or idles out."""
        while True:
            try:
                message = await asyncio.wait_for(ws.receive(), self.idle_timeout or None)
            except TimeoutError:
                if getattr(conn.core, "_incoming", None) or getattr(conn.core, "_pending", None):
                    continue  # a request still runs: the client is waiting, not idle
                log.info("WebSocket connection %s idle: closed", conn.id[:8])
                await ws.close(code=1001, reason="idle")
                return
            if message["type"] == "websocket.disconnect":
                return
            self._ws_message(conn, message)

    async def _ws_refused(self, ws: WebSocket, peer: str | None) -> bool:
        """Auth and the connection caps for a WebSocket: refused (and answered) or not."""
        denial = "websocket.http.response" in (ws.scope.get("extensions") or {})
        denied = self.auth.check(ws.headers)
        if denied is not None:
            if denial:
                await ws.send_denial_response(denied)  # 401 + WWW-Authenticate, as over HTTP
            else:
                await ws.close(code=1008, reason="unauthorized")  # the server answers 403
            return True
        refused = self._refused(peer)
        if refused is not None:
            if denial:
                await ws.send_denial_response(refused)
            else:
                await ws.close(code=1013, reason="too many connections")
            return True
        return False

    def _ws_message(self, conn: HttpConnection, message: Message) -> None:
        """One WebSocket message for the connection's core."""
        text = message.get("text")
        if text is None:
            return  # binary frames are ignored, like the SDK
        data = text.encode()
        if len(data) > conn.core.max_message_size:
            conn.core.too_large(len(data))
            return
        try:
            msg = orjson.loads(data)
        except orjson.JSONDecodeError:
            conn.core.feed(data)  # the core answers the parse error
            return
        if type(msg) is dict and not self._ws_admit(conn, msg):
            return
        conn.core.feed_message(msg, data)

    def _ws_admit(self, conn: HttpConnection, msg: dict[str, Any]) -> bool:
        refused = conn.admit(msg)
        if refused is None:
            return True
        rid = msg.get("id")
        conn.core.reject(rid if type(rid) in (int, str) else None, refused)
        return False

    # ---- info -------------------------------------------------------------------
    async def agent_json(self, request: Request) -> Response:
        doc = self.well_known
        if callable(doc):
            doc = self.well_known = await doc()
        return Response(orjson.dumps(doc), media_type="application/json")

    async def health(self, request: Request) -> Response:
        return Response(
            orjson.dumps({"status": "ok", "connections": len(self.connections)}),
            media_type="application/json",
        )

    async def metrics(self, request: Request) -> Response:
        """The metrics in Prometheus' text format (`OTEL_METRICS_EXPORTER=prometheus`; README,
        "Observing it"), never behind auth, like /health; 404 when not configured."""
        found = observe.exposition()
        if found is None:
            return Response(status_code=404)
        body, content_type = found
        return Response(body, media_type=content_type)

    async def ready(self, request: Request) -> Response:
        """Readiness: 503 with the reason while the session store cannot be reached (a
        request needing it would answer StoreUnavailable); Redis being down is reported but
        not fatal (routing is owner-only meanwhile)."""
        store = getattr(self.factory, "store", None)
        status = getattr(store, "status", None)
        reason = await status() if status is not None else None
        body: dict[str, Any] = {"status": "unavailable" if reason else "ok"}
        if reason:
            body["reason"] = f"session store: {reason}"
        relay = getattr(self.router, "status", None)
        if relay is not None and relay() is not None:
            body["relay"] = relay()
        return Response(
            orjson.dumps(body), status_code=503 if reason else 200, media_type="application/json"
        )

    async def shutdown(self) -> None:
        """End every connection and close the router and the store, within
        ``shutdown_grace`` in all (a store or Redis that does not answer cannot hold it)."""
        steps: list[Any] = [self.close()]
        if self.router is not None:
            steps.append(self.router.close())
        closer = getattr(getattr(self.factory, "store", None), "aclose", None)
        for step in steps:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(step, self.shutdown_grace / 3)
        if closer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(closer(), self.shutdown_grace / 6)
