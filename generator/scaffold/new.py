"""`agentgen new DIR`: copier renders the skeleton, agentgen writes `_generated/`.

The project is built in a temporary sibling directory and moved into place only when
complete, so a failure leaves nothing behind and nothing existing is overwritten.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import AgentgenError
from . import inputs, project, template_store


def _summary(description: Any) -> str:
    """First paragraph on one line, without control characters (it lands in TOML)."""
    if not isinstance(description, str):
        return ""
    first = re.split(r"\n\s*\n", description.strip(), maxsplit=1)[0]
    text = " ".join(first.split())
    return "".join(ch for ch in text if unicodedata.category(ch)[0] != "C")[:300]


def _pep440(version: Any) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        return str(Version(str(version)))
    except InvalidVersion:
        return "0.1.0"


def _check_target(directory: Path) -> Path:
    if ".." in directory.parts:
        raise AgentgenError(
            "refusing a target path with '..' in it",
            source=str(directory),
            hint="give the directory without '..' (an absolute path works)",
        )
    target = directory.expanduser().absolute()
    if target.exists() or target.is_symlink():
        if not target.is_dir() or target.is_symlink():
            raise AgentgenError("exists and is not a directory", source=str(directory))
        if any(target.iterdir()):
            raise AgentgenError(
                "directory exists and is not empty; refusing to write into it",
                source=str(directory),
                hint="choose a new directory",
            )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AgentgenError(
            f"cannot create the parent directory: {exc.strerror}", source=str(target.parent)
        ) from None
    return target


def copier_answers(
    manifest: dict[str, Any], *, role: str, package: str, transport: str, manifest_file: str
) -> dict[str, str]:
    name = manifest["name"] + ("-client" if role == "client" else "")
    title = manifest.get("title")
    return {
        "project_name": name,
        "package_name": package,
        "version": _pep440(manifest.get("version", "0.1.0")),
        "title": _summary(title) or name,
        "summary": _summary(manifest.get("description")),
        "transport": transport,
        "manifest_file": manifest_file,
    }


def run_copier_copy(dst: Path, role: str, answers: dict[str, str]) -> None:
    import copier

    snap = template_store.snapshot(role, project.agentgen_version())
    try:
        copier.run_copy(
            snap.src_path,
            dst,
            data=answers,
            vcs_ref=snap.tag,
            defaults=True,
            overwrite=False,
            quiet=True,
            unsafe=False,
            skip_tasks=True,
        )
    except template_store.copier_errors() as exc:  # one clear line, no traceback
        raise AgentgenError(f"copier could not render the {role} template: {exc}") from None


def _abs(spec: str | None) -> str | None:
    if spec and inputs.is_local(spec):
        return str(Path(spec).expanduser().resolve())
    return spec


def run_new(
    directory: Path,
    *,
    manifest: Path,
    role: str = "agent",
    transport: str = "stdio",
    schema: str | Sequence[str] | None = None,
    meta: str | Sequence[str] | None = None,
) -> int:
    if role not in project.ROLES:
        raise AgentgenError(f"unknown role {role!r}", hint="agent | client")
    if transport not in project.TRANSPORTS:
        raise AgentgenError(f"unknown transport {transport!r}", hint="stdio | http")
    target = _check_target(directory)
    manifest_path = Path(manifest)
    data = inputs.load_manifest(manifest_path)
    package = project.package_name(data.get("name"), source=str(manifest_path))
    if role == "client":  # installable beside the agent it talks to
        package += "_client"
    suffix = manifest_path.suffix.lower()
    manifest_file = "agent.json" if suffix == ".json" else "agent.yaml"
    # Local inputs as absolute paths: the build runs in a staging directory.
    pairs = [(_abs(s), _abs(m)) for s, m in inputs.schema_pairs(schema, meta)]
    (schema_spec, meta_spec), more = pairs[0], tuple(pairs[1:])

    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.agentgen-", dir=target.parent))
    try:
        build = staging / "project"
        answers = copier_answers(
            data, role=role, package=package, transport=transport, manifest_file=manifest_file
        )
        run_copier_copy(build, role, answers)
        shutil.copyfile(manifest_path, build / manifest_file)
        rendered = project.render(
            target,  # origins are recorded relative to the final place
            package,
            manifest_rel=manifest_file,
            role=role,
            transport=transport,
            schema_spec=schema_spec,
            meta_spec=meta_spec,
            manifest_path=build / manifest_file,
            more=more,
        )
        project.write_generated(build / package / project.GENERATED, rendered.files)
        if target.exists():
            target.rmdir()  # empty, checked above
        build.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"created {role} project {data['name']} ({transport}) in {directory}")
    return 0
