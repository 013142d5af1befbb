"""Telemetry's providers: the OpenTelemetry SDK's, made from the standard `OTEL_*`
variables (for the spans and metrics of pydantic-ai and the MCP SDK), the exports of the
runtime's own spans beside them (`spans.py`), and pydantic-ai's instrumentation under the
runtime's turn.  Imported with `otel.py`, only when telemetry is on."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

from opentelemetry import metrics, trace

from . import sinks

log = logging.getLogger("acp.runtime.observe")


def exporters(variable: str) -> list[str]:
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


def number(variable: str, default: float) -> float:
    raw = os.environ.get(variable, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        log.warning("%s=%r is not a number: %s", variable, raw, default)
        return default
    return value if value > 0 else default


def session() -> Any:
    """A `requests` session for each OTLP/HTTP exporter made here and in `otel.py`: the
    environment's proxy and CA bundle settings (what `requests` reads again for every
    request, ~0.3 ms of each export) read once per URL, at its first export."""
    # (imported by name: a project checked without the extra, where requests is missing,
    # and one checked with it see the same Any)
    base: Any = importlib.import_module("requests").Session

    class Session(base):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.found: dict[tuple[Any, ...], dict[str, Any]] = {}

        def merge_environment_settings(
            self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
        ) -> dict[str, Any]:
            key = (url, stream, verify, str(cert), tuple(sorted((proxies or {}).items())))
            found = self.found.get(key)
            if found is None:
                found = super().merge_environment_settings(url, proxies, stream, verify, cert)
                self.found[key] = found
            return dict(found)

    return Session()


def direct(exporter: Any) -> Any:
    """`exporter` posting to a plain-HTTP collector through `posting.Direct` (unchanged
    when this version of the exporter has no transport it can stand in for)."""
    try:
        from . import posting
    except ImportError:
        return exporter
    return posting.direct(exporter)


def tracer_provider() -> tuple[Any, list[Any]]:
    """The environment's tracer provider (None: no trace exporter named), for the spans of
    pydantic-ai and the MCP SDK, and the exports of the runtime's own spans."""
    names = exporters("OTEL_TRACES_EXPORTER")
    if not names:
        return None, []
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=Resource.create())  # OTEL_TRACES_SAMPLER applies
    exports: list[Any] = []
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            sdk_export = direct(OTLPSpanExporter(session=session()))  # pydantic-ai's
            provider.add_span_processor(BatchSpanProcessor(sdk_export))  # and the MCP SDK's
            exporter = direct(OTLPSpanExporter(session=session()))
            exports.append(sinks.OtlpSpans(exporter, provider.resource))
        elif name == "console":  # stderr: stdout is the protocol on stdio
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
            exports.append(sinks.SdkSpans(ConsoleSpanExporter(out=sys.stderr), provider.resource))
        else:
            log.warning("OTEL_TRACES_EXPORTER: %r is not supported (otlp, console, none)", name)
    return provider, exports


def meter_provider() -> tuple[Any, list[str], Any]:
    """The environment's meter provider (None: no metrics exporter named), for
    pydantic-ai's metrics, the exporters named (the runtime's own metrics go to the same
    places from its tally) and the resource (the tally's too)."""
    names = exporters("OTEL_METRICS_EXPORTER")
    if not names:
        return None, [], None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        MetricReader,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.resources import Resource

    readers: list[MetricReader] = []
    known = []
    for name in names:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            exporter = direct(OTLPMetricExporter(session=session()))
            readers.append(PeriodicExportingMetricReader(exporter))
        elif name == "prometheus":
            from opentelemetry.exporter.prometheus import PrometheusMetricReader

            readers.append(PrometheusMetricReader())
        elif name == "console":
            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter(out=sys.stderr)))
        else:
            log.warning(
                "OTEL_METRICS_EXPORTER: %r is not supported (otlp, prometheus, console, none)", name
            )
            continue
        known.append(name)
    # exemplars (a sampled span's id beside a histogram's value) cost more than the value
    # itself: off unless OTEL_METRICS_EXEMPLAR_FILTER asks for them
    exemplars = None
    if not os.environ.get("OTEL_METRICS_EXEMPLAR_FILTER"):
        from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter

        exemplars = AlwaysOffExemplarFilter()
    resource = Resource.create()
    provider = MeterProvider(resource=resource, metric_readers=readers, exemplar_filter=exemplars)
    return provider, known, resource


def instrument_models(tracer_provider: Any, meter_provider: Any, content: bool) -> None:
    """pydantic-ai's own spans and metrics (model requests, tools, token usage by model),
    under the turn's span; the prompt and messages only with `content`.  Called at the
    first turn of a process that imported pydantic-ai (an agent without a model never
    imports it)."""
    pydantic_ai = sys.modules["pydantic_ai"]  # imported by the model room, never here
    pydantic_ai.Agent.instrument_all(
        without_conversation(pydantic_ai.InstrumentationSettings)(
            tracer_provider=tracer_provider or trace.NoOpTracerProvider(),
            meter_provider=meter_provider or metrics.NoOpMeterProvider(),
            include_content=content,
            include_binary_content=content,
        )
    )


def without_conversation(settings: Any) -> Any:
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


def uninstrument_models() -> None:
    agent = sys.modules.get("pydantic_ai")
    if agent is not None:
        agent.Agent.instrument_all(False)
