"""The runtime's own spans and metrics (issue 39's cost): recorded as plain values
(observe/spans.py, observe/tally.py) and written as OTLP by hand (observe/encode.py).

Each is held against the OpenTelemetry SDK doing the same job:
- the runtime's spans encode to the request the SDK's own OTLP encoder writes for them
  (decoded with opentelemetry-proto and compared whole: ids, parents, the remote flag,
  trace state, kinds, times, attributes of every type, status);
- the tally aggregates and encodes a histogram, a counter, an up-down counter and a gauge
  as the SDK's aggregation reads for the same measurements; its Prometheus text has the
  names and cumulative buckets the SDK's Prometheus reader writes;
- the batch exports full batches only until its delay passes, drops and says so past its
  queue's bound, and hands over everything at stop;
- sampling follows the provider's sampler (parent-based by default, a ratio asked);
- the installed OTLP exporter has the HTTP client the fast path posts through (a version
  without it would fall back to the SDK's encoder: this fails first).
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import sampling
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, StatusCode, TraceFlags, TraceState
from prometheus_client import CollectorRegistry, generate_latest
from runtime.observe import encode, otel, posting, providers, sinks, spans, tally

RESOURCE = Resource.create({"service.name": "fast-test", "deployment": "t", "replicas": 3})
REMOTE = SpanContext(
    0x0AF7651916CD43DD8448EB211C80319C,
    0xB7AD6B7169203331,
    is_remote=True,
    trace_flags=TraceFlags(1),
    trace_state=TraceState([("vendor", "v1"), ("other", "x")]),
)


def _spans() -> list[spans.Span]:
    """A request under a remote parent, its turn (an error, its stop reason set as it
    ends), a store call, and a root client call: as the runtime's hooks record them."""
    kept: list[spans.Span] = []
    tracer = spans.Tracer(sampling.DEFAULT_ON, kept.append)
    attrs = (
        ("rpc.system", "jsonrpc"),
        ("rpc.method", "session/prompt"),
        ("acp.revision", 2),
        ("acp.flag", True),
        ("acp.ratio", 0.25),
        ("acp.names", ("a", "b")),
        ("acp.negative", -7),
    )
    served = spans.Shape("session/prompt", SpanKind.SERVER, spans.REQUEST, "session/prompt", attrs)
    turned = spans.Shape("acp.turn", SpanKind.INTERNAL, spans.TURN, None, (), "acp.stop_reason")
    stored = spans.Shape("store save_turn", SpanKind.CLIENT, spans.STORE, "save_turn")
    with (
        tracer.start(served, REMOTE),
        tracer.start(turned, None, (("acp.session_id", "sess_1"),)) as turn,
    ):
        with tracer.start(stored, None, (("acp.store.op", "save"),)):
            pass
        turn.set_stop_reason("end_turn")
        turn.set_status(StatusCode.ERROR, "ValueError")
    with tracer.start(spans.Shape("fs/read_text_file", SpanKind.CLIENT, spans.CALL)):
        pass
    return kept


def test_the_runtimes_spans_encode_as_the_sdks_encoder_writes_them() -> None:
    kept = _spans()
    assert [s.name for s in kept] == [
        "store save_turn",
        "acp.turn",
        "session/prompt",
        "fs/read_text_file",
    ]
    store, turn, request, call = kept
    assert request.trace_id == REMOTE.trace_id and request.parent_id == REMOTE.span_id
    assert request.remote and not turn.remote
    assert (turn.parent_id, store.parent_id) == (request.span_id, turn.span_id)
    assert call.parent_id == 0 and call.trace_id != REMOTE.trace_id  # a root of its own
    head = encode.resource(RESOURCE.attributes), encode.scope(spans.SCOPE, None)
    ours = ExportTraceServiceRequest.FromString(
        encode.traces(*head, [sinks.encoded(s) for s in kept])
    )
    readable = [spans.readable(s, RESOURCE) for s in kept]
    theirs = ExportTraceServiceRequest.FromString(encode_spans(readable).SerializeToString())
    assert ours == theirs
    (written,) = ours.resource_spans[0].scope_spans
    assert written.spans[2].flags == encode.REMOTE_KNOWN | encode.REMOTE
    assert written.spans[1].status.code == 2 and written.spans[1].status.message == "ValueError"
    assert written.spans[2].trace_state == "vendor=v1,other=x"
    # a batch at once (roots first, then children), its repeated combinations made once
    batch = kept + _spans() + _spans()
    ours = ExportTraceServiceRequest.FromString(encode.traces(*head, sinks.encoded_batch(batch)))
    readable = [spans.readable(s, RESOURCE) for s in batch]
    theirs = ExportTraceServiceRequest.FromString(encode_spans(readable).SerializeToString())

    def by_id(request: ExportTraceServiceRequest) -> list[Any]:
        (scope,) = request.resource_spans[0].scope_spans
        return sorted(scope.spans, key=lambda span: span.span_id)

    assert len(by_id(ours)) == len(batch) and by_id(ours) == by_id(theirs)


