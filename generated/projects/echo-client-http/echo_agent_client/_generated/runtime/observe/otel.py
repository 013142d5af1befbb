"""Telemetry on: the OpenTelemetry SDK's providers (the environment's, or a program's own),
the runtime's spans and instruments, pydantic-ai's instrumentation under them, the W3C
trace context in and out.  Imported only when `observe.configure` turns telemetry on (the
`otel` extra: opentelemetry-sdk, the OTLP exporter, the Prometheus reader)."""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import sys
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF as _NEVER
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from . import providers, sinks, spans, tally

log = logging.getLogger("acp.runtime.observe")

W3C = TraceContextTextMapPropagator()
_SERVER, _CLIENT, _INTERNAL = SpanKind.SERVER, SpanKind.CLIENT, SpanKind.INTERNAL
REQUEST, CALL, TURN, TOOL, STORE, QUEUED = (
    spans.REQUEST,
    spans.CALL,
    spans.TURN,
    spans.TOOL,
    spans.STORE,
    spans.QUEUED,
)
CANCELLED = spans.REQUEST_CANCELLED
METHOD_NOT_FOUND = -32601
ERROR = 2  # StatusCode.ERROR's value
# the label names of what `fold` records (their values: a key's, after its tag)
_REQUEST, _STORE, _TURN, _CALL = (
    ("method", "outcome", "code"),
    ("op", "outcome"),
    ("stop_reason",),
    ("method", "outcome"),
)
MAX_ID = 128  # characters of a session id kept in an attribute
MAX_CACHED = 1024  # label sets and connection attributes kept ready, at most

_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SLOW = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

# every instrument the runtime records: name -> (kind, unit, description, buckets)
INSTRUMENTS: dict[str, tuple[str, str, str, tuple[float, ...]]] = {
    # requests by method and outcome: this histogram's count (one record a request)
    "acp.request.duration": (
        "histogram",
        "s",
        "JSON-RPC requests served, by method, outcome",
        _FAST,
    ),
    "acp.calls": ("counter", "{request}", "requests sent to the peer, by method and outcome", ()),
    "acp.turn.duration": ("histogram", "s", "prompt turns, by stop reason", _SLOW),
    "acp.prompts.queued": ("updown", "{prompt}", "prompts waiting for their session's turn", ()),
    "acp.model.errors": ("counter", "{error}", "model failures, by kind", ()),
    "acp.mcp.errors": ("counter", "{error}", "MCP tool call failures, by kind", ()),
    "acp.store.duration": ("histogram", "s", "session store calls, by operation", _FAST),
    "acp.lease.moves": ("counter", "{lease}", "sessions whose lease came to this replica", ()),
}
GAUGES = {"acp.sessions.active": ("{session}", "sessions held by this process's connections")}

Gauges = dict[str, list[tuple["weakref.ref[Any]", Callable[[Any], float]]]]


def _session(params: Any) -> str | None:
    sid = params.get("sessionId") if type(params) is dict else None
    return sid[:MAX_ID] if type(sid) is str else None


def _meta_context(meta: Any) -> Any:
    """The span context a request's `_meta` (its `traceparent`) carries (None: none valid)."""
    parent = meta.get("traceparent") if type(meta) is dict else None
    if type(parent) is not str:
        return None
    carrier = {"traceparent": parent}
    state = meta.get("tracestate")
    if type(state) is str:
        carrier["tracestate"] = state
    found = trace.get_current_span(W3C.extract(carrier)).get_span_context()
    return found if found.is_valid else None


def _header_context(headers: Any) -> Any:
    """The trace context of HTTP headers: a mapping, or ASGI's (name, value) byte pairs."""
    carrier: dict[str, str] = {}
    if isinstance(headers, list | tuple):
        for name, value in headers:
            if name in (b"traceparent", b"tracestate"):
                carrier[name.decode()] = value.decode("latin-1")
    else:
        for key in ("traceparent", "tracestate"):
            value = headers.get(key)
            if value is not None:
                carrier[key] = value
    if "traceparent" not in carrier:
        return None
    ctx = W3C.extract(carrier)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def _store_op(op: Any, calls: Any) -> str:
    """The store method a `durably` call runs (its lambda names one of the store's
    `calls`), else `call`."""
    names = getattr(getattr(op, "__code__", None), "co_names", ())
    return next((str(n) for n in names if n in calls), "call")


