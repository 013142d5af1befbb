"""Where a protocol schema (or meta table) comes from: a path, an http(s) URL, or npm.

Specs:

- a local path: `../shared/acp/v1/schema.json`;
- an http(s) URL, fetched with a timeout;
- `npm:PACKAGE@VERSION#PATH`, e.g. `npm:@agentclientprotocol/sdk@2.4.0#schema/v1/schema.json`:
  the package is fetched from the npm registry's HTTP interface (no npm needed; the
  registry is `$AGENTGEN_NPM_REGISTRY`, else `$npm_config_registry`, else
  registry.npmjs.org): its metadata, then the tarball, checked against the metadata's
  integrity, the one file is read out of the tarball, and it is cached under
  the user cache dir (`$AGENTGEN_CACHE_DIR`, else `$XDG_CACHE_HOME/agentgen`, else
  `~/.cache/agentgen`) with its sha256, which is checked again on every reuse;
- `None`: the default revision named by `schema/upstream.lock.json`
  (package, version, path, sha256), whose sha256 must match;
- `v1`, `v2`, `v1-unstable`, `v2-unstable`: that schema of the locked package.

Every failure is an `AgentgenError` naming the source; credentials in URLs are never
echoed.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from .errors import AgentgenError
from .files import write_atomic

__all__ = [
    "LOCK_NAME",
    "Source",
    "cache_dir",
    "check_lock_entry",
    "fetch_bytes",
    "fetch_locked",
    "load_meta",
    "load_schema",
    "read_lock",
    "redact",
]

LOCK_NAME = "upstream.lock.json"  # in schema/, shipped like agentgen's other schema files
URL_TIMEOUT = 30.0
DEFAULT_REGISTRY = "https://registry.npmjs.org/"
MAX_BYTES = 64 * 1024 * 1024

_NPM = re.compile(
    r"^npm:(?P<package>(?:@[^/@#\s]+/)?[^/@#\s]+)@(?P<version>[^#\s]+)(?:#(?P<path>.*))?$"
)
_EXACT_VERSION = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?$")
_SECRET_KEYS = re.compile(
    r"(token|key|secret|sig|signature|password|passwd|auth|credential)", re.IGNORECASE
)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Source:
    """One loaded input: parsed JSON, its bytes, where it came from and its digest."""

    data: Any
    raw: bytes
    origin: str
    sha256: str
    revision: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def redact(spec: str) -> str:
    """`spec` with URL credentials and secret-looking query values replaced by `***`."""
    if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", spec):
        return spec
    try:
        parts = urllib.parse.urlsplit(spec)
    except ValueError:
        return re.sub(r"//[^/@]*@", "//***@", spec)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        query = "&".join(f"{k}={'***' if _SECRET_KEYS.search(k) else v}" for k, v in pairs)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def cache_dir() -> Path:
    """The user cache dir for fetched schemas."""
    env = os.environ.get("AGENTGEN_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "agentgen"
    try:
        return Path.home() / ".cache" / "agentgen"
    except RuntimeError:  # no home directory: a per-user temp dir still caches
        return (
            Path(tempfile.gettempdir())
            / f"agentgen-cache-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
        )


def _sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


# -- local files and URLs ----------------------------------------------------------------


def _read_path(spec: str) -> bytes:
    path = Path(spec).expanduser()
    if not path.exists():
        raise AgentgenError(
            "file not found", source=spec, hint="pass a path, an http(s) URL or npm:PKG@VER#PATH"
        )
    if path.is_dir():
        raise AgentgenError("is a directory, not a JSON file", source=spec)
    try:
        return path.read_bytes()
    except OSError as err:
        raise AgentgenError(f"cannot read: {err.strerror or err}", source=spec) from None


def _split_credentials(spec: str) -> tuple[str, dict[str, str]]:
    """The URL without `user:password@`, and a Basic auth header carrying them."""
    parts = urllib.parse.urlsplit(spec)
    if "@" not in parts.netloc:
        return spec, {}
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    token = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    bare = urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return bare, {"Authorization": "Basic " + base64.b64encode(token.encode()).decode()}


def _read_url(spec: str, *, accept: str = "application/json", what: str | None = None) -> bytes:
    shown = redact(spec) if what is None else f"{what} ({redact(spec)})"
    try:
        url, auth = _split_credentials(spec)
        req = urllib.request.Request(
            url, headers={"User-Agent": "agentgen", "Accept": accept, **auth}
        )
        with urllib.request.urlopen(req, timeout=URL_TIMEOUT) as resp:
            raw: bytes = resp.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as err:
        raise AgentgenError(f"cannot fetch: HTTP {err.code} {err.reason}", source=shown) from None
    except urllib.error.URLError as err:
        reason = err.reason
        if isinstance(reason, TimeoutError):
            reason = f"timed out after {URL_TIMEOUT:g}s"
        elif isinstance(reason, OSError):
            reason = reason.strerror or type(reason).__name__
        raise AgentgenError(
            f"cannot fetch: {reason}", source=shown, hint="check the URL and your network"
        ) from None
    except TimeoutError:
        raise AgentgenError(
            f"cannot fetch: timed out after {URL_TIMEOUT:g}s", source=shown
        ) from None
    except OSError as err:
        raise AgentgenError(
            f"cannot fetch: {err.strerror or type(err).__name__}", source=shown
        ) from None
    except (ValueError, http.client.HTTPException) as err:
        raise AgentgenError(f"not a valid URL ({type(err).__name__})", source=shown) from None
    if len(raw) > MAX_BYTES:
        raise AgentgenError(f"larger than {MAX_BYTES // (1024 * 1024)} MiB", source=shown)
    return raw


# -- npm -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NpmSpec:
    package: str
    version: str
    path: str

    @property
    def spec(self) -> str:
        return f"npm:{self.package}@{self.version}#{self.path}"


def parse_npm(spec: str) -> NpmSpec:
    m = _NPM.match(spec)
    if not m:
        raise AgentgenError(
            "not an npm spec",
            source=spec,
            hint="write npm:PACKAGE@VERSION#PATH, e.g. npm:@agentclientprotocol/sdk@2.4.0#schema/v1/schema.json",
        )
    path = m.group("path") or ""
    if not path:
        raise AgentgenError(
            "the npm spec names no file in the package",
            source=spec,
            hint="add #PATH, e.g. #schema/v1/schema.json",
        )
    return NpmSpec(m.group("package"), m.group("version"), _safe_relpath(path, spec))


def _safe_relpath(path: str, source: str) -> str:
    pure = PurePosixPath(path.replace("\\", "/"))
    parts = [p for p in pure.parts if p not in ("", ".")]
    if pure.is_absolute() or not parts or ".." in parts:
        raise AgentgenError(
            f"unsafe path in package: {path!r}", source=source, hint="use a relative path"
        )
    return "/".join(parts)


def _cache_entry(npm: NpmSpec) -> Path:
    pkg = npm.package.replace("/", "+")
    return cache_dir() / "npm" / f"{pkg}@{npm.version}" / npm.path


def _read_cached(entry: Path, shown: str) -> bytes | None:
    record = entry.with_name(entry.name + ".sha256")
    try:
        if not entry.is_file() or not record.is_file():
            return None
        raw = entry.read_bytes()
        expected = record.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None  # an unreadable cache is a cache miss
    actual = _sha256(raw)
    if actual != expected:
        raise AgentgenError(
            f"cached copy was modified: sha256 {actual}, recorded {expected}",
            source=str(entry),
            hint=f"delete {entry} to fetch {shown} again",
        )
    return raw


def _write_cached(entry: Path, raw: bytes) -> None:
    """Store a fetched file and its sha256 (atomically); a cache that cannot be written
    only costs a fetch next time."""
    try:
        write_atomic(entry.with_name(entry.name + ".sha256"), _sha256(raw).encode())
        write_atomic(entry, raw)
    except OSError:
        pass


def npm_registry() -> str:
    """The npm registry's base URL: `$AGENTGEN_NPM_REGISTRY`, else npm's own
    `$npm_config_registry`, else the public registry."""
    for key in ("AGENTGEN_NPM_REGISTRY", "npm_config_registry", "NPM_CONFIG_REGISTRY"):
        value = os.environ.get(key, "").strip()
        if value:
            return value.rstrip("/") + "/"
    return DEFAULT_REGISTRY


def _npm_fetch(npm: NpmSpec, shown: str) -> tuple[bytes, str]:
    """Fetch the package from the registry's HTTP interface (no npm needed): its metadata,
    then the tarball, checked against the metadata's integrity (sha512) or shasum (sha1).
    Returns the file's bytes and the resolved version."""
    registry = npm_registry()
    name = npm.package.replace("/", "%2f")  # a scoped name is one path segment
    meta_url = registry + name
    from . import console

    with console.status(f"fetching {shown} (npm registry)"):  # a spinner on a terminal
        raw_meta = _read_url(meta_url, accept="application/vnd.npm.install-v1+json", what=shown)
        try:
            meta = json.loads(raw_meta)
            versions = meta["versions"]
            tags = meta.get("dist-tags") or {}
            if not isinstance(versions, dict) or not isinstance(tags, dict):
                raise TypeError
        except (ValueError, LookupError, TypeError):
            raise AgentgenError(
                "the npm registry answered no package metadata", source=redact(meta_url)
            ) from None
        version = npm.version if npm.version in versions else tags.get(npm.version)
        if not isinstance(version, str) or version not in versions:
            known = ", ".join(sorted(str(t) for t in tags)[:5])
            raise AgentgenError(
                f"no version {npm.version} of {npm.package} in the npm registry",
                source=shown,
                hint=f"name an exact version or a dist-tag ({known})" if known else None,
            )
        dist = versions[version].get("dist") if isinstance(versions[version], dict) else None
        if not isinstance(dist, dict):
            dist = {}
        tarball_url = dist.get("tarball")
        if not isinstance(tarball_url, str) or not re.match(
            r"^https?://", tarball_url, re.IGNORECASE
        ):
            raise AgentgenError(f"the npm registry names no tarball for {version}", source=shown)
        tgz = _read_url(tarball_url, accept="application/octet-stream", what=shown)
        _check_dist(tgz, dist, shown)
    with tempfile.TemporaryDirectory(prefix="agentgen-npm-") as tmp:
        path = Path(tmp) / "package.tgz"
        path.write_bytes(tgz)
        return _read_member(path, npm.path, shown), version


