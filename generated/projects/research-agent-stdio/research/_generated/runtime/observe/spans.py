"""The runtime's own spans: plain objects recorded on the event loop and handed, as they end,
to a sink; the OTLP sink encodes them (`encode.py`) and posts them from a thread of its own.

The OpenTelemetry SDK's span costs ~20 us to start and end and ~31 us to encode, three
spans an echo turn; these cost a few us.  They are still OpenTelemetry's: a `Span` here is
the API's span, set as the current span of OpenTelemetry's context while its work runs, so
pydantic-ai's and the MCP SDK's spans (the SDK's, from the same provider) nest under the
runtime's turn and tool calls, and a span of theirs is the parent of the runtime's spans
started inside it (a client call made by a model's tool).  Sampling is the provider's
sampler's (`OTEL_TRACES_SAMPLER`): the default, parent-based always-on, and always on/off
are decided here; any other asks the sampler."""

from __future__ import annotations

import atexit
import collections
import contextvars
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from . import encode

log = logging.getLogger("acp.runtime.observe")

SCOPE = "acp.runtime"
KINDS = {SpanKind.INTERNAL: 1, SpanKind.SERVER: 2, SpanKind.CLIENT: 3}  # the proto's numbers
_NO_STATE = TraceState()
_in_context = trace.set_span_in_context
_time = time.time_ns
_bits = random.getrandbits
_Context = otel_context.Context
_KEY: str = getattr(trace.propagation, "_SPAN_KEY", "")
# OpenTelemetry's context is a ContextVar holding a `Context` (a dict) behind `attach` and
# `get_current`'s layers (~1.5 us a span); read and set directly when it is that (the
# default runtime context), else through the API
_VAR = getattr(getattr(otel_context, "_RUNTIME_CONTEXT", None), "_current_context", None)
if not _KEY or type(_VAR) is not contextvars.ContextVar:
    _VAR = None


Attrs = tuple[tuple[str, Any], ...]
# how a tracer samples: its sampler is asked; parent-based, a root sampled (the default);
# every span; none
ASK, PARENT, ALWAYS, NEVER = range(4)


# without the `otel` extra (a project type-checked with only its test extra) the
# OpenTelemetry API is Any to mypy: both cases are clean
class Span(trace.Span):  # type: ignore[misc,unused-ignore]
    """One span of the runtime's: its ids, times, attributes (a tuple made once per
    combination, plus those set later) and status."""

    __slots__ = (
        "_context",
        "attrs",
        "code",
        "end_ns",
        "extra",
        "flags",
        "kind",
        "message",
        "name",
        "parent_id",
        "remote",
        "sink",
        "span_id",
        "start",
        "state",
        "trace_id",
    )

    def __init__(
        self,
        name: str,
        kind: SpanKind,
        trace_id: int,
        span_id: int,
        parent_id: int,
        remote: bool,
        flags: int,
        state: TraceState,
        attrs: Attrs,
        extra: list[tuple[str, Any]] | None,
        sink: Callable[[Span], None] | None,
    ) -> None:
        self.name = name
        self.kind = kind
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.remote = remote  # the parent came from the peer (a traceparent)
        self.flags = flags  # 1: sampled
        self.state = state
        self.attrs = attrs  # a tuple made once per combination: encoded once
        self.extra = extra  # this span's own (a session id, what is set after the start)
        self.code = 0  # StatusCode: UNSET 0, OK 1, ERROR 2
        self.message = ""
        self.sink = sink  # None: not sampled
        self.end_ns = 0
        self._context: SpanContext | None = None
        self.start = _time()

    def attributes(self) -> Iterator[tuple[str, Any]]:
        yield from self.attrs
        if self.extra:
            yield from self.extra

    # ---- the OpenTelemetry API's span -----------------------------------------------
    def get_span_context(self) -> SpanContext:
        found = self._context
        if found is None:
            found = self._context = SpanContext(
                self.trace_id, self.span_id, False, TraceFlags(self.flags), self.state
            )
        return found

    def is_recording(self) -> bool:
        return self.sink is not None and not self.end_ns

    def set_attribute(self, key: str, value: Any) -> None:
        if self.is_recording():
            if self.extra is None:
                self.extra = []
            self.extra.append((key, value))

    def set_attributes(self, attributes: Any) -> None:
        for key, value in dict(attributes).items():
            self.set_attribute(key, value)

    def set_status(self, status: Any, description: str | None = None) -> None:
        if isinstance(status, Status):
            status, description = status.status_code, status.description
        if self.is_recording() and isinstance(status, StatusCode):
            self.code = status.value
            self.message = (description or "") if status is StatusCode.ERROR else ""

    def update_name(self, name: str) -> None:
        if self.is_recording():
            self.name = name

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        """The runtime's spans carry no events (nothing of the runtime adds one)."""

    def record_exception(self, exception: BaseException, *args: Any, **kwargs: Any) -> None:
        """Never recorded: an exception's text may hold anything (the status names its type)."""

    def end(self, end_time: int | None = None) -> None:
        if not self.end_ns:
            self.end_ns = end_time or _time()
            if self.sink is not None:
                self.sink(self)


