"""The runtime's own spans: plain objects recorded on the event loop, each a `with` block
around the work it records, handed as they end to a sink (sinks.py: a queue folded into
the metrics and encoded as OTLP, `encode.py`, 128 spans at a time, posted by a thread of
its own).

The OpenTelemetry SDK's span costs ~20 us to start and end and ~31 us to encode, three
spans an echo turn; these cost a few us.  They are still OpenTelemetry's: a `Span` here is
the API's span, set as the current span of OpenTelemetry's context while its work runs, so
pydantic-ai's and the MCP SDK's spans (the SDK's, from the same provider) nest under the
runtime's turn and tool calls, and a span of theirs is the parent of the runtime's spans
started inside it (a client call made by a model's tool).  Sampling is the provider's
sampler's (`OTEL_TRACES_SAMPLER`): the default, parent-based always-on, and always on/off
are decided here; any other asks the sampler."""

from __future__ import annotations

import asyncio
import collections
import contextvars
import logging
import os
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any, Self

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from . import encode

log = logging.getLogger("acp.runtime.observe")

SCOPE = "acp.runtime"
KINDS = {SpanKind.INTERNAL: 1, SpanKind.SERVER: 2, SpanKind.CLIENT: 3}  # the proto's numbers
_NO_STATE = TraceState()
_in_context: Any = trace.set_span_in_context  # (given the runtime's spans too)
_time = time.time_ns
_Context = otel_context.Context
_KEY: str = getattr(trace.propagation, "_SPAN_KEY", "")
# OpenTelemetry's context is a ContextVar holding a `Context` (a dict) behind `attach` and
# `get_current`'s layers.  When it is that (the default runtime context), a span of the
# runtime's is made current in a ContextVar of its own, with the context that was current
# as it began (`_CURRENT`: no dict made and set, ~2k instructions less a span), and
# OpenTelemetry's `get_current` (`_Runtime`) puts it in: while the context is still the
# one it began in, the current context is that one with the span in it; a context
# attached since (another library's span, made from that) is the current one as it is.
# Else everything goes through the API.
_RUNTIME = getattr(otel_context, "_RUNTIME_CONTEXT", None)
_VAR = getattr(_RUNTIME, "_current_context", None)
if not _KEY or type(_VAR) is not contextvars.ContextVar:
    _VAR = None
_NONE: tuple[Any, Any] = (None, None)
_CURRENT: contextvars.ContextVar[tuple[Any, Any]] = contextvars.ContextVar(
    "acp_runtime_span", default=_NONE
)


class _Runtime(ContextVarsRuntimeContext):  # type: ignore[misc,unused-ignore]
    """OpenTelemetry's runtime context (its ContextVar, so its tokens stay good) with the
    runtime's current span in what `get_current` returns."""

    def __init__(self, var: Any) -> None:
        self._current_context = var

    def get_current(self) -> Any:
        ctx = self._current_context.get()
        span, base = _CURRENT.get()
        if ctx is base:
            return _Context({**ctx, _KEY: span})
        return ctx


if _VAR is not None and type(_RUNTIME) is ContextVarsRuntimeContext:
    vars(otel_context)["_RUNTIME_CONTEXT"] = _Runtime(_VAR)
elif _VAR is not None and type(_RUNTIME) is not _Runtime:  # (spans.py loaded again: its own)
    _VAR = None


Attrs = tuple[tuple[str, Any], ...]
# how a tracer samples: its sampler is asked; parent-based, a root sampled (the default);
# every span; none
ASK, PARENT, ALWAYS, NEVER = range(4)
# what a span records (its metrics are folded from it, 128 spans at a time: otel.py's `fold`)
REQUEST, CALL, TURN, TOOL, STORE, QUEUED = range(6)
REQUEST_CANCELLED = -32800
INTERNAL_ERROR = -32603
ERROR = 2  # StatusCode.ERROR's value


