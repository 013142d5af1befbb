"""Each session's turn slot and the prompts waiting for it, in arrival order.

One turn of a session runs (and is saved) at a time. A prompt that arrives while the
slot is taken waits in the session's queue; when the holder's task ends, the slot goes
to the first waiter (one wake, no scan): queueing and waking cost constant time, and
prompts are served in the order they arrived. Past ``limit`` waiting prompts a new one
is answered at once with a transient error (``SessionBusy``), never dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any

from .. import observe
from ..wire.errors import RpcError
from ..wire.fields import env_option

SESSION_BUSY = -32003  # implementation-defined (JSON-RPC server error range)
MAX_QUEUED_PROMPTS = 256  # prompts waiting on one session (ACP_MAX_QUEUED_PROMPTS)
BUSY_RETRY_AFTER = 1.0  # seconds a refused client is told to wait


def queue_limit() -> int:
    """``$ACP_MAX_QUEUED_PROMPTS`` when it is a whole number >= 0, else the default."""
    return int(env_option("ACP_MAX_QUEUED_PROMPTS", MAX_QUEUED_PROMPTS))


def session_busy(sid: str, limit: int) -> RpcError:
    return RpcError(
        SESSION_BUSY,
        f"session {sid} already has {limit} prompts waiting for its turn; retry later",
        {
            "name": "SessionBusy",
            "transient": True,
            "retry_after": BUSY_RETRY_AFTER,
            "details": {"sessionId": sid, "queued": limit},
        },
    )


_Waiter = tuple["asyncio.Future[None]", "asyncio.Task[Any]"]


class TurnSlots:
    """Per connection: the task holding each session's turn (done once the turn ended
    and was saved) and the prompts waiting for it."""

    __slots__ = ("holders", "limit", "waiting")

    def __init__(self, limit: int | None = None) -> None:
        self.holders: dict[str, asyncio.Task[Any]] = {}
        self.waiting: dict[str, deque[_Waiter]] = {}
        self.limit = queue_limit() if limit is None else limit

    def busy(self, sid: str) -> bool:
        """A turn holds the slot, or prompts wait for it (between a holder's end and its
        done callback, which hands the slot on, a newcomer must not jump the line)."""
        holder = self.holders.get(sid)
        return (holder is not None and not holder.done()) or sid in self.waiting

    def hold(self, sid: str, task: asyncio.Task[Any]) -> None:
        """`task` holds the slot until it ends; then the next waiter gets it."""
        self.holders[sid] = task
        task.add_done_callback(lambda t: self._released(sid, t))

    async def wait(self, sid: str) -> None:
        """Wait in line for the slot; returns holding it (refused past the limit)."""
        queue = self.waiting.get(sid)
        if queue is None:
            queue = self.waiting[sid] = deque()
        if len(queue) >= self.limit:
            raise session_busy(sid, self.limit)
        task = asyncio.current_task()
        assert task is not None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (fut, task)
        queue.append(entry)
        try:
            with observe.queued():
                await fut
        except asyncio.CancelledError:
            if not fut.done() or fut.cancelled():
                # left the line before its turn (`$/cancel_request`, the connection ending)
                # the slot, if it was handed over, passes on when this task ends
                with contextlib.suppress(ValueError):  # linear, only for one giving up
                    queue.remove(entry)
            raise

    def _released(self, sid: str, task: asyncio.Task[Any]) -> None:
        if self.holders.get(sid) is not task:
            return  # the slot moved on (a v2 turn's save took it over)
        queue = self.waiting.get(sid)
        while queue:
            fut, nxt = queue.popleft()
            if fut.done() or nxt.done():
                continue  # gave up waiting
            self.hold(sid, nxt)
            fut.set_result(None)
            return
        self.waiting.pop(sid, None)


__all__ = [
    "MAX_QUEUED_PROMPTS",
    "SESSION_BUSY",
    "TurnSlots",
    "queue_limit",
    "session_busy",
]
