"""`agentgen registry check [DIR] [--launch]`: an entry checked the way the registry does.

DIR is an entry folder (`<id>/agent.json`), a folder of entries, or a project (its
`acp-registry/`). Each problem is one line, `file:line:col: /pointer: message`; exit 1
when there is any. `--launch` then runs each entry's project (launch.py).

`version_lines(project)` is what `agentgen check` adds: agent.json's version (and its uvx
package pin) in step with pyproject.toml's.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from ..errors import AgentgenError, InvalidInput
from ..manifest.positions import Parsed
from .entry import FOLDER, load, project_version
from .rules import Finding, entry_findings, icon_findings


def _line(path: Path, f: Finding, parsed: Parsed | None = None) -> str:
    line, col = f.line, f.col
    if line is None and parsed is not None:
        pointer = f.pointer
        while pointer and pointer not in parsed.positions:
            pointer = pointer.rpartition("/")[0]
        line, col = parsed.positions.get(pointer) or parsed.positions.get("", (1, 1))
    where = f"{path}:{line or 1}:{col or 1}"
    return f"{where}: {f.pointer}: {f.message}" if f.pointer else f"{where}: {f.message}"


def entry_lines(folder: Path) -> list[str]:
    """Every problem of the entry in `folder` (agent.json and its icon), one line each."""
    path = folder / "agent.json"
    if not path.is_file():
        return [f"{folder}: no agent.json"]
    try:
        parsed = load(path)
    except InvalidInput as err:
        return [str(err)]
    out = [_line(path, f, parsed) for f in entry_findings(parsed.value, folder.name)]
    data = parsed.value if isinstance(parsed.value, dict) else {}
    icon = data.get("icon")
    local = (
        folder / icon
        if isinstance(icon, str) and icon and not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", icon)
        else None
    )
    if local is not None and not local.is_file():
        out.append(
            _line(path, Finding("/icon", f"{icon!r}: no such file beside agent.json"), parsed)
        )
    icon_path = local if local is not None and local.is_file() else folder / "icon.svg"
    if icon_path.is_file():
        try:
            text = icon_path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            out.append(f"{icon_path}:1:1: not UTF-8 text")
        else:
            out += [_line(icon_path, f) for f in icon_findings(text)]
    return out


def entries(directory: Path) -> list[Path]:
    """The entry folders DIR names (see the module docstring)."""
    if (directory / "agent.json").is_file():
        return [directory]
    base = directory / FOLDER if (directory / FOLDER).is_dir() else directory
    found = sorted(p.parent for p in base.glob("*/agent.json"))
    if not found:
        raise AgentgenError(
            "no registry entry here",
            source=str(directory),
            hint="pass an entry folder (<id>/agent.json), a folder of them, or a project",
        )
    return found


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def version_lines(root: Path) -> list[str]:
    """agent.json entries under `root/acp-registry/` whose version (or uvx package pin)
    is not pyproject.toml's version."""
    version = project_version(root)
    folder = root / FOLDER
    if version is None or not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.glob("*/agent.json")):
        try:
            parsed = load(path)
        except InvalidInput as err:
            out.append(str(err))
            continue
        data: Any = parsed.value
        if not isinstance(data, dict):
            continue
        rel = path.relative_to(root)
        given = data.get("version")
        if isinstance(given, str) and not _same_version(given, version):
            out.append(
                _line(
                    rel,
                    Finding("/version", f"{given} but pyproject.toml's version is {version}"),
                    parsed,
                )
            )
        uvx = (
            (data.get("distribution") or {}).get("uvx")
            if isinstance(data.get("distribution"), dict)
            else None
        )
        package = uvx.get("package") if isinstance(uvx, dict) else None
        pinned = (
            re.search(r"(?:==|@)([0-9][^\s,;]*)", package) if isinstance(package, str) else None
        )
        if pinned and not _same_version(pinned.group(1), version):
            out.append(
                _line(
                    rel,
                    Finding(
                        "/distribution/uvx/package",
                        f"pins {pinned.group(1)} but pyproject.toml's version is {version}",
                    ),
                    parsed,
                )
            )
    return out


def run_registry_check(directory: Path, *, launch: bool = False) -> int:
    from .. import console

    folders = entries(directory)
    problems: list[str] = []
    for folder in folders:
        problems += entry_lines(folder)
    for folder in folders:
        root = folder.parent.parent
        if (root / "pyproject.toml").is_file():
            problems += [
                str(root / line)
                for line in version_lines(root)
                if line.startswith(f"{FOLDER}/{folder.name}/")
            ]
    if problems:
        console.diagnostics(problems, sys.stdout)
        console.summary(
            f"{len(problems)} problem(s) in {len(folders)} entr{'y' if len(folders) == 1 else 'ies'}",
            ok=False,
        )
        return 1
    if launch:
        from .launch import launch_lines

        for folder in folders:
            problems += launch_lines(folder)
        if problems:
            console.diagnostics(problems, sys.stdout)
            console.summary(f"{len(problems)} launch problem(s)", ok=False)
            return 1
    what = "checked and launched" if launch else "checked"
    print(f"{len(folders)} registry entr{'y' if len(folders) == 1 else 'ies'} {what}: no problems")
    return 0
