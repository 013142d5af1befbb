"""Config options ACP's session config options cannot show as they are (string, integer,
number options without `values`): served the best way each revision allows, and
`validate` says so.

v1 has select and boolean options only: such an option is not listed in configOptions
(it is still set at session/new `_meta.config` or with session/set_config_option); v2
adds implementation-specific kinds, so it is listed as a `_<kind>` option. Every
configOptions frame is checked against the revision's own SessionConfigOption schema.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import hardening_support as hs
import pytest
from jsonschema import Draft202012Validator

from generator.manifest.validate import run_validate

MANIFEST: dict[str, Any] = {
    "name": "kinds-agent",
    "version": "0.1.0",
    "config": {
        "options": [
            {
                "id": "model",
                "name": "Model",
                "type": "choice",
                "values": ["s", "l"],
                "default": "s",
            },
            {"id": "fast", "name": "Fast", "type": "boolean", "default": True},
            {"id": "depth", "name": "Depth", "type": "integer", "default": 3},
            {"id": "style", "name": "Style", "type": "string", "default": "plain"},
            {"id": "temp", "name": "Temperature", "type": "number", "default": 0.5},
            {"id": "level", "name": "Level", "type": "integer", "values": [1, 2], "default": 1},
        ]
    },
}


def _option_validator(schema: dict[str, Any]) -> Draft202012Validator:
    return Draft202012Validator({"$ref": "#/$defs/SessionConfigOption", "$defs": schema["$defs"]})


async def _session_new(env: dict[str, str], package: str, init: dict[str, Any]) -> Any:
    peer = await hs.StdioPeer.start(env, package)
    try:
        r = await peer.call(1, "initialize", init)
        assert "result" in r, r
        r = await peer.call(2, "session/new", {"cwd": "/tmp", "mcpServers": []})
        assert "result" in r, r
        return r["result"]["configOptions"]
    finally:
        await peer.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rev", "unstable"), [("v1", False), ("v1", True), ("v2", False)], ids=["v1", "v1u", "v2"]
)
def test_each_revision_shows_what_it_can(
    tmp_path: Path, shared_acp: Path, rev: str, unstable: bool
) -> None:
    package = f"kinds_{rev}{'u' if unstable else ''}"
    env = hs.build(tmp_path, shared_acp, package, rev=rev, unstable=unstable, manifest=MANIFEST)
    schema_file = shared_acp / rev / f"schema{'.unstable' if unstable else ''}.json"
    schema = json.loads(schema_file.read_text())
    init: dict[str, Any] = (
        {"protocolVersion": 2, "info": {"name": "t", "version": "1"}, "capabilities": {}}
        if rev == "v2"
        else {"protocolVersion": 1, "clientCapabilities": {}}
    )
    options = asyncio.run(_session_new(env, package, init))
    validator = _option_validator(schema)
    for option in options:
        errors = [e.message for e in validator.iter_errors(option)]
        assert not errors, (option, errors)
    key = "configId" if rev == "v2" else "id"
    kinds = {o[key]: o["type"] for o in options}
    if rev == "v2":
        assert kinds == {
            "model": "select",
            "fast": "boolean",
            "depth": "_integer",
            "style": "_string",
            "temp": "_number",
            "level": "select",
        }
        current = {o[key]: o["currentValue"] for o in options}
        assert (current["depth"], current["style"], current["temp"]) == (3, "plain", 0.5)
    else:
        assert kinds == {"model": "select", "fast": "boolean", "level": "select"}


def test_validate_notes_the_options_v1_cannot_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(MANIFEST, indent=1), encoding="utf-8")
    assert run_validate([path]) == 0  # a note, not an error
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if ": note: " in line]
    assert [n.split(": ")[1] for n in notes] == [
        "/config/options/2",
        "/config/options/3",
        "/config/options/4",
    ]
    assert all(line.startswith(f"{path}:") for line in notes)
    assert "'_integer'" in notes[0] and "_meta.config" in notes[0]
    assert err.splitlines()[-1] == "1 manifest valid"