_MISSING: Any = object()
_COUNT = 2  # the length of a count's point in the tally (a histogram's is longer)


def _measure(s: spans.Span) -> tuple[str, tuple[Any, ...], tuple[str, ...], float] | None:
    """What a span counts: its instrument, the key of its label set (a tag, then the
    labels' values), the labels' names, and the value (None: nothing)."""
    what, key, failure = s.shape.what, s.key, s.failure
    code = failure[2] if failure else 0
    if what == REQUEST:
        name = key if code != METHOD_NOT_FOUND else "unknown"
        outcome = "ok" if not code else "cancelled" if code == CANCELLED else "error"
        seconds = (s.end_ns - s.start) / 1e9
        return "acp.request.duration", (REQUEST, name, outcome, code), _REQUEST, seconds
    if what == STORE:
        outcome = "error" if failure and failure[0] == ERROR else "ok"
        seconds = (s.end_ns - s.start) / 1e9
        return "acp.store.duration", (STORE, key, outcome), _STORE, seconds
    if what == TURN:
        return "acp.turn.duration", (TURN, key), _TURN, (s.end_ns - s.start) / 1e9
    if what == CALL:
        outcome = "ok" if not code else "cancelled" if code == CANCELLED else "error"
        return "acp.calls", (CALL, key, outcome), _CALL, 1
    return None


