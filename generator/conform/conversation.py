"""The kit's side of one connection, written on raw frames: ids, answers, what arrived.

The kit plays a minimal client that declares no capability: it sends requests with its
own ids, finds their responses by id (exactly: `1` is not `"1"`), keeps every message
the peer sent in arrival order, and answers the peer's requests itself (a permission
with the first allowing option, or `cancelled` once it cancelled that session's turn;
anything else -32601).  Nothing here judges; the checks and the observers do.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from .transcript import Frame, Transcript


class Peer(Protocol):
    transcript: Transcript

    async def send(self, data: bytes) -> None: ...

    def alive(self) -> bool: ...


class Unanswered(Exception):
    """A request the peer did not answer in time."""


@dataclass
class Seen:
    """One message the peer sent (a batch's entries are one each)."""

    index: int
    frame: Frame
    msg: dict[str, Any]
    batch: bool = False


@dataclass
class Conversation:
    peer: Peer
    timeout: float = 10.0
    seen: list[Seen] = field(default_factory=list)
    requests: dict[Any, str] = field(default_factory=dict)  # our ids -> method
    cancelled: set[str] = field(default_factory=set)  # sessions whose turn we cancelled
    next_id: int = 1
    cancel_sent_at: float | None = None  # when the kit's session/cancel went out
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    # ---- the peer's frames ----------------------------------------------------------------
    def feed(self, frame: Frame) -> None:
        value = frame.message()
        if type(value) is dict:
            self._add(frame, value, False)
        elif type(value) is list:
            for item in value:
                if type(item) is dict:
                    self._add(frame, item, True)
        self._changed.set()

    def reject(self, rid: Any, frame: Frame) -> None:
        """A request the transport refused (an HTTP status with an error body): its
        answer, under the id the kit sent (the body's own id is the transport's)."""
        body = frame.message()
        error = body.get("error") if type(body) is dict else None
        msg = {
            "jsonrpc": "2.0",
            "id": rid,
            "error": error
            if type(error) is dict
            else {"code": -32600, "message": frame.text[:200]},
        }
        self.seen.append(Seen(len(self.seen), frame, msg, False))
        self._changed.set()

    def _add(self, frame: Frame, msg: dict[str, Any], batch: bool) -> None:
        self.seen.append(Seen(len(self.seen), frame, msg, batch))
        if "method" in msg and "id" in msg:
            asyncio.get_running_loop().create_task(self._answer(msg))

    async def _answer(self, msg: dict[str, Any]) -> None:
        method = msg.get("method")
        raw = msg.get("params")
        params: dict[str, Any] = raw if type(raw) is dict else {}
        if method == "session/request_permission":
            sid = params.get("sessionId")
            options = [o for o in params.get("options") or [] if type(o) is dict]
            chosen = next(
                (o for o in options if str(o.get("kind", "")).startswith("allow")),
                options[0] if options else None,
            )
            if sid in self.cancelled or chosen is None:
                outcome: dict[str, Any] = {"outcome": "cancelled"}
            else:
                outcome = {"outcome": "selected", "optionId": chosen.get("optionId")}
            reply: dict[str, Any] = {
                "jsonrpc": "2.0",
                "id": msg["id"],
                "result": {"outcome": outcome},
            }
        else:
            reply = {
                "jsonrpc": "2.0",
                "id": msg["id"],
                "error": {"code": -32601, "message": "Method not found"},
            }
        await self.send_raw(orjson.dumps(reply))

    # ---- what the kit sends ------------------------------------------------------------------
    async def send_raw(self, data: bytes) -> None:
        await self.peer.send(data)

    def new_id(self) -> int:
        rid = self.next_id
        self.next_id += 1
        return rid

    async def send_request(self, method: str, params: Any, rid: Any = None) -> Any:
        rid = self.new_id() if rid is None else rid
        self.requests[rid] = method
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        await self.send_raw(orjson.dumps(msg))
        return rid

    async def request(
        self, method: str, params: Any = None, *, rid: Any = None, timeout: float | None = None
    ) -> dict[str, Any]:
        """Send a request and wait for its response (matched by id, exactly)."""
        rid = await self.send_request(method, params, rid)
        return await self.response(rid, method, timeout=timeout)

    async def response(
        self, rid: Any, method: str = "", *, timeout: float | None = None
    ) -> dict[str, Any]:
        found = await self.wait_for(
            lambda s: is_response(s.msg) and same_id(s.msg.get("id"), rid), timeout
        )
        if found is None:
            raise Unanswered(
                f"no response to {method or 'the request'} (id {rid!r}) within {timeout or self.timeout:g}s"
            )
        return found.msg

    async def notify(self, method: str, params: Any = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        await self.send_raw(orjson.dumps(msg))

    # ---- waiting --------------------------------------------------------------------------------
    async def wait_for(
        self, match: Any, timeout: float | None = None, since: int = 0
    ) -> Seen | None:
        """The first message from `since` on that `match`es, waiting up to `timeout`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.timeout if timeout is None else timeout)
        checked = since
        while True:
            for seen in self.seen[checked:]:
                if match(seen):
                    return seen
            checked = max(checked, len(self.seen))
            left = deadline - loop.time()
            if left <= 0:
                return None
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return None

    async def quiet(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def mark(self) -> int:
        return len(self.seen)

    def updates(self, since: int = 0, until: int | None = None) -> list[dict[str, Any]]:
        """`session/update` params from `since` to `until` (indexes of `seen`)."""
        return [
            s.msg.get("params") or {}
            for s in self.seen[since:until]
            if s.msg.get("method") == "session/update" and type(s.msg.get("params")) is dict
        ]

    def index_of(self, msg: dict[str, Any]) -> int:
        return next(s.index for s in self.seen if s.msg is msg)


def is_response(msg: dict[str, Any]) -> bool:
    return "method" not in msg and ("result" in msg or "error" in msg or "id" in msg)


def same_id(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b
