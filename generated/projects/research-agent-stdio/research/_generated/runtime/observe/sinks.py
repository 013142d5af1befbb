"""Where the runtime's ended spans go: a batch exported from a thread of its own (OTLP/HTTP,
written by `encoded_batch` from the spans' plain values, or an SDK exporter given the SDK's
spans), or a program's own SDK span processors at once; on the way, each span's metrics
are folded (otel.py's `fold`)."""

from __future__ import annotations

import atexit
import collections
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from . import encode
from .spans import SCOPE, Span, readable

log = logging.getLogger("acp.runtime.observe")


def encoded(span: Span) -> bytes:
    """`span` as a framed OTLP `Span` (encode.py)."""
    return b"".join(encoded_batch([span]))


# What the spans of one combination (shape, own attributes, key, failure, trace state, a
# parent from the peer) share: the head of their frame when a root and when a child, the
# bytes after their ids and times, and their own attributes (held: the key has their id).
# Made once, on the export thread.
_made: dict[tuple[Any, ...], tuple[bytes, bytes, bytes, Any]] = {}


def _frame(n: int) -> bytes:
    return b"\x12" + encode.varint(n)


def _make(combination: tuple[Any, ...], extra: Any) -> tuple[bytes, bytes, bytes, Any]:
    """What follows the ids and times of a span of this combination (its name, kind,
    attributes, trace state, status and flags), and its frame's heads."""
    shape, _, key, failure, state, peer = combination
    parts, pairs, pair = [shape.head], encode.PAIRS, encode.key_value
    for name, value in extra or ():
        parts.append(pairs.get((9, name, type(value), value)) or pair(9, name, value))
    if shape.named is not None and key is not None:
        parts.append(pair(9, shape.named, key))
    if state:
        parts.append(encode.field(3, state.encode()))
    parts.append(encode.status(failure[0], failure[1]) if failure else encode.UNSET)
    parts.append(encode.FROM_PEER if peer else encode.LOCAL)
    tail = b"".join(parts)
    made = (
        _frame(encode.ROOT.size + len(tail)),
        _frame(encode.CHILD.size + len(tail)),
        tail,
        extra,
    )
    if len(_made) >= encode.MAX_CACHED:
        _made.clear()
    _made[combination] = made
    return made


def encoded_batch(batch: Sequence[Span]) -> list[bytes]:
    """The spans as framed OTLP `Span`s (field 2 of their ScopeSpans), in pieces: per span
    its frame's head, its ids and times (one struct), and the rest, made once per
    combination."""
    out: list[bytes] = []
    made, append = _made, out.append
    root, child = encode.ROOT.pack, encode.CHILD.pack
    for s in batch:
        extra, psid = s.extra, s.psid
        combination = (s.shape, id(extra), s.key, s.failure, s.state, s.peer)
        found = made.get(combination)
        if found is None or found[3] is not extra:
            found = _make(combination, extra)
        if psid:
            append(found[1])
            append(child(0x100A, s.tid, 0x0812, s.sid, 0x0822, psid, 0x39, s.start, 0x41, s.end_ns))  # fmt: skip
        else:
            append(found[0])
            append(root(0x100A, s.tid, 0x0812, s.sid, 0x39, s.start, 0x41, s.end_ns))
        append(found[2])
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
    """Ended spans queued on the event loop (a deque: no lock) and taken from a thread
    every `delay` seconds or as soon as a batch is full (`OTEL_BSP_*`), and at stop: their
    metrics folded (`fold`: every span, sampled or not), the sampled ones exported.  What
    reads the metrics takes what is queued first (`take`), so a scrape is never behind."""

    def __init__(
        self,
        exports: list[Any],
        delay: float,
        max_queue: int,
        max_batch: int,
        fold: Callable[[Sequence[Span]], None] | None = None,
    ) -> None:
        self.exports = exports
        self.fold = fold
        self.delay = delay
        self.max_queue = max_queue
        self.max_batch = max_batch
        self.queue: collections.deque[Span] = collections.deque()  # appended on the loop
        self.outbox: collections.deque[Span] = collections.deque()  # sampled, to export
        self.lock = threading.Lock()  # one taker at a time
        self.dropped = 0
        self.wake = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="acp-otel-spans", daemon=True)
        self.thread.start()
        atexit.register(self.stop)

    def __call__(self, span: Span) -> None:
        queue = self.queue
        queue.append(span)
        queued = len(queue)
        if queued == self.max_batch:  # once per batch: the thread takes it whole
            self.wake.set()
        elif queued > self.max_queue:  # the thread is behind (a slow collector)
            self.take()

    def take(self) -> None:
        """Fold what is queued into the metrics and move its sampled spans to the outbox
        (bounded by `max_queue`: past it a span is dropped, and said so at the next export)."""
        queue, outbox, room = self.queue, self.outbox, self.max_queue
        with self.lock:
            taken = []
            while queue:
                try:
                    taken.append(queue.popleft())
                except IndexError:
                    break
            if self.fold is not None and taken:
                self.fold(taken)
            if self.exports:
                for span in taken:
                    if span.flags:
                        if len(outbox) < room:
                            outbox.append(span)
                        else:
                            self.dropped += 1

    def _run(self) -> None:
        while not self.stopping:
            full = self.wake.wait(self.delay)  # else the delay passed: everything goes
            self.wake.clear()
            self.drain(everything=not full)

    def drain(self, everything: bool = True) -> None:
        """Take what is queued and export the outbox in batches: only full ones when a
        batch filled up (the rest waits for the delay or the next full batch: no request
        for a handful of spans)."""
        self.take()
        outbox, size = self.outbox, self.max_batch
        while len(outbox) >= size or (everything and outbox):
            batch: list[Span] = []
            with_more = True
            while with_more and len(batch) < size:
                try:
                    batch.append(outbox.popleft())
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
    program's own SDK tracer provider (its exporters, e.g. the SDK's in-memory one), and
    its metrics folded at once (`fold`: a program's own meter provider's instruments)."""

    def __init__(self, provider: Any, fold: Callable[[Sequence[Span]], None] | None = None) -> None:
        self.provider = provider
        self.fold = fold
        self.processor = getattr(provider, "_active_span_processor", None)
        if provider is not None and self.processor is None:
            log.warning("the tracer provider is not the SDK's: the runtime's spans are not kept")

    def __call__(self, span: Span) -> None:
        if self.fold is not None:
            self.fold((span,))
        if span.flags and self.processor is not None:
            self.processor.on_end(readable(span, self.provider.resource))