def test_without_the_http_client_an_exporter_is_given_the_sdks_spans() -> None:
    """The fallback: an exporter that is not OTLP/HTTP's (here the SDK's in-memory one)
    gets ReadableSpans, the same spans."""
    memory = InMemorySpanExporter()
    export = sinks.OtlpSpans(memory, RESOURCE)
    assert export.client is None
    kept = _spans()
    export(kept)
    got = memory.get_finished_spans()
    assert [s.name for s in got] == [s.name for s in kept]
    assert got[1].attributes == {"acp.session_id": "sess_1", "acp.stop_reason": "end_turn"}
    assert got[2].parent is not None and got[2].parent.is_remote


def test_the_installed_otlp_exporters_have_the_client_the_fast_path_posts_through() -> None:
    trace_export = sinks.OtlpSpans(
        OTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces"), RESOURCE
    )
    assert trace_export.client is not None
    metric_export = tally.OtlpMetrics(
        tally.Tally(otel.INSTRUMENTS, otel.GAUGES, {}),
        OTLPMetricExporter(endpoint="http://127.0.0.1:9/v1/metrics"),
        RESOURCE,
    )
    assert callable(getattr(metric_export.client, "export", None))


def test_the_exporters_session_reads_the_proxy_from_the_environment_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The runtime's OTLP exporters post through `providers.session()`: HTTP_PROXY is
    honoured (the spans reach the collector through the proxy, here a server of the
    test's), and read once for the endpoint, not at every export."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import requests.sessions

    seen: list[tuple[str, int]] = []

    class Proxy(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_POST(self) -> None:  # a proxy is sent the absolute URL
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.path, len(ExportTraceServiceRequest.FromString(body).resource_spans)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    reads = []
    read = requests.sessions.get_environ_proxies
    monkeypatch.setattr(
        requests.sessions,
        "get_environ_proxies",
        lambda *a, **k: reads.append(a) or read(*a, **k),
    )
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.server_address[1]}")
    endpoint = "http://collector.invalid:4318/v1/traces"
    try:
        exporter = OTLPSpanExporter(endpoint=endpoint, session=providers.session())
        export = sinks.OtlpSpans(posting.direct(exporter), RESOURCE)  # as providers.py has it
        assert export.client is not None
        export(_spans())
        export(_spans())
    finally:
        server.shutdown()
    assert seen == [(endpoint, 1), (endpoint, 1)]  # a proxy applies: the SDK's transport
    assert len(reads) == 1


class _Collector:
    """An OTLP/HTTP collector on 127.0.0.1: the spans of each request it was sent, the
    connections they came on; its first `refuse` answers are 503 with Retry-After: 0, and
    with `close` it ends every connection after answering."""

    def __init__(self, refuse: int = 0, close: bool = False) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.posts: list[tuple[int, int]] = []  # (the client's port, spans)
        self.refuse = refuse
        collector = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if collector.refuse:
                    collector.refuse -= 1
                    self.send_response(503)
                    self.send_header("Retry-After", "0")
                else:
                    (scope,) = (
                        ExportTraceServiceRequest.FromString(body).resource_spans[0].scope_spans
                    )
                    collector.posts.append((self.client_address[1], len(scope.spans)))
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                if close:
                    self.send_header("Connection", "close")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.mark.parametrize("close", [False, True])
def test_a_plain_http_collector_is_posted_to_over_one_kept_connection(
    close: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An `http://` collector no proxy applies to gets the batches over one kept-alive
    `http.client` connection (`posting.Direct`), not `requests`; a collector that closes
    its connections still gets every batch; a 503 with Retry-After is retried by the SDK's
    client as with its own transport."""
    import requests

    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    sent = []
    monkeypatch.setattr(requests.Session, "send", lambda *a, **k: sent.append(a) or None)
    collector = _Collector(refuse=1, close=close)
    try:
        exporter = posting.direct(OTLPSpanExporter(endpoint=collector.url))
        assert isinstance(exporter._client._transport, posting.Direct)
        export = sinks.OtlpSpans(exporter, RESOURCE)
        for _ in range(3):
            export(_spans())
        exporter.shutdown()
    finally:
        collector.server.shutdown()
    assert [n for _, n in collector.posts] == [4, 4, 4]  # the 503's batch came again
    connections = {port for port, _ in collector.posts}
    assert len(connections) == (3 if close else 1)
    assert sent == []  # never through requests


class _Owner:
    sessions = 2


def _measure(sink: Any) -> None:
    """The same measurements, through `Tally`'s or `Instruments`' calls."""
    names = ("method", "outcome", "code")
    for v in (0.0001, 0.0005, 0.001, 0.003, 0.5, 7.0, 12.0, 0.001):
        sink.record("acp.request.duration", v, ("request", "session/prompt", "ok", 0), names)
    sink.record("acp.turn.duration", 0.2, ("turn", "end_turn"), ("stop_reason",))
    for _ in range(3):
        sink.add("acp.calls", 1, ("call", "fs/x", "ok"), ("method", "outcome"))
    for step in (1, 1, -1):
        sink.add("acp.prompts.queued", step, ("queued",), ())
    sink.metric("acp.mcp.errors", 1, {"kind": "ToolError"})


def test_the_tally_aggregates_and_encodes_as_the_sdk_reads_the_same_measurements() -> None:
    owner = _Owner()
    registry = {"acp.sessions.active": [(weakref.ref(owner), lambda o: float(o.sessions))]}
    ours = tally.Tally(otel.INSTRUMENTS, otel.GAUGES, registry)
    _measure(ours)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    _measure(tally.Instruments(provider.get_meter("acp.runtime"), otel.INSTRUMENTS))
    sdk: dict[str, Any] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                sdk[m.name] = m
    head = encode.resource(RESOURCE.attributes), encode.scope("acp.runtime", None)
    request = ExportMetricsServiceRequest.FromString(ours.otlp(*head))
    written = {m.name: m for m in request.resource_metrics[0].scope_metrics[0].metrics}
    assert set(written) == set(sdk) | {"acp.sessions.active"}
    for name, m in written.items():
        assert m.unit == otel.INSTRUMENTS.get(name, ("", *otel.GAUGES.get(name, ("", ""))))[1]
    got = written["acp.request.duration"].histogram
    want = sdk["acp.request.duration"].data.data_points[0]
    (point,) = got.data_points
    assert got.aggregation_temporality == 2  # cumulative
    assert list(point.bucket_counts) == list(want.bucket_counts)
    assert list(point.explicit_bounds) == list(want.explicit_bounds)
    assert (
        (point.count, point.min, point.max) == (want.count, want.min, want.max) == (8, 0.0001, 12.0)
    )
    assert point.sum == pytest.approx(want.sum)
    assert {kv.key: kv.value.string_value for kv in point.attributes} == dict(want.attributes)
    calls = written["acp.calls"].sum
    assert calls.is_monotonic and calls.data_points[0].as_int == 3
    queued = written["acp.prompts.queued"].sum
    assert not queued.is_monotonic and queued.data_points[0].as_int == 1
    assert written["acp.mcp.errors"].sum.data_points[0].as_int == 1
    assert written["acp.sessions.active"].gauge.data_points[0].as_double == 2.0
    del owner  # an owner gone counts nothing
    request = ExportMetricsServiceRequest.FromString(ours.otlp(*head))
    active = [
        m
        for m in request.resource_metrics[0].scope_metrics[0].metrics
        if m.name == "acp.sessions.active"
    ]
    assert active[0].gauge.data_points[0].as_double == 0.0


def test_the_tallys_prometheus_text_has_the_exporters_names_and_cumulative_buckets() -> None:
    ours = tally.Tally(otel.INSTRUMENTS, otel.GAUGES, {})
    _measure(ours)
    registry = CollectorRegistry()
    registry.register(tally.PrometheusCollector(ours))
    text = generate_latest(registry).decode()
    bucket = 'acp_request_duration_seconds_bucket{{code="0",le="{}",method="session/prompt",outcome="ok"}} {}'
    for le, n in (("0.0005", 2), ("0.001", 4), ("10.0", 7), ("+Inf", 8)):
        assert bucket.format(le, f"{n}.0") in text  # cumulative, the upper bound included
    labels = 'code="0",method="session/prompt",outcome="ok"'
    assert f"acp_request_duration_seconds_count{{{labels}}} 8.0" in text
    assert 'acp_calls_total{method="fs/x",outcome="ok"} 3.0' in text
    assert 'acp_mcp_errors_total{kind="ToolError"} 1.0' in text
    assert "acp_prompts_queued 1.0" in text
    assert "# TYPE acp_prompts_queued gauge" in text
    assert "acp_sessions_active 0.0" in text


class _Export:
    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.stopped = False

    def __call__(self, batch: list[spans.Span]) -> None:
        self.batches.append([s.name for s in batch])

    def shutdown(self) -> None:
        self.stopped = True


def _ended(tracer: spans.Tracer, name: str) -> None:
    with tracer.start(spans.Shape(name, SpanKind.INTERNAL, spans.QUEUED)):
        pass


def test_the_batch_sends_full_batches_until_its_delay_and_everything_at_stop() -> None:
    export = _Export()
    batch = sinks.Batch([export], delay=60.0, max_queue=1000, max_batch=4)
    tracer = spans.Tracer(None, batch)
    for i in range(10):
        _ended(tracer, f"s{i}")
    deadline = time.monotonic() + 10
    while sum(map(len, export.batches)) < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert export.batches and all(len(b) == 4 for b in export.batches)  # no partial one
    assert sum(map(len, export.batches)) == 8  # two spans wait for the delay
    batch.stop()
    assert [n for b in export.batches for n in b] == [f"s{i}" for i in range(10)]
    assert export.stopped


def test_a_full_queue_drops_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    export = _Export()
    batch = sinks.Batch([export], delay=60.0, max_queue=3, max_batch=10)
    tracer = spans.Tracer(None, batch)
    for i in range(5):
        _ended(tracer, f"s{i}")
    with caplog.at_level(logging.WARNING, logger="acp.runtime.observe"):
        batch.stop()
    assert export.batches == [["s0", "s1", "s2"]]
    assert "2 spans dropped" in caplog.text


class _Refused(Exception):
    """An RpcError's shape: a JSON-RPC code and `to_wire`."""

    code = -32602

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "message": "refused"}


class _Facts:
    facts = (("acp.transport", "stdio"), ("acp.revision", 1), ("acp.replica", "r1"))

    def about(self) -> tuple[tuple[str, Any], ...]:
        return self.facts


@pytest.mark.parametrize("sampler", ["always_on", "always_off"])
def test_metrics_are_folded_from_every_span_and_a_read_is_never_behind(sampler: str) -> None:
    """Configured from the environment (owned providers), a span's metrics are folded from
    it off the event loop, sampled or not; what reads the metrics (a scrape, an OTLP
    export) first folds what is still queued, so it never misses a request that ended."""
    from opentelemetry.sdk.trace import TracerProvider

    export = _Export()
    chosen = {"always_on": sampling.ALWAYS_ON, "always_off": sampling.ALWAYS_OFF}[sampler]
    telemetry = otel.Telemetry(
        TracerProvider(sampler=chosen),
        MeterProvider(),
        {},
        owned=True,
        span_exports=[export],
        metric_exporters=[],
        resource=RESOURCE,
    )
    conn = _Facts()
    try:
        for _ in range(2):
            with (
                telemetry.request("session/prompt", {"sessionId": "s1"}, conn),
                telemetry.turn("s1", []) as turn,
            ):
                # a lambda naming the store's method, as `durably` is given
                with telemetry.store(lambda: conn.about(), ("about",)):  # noqa: PLW0108
                    pass
                turn.set_stop_reason("end_turn")
        with pytest.raises(_Refused), telemetry.request("session/load", {}, conn):
            raise _Refused
        read = {name: points for name, _, _, _, points in telemetry.tally.snapshot()}
        assert export.batches == []  # nothing exported yet: the delay has not passed
    finally:
        telemetry.stop()
    requests = {tuple(p[0].values()): p[1] for p in read["acp.request.duration"]}
    assert requests == {("session/prompt", "ok", "0"): 2, ("session/load", "error", "-32602"): 1}
    assert [(p[0], p[1]) for p in read["acp.turn.duration"]] == [({"stop_reason": "end_turn"}, 2)]
    assert [(p[0], p[1]) for p in read["acp.store.duration"]] == [
        ({"op": "about", "outcome": "ok"}, 2)
    ]
    exported = [name for batch in export.batches for name in batch]
    if sampler == "always_on":
        assert sorted(exported) == sorted(
            ["store about", "acp.turn", "session/prompt"] * 2 + ["session/load"]
        )
    else:
        assert exported == []


def test_sampling_follows_the_providers_sampler() -> None:
    kept: list[spans.Span] = []
    never = spans.Tracer(sampling.ParentBased(sampling.TraceIdRatioBased(0.0)), kept.append)
    assert never.mode == 0  # asked
    served = spans.Shape("session/prompt", SpanKind.SERVER, spans.REQUEST)
    turned = spans.Shape("acp.turn", SpanKind.INTERNAL, spans.TURN)
    with never.start(served) as root, never.start(turned) as child:
        assert not root.is_recording() and child.flags == 0
        assert child.trace_id == root.trace_id  # the context still carries the trace
    with never.start(served, REMOTE):  # a sampled parent
        pass
    assert [s.name for s in kept] == ["session/prompt"] and kept[0].parent_id == REMOTE.span_id
    off = spans.Tracer(sampling.ALWAYS_OFF, kept.append)
    assert off.mode == 3
    with off.start(spans.Shape("x", SpanKind.INTERNAL, spans.QUEUED), REMOTE):
        pass
    assert len(kept) == 1
    counted = spans.Tracer(sampling.ALWAYS_OFF, kept.append, counted=True)
    with counted.start(served):  # not sampled, but its metrics are kept: handed over
        pass
    assert len(kept) == 2 and kept[1].flags == 0


def test_turning_on_from_the_environment_freezes_what_it_loaded(tmp_path: Any) -> None:
    """The SDK, the exporters, protobuf and requests load with the collector off and are
    then frozen: no later collection during a turn walks them (the collector is on again)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import gc\n"
        "before = gc.get_freeze_count()\n"
        "from runtime import observe\n"
        "assert observe.on()\n"
        "import opentelemetry.sdk.trace, opentelemetry.exporter.otlp.proto.http\n"
        "print(gc.isenabled(), gc.get_freeze_count() - before)\n"
        "observe.stop()\n"
    )
    templates = Path(__file__).resolve().parents[2] / "templates"
    env = {
        **os.environ,
        "PYTHONPATH": str(templates),
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "OTEL_BSP_SCHEDULE_DELAY": "60000",
    }
    got = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    enabled, frozen = got.stdout.split()
    assert enabled == "True"
    assert int(frozen) > 20_000  # the SDK and its dependencies, frozen


def test_through_the_context_api_the_spans_are_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the default runtime context's `ContextVar` (another `OTEL_PYTHON_CONTEXT`),
    the tracer goes through OpenTelemetry's `attach`/`detach`: the same tree."""
    fast = _spans()
    monkeypatch.setattr(spans, "_VAR", None)
    slow = _spans()
    assert [(s.name, bool(s.parent_id), s.remote) for s in slow] == [
        (s.name, bool(s.parent_id), s.remote) for s in fast
    ]
    store, turn, request, _ = slow
    assert (store.parent_id, turn.parent_id) == (turn.span_id, request.span_id)
    assert request.parent_id == REMOTE.span_id


@pytest.mark.parametrize("direct", [True, False])
def test_another_tracers_spans_and_the_runtimes_nest_both_ways(
    direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime's current span is in OpenTelemetry's current context for any other
    code: an SDK span started within it is its child, a runtime span started within that
    SDK span is the SDK span's, and after it the runtime's span is current again; a
    context taken with `get_current` inside a runtime span and attached in another thread
    keeps that span as the parent (directly, or through the context API)."""
    import threading

    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    if not direct:
        monkeypatch.setattr(spans, "_VAR", None)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    sdk = provider.get_tracer("another")
    kept: list[spans.Span] = []
    tracer = spans.Tracer(sampling.DEFAULT_ON, kept.append)
    shape = spans.Shape("acp.turn", SpanKind.INTERNAL, spans.TURN)
    leaf = spans.Shape("fs/read_text_file", SpanKind.CLIENT, spans.CALL, leaf=True)
    taken: list[Any] = []
    with tracer.start(shape) as turn:
        assert trace.get_current_span() is turn
        assert isinstance(turn, trace.Span)  # (registered with the API's class, not its subclass)
        with sdk.start_as_current_span("model run") as model:
            with tracer.start(leaf):
                pass
            with tracer.start(shape) as inner:
                assert trace.get_current_span() is inner
                with sdk.start_as_current_span("nested"):
                    pass
            assert trace.get_current_span() is model
        assert trace.get_current_span() is turn
        with tracer.start(leaf):
            pass
        taken.append(otel_context.get_current())

    def elsewhere() -> None:
        token = otel_context.attach(taken[0])
        try:
            with tracer.start(leaf):
                pass
        finally:
            otel_context.detach(token)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert trace.get_current_span() is trace.INVALID_SPAN
    by_name = {s.name: s for s in memory.get_finished_spans()}
    model_id = by_name["model run"].context.span_id
    assert by_name["model run"].parent is not None
    assert by_name["model run"].parent.span_id == turn.span_id
    first_call, inner_span, second_call, outer, threaded = kept
    assert (first_call.parent_id, inner_span.parent_id) == (model_id, model_id)
    assert by_name["nested"].parent is not None
    assert by_name["nested"].parent.span_id == inner_span.span_id
    assert (second_call.parent_id, threaded.parent_id) == (turn.span_id, turn.span_id)
    assert outer is turn and {s.trace_id for s in kept} == {turn.trace_id}


def test_a_group_folds_as_its_spans_recorded_one_at_a_time() -> None:
    """The fold counts a group of spans of one shape and key at once (its durations
    sorted, each bucket's count where its bound falls): the same point as recording each
    span's duration in turn, for durations on, just under and just over every bound, past
    the last one, and a group of one."""
    telemetry = otel.Telemetry(
        None, MeterProvider(), {}, owned=True, metric_exporters=[], resource=RESOURCE
    )
    by_one = tally.Tally(otel.INSTRUMENTS, {}, {})
    try:
        shape = spans.Shape("store save_turn", SpanKind.CLIENT, spans.STORE, "save_turn", leaf=True)
        bounds = otel.INSTRUMENTS["acp.store.duration"][3]
        took = [round(b * 1e9) + d for b in bounds for d in (-1, 0, 1)] + [10**13, 0, 7]
        for durations in (took, [12_345]):
            group = []
            for ns in durations:
                s = spans.Tracer(None, None).start(shape)
                s.start, s.end_ns = 1_000, 1_000 + ns
                group.append(s)
                key = (spans.STORE, "save_turn", "ok")
                by_one.record("acp.store.duration", ns / 1e9, key, ("op", "outcome"))
            telemetry.fold([group])
        folded = {n: p for n, _, _, _, p in telemetry.tally.snapshot()}["acp.store.duration"]
        recorded = {n: p for n, _, _, _, p in by_one.snapshot()}["acp.store.duration"]
    finally:
        telemetry.stop()
    assert len(folded) == len(recorded) == 1
    (got,), (want,) = folded, recorded
    assert got[0] == want[0] and got[1] == want[1] == len(took) + 1
    assert got[2] == pytest.approx(want[2]) and got[3:5] == want[3:5]
    assert got[5] == want[5] and sum(got[5]) == len(took) + 1


def test_a_collector_that_does_not_answer_costs_neither_memory_nor_metrics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While the export thread waits on a collector that does not answer, the loop goes on
    taking its spans (at each full batch: the queue never holds more) and folding them
    into the metrics; the outbox stays within `max_queue`, and what could not wait there
    is dropped and counted."""
    import threading

    stuck, entered = threading.Event(), threading.Event()

    class _Stuck(_Export):
        def __call__(self, batch: list[spans.Span]) -> None:
            entered.set()
            stuck.wait(10)
            super().__call__(batch)

    export = _Stuck()
    folded: list[int] = []
    batch = sinks.Batch(
        [export],
        delay=60.0,
        max_queue=20,
        max_batch=4,
        fold=lambda g: folded.append(sum(map(len, g))),
    )
    tracer = spans.Tracer(None, batch, counted=True)
    for i in range(5):  # (a full batch is seen as the next span starts)
        _ended(tracer, f"s{i}")
    assert entered.wait(10)  # the thread is in the export of the first batch
    most = 0
    for i in range(5, 200):
        _ended(tracer, f"s{i}")
        most = max(most, len(batch.queue))
    assert most <= 4 and len(batch.outbox) <= 20
    with caplog.at_level(logging.WARNING, logger="acp.runtime.observe"):
        stuck.set()
        batch.stop()
    assert sum(folded) == 200  # every span counted
    dropped = sum(int(m.split()[0]) for m in caplog.messages if "spans dropped" in m)
    assert dropped > 0 and sum(map(len, export.batches)) + dropped == 200


def test_ids_are_unique_nonzero_and_a_forked_process_draws_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Span and trace ids come from pools of random bytes drawn many at a time: across
    several pools (drawn small here) every id is distinct and none is zero; a pool with
    an all-zero id in it is drawn again; a forked child does not reuse its parent's pool
    (the parent's next ids and the child's differ)."""
    import os

    monkeypatch.setattr(spans, "IDS", 5)
    real, drawn = os.urandom, []

    def urandom(n: int) -> bytes:  # the first pool of span ids holds an all-zero one
        drawn.append(n)
        return bytes(8) + real(n - 8) if drawn.count(40) == 1 and n == 40 else real(n)

    monkeypatch.setattr(spans.os, "urandom", urandom)
    monkeypatch.setattr(spans, "_span_ids", iter(()))  # drawn out: the next span draws
    monkeypatch.setattr(spans, "_trace_ids", iter(()))
    tracer = spans.Tracer(sampling.DEFAULT_ON, None)
    shape = spans.Shape("acp.turn", SpanKind.INTERNAL, spans.TURN)
    roots = [tracer.start(shape) for _ in range(23)]
    monkeypatch.setattr(spans.os, "urandom", real)
    assert drawn.count(40) == 6 and drawn.count(80) == 5  # the zero one's pool drawn again
    span_ids = [s.span_id for s in roots]
    trace_ids = [s.trace_id for s in roots]
    assert len(set(span_ids)) == len(span_ids) and 0 not in span_ids
    assert len(set(trace_ids)) == len(trace_ids) and 0 not in trace_ids
    assert all(len(s.tid) == 16 for s in roots)
    with tracer.start(shape) as parent:
        child = tracer.start(shape)
    assert (child.tid, child.parent_id) == (parent.tid, parent.span_id)

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next span id and trace id, then gone
        s = tracer.start(shape)
        os.write(write, f"{s.span_id} {s.trace_id}".encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    theirs = os.read(read, 200).decode().split()
    os.close(read)
    ours = tracer.start(shape)
    assert int(theirs[0]) != ours.span_id and int(theirs[1]) != ours.trace_id
