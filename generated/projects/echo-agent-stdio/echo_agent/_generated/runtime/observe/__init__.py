"""What a deployed agent shows its operator: OpenTelemetry traces and metrics (README,
"Observing it").  Off unless configured, and then nearly free: each call below reads one
module global and hands its work back untouched.

On when the project's `otel` extra is installed and the standard variables configure an
exporter (`OTEL_TRACES_EXPORTER`, `OTEL_METRICS_EXPORTER`, `OTEL_EXPORTER_OTLP_ENDPOINT`,
...; `OTEL_SDK_DISABLED=true` keeps it off), or when a program passes its own providers
to `configure` (tests: the SDK's in-memory exporters).  Only then is the SDK imported
(`otel.py`: the hooks; `providers.py`: the SDK's providers from `OTEL_*`, for pydantic-ai
and the MCP SDK; `spans.py`, `tally.py`, `encode.py`: the runtime's own spans and metrics,
recorded as plain values and written as OTLP or Prometheus' text in batches, a
few us a span where the SDK's cost ~50).  The rest of the runtime calls:

* ``with request(method, params, conn)`` (one served JSON-RPC request: the trace context
  of its ``_meta.traceparent``, else of the HTTP request, is its parent; what
  ``conn.about()`` says of the connection, if it has that, is among its attributes),
  ``call(method, params)`` (a request sent to the peer: its trace context goes into the
  params' ``_meta``), ``turn(session, prompt)``, ``tool(name, server)`` (an MCP tool call),
  ``store(op, calls)`` (a session store call), ``queued()`` (a prompt waiting for its
  session's turn): the work in the block as a span, ended (and its failure recorded) as
  the block ends; the metrics of each kind are folded from its spans, 128 at a time;
* ``metric(name, value, **labels)``: a count (`otel.INSTRUMENTS` names them all);
* ``gauge(name, owner, read)``: a value read when metrics are collected;
* ``parent(headers)``: a `with` block whose requests take the `traceparent` header's
  trace as their parent (a POST's, a WebSocket upgrade's, a relayed POST's);
  ``exposition()``: the Prometheus text of the metrics.

Never a secret: attributes and labels are method names, ids, codes and stop reasons; no
header value, key, prompt or file content (the prompt's text only with
``ACP_TRACE_CONTENT=1``).  A leaf room: it imports nothing else of the runtime.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from .otel import Telemetry

log = logging.getLogger("acp.runtime.observe")


class _Switch:
    __slots__ = ("on",)

    def __init__(self) -> None:
        self.on: Telemetry | None = None


_state = _Switch()  # what every call reads first
_NOTHING = contextlib.nullcontext()


def configured(env: Any = os.environ) -> bool:
    """The environment asks for telemetry: an exporter named for traces or metrics (not
    `none`), or an OTLP endpoint for a signal whose exporter is not named; and the SDK not
    disabled."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    anywhere = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    for signal in ("TRACES", "METRICS"):
        named = env.get(f"OTEL_{signal}_EXPORTER", "").strip().lower()
        endpoint = anywhere or env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT", "").strip()
        if (named and named != "none") or (not named and endpoint):
            return True
    return False


def configure(tracer_provider: Any = None, meter_provider: Any = None) -> bool:
    """Turn telemetry on with these providers (an embedding program's, a test's
    in-memory ones), or from the environment when neither is given; off when the
    environment configures nothing or the `otel` extra is missing.  True when on."""
    stop()
    if tracer_provider is None and meter_provider is None and not configured():
        return False
    # the SDK, its exporters, protobuf and requests are ~100k long-lived objects: loaded
    # with the collector off, then frozen (`gc.freeze`), so that no later collection walks
    # them again (as the model room's warm-up does with what it loads)
    collecting = gc.isenabled()
    gc.disable()
    try:
        from . import otel

        _state.on = otel.Telemetry.start(tracer_provider, meter_provider, _gauges)
        _bind(_state.on)
    except ImportError as exc:  # configured, but the extra is not installed
        log.warning("OTEL_* is set but the otel extra is not installed (%s): no telemetry", exc)
        return False
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    return True


