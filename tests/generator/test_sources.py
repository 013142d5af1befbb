"""Schema sources: local paths, http(s) URLs, npm specs (the registry's HTTP interface: the
real registry once per session, and a local one),
the verified cache, the lock, and the errors of each."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import os
import shutil
import socket
import tarfile
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from generator import sources
from generator.errors import AgentgenError

LOCK = sources.read_lock()


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def npm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache dir holding the locked default, fetched from the real registry once."""
    root = tmp_path_factory.mktemp("agentgen-cache")
    saved = os.environ.get("AGENTGEN_CACHE_DIR")
    os.environ["AGENTGEN_CACHE_DIR"] = str(root)
    try:
        src = sources.load_schema(None)
    finally:
        if saved is None:
            del os.environ["AGENTGEN_CACHE_DIR"]
        else:
            os.environ["AGENTGEN_CACHE_DIR"] = saved
    assert src.sha256 == LOCK["sha256"]
    return root


@pytest.fixture
def cache_copy(npm_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the session cache (tests may damage it), with npm off the PATH."""
    root = tmp_path / "cache"
    shutil.copytree(npm_cache, root)
    monkeypatch.setenv("AGENTGEN_CACHE_DIR", str(root))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    return root


def _cached_file(root: Path) -> Path:
    pkg = LOCK["package"].replace("/", "+")
    return root / "npm" / f"{pkg}@{LOCK['version']}" / LOCK["path"]


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


def _meta_table(schema_path: Path, version: int) -> str:
    """A meta.json-shaped table read off a schema's x-method/x-side tags (upstream does
    not publish meta.json on npm)."""
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    sections = {"agent": "agentMethods", "client": "clientMethods", "protocol": "protocolMethods"}
    meta: dict[str, Any] = {"version": version}
    for node in schema["$defs"].values():
        section = sections.get(node.get("x-side")) if isinstance(node, dict) else None
        if section:
            wire = node["x-method"]
            meta.setdefault(section, {})[wire.strip("$/").replace("/", "_")] = wire
    return json.dumps(meta)


@pytest.fixture(scope="module")
def http_base(shared_acp: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """http://127.0.0.1:PORT serving the upstream schemas (and a v2 meta table)."""
    root = tmp_path_factory.mktemp("served")
    for rel in ("v1/schema.json", "v2/schema.json"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes((shared_acp / rel).read_bytes())
    (root / "v2" / "meta.json").write_text(_meta_table(shared_acp / "v2" / "schema.json", 2))

    def handler(*args: object, **kwargs: object) -> _Handler:
        return _Handler(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# -- local paths ---------------------------------------------------------------------------


def test_local_path(shared_acp: Path) -> None:
    path = shared_acp / "v1" / "schema.json"
    src = sources.load_schema(str(path))
    raw = path.read_bytes()
    assert src.raw == raw
    assert src.sha256 == hashlib.sha256(raw).hexdigest()
    assert src.origin == str(path)
    assert src.data == json.loads(raw)
    assert src.revision["lifecycle"] == "v1"
    assert src.revision["definitions"] == len(src.data["$defs"])
    v2 = sources.load_schema(str(shared_acp / "v2" / "schema.json"))
    assert v2.revision["lifecycle"] == "v2"


def test_local_meta(shared_acp: Path, tmp_path: Path) -> None:
    path = tmp_path / "meta.unstable.json"
    path.write_text(_meta_table(shared_acp / "v1" / "schema.unstable.json", 1))
    src = sources.load_meta(str(path))
    assert src.data["agentMethods"]["providers_list"] == "providers/list"
    assert src.revision["protocol_version"] == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1, 2]", "must be a JSON object"),
        ('{"version": 1}', "not a meta table"),
        ('{"agentMethods": []}', "expected an object"),
        ('{"agentMethods": {"x": 3}}', "must be a string"),
        ("{oops", "not valid JSON"),
    ],
)
def test_bad_meta(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "meta.json"
    path.write_text(content)
    with pytest.raises(AgentgenError) as err:
        sources.load_meta(str(path))
    assert message in str(err.value)
    assert str(path) in str(err.value)


def test_missing_and_directory(tmp_path: Path) -> None:
    with pytest.raises(AgentgenError, match="file not found") as err:
        sources.load_schema(str(tmp_path / "nope.json"))
    assert err.value.source == str(tmp_path / "nope.json")
    with pytest.raises(AgentgenError, match="is a directory"):
        sources.load_schema(str(tmp_path))
    with pytest.raises(AgentgenError, match="unsupported URL scheme 'ftp'"):
        sources.load_schema("ftp://example.invalid/schema.json")


# -- URLs ----------------------------------------------------------------------------------


def test_url(http_base: str, shared_acp: Path) -> None:
    src = sources.load_schema(f"{http_base}/v2/schema.json")
    raw = (shared_acp / "v2" / "schema.json").read_bytes()
    assert src.sha256 == hashlib.sha256(raw).hexdigest()
    assert src.origin == f"{http_base}/v2/schema.json"
    assert src.revision["url"] == src.origin
    meta = sources.load_meta(f"{http_base}/v2/meta.json")
    assert meta.data["version"] == 2


def test_url_not_found_names_the_url(http_base: str) -> None:
    url = f"{http_base}/v9/schema.json"
    with pytest.raises(AgentgenError) as err:
        sources.load_schema(url)
    assert "HTTP 404" in str(err.value)
    assert str(err.value).startswith(url)


def test_unreachable_url_hides_credentials() -> None:
    url = f"http://user:hunter2@127.0.0.1:{_free_port()}/schema.json?token=s3cret&v=1"
    with pytest.raises(AgentgenError) as err:
        sources.load_schema(url)
    text = str(err.value)
    assert "cannot fetch" in text
    assert "hunter2" not in text and "s3cret" not in text
    assert f"127.0.0.1:{url.split(':')[3].split('/', maxsplit=1)[0]}" in text
    assert "v=1" in text


class _AuthHandler(http.server.BaseHTTPRequestHandler):
    body = b'{"$defs": {"A": {"type": "string"}}}'

    def do_GET(self) -> None:
        expected = "Basic " + base64.b64encode(b"reader:p@ss word").decode()
        ok = self.headers.get("Authorization") == expected
        self.send_response(200 if ok else 401)
        self.end_headers()
        if ok:
            self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_url_credentials_become_basic_auth_and_stay_hidden() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AuthHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        src = sources.load_schema(f"http://reader:p%40ss%20word@127.0.0.1:{port}/s.json")
        assert src.raw == _AuthHandler.body
        assert "word" not in src.origin and src.origin.startswith("http://***@127.0.0.1")
        with pytest.raises(AgentgenError) as err:
            sources.load_schema(f"http://reader:wrong-secret@127.0.0.1:{port}/s.json")
        assert "HTTP 401" in str(err.value) and "wrong-secret" not in str(err.value)
    finally:
        server.shutdown()
        server.server_close()


def test_silent_server_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    monkeypatch.setattr(sources, "URL_TIMEOUT", 0.3)
    try:
        with pytest.raises(AgentgenError, match=r"cannot fetch: timed out after 0\.3s") as err:
            sources.load_schema(f"http://127.0.0.1:{port}/schema.json")
        assert f"127.0.0.1:{port}" in str(err.value)
    finally:
        listener.close()


def test_redact() -> None:
    assert sources.redact("https://a:b@h/x?api_key=k&q=1") == "https://***@h/x?api_key=***&q=1"
    assert sources.redact("../shared/acp/v1/schema.json") == "../shared/acp/v1/schema.json"


# -- npm -----------------------------------------------------------------------------------


def test_lock_names_the_default() -> None:
    assert LOCK["package"] == "@agentclientprotocol/sdk"
    assert LOCK["path"].endswith(".json")
    assert len(LOCK["sha256"]) == 64


def test_default_from_npm_is_cached_with_its_sha(npm_cache: Path) -> None:
    cached = _cached_file(npm_cache)
    raw = cached.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == LOCK["sha256"]
    record = cached.with_name(cached.name + ".sha256").read_text().strip()
    assert record == LOCK["sha256"]
    data = json.loads(raw)
    assert "$defs" in data


def test_cache_reuse_needs_no_npm(cache_copy: Path) -> None:
    assert shutil.which("npm") is None
    src = sources.load_schema(None)
    assert src.sha256 == LOCK["sha256"]
    assert src.origin == f"npm:{LOCK['package']}@{LOCK['version']}#{LOCK['path']}"
    assert src.revision["package"] == LOCK["package"]
    assert src.revision["version"] == LOCK["version"]
    assert src.revision["path"] == LOCK["path"]
    explicit = sources.load_schema(src.origin)
    assert explicit.raw == src.raw


def test_tampered_cache_is_refused(cache_copy: Path) -> None:
    cached = _cached_file(cache_copy)
    cached.write_bytes(cached.read_bytes().replace(b'"$defs"', b'"$defs" ', 1))
    with pytest.raises(AgentgenError) as err:
        sources.load_schema(None)
    text = str(err.value)
    assert "modified" in text and LOCK["sha256"] in text
    assert hashlib.sha256(cached.read_bytes()).hexdigest() in text


def test_lock_mismatch_names_expected_and_actual(cache_copy: Path, tmp_path: Path) -> None:
    bad = dict(LOCK, sha256="0" * 64)
    lock = tmp_path / "lock.json"
    lock.write_text(json.dumps(bad))
    npm = sources.NpmSpec(bad["package"], bad["version"], bad["path"])
    with pytest.raises(AgentgenError) as err:
        sources.fetch_npm(npm, expected_sha256=sources.read_lock(lock)["sha256"])
    assert "0" * 64 in str(err.value) and LOCK["sha256"] in str(err.value)


@pytest.mark.parametrize(
    ("content", "pointer"),
    [
        ('{"package": "p"}', "/version"),
        ('{"package":"p","version":"1","path":"x","sha256":"ab"}', "/sha256"),
    ],
)
def test_bad_lock(tmp_path: Path, content: str, pointer: str) -> None:
    lock = tmp_path / "lock.json"
    lock.write_text(content)
    with pytest.raises(AgentgenError) as err:
        sources.read_lock(lock)
    assert err.value.pointer == pointer


def test_npm_spec_needs_no_npm(
    registry: _Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exact-version npm spec is fetched over the registry's HTTP interface with npm off
    the PATH (before: `npm is not installed`)."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    assert shutil.which("npm") is None
    raw = registry.publish("acme-schemas", "1.2.3", {"schema/s.json": b'{"$defs": {}}'})
    got, revision = sources.fetch_bytes("npm:acme-schemas@1.2.3#schema/s.json")
    assert got == raw
    assert revision == {"package": "acme-schemas", "version": "1.2.3", "path": "schema/s.json"}
    assert registry.paths == ["/acme-schemas", "/-/acme-schemas-1.2.3.tgz"]
    # the second time comes from the cache (its sha256 recorded), with no request
    assert sources.fetch_bytes("npm:acme-schemas@1.2.3#schema/s.json")[0] == raw
    assert len(registry.paths) == 2
    cached = tmp_path / "cache/npm/acme-schemas@1.2.3/schema/s.json"
    assert cached.read_bytes() == raw
    digest = hashlib.sha256(raw).hexdigest()
    assert cached.with_name("s.json.sha256").read_text().strip() == digest


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("npm:left-pad", "not an npm spec"),
        ("npm:left-pad@1.0.0", "names no file"),
        ("npm:left-pad@1.0.0#../../etc/passwd", "unsafe path"),
        ("npm:left-pad@1.0.0#/etc/passwd", "unsafe path"),
    ],
)
def test_bad_npm_specs(spec: str, message: str) -> None:
    with pytest.raises(AgentgenError, match=message):
        sources.load_schema(spec)


