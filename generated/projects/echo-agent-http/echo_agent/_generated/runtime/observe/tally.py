"""The runtime's metrics, aggregated in place: a histogram's count, sum, min, max and bucket
counts, a sum's value, per label set; read as OTLP (`encode.py`, from a thread every
`OTEL_METRIC_EXPORT_INTERVAL`), as Prometheus' text (a collector in prometheus_client's
registry, beside the SDK's reader), or on stderr.  Cumulative, as OTLP's default and
Prometheus are.

The SDK's histogram record costs ~8 us (views, attribute hashing, locks); a record here is
a dict lookup and a few additions under one uncontended lock.  A program that passes its own
meter provider gets the SDK's instruments instead (`Instruments`): the same calls."""

from __future__ import annotations

import atexit
import bisect
import json
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from . import encode

log = logging.getLogger("acp.runtime.observe")

MAX_CACHED = 1024  # a hook's keys remembered, at most (the label sets themselves are all kept)

Spec = tuple[str, str, str, tuple[float, ...]]  # kind, unit, description, buckets
Gauges = Mapping[str, list[tuple[Any, Callable[[Any], float]]]]
Names = tuple[str, ...]  # a label set's names (its values: a key's, after its tag)


def gauge_total(registry: Gauges, name: str) -> float:
    """Gauge `name`: its owners' values summed; an owner gone counts nothing and is
    forgotten."""
    entries = registry.get(name, [])
    total = 0.0
    alive = []
    for ref, value in entries:
        owner = ref()
        if owner is not None:
            alive.append((ref, value))
            total += value(owner)
    entries[:] = alive
    return total


class Tally:
    """The runtime's instruments (`INSTRUMENTS`: counter, updown, histogram), their points
    keyed by label set; gauges read when the metrics are."""

    def __init__(
        self,
        instruments: Mapping[str, Spec],
        gauges: Mapping[str, tuple[str, str]],
        registry: Gauges,
    ) -> None:
        self.instruments = dict(instruments)
        self.gauge_specs = dict(gauges)
        self.registry = registry
        self.lock = threading.RLock()  # (the fold of a batch holds it as it records)
        self.start = time.time_ns()
        # name -> sorted label pairs -> point: [labels, count, sum, min, max, buckets, bounds]
        # for a histogram, [labels, value] for a sum
        self.series: dict[str, dict[tuple[tuple[str, str], ...], list[Any]]] = {
            name: {} for name in instruments
        }
        self.keys: dict[tuple[Any, ...], list[Any]] = {}
        self.before_read: Callable[[], None] | None = None  # folds what is still queued

    def point(self, name: str, key: tuple[Any, ...], names: Names) -> list[Any]:
        """The point of instrument `name` for the label set `key` names (made once)."""
        return self.keys.get(key) or self._point(name, key, names)

    def _point(self, name: str, key: tuple[Any, ...], names: Names) -> list[Any]:
        labels = dict(zip(names, map(str, key[1:]), strict=True))
        ident = tuple(sorted(labels.items()))
        with self.lock:
            point = self.series[name].get(ident)
            if point is None:
                kind, _, _, bounds = self.instruments[name]
                if kind == "histogram":
                    point = [labels, 0, 0.0, math.inf, -math.inf, [0] * (len(bounds) + 1), bounds]
                else:
                    point = [labels, 0]
                self.series[name][ident] = point
        if len(self.keys) < MAX_CACHED:
            self.keys[key] = point
        return point

    def record(self, name: str, value: float, key: tuple[Any, ...], names: Names) -> None:
        """A histogram's measurement; `key` is a tag and the values of the labels `names`
        (the label set made once per key)."""
        point = self.keys.get(key) or self._point(name, key, names)
        with self.lock:
            point[1] += 1
            point[2] += value
            point[3] = min(point[3], value)
            point[4] = max(point[4], value)
            point[5][bisect.bisect_left(point[6], value)] += 1

    def add(self, name: str, value: float, key: tuple[Any, ...], names: Names) -> None:
        """A counter's or up-down counter's addition."""
        point = self.keys.get(key) or self._point(name, key, names)
        with self.lock:
            point[1] += value

    def metric(self, name: str, value: float, labels: dict[str, str]) -> None:
        names = tuple(labels)
        key = ((name, names), *labels.values())  # the tag: the instrument and label names
        if self.instruments[name][0] == "histogram":
            self.record(name, value, key, names)
        else:
            self.add(name, value, key, names)

    # ---- reading ----------------------------------------------------------------------
    def snapshot(self) -> list[tuple[str, str, str, str, list[list[Any]]]]:
        """Each instrument with points: (name, kind, unit, description, points copied),
        then each gauge (one point, no label)."""
        if self.before_read is not None:
            self.before_read()
        out = []
        with self.lock:
            for name, points in self.series.items():
                if points:
                    kind, unit, text, _ = self.instruments[name]
                    copied = [
                        [p[0], *p[1:5], list(p[5]), p[6]] if kind == "histogram" else list(p)
                        for p in points.values()
                    ]
                    out.append((name, kind, unit, text, copied))
        for name, (unit, text) in self.gauge_specs.items():
            out.append((name, "gauge", unit, text, [[{}, gauge_total(self.registry, name)]]))
        return out

    def otlp(self, resource: bytes, scope: bytes) -> bytes:
        now = time.time_ns()
        encoded = []
        for name, kind, unit, text, points in self.snapshot():
            if kind == "histogram":
                body = [
                    encode.histogram_point(
                        p[0], self.start, now, p[1], p[2], p[3], p[4], p[5], p[6]
                    )
                    for p in points
                ]
            else:
                body = [encode.number_point(p[0], self.start, now, p[1]) for p in points]
            encoded.append(encode.metric(name, text, unit, kind, body))
        return encode.metrics(resource, scope, encoded)


