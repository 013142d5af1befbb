"""Telemetry on: the OpenTelemetry SDK's providers (the environment's, or a program's own),
the runtime's spans and instruments, pydantic-ai's instrumentation under them, the W3C
trace context in and out.  Imported only when `observe.configure` turns telemetry on (the
`otel` extra: opentelemetry-sdk, the OTLP exporter, the Prometheus reader)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("acp.runtime.observe")

W3C = TraceContextTextMapPropagator()
REQUEST_CANCELLED = -32800
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603
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


def _error_code(exc: BaseException) -> int:
    """The JSON-RPC code an exception is answered with (an RpcError's own, else -32603)."""
    if isinstance(exc, asyncio.CancelledError):
        return REQUEST_CANCELLED
    code = getattr(exc, "code", None)
    return code if type(code) is int and hasattr(exc, "to_wire") else INTERNAL_ERROR


def _error_name(exc: BaseException) -> str | None:
    data = getattr(exc, "data", None)
    name = data.get("name") if type(data) is dict else None
    return name if type(name) is str else None


def _session(params: Any) -> str | None:
    sid = params.get("sessionId") if type(params) is dict else None
    return sid[:MAX_ID] if type(sid) is str else None


def _meta_context(params: Any) -> Any:
    """The trace context a request's `_meta.traceparent` carries (None: none valid)."""
    meta = params.get("_meta") if type(params) is dict else None
    parent = meta.get("traceparent") if type(meta) is dict else None
    if type(parent) is not str:
        return None
    carrier = {"traceparent": parent}
    state = meta.get("tracestate")  # type: ignore[union-attr]
    if type(state) is str:
        carrier["tracestate"] = state
    ctx = W3C.extract(carrier)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


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


_OPS: dict[Any, str] = {}  # a `durably` lambda's code -> the store method it calls


def _store_op(op: Any, calls: Any) -> str:
    """The store method a `durably` call runs (its lambda names one of the store's
    `calls`), else `call`; found once per lambda (its code object, shared by every call of
    the line that makes it)."""
    code = getattr(op, "__code__", None)
    found = _OPS.get(code)
    if found is None:
        found = next((str(n) for n in getattr(code, "co_names", ()) if n in calls), "call")
        if code is not None and len(_OPS) < MAX_CACHED:
            _OPS[code] = found
    return found


def _names(variable: str) -> list[str]:
    """The exporters an `OTEL_*_EXPORTER` variable names; unset: OTLP when an endpoint is
    given for it, else none."""
    raw = os.environ.get(variable, "").strip().lower()
    if not raw:
        signal = "TRACES" if "TRACES" in variable else "METRICS"
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
            f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"
        )
        return ["otlp"] if endpoint else []
    return [n.strip() for n in raw.split(",") if n.strip() and n.strip() != "none"]


def _tracer_provider() -> Any:
    """The environment's tracer provider (None: no trace exporter named)."""
    names = _names("OTEL_TRACES_EXPORTER")
    if not names:
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=Resource.create())  # OTEL_TRACES_SAMPLER applies
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":  # stderr: stdout is the protocol on stdio
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
        else:
            log.warning("OTEL_TRACES_EXPORTER: %r is not supported (otlp, console, none)", name)
    return provider


def _meter_provider() -> tuple[Any, bool]:
    """The environment's meter provider (None: no metrics exporter named), and whether it
    has a Prometheus reader (`/metrics` on an HTTP agent)."""
    names = _names("OTEL_METRICS_EXPORTER")
    if not names:
        return None, False
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        MetricReader,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.resources import Resource

    readers: list[MetricReader] = []
    prometheus = False
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        elif name == "prometheus":
            from opentelemetry.exporter.prometheus import PrometheusMetricReader

            readers.append(PrometheusMetricReader())
            prometheus = True
        elif name == "console":
            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter(out=sys.stderr)))
        else:
            log.warning(
                "OTEL_METRICS_EXPORTER: %r is not supported (otlp, prometheus, console, none)", name
            )
    # exemplars (a sampled span's id beside a histogram's value) cost more than the value
    # itself: off unless OTEL_METRICS_EXEMPLAR_FILTER asks for them
    exemplars = None
    if not os.environ.get("OTEL_METRICS_EXEMPLAR_FILTER"):
        from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter

        exemplars = AlwaysOffExemplarFilter()
    provider = MeterProvider(
        resource=Resource.create(), metric_readers=readers, exemplar_filter=exemplars
    )
    return provider, prometheus


