"""Where the runtime's ended spans go: a batch taken 128 at a time where they end (the
event loop) and exported from a thread of its own (OTLP/HTTP, written by `encoded_batch`
from the spans' plain values, or an SDK exporter given the SDK's spans), or a program's
own SDK span processors at once; on the way, each span's metrics are folded (otel.py's
`fold`)."""

from __future__ import annotations

import atexit
import collections
import logging
import threading
from collections.abc import Callable, Sequence
from itertools import compress, repeat, starmap
from operator import attrgetter
from typing import Any

from . import encode
from .spans import SCOPE, Span, readable

log = logging.getLogger("acp.runtime.observe")
_FLAGS = attrgetter("flags")
# The queue's length at which the loop takes what is queued (folded, encoded: the spans
# freed), whatever the export batch's size: a span is an object the collector tracks, and
# a batch's 512 of them, with what a program allocates meanwhile, would start the
# collector's young collections (and every tenth, a walk of the older objects)
TAKE_AT = 128


def encoded(span: Span) -> bytes:
    """`span` as a framed OTLP `Span` (encode.py)."""
    return b"".join(encoded_batch([span]))


# What the spans of one combination (shape, own attributes, key, failure, trace state, a
# parent from the peer: `taken` reads them) share: the bytes of their frame but
# for their ids and times (its head, then name, kind, attributes, trace state, status,
# flags: a message's fields may come in any order, its ids and times last), packed with
# those by one struct (`encode.spans`: the bytes and the struct's pack) for a root and
# one for a child; and the list their metrics are folded from (one a shape, key and
# failure: `taken`).  Made once, by the pass that first meets the combination.
Made = tuple[bytes, Callable[..., bytes], bytes, Callable[..., bytes], list[Span]]
_made: dict[tuple[Any, ...], Made] = {}
_groups: dict[tuple[Any, ...], list[Span]] = {}


def _make(combination: tuple[Any, ...]) -> Made:
    """How a span of this combination is packed (a root, a child) and its fold group."""
    shape, extra, key, failure, state, peer = combination
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
    if len(_groups) >= encode.MAX_CACHED:
        _groups.clear()  # (every group is empty between two takes)
    group = _groups.setdefault((shape, key, failure), [])
    made = (*encode.spans(tail, encode.ROOT), *encode.spans(tail, encode.CHILD), group)
    if len(_made) >= encode.MAX_CACHED:
        _made.clear()
    _made[combination] = made
    return made


def encoded_batch(batch: Sequence[Span]) -> list[bytes]:
    """The spans as framed OTLP `Span`s (field 2 of their ScopeSpans), one bytes a span
    packed by one struct made once per combination."""
    return taken(batch, True, grouped=False)[1]


def taken(
    batch: Sequence[Span], encoding: bool, *, grouped: bool = True
) -> tuple[list[list[Span]], list[bytes]]:
    """One pass over ended spans: grouped by what their metrics are kept by (shape, key,
    failure: each group a list, emptied by the caller once folded), and the sampled ones
    encoded (`encoding`) as `encoded_batch` has it."""
    out: list[bytes] = []
    touched: list[list[Span]] = []
    made, append, touch = _made, out.append, touched.append
    for s in batch:  # (its fields read here: each read specialized to the one Span type)
        combination = (s.shape, s.extra, s.key, s.failure, s.state, s.peer)
        try:
            found = made[combination]
        except KeyError:
            found = _make(combination)
        if grouped:
            group = found[4]
            if not group:
                touch(group)
            group.append(s)
        if not encoding or not s.flags:
            continue
        psid = s.psid
        if psid:
            pack = found[3]
            append(
                pack(found[2], s.tid, 0x0812, s.sid, 0x0822, psid, 0x39, s.start, 0x41, s.end_ns)
            )
        else:
            pack = found[1]
            append(pack(found[0], s.tid, 0x0812, s.sid, 0x39, s.start, 0x41, s.end_ns))
    return touched, out


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
        self.send(encoded_batch(batch), len(batch))

    def send(self, pieces: list[bytes], count: int) -> None:
        """`count` spans already encoded (`encoded_batch`'s pieces), as one request."""
        client: Any = self.client  # (a Batch sends so only through a client)
        got = client.export(encode.traces(*self.head, pieces))
        if not getattr(got, "success", True):
            log.warning("OTLP: %d spans not exported (%s)", count, got.reason)


