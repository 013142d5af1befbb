"""One ACP connection over HTTP, agent side: a runtime core and the streams its frames
are routed to (one SSE stream for the connection and one per session, or one WebSocket).

Routing: answers to the requests whose route opens a session (session/new, load, resume)
go to the connection stream; answers to session-scoped requests and agent messages whose
params carry a known ``sessionId`` go to that session's stream; the rest to the connection
stream.  A session becomes known when the core says, with the answer of a request that
opens one, that it did (``Connection.effects_of``): no answer is parsed to find out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson

from ..wire.errors import RpcError
from ..wire.inbox import Effect
from ..wire.routes import Route
from .http_streams import EVENT_OVERHEAD, OutStream, Stall

log = logging.getLogger("acp.runtime.http")

INITIALIZE_TIMEOUT = 30.0
RESPONSE_PREFIX = b'{"jsonrpc":"2.0","id":'  # how jsonrpc.py writes responses (and requests)

Sink = Callable[[list[tuple[bytes, str | None]]], Awaitable[None]]


class CoreConnection(Protocol):
    max_message_size: int
    admit_entry: Callable[[dict[str, Any]], RpcError | None] | None  # per batch entry
    session_effects: dict[int, tuple[bytes, tuple[Effect, ...]]] | None
    transport: str  # what its requests' spans name (observe)

    def sink_each(self, now: Callable[[list[tuple[bytes, str | None]]], bool]) -> None: ...
    def feed(self, frame: bytes | str) -> None: ...
    def feed_message(self, msg: Any, frame: bytes | str) -> None: ...
    def route(self, method: str) -> Route | None: ...
    def effects_of(self, frame: bytes) -> tuple[Effect, ...]: ...
    def too_large(self, size: int) -> None: ...
    def reject(self, rid: Any, err: RpcError) -> None: ...
    async def close(self) -> None: ...


ConnectionFactory = Callable[[Sink], CoreConnection]


class ConnectionHost(Protocol):
    """What a connection needs of the server that holds it (http_app.AcpHttpServer)."""

    factory: ConnectionFactory
    stream_buffer: int
    stall_timeout: float
    replay_window: int
    max_sessions: int

    async def remove(self, cid: str) -> None: ...


class HttpConnection:
    """One ACP connection: a runtime core plus its SSE streams (or one WebSocket)."""

    def __init__(
        self,
        server: ConnectionHost,
        ws_send: Callable[[bytes], Awaitable[None]] | None = None,
        peer: str | None = None,
    ) -> None:
        self.id = uuid.uuid4().hex
        self.server = server
        self.peer = peer  # the client's address (the per-address cap)
        self.ws_send = ws_send
        self.core = server.factory(self._sink)
        self.core.session_effects = {}  # tell us which answers open a session
        self.core.transport = "websocket" if ws_send is not None else "http"
        if ws_send is not None:
            self.core.admit_entry = self.admit  # a batch's session/new entries count too
        else:
            self.core.sink_each(self._sink_now)  # each frame queued as it is sent
        self.main = OutStream(server.stream_buffer, server.stall_timeout, server.replay_window)
        self.sessions: dict[str, OutStream] = {}
        self.waiters: dict[Any, asyncio.Future[bytes]] = {}
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
        if not self.opens(msg.get("method")) or type(msg.get("id")) not in (int, str):
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

    def opens(self, method: Any) -> bool:
        """Whether `method`'s route opens a session (session/new, load, resume)."""
        route = self.core.route(method) if type(method) is str else None
        return route is not None and route.effect == "opens"

    def _opened(self, effects: tuple[Effect, ...]) -> None:
        """An answer that opened (or failed to open) sessions: their streams exist from now
        on (a failed load or resume opens nothing and counts for nothing)."""
        for rid, kind, sid in effects:
            if type(rid) in (int, str):
                self.opening.pop(rid, None)
            if kind != "opens" or sid is None:
                continue
            if self.ws_send is not None:
                self.ws_sessions.add(sid)
            else:
                self.session_stream(sid)

    def session_stream(self, sid: str) -> OutStream:
        s = self.sessions.get(sid)
        if s is None:
            s = self.sessions[sid] = OutStream(
                self.server.stream_buffer, self.server.stall_timeout, self.server.replay_window
            )
        return s

    def _target(self, frame: bytes, sid: str | None) -> OutStream | None:
        """The stream `frame` goes to (None: the initialize answer, which its POST returns);
        the sessions an answer opened have their streams from here on."""
        core = self.core
        if core.session_effects:
            self._opened(core.effects_of(frame))
        if self.waiters and self._initialized(frame):
            return None
        target = self.sessions.get(sid) if sid is not None else None
        return target or self.main

    def _sink_now(self, batch: list[tuple[bytes, str | None]]) -> bool:
        """The sink's work done in the caller's pass (``Connection.sink_each``) when no
        stream it writes to could make it wait (each has room for the whole batch): a
        frame then reaches its SSE stream without a hop through the writer task."""
        size = sum(len(frame) for frame, _ in batch) + EVENT_OVERHEAD * len(batch)
        if not self.main.has_room(size):
            return False
        for _frame, sid in batch:
            target = self.sessions.get(sid) if sid is not None else None
            if target is not None and not target.has_room(size):
                return False
        for frame, sid in batch:
            target = self._target(frame, sid)
            if target is not None:
                target.put_now(frame)
        return True

    async def _sink(self, batch: list[tuple[bytes, str | None]]) -> None:
        core = self.core
        if self.ws_send is not None:
            for frame, _sid in batch:
                if core.session_effects:
                    self._opened(core.effects_of(frame))
                await self.ws_send(frame)
            return
        for frame, sid in batch:
            target = self._target(frame, sid)
            if target is None:
                continue
            try:
                await target.put(frame)
            except Stall:
                log.warning(
                    "connection %s: stream buffer full with no reader; ending the connection",
                    self.id[:8],
                )
                asyncio.get_running_loop().create_task(self.server.remove(self.id))
                raise

    def _initialized(self, frame: bytes) -> bool:
        """The answer to `initialize`, which its POST returns (not a stream)."""
        if not frame.startswith(RESPONSE_PREFIX):
            return False
        try:
            msg = orjson.loads(frame)
        except orjson.JSONDecodeError:
            return False
        if type(msg) is not dict or "method" in msg:
            return False
        rid = msg.get("id")
        fut = self.waiters.pop(rid, None) if type(rid) in (int, str) else None
        if fut is None:
            return False
        if not fut.done():
            fut.set_result(frame)
        return True

    async def initialize(self, msg: dict[str, Any], body: bytes, rid: Any) -> bytes:
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.waiters[rid] = fut
        self.core.feed_message(msg, body)
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