class Telemetry:
    """The runtime's tracer and tally, and what `observe`'s calls do with them."""

    def __init__(
        self,
        tracer_provider: Any,
        meter_provider: Any,
        gauges: Gauges,
        *,
        owned: bool,
        span_exports: list[Any] | None = None,
        metric_exporters: list[str] | None = None,
        resource: Any = None,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.owned = owned  # made from the environment: flushed and shut down at stop
        self.prometheus: Any = None  # the tally's collector in prometheus_client's registry
        self.models = False  # pydantic-ai instrumented (at the first turn that can use it)
        self.content = os.environ.get("ACP_TRACE_CONTENT", "").strip() == "1"
        self.jobs: list[Any] = []  # what exports, stopped at stop
        self.tally: Any = None
        if meter_provider is not None and not owned:  # a program's: the SDK's instruments
            meter = meter_provider.get_meter("acp.runtime")
            self.tally = tally.Instruments(meter, INSTRUMENTS)
            for name, (unit, text) in GAUGES.items():
                meter.create_observable_gauge(name, [self._reader(gauges, name)], unit, text)
        elif meter_provider is not None:
            self.tally = tally.Tally(INSTRUMENTS, GAUGES, gauges)
            self._export_tally(resource, metric_exporters or [])
        else:
            self.tally = None
        # the spans' shapes (spans.Shape), made once per combination
        self.served: dict[tuple[str, int], tuple[Any, spans.Shape]] = {}  # method, facts
        self.sent: dict[str, spans.Shape] = {}  # by method
        self.stored: dict[int, tuple[Any, spans.Shape]] = {}  # by the `durably` lambda's code
        self.tools: dict[tuple[str, str], spans.Shape] = {}
        self.sessions: dict[str, tuple[tuple[str, Any], ...]] = {}  # an id's attribute
        self.turned = spans.Shape("acp.turn", _INTERNAL, TURN, None, (), "acp.stop_reason")
        self.waiting = spans.Shape("acp.prompt.queued", _INTERNAL, QUEUED)
        self.batch: sinks.Batch | None = None
        self.points: dict[tuple[Any, ...], Any] = {}  # tally points, by shape and key
        self.tracer = self._tracer(tracer_provider, span_exports)
        if isinstance(self.tally, tally.Tally):  # read: what is queued is folded first
            self.tally.before_read = self.batch.take if self.batch is not None else None

    def _tracer(self, provider: Any, exports: list[Any] | None) -> spans.Tracer:
        """Spans sampled as the provider's sampler says (none without a provider: metrics
        only), each folded into the metrics when there are any: at once into a program's
        instruments, 128 at a time into the runtime's tally (sinks.Batch)."""
        fold = self.fold if self.tally is not None else None
        sampler = getattr(provider, "sampler", None) if provider is not None else _NEVER
        if provider is None and fold is None:
            return spans.Tracer(sampler, None)
        if not self.owned:  # a program's provider: its processors take each span
            return spans.Tracer(sampler, sinks.Processors(provider, fold), counted=bool(fold))
        batch = self.batch = sinks.Batch(
            exports or [],
            providers.number("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000,
            int(providers.number("OTEL_BSP_MAX_QUEUE_SIZE", 2048)),
            int(providers.number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)),
            fold,
        )
        self.jobs.append(batch)
        return spans.Tracer(sampler, batch, counted=bool(fold))

    def _export_tally(self, resource: Any, names: list[str]) -> None:
        interval = providers.number("OTEL_METRIC_EXPORT_INTERVAL", 60000) / 1000
        preference = os.environ.get("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "")
        if preference.strip().lower() not in ("", "cumulative"):
            log.warning("the runtime's own metrics are cumulative (%s is not)", preference)
        for name in names:
            if name == "otlp":
                from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                    OTLPMetricExporter,
                )

                exporter = providers.direct(OTLPMetricExporter(session=providers.session()))
                otlp = tally.OtlpMetrics(self.tally, exporter, resource)
                self.jobs.append(tally.Periodic(otlp, interval, "acp-otel-metrics"))
            elif name == "console":
                console = tally.ConsoleMetrics(self.tally)
                self.jobs.append(tally.Periodic(console, interval, "acp-otel-metrics"))
            elif name == "prometheus":
                from prometheus_client import REGISTRY

                self.prometheus = tally.PrometheusCollector(self.tally)
                REGISTRY.register(self.prometheus)

    @classmethod
    def start(cls, tracer_provider: Any, meter_provider: Any, gauges: Gauges) -> Telemetry:
        owned = tracer_provider is None and meter_provider is None
        if not owned:
            return cls(tracer_provider, meter_provider, gauges, owned=False)
        tracer_provider, exports = providers.tracer_provider()
        meter_provider, names, resource = providers.meter_provider()
        if tracer_provider is not None:  # the MCP SDK and others join the same traces
            trace.set_tracer_provider(tracer_provider)
        if meter_provider is not None:
            metrics.set_meter_provider(meter_provider)
        return cls(
            tracer_provider,
            meter_provider,
            gauges,
            owned=True,
            span_exports=exports,
            metric_exporters=names,
            resource=resource,
        )

    def stop(self) -> None:
        if self.models:
            providers.uninstrument_models()
        for job in self.jobs:
            with contextlib.suppress(Exception):
                job.stop()
        if self.prometheus is not None:
            from prometheus_client import REGISTRY

            with contextlib.suppress(KeyError):
                REGISTRY.unregister(self.prometheus)
        if self.owned:
            for provider in (self.tracer_provider, self.meter_provider):
                if provider is not None:
                    with contextlib.suppress(Exception):
                        provider.shutdown()

    @staticmethod
    def _reader(gauges: Gauges, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def read(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(tally.gauge_total(gauges, name))]

        return read

    # ---- metrics ---------------------------------------------------------------
    def metric(self, name: str, value: float, labels: dict[str, Any]) -> None:
        if self.tally is not None:
            self.tally.metric(name, value, {k: str(v) for k, v in labels.items()})

    def fold(self, groups: list[list[spans.Span]]) -> None:
        """The metrics of ended spans (every one, sampled or not), in groups of one shape,
        key and failure (sinks.taken): requests by method and outcome, calls, turns by stop
        reason and model failures by kind, MCP failures, store latency by operation.
        Durations are the spans' own.  Into the runtime's tally, a group that did not fail
        is counted at once into its point (found once): its durations sorted, a bucket's
        count is where the bucket's bound falls in them."""
        kept = self.tally
        if not isinstance(kept, tally.Tally):  # a program's instruments
            for group in groups:
                for s in group:
                    self._fold(s)
            return
        with kept.lock:
            for group in groups:
                first = group[0]
                if first.failure is not None:  # failed: one at a time
                    for s in group:
                        self._fold(s)
                    continue
                key = (first.shape, first.key, None)
                found = self.points.get(key, _MISSING)
                if found is _MISSING:
                    found = self._point(key, first)
                if found is None:  # nothing counted (a tool call that did not fail)
                    continue
                point, bounds = found
                if bounds is None:  # a count
                    point[1] += len(group)
                    continue
                values = [s.end_ns - s.start for s in group]  # ns
                values.sort()  # a bucket's count: where its bound falls in them
                point[1] += len(values)
                point[2] += sum(values) / 1e9
                point[3] = min(point[3], values[0] / 1e9)
                point[4] = max(point[4], values[-1] / 1e9)
                buckets, below = point[5], 0
                for at, bound in enumerate(bounds):  # (a bucket: above the last bound, to its own)
                    upto = bisect.bisect_right(values, bound, below)
                    buckets[at] += upto - below
                    below = upto
                buckets[-1] += len(values) - below

    def _point(self, key: tuple[Any, ...], s: spans.Span) -> Any:
        """The tally's point the spans of `key` (a shape and key, no failure) count into,
        and a histogram's bounds in ns (None: a count); None when they count nothing."""
        measured = _measure(s)
        found = None
        if measured is not None:
            point = self.tally.point(*measured[:3])
            bounds = [round(b * 1e9) for b in point[6]] if len(point) > _COUNT else None
            found = (point, bounds)
        if len(self.points) >= MAX_CACHED:
            self.points.clear()
        self.points[key] = found  # (the shape is held: its hash is its id)
        return found

    def _fold(self, s: spans.Span) -> None:
        """One span's metrics, recorded through the tally's (or instruments') calls."""
        measured = _measure(s)
        if measured is not None:
            name, key, names, value = measured
            if INSTRUMENTS[name][0] == "histogram":
                self.tally.record(name, value, key, names)
            else:
                self.tally.add(name, value, key, names)
        failure, what = s.failure, s.shape.what
        if failure and failure[0] == ERROR and what == TURN:
            kind = dict(s.extra or ()).get("error.type")
            if type(kind) is str and kind.startswith("Model"):
                self.metric("acp.model.errors", 1, {"kind": kind})
        elif what == TOOL and s.key is not None:
            self.metric("acp.mcp.errors", 1, {"kind": s.key})

    def exposition(self) -> tuple[bytes, str] | None:
        if self.prometheus is None:
            return None
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

        return generate_latest(REGISTRY), CONTENT_TYPE_LATEST

    # ---- trace context -----------------------------------------------------------
    @contextlib.contextmanager
    def parent(self, headers: Any) -> Iterator[None]:
        ctx = _header_context(headers)
        if ctx is None:
            yield
            return
        token = otel_context.attach(ctx)
        try:
            yield
        finally:
            otel_context.detach(token)

    # ---- spans -------------------------------------------------------------------
    # Each kind starts a span (a `with` block around its work ends it: spans.Span) of a
    # shape made once per combination.
    def _served(self, method: str, facts: Any) -> spans.Shape:
        """A served request's shape, made (`request` found none for these `facts`: its
        connection's transport, revision and replica, the same tuple while they hold)."""
        attrs = (("rpc.system", "jsonrpc"), ("rpc.method", method), *facts)
        shape = spans.Shape(method, _SERVER, REQUEST, method, attrs)
        if len(self.served) >= MAX_CACHED:
            self.served.clear()
        self.served[method, id(facts)] = (facts, shape)  # the facts are held: their id is theirs
        return shape

    def _session(self, sid: str) -> tuple[tuple[str, Any], ...]:
        found = self.sessions.get(sid)
        if found is None:
            if len(self.sessions) >= MAX_CACHED:
                self.sessions.clear()
            found = self.sessions[sid] = (("acp.session_id", sid[:MAX_ID]),)
        return found

    def _own(self, sid: Any) -> tuple[tuple[str, Any], ...] | None:
        """A session id's attribute (None: not a string)."""
        return self._session(sid) if type(sid) is str else None

    def request(self, method: str, params: Any, conn: Any) -> spans.Span:
        """One JSON-RPC request served (a SERVER span; its duration by method and outcome):
        the trace context of its `_meta.traceparent` is its parent when it has one."""
        about = getattr(conn, "about", None)  # the agent's connections have it
        facts = about() if about is not None else ()
        try:
            known, shape = self.served[method, id(facts)]
        except KeyError:
            known = _MISSING
        if known is not facts:  # (none yet, or an id reused by other facts)
            shape = self._served(method, facts)
        if type(params) is not dict:
            return self.tracer.start(shape)
        own: tuple[tuple[str, Any], ...] | None
        try:  # (the session's attribute, made once)
            own = self.sessions[params["sessionId"]]
        except (KeyError, TypeError):
            own = self._own(params.get("sessionId"))
        meta = params.get("_meta")
        return self.tracer.start(shape, None if meta is None else _meta_context(meta), own)

    def call(self, method: str, params: Any) -> spans.Span:
        """A request sent to the peer (a CLIENT span): its trace context in `_meta`."""
        shape = self.sent.get(method)
        if shape is None:
            attrs = (("rpc.system", "jsonrpc"), ("rpc.method", method))
            shape = spans.Shape(method, _CLIENT, CALL, method, attrs, leaf=True)
            if len(self.sent) < MAX_CACHED:
                self.sent[method] = shape
        own = self._own(params.get("sessionId")) if type(params) is dict else None
        span = self.tracer.start(shape, None, own)
        if span.flags and self.tracer.exports and type(params) is dict:  # the frame: later
            ids = f"{span.trace_id:032x}-{span.span_id:016x}-{span.flags:02x}"
            carrier = {"traceparent": f"00-{ids}"}
            if span.state:
                carrier["tracestate"] = span.state
            meta = params.get("_meta")
            params["_meta"] = {**meta, **carrier} if type(meta) is dict else carrier
        return span

    def turn(self, session: Any, prompt: Any) -> spans.Span:
        """A prompt turn: its stop reason (`set_stop_reason`), its duration by stop reason;
        a model failure (the error `model.adapter.model_error` classified) counted by kind."""
        if not self.models and "pydantic_ai" in sys.modules:
            self.models = True
            providers.instrument_models(self.tracer_provider, self.meter_provider, self.content)
        try:
            own = self.sessions[session]
        except (KeyError, TypeError):
            own = self._session(str(session))
        if self.content and type(prompt) is list:
            text = "".join(str(b.get("text", "")) for b in prompt if type(b) is dict)
            own = (*own, ("acp.prompt.text", text))
        return self.tracer.start(self.turned, None, own)

    def tool(self, tool: Any, server: Any) -> spans.Span:
        """One MCP tool call (a CLIENT span; `set_tool_result`); failures counted by kind."""
        key = (str(tool), str(server or ""))
        shape = self.tools.get(key)
        if shape is None:
            attrs: spans.Attrs = (("mcp.method.name", "tools/call"), ("gen_ai.tool.name", key[0]))
            if server:
                attrs = (*attrs, ("mcp.server", key[1]))
            shape = spans.Shape(f"tools/call {key[0]}", _CLIENT, TOOL, None, attrs)
            if len(self.tools) < MAX_CACHED:
                self.tools[key] = shape
        return self.tracer.start(shape)

    def store(self, op: Any, calls: Any) -> spans.Span:
        """One session store call: its latency by operation (a commit: `save_turn`)."""
        code = getattr(op, "__code__", None)
        try:  # (by its id: a code object's hash is of all it holds)
            known, shape = self.stored[id(code)]
        except KeyError:
            known = _MISSING
        if known is not code:
            name = _store_op(op, calls)
            attrs = (("acp.store.op", name),)
            shape = spans.Shape(f"store {name}", _CLIENT, STORE, name, attrs, leaf=True)
            if len(self.stored) < MAX_CACHED:
                self.stored[id(code)] = (code, shape)  # (the code is held: its id is its own)
        return self.tracer.start(shape)

    def queued(self) -> contextlib.AbstractContextManager[Any]:
        """A prompt waiting for its session's turn (counted while it waits)."""
        return self._queued()

    @contextlib.contextmanager
    def _queued(self) -> Iterator[None]:
        self.metric("acp.prompts.queued", 1, {})
        try:
            with self.tracer.start(self.waiting):
                yield
        finally:
            self.metric("acp.prompts.queued", -1, {})
