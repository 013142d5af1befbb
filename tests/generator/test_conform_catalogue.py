"""The conformance kit's records: the catalogue per revision (gates computed from the
revision description), the verdict rule, the registry of checks against it, and the JUnit
report read back by a parser."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conform_support import make_judges

from generator.conform import agent_checks  # noqa: F401 - registers the checks
from generator.conform.catalogue import SPECS, Requirement, catalogue
from generator.conform.client_checks import JUDGED
from generator.conform.engine import CHECKS
from generator.conform.observers import OBSERVED
from generator.conform.report import junit, text, to_json
from generator.conform.schema_link import Judge
from generator.conform.transcript import Transcript
from generator.conform.verdict import Outcome, Result, Run, Status, Tier


@pytest.fixture(scope="module")
def judges(shared_acp: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Judge]:
    return make_judges(shared_acp, tmp_path_factory)


def _rows(judge: Judge) -> dict[str, Requirement]:
    return {r.id: r for r in catalogue(judge.revision, batches=judge.batches)}


def test_gates_come_from_the_revision_description(judges: dict[int, Judge]) -> None:
    """v1: the session surface is baseline (mandatory), resume gated by its own
    sessionCapabilities field; v2: the whole surface gated by `capabilities.session`,
    delete by its own marker -- none of it spelled per version in the catalogue."""
    v1, v2 = _rows(judges[1]), _rows(judges[2])
    assert (v1["ACP-SESSION-001"].tier, v1["ACP-SESSION-001"].capability) == (Tier.MANDATORY, None)
    assert v1["ACP-RESUME-001"].capability == "agentCapabilities.sessionCapabilities.resume"
    assert v1["ACP-LOAD-001"].capability == "agentCapabilities.loadSession"
    assert (v2["ACP-SESSION-001"].tier, v2["ACP-SESSION-001"].capability) == (
        Tier.CAPABILITY,
        "capabilities.session",
    )
    assert v2["ACP-RESUME-001"].capability == "capabilities.session"
    assert v2["ACP-DELETE-001"].capability == "capabilities.session.delete"
    assert v2["ACP-PROMPTCAP-001"].capability == "capabilities.session.prompt.image"
    # what a revision lacks is not asked of it
    assert "ACP-LOAD-001" not in v2 and "ACP-CLIENTCAP-001" not in v2 and "ACP-BATCH-201" not in v1
    assert "ACP-PROMPT-001" in v1 and "ACP-PROMPT-201" in v2 and "ACP-PROMPT-201" not in v1
    assert judges[2].batches and not judges[1].batches


def test_what_only_a_willing_client_shows_stays_out_of_mandatory(judges: dict[int, Judge]) -> None:
    """The cancel's `cancelled` answer (AGENTGEN-CLIENT-006: only a client that cancels on
    the kit's SIGINT shows it) and the list cursor (AGENTGEN-CLIENT-013: only a client that
    lists sessions) are capability requirements on both revisions: SKIPPED or NOT_TESTED
    never decides the verdict, a FAIL does; each cites its revision's docs."""
    for v, judge in judges.items():
        rows = {r.id: r for r in catalogue(judge.revision, role="client", batches=judge.batches)}
        for rid, page in (
            ("AGENTGEN-CLIENT-006", "prompt-"),
            ("AGENTGEN-CLIENT-013", "session-list"),
        ):
            assert rows[rid].tier == Tier.CAPABILITY, (v, rid)
            assert (rows[rid].capability or "").startswith("inferred:"), (v, rid)
            assert f"docs/protocol/v{v}/{page}" in rows[rid].citation, (v, rid)


def test_every_row_is_cited_and_unique(judges: dict[int, Judge]) -> None:
    cite = re.compile(
        r"(docs/protocol/v[12]/[\w-]+\.mdx:[\d,-]+ @ b7f0005|#/\$defs|\(the docs are silent\))"
    )
    for judge in judges.values():
        rows = catalogue(judge.revision, batches=judge.batches)
        assert len({r.id for r in rows}) == len(rows)
        for r in rows:
            assert cite.search(r.citation), (r.id, r.citation)
            assert r.text.endswith((".", ")")), r.id
            assert r.id.startswith(("ACP-", "AGENTGEN-")), r.id


def test_every_requirement_has_a_check_and_every_check_a_requirement() -> None:
    """The checks name only ids the catalogue has, and every id is proven by a check or
    an observer (the official kit's registry rule)."""
    named = {i for c in CHECKS for i in c.ids} | set(OBSERVED) | set(JUDGED)
    assert named <= {s.id for s in SPECS}, named - {s.id for s in SPECS}
    assert {s.id for s in SPECS} <= named, {s.id for s in SPECS} - named


