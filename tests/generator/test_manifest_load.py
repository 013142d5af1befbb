"""Loading manifests: positions of nodes in YAML and JSON, located syntax errors, and
the two AGNTCY shapes read into contract 3 with positions pointing at the original nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from generator.errors import AgentgenError
from generator.manifest import agntcy
from generator.manifest.load import load_manifest, parse_manifest_text
from generator.manifest.positions import parse_text

YAML_TEXT = """\
name: echo
version: '0.1.0'
interrupts:
  - name: approval
    payload: {schema: {type: object}}
errors: [{code: 7, name: Bad}]
"""

JSON_TEXT = """{
  "name": "echo",
  "errors": [
    {"code": 7,
     "name": "Bad"}
  ]
}"""


def test_yaml_positions_of_values_and_keys() -> None:
    parsed = parse_text(YAML_TEXT, source="a.yaml", as_json=False)
    assert parsed.positions["/name"] == (1, 7)
    assert parsed.key_positions["/name"] == (1, 1)
    assert parsed.positions["/interrupts/0"] == (4, 5)
    assert parsed.positions["/interrupts/0/name"] == (4, 11)
    assert parsed.positions["/interrupts/0/payload/schema/type"] == (5, 30)
    assert parsed.key_positions["/interrupts/0/payload"] == (5, 5)
    assert parsed.positions["/errors/0/code"] == (6, 17)


def test_json_positions_of_values_and_keys() -> None:
    parsed = parse_text(JSON_TEXT, source="a.json", as_json=True)
    assert parsed.value == json.loads(JSON_TEXT)
    assert parsed.positions[""] == (1, 1)
    assert parsed.positions["/name"] == (2, 11)
    assert parsed.key_positions["/errors"] == (3, 3)
    assert parsed.positions["/errors/0"] == (4, 5)
    assert parsed.positions["/errors/0/name"] == (5, 14)


def test_pointer_tokens_are_escaped() -> None:
    parsed = parse_text('{"a/b": {"c~d": 1}}', source="x.json", as_json=True)
    assert parsed.positions["/a~1b/c~0d"] == (1, 17)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(json_values, st.sampled_from([None, 1, "\t"]))
def test_json_parser_agrees_with_json_module(value: object, indent: int | str | None) -> None:
    text = json.dumps(value, indent=indent)
    assert parse_text(text, source="x.json", as_json=True).value == json.loads(text)


@pytest.mark.parametrize(
    ("text", "as_json", "where", "needle"),
    [
        ('{"a": 1,\n "a": 2}', True, (2, 2), "duplicate key 'a'"),
        ('{"a": [1, 2,]}', True, (1, 13), "trailing comma"),
        ('{"a": NaN}', True, (1, 7), "expected a JSON value"),
        ('{"a": 1} x', True, (1, 10), "unexpected text"),
        ('{"a": "\x01"}', True, (1, 8), "bad string"),
        ("a: 1\nb: [1\n", False, (2, 4), "the file ends inside it"),  # at the `[`
        ("a: 1\n  b: 2\n", False, (2, 4), "YAML syntax error"),
        ("a:\n  b: 1\n  b: 2\n", False, (3, 3), "duplicate key 'b'"),
        ("? {a: 1}\n: x\n", False, (1, 3), "mapping keys must be strings"),
        ("a: !!binary aGk=\n", False, (1, 4), "unsupported YAML tag"),
        ("- 1\n", False, (1, 1), "must be a mapping, not a list"),
        ("just text\n", False, (1, 1), "must be a mapping, not a str scalar"),
    ],
)
def test_syntax_errors_are_located(
    text: str, as_json: bool, where: tuple[int, int], needle: str
) -> None:
    with pytest.raises(AgentgenError) as info:
        parse_manifest_text(text, source="m", as_json=as_json)
    assert (info.value.line, info.value.col) == where
    assert needle in info.value.message
    assert str(info.value).startswith(f"m:{where[0]}:{where[1]}: ")


def test_alias_bomb_is_refused() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8)]
    with pytest.raises(AgentgenError, match="alias expansion"):
        parse_manifest_text("\n".join(lines) + "\n", source="bomb.yaml", as_json=False)


def test_merge_keys_and_dates() -> None:
    text = "base: &b {x: 1, y: 2}\nname: n\nversion: 2024-01-31\nm:\n  <<: *b\n  y: 3\n"
    loaded = parse_manifest_text(text, source="m.yaml", as_json=False)
    assert loaded.data["m"] == {"x": 1, "y": 3}
    assert loaded.data["version"] == "2024-01-31"  # a date stays the text written
    assert loaded.positions["/m/y"] == (6, 6)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(AgentgenError, match="file not found"):
        load_manifest(tmp_path / "nope.yaml")
    with pytest.raises(AgentgenError, match="is a directory"):
        load_manifest(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: caf\xc3\n")
    with pytest.raises(AgentgenError, match="not UTF-8") as info:
        load_manifest(bad)
    assert (info.value.line, info.value.col) == (1, 10)


# ---- AGNTCY shapes ------------------------------------------------------------------


def _line_of(path: Path, pos: tuple[int, int]) -> str:
    line, col = pos
    return path.read_text().splitlines()[line - 1][col - 1 :]


def test_acp_descriptor(shared_agntcy: Path) -> None:
    path = shared_agntcy / "acp-spec_mailcomposer_descriptor.json"
    raw = json.loads(path.read_text())
    m = load_manifest(path)
    assert m.shape == agntcy.DESCRIPTOR
    d = m.data
    assert (d["name"], d["version"]) == ("mailcomposer", raw["metadata"]["ref"]["version"])
    assert d["description"] == raw["metadata"]["description"]
    assert d["links"] == {"homepage": raw["metadata"]["ref"]["url"]}
    assert d["input"] == raw["specs"]["input"] and d["output"] == raw["specs"]["output"]
    assert d["config"]["schema"] == raw["specs"]["config"]
    assert d["config"]["options"] == [
        {"id": "style", "type": "choice", "values": ["formal", "friendly"]}
    ]
    assert d["output_modes"] == {"sync": True, "async": {"callback": True}}
    (interrupt,) = d["interrupts"]
    theirs = raw["specs"]["interrupts"][0]
    assert interrupt["name"] == theirs["interrupt_type"]
    assert interrupt["payload"] == {"schema": theirs["interrupt_payload"]}
    assert interrupt["resume"] == {"schema": theirs["resume_payload"]}
    # positions point into the original file, pointers map back to its spelling
    assert _line_of(path, m.positions["/interrupts/0/name"]).startswith('"mail_send_approval"')
    assert m.file_pointer("/interrupts/0/resume/schema/required") == (
        "/specs/interrupts/0/resume_payload/required"
    )
    assert _line_of(path, m.position("/name")).startswith('"org.agntcy.mailcomposer"')
    assert any("read as 'mailcomposer'" in n for n in m.notes)
    assert any("thread_state" in n for n in m.notes)
    assert any("no LLM providers" in n for n in m.notes)


def test_oasf_record(shared_agntcy: Path) -> None:
    path = shared_agntcy / "sdk_echo-agent-manifest.json"
    raw = json.loads(path.read_text())
    acp = raw["extensions"][0]["data"]["acp"]
    m = load_manifest(path)
    assert m.shape == agntcy.OASF
    d = m.data
    assert (d["name"], d["version"], d["authors"]) == ("echo-agent", "0.1.0", ["Cisco Systems"])
    assert d["links"] == {"repository": raw["locators"][0]["url"]}
    assert d["input"] == acp["input"] and d["config"]["schema"] == acp["config"]
    options = {o["id"]: o for o in d["config"]["options"]}
    assert options["log_level"]["values"] == acp["config"]["properties"]["log_level"]["enum"]
    assert options["to_upper"] == {
        "id": "to_upper",
        "type": "boolean",
        "name": "to_upper",
        "description": acp["config"]["properties"]["to_upper"]["description"],
        "default": False,
    }
    assert d["output_modes"] == {"sync": True}
    assert [i["name"] for i in d["interrupts"]] == ["echo_interrupt"]
    assert _line_of(path, m.position("/config/options/4/default")).startswith('"warning"')
    assert any("deployment" in n for n in m.notes)


def test_agntcy_names_are_converted() -> None:
    assert agntcy.agent_name("org.agntcy.echo_agent") == "echo-agent"
    assert agntcy.agent_name("Mail Composer") == "mail-composer"
    assert agntcy.agent_name("com.example.3d") == "agent-3d"
    assert agntcy.interrupt_name("Mail-Send Approval") == "mail_send_approval"


def test_newer_oasf_extension_name_and_yaml() -> None:
    text = """\
