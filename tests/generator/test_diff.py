"""The revision report: its breaking entries checked against facts read from the schemas."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from generator.cli import app
from generator.protocol.diff import Change, Report, diff_schemas, format_json, format_text

PAIRS = [
    ("legacy/schema.json", "v1/schema.json"),
    ("v1/schema.json", "v2/schema.json"),
    ("v2/schema.json", "v2-2.4.0/schema.json"),  # the v2 draft, npm 2.0.0 -> 2.4.0
]
BREAKING_KINDS = {"method-removed", "type-removed", "field-removed", "field-required"}
NEVER_BREAKING = {
    "method-added",
    "type-added",
    "type-renamed",
    "field-optional",
    "variant-added",
    "value-added",
}


def _load(shared_acp: Path, rel: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((shared_acp / rel).read_text(encoding="utf-8"))
    return data


def _wire_methods(schema: dict[str, Any]) -> set[tuple[str, str]]:
    out = set()
    for node in schema["$defs"].values():
        if "x-method" in node:
            sides = ["agent", "client"] if node["x-side"] == "both" else [node["x-side"]]
            out |= {(side, node["x-method"]) for side in sides}
    return out


def _entries(report: Report, kind: str) -> dict[str, Change]:
    return {c.subject: c for c in report.entries if c.kind == kind}


@pytest.fixture(scope="module")
def reports(
    shared_acp: Path,
) -> dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any], Report]]:
    out = {}
    for old_rel, new_rel in PAIRS:
        old, new = _load(shared_acp, old_rel), _load(shared_acp, new_rel)
        out[(old_rel, new_rel)] = (old, new, diff_schemas(old, new))
    return out


@pytest.mark.parametrize("pair", PAIRS)
def test_removed_and_added_methods(reports: dict[Any, Any], pair: tuple[str, str]) -> None:
    old, new, report = reports[pair]
    gone = {w for _, w in _wire_methods(old)} - {w for _, w in _wire_methods(new)}
    came = {w for _, w in _wire_methods(new)} - {w for _, w in _wire_methods(old)}
    removed, added = _entries(report, "method-removed"), _entries(report, "method-added")
    assert set(removed) == gone
    assert set(added) == came
    assert all(c.breaking for c in removed.values())
    assert not any(c.breaking for c in added.values())
    assert came, "each upstream pair adds methods"


@pytest.mark.parametrize("pair", PAIRS)
def test_field_facts(reports: dict[Any, Any], pair: tuple[str, str]) -> None:
    """Every property that disappears from a kept definition is a breaking removal; every
    property that appears is an addition, breaking exactly when it is required."""
    old, new, report = reports[pair]
    removed, added = _entries(report, "field-removed"), _entries(report, "field-added")
    od, nd = old["$defs"], new["$defs"]
    checked = 0
    for name in sorted(od.keys() & nd.keys()):
        op, np_ = od[name].get("properties"), nd[name].get("properties")
        if not isinstance(op, dict) or not isinstance(np_, dict):
            continue
        for prop in op.keys() - np_.keys():
            entry = removed[f"{name}.{prop}"]
            assert entry.breaking
            checked += 1
        required = set(nd[name].get("required") or [])
        for prop in np_.keys() - op.keys():
            entry = added[f"{name}.{prop}"]
            assert entry.breaking == (prop in required), entry
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("pair", PAIRS)
def test_removed_types_are_removed_or_renamed(
    reports: dict[Any, Any], pair: tuple[str, str]
) -> None:
    old, new, report = reports[pair]
    gone = old["$defs"].keys() - new["$defs"].keys()
    removed, renamed = _entries(report, "type-removed"), _entries(report, "type-renamed")
    assert set(removed) | set(renamed) == gone
    assert not set(removed) & set(renamed)
    for subject, c in renamed.items():
        target = c.detail.split("renamed to ", 1)[1].split(" ", 1)[0]
        assert target in new["$defs"] and target not in old["$defs"], (subject, target)
    added = _entries(report, "type-added")
    assert set(added) == new["$defs"].keys() - old["$defs"].keys() - {
        c.detail.split("renamed to ", 1)[1].split(" ", 1)[0] for c in renamed.values()
    }


@pytest.mark.parametrize("pair", PAIRS)
def test_breaking_marks_follow_the_rules(reports: dict[Any, Any], pair: tuple[str, str]) -> None:
    _, _, report = reports[pair]
    for c in report.entries:
        if c.kind in BREAKING_KINDS:
            assert c.breaking, c
        if c.kind in NEVER_BREAKING:
            assert not c.breaking, c
    assert report.breaking == any(c.breaking for c in report.entries)


def test_v1_to_v2_prompt_lifecycle(shared_acp: Path, reports: dict[Any, Any]) -> None:
    old, new, report = reports[("v1/schema.json", "v2/schema.json")]
    assert "stopReason" in old["$defs"]["PromptResponse"]["properties"]
    assert "stopReason" not in new["$defs"]["PromptResponse"]["properties"]
    entry = _entries(report, "field-removed")["PromptResponse.stopReason"]
    assert entry.breaking
    assert "session/prompt result" in entry.detail
    text = format_text(report)
    for needle in ("session/set_mode", "authenticate", "stopReason"):
        assert needle in text
    # a renamed-but-identical params type is a rename, not a removal
    cancel = _entries(report, "type-renamed")
    assert cancel["CancelNotification"].detail.startswith("renamed to CancelSessionNotification")


def test_report_is_deterministic(shared_acp: Path) -> None:
    old, new = _load(shared_acp, "v1/schema.json"), _load(shared_acp, "v2/schema.json")
    first = format_text(diff_schemas(old, new))
    shuffled_old = dict(old, **{"$defs": dict(reversed(list(old["$defs"].items())))})
    shuffled_new = dict(new, **{"$defs": dict(reversed(list(new["$defs"].items())))})
    assert format_text(diff_schemas(shuffled_old, shuffled_new)) == first
    assert format_json(diff_schemas(old, new)) == format_json(diff_schemas(old, new))


@pytest.mark.parametrize("rel", ["legacy/schema.json", "v1/schema.unstable.json", "v2/schema.json"])
def test_same_schema_no_changes(shared_acp: Path, rel: str) -> None:
    schema = _load(shared_acp, rel)
    report = diff_schemas(schema, schema)
    assert report.entries == [] and not report.breaking
    assert "No differences" in format_text(report)


def _schema(defs: dict[str, Any]) -> dict[str, Any]:
    return {"$defs": defs}


def test_synthetic_rules() -> None:
    old = _schema(
        {
            "Ping": {
                "x-method": "ping",
                "x-side": "agent",
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "mode": {"enum": ["a", "b"]},
                    "count": {"type": "integer"},
                    "opt": {"type": "string"},
                    "note": {"type": "string"},
                },
                "required": ["name", "count", "note"],
            },
            "PingReply": {
                "x-method": "ping",
                "x-side": "agent",
                "type": "object",
                "properties": {},
            },
            "SessionLabel": {"type": "object", "properties": {"text": {"type": "string"}}},
        }
    )
    new = _schema(
        {
            "Ping": {
                "x-method": "ping",
                "x-side": "agent",
                "type": "object",
                "properties": {
                    "name": {"type": ["string", "null"]},
                    "mode": {"enum": ["a", "c"]},
                    "count": {"type": "string"},
                    "opt": {"type": "string"},
                    "note": {"type": "string"},
                    "extra": {"type": "boolean"},
                },
                "required": ["name", "count", "opt"],
            },
            "PingReply": {
                "x-method": "ping",
                "x-side": "agent",
                "type": "object",
                "properties": {},
            },
            "SessionTitleLabel": {"type": "object", "properties": {"text": {"type": "string"}}},
        }
    )
    report = diff_schemas(old, new)
    got = {(c.kind, c.subject, c.breaking) for c in report.entries}
    assert ("field-retyped", "Ping.name", False) in got  # widened to accept null
    assert ("field-retyped", "Ping.count", True) in got  # integer -> string
    assert ("value-removed", "Ping.mode", True) in got
    assert ("value-added", "Ping.mode", False) in got
    assert ("field-required", "Ping.opt", True) in got
    assert ("field-optional", "Ping.note", False) in got
    assert ("field-added", "Ping.extra", False) in got
    assert ("type-renamed", "SessionLabel", False) in got
    assert not any(c.kind == "type-removed" for c in report.entries)
    # a trivially shaped definition with an unrelated name is not a rename
    report = diff_schemas(
        _schema({"SessionModeId": {"type": "string"}}),
        _schema({"AbsolutePath": {"type": "string"}}),
    )
    assert {(c.kind, c.subject) for c in report.entries} == {
        ("type-removed", "SessionModeId"),
        ("type-added", "AbsolutePath"),
    }


def test_method_kind_and_side_changes() -> None:
    old = _schema(
        {
            "A": {"x-method": "a", "x-side": "agent"},
            "AResponse": {"x-method": "a", "x-side": "agent"},
            "B": {"x-method": "b", "x-side": "agent"},
        }
    )
    new = _schema(
        {"A": {"x-method": "a", "x-side": "agent"}, "B": {"x-method": "b", "x-side": "client"}}
    )
    got = {(c.kind, c.subject, c.breaking) for c in diff_schemas(old, new).entries}
    assert ("method-changed", "a", True) in got  # request -> notification
    assert ("method-changed", "b", True) in got  # handled by the other side now


def test_json_format_and_cli(shared_acp: Path) -> None:
    old, new = str(shared_acp / "v1/schema.json"), str(shared_acp / "v2/schema.json")
    runner = CliRunner()
    res = runner.invoke(app, ["diff", old, new, "--format", "json"])
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    assert body["breaking"] is True
    raw_old = (shared_acp / "v1/schema.json").read_bytes()
    assert body["old"] == f"{old} (sha256 {hashlib.sha256(raw_old).hexdigest()[:12]})"
    assert body["new"].startswith(new)
    assert body["counts"]["breaking"] == sum(e["breaking"] for e in body["entries"])
    assert {"kind", "subject", "detail", "breaking"} == set(body["entries"][0])
    res = runner.invoke(app, ["diff", old, new])
    assert res.exit_code == 0
    assert res.stdout.splitlines()[0].startswith("Protocol revision report:")
    assert "BREAKING  method-removed   session/set_mode" in res.stdout
    res = runner.invoke(app, ["diff", old, new, "--format", "xml"])
    assert res.exit_code == 2 and "Traceback" not in res.output


def _update_tags(schema: dict[str, Any]) -> set[str]:
    node = schema["$defs"]["SessionUpdate"]
    members = node.get("oneOf") or node.get("anyOf")
    out = set()
    for m in members:
        const = m.get("properties", {}).get("sessionUpdate", {}).get("const")
        if const is not None:
            out.add(const)
    return out


@pytest.mark.parametrize("pair", PAIRS)
def test_session_update_variants(reports: dict[Any, Any], pair: tuple[str, str]) -> None:
    """Union variants are keyed by their tag, whether the union is a oneOf or an anyOf."""
    old, new, report = reports[pair]
    gone, came = _update_tags(old) - _update_tags(new), _update_tags(new) - _update_tags(old)
    entries = [c for c in report.entries if c.subject == "SessionUpdate"]
    removed = {c.detail.split()[1] for c in entries if c.kind == "variant-removed"}
    added = {c.detail.split()[1] for c in entries if c.kind == "variant-added"}
    assert removed == {f"sessionUpdate={t}" for t in gone}
    assert {f"sessionUpdate={t}" for t in came} <= added
    assert all(c.breaking == (c.kind == "variant-removed") for c in entries)
    if pair[1] == "v2/schema.json":
        assert {"user_message", "state_update"} <= came


def test_same_meaning_spelled_differently_is_no_change() -> None:
    old = _schema({"Role": {"type": "string", "enum": ["assistant", "user"]}})
    new = _schema(
        {
            "Role": {
                "oneOf": [
                    {"type": "string", "const": "assistant", "description": "the model"},
                    {"type": "string", "const": "user", "x-docs": "the human"},
                ]
            }
        }
    )
    assert diff_schemas(old, new).entries == []
    newer = _schema({"Role": {"anyOf": [{"const": "assistant"}, {"const": "system"}]}})
    got = {(c.kind, c.detail, c.breaking) for c in diff_schemas(new, newer).entries}
    assert got == {
        ("value-removed", 'value "user" removed', True),
        ("value-added", 'value "system" added', False),
    }


@pytest.mark.parametrize("pair", [*PAIRS, ("v1/schema.json", "v2-2.4.0/schema.json")])
def test_no_retype_reads_the_same_type_on_both_sides(
    shared_acp: Path, reports: dict[Any, Any], pair: tuple[str, str]
) -> None:
    """`TerminalExitStatus.exitCode: type integer | null -> integer | null` was marked
    BREAKING (v1 -> v2 of npm 2.4.0): a retype names what differs, and one that only
    widens a value constraint (uint32 -> int64, minimum 0 dropped) is not breaking."""
    if pair in reports:
        _, _, report = reports[pair]
    else:
        report = diff_schemas(_load(shared_acp, pair[0]), _load(shared_acp, pair[1]))
    for c in report.entries:
        if c.kind == "field-retyped" and " -> " in c.detail.split(":")[0]:
            was, now = c.detail.split(":")[0].removeprefix("type ").split(" -> ", 1)
            assert was != now, c
    if pair == ("v1/schema.json", "v2-2.4.0/schema.json"):
        exit_code = _entries(report, "field-retyped")["TerminalExitStatus.exitCode"]
        assert not exit_code.breaking, exit_code
        assert 'format "uint32" -> "int64", minimum 0 removed' in exit_code.detail
        size = _entries(report, "field-retyped")["ResourceLink.size"]  # int64 -> uint64
        assert size.breaking and 'format "int64" -> "uint64", minimum 0 added' in size.detail


def test_a_reference_made_nullable_widens_though_its_definition_changed() -> None:
    """`auth: AgentAuthCapabilities` (with a default) -> `AgentAuthCapabilities | null`: the
    definition's own changes are entries of their own; the field only widened."""
    caps = {"type": "object", "properties": {"a": {"type": "string"}}}
    old = _schema(
        {
            "Caps": caps,
            "Init": {
                "type": "object",
                "properties": {"auth": {"default": {}, "allOf": [{"$ref": "#/$defs/Caps"}]}},
            },
        }
    )
    new_caps = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    new = _schema(
        {
            "Caps": new_caps,
            "Init": {
                "type": "object",
                "properties": {"auth": {"anyOf": [{"$ref": "#/$defs/Caps"}, {"type": "null"}]}},
            },
        }
    )
    got = {c.subject: c for c in diff_schemas(old, new).entries}
    assert not got["Init.auth"].breaking, got
    assert got["Init.auth"].detail.startswith("type Caps -> Caps | null: widened")
