"""The agent's outgoing SSE streams over HTTP: a bounded buffer and its replay window.

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
~23 MiB as the windows filled).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

log = logging.getLogger("acp.runtime.http")

DEFAULT_STREAM_BUFFER = 8 * 1024 * 1024
DEFAULT_STALL_TIMEOUT = 60.0
DEFAULT_REPLAY_WINDOW = 4 * 1024 * 1024


EVENT_OVERHEAD = 32  # an event's bytes beyond its message: ``id: <n>``, ``data: ``, newlines


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
        # readers waiting for data: plain futures woken by put/rewind/close (no Event, no
        # wait_for task per wait: a reader waits twice per prompt)
        self._waiters: list[asyncio.Future[None]] = []
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
        self.put_now(message)

    def has_room(self, size: int) -> bool:
        """Whether ``size`` more bytes can be put without waiting (:meth:`put_now`)."""
        return self._bytes + size <= self._limit

    def put_now(self, message: bytes) -> None:
        """Queue one event at once, room or not (the caller checked :meth:`has_room`)."""
        if self.closed:
            return
        self._seq += 1
        event = b"id: %d\ndata: %b\n\n" % (self._seq, message)
        self._frames.append((self._seq, event))
        self._bytes += len(event)
        if self._waiters:
            self._wake()

    def _wake(self) -> None:
        waiters = self._waiters
        self._waiters = []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def take_all(self) -> list[tuple[int, bytes]]:
        out = list(self._frames)
        self._frames.clear()
        self._bytes = 0
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
            self._wake()

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for an event (or the close): whether there is one."""
        if self._frames or self.closed:
            return True
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append(fut)
        timer = loop.call_later(timeout, _expire, fut)
        try:
            await fut
        finally:
            timer.cancel()
            if fut in self._waiters:  # timed out or cancelled (a wake unlists it)
                self._waiters.remove(fut)
        return bool(self._frames) or self.closed

    def close(self) -> None:
        self.closed = True
        self._wake()
        self._room.set()


def _expire(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