class _Registry:
    """A real npm registry on 127.0.0.1: package metadata at /NAME (a scoped name as one
    segment, @scope%2fname) and tarballs at /-/NAME-VERSION.tgz, integrity as npm writes it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.packages: dict[str, dict[str, Any]] = {}
        self.tarballs: dict[str, bytes] = {}
        self.paths: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.paths.append(self.path)
                name = urllib.parse.unquote(self.path[1:])
                if name in outer.packages:
                    body, kind = json.dumps(outer.packages[name]).encode(), "application/json"
                elif self.path in outer.tarballs:
                    body, kind = outer.tarballs[self.path], "application/octet-stream"
                else:
                    self.send_error(404, "Not Found")
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def publish(
        self,
        package: str,
        version: str,
        files: dict[str, bytes],
        *,
        tarball: Path | None = None,
        integrity: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> bytes:
        """Publish a package version; returns the first file's bytes."""
        if tarball is None:
            tarball = _tarball(
                self.tmp / f"{package.replace('/', '+')}-{version}.tgz",
                [(_file(f"package/{rel}"), data) for rel, data in files.items()],
            )
        tgz = tarball.read_bytes()
        path = f"/-/{package.rsplit('/', maxsplit=1)[-1]}-{version}.tgz"
        self.tarballs[path] = tgz
        sha512 = base64.b64encode(hashlib.sha512(tgz).digest()).decode()
        meta = self.packages.setdefault(package, {"name": package, "versions": {}})
        meta["versions"][version] = {
            "version": version,
            "dist": {
                "tarball": self.url.rstrip("/") + path,
                "integrity": integrity or f"sha512-{sha512}",
                "shasum": hashlib.sha1(tgz).hexdigest(),
            },
        }
        meta["dist-tags"] = tags or {"latest": version}
        return next(iter(files.values()), b"")


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Registry]:
    """A local npm registry that agentgen is pointed at, and a private cache."""
    reg = _Registry(tmp_path)
    monkeypatch.setenv("AGENTGEN_NPM_REGISTRY", reg.url)
    monkeypatch.setenv("AGENTGEN_CACHE_DIR", str(tmp_path / "cache"))
    try:
        yield reg
    finally:
        reg.server.shutdown()
        reg.server.server_close()


