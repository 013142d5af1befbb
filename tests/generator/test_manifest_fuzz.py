"""Mutated valid manifests never crash validate: each gives diagnostics (or none, when the
mutation kept it valid) or one located AgentgenError (exit 2), never another exception."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator.errors import AgentgenError
from generator.manifest.load import parse_manifest_text
from generator.manifest.validate import diagnose

pytestmark = pytest.mark.slow  # fuzzer: `make test`, not `make test-fast`

CASES = Path(__file__).resolve().parents[1] / "cases" / "manifests"
SHARED_AGNTCY = Path(__file__).resolve().parents[2].parent / "shared" / "agntcy"


def _seeds() -> list[tuple[str, bool]]:
    seeds = [
        (p.read_text(), p.suffix == ".json")
        for p in sorted(CASES.glob("valid-*/agent.*"))
        if p.suffix in (".yaml", ".json")
    ]
    seeds += [(p.read_text(), True) for p in sorted(SHARED_AGNTCY.glob("*.json"))]
    return seeds


SEEDS = _seeds()

junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-40000, max_value=40000)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*path, i))
    return found


def _mutate_data(doc: dict[str, Any], data: st.DataObject) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(doc)))
        if not path:
            continue
        parent: Any = doc
        for token in path[:-1]:
            parent = parent[token]
        last = path[-1]
        op = data.draw(st.sampled_from(["delete", "replace", "junk-key", "duplicate", "rename"]))
        if op == "delete":
            del parent[last]
        elif op == "replace":
            parent[last] = data.draw(junk)
        elif op == "junk-key" and isinstance(parent[last], dict):
            parent[last][data.draw(st.text(max_size=8))] = data.draw(junk)
        elif op == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[last]))
        elif op == "rename" and isinstance(parent, dict):
            parent[str(last) + data.draw(st.sampled_from(["s", "_", "X", ""]))] = parent.pop(last)
    return doc


def _yaml_dump(doc: Any) -> str:
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def _mutate_text(text: str, data: st.DataObject) -> str:
    op = data.draw(st.sampled_from(["truncate", "insert", "duplicate-line", "swap-indent"]))
    at = data.draw(st.integers(0, len(text)))
    if op == "truncate":
        return text[:at]
    if op == "insert":
        return text[:at] + data.draw(st.sampled_from(list(":{}[],\"'\t\n-&*!#%@`|>?"))) + text[at:]
    lines = text.splitlines(keepends=True)
    i = data.draw(st.integers(0, max(len(lines) - 1, 0)))
    if op == "duplicate-line" and lines:
        lines.insert(i, lines[i])
    elif lines:
        lines[i] = "  " + lines[i] if data.draw(st.booleans()) else lines[i].lstrip()
    return "".join(lines)


def _check(text: str, as_json: bool) -> None:
    try:
        loaded = parse_manifest_text(text, source="m", as_json=as_json)
    except AgentgenError as err:  # exit 2: located, one line
        assert err.line is not None and err.line >= 1 and err.col is not None and err.col >= 1
        assert "\n" not in str(err)
        return
    for diag in diagnose(loaded):
        assert diag.line is not None and diag.line >= 1 and diag.col is not None
        assert diag.pointer.startswith("/") or diag.pointer == ""
        assert str(diag).startswith(f"m:{diag.line}:{diag.col}: ")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SEEDS), st.booleans(), st.data())
def test_mutated_manifests_never_crash(
    seed: tuple[str, bool], as_json: bool, data: st.DataObject
) -> None:
    text, seed_json = seed
    doc = parse_manifest_text(text, source="seed", as_json=seed_json)
    raw = json.loads(text) if seed_json else None
    base = raw if raw is not None else doc.data
    mutated = _mutate_data(base, data)
    out = json.dumps(mutated, indent=2) if as_json else _yaml_dump(mutated)
    if data.draw(st.booleans()):
        out = _mutate_text(out, data)
    _check(out, as_json)


def test_seeds_are_valid() -> None:
    # our valid-* cases, plus AGNTCY's two examples when ../shared/agntcy is present
    assert len(SEEDS) >= 4 + 2 * SHARED_AGNTCY.is_dir()
    for text, as_json in SEEDS:
        assert diagnose(parse_manifest_text(text, source="seed", as_json=as_json)) == []


agntcy_keys = st.sampled_from(
    [
        "metadata",
        "ref",
        "name",
        "version",
        "url",
        "description",
        "specs",
        "capabilities",
        "callbacks",
        "streaming",
        "input",
        "output",
        "config",
        "properties",
        "enum",
        "default",
        "type",
        "title",
        "interrupts",
        "interrupt_type",
        "interrupt_payload",
        "resume_payload",
        "thread_state",
        "extensions",
        "data",
        "acp",
        "deployment",
        "locators",
        "authors",
        "schema_version",
        "x",
    ]
)
agntcy_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.sampled_from(
        [
            "org.a.b",
            "Bad Name",
            "runtime/manifest",
            "oasf.agntcy.org/feature/runtime/manifest",
            "source-code",
            "string",
            "boolean",
            "x",
        ]
    )
)
agntcy_docs = st.dictionaries(
    agntcy_keys,
    st.recursive(
        agntcy_leaf,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(agntcy_keys, inner, max_size=4),
        max_leaves=20,
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(agntcy_docs)
def test_agntcy_shaped_documents_never_crash(doc: dict[str, Any]) -> None:
    _check(json.dumps(doc), True)
