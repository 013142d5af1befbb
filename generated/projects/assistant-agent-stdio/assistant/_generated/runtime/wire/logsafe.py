"""What the runtime's logs may show: secrets redacted, and warnings a peer can trigger
rate limited.

Values registered here are replaced by ``[redacted]`` in every log line the runtime's
handlers write.  Process-wide secrets (auth tokens, the callback key) stay for the life
of the process; values a connection registers (provider headers, URL credentials) are
counted against that connection (at most ``MAX_SECRETS_PER_OWNER``) and forgotten when
it ends.  A registration over the cap is refused (``SecretLimit``), never evicting a
value that may still be in use.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

MAX_SECRETS_PER_OWNER = 256
_MIN_SECRET = 4  # shorter values are not redacted: they would blank ordinary text
_GLOBAL: set[str] = set()
_OWNED: dict[int, set[str]] = {}
_REFS: dict[str, int] = {}  # value -> how many owners hold it
_ordered: list[str] = []  # every registered value, longest first


class SecretLimit(Exception):
    """A connection tried to register more secret values than it may hold."""


def _reorder() -> None:
    _ordered[:] = sorted({*_GLOBAL, *_REFS}, key=len, reverse=True)


def register_secret(value: str, owner: object | None = None) -> None:
    """A credential that no log line may show; ``owner`` (a connection) scopes it."""
    register_secrets([value], owner)


def register_secrets(values: list[str], owner: object | None = None) -> None:
    """Register all of ``values`` or none (``SecretLimit`` when ``owner`` would hold more
    than ``MAX_SECRETS_PER_OWNER``)."""
    fresh = {v for v in values if len(v) >= _MIN_SECRET}
    if owner is None:
        if not fresh <= _GLOBAL:
            _GLOBAL.update(fresh)
            _reorder()
        return
    held = _OWNED.setdefault(id(owner), set())
    fresh -= held
    if not fresh:
        return
    if len(held) + len(fresh) > MAX_SECRETS_PER_OWNER:
        raise SecretLimit(
            f"too many distinct secret values on this connection (limit "
            f"{MAX_SECRETS_PER_OWNER}); open a new connection"
        )
    held.update(fresh)
    for value in fresh:
        _REFS[value] = _REFS.get(value, 0) + 1
    _reorder()


def forget_secrets(owner: object) -> None:
    """The connection ended: drop the values only it held."""
    held = _OWNED.pop(id(owner), None)
    if not held:
        return
    for value in held:
        n = _REFS.get(value, 0) - 1
        if n > 0:
            _REFS[value] = n
        else:
            _REFS.pop(value, None)
    _reorder()


def redact(text: str) -> str:
    """`text` with every registered secret replaced by ``[redacted]``."""
    if _ordered and text:
        for secret in _ordered:
            if secret in text:
                text = text.replace(secret, "[redacted]")
    return text


def _redact_arg(arg: Any) -> Any:
    """One %-format argument: kept as it is (its type matters to the formatter: uvicorn's
    access log unpacks them and reads the status code as an int) unless its text holds
    a secret, then the redacted text."""
    if isinstance(arg, (int, float)) or arg is None:
        return arg
    text = arg if isinstance(arg, str) else str(arg)
    clean = redact(text)
    return arg if clean == text else clean


class RedactingFormatter(logging.Formatter):
    """Formats a record (tracebacks included), then removes registered secrets."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class RedactingFilter(logging.Filter):
    """For handlers the runtime does not format (uvicorn's): secrets out of the record's
    message and arguments, which keep their shape (a formatter may unpack them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _ordered:
            return True
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(_redact_arg(a) for a in args)
        elif isinstance(args, dict):
            record.args = {k: _redact_arg(v) for k, v in args.items()}
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


_MAX_LIMITED_KEYS = 1024


class RateLimitedLog:
    """Warnings a peer can trigger once per frame, at most once per ``interval`` seconds
    per key; the next one says how many were suppressed meanwhile."""

    def __init__(self, logger: logging.Logger, interval: float = 60.0) -> None:
        self.logger = logger
        self.interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warning(self, key: str, msg: str, *args: Any) -> None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        if len(self._last) > _MAX_LIMITED_KEYS:  # keys are fixed strings: only a backstop
            self._last.clear()
        self._last[key] = now
        skipped = self._suppressed.pop(key, 0)
        if skipped:
            msg += " (%d more like it suppressed)"
            args = (*args, skipped)
        self.logger.warning(msg, *args)


def stderr_logging(level: int = logging.WARNING) -> None:
    """Logs go to stderr, never to the protocol stream; secrets are redacted."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("acp.runtime")
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
