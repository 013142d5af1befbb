"""ACP remote transport, agent side: Streamable HTTP (POST + SSE) and WebSocket on `/acp`.

Usage from a generated project (``--transport http``)::

    from .runtime.http_server import serve
    serve(connection_factory, host="127.0.0.1", port=8000,
          auth=Auth.from_manifest(manifest), well_known=agent_document(manifest))

``connection_factory(sink)`` returns an object with the runtime core's seam
(``jsonrpc.Connection``): ``feed(frame: bytes)``, ``too_large(size)``,
``max_message_size`` and ``async close()``; ``sink`` is the async callable the core
calls with ``[(frame_bytes, session_id | None), ...]`` in wire order.  The same
dispatcher and handlers as stdio run behind it: one ``Connection`` per ACP connection.
``create_app(...)`` returns the ASGI app (for mounting or tests).

Wire behaviour (matched to the official Python SDK, ``acp/http`` 0.12.1, and the RFD):

* ``POST /acp`` with ``Content-Type: application/json`` (else 415).  A JSON array
  (batch) is refused with 501, a non-object with 400.  ``initialize`` (a request)
  mints a connection and answers ``200`` with the JSON-RPC response as the body and
  the ``Acp-Connection-Id`` header (504 if the agent does not answer in 30 s).
  Every other POST needs ``Acp-Connection-Id`` (missing: 400, unknown: 404) and is
  answered ``202`` with an empty body; ``session/prompt``, ``session/cancel``,
  ``session/set_mode``, ``session/set_config_option`` and ``session/close`` also need
  ``Acp-Session-Id`` (missing: 400); a session id the connection does not know: 404.
  Error bodies here are JSON-RPC error objects (``{"jsonrpc":"2.0","id":null,
  "error":{code,message}}``) where the SDK uses ``{"error": "..."}``: both carry the
  status code, which is what the SDK client looks at.  Malformed JSON: 400 with code
  -32700.  A body over the size limit: 413.
* ``GET /acp`` with ``Accept: text/event-stream`` (or ``*/*``; else 406) and
  ``Acp-Connection-Id`` opens the connection-scoped SSE stream; with
  ``Acp-Session-Id`` too, that session's stream.  Frames are ``data: <json>\\n\\n``;
  ``: keepalive\\n\\n`` every 15 s when idle.  Routing: responses to ``session/new``
  (and to load/resume before the session is known on the connection) go to the
  connection stream; responses to session-scoped requests and agent messages whose
  params carry a known ``sessionId`` go to that session's stream; the rest to the
  connection stream.  A session becomes known when a result carries its
  ``sessionId`` or a ``session/load``/``session/resume`` for it succeeds.
* ``DELETE /acp`` with ``Acp-Connection-Id`` ends the connection (202; 400/404).
* WebSocket on ``/acp`` (``GET`` + ``Upgrade: websocket``): no subprotocol; the
  accept carries ``Acp-Connection-Id``; JSON-RPC as text frames both ways (binary
  frames ignored), every agent message multiplexed on the one socket; the client
  sends ``initialize`` first like on any stream.  Closing the socket ends the
  connection.
* ``GET /.well-known/agent.json`` (identity, links, capabilities, schemas), ``GET /health``
  (liveness: 200 while the process serves) and ``GET /ready`` (readiness: 200, or 503 with
  the reason while the session store cannot be reached) are never behind auth; everything
  else is when auth is configured.

Slow readers: each stream has a bounded buffer (``stream_buffer_bytes``, 8 MiB by
default).  When it is full the sink waits (backpressure reaches the handler through
the core's ``drain()``); nothing is dropped.  If a buffer stays full for
``stall_timeout`` seconds with no reader draining it, the connection is ended (its
work cancelled) rather than growing memory or silently losing messages.  Closing a
stream cancels nothing: the session's work goes on and its messages wait (bounded) for
the next GET of that stream.  Every SSE event carries ``id: <n>``; a reader that
reconnects with ``Last-Event-ID: <n>`` gets every later event again from a replay
window of the last 4 MiB sent on that stream (events written to a socket that dropped may
never have been read).  The SDK client ignores ``id:`` lines, so this stays compatible.

Memory: each stream holds at most ``stream_buffer`` unsent plus ``replay_window`` sent
bytes, so a connection with N sessions at most (N + 1) x both; with many busy sessions
per process lower ``replay_window`` (a 60 s load of 100 streaming sessions grew RSS by
~23 MiB as the windows filled).  A connection its client abandoned without ``DELETE``
(no SSE reader, no WebSocket, no request in flight) is ended after ``idle_timeout``
seconds, and so is a WebSocket that sent nothing for that long with no request in flight
(closed with 1001)
seconds (600 by default; its sessions stay in the store).

Limits (README, "Limits of the HTTP agent"): ``max_connections`` ACP connections per
process (``initialize`` over it: 503), ``max_sessions`` per connection (a request that
would open one more: 429 over POST, an error answer over WebSocket; the connection lives
on).  Server-level ones (header timeout, keep-alive, WebSocket frame size) are set in
one place, :func:`server_settings`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import sys
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from http import HTTPStatus
from typing import Any, Protocol

import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from .agent import AgentRuntime
from .auth import Auth, MissingSecret
from .errors import RpcError, clip
from .jsonrpc import DEFAULT_MAX_MESSAGE_SIZE, RateLimitedLog, RedactingFilter
from .sessions import SessionCore, advertise, callbacks_for, open_default_store
from .store import SessionStore

log = logging.getLogger("acp.runtime.http")
_limited = RateLimitedLog(log)

AFFINITY_COOKIE = "acp-replica"  # same name as redis_router.AFFINITY_COOKIE

CONNECTION_ID_HEADER = "Acp-Connection-Id"
SESSION_ID_HEADER = "Acp-Session-Id"
ENDPOINT = "/acp"
KEEPALIVE_SECONDS = 15.0
INITIALIZE_TIMEOUT = 30.0
DEFAULT_MAX_BODY = 50 * 1024 * 1024
DEFAULT_STREAM_BUFFER = 8 * 1024 * 1024
DEFAULT_STALL_TIMEOUT = 60.0
DEFAULT_IDLE_TIMEOUT = 600.0
DEFAULT_REPLAY_WINDOW = 4 * 1024 * 1024
DRAIN_LIMIT = 256 * 1024 * 1024
MAX_EVENT_ID_DIGITS = 18  # a Last-Event-ID longer than this is not one we sent
DRAIN_SECONDS = 30.0
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_UNUSED_TIMEOUT = 30.0  # a connection that never opened a session, left idle
DEFAULT_MAX_PER_ADDRESS = 100  # ACP connections from one peer address
DEFAULT_MAX_SESSIONS = 100
_RESPONSE_PREFIX = b'{"jsonrpc":"2.0","id":'  # how jsonrpc.py writes responses (and requests)
DEFAULT_KEEP_ALIVE = 5.0
SHUTDOWN_GRACE = 10.0  # seconds from SIGTERM/SIGINT to exit, whatever the store does
# a WebSocket frame this much over the message limit is still read (and answered with an
# error); a bigger one closes the socket with 1009 (the server will not buffer it)
WS_FRAME_MARGIN = 1024 * 1024

SESSION_SCOPED = frozenset(
    {
        "session/prompt",
        "session/cancel",
        "session/set_mode",
        "session/set_config_option",
        "session/close",
    }
)
_ATTACHING = frozenset({"session/load", "session/resume"})
_OPENING = frozenset({"session/new", *_ATTACHING})
_OPENING_NEEDLES = (b'"session/new"', b'"session/load"', b'"session/resume"')

Sink = Callable[[list[tuple[bytes, str | None]]], Awaitable[None]]


class CoreConnection(Protocol):
    max_message_size: int
    admit_entry: Callable[[dict[str, Any]], RpcError | None] | None  # per batch entry

    def feed(self, frame: bytes | str) -> None: ...
    def too_large(self, size: int) -> None: ...
    def reject(self, rid: Any, err: RpcError) -> None: ...
    async def close(self) -> None: ...


ConnectionFactory = Callable[[Sink], CoreConnection]


def rpc_error_body(code: int, message: str, rid: Any = None) -> bytes:
    return orjson.dumps(
        {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": clip(message)}}
    )


def _error(status: int, code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(
        rpc_error_body(code, message),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


async def _body_unread(request: Request, response: Response) -> Response:
    """An answer sent before the request body was read.  HTTP/1.1: the server closes the
    connection after it, so say so (a client would otherwise reuse it and lose its next
    request).  HTTP/2: read the rest of the body and drop it (at most ``DRAIN_LIMIT`` bytes
    for ``DRAIN_SECONDS``), since Hypercorn 0.18 ends the whole connection, every other
    stream of it included, when DATA arrives for a stream that has already answered."""
    if request.scope.get("http_version", "1.1").startswith("1"):
        response.headers["Connection"] = "close"
        return response
    drained = 0

    async def drain() -> None:  # from ASGI receive: the body may be partly read already
        nonlocal drained
        while drained <= DRAIN_LIMIT:
            message = await request.receive()
            if message["type"] != "http.request":
                return
            drained += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    with contextlib.suppress(Exception):
        await asyncio.wait_for(drain(), DRAIN_SECONDS)
    return response


class Stall(Exception):
    pass


class OutStream:
    """A bounded buffer of SSE events for one stream (see module doc).

    Every event carries ``id: <seq>``.  Besides the unsent events (at most ``limit``
    bytes, plus one event), the stream keeps a replay window of the last sent ones (at
    most ``window`` bytes, 4 MiB: what socket buffers may hold): a reader that comes back
    with ``Last-Event-ID`` gets every event after that id again, since bytes handed to a
    socket may never have been read.
    """

    def __init__(self, limit: int, stall_timeout: float, window: int = 4 * 1024 * 1024) -> None:
        self._window = window
        self._frames: deque[tuple[int, bytes]] = deque()
        self._sent: deque[tuple[int, bytes]] = deque()
        self._bytes = 0
        self._sent_bytes = 0
        self._seq = 0
        self._limit = limit
        self._stall = stall_timeout
        self._data = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self.closed = False
        self.reader: object | None = None

    async def put(self, message: bytes) -> None:
        if self.closed:
            return
        if self._bytes >= self._limit:
            self._room.clear()
            try:
                await asyncio.wait_for(self._room.wait(), self._stall)
            except TimeoutError:
                raise Stall() from None
            if self.closed:
                return
        self._seq += 1
        event = b"id: %d\ndata: %b\n\n" % (self._seq, message)
        self._frames.append((self._seq, event))
        self._bytes += len(event)
        self._data.set()

    def take_all(self) -> list[tuple[int, bytes]]:
        out = list(self._frames)
        self._frames.clear()
        self._bytes = 0
        self._data.clear()
        self._room.set()
        newest = self._sent[-1][0] if self._sent else 0
        for item in out:
            if item[0] > newest:  # a rewound event is in the window already
                self._sent.append(item)
                self._sent_bytes += len(item[1])
        first = out[0][0] if out else self._seq + 1
        # the window keeps ``window`` bytes of older events plus the whole latest write
        while self._sent and self._sent_bytes > self._window and self._sent[0][0] < first:
            self._sent_bytes -= len(self._sent.popleft()[1])
        return out

    def rewind(self, last_id: int) -> None:
        """Queue again the sent events after ``last_id`` (those still in the window)."""
        again = [item for item in self._sent if item[0] > last_id]
        if self._sent and self._sent[0][0] > last_id + 1:
            log.warning("stream resumed from event %d but the replay window starts later", last_id)
        for item in reversed(again):
            self._frames.appendleft(item)
            self._bytes += len(item[1])
        if again:
            self._data.set()

    async def wait(self, timeout: float) -> bool:
        if self._frames or self.closed:
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._data.wait(), timeout)
        return bool(self._frames) or self.closed

    def close(self) -> None:
        self.closed = True
        self._data.set()
        self._room.set()


class HttpConnection:
    """One ACP connection: a runtime core plus its SSE streams (or one WebSocket)."""

    def __init__(
        self,
        server: AcpHttpServer,
        ws_send: Callable[[bytes], Awaitable[None]] | None = None,
        peer: str | None = None,
    ) -> None:
        self.id = uuid.uuid4().hex
        self.server = server
        self.peer = peer  # the client's address (the per-address cap)
        self.ws_send = ws_send
        self.core = server.factory(self._sink)
        if ws_send is not None:
            self.core.admit_entry = self.admit  # a batch's session/new entries count too
        self.main = OutStream(server.stream_buffer, server.stall_timeout, server.replay_window)
        self.sessions: dict[str, OutStream] = {}
        self.waiters: dict[Any, asyncio.Future[bytes]] = {}
        self.attaching: dict[Any, str] = {}
        # ids of session/new|load|resume not answered yet -> the session they name (or None)
        self.opening: dict[Any, str | None] = {}
        self.ws_sessions: set[str] = set()  # sessions opened over a WebSocket
        self.closed = False
        self.last_seen = time.monotonic()

    def busy(self) -> bool:
        """A WebSocket, an SSE reader or a request in flight keeps a connection alive."""
        if self.ws_send is not None or self.main.reader is not None:
            return True
        if any(s.reader is not None for s in self.sessions.values()):
            return True
        return bool(getattr(self.core, "_incoming", None))

    def session_count(self) -> int:
        return len(self.sessions) + len(self.ws_sessions) + len(self.opening)

    def admit(self, msg: dict[str, Any]) -> RpcError | None:
        """The per-connection session cap (``max_sessions``): a request that would open
        one more session gets an error; the connection lives on.  Sessions opened on a
        connection count until it ends (their streams are kept until then)."""
        method = msg.get("method")
        if (
            type(method) is not str
            or method not in _OPENING
            or type(msg.get("id")) not in (int, str)
        ):
            return None  # a notification, or an id the core refuses anyway
        params = msg.get("params")
        target = params.get("sessionId") if type(params) is dict else None
        if type(target) is str and (target in self.sessions or target in self.ws_sessions):
            return None
        limit = self.server.max_sessions
        if self.session_count() >= limit:
            return RpcError(
                -32600,
                f"too many sessions on this connection (limit {limit}); open a new connection",
                {"limit": "max_sessions", "max": limit},
            )
        self.opening[msg["id"]] = target if type(target) is str else None
        return None

    def _opened(self, frame: bytes) -> None:
        """A WebSocket connection's answer to a session/new|load|resume: count the session
        when it succeeded (a failed load or resume opens nothing and counts for nothing)."""
        try:
            msg = orjson.loads(frame)
        except orjson.JSONDecodeError:
            return
        if type(msg) is list:  # a batch's responses
            for entry in msg:
                self._opened(orjson.dumps(entry))
            return
        if type(msg) is not dict or "method" in msg or msg.get("id") not in self.opening:
            return
        target = self.opening.pop(msg["id"])
        result = msg.get("result")
        if type(result) is not dict:
            return
        sid = result.get("sessionId")
        sid = sid if type(sid) is str else target
        if sid is not None:
            self.ws_sessions.add(sid)

    def session_stream(self, sid: str) -> OutStream:
        s = self.sessions.get(sid)
        if s is None:
            s = self.sessions[sid] = OutStream(
                self.server.stream_buffer, self.server.stall_timeout, self.server.replay_window
            )
        return s

    async def _sink(self, batch: list[tuple[bytes, str | None]]) -> None:
        if self.ws_send is not None:
            for frame, _sid in batch:
                if self.opening and frame.startswith(_RESPONSE_PREFIX):
                    self._opened(frame)  # (a load's answer is routed to its session)
                await self.ws_send(frame)
            return
        for frame, sid in batch:
            # only responses need a look inside: initialize capture, session birth
            if (self.waiters or self.attaching or sid is None) and await self._route_special(frame):
                continue
            target = self.sessions.get(sid) if sid is not None else None
            try:
                await (target or self.main).put(frame)
            except Stall:
                log.warning(
                    "connection %s: stream buffer full with no reader; ending the connection",
                    self.id[:8],
                )
                asyncio.get_running_loop().create_task(self.server.remove(self.id))
                raise

    async def _route_special(self, frame: bytes) -> bool:
        if b'"result"' not in frame and b'"error"' not in frame:
            return False
        try:
            msg = orjson.loads(frame)
        except orjson.JSONDecodeError:
            return False
        if type(msg) is not dict or "method" in msg or "id" not in msg:
            return False
        rid = msg["id"]
        if type(rid) in (int, str):
            self.opening.pop(rid, None)
        fut = self.waiters.pop(rid, None)
        if fut is not None:
            if not fut.done():
                fut.set_result(frame)
            return True
        result = msg.get("result")
        born = result.get("sessionId") if type(result) is dict else None
        attached = self.attaching.pop(rid, None)
        if type(born) is str:
            self.session_stream(born)
        elif attached is not None and "result" in msg:
            self.session_stream(attached)
        if type(born) is str or attached is not None:
            await self.main.put(frame)
            return True
        return False

    async def initialize(self, body: bytes, rid: Any) -> bytes:
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.waiters[rid] = fut
        self.core.feed(body)
        return await asyncio.wait_for(fut, INITIALIZE_TIMEOUT)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            await self.core.close()
        self.main.close()
        for s in self.sessions.values():
            s.close()


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
            return _error(
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
    async def _read_body(self, request: Request) -> bytes | None:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            return None
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def post(self, request: Request) -> Response:
        denied = self.auth.check(request.headers)
        if denied is not None:
            return await _body_unread(request, denied)
        ctype = request.headers.get("content-type", "")
        if not ctype.lower().startswith("application/json"):
            return await _body_unread(
                request, _error(415, -32600, "Content-Type must be application/json")
            )
        try:
            body = await self._read_body(request)
        except ClientDisconnect:  # the peer went away mid-body: nothing to answer
            _limited.warning(
                "client-disconnect", "a client disconnected before its request body was complete"
            )
            return Response(status_code=400)
        if body is None:
            return await _body_unread(
                request, _error(413, -32600, f"request body over the {self.max_body}-byte limit")
            )
        try:
            msg = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _error(400, -32700, "parse error: invalid JSON")
        if type(msg) is list:
            return _error(501, -32600, "batch requests are not supported")
        if type(msg) is not dict:
            return _error(400, -32600, "invalid request: expected a JSON object")
        rid = msg.get("id")
        if "id" in msg and not (rid is None or type(rid) in (int, str)):
            # refused here: an unhashable id would break the routing maps below
            return _error(400, -32600, "invalid request: id must be a string, integer or null")
        method = msg.get("method")
        if method == "initialize" and "id" in msg:
            peer = request.client.host if request.client else None
            refused = self._refused(peer)
            if refused is not None:
                return refused
            conn = HttpConnection(self, peer=peer)
            self._add(conn)
            try:
                answer = await conn.initialize(body, rid)
            except TimeoutError:
                await self.remove(conn.id)
                return _error(504, -32603, "initialize timed out")
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
        cid = request.headers.get(CONNECTION_ID_HEADER)
        if cid is None:
            return _error(400, -32600, f"missing {CONNECTION_ID_HEADER} header")
        sid = request.headers.get(SESSION_ID_HEADER)
        known = self.connections.get(cid)
        if known is None:
            owner = await self.router.owner(cid) if self.router is not None else None
            relayed = await self.router.relay_post(owner, cid, sid, body) if owner else None
            if relayed is None:
                return _error(404, -32600, "unknown connection id")
            status, content, ctype = relayed
            return Response(content, status_code=status, media_type=ctype)
        return self._post_to(known, sid, msg, body)

    def _post_to(
        self, conn: HttpConnection, sid: str | None, msg: dict[str, Any], body: bytes
    ) -> Response:
        """A POST (not initialize) for a connection this replica holds."""
        method = msg.get("method")
        conn.last_seen = time.monotonic()
        if sid is None and method in SESSION_SCOPED:
            return _error(400, -32600, f"missing {SESSION_ID_HEADER} header for {method}")
        if sid is not None and sid not in conn.sessions:
            return _error(404, -32600, "unknown session id")
        refused = conn.admit(msg)
        if refused is not None:
            return Response(
                orjson.dumps({"jsonrpc": "2.0", "id": msg.get("id"), "error": refused.to_wire()}),
                status_code=429,
                media_type="application/json",
            )
        if method in _ATTACHING and "id" in msg:
            params = msg.get("params")
            target = params.get("sessionId") if type(params) is dict else None
            if type(target) is str:
                conn.attaching[msg["id"]] = target
        conn.core.feed(body)
        return Response(status_code=202)

    def _full(self) -> Response:
        _limited.warning(
            "connections", "connection limit (%d) reached: refused", self.max_connections
        )
        return _error(
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
            return _error(406, -32600, "Accept must include text/event-stream")
        cid = request.headers.get(CONNECTION_ID_HEADER)
        if cid is None:
            return _error(400, -32600, f"missing {CONNECTION_ID_HEADER} header")
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
                return _error(404, -32600, "unknown connection id")
        else:
            if sid is not None and sid not in conn.sessions:
                return _error(404, -32600, "unknown session id")
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
            return _error(400, -32600, f"missing {CONNECTION_ID_HEADER} header")
        if cid not in self.connections:
            owner = await self.router.owner(cid) if self.router is not None else None
            status = await self.router.relay_delete(owner, cid) if owner else None
            if status is None or status == HTTPStatus.NOT_FOUND:
                return _error(404, -32600, "unknown connection id")
            return Response(status_code=status)
        await self.remove(cid)
        return Response(status_code=202)

    async def endpoint(self, request: Request) -> Response:
        if request.method == "POST":
            return await self.post(request)
        if request.method == "GET":
            if request.headers.get("upgrade", "").lower() == "websocket":
                return _error(400, -32600, "WebSocket upgrade was not completed")
            return await self.get(request)
        if request.method == "DELETE":
            return await self.delete(request)
        return _error(405, -32600, "method not allowed")

    # ---- WebSocket --------------------------------------------------------------
    async def websocket(self, ws: WebSocket) -> None:
        denied = self.auth.check(ws.headers)
        if denied is not None:
            if "websocket.http.response" in (ws.scope.get("extensions") or {}):
                await ws.send_denial_response(denied)  # 401 + WWW-Authenticate, as over HTTP
            else:
                await ws.close(code=1008, reason="unauthorized")  # the server answers 403
            return
        peer = ws.client.host if ws.client else None
        refused = self._refused(peer)
        if refused is not None:
            if "websocket.http.response" in (ws.scope.get("extensions") or {}):
                await ws.send_denial_response(refused)
            else:
                await ws.close(code=1013, reason="too many connections")
            return
        conn = HttpConnection(self, ws_send=lambda frame: ws.send_text(frame.decode()), peer=peer)
        self._add(conn)
        await ws.accept(headers=[(CONNECTION_ID_HEADER.lower().encode(), conn.id.encode())])
        try:
            while True:
                try:
                    message = await asyncio.wait_for(ws.receive(), self.idle_timeout or None)
                except TimeoutError:
                    if getattr(conn.core, "_incoming", None) or getattr(
                        conn.core, "_pending", None
                    ):
                        continue  # a request still runs: the client is waiting, not idle
                    log.info("WebSocket connection %s idle: closed", conn.id[:8])
                    await ws.close(code=1001, reason="idle")
                    return
                if message["type"] == "websocket.disconnect":
                    return
                text = message.get("text")
                if text is None:
                    continue  # binary frames are ignored, like the SDK
                data = text.encode()
                if len(data) > conn.core.max_message_size:
                    conn.core.too_large(len(data))
                    continue
                if any(n in data for n in _OPENING_NEEDLES) and not self._ws_admit(conn, data):
                    continue
                conn.core.feed(data)
        except WebSocketDisconnect:
            return
        finally:
            await self.remove(conn.id)

    def _ws_admit(self, conn: HttpConnection, data: bytes) -> bool:
        try:
            msg = orjson.loads(data)
        except orjson.JSONDecodeError:
            return True  # the core answers the parse error
        if type(msg) is not dict:
            return True
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


def create_app(factory: ConnectionFactory, **options: Any) -> Starlette:
    """The ASGI app; ``options`` are those of :class:`AcpHttpServer`."""
    server = AcpHttpServer(factory, **options)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sweeper = asyncio.get_running_loop().create_task(server.sweep())
        if server.router is not None:
            await server.router.start()
        yield
        sweeper.cancel()
        await server.shutdown()

    app = Starlette(
        routes=[
            Route(ENDPOINT, server.endpoint, methods=["GET", "POST", "DELETE"]),
            WebSocketRoute(ENDPOINT, server.websocket),
            Route("/.well-known/agent.json", server.agent_json, methods=["GET"]),
            Route("/health", server.health, methods=["GET"]),
            Route("/ready", server.ready, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.acp = server
    return app


def serve(
    factory: ConnectionFactory,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    keep_alive: float = DEFAULT_KEEP_ALIVE,
    **options: Any,
) -> None:
    """Run the agent over HTTP/WebSocket at ``http://host:port/acp`` (blocks)."""
    limit = int(options.get("max_body", DEFAULT_MAX_BODY))
    certfile = options.pop("certfile", None)
    keyfile = options.pop("keyfile", None)
    run_server(
        create_app(factory, **options),
        host,
        port,
        header_timeout=header_timeout,
        keep_alive=keep_alive,
        max_message_size=limit,
        certfile=certfile,
        keyfile=keyfile,
    )