def error_code(exc: BaseException) -> int:
    """The JSON-RPC code an exception is answered with (an RpcError's own, else -32603)."""
    if isinstance(exc, asyncio.CancelledError):
        return REQUEST_CANCELLED
    code = getattr(exc, "code", None)
    return code if type(code) is int and hasattr(exc, "to_wire") else INTERNAL_ERROR


def error_name(exc: BaseException) -> str | None:
    """The `name` of an RpcError's data (e.g. `ModelRateLimited`), if it has one."""
    data = getattr(exc, "data", None)
    name = data.get("name") if type(data) is dict else None
    return name if type(name) is str else None


class Shape:
    """What the spans of one combination share, made once: their name, kind, what they
    record (REQUEST, STORE, ...) and its key (the method, the operation), their fixed
    attributes, and all of that OTLP-encoded (`head`).  `named`: the attribute the span's
    own key is written as when it ends (a turn's stop reason), if any.  A `leaf` span is
    never made current (a store call, a request to the peer: nothing runs under it that
    starts a span): its `with` block only ends it."""

    __slots__ = ("attrs", "head", "key", "kind", "leaf", "name", "named", "what")

    def __init__(
        self,
        name: str,
        kind: SpanKind,
        what: int,
        key: Any = None,
        attrs: Attrs = (),
        named: str | None = None,
        *,
        leaf: bool = False,
    ) -> None:
        self.name = name
        self.leaf = leaf
        self.kind = kind
        self.what = what
        self.key = key
        self.attrs = attrs
        self.named = named
        self.head = (
            encode.field(5, name.encode())
            + encode.KIND[KINDS.get(kind, 1)]
            + (encode.attributes(9, attrs) if attrs else b"")
        )


def wire64(n: int) -> int:
    """A span id as the runtime keeps it (`Span.sid`: the int whose little-endian bytes are
    the id's bytes on the wire) from the API's (whose big-endian bytes are), and back."""
    return int.from_bytes(n.to_bytes(8, "little"), "big")