def _instrument_models(tracer_provider: Any, meter_provider: Any, content: bool) -> None:
    """pydantic-ai's own spans and metrics (model requests, tools, token usage by model),
    under the turn's span; the prompt and messages only with `content`.  Called at the
    first turn of a process that imported pydantic-ai (an agent without a model never
    imports it)."""
    pydantic_ai = sys.modules["pydantic_ai"]  # imported by the model room, never here
    pydantic_ai.Agent.instrument_all(
        _without_conversation(pydantic_ai.InstrumentationSettings)(
            tracer_provider=tracer_provider or trace.NoOpTracerProvider(),
            meter_provider=meter_provider or metrics.NoOpMeterProvider(),
            include_content=content,
            include_binary_content=content,
        )
    )


def _without_conversation(settings: Any) -> Any:
    """pydantic-ai's `InstrumentationSettings` recording no message list without content.

    Without content pydantic-ai still serializes the conversation's shape (each message's
    role, part kinds, tool names and call ids): the whole history into each model request
    span's `gen_ai.input.messages` (from scratch at a run's first request: the history is
    read back from the session each turn), the answer into `gen_ai.output.messages`, and
    the whole history twice more as the run ends (`pydantic_ai.all_messages`, and a check
    of its per-run cache).  Every turn re-records the session's whole history: the
    biggest part of what telemetry cost a model turn (bench/README.md, "Observing").  The
    GenAI semantic conventions make those attributes opt-in (they are content), so without
    content: none on a model request span, and an empty list as the run's
    `pydantic_ai.all_messages`.  The request's model, token usage, finish reasons and
    response id, the tool definitions, and the spans themselves are pydantic-ai's as
    before; with content (`ACP_TRACE_CONTENT=1`) everything is pydantic-ai's own."""

    class Settings(settings):  # type: ignore[misc]  # pydantic-ai's, found at run time
        def handle_messages(self, *args: Any, **kwargs: Any) -> None:
            if self.include_content:
                super().handle_messages(*args, **kwargs)

        def messages_to_otel_messages(self, *args: Any, **kwargs: Any) -> Any:
            if self.include_content:
                return super().messages_to_otel_messages(*args, **kwargs)
            return []

    return Settings


def _uninstrument_models() -> None:
    agent = sys.modules.get("pydantic_ai")
    if agent is not None:
        agent.Agent.instrument_all(False)