def _under(parent: Any) -> tuple[int, int, int, TraceState, bool]:
    """The trace id, parent id, flags, trace state and remoteness of a span started under
    `parent` (another tracer's span, a remote SpanContext, None): a new trace when it has
    no valid context."""
    ctx = None
    if parent is not None:
        ctx = parent if type(parent) is SpanContext else parent.get_span_context()
    if ctx is not None and ctx.is_valid:
        return ctx.trace_id, ctx.span_id, ctx.trace_flags & 1, ctx.trace_state, ctx.is_remote
    trace_id = 0
    while not trace_id:
        trace_id = _bits(128)
    return trace_id, 0, 1, _NO_STATE, False


class Tracer:
    """Opens and closes the runtime's spans under the current span of OpenTelemetry's
    context (or a remote parent), sampled as `sampler` (the provider's) decides."""

    def __init__(self, sampler: Any, sink: Callable[[Span], None] | None) -> None:
        self.sink = sink
        self.sampler = sampler
        described = str(sampler.get_description()) if sampler is not None else ""
        from opentelemetry.sdk.trace import sampling

        self.mode = {
            sampling.DEFAULT_ON.get_description(): PARENT,  # type: ignore[no-untyped-call,unused-ignore]
            sampling.ALWAYS_ON.get_description(): ALWAYS,
            sampling.ALWAYS_OFF.get_description(): NEVER,
            "": PARENT,
        }.get(described, ASK)

    def open(
        self,
        name: str,
        kind: SpanKind,
        remote: SpanContext | None,
        attrs: Attrs,
        extra: list[tuple[str, Any]] | None = None,
        *,
        leaf: bool = False,
    ) -> Any:
        """A started span and the token that makes it current (hand both to `close`).
        `attrs` is a tuple made once per combination (its encoding is kept), `extra` the
        span's own attributes; a `leaf` (a store call, a request to the peer: nothing runs
        under it that starts a span) is not made current."""
        if _VAR is not None:  # the current span, read directly (None: no span)
            current = _VAR.get()
            parent = current.get(_KEY)
        else:
            current, parent = None, trace.get_current_span()
        if remote is not None:
            parent = remote
        if type(parent) is Span:
            trace_id, parent_id, flags = parent.trace_id, parent.span_id, parent.flags
            state, is_remote = parent.state, False
        else:
            trace_id, parent_id, flags, state, is_remote = _under(parent)
        span_id = 0
        while not span_id:
            span_id = _bits(64)
        mode = self.mode
        if mode == ALWAYS:
            flags = 1
        elif mode == NEVER:
            flags = 0
        elif mode == ASK:
            flags, state = self._ask(parent, trace_id, name, kind, (*attrs, *(extra or ())))
        span = Span(
            name,
            kind,
            trace_id,
            span_id,
            parent_id,
            is_remote,
            flags,
            state,
            attrs,
            extra,
            self.sink if flags else None,
        )
        if leaf:
            return span, None
        if _VAR is not None:  # set directly, as `attach` would (two spans a prompt)
            return span, _VAR.set(_Context({**current, _KEY: span}))
        return span, otel_context.attach(_in_context(span))

    def _ask(
        self, parent: Any, trace_id: int, name: str, kind: SpanKind, attrs: Attrs
    ) -> tuple[int, TraceState]:
        if parent is None:
            parent = trace.INVALID_SPAN
        elif type(parent) is SpanContext:
            parent = trace.NonRecordingSpan(parent)
        got = self.sampler.should_sample(
            _in_context(parent), trace_id, name, kind, dict(attrs), None
        )
        sampled = 1 if got.decision.is_sampled() else 0
        return sampled, got.trace_state or _NO_STATE

    @staticmethod
    def close(opened: Any) -> None:
        """End the span `open` started (`Span.end`, inline) and leave its context."""
        span, token = opened
        if token is not None:
            if _VAR is None:
                otel_context.detach(token)
            else:
                try:
                    _VAR.reset(token)
                except ValueError:  # made in another context (never by the runtime's hooks)
                    log.debug("a span's context was left from another context")
        if not span.end_ns:
            span.end_ns = _time()
            sink = span.sink
            if sink is not None:
                sink(span)


