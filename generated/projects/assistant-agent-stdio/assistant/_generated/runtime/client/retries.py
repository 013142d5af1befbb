"""Transient agent errors: which are (``is_transient``, ``retry_after``), retrying them
(``with_retries``), and one line for any error (``describe_error``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..wire.errors import ConnectionClosed, RpcError

T = TypeVar("T")

# transient agent errors (error data `transient: true`) are retried this many times,
# waiting RETRY_DELAY seconds before the first retry and twice as long before each next
RETRIES = 3
RETRY_DELAY = 1.0
# an error's own `retry_after` (seconds; HTTP `Retry-After` on 429/503) replaces that
# wait, but never beyond MAX_RETRY_WAIT seconds
MAX_RETRY_WAIT = 60.0
# how long the agent has to answer `initialize` and `session/new` (a first `npx`/`uvx`
# download may need more: --connect-timeout)
CONNECT_TIMEOUT = 30.0


def is_transient(err: BaseException) -> bool:
    """Whether the agent said a retry may succeed (its error data says `transient: true`,
    or when to retry: `retry_after`)."""
    data = err.data if isinstance(err, RpcError) else None
    return type(data) is dict and (data.get("transient") is True or retry_after(err) is not None)


def retry_after(err: BaseException) -> float | None:
    """The seconds the error's data asks to wait before a retry (`retry_after` or
    `retryAfter`, a non-negative number), if any."""
    data = err.data if isinstance(err, RpcError) else None
    if type(data) is not dict:
        return None
    for key in ("retry_after", "retryAfter"):
        value = data.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return float(value)
    return None


def describe_error(err: BaseException) -> str:
    """One line for an error: `error 1001 QuotaExceeded (transient): <message>` (the code,
    the name and `(transient)` from the error's data when it has them), `error: the agent
    exited (exit status 1)` when the connection ended."""
    if isinstance(err, ConnectionClosed):
        return f"error: {one_line(err.message)}"
    if isinstance(err, RpcError):
        data = err.data if type(err.data) is dict else {}
        name = data.get("name")
        head = f"error {err.code}"
        if type(name) is str and name:
            head += f" {one_line(name)}"
        if is_transient(err):
            head += " (transient)"
        return f"{head}: {one_line(err.message)}"
    return f"error: {one_line(str(err)) or type(err).__name__}"


def one_line(text: str, limit: int = 500) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


async def with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    retries: int = RETRIES,
    delay: float = RETRY_DELAY,
    max_wait: float = MAX_RETRY_WAIT,
    on_retry: Callable[[RpcError, int, float], None] | None = None,
) -> T:
    """`await call()`, again after a transient agent error: at most `retries` more times,
    waiting `delay`, then 2x, 4x... seconds, or the error's own `retry_after`, at most
    `max_wait` (`on_retry(error, attempt, wait)` is told before each wait).  Any other
    error, or the last transient one, is raised."""
    attempt = 0
    while True:
        try:
            return await call()
        except RpcError as err:
            if attempt >= retries or not is_transient(err):
                raise
            asked = retry_after(err)
            wait = min(asked if asked is not None else delay * 2**attempt, max(0.0, max_wait))
            attempt += 1
            if on_retry is not None:
                on_retry(err, attempt, wait)
            await asyncio.sleep(wait)
