"""No numbered class name from any upstream schema we can get: every schema of the npm
package @agentclientprotocol/sdk 2.4.0 and of a few older versions of it and of
@zed-industries/agent-client-protocol (fetched through sources.py's npm source, checked
against the sha256 in tests/npm_schemas.lock.json, cached), plus every schema under
../shared/acp/ when that folder is present.

The naming rules themselves are proven by tests/cases/naming/; this is the drift alarm
over real revisions (bench/schema_history.py runs it over a whole upstream history).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from numbered import numbered_classes

from generator import sources
from generator.protocol.models import generate_models

LOCK = Path(__file__).resolve().parents[1] / "npm_schemas.lock.json"
SHARED_ACP = Path(__file__).resolve().parents[2].parent / "shared" / "acp"


def _npm_entries() -> list[dict[str, str]]:
    entries: list[dict[str, str]] = json.loads(LOCK.read_text(encoding="utf-8"))["schemas"]
    return entries


def _shared() -> list[Path]:
    return sorted(SHARED_ACP.rglob("schema*.json")) if SHARED_ACP.is_dir() else []


def _params() -> list[Any]:
    out = [
        pytest.param(("npm", e), id=f"npm:{e['package']}@{e['version']}#{e['path']}")
        for e in _npm_entries()
    ]
    out += [
        pytest.param(("shared", p), id=f"shared:{p.relative_to(SHARED_ACP)}") for p in _shared()
    ]
    return out


def test_the_lock_covers_the_current_and_older_packages() -> None:
    entries = _npm_entries()
    current = [e for e in entries if e["package"] == "@agentclientprotocol/sdk"]
    assert {e["path"] for e in current if e["version"] == "2.4.0"} == {
        "schema/v1/schema.json",
        "schema/v1/schema.unstable.json",
        "schema/v2/schema.json",
        "schema/v2/schema.unstable.json",
    }
    older = {(e["package"], e["version"]) for e in entries if e["version"] != "2.4.0"}
    assert len(older) >= 4
    assert any(p == "@zed-industries/agent-client-protocol" for p, _ in older)


@pytest.mark.parametrize("where", _params())
def test_no_numbered_class_name(where: tuple[str, Any]) -> None:
    kind, what = where
    if kind == "npm":
        npm = sources.NpmSpec(what["package"], what["version"], what["path"])
        raw, _ = sources.fetch_npm(npm, expected_sha256=what["sha256"])
        label = npm.spec
    else:
        raw, label = what.read_bytes(), str(what)
    schema = json.loads(raw)
    code = generate_models(schema, source_label=label)
    assert numbered_classes(code, schema) == []
