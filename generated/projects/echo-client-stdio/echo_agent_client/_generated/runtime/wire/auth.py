"""HTTP auth from the manifest's ``auth:`` list (contract 3).

Schemes: ``bearer`` (``Authorization: Bearer <token>``), ``api_key`` (the header the
manifest names, ``X-API-Key`` by default), ``basic`` (``Authorization: Basic``; the
env var holds ``user:password``), ``none``.  ``oauth2``/``jwt`` tokens are obtained out
of band and presented as bearer tokens: checked like ``bearer`` against the env var.
A request passes when any configured scheme accepts it.  Credentials come from the
environment variables the manifest names and never appear in a log line, an error body
or a ``repr``.  Comparison is over UTF-8 bytes (a header's raw bytes, as sent), in
constant time: both sides are hashed with SHA-256 first, so neither the content nor the
length of the secret shows in the timing.  An empty presented credential never matches.

Fail closed: a scheme whose env var is unset or empty makes the server refuse to start
(:class:`MissingSecret`, one line naming the variable).  With ``allow_missing=True``
(``--allow-missing-auth``) it starts anyway, logs a warning naming the variable, and that
scheme accepts nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from .errors import AUTH_REQUIRED
from .logsafe import register_secret

log = logging.getLogger("acp.runtime.auth")

# manifest `auth` types that are ACP auth methods (listed in `initialize`, stdio), not
# HTTP schemes: agent_auth.py serves them
STDIO_METHODS = frozenset({"agent", "terminal"})


class MissingSecret(Exception):
    """An auth scheme's environment variable is unset or empty (the server must not start)."""


def _raw(value: str) -> bytes:
    """A header value's bytes as sent: ASGI servers decode headers as Latin-1, so encoding
    back gives the client's UTF-8 bytes; a value that is not Latin-1 text (set in code, not
    read from the wire) is taken as UTF-8."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8")


def _same(given: bytes, secret: bytes) -> bool:
    """Constant time in content and length; an empty credential never matches."""
    if not given or not secret:
        return False
    return hmac.compare_digest(hashlib.sha256(given).digest(), hashlib.sha256(secret).digest())


class _Scheme:
    __slots__ = ("_secret", "env", "header", "kind")

    def __init__(self, kind: str, secret: bytes | None, header: str, env: str | None) -> None:
        self.kind = kind
        self._secret = secret
        self.header = header
        self.env = env

    def __repr__(self) -> str:
        return f"<auth {self.kind} from ${self.env}>"

    def accepts(self, headers: Mapping[str, str]) -> bool:
        secret = self._secret
        if secret is None:
            return False
        if self.kind == "api_key":
            given = headers.get(self.header)
            return given is not None and _same(_raw(given.strip()), secret)
        value = headers.get("authorization")
        if value is None:
            return False
        scheme, _, rest = value.strip().partition(" ")
        rest = rest.strip()
        if self.kind == "basic":
            if scheme.lower() != "basic":
                return False
            try:
                decoded = base64.b64decode(rest.encode("ascii"), validate=True)
            except (binascii.Error, ValueError, UnicodeEncodeError):
                return False
            return _same(decoded, secret)
        if scheme.lower() != "bearer":
            return False
        return _same(_raw(rest), secret)

    def challenge(self) -> str:
        if self.kind == "basic":
            return 'Basic realm="acp", charset="UTF-8"'
        if self.kind == "api_key":
            return f'ApiKey header="{self.header}"'
        return 'Bearer realm="acp"'


class Auth:
    """The accepted schemes; ``check(headers)`` returns None or a 401 response."""

    def __init__(
        self,
        entries: list[dict[str, Any]],
        environ: Mapping[str, str] | None = None,
        *,
        allow_missing: bool = False,
    ) -> None:
        env = os.environ if environ is None else environ
        self.schemes: list[_Scheme] = []
        for entry in entries:
            kind = str(entry.get("type", "none"))
            if kind in STDIO_METHODS or kind == "none":
                continue
            if kind in ("oauth2", "jwt"):
                kind = "bearer"
            var = entry.get("env")
            raw = env.get(var) if isinstance(var, str) else None
            if kind == "basic" and raw is not None and not raw.partition(":")[2]:
                raw = ""  # "user:" or no colon: no password, nothing to check against
            if not raw:
                state = "is empty" if raw == "" else "is not set"
                name = var if isinstance(var, str) else "(no env in the manifest)"
                if not allow_missing:
                    raise MissingSecret(
                        f"auth {kind}: environment variable {name} {state}; set it, or start "
                        "with --allow-missing-auth to run with that scheme refusing everyone"
                    )
                log.warning(
                    "auth %s: environment variable %s %s; that scheme accepts nothing",
                    kind,
                    name,
                    state,
                )
                raw = None
            if raw is not None:
                register_secret(raw)  # never shown in a log line
                if kind == "basic":
                    register_secret(raw.partition(":")[2])
                    register_secret(base64.b64encode(raw.encode("utf-8")).decode("ascii"))
            secret = raw.encode("utf-8") if raw is not None else None
            header = str(entry.get("header") or "X-API-Key")
            self.schemes.append(
                _Scheme(kind, secret, header, var if isinstance(var, str) else None)
            )
        self.enabled = bool(self.schemes)

    @classmethod
    def from_manifest(
        cls,
        manifest: Mapping[str, Any],
        environ: Mapping[str, str] | None = None,
        *,
        allow_missing: bool = False,
    ) -> Auth:
        return cls(list(manifest.get("auth") or []), environ, allow_missing=allow_missing)

    def accepts(self, headers: Mapping[str, str]) -> bool:
        if not self.enabled:
            return True
        ok = False
        for s in self.schemes:  # evaluate every scheme: no early exit that times the match
            ok = s.accepts(headers) | ok
        return ok

    def check(self, headers: Mapping[str, str]) -> Response | None:
        if self.accepts(headers):
            return None
        body = orjson.dumps(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": AUTH_REQUIRED, "message": "authentication required"},
            }
        )
        challenges = ", ".join(dict.fromkeys(s.challenge() for s in self.schemes))
        return Response(
            body,
            status_code=401,
            media_type="application/json",
            headers={"WWW-Authenticate": challenges},
        )

    def client_headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """Headers a client sends for the first configured scheme whose env var is set."""
        env = os.environ if environ is None else environ
        for s in self.schemes:
            value = env.get(s.env or "")
            if value:
                return _credential_header(s.kind, s.header, value)
        return {}


def client_headers(
    entries: list[dict[str, Any]], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What a client of an agent with these manifest ``auth`` entries sends: the credential
    of the first scheme whose environment variable (the one the agent reads) is set; {}
    when none is.  Nothing is checked or logged: a client without the credential gets the
    agent's 401."""
    env = os.environ if environ is None else environ
    for entry in entries:
        kind = str(entry.get("type", "none"))
        var = entry.get("env")
        value = env.get(var) if isinstance(var, str) else None
        if kind == "none" or kind in STDIO_METHODS or not value:
            continue
        kind = "bearer" if kind in ("oauth2", "jwt") else kind
        return _credential_header(kind, str(entry.get("header") or "X-API-Key"), value)
    return {}


def _credential_header(kind: str, header: str, value: str) -> dict[str, str]:
    if kind == "api_key":
        return {header: value}
    if kind == "basic":
        return {"Authorization": "Basic " + base64.b64encode(value.encode()).decode()}
    return {"Authorization": "Bearer " + value}
