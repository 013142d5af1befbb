"""Transport-agnostic JSON-RPC 2.0 connection over asyncio.

The seam a transport plugs into (stdio, HTTP/SSE, WebSocket):

* **receive**: the transport calls ``connection.feed(frame)`` with one complete
  frame (``bytes``: one stdio line, one POST body, one WebSocket message).  Frames
  over ``max_message_size`` are refused by the transport with
  ``connection.too_large()`` (the connection lives on).
* **send**: the transport supplies ``sink(batch)``, an ``async`` callable that gets
  a list of ``(frame_bytes, session_id | None)`` in wire order.  ``session_id`` is
  the ACP session an outgoing message belongs to (from ``params.sessionId`` of a
  notification/request, or of the request a response answers), so an HTTP
  transport can route each message to that session's SSE stream (``None``: the
  connection-scoped stream).  One writer task per connection calls the sink, so
  messages leave in exactly the order they were queued: every ``session/update``
  of a turn is written before that turn's answer.
* **end**: the transport calls ``await connection.close()`` at EOF / disconnect;
  work in flight is cancelled and pending outgoing requests fail.

Requests run concurrently (one task each); notifications are handled in order per
session (one queue per ``sessionId``).  ``$/cancel_request`` cancels one in-flight
request, which then answers -32800.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from .errors import (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    RpcError,
    internal_error,
)

log = logging.getLogger("acp.runtime")

Sink = Callable[[list[tuple[bytes, str | None]]], Awaitable[None]]
RequestHandler = Callable[[str, Any, "RequestContext"], Awaitable[Any]]
NotificationHandler = Callable[[str, Any], Awaitable[None]]

DEFAULT_MAX_MESSAGE_SIZE = 50 * 1024 * 1024
_HIGH_WATER = 4 * 1024 * 1024


def _to_json(obj: Any) -> Any:
    """orjson's fallback: typed models (pydantic) nested anywhere in a message."""
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        return dump(by_alias=True, exclude_unset=True, mode="json")
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, default=_to_json)


def _session_of(params: Any) -> str | None:
    if type(params) is dict:
        sid = params.get("sessionId")
        if type(sid) is str:
            return sid
    return None


class RequestContext:
    """What a request handler knows about the request it serves."""

    __slots__ = ("connection", "id", "method", "session_id")

    def __init__(self, rid: Any, method: str, session_id: str | None, connection: Connection):
        self.id = rid
        self.method = method
        self.session_id = session_id
        self.connection = connection


