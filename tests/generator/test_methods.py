"""The method table (contract 1) on every upstream revision, checked against the schemas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from generator.cli import app
from generator.errors import AgentgenError
from generator.protocol.methods import Method, method_table, python_name

SCHEMAS = ["legacy/schema.json", "v1/schema.json", "v1/schema.unstable.json", "v2/schema.json"]
SECTIONS = {"agent": "agentMethods", "client": "clientMethods", "protocol": "protocolMethods"}


def _load(shared_acp: Path, rel: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((shared_acp / rel).read_text(encoding="utf-8"))
    return data


def _refs_under(node: Any) -> set[str]:
    text = json.dumps(node)
    out: set[str] = set()
    marker = '"$ref": "#/$defs/'
    start = text.find(marker)
    while start >= 0:
        end = text.index('"', start + len(marker))
        out.add(text[start + len(marker) : end])
        start = text.find(marker, end)
    return out


def _tagged(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in schema["$defs"].items() if "x-method" in v}


def _sides(node: dict[str, Any]) -> list[str]:
    return ["agent", "client"] if node["x-side"] == "both" else [node["x-side"]]


def _meta_from(schema: dict[str, Any]) -> dict[str, dict[str, str]]:
    """A meta table (python name -> wire name per side) read off a schema's x-method /
    x-side tags: upstream publishes meta.json in its repository, not on npm."""
    meta: dict[str, dict[str, str]] = {}
    for node in _tagged(schema).values():
        for side in _sides(node):
            if side in SECTIONS:
                meta.setdefault(SECTIONS[side], {})[python_name(node["x-method"])] = node[
                    "x-method"
                ]
    return meta


@pytest.mark.parametrize("rel", SCHEMAS)
def test_every_tagged_method_is_listed_with_the_right_kind(shared_acp: Path, rel: str) -> None:
    schema = _load(shared_acp, rel)
    defs = schema["$defs"]
    # every side's response envelope (newer revisions add `ProxyResponse`)
    results: set[str] = set()
    for side in {s for node in _tagged(schema).values() for s in _sides(node)}:
        results |= _refs_under(defs.get(f"{side.capitalize()}Response", {}))
    table = method_table(schema)
    expected: dict[tuple[str, str], str] = {}
    for name, node in _tagged(schema).items():
        for side in _sides(node):
            key = (side, node["x-method"])
            if name in results:
                expected[key] = "request"
            else:
                expected.setdefault(key, "notification")
    assert {(m.side, m.name): m.kind for m in table.methods} == expected
    for m in table.methods:
        assert (m.result is None) == (m.kind == "notification"), m
        assert m.params is not None and m.params in defs, m
        assert defs[m.params]["x-method"] == m.name
        if m.result is not None:
            assert defs[m.result]["x-method"] == m.name
        assert m.attr.isidentifier()
    # sorted by (side, name), one entry per (side, name)
    keys = [(m.side, m.name) for m in table.methods]
    assert keys == sorted(set(keys))


@pytest.mark.parametrize("rel", SCHEMAS)
def test_meta_tables_agree_with_the_schema(shared_acp: Path, rel: str) -> None:
    """A meta table naming every tagged method changes no name and no side."""
    schema = _load(shared_acp, rel)
    meta = _meta_from(schema)
    table = method_table(schema, meta)
    bare = method_table(schema)
    for section, side in {v: k for k, v in SECTIONS.items()}.items():
        for attr, wire in meta.get(section, {}).items():
            m = next(x for x in table.for_side(side) if x.name == wire)
            assert m.attr == attr
    assert table == bare


def test_v1_unstable_providers_are_unstable_agent_requests(shared_acp: Path) -> None:
    table = method_table(_load(shared_acp, "v1/schema.unstable.json"))
    for name in ("providers/list", "providers/set", "providers/disable"):
        m = table.get(name)
        assert m is not None, name
        assert (m.side, m.kind, m.unstable) == ("agent", "request", True)
        assert m.attr == name.replace("/", "_")
    prompt = table.get("session/prompt")
    assert prompt is not None and not prompt.unstable
    # the stable schema has none of them
    stable = method_table(_load(shared_acp, "v1/schema.json"))
    assert stable.get("providers/list") is None


def test_stable_meta_marks_methods_it_does_not_list_unstable(shared_acp: Path) -> None:
    """The stable revision's method list, as a meta table over the unstable schema: what it
    does not list is unstable."""
    schema = _load(shared_acp, "v1/schema.unstable.json")
    meta = _meta_from(_load(shared_acp, "v1/schema.json"))
    listed = {w for sec in meta.values() for w in sec.values()}
    table = method_table(schema, meta)
    unlisted = [m for m in table.methods if m.name not in listed]
    assert unlisted, "the unstable schema adds methods to the stable one"
    for m in unlisted:
        assert m.unstable, m.name
    providers = table.get("providers/list")
    assert providers is not None and providers.unstable


def test_v2_prompt_result_has_no_stop_reason(shared_acp: Path) -> None:
    v1 = _load(shared_acp, "v1/schema.json")
    v2 = _load(shared_acp, "v2/schema.json")
    for schema, has_stop in ((v1, True), (v2, False)):
        m = method_table(schema).get("session/prompt")
        assert m is not None and m.result is not None
        props = schema["$defs"][m.result].get("properties", {})
        assert ("stopReason" in props) is has_stop


def test_protocol_side_and_both_sides(shared_acp: Path) -> None:
    table = method_table(_load(shared_acp, "v1/schema.unstable.json"))
    cancel = [m for m in table.methods if m.name == "$/cancel_request"]
    assert [(m.side, m.kind, m.attr) for m in cancel] == [
        ("protocol", "notification", "cancel_request")
    ]


def test_both_sides_one_entry_per_side_request_wins() -> None:
    """x-side "both" (older upstream revisions tagged `mcp/message` so; the npm releases
    locked for the tests no longer do): one entry per side, the request form wins."""
    schema = {
        "$defs": {
            "Response": {"properties": {"id": {}, "result": {"$ref": "#/$defs/McpReply"}}},
            "Request": {
                "properties": {"id": {}, "method": {}, "params": {"$ref": "#/$defs/McpParams"}}
            },
            "Note": {"properties": {"method": {}, "params": {"$ref": "#/$defs/McpNote"}}},
            "McpParams": {"x-method": "mcp/message", "x-side": "both"},
            "McpReply": {"x-method": "mcp/message", "x-side": "both"},
            "McpNote": {"x-method": "mcp/message", "x-side": "both"},
        }
    }
    mcp = method_table(schema).methods
    assert sorted(m.side for m in mcp) == ["agent", "client"]
    assert {m.kind for m in mcp} == {"request"}


def test_schema_without_unions_falls_back_on_result_definitions() -> None:
    schema = {
        "$defs": {
            "PingParams": {"x-method": "ping", "x-side": "agent", "type": "object"},
            "PingResponse": {"x-method": "ping", "x-side": "agent", "type": "object"},
            "Tick": {
                "x-method": "_acme/tick",
                "x-side": "client",
                "description": "**UNSTABLE** ticks",
            },
        }
    }
    table = method_table(schema)
    assert table.methods == (
        Method("ping", "agent", "request", "PingParams", "PingResponse", False, "ping"),
        Method("_acme/tick", "client", "notification", "Tick", None, True, "ext_acme_tick"),
    )
    assert table.for_side("client") == (table.methods[1],)


def test_meta_only_methods_and_bad_meta() -> None:
    table = method_table({"$defs": {}}, {"agentMethods": {"do_it": "do/it"}})
    assert [(m.name, m.attr, m.params) for m in table.methods] == [("do/it", "do_it", None)]
    with pytest.raises(AgentgenError) as err:
        method_table({"$defs": {}}, {"agentMethods": ["x"]})
    assert err.value.pointer == "/agentMethods"


@pytest.mark.parametrize(
    ("wire", "attr"),
    [
        ("session/prompt", "session_prompt"),
        ("providers/list", "providers_list"),
        ("document/didOpen", "document_did_open"),
        ("$/cancel_request", "cancel_request"),
        ("_agent/info", "ext_agent_info"),
        ("import", "import_"),
        ("2fa/verify", "m_2fa_verify"),
        ("getHTTPThing", "get_http_thing"),
    ],
)
def test_python_name(wire: str, attr: str) -> None:
    assert python_name(wire) == attr


def test_duplicate_python_names_stay_distinct() -> None:
    schema = {
        "$defs": {
            "A": {"x-method": "a/b_c", "x-side": "agent"},
            "B": {"x-method": "a/bC", "x-side": "agent"},
        }
    }
    attrs = [m.attr for m in method_table(schema).methods]
    assert len(set(attrs)) == 2


def test_cli_methods_table_and_json(shared_acp: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    path = str(shared_acp / "v1/schema.unstable.json")
    res = runner.invoke(app, ["methods", path, "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    by = {(r["side"], r["name"]): r for r in rows}
    assert by[("agent", "providers/set")]["unstable"] is True
    assert by[("agent", "providers/set")]["kind"] == "request"
    assert set(rows[0]) == {
        "name", "side", "kind", "params", "result", "unstable", "attr", "params_fields", "result_fields",
    }  # fmt: skip
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps(_meta_from(_load(shared_acp, "v1/schema.json"))))
    res = runner.invoke(app, ["methods", path, "--meta", str(meta)])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.stdout.splitlines() if x.startswith("providers/disable "))
    assert line.split()[1:4] == ["agent", "request", "DisableProviderRequest"]
    assert "unstable" in line.split()
    res = runner.invoke(app, ["methods", path, "--format", "yaml"])
    assert res.exit_code == 2 and "Traceback" not in res.output


@pytest.mark.parametrize("rel", ["v1/schema.json", "v2/schema.json"])
def test_cli_shows_the_prompt_result_fields(shared_acp: Path, rel: str) -> None:
    """`agentgen methods` shows each result's wire fields: v2's prompt answer has no stopReason."""
    schema = _load(shared_acp, rel)
    expected = sorted(schema["$defs"]["PromptResponse"]["properties"])
    res = CliRunner().invoke(app, ["methods", str(shared_acp / rel), "--format", "json"])
    assert res.exit_code == 0, res.output
    prompt = next(r for r in json.loads(res.stdout) if r["name"] == "session/prompt")
    assert prompt["result_fields"] == expected
    assert ("stopReason" in prompt["result_fields"]) is (rel == "v1/schema.json")
    res = CliRunner().invoke(app, ["methods", str(shared_acp / rel)])
    line = next(x for x in res.stdout.splitlines() if x.startswith("session/prompt "))
    assert line.endswith(", ".join(expected))


def test_side_from_the_message_unions_when_x_side_is_missing() -> None:
    union = {"properties": {"params": {"anyOf": [{"$ref": "#/$defs/Ping"}]}}}
    schema = {
        "$defs": {
            "ClientNotification": union,
            "AgentNotification": {"properties": {"params": {"$ref": "#/$defs/Pong"}}},
            "Ping": {"x-method": "ping"},
            "Pong": {"x-method": "pong"},
        }
    }
    table = method_table(schema)
    assert [(m.name, m.side, m.kind) for m in table.methods] == [
        ("ping", "agent", "notification"),
        ("pong", "client", "notification"),
    ]


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"x-method": "ping", "x-side": "Server Side"}, "x-side 'Server Side' is not a side name"),
        ({"x-method": "ping", "x-side": 5}, "x-side 5 is not a side name"),
        ({"x-method": "ping"}, "x-method without x-side"),
    ],
)
def test_bad_sides_are_located(node: dict[str, Any], message: str) -> None:
    with pytest.raises(AgentgenError) as err:
        method_table({"$defs": {"A/b": node}})
    assert message in err.value.message
    assert err.value.pointer == "/$defs/A~1b/x-side"


def test_cli_names_the_file_of_a_bad_side(tmp_path: Path, shared_acp: Path) -> None:
    bad = tmp_path / "schema.json"
    bad.write_text(json.dumps({"$defs": {"Ping": {"x-method": "ping", "x-side": "Server"}}}))
    runner = CliRunner()
    for argv in (["methods", str(bad)], ["diff", str(shared_acp / "v1/schema.json"), str(bad)]):
        res = runner.invoke(app, argv)
        assert res.exit_code == 2
        assert res.stderr.strip() == (
            f"agentgen: error: {bad}: /$defs/Ping/x-side: x-side 'Server' is not a side name"
            " (expected agent, client, protocol, both, or another lowercase name)"
        )


def test_a_side_a_newer_revision_adds_is_kept() -> None:
    """A new side (upstream's `proxy`) with its own envelopes: kinds from the envelopes."""
    env = {
        "ProxyRequest": {"properties": {"id": {}, "method": {}, "params": {"$ref": "#/$defs/Hop"}}},
        "ProxyResponse": {
            "anyOf": [{"properties": {"id": {}, "result": {"$ref": "#/$defs/HopReply"}}}]
        },
        "ProxyNotification": {"properties": {"method": {}, "params": {"$ref": "#/$defs/Hopped"}}},
        "Hop": {"x-method": "proxy/hop", "x-side": "proxy"},
        "HopReply": {"x-method": "proxy/hop", "x-side": "proxy"},
        "Hopped": {"x-method": "proxy/hopped", "x-side": "proxy"},
    }
    table = method_table({"$defs": env})
    assert [(m.side, m.name, m.kind, m.params, m.result) for m in table.methods] == [
        ("proxy", "proxy/hop", "request", "Hop", "HopReply"),
        ("proxy", "proxy/hopped", "notification", "Hopped", None),
    ]
    assert table.for_side("agent") == ()
