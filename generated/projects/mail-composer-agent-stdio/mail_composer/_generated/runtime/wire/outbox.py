"""A connection's outgoing frames: queued in wire order, handed to the transport's sink
by one writer task (so every ``session/update`` of a turn leaves before its answer), or
at once when the transport can write without waiting (``sink_now``; with ``eager``, every frame).

``Outbox(sink, on_failure)``: ``put(frame, session_id)`` queues one frame; ``drain()``
waits while too much is queued (backpressure for streaming handlers); ``flush()`` waits
until everything queued so far has been handed to the sink; ``send_now()`` tries the
transport's immediate write; ``stop()`` ends the writer task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

log = logging.getLogger("acp.runtime")

Batch = list[tuple[bytes, str | None]]
Sink = Callable[[Batch], Awaitable[None]]

HIGH_WATER = 4 * 1024 * 1024  # queued bytes over which drain() waits
NOW_BYTES = 64 * 1024  # larger output goes through the writer task (it waits for room)


class Outbox:
    __slots__ = (
        "_drained",
        "_on_failure",
        "_queued",
        "_queued_bytes",
        "_sink",
        "_sinking",
        "_wake",
        "_writer",
        "closed",
        "eager",
        "settle",
        "sink_now",
    )

    def __init__(self, sink: Sink, on_failure: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._sink = sink
        self._on_failure = on_failure  # the transport failed: the connection ends
        self._queued: Batch = []
        self._queued_bytes = 0
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._writer: asyncio.Task[None] | None = None
        self._sinking = False  # the writer task is inside the sink
        self.closed = False  # set by the connection once it has ended
        # a transport that can write a small batch at once, without waiting (stdio: its
        # pipe's buffer is empty) sets this: an answer then leaves in the pass of the
        # event loop that made it, with what was queued before it (False: not now)
        self.sink_now: Callable[[Batch], bool] | None = None
        # every frame offered to ``sink_now`` as it is put, when nothing is queued before
        # it (HTTP: its sink_now only queues an SSE event, which the stream's reader takes
        # with whatever else is queued when it runs): no writer task on the common path
        self.eager = False
        # what the writer task awaits before it takes the queue (stdio: the session
        # store's pending group commit, so its turns' answers join their updates)
        self.settle: Callable[[], Awaitable[None]] | None = None

    def put(self, frame: bytes, session_id: str | None) -> None:
        if self.eager and not self._queued and not self._sinking:
            now = self.sink_now
            if now is not None and now([(frame, session_id)]):
                return
        self._queued.append((frame, session_id))
        self._queued_bytes += len(frame)
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write_loop())
        self._wake.set()
        if self._queued_bytes > HIGH_WATER:
            self._drained.clear()

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            if self.settle is not None:
                await self.settle()
            self._wake.clear()
            while self._queued:
                batch = self._queued
                self._queued = []
                self._queued_bytes = 0
                self._sinking = True
                try:
                    await self._sink(batch)
                except Exception as exc:  # noqa: BLE001 - the peer went away: nothing more can be sent
                    log.warning("transport write failed: %s", type(exc).__name__)
                    self._queued = []
                    self._drained.set()
                    asyncio.get_running_loop().create_task(self._on_failure())
                    return
                finally:
                    self._sinking = False
            self._drained.set()

    async def drain(self) -> None:
        """Wait while too much output is queued."""
        if not self._drained.is_set():
            await self._drained.wait()

    async def flush(self) -> None:
        """Wait until everything queued so far has been handed to the sink."""
        while (self._queued or self._wake.is_set()) and not self.closed:
            if self._writer is not None and self._writer.done():
                return  # the writer ended (the transport failed): nothing more goes out
            await asyncio.sleep(0)

    def send_now(self, alone: bool) -> None:
        """Hand what is queued to ``sink_now`` when the writer task is not in the sink (so
        the order holds) and ``alone`` (no other request in flight: their answers, likely
        in this pass too, then share the writer task's one write); what it declines, the
        writer task sends."""
        now = self.sink_now
        if now is None or self._sinking or not self._queued or self._queued_bytes > NOW_BYTES:
            return
        if alone and now(self._queued):
            self._queued = []
            self._queued_bytes = 0

    def stop(self) -> asyncio.Task[None] | None:
        """Cancel the writer task; returns it (to be awaited) when there was one."""
        if self._writer is not None:
            self._writer.cancel()
        return self._writer