class Telemetry:
    """The tracer, the instruments, and what `observe`'s calls do with them."""

    def __init__(
        self, tracer_provider: Any, meter_provider: Any, gauges: Gauges, *, owned: bool
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.owned = owned  # made from the environment: flushed and shut down at stop
        self.prometheus = False
        self.models = False  # pydantic-ai instrumented (at the first turn that can use it)
        self.content = os.environ.get("ACP_TRACE_CONTENT", "").strip() == "1"
        self.tracer = (tracer_provider or trace.NoOpTracerProvider()).get_tracer("acp.runtime")
        meter = (meter_provider or metrics.NoOpMeterProvider()).get_meter("acp.runtime")
        self.instruments: dict[str, Any] = {}
        # per instrument its `add` or `record`, looked up once (not per call)
        self.recorders: dict[str, Callable[..., None]] = {}
        for name, (kind, unit, text, buckets) in INSTRUMENTS.items():
            if kind == "counter":
                self.instruments[name] = meter.create_counter(name, unit, text)
            elif kind == "updown":
                self.instruments[name] = meter.create_up_down_counter(name, unit, text)
            else:
                self.instruments[name] = meter.create_histogram(
                    name, unit, text, explicit_bucket_boundaries_advisory=list(buckets)
                )
            instrument = self.instruments[name]
            self.recorders[name] = instrument.record if kind == "histogram" else instrument.add
        self.request_duration = self.recorders["acp.request.duration"]
        self.turn_duration = self.recorders["acp.turn.duration"]
        self.store_duration = self.recorders["acp.store.duration"]
        self.calls = self.recorders["acp.calls"]
        self.queued = self.recorders["acp.prompts.queued"]
        # label sets and span attributes built once and handed to the SDK again
        self.labels: dict[tuple[Any, ...], dict[str, str]] = {}
        self.connections: dict[tuple[Any, ...], dict[str, Any]] = {}
        for name, (unit, text) in GAUGES.items():
            meter.create_observable_gauge(name, [self._reader(gauges, name)], unit, text)

    @classmethod
    def start(cls, tracer_provider: Any, meter_provider: Any, gauges: Gauges) -> Telemetry:
        owned = tracer_provider is None and meter_provider is None
        prometheus = False
        if owned:
            tracer_provider = _tracer_provider()
            meter_provider, prometheus = _meter_provider()
            if tracer_provider is not None:  # the MCP SDK and others join the same traces
                trace.set_tracer_provider(tracer_provider)
            if meter_provider is not None:
                metrics.set_meter_provider(meter_provider)
        telemetry = cls(tracer_provider, meter_provider, gauges, owned=owned)
        telemetry.prometheus = prometheus
        return telemetry

    def stop(self) -> None:
        if self.models:
            _uninstrument_models()
        if self.owned:
            for provider in (self.tracer_provider, self.meter_provider):
                if provider is not None:
                    with contextlib.suppress(Exception):
                        provider.shutdown()

    @staticmethod
    def _reader(gauges: Gauges, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def read(options: CallbackOptions) -> Iterable[Observation]:
            entries = gauges.get(name, [])
            total = 0.0
            alive = []
            for ref, value in entries:
                owner = ref()
                if owner is not None:
                    alive.append((ref, value))
                    total += value(owner)
            entries[:] = alive
            return [Observation(total)]

        return read

    # ---- metrics ---------------------------------------------------------------
    def metric(self, name: str, value: float, labels: dict[str, Any]) -> None:
        self.recorders[name](value, {k: str(v) for k, v in labels.items()})

    def _labels(self, key: tuple[Any, ...], make: Callable[[], dict[str, str]]) -> dict[str, str]:
        """The label set `key` names, made once (the SDK copies what it is given)."""
        found = self.labels.get(key)
        if found is None:
            found = make()
            if len(self.labels) < MAX_CACHED:
                self.labels[key] = found
        return found

    def exposition(self) -> tuple[bytes, str] | None:
        if not self.prometheus:
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
    # Each kind opens its span with `_open` and ends it with `_close` in a `finally`: the
    # SDK's `start_span` and one context attach (`start_as_current_span` wraps the same
    # in two generator context managers and `use_span`'s handlers, per span).
    def traced(self, kind: str, work: Awaitable[Any], attrs: dict[str, Any]) -> Awaitable[Any]:
        return getattr(self, f"_{kind}")(work, attrs)  # type: ignore[no-any-return]

    def _open(self, name: str, kind: SpanKind, context: Any, attrs: dict[str, Any]) -> Any:
        span = self.tracer.start_span(
            name,
            context,
            kind,
            attrs,
            record_exception=False,  # an exception's text may hold anything: its type only
            set_status_on_exception=False,
        )
        return span, otel_context.attach(trace.set_span_in_context(span))

    @staticmethod
    def _close(opened: Any) -> None:
        span, token = opened
        otel_context.detach(token)
        span.end()

    def _connection(self, conn: Any, method: str) -> dict[str, Any]:
        """A served request's attributes but its session: its connection's (transport,
        revision, replica) and its method, built once per combination."""
        about = getattr(conn, "about", None)  # the agent's connections have it
        facts = about() if about is not None else {}
        key = (method, *facts.values())
        found = self.connections.get(key)
        if found is None:
            found = {"rpc.system": "jsonrpc", "rpc.method": method, **facts}
            if len(self.connections) < MAX_CACHED:
                self.connections[key] = found
        return found

    @staticmethod
    def _failed(span: Any, exc: BaseException) -> int:
        code = _error_code(exc)
        span.set_attribute("rpc.jsonrpc.error_code", code)
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        return code

    async def _request(self, work: Awaitable[Any], attrs: dict[str, Any]) -> Any:
        """One JSON-RPC request served (a SERVER span; its duration by method and outcome)."""
        method, params = attrs["method"], attrs.get("params")
        values = self._connection(attrs.get("conn"), method)
        sid = _session(params)
        if sid is not None:
            values = {**values, "acp.session_id": sid}
        started = time.perf_counter()
        outcome, code = "ok", 0
        opened = self._open(method, SpanKind.SERVER, _meta_context(params), values)
        try:
            return await work
        except BaseException as exc:
            code = self._failed(opened[0], exc)
            outcome = "cancelled" if code == REQUEST_CANCELLED else "error"
            raise
        finally:
            name = method if code != METHOD_NOT_FOUND else "unknown"
            labels = self._labels(
                ("request", name, outcome, code),
                lambda: {"method": name, "outcome": outcome, "code": str(code)},
            )
            self.request_duration(time.perf_counter() - started, labels)
            self._close(opened)

    async def _call(self, work: Awaitable[Any], attrs: dict[str, Any]) -> Any:
        """A request sent to the peer (a CLIENT span): its trace context in `_meta`."""
        method, params = attrs["method"], attrs.get("params")
        values: dict[str, Any] = {"rpc.system": "jsonrpc", "rpc.method": method}
        sid = _session(params)
        if sid is not None:
            values["acp.session_id"] = sid
        outcome = "ok"
        opened = self._open(method, SpanKind.CLIENT, None, values)
        try:
            carrier: dict[str, str] = {}
            W3C.inject(carrier)  # nothing when no span is recorded (metrics only)
            if carrier and type(params) is dict:  # the frame is built when `work` starts
                meta = params.get("_meta")
                params["_meta"] = {**meta, **carrier} if type(meta) is dict else carrier
            return await work
        except BaseException as exc:
            code = self._failed(opened[0], exc)
            outcome = "cancelled" if code == REQUEST_CANCELLED else "error"
            raise
        finally:
            self.calls(
                1,
                self._labels(
                    ("call", method, outcome), lambda: {"method": method, "outcome": outcome}
                ),
            )
            self._close(opened)

    async def _turn(self, work: Awaitable[Any], attrs: dict[str, Any]) -> Any:
        """A prompt turn: its stop reason, its duration by stop reason; a model failure
        (the error `model.adapter.model_error` classified) counted by kind."""
        if not self.models and "pydantic_ai" in sys.modules:
            self.models = True
            _instrument_models(self.tracer_provider, self.meter_provider, self.content)
        values = {"acp.session_id": str(attrs.get("session", ""))[:MAX_ID]}
        prompt = attrs.get("prompt")
        if self.content and type(prompt) is list:
            values["acp.prompt.text"] = "".join(
                str(b.get("text", "")) for b in prompt if type(b) is dict
            )
        started = time.perf_counter()
        reason = "error"
        opened = self._open("acp.turn", SpanKind.INTERNAL, None, values)
        try:
            reason = await work
            return reason
        except asyncio.CancelledError:
            reason = "cancelled"
            raise
        except BaseException as exc:
            self._failed(opened[0], exc)
            name = _error_name(exc)
            if name is not None and name.startswith("Model"):
                self.metric("acp.model.errors", 1, {"kind": name})
            raise
        finally:
            stop = str(reason)
            opened[0].set_attribute("acp.stop_reason", stop)
            self.turn_duration(
                time.perf_counter() - started,
                self._labels(("turn", stop), lambda: {"stop_reason": stop}),
            )
            self._close(opened)

    async def _tool(self, work: Awaitable[Any], attrs: dict[str, Any]) -> Any:
        """One MCP tool call (a CLIENT span); failures counted by kind."""
        values = {"mcp.method.name": "tools/call", "gen_ai.tool.name": str(attrs.get("tool"))}
        if attrs.get("server"):
            values["mcp.server"] = str(attrs["server"])
        opened = self._open(f"tools/call {attrs.get('tool')}", SpanKind.CLIENT, None, values)
        span = opened[0]
        try:
            result = await work
        except BaseException as exc:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            self.metric("acp.mcp.errors", 1, {"kind": type(exc).__name__})
            raise
        else:
            if getattr(result, "is_error", False):
                span.set_status(Status(StatusCode.ERROR, "tool error"))
                self.metric("acp.mcp.errors", 1, {"kind": "ToolError"})
            return result
        finally:
            self._close(opened)

    async def _store(self, work: Awaitable[Any], attrs: dict[str, Any]) -> Any:
        """One session store call: its latency by operation (a commit: `save_turn`)."""
        op = _store_op(attrs.get("op"), attrs.get("calls", ()))
        started = time.perf_counter()
        outcome = "ok"
        values = self._labels(("store-span", op), lambda: {"acp.store.op": op})
        opened = self._open(f"store {op}", SpanKind.CLIENT, None, values)
        try:
            return await work
        except BaseException as exc:
            opened[0].set_status(Status(StatusCode.ERROR, type(exc).__name__))
            outcome = "error"
            raise
        finally:
            self.store_duration(
                time.perf_counter() - started,
                self._labels(("store", op, outcome), lambda: {"op": op, "outcome": outcome}),
            )
            self._close(opened)

    async def _queued(self, work: Awaitable[Any], attrs: dict[str, Any]) -> Any:
        """A prompt waiting for its session's turn."""
        queued = self.queued
        queued(1)
        opened = self._open("acp.prompt.queued", SpanKind.INTERNAL, None, {})
        try:
            return await work
        finally:
            self._close(opened)
            queued(-1)
