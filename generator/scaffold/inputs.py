"""The scaffold's calls into the rest of agentgen, in one place.

Schemas and meta tables come from `generator.sources`, manifests from
`generator.manifest.load`, the `_generated/` files from `generator.render`, and the
revision report from `generator.protocol.diff`. Each function here adapts one call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AgentgenError

_REMOTE = re.compile(r"^(https?://|npm:)")


def is_local(spec: str) -> bool:
    """A path (not a URL, an npm spec or a short name such as `v2`)."""
    from .. import sources

    return not _REMOTE.match(spec) and sources.expand_short(spec) == spec


def specs(value: str | Sequence[str] | None) -> list[str]:
    """One `--schema`/`--meta` value or several, as a list."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def schema_pairs(
    schema: str | Sequence[str] | None, meta: str | Sequence[str] | None
) -> list[tuple[str | None, str | None]]:
    """(schema, meta) per revision: the n-th `--meta` belongs to the n-th `--schema`;
    no `--schema` means the locked default."""
    schemas: list[str | None] = list(specs(schema)) or [None]
    metas = specs(meta)
    if len(metas) > len(schemas):
        raise AgentgenError(
            f"{len(metas)} --meta for {len(schemas)} --schema",
            hint="give at most one --meta per --schema, in the same order",
        )
    return [(s, metas[i] if i < len(metas) else None) for i, s in enumerate(schemas)]


@dataclass(frozen=True)
class Loaded:
    data: Any
    origin: str
    sha256: str
    revision: dict[str, Any] = field(default_factory=dict)


def load_schema(spec: str | None) -> Loaded:
    """A protocol schema (None: agentgen's locked default)."""
    from .. import sources

    src = sources.load_schema(spec)
    return _loaded(src)


def load_meta(spec: str) -> Loaded:
    from .. import sources

    return _loaded(sources.load_meta(spec))


def _loaded(src: Any) -> Loaded:
    revision = getattr(src, "revision", None) or {}
    return Loaded(data=src.data, origin=str(src.origin), sha256=src.sha256, revision=dict(revision))


def load_manifest(path: Path) -> dict[str, Any]:
    """The manifest as contract 3, refused (located in the user's file) unless valid."""
    from ..manifest.validate import load_valid

    try:
        path.stat()
    except FileNotFoundError:
        raise AgentgenError("manifest not found", source=str(path)) from None
    except OSError as err:  # a symlink loop, a name too long...
        raise AgentgenError(f"cannot read the manifest: {err.strerror}", source=str(path)) from None
    if path.is_dir():
        raise AgentgenError("is a directory, not a manifest file", source=str(path))
    if not path.is_file():
        raise AgentgenError("not a regular file, not a manifest file", source=str(path))
    return load_valid(path).data  # (an unreadable file: "cannot read the file: <why>")


def render_generated(
    *,
    schema: Any,
    meta: Any,
    manifest: dict[str, Any],
    role: str,
    transport: str,
    package: str,
    also: tuple[tuple[Any, Any, str], ...] = (),
) -> dict[str, str]:
    from ..render import render_generated as _render

    return dict(
        _render(
            schema=schema,
            meta=meta,
            manifest=manifest,
            role=role,
            transport=transport,
            package=package,
            also=also,
        )
    )


@dataclass(frozen=True)
class Report:
    text: str
    breaking: bool
    entries: list[Any] = field(default_factory=list)  # diff.Change, for regen's findings


def revision_report(old: Loaded, new: Loaded) -> Report:
    from ..protocol import diff

    rep = diff.diff_schemas(old.data, new.data)
    return Report(
        text=diff.format_text(rep),
        breaking=bool(getattr(rep, "breaking", False)),
        entries=list(rep.entries),
    )