def _result(rid: str, tier: Tier, *statuses: Status) -> Result:
    transcript = Transcript()
    transcript.add(
        "out", b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":65535}}'
    )
    transcript.add("in", b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":65535}}')
    r = Result(rid, tier, None, "a requirement.", "docs/x.mdx:1 @ b7f0005", 1)
    r.outcomes = [Outcome(rid, s, "check", f"{s.value} because", transcript, 0.1) for s in statuses]
    return r


def _run(*results: Result, blocked: tuple[str, ...] = ()) -> Run:
    return Run(1, "agent", "agent-cmd", "stdio", "schema.json", list(results), list(blocked))


@pytest.mark.parametrize(
    ("tier", "statuses", "conformant"),
    [
        (Tier.MANDATORY, (Status.PASS,), True),
        (Tier.MANDATORY, (Status.SKIPPED,), True),  # skipped (e.g. a cancel not exercised)
        (Tier.MANDATORY, (), False),  # NOT_TESTED counts against
        (Tier.MANDATORY, (Status.PASS, Status.FAIL), False),  # the worst outcome decides
        (Tier.CAPABILITY, (Status.SKIPPED,), True),  # not advertised
        (Tier.CAPABILITY, (), True),
        (Tier.CAPABILITY, (Status.FAIL,), False),  # advertised and broken
        (Tier.ADVISORY, (Status.FAIL,), True),
        (Tier.INFORMATIONAL, (Status.FAIL,), True),
    ],
)
def test_the_verdict_rule(tier: Tier, statuses: tuple[Status, ...], conformant: bool) -> None:
    assert _run(_result("ACP-X-001", tier, *statuses)).conformant is conformant


def test_a_blocked_run_is_not_conformant() -> None:
    run = _run(
        _result("ACP-X-001", Tier.MANDATORY, Status.PASS), blocked=("VERSION-MISMATCH: answered 1",)
    )
    assert not run.conformant
    assert "VERSION-MISMATCH" in text([run])


def test_junit_read_back_by_a_parser(tmp_path: Path) -> None:
    """One testcase per requirement; a FAIL (and a mandatory NOT_TESTED) is a failure
    carrying the check's transcript, SKIPPED a skip; the counts add up."""
    run = _run(
        _result("ACP-INIT-003", Tier.MANDATORY, Status.FAIL),
        _result("ACP-INIT-001", Tier.MANDATORY, Status.PASS),
        _result("ACP-LOAD-001", Tier.CAPABILITY, Status.SKIPPED),
        _result("ACP-EXT-001", Tier.MANDATORY),
    )
    path = tmp_path / "report.xml"
    path.write_bytes(junit([run]))
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites" and root.get("failures") == "2"
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "2", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    failure = cases["ACP-INIT-003"].find("failure")
    assert failure is not None and failure.get("message") == "FAIL because"
    assert "<< " in (failure.text or "") and '"protocolVersion":65535' in (failure.text or "")
    assert (
        cases["ACP-INIT-001"].find("failure") is None
        and cases["ACP-INIT-001"].find("skipped") is None
    )
    assert cases["ACP-LOAD-001"].find("skipped") is not None
    missing = cases["ACP-EXT-001"].find("failure")
    assert missing is not None and missing.get("message") == "no check ran it"
    props = {p.get("name"): p.get("value") for p in cases["ACP-INIT-003"].iter("property")}
    assert props["tier"] == "mandatory" and props["citation"].endswith("@ b7f0005")
    shown = to_json([run])
    assert shown["conformant"] is False
    assert shown["runs"][0]["requirements"][0]["outcomes"][0]["transcript"][1]["direction"] == "in"


def test_conform_list_shows_every_role_and_transport(
    shared_acp: Path,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`agentgen conform list --json`: the agent's (stdio, HTTP, WebSocket) and the
    client's requirements of each revision, each with its citation."""
    import json

    from generator.conform import run_conform_list

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    schemas = [
        str(shared_acp / "v1" / "schema.unstable.json"),
        str(shared_acp / "v2" / "schema.json"),
    ]
    assert run_conform_list("both", schemas, json_out=True) == 0
    rows = json.loads(capsys.readouterr().out)
    kinds = {(r["protocol"], r["role"], r["transport"]) for r in rows}
    assert {
        (1, "agent", "stdio"),
        (2, "agent", "http"),
        (2, "agent", "ws"),
        (1, "client", "any"),
    } <= kinds
    assert all(r["citation"] for r in rows)
    assert {"AGENTGEN-HTTP-002", "AGENTGEN-WS-001", "AGENTGEN-CLIENT-005", "ACP-INIT-003"} <= {
        r["id"] for r in rows
    }