# ---- the generated agent over HTTP: sessions come from the session core (sessions.py) ----


def agent_factory(
    agent_cls: type[AgentRuntime],
    store: SessionStore,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    replica: str | None = None,
) -> ConnectionFactory:
    """The per-connection runtime for ``create_app``: one ``SessionConnection`` per ACP
    connection, sessions persisted in ``store`` (see sessions.py); when the manifest
    declares ``output_modes.async.callback``, a prompt with ``_meta.callbackUrl`` also gets
    its result POSTed there, signed (see ``callbacks.py``)."""
    return SessionCore(
        agent_cls,
        store,
        max_message_size=max_message_size,
        callbacks=callbacks_for(agent_cls),
        replica=replica,  # lease owners name the replica
    )


def app_for(
    agent_cls: type[AgentRuntime],
    *,
    store: SessionStore | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    allow_missing_auth: bool = False,
    **options: Any,
) -> Starlette:
    """The ASGI app of a generated agent: auth and the well-known document from its manifest.

    An auth scheme whose env var is unset or empty raises :class:`MissingSecret` unless
    ``allow_missing_auth`` (then that scheme accepts nothing, with a warning).

    The store: ``$ACP_SESSION_STORE``, else SQLite at ``$ACP_SESSION_DB``, else
    ``<name>-sessions.db`` in the working directory (see ``sessions.open_default_store``).
    Several replicas: ``$ACP_REDIS_URL`` and ``$ACP_REPLICA_ID`` (see redis_router.py).
    """
    manifest = getattr(agent_cls, "_acp_manifest", {}) or {}
    if "auth" not in options:  # first: an agent that refuses to start creates no store
        options["auth"] = Auth.from_manifest(manifest, allow_missing=allow_missing_auth)
    name = str(manifest.get("name", "agent"))
    if store is None:
        store = open_default_store(name, f"{name}-sessions.db")

    async def document() -> dict[str, Any]:
        rt = agent_cls()
        info: dict[str, Any] = await rt._rt_agent_info(None, None)
        info["endpoints"] = {"acp": ENDPOINT, "health": "/health", "websocket": ENDPOINT}
        advertise(rt, info.get("capabilities"))  # the session methods the core serves
        return info

    replica = os.environ.get("ACP_REPLICA_ID") or None
    redis_url = os.environ.get("ACP_REDIS_URL")
    if redis_url and "router" not in options:
        # needs redis (the project's `redis` extra); imported by name: shipped with HTTP only
        router_module = importlib.import_module(".redis_router", __package__)
        options["router"] = router_module.RedisRouter(redis_url, replica or uuid.uuid4().hex[:12])
    options.setdefault("replica", replica)
    options.setdefault("well_known", document)
    options.setdefault("max_body", max_message_size)
    router = options.get("router")
    owner = replica or (router.replica if router is not None else None)
    return create_app(agent_factory(agent_cls, store, max_message_size, owner), **options)