class Span:
    """One span of the runtime's (`Tracer.start` makes it): its shape, ids, times, its own
    attributes (`extra`), and `failure` (its status code and message, and the JSON-RPC
    code of the exception that ended it) when it failed; a `with` block around the work
    it records, current within it (unless its shape is a `leaf`).  One type for every
    span: each attribute read and written where spans pass stays specialized to it.
    `key` is what its metrics are kept by (its shape's, or a turn's stop reason).  Its
    ids are kept as the wire has them (`tid`: the trace id's bytes; `sid`, `psid`: the
    ints whose little-endian bytes are its and its parent's span id, 0 for a root),
    packed with the times in one struct; `trace_id`, `span_id` and `parent_id` are the
    API's.  `state`: the trace state's header ("": none); `peer`: the parent came from
    the peer (a traceparent).  The API's `Span` is not its base but knows it as one of
    its own (`trace.Span.register`, below: `isinstance` holds): that class has no
    `__slots__`, and a subclass's every instance would carry a dict, made and freed with
    each span."""

    __slots__ = (
        "__weakref__",  # (as the API's spans have)
        "_context",
        "end_ns",
        "extra",
        "failure",
        "flags",
        "key",
        "peer",
        "psid",
        "shape",
        "sid",
        "sink",
        "start",
        "state",
        "tid",
        "token",
    )
    shape: Shape
    tid: bytes
    sid: int
    psid: int
    peer: bool
    flags: int
    state: str
    extra: tuple[tuple[str, Any], ...] | None
    key: Any
    sink: Callable[[Span], None]  # (_NOWHERE: kept by nothing)
    token: Any
    failure: tuple[int, str, int] | None
    start: int
    end_ns: int
    _context: SpanContext  # made when first asked for

    # ---- what the encoders and the SDK's ReadableSpan read ------------------------------
    @property
    def name(self) -> str:
        return self.shape.name

    @property
    def kind(self) -> SpanKind:
        return self.shape.kind

    @property
    def trace_id(self) -> int:
        return int.from_bytes(self.tid, "big")

    @property
    def span_id(self) -> int:
        return wire64(self.sid)

    @property
    def parent_id(self) -> int:
        return wire64(self.psid) if self.psid else 0

    @property
    def remote(self) -> bool:
        """The parent came from the peer (a traceparent)."""
        return self.peer

    @property
    def trace_state(self) -> TraceState:
        return TraceState.from_header([self.state]) if self.state else _NO_STATE

    @property
    def code(self) -> int:
        return self.failure[0] if self.failure else 0

    @property
    def message(self) -> str:
        return self.failure[1] if self.failure else ""

    @property
    def error(self) -> int:
        return self.failure[2] if self.failure else 0

    def attributes(self) -> Iterator[tuple[str, Any]]:
        yield from self.shape.attrs
        if self.extra:
            yield from self.extra
        if self.shape.named is not None and self.key is not None:
            yield self.shape.named, self.key

    # ---- the work it records -----------------------------------------------------------
    def __enter__(self) -> Self:
        # made current: the spans started within are its children
        if self.shape.leaf:
            return self
        if _VAR is not None:  # with the context it began in (see `_Runtime`)
            self.token = _CURRENT.set((self, _VAR.get()))
        else:
            self.token = otel_context.attach(_in_context(self))
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        token = self.token
        if token is not None:  # (let go at once: nothing of it waits with the span)
            self.token = None
            if _VAR is None:
                otel_context.detach(token)
            else:
                try:
                    _CURRENT.reset(token)
                except ValueError:  # made in another context (never by the runtime's hooks)
                    log.debug("a span's context was left from another context")
        if exc is not None:
            self.failed(exc)
        self.end_ns = _time()
        self.sink(self)

    def failed(self, exc: BaseException) -> None:
        """Ended by `exc`: its status, its JSON-RPC code (a turn: its stop reason)."""
        code = error_code(exc)
        what = self.shape.what
        if what == TURN:
            self.key = "cancelled" if code == REQUEST_CANCELLED else "error"
            if code == REQUEST_CANCELLED:  # a cancelled turn is not a failed one
                self.failure = (0, "", code)
                return
            name = error_name(exc)
            if name is not None:
                self._set(("error.type", name))
        elif what == TOOL:
            self.key = type(exc).__name__
        if what in (REQUEST, CALL, TURN):
            self._set(("rpc.jsonrpc.error_code", code))
        self.failure = (ERROR, type(exc).__name__, code)

    def set_stop_reason(self, reason: Any) -> None:
        """A turn's stop reason (as it ends)."""
        self.key = str(reason)

    def set_tool_result(self, result: Any) -> None:
        """A tool call's result: an error result fails the span."""
        if getattr(result, "is_error", False):
            self.key = "ToolError"
            self.failure = (ERROR, "tool error", 0)

    def _set(self, pair: tuple[str, Any]) -> None:
        if isinstance(pair[1], list):  # (kept hashable: a list's values as a tuple)
            pair = (pair[0], tuple(pair[1]))
        self.extra = (*self.extra, pair) if self.extra else (pair,)

    # ---- the OpenTelemetry API's span -----------------------------------------------
    def get_span_context(self) -> SpanContext:
        try:
            found: SpanContext = self._context
            return found
        except AttributeError:
            found = self._context = SpanContext(
                self.trace_id, self.span_id, False, TraceFlags(self.flags), self.trace_state
            )
            return found

    def is_recording(self) -> bool:
        return self.flags == 1 and self.sink is not _NOWHERE and not getattr(self, "end_ns", 0)

    def set_attribute(self, key: str, value: Any) -> None:
        if self.is_recording():
            self._set((key, value))

    def set_attributes(self, attributes: Any) -> None:
        for key, value in dict(attributes).items():
            self.set_attribute(key, value)

    def set_status(self, status: Any, description: str | None = None) -> None:
        if isinstance(status, Status):
            status, description = status.status_code, status.description
        if self.is_recording() and isinstance(status, StatusCode):
            message = (description or "") if status is StatusCode.ERROR else ""
            self.failure = (status.value, message, self.error)

    def update_name(self, name: str) -> None:
        if self.is_recording():
            old = self.shape
            self.shape = Shape(
                name, old.kind, old.what, old.key, old.attrs, old.named, leaf=old.leaf
            )

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        """The runtime's spans carry no events (nothing of the runtime adds one)."""

    def record_exception(self, exception: BaseException, *args: Any, **kwargs: Any) -> None:
        """Never recorded: an exception's text may hold anything (the status names its type)."""

    def add_link(self, context: Any, attributes: Any = None) -> None:
        """The runtime's spans carry no links (nothing of the runtime adds one)."""

    def end(self, end_time: int | None = None) -> None:
        if not getattr(self, "end_ns", 0):
            self.end_ns = end_time or _time()
            self.sink(self)


