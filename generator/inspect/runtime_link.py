"""The inspector's one door into the runtime (templates/runtime): everything it uses of the
runtime is looked up here, so a move of a runtime module costs this file only.

The runtime needs a protocol revision's models and description, which `agentgen new`
renders into a project's `_generated/`.  The inspector does the same for the schema it is
given: a client package rendered once into a cache folder (keyed by the schema's sha256
and the runtime's own bytes), then imported.  Its `runtime/` is agentgen's own copy of
templates/runtime (render.runtime_files copies it verbatim), so one module instance of
each runtime module serves the whole inspector.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

MANIFEST = {"name": "agentgen-inspect", "version": "0.1.0", "title": "agentgen inspect"}


@dataclass(frozen=True)
class Runtime:
    """The pieces of the rendered client package the inspector uses."""

    generated: ModuleType  # <pkg>._generated: ClientBase, AgentConnection, METHODS
    client: ModuleType  # runtime.client.client: negotiate, ClientRuntime
    jsonrpc: ModuleType  # runtime.wire.jsonrpc: Connection
    stdio: ModuleType  # runtime.wire.stdio: read_frames
    agent_process: ModuleType  # runtime.client.agent_process: StdoutGuard, end_agent, exit_status
    http_client: ModuleType  # runtime.client.http_client: HttpTransport, WebSocketTransport
    wirecheck: ModuleType  # runtime.wire.wirecheck: WireCheck
    errors: ModuleType  # runtime.wire.errors: RpcError, AgentExited
    routes: ModuleType  # runtime.wire.routes: session_scoped
    schema_origin: str

    @property
    def client_base(self) -> Any:
        return self.generated.ClientBase

    @property
    def proxy_class(self) -> Any:
        return self.generated.AgentConnection

    @property
    def revisions(self) -> tuple[Any, ...]:
        return tuple(self.generated.AgentConnection.REVISIONS)

    def models_of(self, package: str) -> Any:
        return self.generated.ClientBase.protocol_models_of(package)

    def wire_check(self, owner: Any, revision: Any) -> Any:
        """A check of the client side's frames for `revision` (the negotiated one)."""
        models = self.models_of(revision.package)
        return self.wirecheck.WireCheck(
            "client",
            models,
            revision.side("agent"),
            revision.side("client"),
            check_received=True,
            owner=owner,
        )

    def session_scoped(self, client: Any) -> Any:
        """Which agent requests carry the HTTP session header (as connect_http decides)."""
        from_routes = self.routes

        def scoped(method: str) -> bool:
            rev = client.revision
            revisions = (rev,) if rev is not None else self.revisions
            for one in revisions:
                entry = one.side("agent").get(method)
                if entry is not None:
                    return bool(from_routes.session_scoped(entry))
            return False

        return scoped


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agentgen" / "inspect"


def _runtime_digest() -> str:
    from ..packaged import data_dir

    digest = hashlib.sha256()
    root = data_dir("templates") / "runtime"
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def load_runtime(schema: str | None, *, cache: Path | None = None) -> Runtime:
    """The client package for `schema` (None: the default `agentgen new` uses), rendered
    into the cache when it is not there yet, and imported."""
    from ..scaffold import inputs
    from ..scaffold.project import agentgen_version

    loaded = inputs.load_schema(schema)
    key = hashlib.sha256(
        f"{loaded.sha256}:{agentgen_version()}:{_runtime_digest()}".encode()
    ).hexdigest()[:16]
    package = f"agentgen_inspect_{key}"
    root = cache or _cache_root()
    folder = root / package
    if not (folder / "_generated" / "__init__.py").is_file():
        files = inputs.render_generated(
            schema=loaded.data,
            meta=None,
            manifest=dict(MANIFEST),
            role="client",
            transport="stdio",
            package=package,
        )
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{package}.", dir=root))
        try:
            for rel, text in files.items():
                target = staging / "_generated" / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
            (staging / "__init__.py").write_text("", encoding="utf-8")
            if not folder.exists():
                staging.rename(folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    generated = importlib.import_module(f"{package}._generated")
    rt = f"{package}._generated.runtime"
    return Runtime(
        generated=generated,
        client=importlib.import_module(f"{rt}.client.client"),
        jsonrpc=importlib.import_module(f"{rt}.wire.jsonrpc"),
        stdio=importlib.import_module(f"{rt}.wire.stdio"),
        agent_process=importlib.import_module(f"{rt}.client.agent_process"),
        http_client=importlib.import_module(f"{rt}.client.http_client"),
        wirecheck=importlib.import_module(f"{rt}.wire.wirecheck"),
        errors=importlib.import_module(f"{rt}.wire.errors"),
        routes=importlib.import_module(f"{rt}.wire.routes"),
        schema_origin=loaded.origin,
    )
