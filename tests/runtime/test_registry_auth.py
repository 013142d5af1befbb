"""ACP auth methods from the manifest, on the wire (templates/runtime/agent/agent_auth.py).

A stdio agent whose manifest declares an `agent` and a `terminal` method: how
`initialize` lists them (each revision's shape, the `_meta` form older clients read, not
at all for a client that did not opt in to terminal methods), `session/new` refused with
-32000 until `authenticate` succeeds or the terminal login's credentials exist, and the
terminal login entry point (`<script> --login`), as generated and as filled in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from project_support import write_project

REPO = Path(__file__).resolve().parents[2]

MANIFEST = """\
name: exagent
version: "1.2.3"
description: An agent behind a login.
auth:
  - {type: agent, id: oauth, name: Browser login}
  - type: terminal
    id: login
    name: Log in here
    args: ["--login"]
    env: {EXAGENT_LOGIN: "1"}
"""

HANDLERS = """\
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent.agent import Turn
from ._generated.runtime.wire.errors import RpcError


def _token() -> Path:
    return Path(os.environ["HOME"]) / ".exagent-token"


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        await turn.send_text("hello")

    async def authenticate_with(self, method_id: str) -> None:
        if os.environ.get("EXAGENT_REFUSE"):
            raise RpcError(-32000, "the browser login failed")

    async def is_authenticated(self) -> bool:
        return _token().exists()

    @classmethod
    def login(cls, method_id: str, argv: list[str]) -> int:
        _token().write_text(method_id + ":" + os.environ.get("EXAGENT_LOGIN", ""))
        return 0
