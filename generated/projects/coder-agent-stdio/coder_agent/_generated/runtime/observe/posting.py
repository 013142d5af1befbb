"""How the runtime's OTLP exports reach a plain-HTTP collector: one kept-alive connection
of the standard library's `http.client`, under the SDK exporter's own client (its
endpoint, headers, compression, timeout, retries and their backoff are unchanged).

The SDK's transport posts through `requests`: ~0.9 ms of CPU a request here, as much as
encoding its 512 spans.  This one posts the same bytes for a fraction of that.  An
`https` endpoint, one a proxy of the environment applies to, or any failure of its own
connection (the collector closed it, a reset, a timeout) goes through the SDK's transport
instead: what it reports is what the SDK's client sees."""

from __future__ import annotations

import http.client
import logging
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.message import Message
from typing import Any

from opentelemetry.exporter.http.transport._base import BaseHTTPResult, BaseHTTPTransport

log = logging.getLogger("acp.runtime.observe")


@dataclass(frozen=True, slots=True)
class Answer(BaseHTTPResult):  # type: ignore[misc,unused-ignore]
    """A collector's answer: its status, reason, headers and body."""

    body: bytes = field(default=b"", compare=False)
    fields: Message | None = field(default=None, compare=False)

    def content(self) -> bytes:
        return self.body

    def headers(self) -> Mapping[str, str]:
        # email's Message: case-insensitive, as the SDK's client reads Retry-After
        return self.fields if self.fields is not None else {}  # type: ignore[return-value]


class Direct(BaseHTTPTransport):  # type: ignore[misc,unused-ignore]
    """A transport for the SDK's OTLP/HTTP client: plain `http://` endpoints no proxy
    applies to over one kept-alive `http.client` connection each; anything else, and any
    failure of that connection, through `fallback` (the SDK's own transport)."""

    def __init__(self, fallback: Any) -> None:
        self.fallback = fallback
        self.targets: dict[str, tuple[str, int, str] | None] = {}  # url -> host, port, path
        self.open: dict[tuple[str, int], http.client.HTTPConnection] = {}

    def _target(self, url: str) -> tuple[str, int, str] | None:
        found = self.targets.get(url, ())
        if found == ():
            parts = urllib.parse.urlsplit(url)
            direct = (
                parts.scheme == "http"
                and parts.hostname is not None
                and not (
                    urllib.request.getproxies().get("http")
                    and not urllib.request.proxy_bypass(parts.hostname)
                )
            )
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            found = (parts.hostname or "", parts.port or 80, path) if direct else None
            self.targets[url] = found
        return found  # type: ignore[return-value]

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        data: bytes | None = None,
    ) -> BaseHTTPResult:
        target = self._target(url)
        if target is not None:
            for _ in range(2):  # a kept connection the collector closed: once more, fresh
                try:
                    return self._post(target, method, headers or {}, timeout, data)
                except (OSError, http.client.HTTPException) as exc:
                    self._drop(target)
                    log.debug("OTLP: %s to %s failed (%s): again", method, url, exc)
        got: BaseHTTPResult = self.fallback.request(
            method, url, headers=headers, timeout=timeout, data=data
        )
        return got

    def _post(
        self,
        target: tuple[str, int, str],
        method: str,
        headers: dict[str, str],
        timeout: float | None,
        data: bytes | None,
    ) -> BaseHTTPResult:
        host, port, path = target
        conn = self.open.get((host, port))
        if conn is None:
            conn = self.open[(host, port)] = http.client.HTTPConnection(host, port, timeout=timeout)
        elif conn.sock is not None:
            conn.sock.settimeout(timeout)
        conn.request(method, path, body=data, headers=headers)
        got = conn.getresponse()
        body = got.read()
        if got.will_close:
            self._drop(target)
        return Answer(got.status, got.reason, None, body, got.msg)

    def _drop(self, target: tuple[str, int, str]) -> None:
        conn = self.open.pop(target[:2], None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for conn in self.open.values():
            conn.close()
        self.open.clear()
        self.fallback.close()

    def is_connection_error(self, exception: Exception | None) -> bool:
        return bool(self.fallback.is_connection_error(exception))


def direct(exporter: Any) -> Any:
    """`exporter` (the SDK's OTLP/HTTP span or metric exporter) posting through `Direct`
    (unchanged when it has no such client: another version of the exporter)."""
    client = getattr(exporter, "_client", None)
    fallback = getattr(client, "_transport", None)
    if client is not None and callable(getattr(fallback, "request", None)):
        vars(client)["_transport"] = Direct(fallback)  # (the exporter's own client's)
    return exporter
