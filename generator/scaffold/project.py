"""What `new`, `regen`, `check` and `update` share: names, the project's record of its
inputs (`_generated/SOURCE.json`), rendering `_generated/`, and writing it safely.

`_generated/` is the only place agentgen writes into an existing project: every path
is checked to stay inside it, files are replaced atomically, and files agentgen no
longer generates are removed (only inside `_generated/`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import AgentgenError
from ..files import write_atomic
from . import inputs

GENERATED = "_generated"
SOURCE_FILE = "SOURCE.json"
ROLES = ("agent", "client")
TRANSPORTS = ("stdio", "http")
_NAME = re.compile(r"^[a-z][a-z0-9-]*$")


def agentgen_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("acp-agentgen")  # the distribution name
    except PackageNotFoundError:
        return "0.0.0"


def package_name(name: Any, *, source: str) -> str:
    """`research-agent` -> `research_agent`; refuse anything that is not a safe package."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise AgentgenError(
            f"manifest name {name!r} is not a project name",
            source=source,
            pointer="/name",
            hint="use lowercase letters, digits and '-', starting with a letter",
        )
    from ..manifest.semantics import package_problem

    problem = package_problem(name)
    if problem:
        raise AgentgenError(problem, source=source, pointer="/name")
    pkg = name.replace("-", "_")
    return pkg


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Project:
    root: Path
    package: str
    source: dict[str, Any]  # SOURCE.json

    @property
    def generated_dir(self) -> Path:
        return self.root / self.package / GENERATED

    @property
    def manifest_path(self) -> Path:
        return self.root / str(self.source["manifest"]["path"])


def find_project(root: Path) -> Project:
    """The project at `root`: the one `<pkg>/_generated/SOURCE.json` under it."""
    root = root.resolve()
    if not root.is_dir():
        raise AgentgenError("not a directory", source=str(root))
    found = sorted(root.glob(f"*/{GENERATED}/{SOURCE_FILE}"))
    if not found:
        raise AgentgenError(
            f"no <package>/{GENERATED}/{SOURCE_FILE} here: not a project made by `agentgen new`",
            source=str(root),
            hint="pass --project DIR",
        )
    if len(found) > 1:
        names = ", ".join(p.relative_to(root).as_posix() for p in found)
        raise AgentgenError(f"more than one generated package: {names}", source=str(root))
    source_path = found[0]
    try:
        source = json.loads(source_path.read_text(encoding="utf-8"))
        missing = [k for k in ("role", "transport", "schema", "manifest") if k not in source]
        if missing or "path" not in source["manifest"]:
            raise ValueError(f"missing keys: {', '.join(missing) or 'manifest.path'}")
    except (OSError, ValueError, TypeError) as exc:
        raise AgentgenError(
            f"unreadable record of the generation inputs: {exc}",
            source=str(source_path),
            hint="restore it from version control",
        ) from None
    return Project(root=root, package=source_path.parent.parent.name, source=source)


def _origin_for_record(spec: str, root: Path) -> str:
    """Local paths are recorded relative to the project, so the record is portable."""
    if inputs.is_local(spec):
        path = Path(spec).expanduser().resolve()
        return Path(os.path.relpath(path, root)).as_posix()
    return spec


def resolve_origin(origin: str, root: Path) -> str:
    if inputs.is_local(origin) and not Path(origin).expanduser().is_absolute():
        return str((root / origin).resolve())
    return origin


@dataclass(frozen=True)
class Rendered:
    files: dict[str, str]  # path relative to `_generated/` -> text
    schema: inputs.Loaded
    meta: inputs.Loaded | None
    more: tuple[inputs.Loaded, ...] = ()  # the other revisions served (`--schema` repeated)


