"""Transport-agnostic JSON-RPC 2.0 connection over asyncio.

The seam a transport plugs into (stdio, HTTP/SSE, WebSocket):

* **receive**: the transport calls ``connection.feed(frame)`` with one complete frame
  (``bytes``: one stdio line, one POST body, one WebSocket message), or
  ``feed_message(msg, frame)`` when it parsed it already.  Frames over
  ``max_message_size`` are refused by the transport with ``connection.too_large()``.
* **send**: the transport supplies ``sink(batch)``, an ``async`` callable that gets a list
  of ``(frame_bytes, session_id | None)`` in wire order (outbox.py): ``session_id`` is the
  ACP session a message belongs to (``None``: the connection-scoped stream), so an HTTP
  transport can route it to that session's SSE stream.
* **end**: the transport calls ``await connection.close()`` at EOF / disconnect; work in
  flight is cancelled and pending outgoing requests fail.

Requests run concurrently (one task each, routed by the connection's request handler);
notifications are handled in order per session (inbox.py).  ``$/cancel_request`` cancels
one in-flight request, which then answers -32800.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from .. import observe
from .errors import (
    INVALID_REQUEST,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    ConnectionClosed,
    RpcError,
    internal_error,
    invalid_params,
)
from .frames import MAX_DEPTH, dumps, session_of, too_deep
from .inbox import BatchReplies, Effect, NotificationHandler, NotificationQueues
from .logsafe import RateLimitedLog, forget_secrets
from .outbox import Batch, Outbox
from .requests import RequestContext, answer_route
from .routes import Route

if TYPE_CHECKING:
    from .wirecheck import ConnectionCheck, WireCheck

log = logging.getLogger("acp.runtime")
_limited = RateLimitedLog(log)

Sink = Callable[[Batch], Awaitable[None]]
RequestHandler = Callable[[str, Any, "RequestContext"], Awaitable[Any]]

DEFAULT_MAX_MESSAGE_SIZE = 50 * 1024 * 1024


class Connection:
    def __init__(
        self,
        sink: Sink,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        immediate_notifications: frozenset[str] = frozenset(),
        wire_check: WireCheck | None = None,
    ) -> None:
        self._on_request = on_request
        self.max_message_size = max_message_size
        self._outbox = Outbox(sink, self.close)
        self._incoming: dict[Any, asyncio.Task[None]] = {}
        self._cancelled_ids: set[Any] = set()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._pending_session: dict[int, str | None] = {}
        self._next_id = 0
        # notifications in order per session (inbox.py)
        self._notifications = NotificationQueues(on_notification, immediate_notifications)
        self._closed = False
        self._close_reason: ConnectionClosed | None = None
        self.closed = asyncio.Event()
        self._wire: ConnectionCheck | None = None  # ACP_WIRE_CHECK: frames schema-checked
        if wire_check is not None or os.environ.get("ACP_WIRE_CHECK", "").strip():
            from . import wirecheck  # in that test mode only (not on an agent's start-up)

            check = wire_check or wirecheck.for_handlers(on_request, on_notification)
            self._wire = wirecheck.ConnectionCheck(check) if check is not None else None
        # JSON-RPC batches: the batch an entry being dispatched belongs to, and the batch
        # each request of one still running answers into
        self._collecting: BatchReplies | None = None
        self._batched: dict[Any, tuple[BatchReplies, asyncio.Task[None]]] = {}
        # a transport's admission check for one batch entry (WebSocket: session limits)
        self.admit_entry: Callable[[dict[str, Any]], RpcError | None] | None = None
        # the route of a method (its scope and session effect), given by the layer that
        # routes this connection's requests (SessionConnection: the runtime's router)
        self.routes: Callable[[str], Route] | None = None
        # a transport that routes by session (HTTP) sets a dict here: each queued answer
        # that opened or closed a session, by the frame's identity, until it reads it
        self.session_effects: dict[int, tuple[bytes, tuple[Effect, ...]]] | None = None

    def route(self, method: str) -> Route | None:
        """The route of `method` (None: this connection has no route table)."""
        return self.routes(method) if self.routes is not None else None

    def effects_of(self, frame: bytes) -> tuple[Effect, ...]:
        """What the answer `frame` did to sessions (the transport asks as it sends it)."""
        found = self.session_effects.pop(id(frame), None) if self.session_effects else None
        return found[1] if found is not None and found[0] is frame else ()

    def _mark(self, frame: bytes, effects: tuple[Effect, ...]) -> None:
        if self.session_effects is not None and effects:
            self.session_effects[id(frame)] = (frame, effects)

    # ---- outgoing (outbox.py: the queue and its writer task) ----------------------
    @property
    def sink_now(self) -> Callable[[Batch], bool] | None:
        """The transport's immediate write of a small batch (see ``Outbox.sink_now``)."""
        return self._outbox.sink_now

    @sink_now.setter
    def sink_now(self, now: Callable[[Batch], bool] | None) -> None:
        self._outbox.sink_now = now

    def sink_each(self, now: Callable[[Batch], bool]) -> None:
        """``sink_now`` for every frame, not only answers (HTTP: it queues SSE events)."""
        self._outbox.sink_now, self._outbox.eager = now, True

    @property
    def settle(self) -> Callable[[], Awaitable[None]] | None:
        """What the writer awaits before it takes the queue (see ``Outbox.settle``)."""
        return self._outbox.settle

    @settle.setter
    def settle(self, settle: Callable[[], Awaitable[None]] | None) -> None:
        self._outbox.settle = settle

    def _enqueue(self, frame: bytes, session_id: str | None, *, checked: bool = False) -> None:
        if self._closed:
            return
        if self._wire is not None and not checked:
            self._wire.sent(frame)
        self._outbox.put(frame, session_id)

    async def drain(self) -> None:
        """Wait while too much output is queued (backpressure for streaming handlers)."""
        await self._outbox.drain()

    async def flush(self) -> None:
        """Wait until everything queued so far has been handed to the sink."""
        await self._outbox.flush()

    def send_raw(self, frame: bytes, session_id: str | None = None) -> None:
        """Queue one pre-serialized message (hot path for session updates)."""
        self._enqueue(frame, session_id)

    def notify(self, method: str, params: Any = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self._enqueue(dumps(msg), session_of(params))

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request to the peer and wait for its result (RpcError on error)."""
        with observe.call(method, params):  # (its trace context put in `_meta` first)
            return await self._send_request(method, params)

    async def _send_request(self, method: str, params: Any) -> Any:
        if self._closed:
            raise self._close_reason or ConnectionClosed()
        self._next_id += 1
        rid = self._next_id
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        frame = dumps(msg)  # before anything waits on it: unserializable params raise here
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._enqueue(frame, session_of(params))  # (raises first in wire-check mode)
        self._pending[rid] = fut
        try:
            return await fut
        except asyncio.CancelledError:
            if rid in self._pending:
                self.notify("$/cancel_request", {"requestId": rid})
            raise
        finally:
            self._pending.pop(rid, None)

    async def request_batch(self, calls: list[tuple[str, Any]]) -> list[Any]:
        """Send several requests as one JSON-RPC batch (one array frame); their results in
        the order of `calls`, an `RpcError` (returned, not raised) for each that failed."""
        if self._closed:
            raise self._close_reason or ConnectionClosed()
        if not calls:
            raise ValueError("a batch holds at least one request")
        rids, frames = self._batch_frames(calls)
        if self._wire is not None:
            for frame in frames:  # each entry is checked as the request it is
                self._wire.sent(frame)
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in rids]
        self._enqueue(b"[" + b",".join(frames) + b"]", None, checked=True)
        for rid, fut in zip(rids, futs, strict=True):
            self._pending[rid] = fut
        try:
            done = await asyncio.gather(*futs, return_exceptions=True)
        except asyncio.CancelledError:
            for rid in rids:
                if rid in self._pending:
                    self.notify("$/cancel_request", {"requestId": rid})
            raise
        finally:
            for rid in rids:
                self._pending.pop(rid, None)
        for value in done:
            if isinstance(value, BaseException) and not isinstance(value, RpcError):
                raise value  # the connection closed: no answer will come
        return list(done)

    def _batch_frames(self, calls: list[tuple[str, Any]]) -> tuple[list[int], list[bytes]]:
        """Each call of a batch as a request frame with a fresh id."""
        rids: list[int] = []
        frames: list[bytes] = []
        for method, params in calls:
            self._next_id += 1
            msg: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
            if params is not None:
                msg["params"] = params
            frames.append(dumps(msg))
            rids.append(self._next_id)
        return rids, frames

    def _respond(
        self, rid: Any, result: Any, session_id: str | None, effect: Effect | None = None
    ) -> None:
        try:
            frame = dumps({"jsonrpc": "2.0", "id": rid, "result": result})
        except TypeError as exc:  # a handler returned something JSON cannot carry
            log.error("result of request %r is not JSON: %s", rid, exc)
            self._error(rid, internal_error(), session_id, effect and (rid, effect[1], None))
            return
        self._reply(rid, frame, session_id, effect)

    def _error(
        self,
        rid: Any,
        err: RpcError,
        session_id: str | None = None,
        effect: Effect | None = None,
    ) -> None:
        frame = dumps({"jsonrpc": "2.0", "id": rid, "error": err.to_wire()})
        self._reply(rid, frame, session_id, effect)

    def _reply(
        self, rid: Any, frame: bytes, session_id: str | None, effect: Effect | None = None
    ) -> None:
        """Queue a response, or keep it for the batch its request came in."""
        batch = self._collecting
        if batch is None and self._batched and type(rid) in (int, str):
            entry = self._batched.get(rid)
            # the batch's own request answering (its task, or its done-callback), not
            # another message that happens to name the same id
            if entry is not None and (entry[1] is asyncio.current_task() or entry[1].done()):
                del self._batched[rid]
                batch = entry[0]
                batch.waiting.discard(rid)
        if batch is None:
            if effect is not None:
                self._mark(frame, (effect,))
            self._enqueue(frame, session_id)
            self._send_now()
            return
        if self._closed:
            return
        if self._wire is not None:
            self._wire.sent(frame)  # each entry is checked as the message it is
        batch.replies.append(frame)
        if effect is not None:
            batch.effects.append(effect)
        if batch.sealed and not batch.waiting:
            self._send_batch(batch)

    def _send_now(self) -> None:
        # alone: no other request in flight (the answering request is still in it)
        self._outbox.send_now(len(self._incoming) <= 1)

    def _send_batch(self, batch: BatchReplies) -> None:
        """One array holding every response of the batch, once all of them exist."""
        if batch.replies:
            frame = b"[" + b",".join(batch.replies) + b"]"
            self._mark(frame, tuple(batch.effects))
            self._enqueue(frame, None, checked=True)

    def reject(self, rid: Any, err: RpcError) -> None:
        """Answer a frame the transport refused before feeding it (a limit)."""
        self._error(rid, err)

    def too_large(self, size: int) -> None:
        """Answer a frame that exceeded the size limit (its id is unknown)."""
        self._error(
            None,
            RpcError(
                INVALID_REQUEST,
                "message too large",
                {"size": size, "limit": self.max_message_size},
            ),
        )

    # ---- incoming ---------------------------------------------------------------
    def feed(self, frame: bytes | str) -> None:
        """Handle one received frame (never raises)."""
        if self._closed:
            return
        try:
            msg = orjson.loads(frame)
        except orjson.JSONDecodeError:
            if not frame.strip():
                return
            self._error(None, RpcError(PARSE_ERROR, "parse error: invalid JSON"))
            return
        self.feed_message(msg, frame)

    def feed_message(self, msg: Any, frame: bytes | str) -> None:
        """Handle one received frame the transport has parsed already (`msg`: its JSON
        value; `frame`: its text, for the nesting check)."""
        if self._closed:
            return
        if type(msg) is list:
            self._feed_batch(frame, msg)
            return
        if type(msg) is not dict:
            self._error(None, RpcError(INVALID_REQUEST, "invalid request: expected a JSON object"))
            return
        self._feed_one(frame, msg)

    def _feed_batch(self, frame: bytes | str, msgs: list[Any]) -> None:
        """A JSON-RPC 2.0 batch: every entry handled as a message of its own (requests run
        concurrently), their responses sent together as one array once all are done; an
        entry that is not an object gets its own -32600 (id null); a batch of
        notifications gets no reply; an empty one a single -32600 object."""
        if not msgs:
            self._error(None, RpcError(INVALID_REQUEST, "invalid request: empty batch"))
            return
        if too_deep(frame, msgs) is not None:
            self._error(None, RpcError(INVALID_REQUEST, "invalid request: nested too deeply"))
            return
        batch = BatchReplies()
        for msg in msgs:
            self._collecting = batch
            try:
                if type(msg) is not dict:
                    self._error(
                        None, RpcError(INVALID_REQUEST, "invalid request: expected a JSON object")
                    )
                    continue
                refused = self._admit(msg)
                if refused is not None:
                    rid = msg.get("id")
                    self._error(rid if type(rid) in (int, str) else None, refused)
                    continue
                self._feed_one(b"", msg)
                rid = msg.get("id")
                task = self._incoming.get(rid) if "method" in msg and "id" in msg else None
                if task is not None and rid not in self._batched and not task.done():
                    batch.waiting.add(rid)
                    self._batched[rid] = (batch, task)
            finally:
                self._collecting = None
        batch.sealed = True
        if not batch.waiting:
            self._send_batch(batch)

    def _admit(self, msg: dict[str, Any]) -> RpcError | None:
        if self.admit_entry is None or "method" not in msg:
            return None
        try:
            return self.admit_entry(msg)
        except Exception as exc:  # admission must never take the batch down
            log.error("batch entry admission failed: %s", type(exc).__name__, exc_info=exc)
            return internal_error()

    def _feed_one(self, frame: bytes | str, msg: dict[str, Any]) -> None:
        where = too_deep(frame, msg) if frame else None
        if where is not None:
            rid = msg.get("id")
            if "method" in msg and type(rid) in (int, str):
                self._error(
                    rid,
                    invalid_params(
                        f"{'.'.join(map(str, where))}: nested deeper than {MAX_DEPTH} levels",
                        [{"loc": where, "msg": "nested too deeply", "max": MAX_DEPTH}],
                    ),
                    session_of(msg.get("params")),
                )
            else:
                _limited.warning("too-deep", "a message nested too deeply was dropped")
            return
        if self._wire is not None:
            self._wire.received(msg)
        try:
            self._dispatch(msg)
        except Exception as exc:  # a frame must never take the connection down
            log.error("frame dispatch failed: %s", type(exc).__name__, exc_info=exc)
            rid = msg.get("id")
            if "method" in msg and type(rid) in (int, str):
                self._error(rid, internal_error())

    def _dispatch(self, msg: dict[str, Any]) -> None:
        has_id = "id" in msg
        rid = msg.get("id")
        if has_id and not (rid is None or type(rid) in (int, str)):
            self._error(
                None,
                RpcError(INVALID_REQUEST, "invalid request: id must be a string, integer or null"),
            )
            return
        method = msg.get("method")
        if msg.get("jsonrpc") != "2.0":
            if method is None and ("result" in msg or "error" in msg):
                pass  # lenient with responses; still matched below
            else:
                self._error(
                    rid, RpcError(INVALID_REQUEST, 'invalid request: "jsonrpc" must be "2.0"')
                )
                return
        if method is None:
            if "result" in msg or "error" in msg:
                self._on_response(rid, msg)
                return
            self._error(rid, RpcError(INVALID_REQUEST, 'invalid request: missing "method"'))
            return
        if type(method) is not str:
            self._error(
                rid, RpcError(INVALID_REQUEST, 'invalid request: "method" must be a string')
            )
            return
        # JSON-RPC lets a peer omit params: every ACP method takes an object, so an
        # omitted one is `{}` (a required field is then named by the params check)
        params = msg.get("params", {})
        if params is not None and type(params) not in (dict, list):
            if has_id:
                self._error(
                    rid,
                    RpcError(
                        INVALID_REQUEST, 'invalid request: "params" must be an object or array'
                    ),
                )
            return
        if not has_id:
            self._notification(method, params)
            return
        sid = session_of(params)
        if rid in self._incoming:
            self._error(
                rid,
                RpcError(
                    INVALID_REQUEST, "invalid request: id already in use by a request in flight"
                ),
                sid,  # routed like its answer would be (the session's stream over HTTP)
            )
            return
        task = asyncio.get_running_loop().create_task(self._run_request(rid, method, params, sid))
        self._incoming[rid] = task
        task.add_done_callback(lambda t: self._request_done(rid, sid, t))

    def _request_done(self, rid: Any, sid: str | None, task: asyncio.Task[None]) -> None:
        """A task cancelled before it started never runs `_run_request` (not even its
        `finally`): answer its `$/cancel_request` here, and forget it."""
        if self._incoming.get(rid) is task:
            del self._incoming[rid]
            if rid in self._cancelled_ids:
                self._cancelled_ids.discard(rid)
                self._error(rid, RpcError(REQUEST_CANCELLED, "request cancelled"), sid)
        entry = self._batched.get(rid) if type(rid) in (int, str) else None
        if entry is not None and entry[1] is task:  # ended without an answer (closing)
            del self._batched[rid]
            entry[0].waiting.discard(rid)
            if not entry[0].waiting:
                self._send_batch(entry[0])

    async def _run_request(self, rid: Any, method: str, params: Any, sid: str | None) -> None:
        ctx = RequestContext(rid, method, sid, self)
        try:
            with observe.request(method, params, self):
                result = await self._on_request(method, params, ctx)
        except asyncio.CancelledError:
            if rid in self._cancelled_ids:
                self._cancelled_ids.discard(rid)
                err = RpcError(REQUEST_CANCELLED, "request cancelled")
                self._error(rid, err, *answer_route(ctx, sid))
                return
            raise
        except RpcError as err:
            self._error(rid, err, *answer_route(ctx, sid))
        except Exception as exc:
            log.error("handler for %s failed: %s", method, type(exc).__name__, exc_info=exc)
            self._error(rid, internal_error(), *answer_route(ctx, sid))
        else:
            self._respond(rid, result, *answer_route(ctx, sid))
            for then in ctx.after:
                try:
                    then()
                except Exception as exc:
                    log.error("after %s: %s", method, type(exc).__name__, exc_info=exc)
        finally:
            self._incoming.pop(rid, None)
            self._cancelled_ids.discard(rid)  # a cancel that came too late names no one now

    def cancel_incoming(self, rid: Any) -> bool:
        task = self._incoming.get(rid)
        if task is None or task.done():
            return False
        self._cancelled_ids.add(rid)
        task.cancel()
        return True

    def _notification(self, method: str, params: Any) -> None:
        if method == "$/cancel_request":
            target = params.get("requestId") if type(params) is dict else None
            if type(target) in (int, str):  # anything else names no request (and is unhashable)
                self.cancel_incoming(target)
                pending = self._pending.get(target)  # type: ignore[arg-type]
                if pending is not None and not pending.done():
                    pending.set_exception(RpcError(REQUEST_CANCELLED, "request cancelled by peer"))
            return
        self._notifications.put(method, params)

    def _on_response(self, rid: Any, msg: dict[str, Any]) -> None:
        fut = self._pending.pop(rid, None) if type(rid) is int else None
        if fut is None:
            _limited.warning("stray-response", "response to an unknown request id ignored")
            return
        if fut.done():
            return
        if "error" in msg:
            e = msg["error"]
            if type(e) is dict:
                fut.set_exception(
                    RpcError(
                        e.get("code", -32603) if type(e.get("code")) is int else -32603,
                        str(e.get("message", "")),
                        e.get("data"),
                    )
                )
            else:
                fut.set_exception(RpcError(-32603, "malformed error response"))
        else:
            fut.set_result(msg.get("result"))

    # ---- lifecycle --------------------------------------------------------------
    @property
    def close_reason(self) -> ConnectionClosed | None:
        """Why the connection ended, when whoever ended it said (e.g. `AgentExited`)."""
        return self._close_reason

    async def close_with(self, reason: ConnectionClosed) -> None:
        """`close()`, failing pending requests with `reason` (e.g. `AgentExited`)."""
        if not self._closed and self._close_reason is None:
            self._close_reason = reason
        await self.close()

    async def finish_incoming(self, grace: float) -> None:
        """The peer sent its last frame: give every request already read up to `grace`
        seconds to be answered; those still running then are cancelled and answered
        -32800, so none read goes unanswered."""
        tasks = [t for t in self._incoming.values() if not t.done()]
        if not tasks:
            return
        await asyncio.wait(tasks, timeout=grace)
        late = [(rid, t) for rid, t in self._incoming.items() if not t.done()]
        for rid, task in late:
            self._cancelled_ids.add(rid)
            task.cancel()
        await asyncio.gather(*(t for _, t in late), return_exceptions=True)

    async def close(self) -> None:
        """End the connection: cancel work in flight, fail pending requests, flush."""
        if self._closed:
            return
        current = asyncio.current_task()  # close() may run inside one of them
        tasks = [t for t in self._incoming.values() if not t.done() and t is not current]
        for t in tasks:
            t.cancel()
        ending = self._notifications.stop()
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(self._close_reason or ConnectionClosed())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self.flush()
        self._closed = True
        self._outbox.closed = True
        forget_secrets(self)
        writer = self._outbox.stop()
        if writer is not None:
            ending.append(writer)
        # wait for the cancelled tasks, so none is left pending when the loop ends
        await asyncio.gather(*[t for t in ending if t is not current], return_exceptions=True)
        self.closed.set()
