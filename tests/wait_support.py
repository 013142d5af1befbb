"""Waiting on the event itself instead of sleeping: a test's sink calls `arrived()` when
frames come in, and `until(what, pred)` wakes on each arrival to re-check `pred`, failing
with `what` when the deadline passes (no guessed delay before an assertion); `Updates` is
an SDK client's sink that does so; `ListeningServer` is a uvicorn server that says when
it listens."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import uvicorn


class Arrivals:
    def __init__(self) -> None:
        self._event = asyncio.Event()

    def arrived(self) -> None:
        self._event.set()

    async def until(self, what: str, pred: Callable[[], object], timeout: float = 10.0) -> None:
        try:
            async with asyncio.timeout(timeout):
                while not pred():
                    self._event.clear()
                    await self._event.wait()
        except TimeoutError:
            raise AssertionError(f"not within {timeout} s: {what}") from None


class Updates:
    """An SDK client's `session_update` sink: the updates in arrival order; `until(what,
    pred)` wakes on each one to re-check `pred`."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.arrivals = Arrivals()

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        self.updates.append(update)
        self.arrivals.arrived()

    async def until(self, what: str, pred: Callable[[], object], timeout: float = 10.0) -> None:
        await self.arrivals.until(what, pred, timeout)


class ListeningServer(uvicorn.Server):
    """A uvicorn server (run in a thread) that sets `listening` once it listens: wait on
    that instead of polling `started`."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = threading.Event()

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.listening.set()
