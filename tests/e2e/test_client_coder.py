"""The generated client against examples/coder, as a user runs them (issue 16): the
client's installed console script (the golden `echo-client-stdio`), started in a scratch
folder with `--yes`, drives the coder agent over stdio and over HTTP (`--url`); the agent
reads and writes the file through the client's fs and checks that it compiles in a
client terminal, and the file is left edited.  Every frame is schema-checked (ACP_WIRE_CHECK=1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import hardening_support as hs
import pytest
from coder_support import build_coder
from test_client_failures import _run, install_scripts
from test_coder import REVISIONS

pytestmark = pytest.mark.slow  # pip install, console scripts, subprocess agents


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    return install_scripts(tmp_path_factory)


def _work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text("def greet():\n    return 'hello'\n")
    return work


def _client_env(scripts: dict[str, tuple[Path, Path]], agent_env: dict[str, str]) -> dict[str, str]:
    """The client's site (its console script) and the agent's package, both importable."""
    site = scripts["stdio"][1]
    return {
        "PYTHONPATH": os.pathsep.join([str(site), agent_env["PYTHONPATH"]]),
        "ACP_SESSION_DB": agent_env["ACP_SESSION_DB"],
    }


def _drive_coder(
    scripts: dict[str, tuple[Path, Path]], tmp_path: Path, shared_acp: Path, *flags: str
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The client, in a scratch folder, driving the v1 coder over stdio for one edit."""
    schema = json.loads((shared_acp / REVISIONS["v1"]).read_text())
    agent_env = build_coder(tmp_path, schema, "coder_v1")
    work = _work(tmp_path)
    done = _run(
        scripts,
        "stdio",
        *flags,
        "--",
        sys.executable,
        "-m",
        "coder_v1",
        prompts="replace `hello` with `hi` in app.py\n",
        cwd=work,
        timeout=120,
        **_client_env(scripts, agent_env),
    )
    return work, done


def test_the_generated_client_edits_a_file_with_the_coder_agent(
    scripts: dict[str, tuple[Path, Path]], tmp_path: Path, shared_acp: Path
) -> None:
    work, done = _drive_coder(scripts, tmp_path, shared_acp, "--yes")
    assert done.returncode == 0, done.stderr
    assert (work / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    err = done.stderr
    path = str(work / "app.py")
    # the plan, the edit tool call with its diff and location, the permission answered
    # with the agent's allow option, the write through the client, the check in its terminal
    assert "plan" in err.splitlines()
    assert f"(edit) [pending] {path}" in err, err
    assert "-    return 'hello'" in err and "+    return 'hi'" in err
    assert "(allow_once, --yes)" in err
    assert f"the agent writes {path}" in err
    assert "(execute)" in err and f"python: compile {path}" in err
    # compiled without a .pyc: nothing of the check is left in the user's folder
    assert sorted(p.name for p in work.iterdir()) == ["app.py"]
    assert "\x1b[" not in err  # piped: plain lines
    assert done.stdout.strip(), "the turn's one-line summary"


def test_piped_without_yes_the_coder_edit_is_rejected_and_the_file_untouched(
    scripts: dict[str, tuple[Path, Path]], tmp_path: Path, shared_acp: Path
) -> None:
    work, done = _drive_coder(scripts, tmp_path, shared_acp)
    assert done.returncode == 0, done.stderr
    assert (work / "app.py").read_text() == "def greet():\n    return 'hello'\n"
    assert "the agent asks permission: Edit app.py -- declined" in done.stderr, done.stderr
    assert "(edit) [failed]" in done.stderr


def test_the_generated_client_edits_a_file_with_the_coder_agent_over_http(
    scripts: dict[str, tuple[Path, Path]], tmp_path: Path, shared_acp: Path
) -> None:
    schema = json.loads((shared_acp / REVISIONS["v1"]).read_text())
    agent_env = build_coder(tmp_path, schema, "coder_http", transport="http")
    with hs.listening(agent_env, "coder_http", cwd=tmp_path) as agent:
        work = _work(tmp_path)
        done = _run(
            scripts,
            "stdio",  # a client made for stdio speaks HTTP too (--url)
            "--yes",
            "--url",
            agent.url,
            prompts="replace `hello` with `hi` in app.py\n",
            cwd=work,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert (work / "app.py").read_text() == "def greet():\n    return 'hi'\n"
        assert "(allow_once, --yes)" in done.stderr
        assert "(execute)" in done.stderr and "python: compile" in done.stderr
