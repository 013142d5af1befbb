"""The normalisation passes, one small schema each (the upstream schemas: test_models)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from generator.errors import AgentgenError
from generator.protocol import normalize as nz


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{name}"}


def _tagged(prop: str, value: str, base: str | None = None, **props: Any) -> dict[str, Any]:
    member: dict[str, Any] = {
        "type": "object",
        "properties": {prop: {"type": "string", "const": value}, **props},
        "required": [prop],
    }
    if base:
        member["allOf"] = [_ref(base)]
    return member


def test_pascal() -> None:
    assert nz.pascal("agent_message_chunk") == "AgentMessageChunk"
    assert nz.pascal("searchAndReplace") == "SearchAndReplace"
    assert nz.pascal("utf-16") == "Utf16"
    assert nz.pascal("_vendor/thing") == "VendorThing"
    assert nz.pascal("2fa") == "V2fa"


def test_variant_name_rule() -> None:
    assert nz.variant_name("AgentMessageChunk", "SessionUpdate", set()) == "AgentMessageChunk"
    assert nz.variant_name("Text", "ContentBlock", set()) == "TextContentBlock"
    taken = {"ToolCall"}
    assert nz.variant_name("ToolCall", "SessionUpdate", taken) == "ToolCallSessionUpdate"
    taken |= {"ToolCallSessionUpdate"}
    assert nz.variant_name("ToolCall", "SessionUpdate", taken) == "SessionUpdateToolCall"


def test_every_pass_says_what_and_why() -> None:
    assert len(nz.PASSES) >= 5
    for step in nz.PASSES:
        assert step.__doc__ and len(step.__doc__.split()) >= 15, step.__name__


def test_normalize_copies_and_rejects_non_schemas() -> None:
    schema = {"$defs": {"A": {"type": "integer", "format": "uint8"}}}
    before = copy.deepcopy(schema)
    out = nz.normalize(schema)
    assert schema == before
    assert out["$defs"]["A"] == {"type": "integer", "minimum": 0, "maximum": 255}
    for bad in ({}, {"$defs": []}, [], "x"):
        with pytest.raises(AgentgenError):
            nz.normalize(bad)  # type: ignore[arg-type]


def test_root_union_is_dropped() -> None:
    out = nz.keep_definitions_only({"title": "P", "anyOf": [{"type": "object"}], "$defs": {}})
    assert out == {"title": "P", "$defs": {}}
    # the document's class never takes a definition's name (which would then be numbered)
    taken = nz.keep_definitions_only({"title": "Agent Client", "$defs": {"AgentClient": {}}})
    assert taken["title"] == "AgentClientDocument"


def test_integer_formats_become_ranges() -> None:
    schema = {
        "$defs": {
            "A": {"type": "integer", "format": "int64"},
            "B": {"type": "integer", "format": "uint32", "minimum": 1},
            "C": {"type": "integer", "format": "uint16", "const": 7},
            "D": {"type": "integer", "format": "uint7"},
            "E": {"type": "object", "properties": {"format": {"type": "string"}}},
        }
    }
    out = nz.bound_integer_formats(schema)["$defs"]
    assert (out["A"]["minimum"], out["A"]["maximum"]) == (-(2**63), 2**63 - 1)
    assert (out["B"]["minimum"], out["B"]["maximum"]) == (1, 2**32 - 1)
    assert out["C"] == {"type": "integer", "const": 7}
    assert out["D"]["format"] == "uint7"  # not a width we know: left alone
    assert out["E"]["properties"] == {"format": {"type": "string"}}  # a property *named* format


def test_variants_are_named_and_shared_properties_distributed() -> None:
    schema = {
        "$defs": {
            "Chunk": {"type": "object", "properties": {"text": {"type": "string"}}},
            "Plan": {"type": "object", "properties": {"steps": {"type": "array"}}},
            "Update": {
                "oneOf": [_tagged("kind", "agent_chunk", "Chunk"), _tagged("kind", "plan", "Plan")],
                "discriminator": {"propertyName": "kind"},
            },
            "Option": {
                "type": "object",
                "properties": {"id": {"type": "string"}},
                "required": ["id"],
                "oneOf": [
                    _tagged("type", "select"),
                    {
                        "title": "other",
                        "type": "object",
                        "properties": {"type": {"type": "string"}},
                        "required": ["type"],
                    },
                ],
            },
        }
    }
    defs = nz.name_union_variants(schema)["$defs"]
    assert defs["Update"]["oneOf"] == [_ref("AgentChunk"), _ref("PlanUpdate")]
    assert defs["AgentChunk"]["allOf"] == [_ref("Chunk")]
    assert defs["Option"] == {"oneOf": [_ref("SelectOption"), _ref("OtherOption")]}
    assert defs["SelectOption"]["required"] == ["id", "type"]
    assert set(defs["OtherOption"]["properties"]) == {"id", "type"}


def test_tagged_unions_are_opened() -> None:
    schema = {
        "$defs": {
            "A": _tagged("kind", "a"),
            "B": _tagged("kind", "b"),
            "U": {"oneOf": [_ref("A"), _ref("B")], "discriminator": {"propertyName": "kind"}},
            "Free": {
                "type": "object",
                "properties": {"kind": {"type": "string"}},
                "not": {"anyOf": [_tagged("kind", "a")]},
            },
            "V": {"anyOf": [_ref("A"), _ref("Free")]},
            "Same": {"anyOf": [_ref("A"), _ref("A")]},
            "Mixed": {"anyOf": [_ref("A"), {"type": "string"}]},
        }
    }
    defs = nz.open_tagged_unions(schema)["$defs"]
    assert defs["U"]["oneOf"][-1] == _ref("OtherU")
    assert "discriminator" not in defs["U"]
    other = defs["OtherU"]
    assert other["properties"]["kind"][nz.REFUSED_TAGS] == ["a", "b"]
    assert other["additionalProperties"] is True
    assert defs["U"][nz.TAGGED_UNION] == {
        "property": "kind",
        "tags": {"a": "A", "b": "B"},
        "other": "OtherU",
        "default": None,
    }
    # an upstream catch-all is kept, refuses the known tags, loses its `not`
    assert defs["V"]["anyOf"] == [_ref("A"), _ref("Free")]
    assert defs["Free"]["properties"]["kind"][nz.REFUSED_TAGS] == ["a"]
    assert "not" not in defs["Free"]
    # not a tagged union: one value twice, or a scalar member
    assert nz.TAGGED_UNION not in defs["Same"] and nz.TAGGED_UNION not in defs["Mixed"]


def test_untagged_alternatives_merge_into_one_object() -> None:
    schema = {
        "$defs": {
            "InSession": {
                "type": "object",
                "properties": {"sessionId": {"type": "string"}},
                "required": ["sessionId"],
            },
            "InRequest": {
                "type": "object",
                "properties": {"requestId": {"type": "string"}},
                "required": ["requestId"],
            },
            "Form": {
                "type": "object",
                "properties": {"schema": {"type": "object"}},
                "required": ["schema"],
                "anyOf": [_ref("InSession"), _ref("InRequest")],
            },
        }
    }
    form = nz.merge_untagged_alternatives(schema)["$defs"]["Form"]
    assert "anyOf" not in form
    assert set(form["properties"]) == {"schema", "sessionId", "requestId"}
    assert form["required"] == ["schema"]


def test_tag_distributes_over_a_union_base() -> None:
    schema = {
        "$defs": {
            "Running": _tagged("state", "running"),
            "Idle": _tagged("state", "idle"),
            "State": {"anyOf": [_ref("Running"), _ref("Idle")]},
            "Update": {"anyOf": [_tagged("u", "state_update", "State"), _tagged("u", "chunk")]},
        }
    }
    out = schema
    for step in (
        nz.name_union_variants,
        nz.open_tagged_unions,
        nz.distribute_tags_over_union_bases,
    ):
        out = step(out)
    defs = out["$defs"]
    assert defs["StateUpdate"]["anyOf"] == [
        _ref("RunningUpdate"),
        _ref("IdleUpdate"),
        _ref("OtherStateUpdate"),
    ]
    assert defs["Update"]["anyOf"][0] == _ref("StateUpdate")
    assert defs["OtherStateUpdate"]["allOf"] == [_ref("OtherState")]
    assert defs["RunningUpdate"]["allOf"] == [_ref("Running")]
    assert defs["RunningUpdate"]["properties"]["u"]["const"] == "state_update"
    assert defs["StateUpdate"][nz.TAGGED_UNION] == {
        "property": "state",
        "tags": {"running": "RunningUpdate", "idle": "IdleUpdate"},
        "other": "OtherStateUpdate",
        "default": None,
    }


def test_model_defaults_move_into_descriptions() -> None:
    schema = {
        "$defs": {
            "Caps": {"type": "object"},
            "Init": {
                "type": "object",
                "properties": {
                    "caps": {
                        "description": "Caps.",
                        "default": {"a": True},
                        "allOf": [_ref("Caps")],
                    },
                    "n": {"type": "integer", "default": 3},
                },
            },
        }
    }
    props = nz.describe_model_defaults(schema)["$defs"]["Init"]["properties"]
    assert "default" not in props["caps"] and '{"a": true}' in props["caps"]["description"]
    assert props["n"]["default"] == 3


def test_keywords_are_not_confused_with_property_names() -> None:
    schema = {
        "$defs": {
            "A": {
                "type": "object",
                "properties": {"not": {"type": "string"}},
                "not": {"required": ["x"]},
            }
        }
    }
    a = nz.drop_validation_only_keywords(schema)["$defs"]["A"]
    assert a == {"type": "object", "properties": {"not": {"type": "string"}}}


@pytest.mark.parametrize("rel", ["legacy/schema.json", "v1/schema.unstable.json", "v2/schema.json"])
def test_normalize_is_idempotent_on_upstream(shared_acp: Path, rel: str) -> None:
    schema = json.loads((shared_acp / rel).read_text())
    once = nz.normalize(schema)
    assert nz.normalize(once) == once


def test_draft07_definitions_are_read() -> None:
    schema = {
        "definitions": {
            "A": {"type": "object", "properties": {"b": {"$ref": "#/definitions/B"}}},
            "B": {"type": "string"},
        }
    }
    out = nz.normalize(schema)
    assert "definitions" not in out
    assert out["$defs"]["A"]["properties"]["b"] == {"$ref": "#/$defs/B"}


def test_self_referencing_unions_do_not_loop() -> None:
    from generator.protocol.models import generate_models

    schema = {
        "$defs": {
            "A": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "string"}]},
            "B": {"anyOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]},
            "C": {"oneOf": [{"$ref": "#/$defs/C"}]},
        }
    }
    out = nz.normalize(schema)
    assert nz.TAGGED_UNION not in out["$defs"]["B"]
    try:
        generate_models(schema)
    except AgentgenError:
        pass  # a located error is fine; a RecursionError traceback is not


def test_look_alikes_leave_descriptions_and_titles_only() -> None:
    """Issue 37 item 10: typographic marks ruff takes for ASCII (RUF001/RUF002) become that
    ASCII in descriptions and titles; letters and an em dash stay; wire values do not move."""
    schema = {
        "$defs": {
            "A": {
                "title": "A\u2019s",
                "description": "isn\u2019t\u00a0a\u2013b \u2014 caf\u00e9 \u201cq\u201d",
                "type": "string",
                "enum": ["it\u2019s"],
                "default": "it\u2019s",
            },
            "B": {"const": "x\u2013y", "description": "\u2018one\u2019\u2009\u00d7\u20092"},
        }
    }
    out = nz.ascii_look_alikes_in_text(copy.deepcopy(schema))
    assert out["$defs"]["A"]["title"] == "A's"
    assert out["$defs"]["A"]["description"] == "isn't a-b \u2014 caf\u00e9 \u201cq\u201d"
    assert (
        out["$defs"]["A"]["enum"] == ["it\u2019s"] and out["$defs"]["A"]["default"] == "it\u2019s"
    )
    assert out["$defs"]["B"] == {"const": "x\u2013y", "description": "'one' x 2"}
