"""Schema checking: every upstream revision passes; each broken schema of the corpus in
tests/cases/schema_errors/<case>/ (input.json + expected.txt, `{source}` standing for the
input's path) fails with exactly its expected one-line message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from expected_support import expected
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from generator import sources
from generator.cli import app
from generator.errors import AgentgenError
from generator.protocol.diff import diff_schemas, format_text
from generator.protocol.methods import method_table
from generator.protocol.schema import check_schema, resolve_pointer

CASES = Path(__file__).resolve().parents[1] / "cases" / "schema_errors"
CASE_NAMES = sorted(p.name for p in CASES.iterdir() if p.is_dir())
UPSTREAM = ["legacy/schema.json", "v1/schema.json", "v1/schema.unstable.json", "v2/schema.json"]


def test_the_corpus_is_there() -> None:
    assert len(CASE_NAMES) >= 10
    for name in CASE_NAMES:
        assert (CASES / name / "input.json").is_file(), name
        assert (CASES / name / "expected.txt").is_file(), name


@pytest.mark.parametrize("name", CASE_NAMES)
def test_broken_schema(name: str) -> None:
    path = str(CASES / name / "input.json")
    with pytest.raises(AgentgenError) as err:
        sources.load_schema(path)
    got = str(err.value).replace(path, "{source}")
    assert got == expected(CASES / name / "expected.txt", got, line=True)
    assert err.value.source == path
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["not_json", "dangling_ref", "array"])
def test_cli_prints_one_line_and_exits_2(name: str) -> None:
    path = str(CASES / name / "input.json")
    for argv in (["methods", path], ["diff", path, path]):
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 2, res.output
        assert res.stdout == ""
        lines = res.stderr.splitlines()
        assert len(lines) == 1, res.stderr
        assert lines[0].startswith(f"agentgen: error: {path}")
        assert "Traceback" not in res.output


@pytest.mark.parametrize("rel", UPSTREAM)
def test_upstream_schemas_pass(shared_acp: Path, rel: str) -> None:
    raw = (shared_acp / rel).read_bytes()
    checked = check_schema(raw, rel)
    assert checked == json.loads(raw)
    # parsed JSON is accepted as well
    assert check_schema(json.loads(raw), rel) is not None


def test_definitions_key_and_escaped_refs() -> None:
    schema = {
        "definitions": {
            "a/b": {"type": "string"},
            "with space": {"type": "integer"},
            "C": {
                "properties": {
                    "x": {"$ref": "#/definitions/a~1b"},
                    "y": {"$ref": "#/definitions/with%20space"},
                    "$ref": {"type": "string"},  # a property named $ref is a name, not a ref
                },
                "const": {"$ref": "not a reference, just data"},
                "enum": [{"$ref": 1}],
            },
            "Root": {"$ref": "#"},
        }
    }
    assert check_schema(schema, "mem") is schema


def test_dangling_ref_in_a_definitions_schema() -> None:
    with pytest.raises(AgentgenError) as err:
        check_schema({"definitions": {"A": {"$ref": "#/definitions/B"}}}, "mem")
    assert err.value.pointer == "/definitions/A/$ref"
    assert "missing definition" in err.value.message


def test_resolve_pointer() -> None:
    doc = {"a": [{"b~/c": 1}]}
    assert resolve_pointer(doc, "") == (True, doc)
    assert resolve_pointer(doc, "/a/0/b~0~1c") == (True, 1)
    assert resolve_pointer(doc, "/a/1") == (False, None)
    assert resolve_pointer(doc, "a") == (False, None)


_NAMES = st.sampled_from(["A", "B", "PromptResponse", "x/y"])
_KEYS = st.sampled_from(
    [
        "type", "properties", "required", "anyOf", "oneOf", "allOf", "items", "enum", "const",
        "x-method", "x-side", "title", "$ref", "default",
    ]
)  # fmt: skip
_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.text(max_size=3),
    _NAMES.map(lambda n: {"$ref": f"#/$defs/{n}"}),
)
_JSON = st.recursive(
    _LEAF,
    lambda ch: st.one_of(
        st.lists(ch, max_size=3), st.dictionaries(st.one_of(_KEYS, _NAMES), ch, max_size=4)
    ),
    max_leaves=20,
)
_DEFS = st.dictionaries(_NAMES, st.dictionaries(_KEYS, _JSON, max_size=5), min_size=1, max_size=4)


def _checked(defs: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return check_schema({"$defs": defs}, "fuzz")
    except AgentgenError:
        return None


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(_DEFS, _DEFS)
def test_any_input_gives_a_located_error_or_a_usable_schema(
    a: dict[str, Any], b: dict[str, Any]
) -> None:
    """Whatever the JSON, checking raises AgentgenError or returns a schema that the method
    table and the revision report then handle without any other exception."""
    old, new = _checked(a), _checked(b)
    for schema in (old, new):
        if schema is not None:
            try:
                method_table(schema)
            except AgentgenError as err:  # e.g. an unknown x-side: located, one line
                assert err.pointer and err.pointer.endswith("/x-side")
                return
    if old is not None and new is not None:
        format_text(diff_schemas(old, new))
        assert diff_schemas(old, old).entries == []


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_give_a_located_error(raw: bytes) -> None:
    try:
        check_schema(raw, "fuzz")
    except AgentgenError as err:
        assert str(err).startswith("fuzz") and "\n" not in str(err)