def prometheus_name(name: str, unit: str) -> str:
    """An instrument's name as OpenTelemetry's Prometheus exporter writes it: dots as
    underscores, a unit of seconds as `_seconds`, an annotation unit (`{...}`) dropped."""
    base = name.replace(".", "_").replace("-", "_")
    return base + "_seconds" if unit == "s" else base


class PrometheusCollector:
    """The tally as prometheus_client metric families (registered in its default registry,
    which `/metrics` writes with the SDK reader's families)."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import Metric
        from prometheus_client.utils import floatToGoString

        for name, kind, unit, text, points in self.tally.snapshot():
            base = prometheus_name(name, unit)
            if kind == "histogram":
                family = Metric(base, text, "histogram")
                for p in points:
                    labels, count, total, buckets, bounds = p[0], p[1], p[2], p[5], p[6]
                    running = 0
                    for edge, n in zip((*bounds, math.inf), buckets, strict=True):
                        running += n
                        le = floatToGoString(edge)  # type: ignore[no-untyped-call,unused-ignore]
                        family.add_sample(f"{base}_bucket", {**labels, "le": le}, running)
                    family.add_sample(f"{base}_count", labels, count)
                    family.add_sample(f"{base}_sum", labels, total)
            elif kind == "counter":
                family = Metric(base, text, "counter")
                for p in points:
                    family.add_sample(f"{base}_total", p[0], p[1])
            else:  # an up-down counter or a gauge
                family = Metric(base, text, "gauge")
                for p in points:
                    family.add_sample(base, p[0], p[1])
            yield family

    def describe(self) -> list[Any]:
        return []  # names are known only once recorded: never checked against others


class Periodic:
    """`job()` every `interval` seconds on a thread of its own, and once more at stop."""

    def __init__(self, job: Callable[[], None], interval: float, name: str) -> None:
        self.job = job
        self.interval = interval
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        atexit.register(self.stop)

    def _run(self) -> None:
        while not self.wake.wait(self.interval):
            self._once()

    def _once(self) -> None:
        try:
            self.job()
        except Exception as exc:  # noqa: BLE001 - an exporter's failure: never the agent's
            log.warning("metrics not exported: %s: %s", type(exc).__name__, exc)

    def stop(self) -> None:
        if self.wake.is_set():
            return
        self.wake.set()
        self.thread.join(timeout=max(self.interval, 5.0))
        self._once()
        atexit.unregister(self.stop)


class OtlpMetrics:
    """The tally posted as one OTLP/HTTP request by the SDK metric exporter's HTTP client."""

    def __init__(self, tally: Tally, exporter: Any, resource: Any) -> None:
        self.tally = tally
        self.exporter = exporter
        self.client = getattr(exporter, "_client", None)
        self.head = encode.resource(resource.attributes), encode.scope("acp.runtime", None)

    def __call__(self) -> None:
        if self.client is None or not callable(getattr(self.client, "export", None)):
            log.warning(
                "this OTLP metric exporter has no HTTP client: the runtime's metrics "
                "are not exported (opentelemetry-exporter-otlp-proto-http >= 1.45)"
            )
            return
        got = self.client.export(self.tally.otlp(*self.head))
        if not getattr(got, "success", True):
            log.warning("OTLP: the runtime's metrics not exported (%s)", got.reason)


class ConsoleMetrics:
    """The tally on stderr, a JSON line a point (stdout is the protocol on stdio)."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally

    def __call__(self) -> None:
        for name, kind, _, _, points in self.tally.snapshot():
            for p in points:
                value: Any = p[1] if kind != "histogram" else {"count": p[1], "sum": p[2]}
                sys.stderr.write(
                    json.dumps({"metric": name, "labels": p[0], "value": value}) + "\n"
                )


class Instruments:
    """The same calls as `Tally`'s, recorded by the SDK's instruments of a program's own
    meter provider (its readers: e.g. the SDK's in-memory one)."""

    def __init__(self, meter: Any, instruments: Mapping[str, Spec]) -> None:
        self.recorders: dict[str, Callable[..., None]] = {}
        for name, (kind, unit, text, buckets) in instruments.items():
            if kind == "counter":
                self.recorders[name] = meter.create_counter(name, unit, text).add
            elif kind == "updown":
                self.recorders[name] = meter.create_up_down_counter(name, unit, text).add
            else:
                self.recorders[name] = meter.create_histogram(
                    name, unit, text, explicit_bucket_boundaries_advisory=list(buckets)
                ).record
        self.labels: dict[tuple[Any, ...], dict[str, str]] = {}

    def _labels(self, key: tuple[Any, ...], names: Names) -> dict[str, str]:
        found = self.labels.get(key)
        if found is None:
            found = dict(zip(names, map(str, key[1:]), strict=True))
            if len(self.labels) < MAX_CACHED:
                self.labels[key] = found
        return found

    def record(self, name: str, value: float, key: tuple[Any, ...], names: Names) -> None:
        self.recorders[name](value, self._labels(key, names))

    add = record

    def metric(self, name: str, value: float, labels: dict[str, str]) -> None:
        self.recorders[name](value, labels)
