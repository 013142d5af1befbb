"""Async output to a callback URL (manifest ``output_modes: {async: {callback: true}}``).

The client names the URL in the prompt: ``session/prompt`` params ``_meta.callbackUrl``.
When the turn ends, the agent POSTs ``{"sessionId", "stopReason", "updates": [...]}``
(the turn's ``session/update`` payloads) as JSON to that URL.

Signature: Standard Webhooks (https://www.standardwebhooks.com/): headers
``webhook-id`` (``msg_<hex>``, the same on every retry of one delivery),
``webhook-timestamp`` (unix seconds) and ``webhook-signature: v1,<base64>``, the
HMAC-SHA256 of ``"<id>.<timestamp>.<body>"``, so a receiver verifies it with any Standard
Webhooks library (``standardwebhooks.Webhook(key).verify(body, headers)``) or with
:func:`verify`.  The key comes from ``ACP_CALLBACK_SECRET`` (or is passed in): a
``whsec_<base64>`` value is the base64 key (the usual form); any other value is used as
its UTF-8 bytes.  Without a secret nothing is sent (fail closed) and a warning names the
variable, never a value.

Delivery: up to ``attempts`` tries; a network error, a 408/425/429 or a 5xx is retried
after ``base_delay * 2**n`` seconds (capped at ``max_delay``, with jitter); any other
4xx is final.  Only ``http``/``https`` URLs are accepted.  Log lines carry the host of
the URL only (no query string, no secret, no signature).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import os
import random
import time
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

log = logging.getLogger("acp.runtime.callbacks")


class _RedactQuery(logging.Filter):
    """httpx logs each request's full URL at INFO: drop the query string (it may hold a
    token) from those records."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(_strip(a) if isinstance(a, httpx.URL) else a for a in record.args)
        return True


def _strip(url: httpx.URL) -> str:
    return str(url.copy_with(query=None, fragment=None, username=None, password=None))


logging.getLogger("httpx").addFilter(_RedactQuery())

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
SECRET_ENV = "ACP_CALLBACK_SECRET"
SECRET_PREFIX = "whsec_"
_RETRY_STATUS = frozenset({408, 425, 429})


def key_from_env(value: str | None) -> bytes | None:
    """The signing key from ``ACP_CALLBACK_SECRET``: ``whsec_<base64>`` or plain text."""
    if not value:
        return None
    if value.startswith(SECRET_PREFIX):
        try:
            return base64.b64decode(value[len(SECRET_PREFIX) :], validate=True) or None
        except (binascii.Error, ValueError):
            log.warning("%s starts with %s but is not base64: not used", SECRET_ENV, SECRET_PREFIX)
            return None
    return value.encode("utf-8")


def sign(secret: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of one message."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    mac = hmac.new(secret, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode("ascii")


def verify(
    secret: bytes, body: bytes, headers: Mapping[str, str], *, tolerance: float = 300.0
) -> bool:
    """True when ``headers`` carry a valid, fresh Standard Webhooks signature of ``body``."""
    lower = {k.lower(): v for k, v in headers.items()}
    msg_id, ts = lower.get(ID_HEADER, ""), lower.get(TIMESTAMP_HEADER, "")
    if not msg_id or not ts.isdigit() or abs(time.time() - int(ts)) > tolerance:
        return False
    expected = sign(secret, msg_id, int(ts), body).encode()
    return any(
        hmac.compare_digest(expected, given.encode())
        for given in lower.get(SIGNATURE_HEADER, "").split(" ")
        if given
    )


MAX_URL = 4096  # characters of a callback URL


def valid_url(url: Any) -> bool:
    if type(url) is not str or len(url) > MAX_URL:
        return False
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


class CallbackSender:
    def __init__(
        self,
        secret: bytes | None = None,
        *,
        attempts: int = 6,
        base_delay: float = 0.5,
        max_delay: float = 30.0,
        timeout: float = 10.0,
    ) -> None:
        if secret is None:
            secret = key_from_env(os.environ.get(SECRET_ENV))
        self._secret = secret
        self.attempts = attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.timeout = timeout
        self._tasks: set[asyncio.Task[bool]] = set()

    def __repr__(self) -> str:
        return f"<CallbackSender attempts={self.attempts}>"

    def schedule(self, url: str, payload: dict[str, Any]) -> asyncio.Task[bool]:
        """Deliver in the background (outlives the connection that asked for it)."""
        task = asyncio.get_running_loop().create_task(self.deliver(url, payload))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def deliver(self, url: str, payload: dict[str, Any]) -> bool:
        host = urlsplit(url).hostname if valid_url(url) else None
        if host is None:
            log.warning("callback not sent: the URL is not an http(s) URL")
            return False
        if not self._secret:
            log.warning("callback to %s not sent: %s is not set", host, SECRET_ENV)
            return False
        body = orjson.dumps(payload)
        msg_id = "msg_" + uuid.uuid4().hex  # one id for every attempt: receivers dedupe on it
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            for attempt in range(self.attempts):
                now = int(time.time())
                headers = {
                    "Content-Type": "application/json",
                    ID_HEADER: msg_id,
                    TIMESTAMP_HEADER: str(now),
                    SIGNATURE_HEADER: sign(self._secret, msg_id, now, body),
                }
                try:
                    r = await client.post(url, content=body, headers=headers)
                    if r.is_success:
                        return True
                    if not r.is_server_error and r.status_code not in _RETRY_STATUS:
                        log.warning(
                            "callback to %s refused with HTTP %d; not retried", host, r.status_code
                        )
                        return False
                    why = f"HTTP {r.status_code}"
                except httpx.HTTPError as exc:
                    why = type(exc).__name__
                if attempt + 1 < self.attempts:
                    delay = min(self.max_delay, self.base_delay * 2**attempt)
                    delay *= 0.5 + random.random() / 2
                    log.info(
                        "callback to %s failed (%s); retry %d in %.2fs",
                        host,
                        why,
                        attempt + 1,
                        delay,
                    )
                    await asyncio.sleep(delay)
        log.warning("callback to %s failed after %d attempts", host, self.attempts)
        return False
