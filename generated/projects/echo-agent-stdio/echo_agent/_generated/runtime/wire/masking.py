"""Credentials inside URLs (``https://user:PW@host/v1?key=K``): the userinfo and every
query value are secrets.  :func:`mask_url` is what may be shown (``providers/list``, a
route's ``repr``, a handler's message); :func:`url_secrets` lists what to redact from logs.
:func:`frame_secrets` finds the credentials a frame carries (header and env values, URL
credentials), for a log line that quotes a frame before any of them is registered.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from .errors import INVALID_PARAMS, RpcError
from .logsafe import MAX_SECRETS_PER_OWNER, SecretLimit, register_secrets

MASK = "***"


def url_secrets(url: str) -> list[str]:
    """The credential parts of ``url``, raw and percent-decoded (either may be logged)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]  # not a URL we can take apart: the whole of it is the secret
    found: list[str] = []
    if parts.username:
        found.append(parts.username)
    if parts.password:
        found.append(parts.password)
    for raw in parts.query.split("&"):
        _, eq, value = raw.partition("=")
        if eq and value:
            found.append(value)
    for _, value in parse_qsl(parts.query, keep_blank_values=False):
        found.append(value)
    if parts.fragment:
        found.append(parts.fragment)
    out = [*found, *(unquote(v) for v in found)]
    return [v for v in dict.fromkeys(out) if v]


def mask_url(url: str) -> str:
    """``url`` with its userinfo and query values replaced by ``***`` (keys kept) and
    without its fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return MASK
    netloc = parts.netloc
    if "@" in netloc:
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{MASK}@{host}" + (f":{port}" if port is not None else "")
    query = "&".join(
        f"{key}={MASK}" if eq else key
        for key, eq, _ in (p.partition("=") for p in parts.query.split("&") if p)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


_SECRET_LISTS = ("headers", "env")  # `{name: value}` maps or `[{name, value}]` lists
_URL_KEYS = ("baseUrl", "url")
_MIN_SHOWN_SECRET = 4  # shorter values would blank ordinary text
_MAX_DEPTH = 32  # deeper than any frame the schema allows


def frame_secrets(value: Any, depth: int = 0) -> list[str]:
    """Every credential inside a parsed frame: the values of its `headers` and `env`
    (a `providers/set` route, an MCP server), the credential parts of its URLs."""
    found: list[str] = []
    if depth > _MAX_DEPTH:
        return found
    if type(value) is dict:
        for key, item in value.items():
            if key in _SECRET_LISTS and type(item) is dict:
                found += [v for v in item.values() if type(v) is str]
            elif key in _SECRET_LISTS and type(item) is list:
                found += [
                    e["value"] for e in item if type(e) is dict and type(e.get("value")) is str
                ]
            elif key in _URL_KEYS and type(item) is str:
                found += url_secrets(item)
            else:
                found += frame_secrets(item, depth + 1)
    elif type(value) is list:
        for item in value:
            found += frame_secrets(item, depth + 1)
    return found


def mask_secrets(text: str, secrets: list[str]) -> str:
    """`text` with each of `secrets` (longest first) replaced by ``***``."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= _MIN_SHOWN_SECRET and secret in text:
            text = text.replace(secret, MASK)
    return text


def register_route_secrets(ctx: Any, values: list[str]) -> None:
    """Register a provider route's secrets (header values, URL credentials) for log
    redaction, scoped to the connection of request ``ctx``.  All or nothing: when the
    connection cannot hold them all, the request fails (-32602) and nothing changes."""
    try:
        register_secrets(values, getattr(ctx, "connection", None))
    except SecretLimit as exc:
        raise RpcError(
            INVALID_PARAMS, str(exc), {"limit": "max_secrets", "max": MAX_SECRETS_PER_OWNER}
        ) from None
