"""`_generated/acp.py`, the public face, carries the manifest's typed models too (issue 37
item 12: examples/mail-composer imported them from `_generated.manifest_models`): the same
classes, `Input` / `Output` the manifest's own when the prompt takes and returns them, and
a manifest model named like one of the face's names left in `manifest_models` only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from project_support import import_from, write_project

from generator.manifest.load import load_manifest

REPO = Path(__file__).resolve().parents[2]


def _schema(shared_acp: Path) -> dict[str, Any]:
    return dict(json.loads((shared_acp / "v1" / "schema.json").read_text()))


@pytest.mark.parametrize("role", ["agent", "client"])
def test_the_face_re_exports_the_manifests_models(
    shared_acp: Path, tmp_path: Path, role: str
) -> None:
    manifest = load_manifest(REPO / "examples" / "mail-composer" / "agent.yaml").data
    package = f"face_{role}"
    write_project(tmp_path, package, schema=_schema(shared_acp), manifest=manifest, role=role)
    acp = import_from(tmp_path, f"{package}._generated.acp")
    models = import_from(tmp_path, f"{package}._generated.manifest_models")
    for name in ("Config", "Input", "Output", "ApprovalPayload", "ApprovalResume"):
        assert getattr(acp, name) is getattr(models, name), name
        assert name in acp.__all__
    for name in ("QuotaExceeded", "QuotaExceededData", "UnknownRecipient", "ManifestError"):
        assert getattr(acp, name) is getattr(models, name), name


def test_a_manifest_model_never_shadows_a_name_of_the_face(
    shared_acp: Path, tmp_path: Path
) -> None:
    manifest = {
        "name": "shadow",
        "version": "0.1.0",
        "input": {"type": "string"},  # a text input: `Input` is the prompt's `str`
        "errors": [{"code": 1001, "name": "Turn", "description": "named like the face's Turn"}],
    }
    write_project(tmp_path, "face_shadow", schema=_schema(shared_acp), manifest=manifest)
    acp = import_from(tmp_path, "face_shadow._generated.acp")
    models = import_from(tmp_path, "face_shadow._generated.manifest_models")
    assert models.Turn is not acp.Turn and ".runtime." in acp.Turn.__module__
    assert "Input" not in acp.__all__ and not hasattr(acp, "Input")  # annotations only
    assert sorted(acp.__all__) == sorted(set(acp.__all__))


def test_the_readmes_client_helpers_are_on_the_clients_face(
    shared_acp: Path, tmp_path: Path
) -> None:
    """README's "Using the generated client from Python" names helpers a script imports
    from `_generated.acp` (it listed a `text` the face did not have)."""
    import re

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("#### Using the generated client from Python", 1)[1]
    paragraph = section.split("```", 1)[0]
    named = set(re.findall(r"`(content\.\w+|\w+)(?:\(|`)", paragraph))
    write_project(
        tmp_path,
        "face_readme",
        schema=_schema(shared_acp),
        manifest={"name": "r", "version": "0.1.0"},
        role="client",
    )
    acp = import_from(tmp_path, "face_readme._generated.acp")
    for name in sorted(named - {"Output", "_generated.acp"}):
        owner, _, attr = name.rpartition(".")
        assert hasattr(getattr(acp, owner) if owner else acp, attr), name
    assert {"content.text", "text_of", "prompt_turn"} <= named, named