class Connection:
    def __init__(
        self,
        sink: Sink,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        immediate_notifications: frozenset[str] = frozenset(),
    ) -> None:
        self._sink = sink
        self._on_request = on_request
        self._on_notification = on_notification
        self.max_message_size = max_message_size
        # notifications handled inline, before the next frame is read (cancels)
        self._immediate = immediate_notifications
        self._out: list[tuple[bytes, str | None]] = []
        self._out_bytes = 0
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._writer: asyncio.Task[None] | None = None
        self._incoming: dict[Any, asyncio.Task[None]] = {}
        self._cancelled_ids: set[Any] = set()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._pending_session: dict[int, str | None] = {}
        self._next_id = 0
        self._queues: dict[str | None, asyncio.Queue[tuple[str, Any]]] = {}
        self._workers: dict[str | None, asyncio.Task[None]] = {}
        self._closed = False
        self.closed = asyncio.Event()

    # ---- outgoing ---------------------------------------------------------------
    def _enqueue(self, frame: bytes, session_id: str | None) -> None:
        if self._closed:
            return
        self._out.append((frame, session_id))
        self._out_bytes += len(frame)
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write_loop())
        self._wake.set()
        if self._out_bytes > _HIGH_WATER:
            self._drained.clear()

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._out:
                batch = self._out
                self._out = []
                self._out_bytes = 0
                try:
                    await self._sink(batch)
                except Exception as exc:  # noqa: BLE001 - the peer went away: nothing more can be sent
                    log.warning("transport write failed: %s", type(exc).__name__)
                    self._out = []
                    self._drained.set()
                    asyncio.get_running_loop().create_task(self.close())
                    return
            self._drained.set()

    async def drain(self) -> None:
        """Wait while too much output is queued (backpressure for streaming handlers)."""
        if not self._drained.is_set():
            await self._drained.wait()

    async def flush(self) -> None:
        """Wait until everything queued so far has been handed to the sink."""
        while (self._out or self._wake.is_set()) and not self._closed:
            await asyncio.sleep(0)

    def send_raw(self, frame: bytes, session_id: str | None = None) -> None:
        """Queue one pre-serialized message (hot path for session updates)."""
        self._enqueue(frame, session_id)

    def notify(self, method: str, params: Any = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self._enqueue(_dumps(msg), _session_of(params))

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request to the peer and wait for its result (RpcError on error)."""
        if self._closed:
            raise RpcError(-32603, "connection closed")
        self._next_id += 1
        rid = self._next_id
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        frame = _dumps(msg)  # before anything waits on it: unserializable params raise here
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        self._enqueue(frame, _session_of(params))
        try:
            return await fut
        except asyncio.CancelledError:
            if rid in self._pending:
                self.notify("$/cancel_request", {"requestId": rid})
            raise
        finally:
            self._pending.pop(rid, None)

    def _respond(self, rid: Any, result: Any, session_id: str | None) -> None:
        try:
            frame = _dumps({"jsonrpc": "2.0", "id": rid, "result": result})
        except TypeError as exc:  # a handler returned something JSON cannot carry
            log.error("result of request %r is not JSON: %s", rid, exc)
            self._error(rid, internal_error(), session_id)
            return
        self._enqueue(frame, session_id)

    def _error(self, rid: Any, err: RpcError, session_id: str | None = None) -> None:
        self._enqueue(
            _dumps({"jsonrpc": "2.0", "id": rid, "error": err.to_wire()}),
            session_id,
        )

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
        if type(msg) is not dict:
            self._error(None, RpcError(INVALID_REQUEST, "invalid request: expected a JSON object"))
            return
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
        params = msg.get("params")
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
        sid = _session_of(params)
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

    async def _run_request(self, rid: Any, method: str, params: Any, sid: str | None) -> None:
        try:
            result = await self._on_request(method, params, RequestContext(rid, method, sid, self))
        except asyncio.CancelledError:
            if rid in self._cancelled_ids:
                self._cancelled_ids.discard(rid)
                self._error(rid, RpcError(REQUEST_CANCELLED, "request cancelled"), sid)
                return
            raise
        except RpcError as err:
            self._error(rid, err, sid)
        except Exception as exc:
            log.error("handler for %s failed: %s", method, type(exc).__name__, exc_info=exc)
            self._error(rid, internal_error(), sid)
        else:
            self._respond(rid, result, sid)
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
        if method in self._immediate:
            asyncio.get_running_loop().create_task(self._safe_notify(method, params))
            return
        key = _session_of(params)
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = asyncio.Queue()
            self._workers[key] = asyncio.get_running_loop().create_task(self._notify_worker(q))
        q.put_nowait((method, params))

    async def _notify_worker(self, q: asyncio.Queue[tuple[str, Any]]) -> None:
        while True:
            method, params = await q.get()
            await self._safe_notify(method, params)

    async def _safe_notify(self, method: str, params: Any) -> None:
        try:
            await self._on_notification(method, params)
        except asyncio.CancelledError:
            raise
        except RpcError as exc:  # the peer's notification was refused: there is no one to tell
            if exc.code != METHOD_NOT_FOUND:
                log.warning("notification %s refused: %s", method, exc.code)
        except Exception as exc:
            log.error("notification %s failed: %s", method, type(exc).__name__, exc_info=exc)

    def _on_response(self, rid: Any, msg: dict[str, Any]) -> None:
        fut = self._pending.pop(rid, None) if type(rid) is int else None
        if fut is None:
            log.warning("response to an unknown request id ignored")
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
    async def close(self) -> None:
        """End the connection: cancel work in flight, fail pending requests, flush."""
        if self._closed:
            return
        current = asyncio.current_task()  # close() may run inside one of them
        tasks = [t for t in self._incoming.values() if not t.done() and t is not current]
        for t in tasks:
            t.cancel()
        for w in self._workers.values():
            w.cancel()
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(RpcError(-32603, "connection closed"))
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self.flush()
        self._closed = True
        ending = list(self._workers.values())
        if self._writer is not None:
            self._writer.cancel()
            ending.append(self._writer)
        # wait for the cancelled tasks, so none is left pending when the loop ends
        await asyncio.gather(*[t for t in ending if t is not current], return_exceptions=True)
        self.closed.set()


_SECRETS: set[str] = set()
_MAX_SECRETS = 4096
_MIN_SECRET = 4  # shorter values are not redacted: they would blank ordinary text


def register_secret(value: str) -> None:
    """A credential (auth token, provider header value) that no log line may show."""
    if len(value) >= _MIN_SECRET and len(_SECRETS) < _MAX_SECRETS:
        _SECRETS.add(value)


def redact(text: str) -> str:
    """`text` with every registered secret replaced by ``[redacted]``."""
    if _SECRETS and text:
        for secret in sorted(_SECRETS, key=len, reverse=True):
            if secret in text:
                text = text.replace(secret, "[redacted]")
    return text


class RedactingFormatter(logging.Formatter):
    """Formats a record (tracebacks included), then removes registered secrets."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class RedactingFilter(logging.Filter):
    """For handlers the runtime does not format (uvicorn's): secrets out of each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _SECRETS:
            record.msg = redact(record.getMessage())
            record.args = None
            if record.exc_info:
                record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
                record.exc_info = None
        return True


def stderr_logging(level: int = logging.WARNING) -> None:
    """Logs go to stderr, never to the protocol stream; secrets are redacted."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("acp.runtime")
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