def _check_dist(tgz: bytes, dist: dict[str, Any], shown: str) -> None:
    """The tarball must match what the registry's metadata records for it."""
    integrity = dist.get("integrity")
    if isinstance(integrity, str):
        for item in integrity.split():
            algo, _, digest = item.partition("-")
            if algo in ("sha512", "sha384", "sha256"):
                actual = base64.b64encode(hashlib.new(algo, tgz).digest()).decode()
                if actual != digest:
                    raise AgentgenError(
                        f"the tarball's {algo} does not match the registry's integrity",
                        source=shown,
                    )
                return
    shasum = dist.get("shasum")
    if isinstance(shasum, str):
        if hashlib.sha1(tgz).hexdigest() != shasum.lower():  # npm's own checksum
            raise AgentgenError(
                "the tarball's sha1 does not match the registry's shasum", source=shown
            )
        return
    raise AgentgenError("the npm registry gives no checksum for the tarball", source=shown)


def _read_member(tarball: Path, path: str, shown: str) -> bytes:
    """Read one regular file out of an npm tarball, never writing what the archive names."""
    has: list[str] = []  # the package's JSON files, named when `path` is not one of them
    try:
        with tarfile.open(tarball, "r:*") as tar:
            for member in tar:
                parts = PurePosixPath(member.name).parts
                # npm tarballs have one top folder ("package/"); the path is relative to it
                too_short = len(parts) < 2  # noqa: PLR2004 - the top folder and a file
                if too_short or ".." in parts or parts[0].startswith("/"):
                    continue
                rel = "/".join(parts[1:])
                if rel != path:
                    if member.isfile() and rel.endswith(".json") and rel != "package.json":
                        has.append(rel)
                    continue
                if not member.isfile():
                    raise AgentgenError(
                        f"{path} is not a regular file in the package", source=shown
                    )
                if member.size > MAX_BYTES:
                    raise AgentgenError(
                        f"{path} is larger than {MAX_BYTES // (1024 * 1024)} MiB", source=shown
                    )
                fh = tar.extractfile(member)
                if fh is None:
                    break
                with fh:
                    return fh.read()
    except (tarfile.TarError, OSError, EOFError) as err:
        raise AgentgenError(f"cannot read the npm tarball: {err}", source=shown) from None
    listed = ", ".join(sorted(has)[:20])
    raise AgentgenError(
        f"no file {path} in the package",
        source=shown,
        hint=f"the package's JSON files: {listed}" if listed else "check the path after '#'",
    )


