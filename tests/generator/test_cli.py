"""CLI conventions: --version, -h, completion, usage lines without Typer artifacts, the
choices of --role/--transport in the help, summaries and next steps, and terminal output
that is styled only for a terminal (NO_COLOR, pipes)."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scaffold_support import fake_pipeline, store, write_fake_schema  # noqa: F401 - fixtures
from typer.testing import CliRunner

from generator import console
from generator.cli import app

VERBS = ["methods", "models", "diff", "validate", "new", "regen", "check", "update"]
CASES = Path(__file__).resolve().parents[1] / "cases" / "manifests"
ANSI = re.compile(r"\x1b\[")


def test_version() -> None:
    from importlib.metadata import version

    for flag in ("--version", "-V"):
        res = CliRunner().invoke(app, [flag])
        assert res.exit_code == 0
        assert res.stdout.startswith(f"agentgen {version('acp-agentgen')}; default protocol")


@pytest.mark.parametrize("verb", [None, *VERBS])
def test_short_help_and_clean_usage(verb: str | None) -> None:
    args = [verb, "-h"] if verb else ["-h"]
    res = CliRunner().invoke(app, args, prog_name="agentgen")
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("Usage: agentgen")
    for artifact in ("{", "<path>", "<list[", "<str>"):
        assert artifact not in res.stdout, (artifact, res.stdout)


def test_usage_lines_and_choices() -> None:
    runner = CliRunner()

    def run(*args: str) -> str:
        return runner.invoke(app, list(args), prog_name="agentgen").stdout

    assert "Usage: agentgen new [OPTIONS] DIR\n" in run("new", "-h")
    assert "Usage: agentgen validate [OPTIONS] FILE...\n" in run("validate", "-h")
    assert "[OPTIONS] [SCHEMA]\n" in run("models", "-h")
    text = run("new", "-h")
    assert "--role <agent|client>" in text and "--transport <stdio|http>" in text
    res = runner.invoke(app, ["new", "x", "-m", "a.yaml", "--role", "robot"])
    assert res.exit_code == 2 and "robot" in res.stderr


def test_completion_is_offered() -> None:
    text = CliRunner().invoke(app, ["-h"]).stdout
    assert "--install-completion" in text and "--show-completion" in text


def test_validate_says_so_on_success_and_on_failure() -> None:
    good = str(CASES / "valid-minimal" / "agent.yaml")
    bad = str(CASES / "bad-name" / "agent.yaml")
    cmd = [sys.executable, "-m", "agentgen", "validate"]
    ok = subprocess.run([*cmd, good, good], capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and ok.stdout == "" and ok.stderr == "2 manifests valid\n"
    no = subprocess.run([*cmd, good, bad], capture_output=True, text=True, check=False)
    assert no.returncode == 1
    assert no.stderr.splitlines()[-1] == "1 problem in 1 of 2 manifests"
    assert not ANSI.search(ok.stderr + no.stdout + no.stderr)  # a pipe: plain text


@pytest.mark.usefixtures("fake_pipeline", "store")
def test_new_prints_next_steps(tmp_path: Path) -> None:
    manifest = tmp_path / "agent.yaml"
    manifest.write_text("name: research-agent\nversion: 0.1.0\n", encoding="utf-8")
    schema = write_fake_schema(tmp_path / "s.json", {"initialize": ["A", "B"]}, {})
    target = tmp_path / "proj"
    res = CliRunner().invoke(
        app, ["new", str(target), "-m", str(manifest), "--schema", str(schema)]
    )
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == f"created agent project research-agent (stdio) in {target}"
    assert lines[1].startswith("git: ")  # a repository with its first commit, or why not
    assert lines[2] == "next:" and lines[3] == f"  cd {target}"
    assert any(line.strip().startswith("research-agent ") for line in lines)
    assert any("research_agent/handlers.py" in line for line in lines)
    assert any(line.startswith("  agentgen inspect -- research-agent ") for line in lines)


@pytest.mark.usefixtures("fake_pipeline", "store")
def test_new_says_what_a_client_folder_installs_as(tmp_path: Path) -> None:
    """Issue 29 item 9: a client made in `http-client` from the `http-agent` manifest
    installs as `http-agent-client`; the output names that, and says to make a venv first."""
    manifest = tmp_path / "agent.yaml"
    manifest.write_text("name: http-agent\nversion: 0.1.0\n", encoding="utf-8")
    schema = write_fake_schema(tmp_path / "s.json", {"initialize": ["A", "B"]}, {})
    target = tmp_path / "http-client"
    res = CliRunner().invoke(
        app,
        ["new", str(target), "-m", str(manifest), "--schema", str(schema), "--role", "client"],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == f"created client project http-agent-client (stdio) in {target}"
    venv = lines.index(
        "  python -m venv .venv && . .venv/bin/activate   # an environment of its own"
    )
    assert lines[venv + 1].startswith('  python -m pip install -e ".[test]"')
    assert "installs http-agent-client" in lines[venv + 1]
    assert "package http_agent_client" in lines[venv + 1]
    project = (target / "pyproject.toml").read_text(encoding="utf-8")
    assert 'name = "http-agent-client"' in project
    assert (target / "http_agent_client" / "handlers.py").is_file()


def test_new_says_what_is_wrong_with_the_manifest_path(tmp_path: Path) -> None:
    """Issue 18 item 13: a directory, a symlink loop, an unreadable file (EIO here, what
    root gets too), a missing file: one line each, naming the path and the problem."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    cases = {
        str(tmp_path / "dir"): "is a directory, not a manifest file",
        str(tmp_path / "loop1"): "cannot read the manifest: Too many levels of symbolic links",
        "/proc/self/mem": "cannot read the file: Input/output error",
        str(tmp_path / "missing.yaml"): "manifest not found",
    }
    cmd = [str(Path(sys.executable).parent / "agentgen"), "new", str(tmp_path / "p")]
    for path, problem in cases.items():
        res = subprocess.run(
            [*cmd, "--manifest", path], capture_output=True, text=True, check=False
        )
        assert res.returncode == 2, res
        assert res.stderr.splitlines() == [f"agentgen: error: {path}: {problem}"], res.stderr