def render(
    root: Path,
    package: str,
    *,
    manifest_rel: str,
    role: str,
    transport: str,
    schema_spec: str | None,
    meta_spec: str | None,
    manifest_path: Path | None = None,
    more: tuple[tuple[str | None, str | None], ...] = (),
) -> Rendered:
    """Render every file of `_generated/` from the inputs, SOURCE.json included.

    `root` is where the project lives (origins are recorded relative to it);
    `manifest_path` overrides where the manifest is read while it is being built.
    """
    manifest_path = manifest_path or root / manifest_rel
    schema = inputs.load_schema(schema_spec)
    meta = inputs.load_meta(meta_spec) if meta_spec else None
    manifest = inputs.load_manifest(manifest_path)
    # more revisions the project serves (`--schema` given more than once)
    extra = [(inputs.load_schema(s), inputs.load_meta(m) if m else None) for s, m in more]
    also = tuple((s.data, m.data if m else None, s.origin) for s, m in extra)
    files = dict(
        inputs.render_generated(
            schema=schema.data,
            meta=meta.data if meta else None,
            manifest=manifest,
            role=role,
            transport=transport,
            package=package,
            **({"also": also} if also else {}),
        )
    )
    record: dict[str, Any] = {
        "agentgen": agentgen_version(),
        "role": role,
        "transport": transport,
        "schema": {
            "origin": _origin_for_record(schema.origin, root),
            "sha256": schema.sha256,
            "revision": schema.revision,
        },
        "meta": (
            {"origin": _origin_for_record(meta.origin, root), "sha256": meta.sha256}
            if meta
            else None
        ),
        "manifest": {"path": manifest_rel, "sha256": sha256_file(manifest_path)},
    }
    if extra:
        record["more_schemas"] = [
            {
                "origin": _origin_for_record(s.origin, root),
                "sha256": s.sha256,
                "revision": s.revision,
                "meta": (
                    {"origin": _origin_for_record(m.origin, root), "sha256": m.sha256}
                    if m
                    else None
                ),
            }
            for s, m in extra
        ]
    files[SOURCE_FILE] = json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    for rel in files:
        check_relpath(rel)
    return Rendered(files=files, schema=schema, meta=meta, more=tuple(s for s, _ in extra))


def render_recorded(
    project: Project,
    *,
    schema_spec: str | None = None,
    meta_spec: str | None = None,
    new_schema: bool = False,
    more: tuple[tuple[str | None, str | None], ...] = (),
) -> Rendered:
    """Re-render from the recorded inputs (or new schemas when `new_schema`: `schema_spec`
    and `more`)."""
    src = project.source
    if new_schema:
        schema = schema_spec
        meta = meta_spec
    else:
        more = tuple(
            (
                resolve_origin(rec["origin"], project.root),
                resolve_origin(rec["meta"]["origin"], project.root) if rec.get("meta") else None,
            )
            for rec in src.get("more_schemas") or ()
        )
        origin = src["schema"].get("origin")
        schema = resolve_origin(origin, project.root) if origin else None
        meta_rec = src.get("meta")
        meta = resolve_origin(meta_rec["origin"], project.root) if meta_rec else None
        if meta_spec is not None:
            meta = meta_spec
    return render(
        project.root,
        project.package,
        manifest_rel=src["manifest"]["path"],
        role=src["role"],
        transport=src["transport"],
        schema_spec=schema,
        meta_spec=meta,
        more=more,
    )


def check_relpath(rel: str) -> None:
    p = PurePosixPath(rel)
    if p.is_absolute() or not p.parts or any(part in ("", ".", "..") for part in p.parts):
        raise AgentgenError(f"refusing to write outside {GENERATED}/: {rel!r}")


def existing_files(generated_dir: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    if not generated_dir.is_dir():
        return out
    for path in sorted(generated_dir.rglob("*")):
        rel = path.relative_to(generated_dir)
        if path.is_file() and "__pycache__" not in rel.parts and path.suffix != ".pyc":
            out[rel.as_posix()] = path.read_bytes()
    return out


def changed_files(
    generated_dir: Path, files: dict[str, str]
) -> tuple[list[str], list[str], list[str]]:
    """(added, modified, removed) relative paths, comparing bytes."""
    old = existing_files(generated_dir)
    new = {k: v.encode("utf-8") for k, v in files.items()}
    added = sorted(k for k in new if k not in old)
    modified = sorted(k for k in new if k in old and old[k] != new[k])
    removed = sorted(k for k in old if k not in new)
    return added, modified, removed


def write_generated(generated_dir: Path, files: dict[str, str]) -> None:
    """Make `generated_dir` hold exactly `files`; touch nothing outside it."""
    added, modified, removed = changed_files(generated_dir, files)
    generated_dir.mkdir(parents=True, exist_ok=True)
    for rel in added + modified:
        check_relpath(rel)
        write_atomic(generated_dir / rel, files[rel])
    for rel in removed:
        (generated_dir / rel).unlink()
    # drop directories emptied by removals (never the package itself)
    for path in sorted(generated_dir.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir() and path.name != "__pycache__" and not any(path.iterdir()):
            path.rmdir()
