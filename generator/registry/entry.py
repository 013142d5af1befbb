"""A project's ACP registry entry: `acp-registry/<id>/agent.json` and `icon.svg`.

The entry is made from the manifest (its `registry` block, each field defaulting from the
identity: id = name, name = title, authors, repository = links.repository) and points
editors at the project's wheel on PyPI through `uvx <distribution>@<version>`: the
console script of a generated project has the distribution's name, so `uvx` finds it.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from ..errors import InvalidInput
from ..files import write_atomic
from ..manifest.positions import Parsed, parse_text
from ..names import summary

FOLDER = "acp-registry"

# a 16x16 placeholder drawn with currentColor only (the registry's icon rules): a speech
# bubble. Replace it with the agent's own mark, same rules (`agentgen registry check`).
PLACEHOLDER_ICON = """\
<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">
  <path fill="none" stroke="currentColor" stroke-width="1.5" stroke-linejoin="round"
        d="M2.75 3.25h10.5v7h-6l-3 2.5v-2.5h-1.5z"/>
</svg>
"""


def registry_id(manifest: dict[str, Any]) -> str:
    block = manifest.get("registry") or {}
    return str(block.get("id") or manifest["name"])


def entry(manifest: dict[str, Any], *, distribution: str, version: str) -> dict[str, Any]:
    """agent.json for the manifest; `distribution`: the project's distribution name,
    `version`: the project's version (the manifest's)."""
    block = manifest.get("registry") or {}
    name = block.get("name") or manifest.get("title") or manifest["name"]
    out: dict[str, Any] = {
        "id": registry_id(manifest),
        "name": name,
        "version": version,
        "description": summary(manifest.get("description")) or name,
    }
    repository = block.get("repository") or (manifest.get("links") or {}).get("repository")
    if repository:
        out["repository"] = repository
    authors = block.get("authors") or manifest.get("authors")
    if authors:
        out["authors"] = list(authors)
    if block.get("license"):
        out["license"] = block["license"]
    out["icon"] = block.get("icon") or "./icon.svg"
    out["distribution"] = {"uvx": {"package": f"{distribution}@{version}"}}
    return out


def dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def write_entry(project: Path, manifest: dict[str, Any], *, distribution: str) -> Path:
    """Write `acp-registry/<id>/agent.json` and the placeholder icon; the entry's folder."""
    folder = project / FOLDER / registry_id(manifest)
    data = entry(manifest, distribution=distribution, version=str(manifest["version"]))
    write_atomic(folder / "agent.json", dump(data))
    if data["icon"] == "./icon.svg":
        write_atomic(folder / "icon.svg", PLACEHOLDER_ICON)
    return folder


def zed_snippet(script: str, env: dict[str, str] | None = None) -> list[str]:
    """`agentgen new`'s next step for a stdio agent: the Zed settings that start it
    (`env`: what the agent reads from its environment, e.g. a model's key)."""
    server = {"type": "custom", "command": script, "args": [], "env": env or {}}
    body = {"agent_servers": {script: server}}
    return [
        f"  use it from Zed (`{script}` on PATH, e.g. `uv tool install .`): in settings.json",
        *("    " + line for line in json.dumps(body, indent=2).splitlines()),
        "  the ACP registry entry: acp-registry/ (`agentgen registry check --launch`)",
    ]


def load(path: Path) -> Parsed:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("not UTF-8 text", source=str(path)) from None
    return parse_text(text, source=str(path), as_json=True)


def project_version(root: Path) -> str | None:
    path = root / "pyproject.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    version = data.get("project", {}).get("version")
    return version if isinstance(version, str) else None