# ---- terminal output ------------------------------------------------------------------


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_styling_only_for_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    report = "  BREAKING  method-removed   x\n           field-added      y\n"
    pipe, tty = io.StringIO(), Tty()
    console.lines(report, pipe, marks=("BREAKING",))
    console.lines(report, tty, marks=("BREAKING",))
    assert pipe.getvalue() == report
    assert ANSI.search(tty.getvalue()) and "BREAKING" in tty.getvalue()
    assert ANSI.sub("", re.sub(r"\x1b\[[0-9;]*m", "", tty.getvalue())) == report
    monkeypatch.setenv("NO_COLOR", "1")
    plain = Tty()
    console.lines(report, plain, marks=("BREAKING",))
    assert plain.getvalue() == report


def test_a_table_fits_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "60")
    head = ("method", "params", "result")
    rows = [("session/set_config_option", "SetSessionConfigOptionRequest", "X" * 50)] * 3
    plain = "plain\n"
    pipe, tty = io.StringIO(), Tty()
    console.table(head, rows, plain, pipe)
    console.table(head, rows, plain, tty)
    assert pipe.getvalue() == plain
    text = re.sub(r"\x1b\[[0-9;]*m", "", tty.getvalue())
    assert max(len(line) for line in text.splitlines()) <= 60
    assert text.count("X") == 150 and "…" not in text  # wrapped, never cut


def test_progress_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    pipe, tty = io.StringIO(), Tty()
    with console.status("fetching npm:x@1#y", pipe):
        pass
    with console.status("fetching npm:x@1#y", tty):
        pass
    assert pipe.getvalue() == ""
    assert "fetching npm:x@1#y" in tty.getvalue()


def test_help_stays_fast_to_import() -> None:
    """`agentgen --help` must not import rich (about 0.1 s of start-up)."""
    code = (
        "import sys; sys.argv = ['agentgen', '--help']\n"
        "from agentgen.entry import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "assert 'rich' not in sys.modules, 'rich imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