trace.Span.register(Span)
_new = object.__new__
_next = next
# Ids come from the system's random bytes (`os.urandom`), many at a time: a span id an
# unsigned 64-bit int of a memoryview's (read in C: a third of `getrandbits(64)`), a
# trace id 16 bytes of a struct's `iter_unpack`; none all zeros (a pool that had one is
# drawn again)
IDS = 4096  # ids drawn at a time


def _random_bytes(size: int) -> bytes:
    while True:
        got = os.urandom(size * IDS)
        if bytes(size) not in got:
            return got


def _span_pool() -> Iterator[int]:
    return iter(memoryview(_random_bytes(8)).cast("Q"))


def _trace_pool() -> Iterator[tuple[bytes]]:
    return struct.Struct("16s").iter_unpack(_random_bytes(16))


_POOLS = {"_span_ids": _span_pool, "_trace_ids": _trace_pool}


def _new_ids(name: str) -> Any:
    """The next id of a fresh pool (`name`: `_span_ids` or `_trace_ids`, drawn out)."""
    fresh = globals()[name] = _POOLS[name]()
    return _next(fresh)


_span_ids = _span_pool()
_trace_ids = _trace_pool()


def _after_fork() -> None:
    """A forked process draws its own ids (never its parent's pool)."""
    for name, pool in _POOLS.items():
        globals()[name] = pool()


os.register_at_fork(after_in_child=_after_fork)


class _Unwatched:
    """What a tracer whose sink is no batch looks at: nothing is ever full."""

    queue: tuple[()] = ()
    limit = 1

    def full(self) -> None:
        """Never called: an empty queue is under any limit."""


_UNWATCHED = _Unwatched()
# where a span nothing keeps goes (not sampled, no metrics): a deque that holds nothing,
# its append a call in C (no test of the span's sink as it ends)
_NOWHERE: Callable[[Span], None] = collections.deque[Span](maxlen=0).append