def serve_http(
    agent_cls: type[AgentRuntime],
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    keep_alive: float = DEFAULT_KEEP_ALIVE,
    **options: Any,
) -> None:
    """The generated agent's ``--transport http`` entry point (called by ``serve.run_agent``).

    A missing or empty auth secret stops it here: one line on stderr naming the variable,
    exit status 2 (see auth.py)."""
    certfile = options.pop("certfile", None)
    keyfile = options.pop("keyfile", None)
    try:
        app = app_for(agent_cls, **options)
    except MissingSecret as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    run_server(
        app,
        host,
        port,
        header_timeout=header_timeout,
        keep_alive=keep_alive,
        max_message_size=int(options.get("max_message_size", DEFAULT_MAX_MESSAGE_SIZE)),
        certfile=certfile,
        keyfile=keyfile,
        shutdown_grace=float(options.get("shutdown_grace", SHUTDOWN_GRACE)),
    )


def server_config(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    keep_alive: float = DEFAULT_KEEP_ALIVE,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    certfile: str | None = None,
    keyfile: str | None = None,
) -> Any:
    """Hypercorn's configuration for a generated agent (chosen by measurement: bench/README.md),
    with every server-level limit mapped onto it in this one place.

    Cleartext: HTTP/1.1, HTTP/2 with prior knowledge (h2c) and the h2c Upgrade; with a
    certificate: TLS with ALPN offering h2 and http/1.1.  WebSocket over HTTP/1.1 (and RFC 8441
    over HTTP/2).

    Limits: Hypercorn runs one timer per connection from the moment it opens (and again
    from each completed response) until a request's headers are complete, and closes the
    connection when it fires; data arriving does not reset it.  That timer is both the
    keep-alive and the header deadline, so it is set to the smaller of the two: a socket
    trickling header lines is closed like a silent one.  ``websocket_max_message_size``
    lets a WebSocket frame a little over the message limit through so the runtime answers
    it with an error.  The error log goes through ``acp.runtime.http.server`` with secrets
    redacted; no access log.
    """
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.keep_alive_timeout = min(keep_alive, header_timeout)
    config.websocket_max_message_size = max_message_size + WS_FRAME_MARGIN
    server_log = logging.getLogger("acp.runtime.http.server")
    if not any(isinstance(f, RedactingFilter) for f in server_log.filters):
        server_log.addFilter(RedactingFilter())
    config.errorlog = server_log
    if certfile is not None:
        config.certfile = certfile
        config.keyfile = keyfile or certfile
    return config


