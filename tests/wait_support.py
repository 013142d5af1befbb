"""Waiting on the event itself instead of sleeping: a test's sink calls `arrived()` when
frames come in, and `until(what, pred)` wakes on each arrival to re-check `pred`, failing
with `what` when the deadline passes (no guessed delay before an assertion)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


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
