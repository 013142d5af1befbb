"""The ACP registry entry: `agentgen registry check`, what `agentgen new` writes, the
version kept in step by `agentgen check`, and the entry launched from its wheel.

Case folders (tests/cases/registry/<case>/): entries (`<id>/agent.json`, icon.svg) or a
project (`pyproject.toml` + `acp-registry/`); `expected.txt` is what
`agentgen registry check` prints run inside the case (empty for a valid case).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from expected_support import expected

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests" / "cases" / "registry"
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("case", sorted(p.name for p in CASES.iterdir() if p.is_dir()))
def test_case(
    case: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from generator.registry.check import run_registry_check

    monkeypatch.chdir(CASES / case)
    code = run_registry_check(Path("."))
    out = capsys.readouterr().out
    if case == "valid":
        assert code == 0 and "no problems" in out
    else:
        assert (code, out) == (1, expected(CASES / case / "expected.txt", out))


def test_placeholder_icon_passes_and_a_manifest_entry_defaults_from_identity() -> None:
    from generator.registry.entry import PLACEHOLDER_ICON, entry
    from generator.registry.rules import entry_findings, icon_findings

    assert list(icon_findings(PLACEHOLDER_ICON)) == []
    manifest = {
        "name": "coder",
        "version": "0.3.0",
        "title": "Coder",
        "description": "Writes code.\n\nMore about it.",
        "authors": ["Ada"],
        "links": {"repository": "https://example.org/coder"},
        "registry": {"license": "MIT"},
    }
    data = entry(manifest, distribution="coder", version="0.3.0")
    assert data == {
        "id": "coder",
        "name": "Coder",
        "version": "0.3.0",
        "description": "Writes code.",
        "repository": "https://example.org/coder",
        "authors": ["Ada"],
        "license": "MIT",
        "icon": "./icon.svg",
        "distribution": {"uvx": {"package": "coder@0.3.0"}},
    }
    assert list(entry_findings(data, "coder")) == []


MANIFEST = """\
name: gate-agent
version: "0.4.0"
title: Gate Agent
description: Echoes, once logged in.
authors: [Ada]
auth:
  - type: terminal
    id: login
    name: Log in from the terminal
    args: ["--login"]
    env: {GATE_AGENT_TTY: "1"}
registry:
  license: Apache-2.0
"""

# what the user writes in handlers.py: a login that stores a token under HOME
HANDLERS = '''\
"""Gate Agent's handlers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent.agent import Turn

if TYPE_CHECKING:
    from ._generated.dispatcher import Input, Output


def _token() -> Path:
    return Path(os.environ["HOME"]) / ".gate-agent-token"


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Input) -> Output | None:
        if isinstance(input, list):
            for block in input:
                if block.get("type") == "text":
                    await turn.send_text(block["text"])
        return None

    async def is_authenticated(self) -> bool:
        return _token().exists()

    @classmethod
    def login(cls, method_id: str, argv: list[str]) -> int:
        _token().write_text(os.environ.get("GATE_AGENT_TTY", ""))
        return 0