name: acme.Summarizer
version: 2.0.0
schema_version: 0.5.0
locators: [{type: docker-image, url: 'ghcr.io/acme/sum:2'}]
extensions:
  - name: schema.oasf.agntcy.org/features/runtime/manifest
    data:
      acp:
        capabilities: {streaming: {values: true}}
        interrupts:
          - interrupt_type: Needs Input
            interrupt_payload: {type: object}
            resume_payload: {type: string}
"""
    m = parse_manifest_text(text, source="r.yaml", as_json=False)
    assert m.shape == agntcy.OASF
    assert m.data["name"] == "summarizer"
    assert m.data["output_modes"] == {"sync": True, "streaming": True}
    assert m.data["interrupts"][0]["name"] == "needs_input"
    assert m.positions["/interrupts/0/name"] == (11, 29)
    assert any("docker-image" in n for n in m.notes)


@pytest.mark.parametrize(
    ("text", "as_json", "where"),
    [
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", False, (1, 204)),  # ruamel recursion
        ("a: " + "[" * 250 + "]" * 250 + "\n", False, (1, 204)),
        ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", True, (1, 207)),
    ],
)
def test_deep_nesting_is_located(text: str, as_json: bool, where: tuple[int, int]) -> None:
    with pytest.raises(AgentgenError, match="nesting deeper than") as info:
        parse_manifest_text(text, source="deep", as_json=as_json)
    assert (info.value.line, info.value.col) == where