"""


def build(tmp: Path, schema: Path, handlers: str | None) -> dict[str, str]:
    from generator.manifest.load import load_manifest

    (tmp / "agent.yaml").write_text(MANIFEST)
    default = (
        "from ._generated.dispatcher import AgentBase\n\n\nclass Agent(AgentBase):\n    pass\n"
    )
    write_project(
        tmp,
        "exagent",
        schema=json.loads(schema.read_text()),
        manifest=load_manifest(tmp / "agent.yaml").data,
        handlers=handlers or default,
        main="from ._generated import run_agent\nfrom .handlers import Agent\n\nrun_agent(Agent, None)\n",
    )
    home = tmp / "home"
    home.mkdir()
    return {**os.environ, "PYTHONPATH": str(tmp), "HOME": str(home)}


@pytest.fixture(scope="module")
def v1(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, str]:
    return build(tmp_path_factory.mktemp("v1"), shared_acp / "v1" / "schema.json", HANDLERS)


@pytest.fixture(scope="module")
def v2(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, str]:
    return build(tmp_path_factory.mktemp("v2"), shared_acp / "v2" / "schema.json", HANDLERS)


def exchange(env: dict[str, str], *calls: tuple[str, Any]) -> list[dict[str, Any]]:
    """Each call's answer, in order (each sent once the previous one is answered)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "exagent"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdin and proc.stdout
    answers = []
    try:
        for i, (method, params) in enumerate(calls, 1):
            frame = {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
            proc.stdin.write(json.dumps(frame) + "\n")
            proc.stdin.flush()
            while line := proc.stdout.readline():
                msg = json.loads(line)
                if msg.get("id") == i and "method" not in msg:
                    answers.append(msg)
                    break
            else:
                raise AssertionError(f"the agent ended before answering {method}")
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    return answers


def init1(caps: dict[str, Any]) -> tuple[str, Any]:
    return "initialize", {"protocolVersion": 1, "clientCapabilities": caps}


NEW = ("session/new", {"cwd": "/tmp", "mcpServers": []})


@pytest.mark.slow
def test_v1_lists_the_terminal_method_typed_when_the_client_opted_in(v1: dict[str, str]) -> None:
    (r,) = exchange(v1, init1({"auth": {"terminal": True}}))
    agent, terminal = r["result"]["authMethods"]
    assert agent == {"id": "oauth", "name": "Browser login"}  # v1: untyped means agent
    legacy = terminal.pop("_meta")["terminal-auth"]
    assert terminal == {
        "id": "login",
        "name": "Log in here",
        "type": "terminal",
        "args": ["--login"],
        "env": {"EXAGENT_LOGIN": "1"},
    }
    assert legacy["args"] == ["--login"] and legacy["label"] == "Log in here"


@pytest.mark.slow
def test_v1_meta_form_for_older_clients_and_none_without_opt_in(v1: dict[str, str]) -> None:
    # the ACP registry's CI declares `_meta["terminal-auth"]`, not `auth.terminal`
    legacy_caps = {"terminal": True, "_meta": {"terminal-auth": True}}
    (r,) = exchange(v1, init1(legacy_caps))
    terminal = r["result"]["authMethods"][1]
    assert "type" not in terminal and terminal["_meta"]["terminal-auth"]["args"] == ["--login"]
    (r,) = exchange(v1, init1({}))
    assert [m["id"] for m in r["result"]["authMethods"]] == ["oauth"]


@pytest.mark.slow
def test_v2_shape_login_and_logout(v2: dict[str, str]) -> None:
    init2 = (
        "initialize",
        {
            "protocolVersion": 2,
            "info": {"name": "t", "version": "1"},
            "capabilities": {"auth": {"terminal": {}}},
        },
    )
    r, login, created, logout, refused = exchange(
        v2,
        init2,
        ("auth/login", {"methodId": "oauth"}),
        NEW,
        ("auth/logout", {}),
        NEW,
    )
    assert login["result"] == {} and "sessionId" in created["result"]
    assert logout["result"] == {} and refused["error"]["code"] == -32000
    agent, terminal = r["result"]["authMethods"]
    assert agent == {"methodId": "oauth", "name": "Browser login", "type": "agent"}
    assert terminal["type"] == "terminal" and terminal["methodId"] == "login"
    assert terminal["env"] == [{"name": "EXAGENT_LOGIN", "value": "1"}]


@pytest.mark.slow
def test_session_new_needs_authentication_then_the_hook_decides(v1: dict[str, str]) -> None:
    refused, auth_terminal, ok, created = exchange(
        v1,
        init1({}),
        NEW,
        ("authenticate", {"methodId": "login"}),
        ("authenticate", {"methodId": "oauth"}),
        NEW,
    )[1:]
    assert refused["error"]["code"] == -32000
    assert auth_terminal["error"]["code"] == -32602  # a terminal method is never authenticated
    assert ok["result"] == {}
    assert "sessionId" in created["result"]
    _, no, failed = exchange(
        {**v1, "EXAGENT_REFUSE": "1"}, init1({}), ("authenticate", {"methodId": "oauth"}), NEW
    )
    assert no["error"] == {"code": -32000, "message": "the browser login failed"}
    assert failed["error"]["code"] == -32000


@pytest.mark.slow
def test_terminal_login_entry_then_sessions_work(tmp_path: Path, shared_acp: Path) -> None:
    env = build(tmp_path, shared_acp / "v1" / "schema.json", HANDLERS)
    before = exchange(env, init1({}), NEW)[1]
    assert before["error"]["code"] == -32000
    # what a client does for a terminal method: the agent's command + args, + env
    login = subprocess.run(
        [sys.executable, "-m", "exagent", "--login"],
        env={**env, "EXAGENT_LOGIN": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert login.returncode == 0, login.stderr
    assert (Path(env["HOME"]) / ".exagent-token").read_text() == "login:1"
    created = exchange(env, init1({}), NEW)[1]
    assert "sessionId" in created["result"]


@pytest.mark.slow
def test_generated_login_explains_and_exits_1(tmp_path: Path, shared_acp: Path) -> None:
    env = build(tmp_path, shared_acp / "v1" / "schema.json", None)
    login = subprocess.run(
        [sys.executable, "-m", "exagent", "--login"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert login.returncode == 1 and login.stdout == ""
    assert "override the classmethod `login` in handlers.py" in login.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "exagent", "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "exagent --login: Log in here (the 'login' terminal auth method)" in shown.stdout
    # and until `authenticate_with` is written, the agent method refuses
    no = exchange(env, init1({}), ("authenticate", {"methodId": "oauth"}))[1]
    assert no["error"]["code"] == -32000 and "authenticate_with" in no["error"]["message"]


@pytest.mark.slow
def test_every_session_request_needs_the_login_not_only_new(v1: dict[str, str]) -> None:
    # a session created by a logged-in connection is stored; a later connection that did
    # not log in can neither load, list, prompt nor delete it (nothing of them runs: no
    # lease taken, no history read), and a logged-in one still finds it whole
    created = exchange(v1, init1({}), ("authenticate", {"methodId": "oauth"}), NEW)[2]
    sid = created["result"]["sessionId"]
    prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}
    answers = exchange(
        v1,
        init1({}),
        ("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []}),
        ("session/list", {}),
        ("session/prompt", prompt),
        ("session/delete", {"sessionId": sid}),
    )[1:]
    assert [a.get("error", {}).get("code") for a in answers] == [-32000] * 4, answers
    loaded = exchange(
        v1,
        init1({}),
        ("authenticate", {"methodId": "oauth"}),
        ("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []}),
    )[2]
    assert "result" in loaded, loaded