def fetch_npm(npm: NpmSpec, *, expected_sha256: str | None = None) -> tuple[bytes, dict[str, Any]]:
    """The file's bytes (from the cache when possible) and its revision record."""
    shown = npm.spec
    version = npm.version
    raw: bytes | None = None
    if _EXACT_VERSION.match(version):
        raw = _read_cached(_cache_entry(npm), shown)
    if raw is None:
        raw, version = _npm_fetch(npm, shown)
        resolved = NpmSpec(npm.package, version, npm.path)
        if expected_sha256 is None or _sha256(raw) == expected_sha256:
            _write_cached(_cache_entry(resolved), raw)
    if expected_sha256 is not None and _sha256(raw) != expected_sha256:
        raise AgentgenError(
            f"sha256 mismatch: expected {expected_sha256}, got {_sha256(raw)}",
            source=shown,
            hint="the lock names a different file than the registry served",
        )
    return raw, {"package": npm.package, "version": version, "path": npm.path}


# -- the lock ----------------------------------------------------------------------------


def read_lock(path: Path | None = None) -> dict[str, str]:
    """The locked default schema: {package, version, path, sha256}."""
    if path is None:
        from .schema_files import schema_path

        path = schema_path(LOCK_NAME)
    return check_lock_entry(read_lock_file(path), str(path))