def _tarball(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


def _file(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


def test_npm_registry_flow(registry: _Registry, tmp_path: Path, shared_acp: Path) -> None:
    raw = (shared_acp / "v2" / "schema.json").read_bytes()
    link = tarfile.TarInfo("package/link.json")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/passwd"
    tgz = _tarball(
        tmp_path / "pkg.tgz",
        [
            (_file("package/../../escape.json"), b"{}"),
            (_file("package/schema/s.json"), raw),
            (link, b""),
        ],
    )
    registry.publish("@acme/schemas", "9.9.9", {}, tarball=tgz, tags={"latest": "9.9.9"})
    src = sources.load_schema("npm:@acme/schemas@latest#schema/s.json")
    assert src.raw == raw
    assert src.revision["version"] == "9.9.9"  # the version the dist-tag resolved to
    assert registry.paths[0] == "/@acme%2fschemas"  # a scoped name is one segment
    assert (tmp_path / "cache/npm/@acme+schemas@9.9.9/schema/s.json").read_bytes() == raw
    assert (
        not (tmp_path / "escape.json").exists() and not (tmp_path.parent / "escape.json").exists()
    )
    with pytest.raises(AgentgenError, match="not a regular file"):
        sources.load_schema("npm:@acme/schemas@latest#link.json")
    with pytest.raises(AgentgenError, match=r"no file schema/missing\.json in the package") as err:
        sources.load_schema("npm:@acme/schemas@latest#schema/missing.json")
    assert "the package's JSON files: schema/s.json" in str(err.value)  # what to write
    with pytest.raises(AgentgenError, match=r"no version 7\.0\.0 of @acme/schemas") as err:
        sources.load_schema("npm:@acme/schemas@7.0.0#schema/s.json")
    assert err.value.hint and "latest" in err.value.hint


def test_npm_tarball_must_match_its_integrity(registry: _Registry) -> None:
    wrong = "sha512-" + base64.b64encode(hashlib.sha512(b"other").digest()).decode()
    registry.publish("acme-bad", "1.0.0", {"s.json": b"{}"}, integrity=wrong)
    with pytest.raises(AgentgenError, match="does not match the registry's integrity"):
        sources.fetch_bytes("npm:acme-bad@1.0.0#s.json")
    assert not (Path(os.environ["AGENTGEN_CACHE_DIR"]) / "npm").exists()  # nothing cached


def test_npm_registry_failure_is_one_line(
    registry: _Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = registry.url.split("//", 1)[1]
    monkeypatch.setenv("AGENTGEN_NPM_REGISTRY", f"http://tok:secret@{host}")
    with pytest.raises(AgentgenError) as err:
        sources.load_schema("npm:acme-missing@1.0.0#schema.json")
    text = str(err.value)
    assert "HTTP 404" in text and "acme-missing" in text
    assert "secret" not in text and "\n" not in text


def test_short_names_are_the_locked_packages_schemas(tmp_path: Path) -> None:
    base = f"npm:{LOCK['package']}@{LOCK['version']}#schema"
    assert sources.expand_short("v1") == f"{base}/v1/schema.json"
    assert sources.expand_short("v2") == f"{base}/v2/schema.json"
    assert sources.expand_short("v1-unstable") == f"{base}/v1/schema.unstable.json"
    assert sources.expand_short("v2-unstable") == f"{base}/v2/schema.unstable.json"
    assert sources.expand_short("v2-stable") == "v2-stable"  # not a short name: a path
    with pytest.raises(AgentgenError, match="file not found"):
        sources.load_schema("v2-stable")


def test_cache_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTGEN_CACHE_DIR", str(tmp_path / "a"))
    assert sources.cache_dir() == tmp_path / "a"
    monkeypatch.delenv("AGENTGEN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert sources.cache_dir() == tmp_path / "x" / "agentgen"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert sources.cache_dir() == tmp_path / "h" / ".cache" / "agentgen"


def test_lock_ships_and_the_fetched_schema_is_not_committed(repo: Path) -> None:
    """The lock is in schema/, which the wheel carries (setup.py copies the folder;
    tests/e2e/test_wheel.py proves it on a built wheel); no tracked file is a locked upstream
    schema (the default one or one the tests use)."""
    import subprocess

    assert (repo / "schema" / sources.LOCK_NAME).is_file()
    assert '"schema"' in (repo / "setup.py").read_text(encoding="utf-8")
    test_locks = json.loads((repo / "tests" / "schemas.lock.json").read_text(encoding="utf-8"))
    locked = {LOCK["sha256"], *(entry["sha256"] for entry in test_locks.values())}
    tracked = subprocess.run(
        ["git", "ls-files", "*.json"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.split()
    for rel in tracked:
        digest = (
            hashlib.sha256((repo / rel).read_bytes()).hexdigest() if (repo / rel).is_file() else ""
        )
        assert digest not in locked, f"{rel} is a fetched upstream schema"


def test_unwritable_cache_only_costs_a_fetch(
    registry: _Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_acp: Path
) -> None:
    raw = (shared_acp / "v1" / "schema.json").read_bytes()
    registry.publish("acme", "1.0.0", {"s.json": raw})
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache dir should be")
    monkeypatch.setenv("AGENTGEN_CACHE_DIR", str(blocker))
    for _ in range(2):
        assert sources.load_schema("npm:acme@1.0.0#s.json").raw == raw


def test_the_locked_default_gives_a_method_table(cache_copy: Path) -> None:
    """The default revision (which has sides and envelopes the shared copies lack)."""
    from generator.protocol.diff import diff_schemas
    from generator.protocol.methods import method_table

    data = sources.load_schema(None).data
    table = method_table(data)
    sides = {n["x-side"] for n in data["$defs"].values() if "x-method" in n}
    expected = (sides - {"both"}) | ({"agent", "client"} if "both" in sides else set())
    assert {m.side for m in table.methods} == expected
    for name in ("providers/list", "providers/set", "providers/disable"):
        m = next(x for x in table.for_side("agent") if x.name == name)
        assert (m.kind, m.unstable) == ("request", True)
    assert diff_schemas(data, data).entries == []