'''


def agentgen_new(project: Path, manifest: Path, shared_acp: Path) -> str:
    """`agentgen new` on the v1 schema; its output."""
    proc = subprocess.run(
        [
            str(BIN / "agentgen"),
            "new",
            str(project),
            "-m",
            str(manifest),
            "--schema",
            str(shared_acp / "v1" / "schema.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def new_project(tmp: Path, shared_acp: Path) -> Path:
    (tmp / "agent.yaml").write_text(MANIFEST)
    out = agentgen_new(tmp / "gate", tmp / "agent.yaml", shared_acp)
    assert '"agent_servers"' in out and '"command": "gate-agent"' in out
    return tmp / "gate"


def test_new_writes_an_entry_that_passes_and_check_keeps_its_version(
    tmp_path: Path, shared_acp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from generator.registry.check import run_registry_check
    from generator.scaffold.check import run_check

    project = new_project(tmp_path, shared_acp)
    folder = project / "acp-registry" / "gate-agent"
    data = json.loads((folder / "agent.json").read_text())
    assert data["distribution"] == {"uvx": {"package": "gate-agent@0.4.0"}}
    assert data["license"] == "Apache-2.0" and (folder / "icon.svg").is_file()
    readme = (project / "README.md").read_text()
    assert '"agent_servers"' in readme and "acp.json" in readme and "registry" in readme
    handlers = (project / "gate_agent" / "handlers.py").read_text()
    assert "def login(cls, method_id: str, argv: list[str]) -> int:" in handlers
    assert run_registry_check(project) == 0
    assert run_check(project) == 0
    capsys.readouterr()
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.4.0"', 'version = "0.5.0"'))
    assert run_check(project) == 1
    out = capsys.readouterr().out
    assert (
        "stale: acp-registry/gate-agent/agent.json:4:14: /version: 0.4.0 but pyproject.toml's "
        "version is 0.5.0\n"
    ) in out


def _handshake(command: list[str], env: dict[str, str], *calls: tuple[str, Any]) -> list[Any]:
    """Each call's answer (sent one after the other) and the notifications before it."""
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdin and proc.stdout
    answers: list[Any] = []
    try:
        for i, (method, given) in enumerate(calls, 1):
            params = given(answers) if callable(given) else given
            frame = {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
            proc.stdin.write(json.dumps(frame) + "\n")
            proc.stdin.flush()
            before = []
            while line := proc.stdout.readline():
                msg = json.loads(line)
                if msg.get("id") == i and "method" not in msg:
                    answers.append((msg, before))
                    break
                before.append(msg)
            else:
                raise AssertionError(f"the agent ended before answering {method}")
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    return answers


INIT = (
    "initialize",
    {"protocolVersion": 1, "clientCapabilities": {"auth": {"terminal": True}}},
)
NEW = ("session/new", {"cwd": "/tmp", "mcpServers": []})


def _prompt(answers: list[Any]) -> dict[str, Any]:
    sid = answers[-1][0]["result"]["sessionId"]
    return {"sessionId": sid, "prompt": [{"type": "text", "text": "ping"}]}


@pytest.mark.slow
def test_wheel_launched_by_uvx_and_pipx_with_terminal_login(
    tmp_path: Path, shared_acp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The registry check with --launch passes; then, as an editor would: `uvx --from
    <wheel> <script>` answers initialize listing the terminal method, refuses session/new,
    the terminal login (`<script> --login`) succeeds, and a prompt gets its answer; `pipx
    run --spec <wheel> <script>` starts the same agent."""
    from generator.registry.check import run_registry_check

    project = new_project(tmp_path, shared_acp)
    (project / "gate_agent" / "handlers.py").write_text(HANDLERS)
    assert run_registry_check(project, launch=True) == 0, capsys.readouterr().out
    wheel = next((project / "dist").glob("gate_agent-0.4.0-*.whl"))
    home = Path(tempfile.mkdtemp(prefix="registry-home-"))
    try:
        env = {**os.environ, "HOME": str(home)}
        env.pop("VIRTUAL_ENV", None)
        uvx = [str(BIN / "uvx"), "--from", str(wheel), "gate-agent"]
        (init, _), (refused, _) = _handshake(uvx, env, INIT, NEW)
        (terminal,) = init["result"]["authMethods"]
        assert terminal["type"] == "terminal" and terminal["args"] == ["--login"]
        assert refused["error"]["code"] == -32000
        login = subprocess.run(
            [*uvx, *terminal["args"]],
            env={**env, **terminal["env"]},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert login.returncode == 0, login.stderr
        _, _, (done, updates) = _handshake(uvx, env, INIT, NEW, ("session/prompt", _prompt))
        assert done["result"] == {"stopReason": "end_turn"}
        texts = [u["params"]["update"]["content"]["text"] for u in updates]
        assert texts == ["ping"]
        if shutil.which("pipx") or (BIN / "pipx").exists():
            pipx = [str(BIN / "pipx"), "run", "--spec", str(wheel), "gate-agent"]
            pipx_env = {**env, "PIPX_HOME": str(home / "pipx")}
            ((init2, _),) = _handshake(pipx, pipx_env, INIT)
            assert init2["result"]["agentInfo"]["name"] == "gate-agent"
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
def test_launch_reports_an_agent_without_auth_methods(
    tmp_path: Path, shared_acp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from generator.registry.check import run_registry_check

    project = tmp_path / "echo"
    agentgen_new(project, REPO / "examples" / "echo" / "agent.yaml", shared_acp)
    assert run_registry_check(project, launch=True) == 1
    out = capsys.readouterr().out
    assert out == (
        f"{project}/acp-registry/echo-agent/agent.json: launch: initialize lists no auth "
        "method: the registry needs one of type agent or terminal (the manifest's `auth`)\n"
    )
