"""Helpers for the scaffold tests: an isolated template store, git, and a small
stand-in for the schema/manifest/render pipeline.

The stand-in lets the scaffold's own mechanics (copier, `_generated/` writing,
check, update, refusals) be tested on their own; `test_scaffold_regen.py` runs the
real pipeline end to end.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.errors import AgentgenError
from generator.scaffold import inputs


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def git_commit_all(cwd: Path, message: str) -> None:
    git(cwd, "add", "-A")
    git(cwd, "commit", "-qm", message)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts and "__pycache__" not in p.parts
    }


def _fake_schema(spec: str | None) -> inputs.Loaded:
    assert spec is not None
    if not Path(spec).is_file():
        raise AgentgenError("schema not found", source=spec)
    raw = Path(spec).read_bytes()
    return inputs.Loaded(json.loads(raw), spec, hashlib.sha256(raw).hexdigest(), {})


def _fake_render(
    *, schema: Any, meta: Any, manifest: dict[str, Any], role: str, transport: str, package: str
) -> dict[str, str]:
    """One method per entry of `schema["methods"]`: `{attr: [params, result]}`."""
    base = "AgentBase" if role == "agent" else "ClientBase"
    lines = [f"class {base}:"]
    for attr, (params, result) in sorted(schema["methods"].items()):
        lines.append(f"    async def {attr}(self, params: {params}) -> {result}: ...")
    models = []
    for cls, fields in sorted(schema.get("models", {}).items()):
        models.append(f"class {cls}(BaseModel):")
        for name, alias in fields:
            models.append(f"    {name}: str = Field(..., alias={alias!r})")
        models.append("")
    return {
        "__init__.py": "",
        "dispatcher.py": "\n".join(lines) + "\n",
        "models.py": "from pydantic import BaseModel, Field\n\n" + "\n".join(models),
        "manifest.json": json.dumps(manifest, sort_keys=True) + "\n",
        "runtime/__init__.py": "",
    }


def write_fake_schema(
    path: Path, methods: dict[str, list[str]], models: dict[str, list[list[str]]] | None = None
) -> Path:
    path.write_text(json.dumps({"methods": methods, "models": models or {}}))
    return path


def _fake_report(old: inputs.Loaded, new: inputs.Loaded) -> inputs.Report:
    gone = sorted(set(old.data["methods"]) - set(new.data["methods"]))
    return inputs.Report("\n".join(f"removed method {m}" for m in gone), bool(gone))


@pytest.fixture
def fake_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "load_schema", _fake_schema)
    monkeypatch.setattr(
        inputs, "load_manifest", lambda p: yaml.safe_load(Path(p).read_text(encoding="utf-8"))
    )
    monkeypatch.setattr(inputs, "render_generated", _fake_render)
    monkeypatch.setattr(inputs, "revision_report", _fake_report)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated template store (and home), so tests never touch ~/.cache."""
    path = tmp_path / "store"
    monkeypatch.setenv("AGENTGEN_TEMPLATE_STORE", str(path))
    return path
