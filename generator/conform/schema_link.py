"""The kit's one door into what it shares with the runtime: the revision description and
the wire check.

For each `--schema` the kit needs the revision's description (`protocol.revision.
describe`, the runtime's own `Revision` type) and a judge of frames: the runtime's wire
check (templates/runtime/wire/wirecheck.py) over the revision's generated models.  The
models module is rendered once per schema into a cache folder beside a verbatim copy of
the runtime's `wire/` room (which imports nothing outside itself), and imported from
there; nothing else of the runtime is loaded, and no peer is ever judged through the
runtime's typed `Connection`.
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

from ..protocol import runtime_revision as rv


@dataclass(frozen=True)
class Judge:
    """One revision: its description, where its schema came from, and the wire check."""

    revision: rv.Revision
    origin: str
    schema: dict[str, Any]
    models: ModuleType
    wirecheck: ModuleType

    @property
    def batches(self) -> bool:
        """The schema's root has batch envelopes (arrays of messages)."""
        for branch in self.schema.get("anyOf") or ():
            if isinstance(branch, dict) and branch.get("type") == "array":
                return True
            ref = branch.get("$ref") if isinstance(branch, dict) else None
            target = _resolve_ref(self.schema, ref) if isinstance(ref, str) else None
            if isinstance(target, dict) and target.get("type") == "array":
                return True
        return False

    def _check(self, side: str) -> Any:
        rev = self.revision
        return self.wirecheck.WireCheck(
            side, self.models, rev.side("agent"), rev.side("client"), check_received=True
        )

    def problems(self, msg: Any, answers: str | None, *, sender: str, strict: bool) -> list[str]:
        """What is wrong with one message `sender` ("agent" | "client") sent (`answers`:
        the method of the request a response answers).  Lenient: validated as its
        receiver reads it.  Strict: as the runtime holds its own frames (no key the
        schema does not name, no unknown variant without `_`, read back unchanged)."""
        if strict:
            return list(self._check(sender).problems(msg, answers, sending=True))
        receiver = "client" if sender == "agent" else "agent"
        return list(self._check(receiver).problems(msg, answers, sending=False))


def _resolve_ref(schema: dict[str, Any], ref: str) -> Any:
    if not ref.startswith("#/"):
        return None
    node: Any = schema
    for part in ref[2:].split("/"):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agentgen" / "conform"


def _wire_room() -> Path:
    from ..packaged import data_dir

    return data_dir("templates") / "runtime" / "wire"


def _key(sha256: str) -> str:
    from ..scaffold.project import agentgen_version

    digest = hashlib.sha256(f"{sha256}:{agentgen_version()}".encode())
    for path in sorted(_wire_room().glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def load_judge(spec: str | None, *, cache: Path | None = None) -> Judge:
    """The judge of the schema `spec` (a path, URL, npm spec, `v1`/`v2`; None: the
    locked default), its models rendered into the cache when not there yet."""
    from ..protocol.revision import describe
    from ..scaffold import inputs

    loaded = inputs.load_schema(spec)
    package = f"agentgen_conform_{_key(loaded.sha256)}"
    root = cache or _cache_root()
    folder = root / package
    if not (folder / "models.py").is_file():
        _render(loaded.data, loaded.origin, root, folder)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return Judge(
        revision=describe(loaded.data, None, label=loaded.origin),
        origin=loaded.origin,
        schema=loaded.data,
        models=importlib.import_module(f"{package}.models"),
        wirecheck=importlib.import_module(f"{package}.wire.wirecheck"),
    )


def _render(schema: dict[str, Any], origin: str, root: Path, folder: Path) -> None:
    from ..protocol.models import generate_models

    source = generate_models(schema, source_label=origin)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=root))
    try:
        (staging / "__init__.py").write_text("", encoding="utf-8")
        shutil.copytree(
            _wire_room(), staging / "wire", ignore=shutil.ignore_patterns("__pycache__")
        )
        (staging / "models.py").write_text(source, encoding="utf-8")
        if not folder.exists():
            staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
