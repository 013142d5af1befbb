"""OTLP's protobuf wire format for the runtime's own spans and metrics, written directly.

The OpenTelemetry SDK's encoder builds a protobuf message object per span, attribute and
value (~31 us a span): more than an echo turn's whole work.  The runtime's spans and points
have few shapes, so their bytes are written from plain values, each attribute's key/value
pair encoded once and reused (a few us a span: the pieces are here, a batch of spans is
put together by `sinks.encoded_batch`).  Field numbers are
opentelemetry-proto's (`opentelemetry/proto/{trace,metrics,common,resource}/v1/*.proto`);
tests decode what is written here with opentelemetry-proto's classes and compare it with
what the SDK's own encoder writes for the same spans.  Imports nothing of OpenTelemetry."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

MAX_CACHED = 4096  # encoded key/value pairs kept, at most

_DOUBLE = struct.Struct("<d")
TIMES = struct.Struct("<BQBQ")  # two fixed64 fields, each after its one-byte tag
_FLAGS = struct.Struct("<I")
PAIRS: dict[tuple[int, str, type, Any], bytes] = {}  # (field, key, type, value) -> its bytes


_LOW7 = 0x7F  # a varint's byte: seven bits of the number ...
_MORE = 0x80  # ... and whether another byte follows


def varint(n: int) -> bytes:
    """A base-128 varint (`n` >= 0; a negative int64 is given as its 64-bit two's complement)."""
    if n < _MORE:
        return bytes((n,))
    out = bytearray()
    while n > _LOW7:
        out.append((n & _LOW7) | _MORE)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a string, bytes, or an embedded message)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def any_value(value: Any) -> bytes:
    """An `AnyValue` message: string 1, bool 2, int64 3, double 4, array 5, bytes 7."""
    if type(value) is str:
        return field(1, value.encode())
    if type(value) is bool:
        return b"\x10\x01" if value else b"\x10\x00"
    if type(value) is int:
        return b"\x18" + varint(value & 0xFFFFFFFFFFFFFFFF)
    if type(value) is float:
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, bytes):
        return field(7, value)
    if isinstance(value, Sequence):  # ArrayValue { repeated AnyValue values = 1 }
        return field(5, b"".join(field(1, any_value(v)) for v in value))
    return field(1, str(value).encode())


def key_value(number: int, key: str, value: Any) -> bytes:
    """A `KeyValue` (key 1, value 2) framed as field `number` of its parent, made once per
    pair."""
    if isinstance(value, list | tuple):  # not a key of the cache
        return field(number, field(1, key.encode()) + field(2, any_value(value)))
    pair = (number, key, type(value), value)  # True and 1 are equal keys, not equal values
    found = PAIRS.get(pair)
    if found is None:
        found = field(number, field(1, key.encode()) + field(2, any_value(value)))
        if len(PAIRS) >= MAX_CACHED:  # (session ids come and go: the newest are kept)
            PAIRS.clear()
        PAIRS[pair] = found
    return found


def attributes(number: int, attrs: Iterable[tuple[str, Any]]) -> bytes:
    return b"".join(
        [PAIRS.get((number, k, type(v), v)) or key_value(number, k, v) for k, v in attrs]
    )


def resource(attrs: Mapping[str, Any]) -> bytes:
    """A `Resource` message (attributes 1)."""
    return attributes(1, attrs.items())


def scope(name: str, version: str | None) -> bytes:
    """An `InstrumentationScope` message (name 1, version 2)."""
    return field(1, name.encode()) + (field(2, version.encode()) if version else b"")


# ---- traces -------------------------------------------------------------------------
# Span: trace_id 1, span_id 2, trace_state 3, parent_span_id 4, name 5, kind 6,
# start_time_unix_nano 7 (fixed64), end_time_unix_nano 8 (fixed64), attributes 9,
# status 15 (message 2, code 3), flags 16 (fixed32)
REMOTE_KNOWN = 0x100  # SpanFlags: whether the parent is remote is known ...
REMOTE = 0x200  # ... and it is


UNSET = b"\x7a\x00"  # an empty Status (code UNSET)
LOCAL = b"\x85\x01" + _FLAGS.pack(REMOTE_KNOWN)
FROM_PEER = b"\x85\x01" + _FLAGS.pack(REMOTE_KNOWN | REMOTE)
KIND = [b"", b"\x30\x01", b"\x30\x02", b"\x30\x03", b"\x30\x04", b"\x30\x05"]
# trace_id (1, 16 bytes), span_id (2, 8 bytes), [parent_span_id (4, 8 bytes)], start and
# end (7, 8): a span's ids (the trace id's bytes; the span ids kept as the ints whose
# little-endian bytes are the wire's) and times, with their tags (0A 10, 12 08, 22 08, 39,
# 41: the trace id's tag ends the bytes before them; the others written as the
# little-endian 0x0812, 0x0822, 0x39, 0x41), in one struct after the rest of the span's
# frame (`spans`)
ROOT = "16sHQBQBQ"
CHILD = "16sHQHQBQBQ"