def stop() -> None:
    """Telemetry off (what is buffered is flushed when it came from the environment)."""
    was, _state.on = _state.on, None
    _bind(None)
    if was is not None:
        was.stop()


def on() -> bool:
    return _state.on is not None


class _Off:
    """What a span's `with` block gets when telemetry is off: nothing."""

    __slots__ = ()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set_stop_reason(self, reason: Any) -> None:
        return

    def set_tool_result(self, result: Any) -> None:
        return


OFF = _Off()
Span = Any  # a span's `with` block: spans.Span when on, OFF when off


# The span hooks: these when off; when on, the Telemetry's own methods of the same names
# are bound here in their place (`_bind`), so a call site pays one call either way.
def _request(method: str, params: Any, conn: Any) -> Span:
    """A served JSON-RPC request's span: its `_meta.traceparent`, else the HTTP request's,
    is its parent."""
    return OFF


def _call(method: str, params: Any) -> Span:
    """A request sent to the peer: its trace context goes into the params' `_meta`."""
    return OFF


def _turn(session: str, prompt: Any) -> Span:
    """A prompt turn (`set_stop_reason` as it ends)."""
    return OFF


def _tool(tool: str, server: str | None) -> Span:
    """An MCP tool call (`set_tool_result` with what it returned)."""
    return OFF


def _store(op: Callable[[], Any], calls: Any) -> Span:
    """A session store call (`op`: the lambda that makes it; `calls`: the store's methods)."""
    return OFF


def _queued() -> contextlib.AbstractContextManager[Any]:
    """A prompt waiting for its session's turn."""
    return OFF


request, call, turn, tool, store, queued = _request, _call, _turn, _tool, _store, _queued
_HOOKS = {"request": _request, "call": _call, "turn": _turn, "tool": _tool}
_HOOKS |= {"store": _store, "queued": _queued}


def _bind(telemetry: Telemetry | None) -> None:
    """The span hooks of this module: `telemetry`'s, or the ones of telemetry off."""
    for name, off in _HOOKS.items():
        globals()[name] = off if telemetry is None else getattr(telemetry, name)


def metric(name: str, value: float = 1, **labels: Any) -> None:
    """Add `value` to the instrument `name` (a counter, an up-down counter or a histogram)."""
    telemetry = _state.on
    if telemetry is not None:
        telemetry.metric(name, value, labels)


def gauge(name: str, owner: Any, read: Callable[[Any], float]) -> None:
    """Report `read(owner)` as the gauge `name` at each collection, summed over the
    owners registered; an owner is held weakly (gone: it counts nothing).  Registered
    whether telemetry is on or not (a weak reference: nothing more)."""
    _gauges.setdefault(name, []).append((weakref.ref(owner), read))


_gauges: dict[str, list[tuple[weakref.ref[Any], Callable[[Any], float]]]] = {}


def parent(headers: Any) -> contextlib.AbstractContextManager[Any]:
    """A `with` block in which the trace context of `headers` (an HTTP request's: a
    mapping, or ASGI's list of byte pairs) is the current one."""
    telemetry = _state.on
    if telemetry is None:
        return _NOTHING
    return telemetry.parent(headers)


def exposition() -> tuple[bytes, str] | None:
    """The metrics in Prometheus' text format and its content type; None when no
    Prometheus reader is configured (`OTEL_METRICS_EXPORTER=prometheus`)."""
    telemetry = _state.on
    return telemetry.exposition() if telemetry is not None else None


configure()  # from the environment, once, as the runtime is imported

__all__ = [
    "call",
    "configure",
    "configured",
    "exposition",
    "gauge",
    "metric",
    "on",
    "parent",
    "queued",
    "request",
    "stop",
    "store",
    "tool",
    "turn",
]
