"""`agentgen validate`: the broken-manifest corpus, output formats, exit codes.

Each folder of tests/cases/manifests/ holds one manifest (agent.yaml or agent.json), the
exact diagnostic lines in expected.txt (paths as given on the command line), and
optionally expected_exit (default 1). Adding a folder adds a case.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from expected_support import expected

from generator.manifest.validate import run_validate, validate_file

CASES = Path(__file__).resolve().parents[1] / "cases" / "manifests"
CASE_DIRS = sorted(p for p in CASES.iterdir() if p.is_dir())


def _manifest(case: Path) -> str:
    (found,) = [p.name for p in case.iterdir() if p.name in ("agent.yaml", "agent.json")]
    return found


def test_corpus_is_large_enough() -> None:
    broken = [c for c in CASE_DIRS if not c.name.startswith("valid-")]
    assert len(broken) >= 30


@pytest.mark.parametrize("case", CASE_DIRS, ids=[c.name for c in CASE_DIRS])
def test_case(
    case: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(case)
    want_exit = (
        int((case / "expected_exit").read_text()) if (case / "expected_exit").exists() else 1
    )
    code = run_validate([_manifest(case)])
    out = capsys.readouterr().out
    assert out == expected(case / "expected.txt", out)
    assert code == want_exit
    if want_exit:
        assert out.strip(), "an invalid manifest must say why"
        for line in out.splitlines():  # every line is located: file:line:col: /pointer: msg
            file, line_no, col, rest = line.split(":", 3)
            assert file == _manifest(case) and int(line_no) >= 1 and int(col) >= 1
            assert rest.startswith(" /")


def test_agntcy_manifests_are_valid(
    shared_agntcy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = sorted(str(p) for p in shared_agntcy.glob("*.json"))
    assert len(files) == 2
    assert run_validate(files) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "has no agent errors" in captured.err  # the notes of what they lack


def test_json_format(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(CASES / "error-code-reserved")
    assert run_validate(["agent.yaml"], fmt="json") == 1
    items = json.loads(capsys.readouterr().out)
    assert [(d["line"], d["col"], d["pointer"]) for d in items] == [
        (4, 12, "/errors/0/code"),
        (5, 12, "/errors/1/code"),
        (7, 12, "/errors/3/code"),
    ]
    assert all(d["file"] == "agent.yaml" and "reserved range" in d["message"] for d in items)


def test_several_files_worst_exit_wins(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(CASES)
    files = ["valid-minimal/agent.yaml", "bad-name/agent.yaml", "missing/agent.yaml"]
    assert run_validate(files) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("bad-name/agent.yaml:1:7: /name: ")
    assert out[1] == "missing/agent.yaml: file not found"
    assert run_validate(files[:2]) == 1
    capsys.readouterr()
    assert run_validate(files[:1]) == 0


def test_validate_file_returns_sorted_diagnostics() -> None:
    diags = validate_file(CASES / "many-errors-sorted" / "agent.yaml")
    lines = [d.line or 0 for d in diags]
    assert lines == sorted(lines)
    assert {d.pointer for d in diags} >= {"/name", "/extra", "/errors/0/code"}


def test_secret_values_are_not_echoed(capsys: pytest.CaptureFixture[str]) -> None:
    run_validate([CASES / "auth-bad" / "agent.yaml"])
    out = capsys.readouterr().out
    assert "sk-live-1234567890abcdef" not in out and "hunter2" not in out
    assert "/auth/1/env" in out


def test_cli_exit_codes_and_no_traceback(tmp_path: Path) -> None:
    """The installed command: exit codes and stderr through the real Typer app."""
    good = CASES / "valid-minimal" / "agent.yaml"
    bad = CASES / "states-unreachable" / "agent.yaml"
    broken = CASES / "yaml-tab-indent" / "agent.yaml"
    cmd = [sys.executable, "-m", "agentgen", "validate"]

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd + args, check=False, capture_output=True, text=True, timeout=60)

    runs = {
        0: [str(good)],
        1: [str(good), str(bad)],
        2: [str(good), "no/such/agent.yaml"],
        -1: [str(broken)],  # a manifest that does not parse is a finding too: 1
    }
    for want, args in runs.items():
        proc = run(args)
        assert proc.returncode == abs(want), proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr
    proc = run(["--format", "json", str(bad)])
    assert proc.returncode == 1
    assert json.loads(proc.stdout)[0]["message"].startswith("state 'waiting' is not reachable")
    proc = run(["--format", "xml", str(good)])
    assert proc.returncode == 2 and "xml" in proc.stderr and "Traceback" not in proc.stderr


def test_inline_local_refs() -> None:
    from generator.manifest.validate import inline_local_refs

    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/A", "description": "d"}},
        "$defs": {"A": {"type": "array", "items": {"$ref": "#/$defs/B"}}, "B": {"type": "string"}},
    }
    assert inline_local_refs(schema) == {
        "type": "object",
        "properties": {"a": {"type": "array", "items": {"type": "string"}, "description": "d"}},
    }
    recursive = {"$defs": {"N": {"items": {"$ref": "#/$defs/N"}}}, "$ref": "#/$defs/N"}
    assert inline_local_refs(recursive) is None
    assert inline_local_refs({"$ref": "https://example.com/s.json"}) is None


def test_examples_validate(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    found = sorted(
        str(p)
        for pattern in ("agent.yaml", "agent.json", "*.agent.yaml")
        for p in (repo / "examples").rglob(pattern)
    )
    assert found, "examples/ holds manifests"
    assert run_validate(found) == 0, capsys.readouterr().out