def run_server(app: Any, host: str = "127.0.0.1", port: int = 8000, **settings: Any) -> None:
    """Serve ``app`` on Hypercorn until SIGINT/SIGTERM; ``settings``: the limits and the
    certificate of ``server_config``.

    The listening socket is bound first so that ``listening on URL`` (printed on stderr once)
    names the real port, also when ``port`` is 0.  After SIGTERM/SIGINT the process exits
    within ``shutdown_grace`` seconds (default 10): requests get a third of it to finish,
    then the connections, the router and the store are closed; past the grace it exits at
    once (status 1, one line on stderr), whatever the store or Redis does.
    """
    import socket

    from hypercorn.asyncio import serve as hypercorn_serve

    grace = float(settings.pop("shutdown_grace", SHUTDOWN_GRACE))
    config = server_config(host, port, **settings)
    config.graceful_timeout = min(config.graceful_timeout, grace / 3)
    certfile = settings.get("certfile")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=config.backlog)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    bound = sock.getsockname()[1]
    config.bind = [f"fd://{sock.detach()}"]  # Hypercorn owns the socket from here
    shown = f"[{host}]" if ":" in host else host
    scheme = "https" if certfile is not None else "http"
    protocols = "HTTP/2 via ALPN, HTTP/1.1" if certfile is not None else "h2c, HTTP/1.1"
    print(
        f"listening on {scheme}://{shown}:{bound}{ENDPOINT} ({protocols})",
        file=sys.stderr,
        flush=True,
    )
    try:
        _run_loop(hypercorn_serve(app, config, shutdown_trigger=_on_signal(grace)))
    except KeyboardInterrupt:
        pass


def _on_signal(grace: float) -> Callable[[], Awaitable[None]]:
    """Hypercorn's shutdown trigger: returns on SIGTERM or SIGINT, and from then on a
    watchdog thread ends the process if the shutdown takes longer than ``grace``."""

    async def trigger() -> None:
        import signal
        import threading

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        watchdog = threading.Timer(grace, _overdue, (grace,))
        watchdog.daemon = True
        watchdog.start()

    return trigger


def _overdue(grace: float) -> None:
    print(f"shutdown took longer than {grace:g} s: exiting now", file=sys.stderr, flush=True)
    os._exit(1)


def _run_loop(main: Any) -> None:
    """uvloop's event loop where it is installed (the project depends on it on Linux and
    macOS: less CPU per request, bench/README.md), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)
