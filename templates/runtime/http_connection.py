"""One ACP connection over HTTP, agent side: a runtime core and the streams its frames
are routed to (one SSE stream for the connection and one per session, or one WebSocket).

Routing: responses to ``session/new`` (and to load/resume before the session is known on
the connection) go to the connection stream; responses to session-scoped requests and
agent messages whose params carry a known ``sessionId`` go to that session's stream; the
rest to the connection stream.  A session becomes known when a result carries its
``sessionId`` or a ``session/load``/``session/resume`` for it succeeds.
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

from .errors import RpcError
from .http_streams import OutStream, Stall
from .http_wire import OPENING

log = logging.getLogger("acp.runtime.http")

INITIALIZE_TIMEOUT = 30.0
RESPONSE_PREFIX = b'{"jsonrpc":"2.0","id":'  # how jsonrpc.py writes responses (and requests)

Sink = Callable[[list[tuple[bytes, str | None]]], Awaitable[None]]


class CoreConnection(Protocol):
    max_message_size: int
    admit_entry: Callable[[dict[str, Any]], RpcError | None] | None  # per batch entry

    def feed(self, frame: bytes | str) -> None: ...
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
            or method not in OPENING
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
                if self.opening and frame.startswith(RESPONSE_PREFIX):
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
