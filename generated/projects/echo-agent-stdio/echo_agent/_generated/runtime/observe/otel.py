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
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from . import providers, spans, tally

log = logging.getLogger("acp.runtime.observe")

W3C = TraceContextTextMapPropagator()
_SERVER, _CLIENT, _INTERNAL = SpanKind.SERVER, SpanKind.CLIENT, SpanKind.INTERNAL
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
        self.tracer = self._tracer(tracer_provider, span_exports)
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
            self.tally = _Nothing()
        self.record = self.tally.record
        self.add = self.tally.add
        # span attributes built once per combination
        self.connections: dict[tuple[Any, ...], spans.Attrs] = {}
        self.store_attrs: dict[str, spans.Attrs] = {}
        self.kinds: dict[str, Callable[..., Awaitable[Any]]] = {
            kind: getattr(self, f"_{kind}")
            for kind in ("request", "call", "turn", "tool", "store", "queued")
        }

    def _tracer(self, provider: Any, exports: list[Any] | None) -> spans.Tracer:
        sampler = getattr(provider, "sampler", None)
        if provider is None:  # metrics only: no span kept, no trace context sent
            return spans.Tracer(None, None)
        if exports is None:  # a program's provider: its processors take each span
            return spans.Tracer(sampler, spans.Processors(provider))
        batch = spans.Batch(
            exports,
            providers.number("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000,
            int(providers.number("OTEL_BSP_MAX_QUEUE_SIZE", 2048)),
            int(providers.number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)),
        )
        self.jobs.append(batch)
        return spans.Tracer(sampler, batch)

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

                exporter = OTLPMetricExporter(session=providers.session())
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
        self.tally.metric(name, value, {k: str(v) for k, v in labels.items()})

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
    # Each kind (`kinds`, called by `observe.traced`) opens its span with the tracer's
    # `open` and ends it with `close` in a `finally`; attributes are tuples made once per
    # combination.
    def _connection(self, conn: Any, method: str) -> spans.Attrs:
        """A served request's attributes but its session: its connection's (transport,
        revision, replica) and its method, built once per combination."""
        about = getattr(conn, "about", None)  # the agent's connections have it
        facts = about() if about is not None else {}
        key = (method, *facts.values())
        found = self.connections.get(key)
        if found is None:
            found = (("rpc.system", "jsonrpc"), ("rpc.method", method), *facts.items())
            if len(self.connections) < MAX_CACHED:
                self.connections[key] = found
        return found

    @staticmethod
    def _failed(span: Any, exc: BaseException) -> int:
        code = _error_code(exc)
        span.set_attribute("rpc.jsonrpc.error_code", code)
        span.set_status(StatusCode.ERROR, type(exc).__name__)
        return code

    async def _request(self, work: Awaitable[Any], attrs: dict[str, Any]) -> Any:
        """One JSON-RPC request served (a SERVER span; its duration by method and outcome)."""
        method, params = attrs["method"], attrs.get("params")
        values = self._connection(attrs.get("conn"), method)
        sid = _session(params)
        meta = params.get("_meta") if type(params) is dict else None
        started = time.perf_counter()
        outcome, code = "ok", 0
        opened = self.tracer.open(
            method,
            _SERVER,
            None if meta is None else _meta_context(meta),
            values,
            None if sid is None else [("acp.session_id", sid)],
        )
        try:
            return await work
        except BaseException as exc:
            code = self._failed(opened[0], exc)
            outcome = "cancelled" if code == REQUEST_CANCELLED else "error"
            raise
        finally:
            name = method if code != METHOD_NOT_FOUND else "unknown"
            self.record(
                "acp.request.duration",
                time.perf_counter() - started,
                ("request", name, outcome, code),
                lambda: {"method": name, "outcome": outcome, "code": str(code)},
            )
            self.tracer.close(opened)

    async def _call(self, work: Awaitable[Any], attrs: dict[str, Any]) -> Any:
        """A request sent to the peer (a CLIENT span): its trace context in `_meta`."""
        method, params = attrs["method"], attrs.get("params")
        values = self._connection(None, method)
        sid = _session(params)
        outcome = "ok"
        own = None if sid is None else [("acp.session_id", sid)]
        opened = self.tracer.open(method, _CLIENT, None, values, own, leaf=True)
        try:
            span = opened[0]
            if self.tracer.sink is not None and type(params) is dict:  # the frame: later
                ids = f"{span.trace_id:032x}-{span.span_id:016x}-{span.flags:02x}"
                carrier = {"traceparent": f"00-{ids}"}
                if span.state:
                    carrier["tracestate"] = span.state.to_header()
                meta = params.get("_meta")
                params["_meta"] = {**meta, **carrier} if type(meta) is dict else carrier
            return await work
        except BaseException as exc:
            code = self._failed(opened[0], exc)
            outcome = "cancelled" if code == REQUEST_CANCELLED else "error"
            raise
        finally:
            self.add(
                "acp.calls",
                1,
                ("call", method, outcome),
                lambda: {"method": method, "outcome": outcome},
            )
            self.tracer.close(opened)

    async def _turn(self, work: Awaitable[Any], attrs: dict[str, Any]) -> Any:
        """A prompt turn: its stop reason, its duration by stop reason; a model failure
        (the error `model.adapter.model_error` classified) counted by kind."""
        if not self.models and "pydantic_ai" in sys.modules:
            self.models = True
            providers.instrument_models(self.tracer_provider, self.meter_provider, self.content)
        own: list[tuple[str, Any]] = [("acp.session_id", str(attrs.get("session", ""))[:MAX_ID])]
        prompt = attrs.get("prompt")
        if self.content and type(prompt) is list:
            text = "".join(str(b.get("text", "")) for b in prompt if type(b) is dict)
            own.append(("acp.prompt.text", text))
        started = time.perf_counter()
        reason = "error"
        opened = self.tracer.open("acp.turn", _INTERNAL, None, (), own)
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
            own.append(("acp.stop_reason", stop))  # the span's own list: set as it ends
            self.record(
                "acp.turn.duration",
                time.perf_counter() - started,
                ("turn", stop),
                lambda: {"stop_reason": stop},
            )
            self.tracer.close(opened)

    async def _tool(self, work: Awaitable[Any], attrs: dict[str, Any]) -> Any:
        """One MCP tool call (a CLIENT span); failures counted by kind."""
        own = [("mcp.method.name", "tools/call"), ("gen_ai.tool.name", str(attrs.get("tool")))]
        if attrs.get("server"):
            own.append(("mcp.server", str(attrs["server"])))
        opened = self.tracer.open(f"tools/call {attrs.get('tool')}", _CLIENT, None, (), own)
        span = opened[0]
        try:
            result = await work
        except BaseException as exc:
            span.set_status(StatusCode.ERROR, type(exc).__name__)
            self.metric("acp.mcp.errors", 1, {"kind": type(exc).__name__})
            raise
        else:
            if getattr(result, "is_error", False):
                span.set_status(StatusCode.ERROR, "tool error")
                self.metric("acp.mcp.errors", 1, {"kind": "ToolError"})
            return result
        finally:
            self.tracer.close(opened)

    async def _store(self, work: Awaitable[Any], attrs: dict[str, Any]) -> Any:
        """One session store call: its latency by operation (a commit: `save_turn`)."""
        op = _store_op(attrs.get("op"), attrs.get("calls", ()))
        started = time.perf_counter()
        outcome = "ok"
        values = self.store_attrs.get(op)
        if values is None:
            values = self.store_attrs[op] = (("acp.store.op", op),)
        opened = self.tracer.open(f"store {op}", _CLIENT, None, values, leaf=True)
        try:
            return await work
        except BaseException as exc:
            opened[0].set_status(StatusCode.ERROR, type(exc).__name__)
            outcome = "error"
            raise
        finally:
            self.record(
                "acp.store.duration",
                time.perf_counter() - started,
                ("store", op, outcome),
                lambda: {"op": op, "outcome": outcome},
            )
            self.tracer.close(opened)

    async def _queued(self, work: Awaitable[Any], attrs: dict[str, Any]) -> Any:
        """A prompt waiting for its session's turn."""
        key, make = ("queued",), dict
        self.add("acp.prompts.queued", 1, key, make)
        opened = self.tracer.open("acp.prompt.queued", _INTERNAL, None, (), leaf=True)
        try:
            return await work
        finally:
            self.tracer.close(opened)
            self.add("acp.prompts.queued", -1, key, make)


class _Nothing:
    """No meter provider: nothing recorded."""

    def record(self, name: str, value: float, key: tuple[Any, ...], make: Any) -> None:
        return

    add = record

    def metric(self, name: str, value: float, labels: dict[str, str]) -> None:
        return
