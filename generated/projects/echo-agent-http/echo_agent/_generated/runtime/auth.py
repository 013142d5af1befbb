"""HTTP auth from the manifest's ``auth:`` list (contract 3).

Schemes: ``bearer`` (``Authorization: Bearer <token>``), ``api_key`` (the header the
manifest names, ``X-API-Key`` by default), ``basic`` (``Authorization: Basic``; the
env var holds ``user:password``), ``none``.  ``oauth2``/``jwt`` tokens are obtained out
of band and presented as bearer tokens: checked like ``bearer`` against the env var.
A request passes when any configured scheme accepts it.  Credentials come from the
environment variables the manifest names, are compared with ``hmac.compare_digest``
over bytes, and never appear in a log line, an error body or a ``repr``.  A scheme
whose env var is unset accepts nothing (fail closed) and is reported once by name
of the variable only.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import os
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from .jsonrpc import register_secret

log = logging.getLogger("acp.runtime.auth")


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
            return given is not None and hmac.compare_digest(
                given.encode("utf-8", "replace"), secret
            )
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
            return hmac.compare_digest(decoded, secret)
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(rest.encode("utf-8", "replace"), secret)

    def challenge(self) -> str:
        if self.kind == "basic":
            return 'Basic realm="acp", charset="UTF-8"'
        if self.kind == "api_key":
            return f'ApiKey header="{self.header}"'
        return 'Bearer realm="acp"'


class Auth:
    """The accepted schemes; ``check(headers)`` returns None or a 401 response."""

    def __init__(
        self, entries: list[dict[str, Any]], environ: Mapping[str, str] | None = None
    ) -> None:
        env = os.environ if environ is None else environ
        self.schemes: list[_Scheme] = []
        for entry in entries:
            kind = str(entry.get("type", "none"))
            if kind == "none":
                continue
            if kind in ("oauth2", "jwt"):
                kind = "bearer"
            var = entry.get("env")
            raw = env.get(var) if isinstance(var, str) else None
            if raw is None:
                log.warning(
                    "auth %s: environment variable %s is not set; that scheme accepts nothing",
                    kind,
                    var,
                )
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
        cls, manifest: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> Auth:
        return cls(list(manifest.get("auth") or []), environ)

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
                "error": {"code": -32000, "message": "authentication required"},
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
            if value is None:
                continue
            if s.kind == "api_key":
                return {s.header: value}
            if s.kind == "basic":
                return {"Authorization": "Basic " + base64.b64encode(value.encode()).decode()}
            return {"Authorization": "Bearer " + value}
        return {}