class Tracer:
    """Starts the runtime's spans under the current span of OpenTelemetry's context (or a
    remote parent), sampled as `sampler` (the provider's) decides.  A span goes to `sink`
    as it ends: every span when `counted` (its metrics are folded from it), else only a
    sampled one; `exports`: a span may be exported (its trace context is worth sending)."""

    def __init__(
        self, sampler: Any, sink: Callable[[Span], None] | None, *, counted: bool = False
    ) -> None:
        self.sink = sink
        self.counted = counted
        self.sampler = sampler
        described = str(sampler.get_description()) if sampler is not None else ""
        from opentelemetry.sdk.trace import sampling

        self.mode = {
            sampling.DEFAULT_ON.get_description(): PARENT,  # type: ignore[no-untyped-call,unused-ignore]
            sampling.ALWAYS_ON.get_description(): ALWAYS,
            sampling.ALWAYS_OFF.get_description(): NEVER,
            "": PARENT,
        }.get(described, ASK)
        self.exports = sink is not None and self.mode != NEVER
        if sink is None:  # (a span with nowhere to go is handed there all the same)
            sink = _NOWHERE
        # a batch's queue (sinks.Batch) is appended to directly, a deque's append: no call
        # of Python's a span; each start looks at its length instead (`Batch.full`; a
        # tracer with another sink looks at `_UNWATCHED`, never full)
        batch: Any = sink if hasattr(sink, "queue") and hasattr(sink, "full") else _UNWATCHED
        if batch is not _UNWATCHED:
            sink = batch.queue.append
        self.batch = batch
        # a span's sink by its flags (not sampled, sampled)
        self.sinks = (sink if counted else _NOWHERE, sink)

    def start(
        self,
        shape: Shape,
        remote: SpanContext | None = None,
        extra: tuple[tuple[str, Any], ...] | None = None,
    ) -> Span:
        """A started span (a `with` block ends it).  `extra`: the span's own attributes."""
        batch = self.batch
        if len(batch.queue) >= batch.limit:  # a batch is full: taken (`Batch.full`)
            batch.full()
        if remote is not None:
            parent: Any = remote
        elif _VAR is not None:  # the current span, read directly (None: no span)
            current, base = _CURRENT.get()
            ctx = _VAR.get()
            parent = current if ctx is base else ctx.get(_KEY)
        else:
            parent = trace.get_current_span()
        span = _new(Span)
        if type(parent) is Span:  # sampled as its parent was (by this rule), unless asked
            span.tid = parent.tid
            span.psid = parent.sid
            span.state = parent.state
            span.peer = False
            flags = parent.flags
            if self.mode == ASK:
                flags = self._sampled(span, parent, shape, extra)
        else:
            if parent is not None and type(parent) is not SpanContext:  # another tracer's
                parent = parent.get_span_context()
            if parent is not None and parent.is_valid:
                span.tid = parent.trace_id.to_bytes(16, "big")
                span.psid = wire64(parent.span_id)
                span.state = parent.trace_state.to_header() if parent.trace_state else ""
                span.peer = parent.is_remote
                flags = parent.trace_flags & 1
            else:  # a root: a new trace
                parent = None
                span.tid = (_next(_trace_ids, None) or _new_ids("_trace_ids"))[0]  # (drawn out)
                span.psid = 0
                span.state = ""
                span.peer = False
                flags = 1
            mode = self.mode
            if mode != PARENT:
                if mode == ALWAYS:
                    flags = 1
                elif mode == NEVER:
                    flags = 0
                else:
                    flags = self._sampled(span, parent, shape, extra)
        span.shape = shape
        try:
            span.sid = _next(_span_ids)
        except StopIteration:
            span.sid = _new_ids("_span_ids")
        span.flags = flags
        span.extra = extra
        span.key = shape.key
        span.sink = self.sinks[flags]
        span.failure = None
        span.token = None
        span.start = _time()
        return span

    def _sampled(self, span: Span, parent: Any, shape: Shape, extra: Any) -> int:
        """The sampler's decision for `span` (its flags), its trace state set as it says."""
        if parent is None:
            parent = trace.INVALID_SPAN
        elif type(parent) is SpanContext:
            parent = trace.NonRecordingSpan(parent)
        attrs = dict((*shape.attrs, *(extra or ())))
        got = self.sampler.should_sample(
            _in_context(parent), span.trace_id, shape.name, shape.kind, attrs, None
        )
        state = got.trace_state or _NO_STATE
        span.state = state.to_header() if state else ""
        return 1 if got.decision.is_sampled() else 0


# ---- sinks ----------------------------------------------------------------------------
def readable(span: Span, resource: Any) -> Any:
    """`span` as the SDK's ReadableSpan (for an SDK exporter or span processor)."""
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    parent = None
    if span.parent_id:
        parent = SpanContext(
            span.trace_id, span.parent_id, span.remote, TraceFlags(span.flags), span.trace_state
        )
    return ReadableSpan(
        name=span.name,
        context=span.get_span_context(),
        parent=parent,
        resource=resource,
        attributes=dict(span.attributes()),
        kind=span.kind,
        status=Status(StatusCode(span.code), span.message or None),
        start_time=span.start,
        end_time=span.end_ns,
        instrumentation_scope=InstrumentationScope(SCOPE),
    )
