"""Units of the semantic checks, and the flattened 2020-12 metaschema giving the same
verdicts as the full one."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from generator.manifest import semantics


def _verdicts(validator: Any, schema: Any) -> set[tuple[tuple[Any, ...], str]]:
    return {(tuple(e.absolute_path), e.message) for e in validator.iter_errors(schema)}


FULL = Draft202012Validator(Draft202012Validator.META_SCHEMA)
FLAT_SCHEMA = semantics.flat_metaschema()
assert FLAT_SCHEMA is not None
FLAT = Draft202012Validator(FLAT_SCHEMA)

KEYWORDS = [
    "type",
    "properties",
    "items",
    "prefixItems",
    "$defs",
    "definitions",
    "required",
    "enum",
    "const",
    "minLength",
    "maximum",
    "anyOf",
    "allOf",
    "not",
    "if",
    "then",
    "additionalProperties",
    "patternProperties",
    "dependentSchemas",
    "dependencies",
    "$ref",
    "$anchor",
    "$recursiveRef",
    "contentSchema",
    "unevaluatedItems",
    "format",
    "x-custom",
]
values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["object", "x", "#"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from([*KEYWORDS, "a", "b"]), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYWORDS), values, max_size=5))
def test_flat_metaschema_agrees_with_the_full_one(schema: dict[str, Any]) -> None:
    assert _verdicts(FLAT, schema) == _verdicts(FULL, schema)


def test_flat_metaschema_on_known_bad_schemas() -> None:
    bad = [
        {"type": "objekt", "minLength": -1},
        {"$defs": {"a": {"items": [1]}}},
        {"properties": []},
        {"$recursiveRef": 5},
        {"dependencies": {"a": 5}},
        {"$anchor": "1bad"},
    ]
    for schema in bad:
        assert _verdicts(FLAT, schema) == _verdicts(FULL, schema) != set()


@pytest.mark.parametrize(
    ("ref", "ok"),
    [
        ("#", True),
        ("#/$defs/A", True),
        ("#/$defs/A/properties/x~1y", True),
        ("#/$defs/A/properties/x%7E1y", True),
        ("#/$defs/B", False),
        ("#name", True),
        ("#other", False),
    ],
)
def test_local_refs(ref: str, ok: bool) -> None:
    schema = {
        "$defs": {"A": {"properties": {"x/y": {"$anchor": "name"}}}},
        "properties": {"r": {"$ref": ref}},
    }
    problems = list(semantics.refs("/input", schema))
    assert (problems == []) is ok
    if not ok:
        assert problems[0][0] == "/input/properties/r/$ref"


def test_reachability_follows_next_and_default_self_loops() -> None:
    data = {
        "states": {
            "initial": "a",
            "states": {
                "a": [{"party": "client", "type": "user_message", "next": "b"}],
                "b": [
                    {"party": "agent", "type": "interrupt"},
                    {"party": "client", "type": "resume", "next": "c"},
                ],
                "c": [],
                "d": [{"party": "client", "type": "cancel", "next": "a"}],
            },
        }
    }
    problems = list(semantics.states(data))
    assert problems == [
        ("/states/states/d", "state 'd' is not reachable from the initial state 'a'", True)
    ]


def test_checks_skip_wrong_shapes() -> None:
    weird: dict[str, Any] = {
        "errors": "x",
        "interrupts": [1, None],
        "providers": {"id": "a"},
        "states": {
            "initial": "a",
            "states": {"a": [{"party": [], "type": "cancel"}, {"party": [], "type": "cancel"}]},
        },
        "config": {"options": "x", "schema": []},
        "input": 5,
    }
    assert list(semantics.semantic_problems(weird)) == []


leaf = (
    st.none()
    | st.booleans()
    | st.integers(-33000, 33000)
    | st.sampled_from(["idle", "a", "client", "cancel", "#", "#/$defs/A", "choice", "openai"])
)
junk = st.recursive(
    leaf,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "id",
                    "name",
                    "code",
                    "type",
                    "party",
                    "next",
                    "default",
                    "values",
                    "schema",
                    "properties",
                    "$ref",
                    "$defs",
                    "A",
                    "supported",
                    "api_type",
                    "initial",
                    "states",
                    "options",
                    "payload",
                    "resume",
                    "data",
                    "idle",
                    "a",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=15,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            ["errors", "interrupts", "providers", "states", "config", "input", "output"]
        ),
        junk,
        max_size=5,
    )
)
def test_semantic_checks_never_raise(data: dict[str, Any]) -> None:
    for pointer, message, at_key in semantics.semantic_problems(data):
        assert pointer.startswith("/") and message and isinstance(at_key, bool)