class Batch:
    """Ended spans queued where they end (the event loop: a deque, no lock) and taken there
    as soon as `TAKE_AT` are queued (the next span's start does it: `full`): their metrics
    folded (`fold`: every span, sampled or not; a group of spans of one shape, key and
    failure at a time), the sampled ones encoded into the outbox (`OtlpSpans`: in the same
    pass) and exported in batches (`OTEL_BSP_*`) from a thread of its own, woken when a
    batch is full and every `delay` seconds (what is queued then is taken there).  The
    loop takes them itself rather than waking the thread for it: under the GIL that pass
    would not run beside the loop anyway (bench/README.md: the same count either way, one
    wake-up and hand-over of the GIL fewer every 128 spans); the thread is for what
    waits on the network.  Past `max_queue` in the outbox a span is dropped (a collector
    that does not answer costs neither memory nor a metric: the metrics are folded as
    the spans are taken).  What reads the metrics takes what is queued first (`take`), so
    a scrape is never behind."""

    def __init__(
        self,
        exports: list[Any],
        delay: float,
        max_queue: int,
        max_batch: int,
        fold: Callable[[list[list[Span]]], None] | None = None,
    ) -> None:
        self.exports = exports
        self.fold = fold
        self.delay = delay
        self.max_queue = max_queue
        self.max_batch = max_batch
        self.queue: collections.deque[Span] = collections.deque()  # appended on the loop
        # the queue's length at which a tracer calls `full`
        self.limit = min(max_batch, max_queue + 1, TAKE_AT)
        # when every export posts OTLP: the outbox holds their bytes (one a span)
        self.encoding = bool(exports) and all(
            isinstance(e, OtlpSpans) and e.client is not None for e in exports
        )
        self.outbox: collections.deque[Any] = collections.deque()  # sampled, to export
        self.lock = threading.Lock()  # one taker at a time
        self.dropped = 0
        self.wake = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="acp-otel-spans", daemon=True)
        self.thread.start()
        atexit.register(self.stop)

    def __call__(self, span: Span) -> None:
        """(A tracer appends to the queue itself and calls `full`; this is for others.)"""
        self.queue.append(span)
        if len(self.queue) >= self.limit:
            self.full()

    def full(self) -> None:
        """The queue holds `TAKE_AT` (a tracer looks before each span it starts): taken
        here; the thread woken once the outbox holds a batch to export."""
        self.take()
        if len(self.outbox) >= self.max_batch:
            self.wake.set()

    def take(self) -> None:
        """Fold what is queued into the metrics and move its sampled spans to the outbox
        (bounded by `max_queue`: past it a span is dropped, and said so at the next export)."""
        queue, outbox = self.queue, self.outbox
        with self.lock:
            # (popped in C while the loop may append; one taker at a time: the lock)
            spans = list(starmap(queue.popleft, repeat((), len(queue))))
            if not spans:
                return
            exporting = bool(self.exports)
            encoding = exporting and self.encoding
            groups: list[list[Span]] = []
            pieces: list[Any] = []
            if encoding or self.fold is not None:
                groups, pieces = taken(spans, encoding, grouped=self.fold is not None)
            try:
                if self.fold is not None:
                    self.fold(groups)
            finally:
                for group in groups:
                    group.clear()
            if not exporting:
                return
            if not self.encoding:
                pieces = list(compress(spans, map(_FLAGS, spans)))
            room = max(self.max_queue - len(outbox), 0)
            if len(pieces) > room:
                self.dropped += len(pieces) - room
                pieces = pieces[:room]
            outbox.extend(pieces)

    def _run(self) -> None:
        while not self.stopping:
            full = self.wake.wait(self.delay)  # else the delay passed: everything goes
            self.wake.clear()
            self.drain(everything=not full)

    def drain(self, everything: bool = True) -> None:
        """Take what is queued and export the outbox in batches: only full ones unless
        `everything` (the rest waits for the delay or the next full batch: no request for
        a handful of spans)."""
        self.take()
        outbox, size = self.outbox, self.max_batch
        while len(outbox) >= size or (everything and outbox):
            batch = list(starmap(outbox.popleft, repeat((), min(size, len(outbox)))))
            for export in self.exports:
                try:
                    if self.encoding:
                        export.send(batch, len(batch))
                    else:
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

    def __init__(
        self, provider: Any, fold: Callable[[list[list[Span]]], None] | None = None
    ) -> None:
        self.provider = provider
        self.fold = fold
        self.processor = getattr(provider, "_active_span_processor", None)
        if provider is not None and self.processor is None:
            log.warning("the tracer provider is not the SDK's: the runtime's spans are not kept")

    def __call__(self, span: Span) -> None:
        if self.fold is not None:
            self.fold([[span]])
        if span.flags and self.processor is not None:
            self.processor.on_end(readable(span, self.provider.resource))