def read_lock_file(path: Path) -> Any:
    """A lock file's JSON (any shape; `check_lock_entry` checks one entry)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AgentgenError(
            "the upstream lock file is missing from this installation", source=str(path)
        ) from None
    except (OSError, ValueError) as err:
        raise AgentgenError(f"cannot read the upstream lock: {err}", source=str(path)) from None


def check_lock_entry(entry: Any, source: str, pointer: str = "") -> dict[str, str]:
    """One lock entry {package, version, path, sha256}, checked (located errors)."""
    if not isinstance(entry, dict):
        raise AgentgenError("a lock entry must be a JSON object", source=source, pointer=pointer)
    for key in ("package", "version", "path", "sha256"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise AgentgenError(
                f"missing string {key!r}", source=source, pointer=f"{pointer}/{key}"
            )
    if not _SHA256.match(entry["sha256"]):
        raise AgentgenError(
            "not a lowercase hex sha256", source=source, pointer=f"{pointer}/sha256"
        )
    if not _EXACT_VERSION.match(entry["version"]):
        raise AgentgenError(
            "a lock pins an exact version (e.g. 2.4.0), not a range or tag",
            source=source,
            pointer=f"{pointer}/version",
        )
    return {k: entry[k] for k in ("package", "version", "path", "sha256")}


def fetch_locked(entry: dict[str, str], source: str = LOCK_NAME) -> bytes:
    """The bytes a checked lock entry names (cached; sha256 verified on every use)."""
    npm = NpmSpec(entry["package"], entry["version"], _safe_relpath(entry["path"], source))
    raw, _ = fetch_npm(npm, expected_sha256=entry["sha256"])
    return raw


# -- entry points ------------------------------------------------------------------------


def fetch_bytes(spec: str) -> tuple[bytes, dict[str, Any]]:
    """The bytes a spec names, plus what is known of its revision."""
    if spec.startswith("npm:"):
        return fetch_npm(parse_npm(spec))
    if re.match(r"^https?://", spec, re.IGNORECASE):
        return _read_url(spec), {"url": redact(spec)}
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]+://", spec):
        scheme = spec.split("://", 1)[0]
        raise AgentgenError(
            f"unsupported URL scheme {scheme!r}",
            source=redact(spec),
            hint="use a path, http(s):// or npm:",
        )
    return _read_path(spec), {"path": spec}


def _schema_facts(data: dict[str, Any]) -> dict[str, Any]:
    """What the schema says about its own revision (when readable)."""
    from .schemas import defs as schema_defs

    defs = schema_defs(data)
    facts: dict[str, Any] = {"definitions": len(defs)}
    prompt = defs.get("PromptResponse")
    if isinstance(prompt, dict) and isinstance(prompt.get("properties"), dict):
        # v1: session/prompt answers at the end of the turn, with stopReason;
        # v2: it answers on acceptance and the turn's end is a session update.
        facts["lifecycle"] = "v1" if "stopReason" in prompt["properties"] else "v2"
    facts["unstable"] = any(
        isinstance(d, dict) and "UNSTABLE" in str(d.get("description") or "") for d in defs.values()
    )
    return facts


def default_schema_line() -> str:
    """The locked default revision, as `--version` names it (no fetch)."""
    try:
        lock = read_lock()
    except AgentgenError as err:
        return f"unknown ({err.message})"
    path = str(lock.get("path", ""))
    revision = next((p for p in path.split("/") if re.fullmatch(r"v\d+", p)), "?")
    unstable = ", unstable" if "unstable" in path else ""
    return f"{revision}{unstable} (npm:{lock.get('package')}@{lock.get('version')}#{path})"


_SHORT = re.compile(r"^(?P<rev>v\d+)(?P<unstable>-unstable)?$")


def expand_short(spec: str) -> str:
    """`v1`, `v2`, `v1-unstable`, `v2-unstable`: the schemas of the locked package
    (`npm:PACKAGE@VERSION#schema/v2/schema.json`); any other spec unchanged. A local
    file of that name wins (write `./v2` to be explicit)."""
    m = _SHORT.match(spec)
    if m is None or Path(spec).exists():
        return spec
    lock = read_lock()
    name = "schema.unstable.json" if m.group("unstable") else "schema.json"
    return f"npm:{lock['package']}@{lock['version']}#schema/{m.group('rev')}/{name}"


def load_schema(spec: str | None) -> Source:
    """A checked protocol schema (`None`: the locked default revision; `v1`, `v2`,
    `v1-unstable`, `v2-unstable`: the locked package's schemas)."""
    from .protocol.schema import check_schema

    if spec is not None:
        spec = expand_short(spec)
    if spec is None:
        lock = read_lock()
        npm = NpmSpec(lock["package"], lock["version"], _safe_relpath(lock["path"], LOCK_NAME))
        origin = npm.spec
        raw, revision = fetch_npm(npm, expected_sha256=lock["sha256"])
    else:
        origin = redact(spec)
        raw, revision = fetch_bytes(spec)
    data = check_schema(raw, origin)
    return Source(data, raw, origin, _sha256(raw), {**revision, **_schema_facts(data)})


def load_meta(spec: str) -> Source:
    """A meta.json / meta.unstable.json method table."""
    origin = redact(spec)
    raw, revision = fetch_bytes(spec)
    from .protocol.schema import parse_json

    data = parse_json(raw, origin)
    if not isinstance(data, dict):
        raise AgentgenError("a meta table must be a JSON object", source=origin, pointer="")
    sections = ("agentMethods", "clientMethods", "protocolMethods")
    if not any(k in data for k in sections):
        raise AgentgenError(
            "not a meta table: none of agentMethods, clientMethods, protocolMethods",
            source=origin,
            pointer="",
        )
    for key in sections:
        table = data.get(key)
        if table is None:
            continue
        if not isinstance(table, dict):
            raise AgentgenError(
                "expected an object of python name -> wire name", source=origin, pointer=f"/{key}"
            )
        for attr, wire in table.items():
            if not isinstance(wire, str):
                raise AgentgenError(
                    "a wire method name must be a string", source=origin, pointer=f"/{key}/{attr}"
                )
    if isinstance(data.get("version"), int):
        revision["protocol_version"] = data["version"]
    return Source(data, raw, origin, _sha256(raw), revision)
