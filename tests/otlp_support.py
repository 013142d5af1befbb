"""An OTLP/HTTP collector on 127.0.0.1 for tests of agents configured by the environment
(`OTEL_EXPORTER_OTLP_ENDPOINT`): every span and metric data point it received, decoded
with opentelemetry-proto, with the raw request bodies (for a search for secrets in
everything exported, whatever field a value might hide in)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Span:
    service: str
    scope: str
    name: str
    trace_id: str  # hex, as in a traceparent
    span_id: str
    parent_id: str  # "" for a root
    attributes: dict[str, Any]


@dataclass
class Collected:
    url: str = ""
    spans: list[Span] = field(default_factory=list)
    # (service, metric name, a data point's attributes)
    points: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def named(self, name: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.name == name]

    def until(self, what: str, pred: Callable[[], object], timeout: float = 15.0) -> None:
        """Wait (polling what the exporter thread of another process sends) until `pred`."""
        deadline = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
            time.sleep(0.05)

    def everything(self) -> str:
        """Every body received, decoded and raw (latin-1: every byte a character)."""
        with self.lock:
            raw = "".join(b.decode("latin-1") for b in self.bodies)
            decoded = repr(self.spans) + repr(self.points)
        return decoded + raw


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def _attrs(attributes: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in attributes}


def _points(metric: Any) -> list[Any]:
    kind = metric.WhichOneof("data")
    return list(getattr(metric, kind).data_points) if kind else []


def _handler(into: Collected) -> type[BaseHTTPRequestHandler]:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"] or 0))
            spans: list[Span] = []
            points: list[tuple[str, str, dict[str, Any]]] = []
            if self.path == "/v1/traces":
                for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
                    service = str(_attrs(rs.resource.attributes).get("service.name", ""))
                    for ss in rs.scope_spans:
                        spans += [
                            Span(
                                service,
                                ss.scope.name,
                                s.name,
                                s.trace_id.hex(),
                                s.span_id.hex(),
                                s.parent_span_id.hex(),
                                _attrs(s.attributes),
                            )
                            for s in ss.spans
                        ]
            elif self.path == "/v1/metrics":
                for rm in ExportMetricsServiceRequest.FromString(body).resource_metrics:
                    service = str(_attrs(rm.resource.attributes).get("service.name", ""))
                    for sm in rm.scope_metrics:
                        for m in sm.metrics:
                            points += [(service, m.name, _attrs(p.attributes)) for p in _points(m)]
            with into.lock:
                into.bodies.append(body)
                into.spans += spans
                into.points += points
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


@contextlib.contextmanager
def collector() -> Iterator[Collected]:
    """A collector listening on 127.0.0.1 (its base URL: `Collected.url`)."""
    into = Collected()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(into))
    into.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield into
    finally:
        server.shutdown()
        server.server_close()


def otlp_env(url: str, service: str) -> dict[str, str]:
    """What a deployment sets: traces and metrics over OTLP to `url`, every span sampled,
    exported soon (the test need not wait for the SDK's 5 s / 60 s defaults)."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": url,
        "OTEL_SERVICE_NAME": service,
        "OTEL_TRACES_SAMPLER": "always_on",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
    }
