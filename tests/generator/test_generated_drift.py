"""What agentgen generates from its own inputs is committed, and must match a fresh run:
the manifest-format models the generator reads manifests with (in the package and their
copy in generated/manifest/) and each example's manifest models (generated/examples/)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REFRESH = ".venv/bin/python generated/manifest/regen.py"


@pytest.fixture(scope="module")
def fresh() -> dict[Path, str]:
    from generator.manifest.models import dogfood_outputs

    return dogfood_outputs(REPO)


def test_every_example_and_the_format_are_covered(fresh: dict[Path, str]) -> None:
    rel = {p.relative_to(REPO).as_posix() for p in fresh}
    examples = sorted(p.parent.name for p in (REPO / "examples").glob("*/agent.yaml"))
    assert {"echo", "mail-composer", "research"} <= set(examples)
    assert {f"generated/examples/{e}/manifest_models.py" for e in examples} <= rel
    assert "generator/manifest/format_models.py" in rel
    assert "generated/manifest/format_models.py" in rel


def test_committed_files_match_a_fresh_generation(fresh: dict[Path, str]) -> None:
    stale = [
        p.relative_to(REPO).as_posix()
        for p, text in sorted(fresh.items())
        if not p.is_file() or p.read_bytes() != text.encode("utf-8")
    ]
    assert not stale, f"stale generated files {stale}: refresh with `{REFRESH}`"


def test_no_orphan_example_models() -> None:
    """A removed example leaves no generated models behind."""
    examples = {p.parent.name for p in (REPO / "examples").glob("*/agent.yaml")}
    committed = {p.parent.name for p in (REPO / "generated" / "examples").glob("*/*.py")}
    assert committed <= examples, f"remove generated/examples/{sorted(committed - examples)}"


def test_the_generator_reads_manifests_through_the_committed_models() -> None:
    from generator.manifest import format as fmt
    from generator.manifest.format_models import ManifestFormat

    m = fmt.read_manifest({"name": "a", "version": "1", "input": {"type": "object"}})
    assert isinstance(m, ManifestFormat)
    assert fmt.schema_of(m.input) == {"type": "object"}
