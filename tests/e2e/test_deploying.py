"""README's "Deploying an HTTP agent" (issue 29 item 8), against the golden HTTP agent
(`generated/projects/echo-agent-http`) run as a process: the curl walk-through runs as
written (only the port changes) and prints what the README shows; SIGTERM ends the agent
with status 0; `--help` names the variables that choose the session store, each one a
variable the runtime reads."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import hardening_support as hs
import pytest

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "generated" / "projects"
HTTP_AGENT = GOLDEN / "echo-agent-http"
SECTION = "## Deploying an HTTP agent"


def _section() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert SECTION in text, f"README has no {SECTION!r} section"
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def _walkthrough() -> tuple[str, str]:
    """The curl block and the output block after it."""
    part = _section().split("### A session with curl", 1)[1]
    script = re.search(r"```sh\n(.*?)\n```", part, re.DOTALL)
    shown = re.search(r"```text\n(.*?)\n```", part, re.DOTALL)
    assert script and shown
    return script.group(1), shown.group(1)


def _env(tmp: Path, root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(root),
        "PYTHONDONTWRITEBYTECODE": "1",
        "ACP_SESSION_DB": str(tmp / "sessions.db"),
    }


@contextlib.contextmanager
def _agent(tmp: Path) -> Iterator[tuple[subprocess.Popen[str], str, list[str]]]:
    """The golden HTTP agent on a free port: the process, `host:port`, its stderr lines."""
    with hs.listening(_env(tmp, HTTP_AGENT), "echo_agent", cwd=tmp) as agent:
        yield agent.proc, agent.where, agent.stderr


def _normalized(text: str) -> str:
    """Ids that differ per run: a connection id (32 hex digits), a session id."""
    return re.sub(r"sess_[0-9a-f]+", "sess_ID", re.sub(r"\b[0-9a-f]{32}\b", "ID", text)).strip()


@pytest.mark.skipif(
    shutil.which("curl") is None, reason="curl is not installed (.ci/run installs it)"
)
def test_the_readme_curl_walkthrough_runs_as_written(tmp_path: Path) -> None:
    script, shown = _walkthrough()
    assert "127.0.0.1:8000" in script
    with _agent(tmp_path) as (proc, where, stderr):
        done = subprocess.run(
            ["bash", "-e", "-c", script.replace("127.0.0.1:8000", where)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert _normalized(done.stdout) == _normalized(shown), done.stdout
        # the section's shutdown: SIGTERM, within the grace, exit status 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, stderr
    # what was acknowledged is in the store the README names (ACP_SESSION_DB here)
    assert (tmp_path / "sessions.db").is_file()


def test_the_walkthrough_shows_every_step_the_issue_names() -> None:
    script, shown = _walkthrough()
    for needed in (
        '"method":"initialize"',
        "Acp-Connection-Id: $CID",
        "Accept: text/event-stream",
        '"method":"session/new"',
        "Acp-Session-Id: $SID",
        '"method":"session/prompt"',
        "-X DELETE",
        "/health",
        "/ready",
    ):
        assert needed in script, needed
    assert '"sessionUpdate":"agent_message_chunk"' in shown
    assert '"stopReason":"end_turn"' in shown


def test_the_section_says_what_holds_for_each_concern() -> None:
    section = _section()
    for concern in ("**TLS**", "**Store**", "**Worker processes**", "**Health**", "**Shutdown**"):
        assert concern in section, concern
    # every flag and variable it names is one the agent has: in its --help or its runtime
    helped = _help(HTTP_AGENT)
    runtime = "\n".join(
        p.read_text(encoding="utf-8")
        for p in (HTTP_AGENT / "echo_agent" / "_generated" / "runtime").rglob("*.py")
    )
    absent = set(re.findall(r"no `(--[a-z-]+)` flag", section))
    assert absent == {"--workers"}  # said to be absent: it is
    for flag in absent:
        assert flag not in helped, flag
    for flag in set(re.findall(r"`(--[a-z-]+)", section)) - absent:
        assert re.search(rf"^\s+{flag}\b", helped, re.MULTILINE), flag
    for var in set(re.findall(r"\bACP_[A-Z_]+\b", section)):
        assert f'"{var}"' in runtime, var


def _help(root: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", root.name.split("-agent")[0] + "_agent", "--help"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("root", [HTTP_AGENT, GOLDEN / "echo-agent-stdio"], ids=lambda p: p.name)
def test_help_names_the_store_variables(root: Path) -> None:
    """Issue 29 item 8: `--help` named no store variable; each it names is read by the
    runtime the project ships."""
    helped = _help(root)
    named = set(re.findall(r"^ {2}(ACP_[A-Z_]+) ", helped, re.MULTILINE))
    wanted = {"ACP_SESSION_STORE", "ACP_SESSION_DB"}
    if "http" in root.name:
        wanted |= {"ACP_REDIS_URL", "ACP_REPLICA_ID"}
        assert "echo-agent-sessions.db in the working directory" in helped
        assert "postgresql://" in helped
    else:
        assert "~/.local/state/echo-agent/sessions.db" in helped
        assert "postgresql://" not in helped  # a stdio project ships no PostgreSQL store
    assert named == wanted, helped
    runtime = "\n".join(
        p.read_text(encoding="utf-8") for p in root.glob("*/_generated/runtime/**/*.py")
    )
    for var in named:
        assert f'os.environ.get("{var}"' in runtime, var
