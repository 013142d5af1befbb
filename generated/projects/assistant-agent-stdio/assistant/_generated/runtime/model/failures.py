"""A model's failure as the JSON-RPC error it stands for, classified once, by what the
user can do about it (SPEC: "A model agent in production"):

- **credentials** (401/403): check the key or the route's headers; not transient;
- **request** (400/404/413/422, a context that is too long, a model the provider does not
  know): the provider will never accept it as it is; not transient; the provider's own
  message (secrets redacted, cut) and, for a context that is too long, what to do;
- **configuration** (no key in the environment, a model id nobody serves): the variable
  or the id named; not transient;
- **transient** (408, 429, 5xx, timeouts, a connection that failed, a stream cut before
  its end): retry, after `retry_after` seconds when the provider said (from
  `Retry-After` seconds or an HTTP date, clamped to `MAX_RETRY_AFTER`).

The agent's own model clients never retry (route.py: `max_retries=0`): the editor gets
the error at once and decides.  No message carries a header, a key or a URL's query.
"""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from ..wire.errors import RpcError, clip
from ..wire.logsafe import redact

MODEL_ERROR = -32603
MAX_RETRY_AFTER = 300.0  # seconds: a provider's `Retry-After` above this is clamped
KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")  # values never shown
_CREDENTIALS = frozenset({401, 403})
_CLIENT_ERRORS = range(400, 500)  # the request's fault, but for the few below
_MIN_SECRET = 4  # shorter values would blank ordinary words
_SAID = 200  # characters of a provider's own message quoted (after what to do: the wire clips)
_TRANSIENT = frozenset({408, 409, 425, 429})


class StreamCut(Exception):
    """A model's answer that ended before the provider said it was finished (a stream
    closed without its finish reason or terminal event): transient, nothing kept."""


def retry_after_seconds(value: Any, now: datetime | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` value (a number of seconds, or an HTTP date),
    between 0 and `MAX_RETRY_AFTER`; None when it says nothing usable."""
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        raw = value.strip()
        try:
            seconds = float(raw)
        except ValueError:
            try:
                when = parsedate_to_datetime(raw)
            except (TypeError, ValueError, IndexError):
                return None
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if seconds is None or math.isnan(seconds):
        return None
    seconds = min(max(seconds, 0.0), MAX_RETRY_AFTER)
    return float(int(seconds)) if seconds.is_integer() else seconds


def _retry_after(exc: BaseException) -> float | None:
    headers = getattr(exc, "headers", None)
    if isinstance(headers, dict):
        if "retry-after-ms" in headers:
            try:
                return retry_after_seconds(float(headers["retry-after-ms"]) / 1000)
            except ValueError:
                pass
        if "retry-after" in headers:  # read again: pydantic-ai's own parse does not clamp
            return retry_after_seconds(headers["retry-after"])
    return retry_after_seconds(getattr(exc, "retry_after", None))


def _clean(text: str) -> str:
    """A provider's or library's message as it may be shown: registered secrets and the
    environment's keys replaced, cut to a readable length."""
    text = redact(text)
    for name in KEY_VARIABLES:
        value = os.environ.get(name, "")
        if len(value) >= _MIN_SECRET:
            text = text.replace(value, "[redacted]")
    return clip(text.strip(), _SAID)


def _provider_message(exc: BaseException) -> str:
    """The provider's own words about a refused request (`error.message` of its body)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error")
        for node in (inner, body):
            if isinstance(node, dict) and isinstance(node.get("message"), str):
                return _clean(node["message"])
        if isinstance(inner, str):
            return _clean(inner)
    if isinstance(body, str) and body.strip():
        return _clean(body)
    return ""


def _error(message: str, name: str, transient: bool, **details: Any) -> RpcError:
    data: dict[str, Any] = {"name": name, "transient": transient}
    retry_after = details.pop("retry_after", None)
    if retry_after is not None:  # whole seconds as an integer: `retry_after: 7`
        data["retry_after"] = int(retry_after) if retry_after.is_integer() else retry_after
    data["details"] = {k: v for k, v in details.items() if v is not None}
    return RpcError(MODEL_ERROR, message, data)


def _too_long(exc: BaseException, text: str) -> bool:
    from pydantic_ai.exceptions import ModelContextWindowExceededError

    code = str(getattr(exc, "provider_error_code", "") or "")
    return (
        isinstance(exc, ModelContextWindowExceededError)
        or "context_length" in code
        or "context length" in text.lower()
        or "too long" in text.lower()
    )


def model_error(exc: BaseException, provider: str | None) -> RpcError | None:
    """The JSON-RPC error a model failure stands for; None when `exc` is not one (the
    turn's own error handling goes on with it)."""
    from pydantic_ai.exceptions import (
        ModelAPIError,
        ModelAuthenticationError,
        ModelConnectionError,
        ModelHTTPError,
        ModelRequestRejectedError,
        UserError,
    )

    if isinstance(exc, RpcError):
        return exc
    if isinstance(exc, StreamCut):
        who = f"the model provider {provider!r}" if provider else "the model's provider"
        return _error(
            f"{who} cut its answer off before its end; nothing of it was kept: retry",
            "ModelUnavailable",
            True,
            reason="stream_cut",
        )
    if isinstance(exc, UserError) and not isinstance(exc, ModelAPIError):
        # raised before any request: no key in the environment, an unknown model id
        return _error(
            f"the model is not configured: {_clean(str(exc))}",
            "ModelConfiguration",
            False,
        )
    if not isinstance(exc, ModelAPIError):
        return None
    who = provider or getattr(exc, "model_name", None) or "the model"
    status = exc.status_code if isinstance(exc, ModelHTTPError) else None
    if status in _CREDENTIALS or (status is None and isinstance(exc, ModelAuthenticationError)):
        return _error(
            f"the model provider {who!r} refused the credentials (HTTP {status}): "
            "check the API key (or the route's headers)",
            "ModelAuthentication",
            False,
            status=status,
        )
    said = _provider_message(exc)
    if status is None:
        rejected = isinstance(exc, ModelRequestRejectedError)
    else:  # 400, 404, 413, 422 ...: every 4xx but the few that pass with time
        rejected = status in _CLIENT_ERRORS and status not in _TRANSIENT
    if rejected:
        what = f"HTTP {status}" if status else "refused"
        if _too_long(exc, said):
            return _error(
                f"the conversation is too long for the model {who!r} ({what}): start a new "
                "session, or pick a model with a larger context"
                + (f". The provider said: {said}" if said else ""),
                "ModelContextTooLong",
                False,
                status=status,
            )
        return _error(
            f"the model provider {who!r} refused the request ({what}; retrying will not help"
            " as it is)" + (f": {said}" if said else ""),
            "ModelRequestRejected",
            False,
            status=status,
            model=getattr(exc, "model_name", None),
        )
    if isinstance(exc, ModelConnectionError) and status is None:
        what = "no connection" if getattr(exc, "phase", None) != "read" else "the answer broke off"
    else:
        what = f"HTTP {status}" if status else type(exc).__name__
    return _error(
        f"the model provider {who!r} failed ({what}); retry",
        "ModelUnavailable",
        True,
        retry_after=_retry_after(exc),
        status=status,
    )


__all__ = ["MAX_RETRY_AFTER", "MODEL_ERROR", "StreamCut", "model_error", "retry_after_seconds"]