def spans(fields: bytes, ids: str) -> tuple[bytes, Callable[..., bytes]]:
    """What a span's frame is packed from: the bytes before its ids (its head, `fields`:
    the span's fields but its ids and times, the trace id's tag), and the struct's `pack`
    that writes them and its ids and times (`ids`: ROOT or CHILD), called as
    `pack(before, trace_id, ...)`: a call with no more arguments than the struct's."""
    size = len(fields) + 2 + struct.calcsize("<" + ids)
    before = b"\x12" + varint(size) + fields + b"\x0a\x10"
    return before, struct.Struct(f"<{len(before)}s{ids}").pack


def status(code: int, message: str) -> bytes:
    """A span's `Status` field (message 2, code 3)."""
    if not code and not message:
        return UNSET
    body = (field(2, message.encode()) if message else b"") + (
        b"\x18" + varint(code) if code else b""
    )
    return b"\x7a" + varint(len(body)) + body


def traces(resource_bytes: bytes, scope_bytes: bytes, spans: list[bytes]) -> bytes:
    """An `ExportTraceServiceRequest`: one ResourceSpans (resource 1, scope_spans 2), one
    ScopeSpans (scope 1, spans 2: each already framed, `sinks.encoded_batch`)."""
    body = b"".join(spans)
    scope = field(1, scope_bytes)
    scope_spans = len(scope) + len(body)
    resource = field(1, resource_bytes)
    inner = len(resource) + 1 + len(varint(scope_spans)) + scope_spans  # (the 0x12 tag: 1)
    return b"".join((b"\x0a", varint(inner), resource, b"\x12", varint(scope_spans), scope, body))


# ---- metrics ------------------------------------------------------------------------
# Metric: name 1, description 2, unit 3, gauge 5, sum 7, histogram 9.
# NumberDataPoint: start 2, time 3 (fixed64), as_double 4, as_int 6 (sfixed64), attributes 7.
# HistogramDataPoint: start 2, time 3, count 4 (fixed64), sum 5 (double), bucket_counts 6
# (packed fixed64), explicit_bounds 7 (packed double), attributes 9, min 11, max 12.
CUMULATIVE = 2  # AggregationTemporality


def number_point(labels: Mapping[str, str], start: int, now: int, value: float) -> bytes:
    head = TIMES.pack(0x11, start, 0x19, now)
    if type(value) is int:
        head += b"\x31" + struct.pack("<q", value)
    else:
        head += b"\x21" + _DOUBLE.pack(value)
    return head + attributes(7, labels.items())


def histogram_point(
    labels: Mapping[str, str],
    start: int,
    now: int,
    count: int,
    total: float,
    low: float,
    high: float,
    buckets: Sequence[int],
    bounds: Sequence[float],
) -> bytes:
    counts = struct.pack(f"<{len(buckets)}Q", *buckets)
    edges = struct.pack(f"<{len(bounds)}d", *bounds)
    out = [
        TIMES.pack(0x11, start, 0x19, now),
        b"\x21" + struct.pack("<Q", count),
        b"\x29" + _DOUBLE.pack(total),
        b"\x32" + varint(len(counts)) + counts,
        b"\x3a" + varint(len(edges)) + edges,
        attributes(9, labels.items()),
    ]
    if count:
        out.append(b"\x59" + _DOUBLE.pack(low) + b"\x61" + _DOUBLE.pack(high))
    return b"".join(out)


def metric(name: str, description: str, unit: str, kind: str, points: Iterable[bytes]) -> bytes:
    """A `Metric` message: `kind` histogram, sum (monotonic: a counter), updown (a
    non-monotonic sum) or gauge; its points already encoded."""
    head = field(1, name.encode()) + field(2, description.encode()) + field(3, unit.encode())
    if kind == "gauge":
        return head + field(5, b"".join(field(1, p) for p in points))
    body = b"".join(field(1, p) for p in points) + b"\x10" + varint(CUMULATIVE)
    if kind == "histogram":
        return head + field(9, body)
    return head + field(7, body + (b"\x18\x01" if kind == "counter" else b""))


def metrics(resource_bytes: bytes, scope_bytes: bytes, encoded: Iterable[bytes]) -> bytes:
    """An `ExportMetricsServiceRequest`: one ResourceMetrics (resource 1, scope_metrics 2),
    one ScopeMetrics (scope 1, metrics 2)."""
    scope_metrics = field(1, scope_bytes) + b"".join(field(2, m) for m in encoded)
    return field(1, field(1, resource_bytes) + field(2, scope_metrics))
