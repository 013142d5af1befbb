"""A connection's incoming notifications: handled in order per session (one queue and
one worker task per ``sessionId``), or at once for the immediate ones (a cancel must not
wait behind the session's other notifications).  A handler's failure is logged, never
answered: a notification has no one to answer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .errors import METHOD_NOT_FOUND, RpcError
from .frames import session_of
from .logsafe import RateLimitedLog

log = logging.getLogger("acp.runtime")
_limited = RateLimitedLog(log)

NotificationHandler = Callable[[str, Any], Awaitable[None]]
# what an answer did to a session: (request id, "opens" | "closes", the session or None)
Effect = tuple[Any, str, str | None]


class BatchReplies:
    """The responses of one JSON-RPC batch, collected until every request answered."""

    __slots__ = ("effects", "replies", "sealed", "waiting")

    def __init__(self) -> None:
        self.replies: list[bytes] = []
        self.effects: list[Effect] = []
        self.waiting: set[Any] = set()  # ids of its requests still running
        self.sealed = False  # every entry dispatched


class NotificationQueues:
    __slots__ = ("_handler", "_immediate", "_queues", "_workers")

    def __init__(self, handler: NotificationHandler, immediate: frozenset[str]) -> None:
        self._handler = handler
        self._immediate = immediate  # handled at once, before the next frame is read
        self._queues: dict[str | None, asyncio.Queue[tuple[str, Any]]] = {}
        self._workers: dict[str | None, asyncio.Task[None]] = {}

    def put(self, method: str, params: Any) -> None:
        if method in self._immediate:
            asyncio.get_running_loop().create_task(self._handle(method, params))
            return
        key = session_of(params)
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = asyncio.Queue()
            self._workers[key] = asyncio.get_running_loop().create_task(self._work(q))
        q.put_nowait((method, params))

    async def _work(self, q: asyncio.Queue[tuple[str, Any]]) -> None:
        while True:
            method, params = await q.get()
            await self._handle(method, params)

    async def _handle(self, method: str, params: Any) -> None:
        try:
            await self._handler(method, params)
        except asyncio.CancelledError:
            raise
        except RpcError as exc:  # the peer's notification was refused: there is no one to tell
            if exc.code != METHOD_NOT_FOUND:
                _limited.warning("notification-refused", "a notification was refused: %s", exc.code)
        except Exception as exc:
            log.error("notification %s failed: %s", method, type(exc).__name__, exc_info=exc)

    def stop(self) -> list[asyncio.Task[None]]:
        """Cancel the workers; returns them (to be awaited)."""
        workers = list(self._workers.values())
        for w in workers:
            w.cancel()
        return workers