# ---- sinks ----------------------------------------------------------------------------
def readable(span: Span, resource: Any) -> Any:
    """`span` as the SDK's ReadableSpan (for an SDK exporter or span processor)."""
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    parent = None
    if span.parent_id:
        parent = SpanContext(
            span.trace_id, span.parent_id, span.remote, TraceFlags(span.flags), span.state
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


def encoded(span: Span) -> bytes:
    """`span` as a framed OTLP `Span` (encode.py)."""
    return encoded_batch([span])[0]


# a span's name, kind and fixed attributes, encoded once per combination: (its attribute
# tuple, its kind, the bytes), keyed by the name and the tuple's identity
_shapes: dict[tuple[str, int], tuple[Attrs, SpanKind, bytes]] = {}
_SHORT, _LONG = 0x80, 0x4000  # a length under these takes one varint byte, two


def _shape(name: str, kind: SpanKind, attrs: Attrs) -> tuple[Attrs, SpanKind, bytes]:
    found = (
        attrs,
        kind,
        encode.field(5, name.encode())
        + encode.KIND[KINDS.get(kind, 1)]
        + (encode.attributes(9, attrs) if attrs else b""),
    )
    if len(_shapes) >= encode.MAX_CACHED:
        _shapes.clear()
    _shapes[(name, id(attrs))] = found  # the tuple is held: its id is not reused
    return found


def encoded_batch(batch: Sequence[Span]) -> list[bytes]:
    """Each span as a framed OTLP `Span` (field 2 of its ScopeSpans), in one loop: the
    shape's bytes and each attribute pair's are made once, the ids and times packed by
    one struct each."""
    out: list[bytes] = []
    shapes, pairs, pair = _shapes, encode.PAIRS, encode.key_value
    with_parent, root, times = encode.IDS_PARENT.pack, encode.IDS.pack, encode.TIMES.pack
    half, local, from_peer = encode.HALF, encode.LOCAL, encode.FROM_PEER
    for s in batch:
        attrs, kind, name = s.attrs, s.kind, s.name
        shape = shapes.get((name, id(attrs)))
        if shape is None or shape[0] is not attrs or shape[1] is not kind:
            shape = _shape(name, kind, attrs)
        tid, pid = s.trace_id, s.parent_id
        if pid:
            parts = [with_parent(0x0A10, tid >> 64, tid & half, 0x1208, s.span_id, 0x2208, pid)]
        else:
            parts = [root(0x0A10, tid >> 64, tid & half, 0x1208, s.span_id)]
        state = s.state
        if state is not _NO_STATE and state:
            parts.append(encode.field(3, state.to_header().encode()))
        parts.append(shape[2])
        parts.append(times(0x39, s.start, 0x41, s.end_ns))
        extra = s.extra
        if extra:
            for key, value in extra:
                parts.append(pairs.get((9, key, type(value), value)) or pair(9, key, value))
        parts.append(encode.status(s.code, s.message))
        parts.append(from_peer if pid and s.remote else local)
        body = b"".join(parts)
        n = len(body)
        if _SHORT <= n < _LONG:
            out.append(b"\x12" + bytes((n & 0x7F | 0x80, n >> 7)) + body)
        else:
            out.append(b"\x12" + encode.varint(n) + body)
    return out


class SdkSpans:
    """A batch of spans handed to an SDK exporter as its ReadableSpans (the console)."""

    def __init__(self, exporter: Any, resource: Any) -> None:
        self.exporter = exporter
        self.resource = resource

    def __call__(self, batch: Sequence[Span]) -> None:
        self.exporter.export([readable(s, self.resource) for s in batch])

    def shutdown(self) -> None:
        self.exporter.shutdown()


class OtlpSpans(SdkSpans):
    """A batch of spans as one OTLP/HTTP request, sent by the SDK exporter's HTTP client
    (its endpoint, headers, TLS, compression, retries: the `OTEL_EXPORTER_OTLP_*`
    variables); an exporter without that client is given the SDK's spans."""

    def __init__(self, exporter: Any, resource: Any) -> None:
        super().__init__(exporter, resource)
        self.client = getattr(exporter, "_client", None)
        if not callable(getattr(self.client, "export", None)):
            self.client = None
        self.head = encode.resource(resource.attributes), encode.scope(SCOPE, None)

    def __call__(self, batch: Sequence[Span]) -> None:
        if self.client is None:
            super().__call__(batch)
            return
        data = encode.traces(*self.head, encoded_batch(batch))
        got = self.client.export(data)
        if not getattr(got, "success", True):
            log.warning("OTLP: %d spans not exported (%s)", len(batch), got.reason)


class Batch:
    """Ended spans queued on the event loop (a deque: no lock), exported from a thread
    every `delay` seconds or as soon as a batch is full (`OTEL_BSP_*`), and at stop."""

    def __init__(self, exports: list[Any], delay: float, max_queue: int, max_batch: int) -> None:
        self.exports = exports
        self.delay = delay
        self.max_queue = max_queue
        self.max_batch = max_batch
        self.queue: collections.deque[Span] = collections.deque()
        self.dropped = 0
        self.wake = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="acp-otel-spans", daemon=True)
        self.thread.start()
        atexit.register(self.stop)

    def __call__(self, span: Span) -> None:
        queue = self.queue
        queued = len(queue)
        if queued >= self.max_queue:
            self.dropped += 1
            return
        queue.append(span)
        if queued == self.max_batch - 1:  # once per batch: the thread takes it whole
            self.wake.set()

    def _run(self) -> None:
        while not self.stopping:
            full = self.wake.wait(self.delay)  # else the delay passed: everything goes
            self.wake.clear()
            self.drain(everything=not full)

    def drain(self, everything: bool = True) -> None:
        """Export the queue in batches: only full ones when a batch filled up (the rest
        waits for the delay or the next full batch: no request for a handful of spans)."""
        queue, size = self.queue, self.max_batch
        while len(queue) >= size or (everything and queue):
            batch: list[Span] = []
            with_more = True
            while with_more and len(batch) < size:
                try:
                    batch.append(queue.popleft())
                except IndexError:
                    with_more = False
            for export in self.exports:
                try:
                    export(batch)
                except Exception as exc:  # noqa: BLE001 - an exporter's failure: never the agent's
                    log.warning("spans not exported: %s: %s", type(exc).__name__, exc)
        if self.dropped:
            dropped, self.dropped = self.dropped, 0
            log.warning("%d spans dropped: the queue (OTEL_BSP_MAX_QUEUE_SIZE) was full", dropped)

    def stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        self.wake.set()
        self.thread.join(timeout=max(self.delay, 5.0))
        self.drain()
        for export in self.exports:
            try:
                export.shutdown()
            except Exception as exc:  # noqa: BLE001 - stopping: nothing more to do
                log.debug("span exporter shutdown: %s", exc)
        atexit.unregister(self.stop)


class Processors:
    """Each ended span handed at once, as a ReadableSpan, to the span processors of a
    program's own SDK tracer provider (its exporters, e.g. the SDK's in-memory one)."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.processor = getattr(provider, "_active_span_processor", None)
        if self.processor is None:
            log.warning("the tracer provider is not the SDK's: the runtime's spans are not kept")

    def __call__(self, span: Span) -> None:
        if self.processor is not None:
            self.processor.on_end(readable(span, self.provider.resource))
