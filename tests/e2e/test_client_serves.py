"""The generated client is a usable ACP client (issue 16, item 3): run as its installed
console script (the golden `echo-client-stdio`, pip-installed) against a small coding
agent written here in raw ACP v1 JSON-RPC, it renders every update kind, serves
`fs/*` inside the session folder and `terminal/*`, answers permission requests with
the agent's own options (`--yes`; piped without it: a reject option, said so), prints
the typed output as JSON, declares exactly what it serves (`--no-fs`,
`--no-terminal`), applies `--set`, `--mode`, `--input`, names the auth methods on
auth-required and runs `--auth`; and the same client speaks HTTP with `--url`.  Every
frame is schema-checked (ACP_WIRE_CHECK=1)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from project_support import import_from
from test_client_failures import RAW_IO, _Agent503, _run, install_scripts, serve_agent_503

PY = sys.executable

pytestmark = pytest.mark.slow  # pip install, console scripts, subprocess agents

# A raw ACP v1 coding agent.  Prompts:
#   `caps`: says the client capabilities it was given, its mode and tone
#   `edit PATH OLD NEW`: plan, thought, read (fs), diff tool call, permission, write
#       (fs), `python -c print('checked')` in a client terminal, typed output, "done"
#   `spawn`: starts `sleep 300` in a client terminal and says its pid, never releases it
#   anything else: echoed
CODER = (
    r"""
import json, os, sys, time

state = {"caps": {}, "mode": "code", "tone": "plain", "authed": False, "id": 100}
"""
    + RAW_IO
    + r"""

def call(method, params):
    state["id"] += 1
    rid = state["id"]
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    while True:
        msg = read()
        if msg.get("id") == rid and "method" not in msg:
            return msg


def update(sid, upd):
    send({"jsonrpc": "2.0", "method": "session/update",
          "params": {"sessionId": sid, "update": upd}})


def say(sid, text):
    update(sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})


def plan(sid, done):
    update(sid, {"sessionUpdate": "plan", "entries": [
        {"content": step, "priority": "medium", "status": "completed" if i < done else "pending"}
        for i, step in enumerate(["read", "edit", "check"])]})


def tool(sid, tid, **fields):
    kind = "tool_call" if "title" in fields else "tool_call_update"
    update(sid, {"sessionUpdate": kind, "toolCallId": tid, **fields})


def options():
    return [{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
            {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]


def config():
    return [{"id": "tone", "name": "Tone", "type": "select", "currentValue": state["tone"],
             "options": [{"value": "plain", "name": "Plain"}, {"value": "loud", "name": "Loud"}]}]


def edit(sid, cwd, rel, old, new):
    path = os.path.join(cwd, rel)
    plan(sid, 0)
    update(sid, {"sessionUpdate": "agent_thought_chunk",
                 "content": {"type": "text", "text": "reading " + rel}})
    got = call("fs/read_text_file", {"sessionId": sid, "path": path})
    if "error" in got:
        say(sid, "read failed: " + got["error"]["message"])
        return
    text = got["result"]["content"]
    changed = text.replace(old, new)
    plan(sid, 1)
    tool(sid, "t1", title="Edit " + rel, kind="edit", status="pending",
         locations=[{"path": path}],
         content=[{"type": "diff", "path": path, "oldText": text, "newText": changed}])
    answer = call("session/request_permission", {"sessionId": sid,
                  "toolCall": {"toolCallId": "t1"}, "options": options()})
    outcome = answer["result"]["outcome"]
    if outcome.get("optionId") != "allow":
        tool(sid, "t1", status="failed")
        say(sid, "edit rejected")
        return
    wrote = call("fs/write_text_file", {"sessionId": sid, "path": path, "content": changed})
    if "error" in wrote:
        tool(sid, "t1", status="failed")
        say(sid, "write failed: " + wrote["error"]["message"])
        return
    tool(sid, "t1", status="completed")
    plan(sid, 2)
    if state["caps"].get("terminal"):
        term = call("terminal/create", {"sessionId": sid, "command": sys.executable,
                    "args": ["-c", "print('checked')"], "outputByteLimit": 1000})["result"]
        tid = term["terminalId"]
        tool(sid, "t2", title="Check " + rel, kind="execute", status="in_progress",
             content=[{"type": "terminal", "terminalId": tid}])
        call("terminal/wait_for_exit", {"sessionId": sid, "terminalId": tid})
        out = call("terminal/output", {"sessionId": sid, "terminalId": tid})["result"]
        call("terminal/release", {"sessionId": sid, "terminalId": tid})
        tool(sid, "t2", status="completed")
        plan(sid, 3)
        say(sid, "check said " + out["output"].strip() + "; ")
    update(sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": "resource",
           "resource": {"uri": "acp:output/1", "mimeType": "application/json",
                        "text": json.dumps({"path": rel, "replaced": True})}}})
    say(sid, "done")


cwd = "/"
while True:
    msg = read()
    method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method == "initialize":
        state["caps"] = params.get("clientCapabilities") or {}
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 1,
              "agentCapabilities": {}, "authMethods": [
                  {"id": "login", "name": "Log in", "description": "opens a browser"}]}})
    elif method == "authenticate":
        state["authed"] = params.get("methodId") == "login"
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
    elif method == "session/new":
        if os.environ.get("CODER_NEEDS_AUTH") and not state["authed"]:
            send({"jsonrpc": "2.0", "id": rid,
                  "error": {"code": -32000, "message": "Authentication required"}})
            continue
        cwd = params["cwd"]
        send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": "s1", "configOptions": config(),
              "modes": {"currentModeId": "code", "availableModes": [
                  {"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}]}}})
    elif method == "session/set_mode":
        state["mode"] = params["modeId"]
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
        update("s1", {"sessionUpdate": "current_mode_update", "currentModeId": state["mode"]})
    elif method == "session/set_config_option":
        state["tone"] = params["value"]
        send({"jsonrpc": "2.0", "id": rid, "result": {"configOptions": config()}})
    elif method == "session/prompt":
        sid = params["sessionId"]
        text = "".join(b.get("text", "") for b in params["prompt"])
        words = text.split()
        if text == "caps":
            say(sid, json.dumps(state["caps"], sort_keys=True))
            say(sid, " mode=%s tone=%s" % (state["mode"], state["tone"]))
        elif words[:1] == ["edit"]:
            edit(sid, cwd, *words[1:4])
        elif text == "spawn":
            term = call("terminal/create", {"sessionId": sid, "command": "sh",
                        "args": ["-c", "echo $$; exec sleep 300"]})["result"]
            for _ in range(100):
                out = call("terminal/output", {"sessionId": sid,
                           "terminalId": term["terminalId"]})["result"]["output"]
                if out.strip():
                    break
                time.sleep(0.05)  # a poll: the terminal runs in the client's process
            say(sid, out.strip())
        else:
            say(sid, text)
        send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})
"""
)


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    return install_scripts(tmp_path_factory)


@pytest.fixture
def agent_503() -> Iterator[str]:
    with serve_agent_503() as url:
        yield url


@pytest.fixture(scope="module")
def coder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("coder") / "coder.py"
    path.write_text(CODER)
    return path


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A scratch folder (the session folder: the client runs in it) with a file to edit."""
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "app.py").write_text("x = 'OLD'\n")
    return folder


def _coder(
    scripts: dict[str, tuple[Path, Path]],
    coder: Path,
    work: Path,
    prompts: str,
    *flags: str,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """The client, run in the scratch folder `work`, driving the coder."""
    return _run(scripts, "stdio", *flags, "--", PY, str(coder), prompts=prompts, cwd=work, **env)


def test_the_client_renders_serves_fs_and_terminals_and_edits_the_file(
    scripts: dict[str, tuple[Path, Path]], coder: Path, work: Path
) -> None:
    done = _coder(scripts, coder, work, "edit app.py OLD NEW\n", "--yes")
    assert done.returncode == 0, done.stderr
    assert (work / "app.py").read_text() == "x = 'NEW'\n"
    out = done.stdout.splitlines()
    assert out[0] == "check said checked; "
    assert json.loads(out[1]) == {"path": "app.py", "replaced": True}  # the typed output
    assert out[2] == "done"
    err = done.stderr.splitlines()
    path = str(work / "app.py")
    # plans as a checklist, the thought, the tool call with its location and diff, the
    # permission answered with the agent's allow option, the write, the terminal output
    assert ["plan", "  [ ] read", "  [ ] edit", "  [ ] check"] == err[0:4]
    assert "thinking: reading app.py" in err[4]
    assert f"tool Edit app.py (edit) [pending] {path}" in err
    assert "  -x = 'OLD'" in err and "  +x = 'NEW'" in err
    assert "the agent asks permission: Edit app.py -- Allow (allow_once, --yes)" in err
    assert f"the agent writes {path} (10 characters) -- allowed (--yes)" in err
    assert f"tool Edit app.py (edit) [done] {path}" in err
    assert "tool Check app.py (execute) [done]" in err
    assert "  | checked" in err
    # piped: the plan once, then each entry as its status changes
    assert err.count("plan") == 1
    assert ["plan 1/3: [x] read", "plan 2/3: [x] edit"] == [ln for ln in err if " [x] " in ln][:2]
    assert err[-2] == "plan 3/3: [x] check"
    assert "\x1b[" not in done.stderr  # piped: plain lines


def test_piped_without_yes_the_permission_is_rejected_and_said(
    scripts: dict[str, tuple[Path, Path]], coder: Path, work: Path
) -> None:
    done = _coder(scripts, coder, work, "edit app.py OLD NEW\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "edit rejected"
    assert (work / "app.py").read_text() == "x = 'OLD'\n"
    assert (
        "the agent asks permission: Edit app.py -- declined: stdin is not a terminal, nobody can "
        "answer here (--yes allows)"
    ) in done.stderr
    assert "tool Edit app.py (edit) [failed]" in done.stderr


def test_files_outside_the_session_folder_are_refused(
    scripts: dict[str, tuple[Path, Path]], coder: Path, work: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("x = 'OLD'\n")
    done = _coder(
        scripts, coder, work, f"edit ../outside.py OLD NEW\nedit {outside} OLD NEW\n", "--yes"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        f"read failed: refused: {work}/../outside.py is outside the session folder {work}"
    )
    assert lines[1] == f"read failed: refused: {outside} is outside the session folder {work}"
    assert outside.read_text() == "x = 'OLD'\n"


def test_the_client_declares_exactly_what_it_serves(
    scripts: dict[str, tuple[Path, Path]], coder: Path, work: Path
) -> None:
    fs = '"fs": {"readTextFile": true, "writeTextFile": true}'
    elicitation = '"elicitation": {"form": {}}'
    caps = _coder(scripts, coder, work, "caps\n").stdout
    assert caps.startswith(f'{{{elicitation}, {fs}, "terminal": true}}'), caps
    caps = _coder(scripts, coder, work, "caps\n", "--no-terminal").stdout
    assert caps.startswith(f"{{{elicitation}, {fs}}}"), caps
    caps = _coder(scripts, coder, work, "caps\n", "--no-fs", "--no-terminal").stdout
    assert caps.startswith(f"{{{elicitation}}}"), caps
    # without fs the coder's read is answered "method not found", never served
    done = _coder(scripts, coder, work, "edit app.py OLD NEW\n", "--no-fs", "--yes")
    assert done.stdout.startswith("read failed: method not found"), done.stdout


def test_every_terminal_is_killed_when_the_client_exits(
    scripts: dict[str, tuple[Path, Path]], coder: Path, work: Path
) -> None:
    done = _coder(scripts, coder, work, "spawn\n")
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.strip())
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists() or _zombie(pid):
            break
        time.sleep(0.1)  # a poll: another process, not our child (no wait() on it)
    assert not Path(f"/proc/{pid}").exists() or _zombie(pid), "the terminal's command lives on"


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_set_mode_and_input(scripts: dict[str, tuple[Path, Path]], coder: Path, work: Path) -> None:
    done = _coder(scripts, coder, work, "caps\n", "--no-fs", "--set", "tone=loud", "--mode", "ask")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("mode=ask tone=loud")
    assert "mode: ask" in done.stderr  # the current_mode_update, rendered
    done = _coder(scripts, coder, work, "", "--set", "pitch=high")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "error -32602: --set pitch: the agent has no such config option (tone)"
    )
    prompt = work / "prompt.txt"
    prompt.write_text("first line\nsecond line")
    done = _coder(scripts, coder, work, "", "--input", str(prompt))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "first line\nsecond line"
    assert done.stderr.count("[turn: end_turn]") == 1
    done = _coder(scripts, coder, work, "all of\nstdin", "--input", "-")
    assert done.stdout.strip() == "all of\nstdin"


def test_auth_required_lists_the_methods_and_auth_runs_authenticate(
    scripts: dict[str, tuple[Path, Path]], coder: Path, work: Path
) -> None:
    done = _coder(scripts, coder, work, "hello\n", CODER_NEEDS_AUTH="1")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "error -32000: Authentication required",
        "the agent asks you to authenticate; its methods:",
        "  login: Log in (opens a browser)",
        f"run: echo-agent-client --auth login -- {PY} {coder}",
    ]
    done = _coder(scripts, coder, work, "hello\n", "--auth", "login", CODER_NEEDS_AUTH="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hello"


def test_a_stdio_client_also_speaks_http(
    scripts: dict[str, tuple[Path, Path]],
    agent_503: str,
) -> None:
    _Agent503.refused = 1  # no 503 this time
    done = _run(scripts, "stdio", "--url", agent_503)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    done = _run(scripts, "stdio", "--url", agent_503, "--", "my-agent")
    assert done.returncode == 2
    assert "give either --url or an agent command after --, not both" in done.stderr


# The same coding turn written with the official Python SDK (agent-client-protocol
# 0.12.1): its typed client calls (read_text_file, request_permission, write_text_file,
# create_terminal, ...) and update helpers, served and rendered by our client.
SDK_CODER = r"""
import asyncio, os, sys

import acp
from acp import schema as S
from acp.helpers import (
    plan_entry, start_tool_call, tool_diff_content, tool_terminal_ref,
    update_agent_message_text, update_agent_thought_text, update_plan, update_tool_call,
)


class Coder:
    def on_connect(self, conn):
        self.conn = conn

    async def initialize(self, protocol_version, client_capabilities=None, client_info=None, **kw):
        return S.InitializeResponse(protocol_version=1)

    async def new_session(self, cwd, mcp_servers=None, **kw):
        self.cwd = cwd
        return S.NewSessionResponse(session_id="s1")

    async def prompt(self, session_id, prompt, **kw):
        c, sid = self.conn, session_id
        _, rel, old, new = "".join(getattr(b, "text", "") for b in prompt).split()
        path = os.path.join(self.cwd, rel)
        await c.session_update(sid, update_plan([plan_entry(s) for s in ("read", "edit", "check")]))
        await c.session_update(sid, update_agent_thought_text("reading " + rel))
        text = (await c.read_text_file(session_id=sid, path=path)).content
        changed = text.replace(old, new)
        await c.session_update(sid, start_tool_call(
            "t1", "Edit " + rel, kind="edit", status="pending",
            locations=[S.ToolCallLocation(path=path)],
            content=[tool_diff_content(path, changed, text)]))
        answer = await c.request_permission(
            session_id=sid, tool_call=S.ToolCallUpdate(tool_call_id="t1"),
            options=[S.PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                     S.PermissionOption(option_id="reject", name="Reject", kind="reject_once")])
        if getattr(answer.outcome, "option_id", None) != "allow":
            await c.session_update(sid, update_tool_call("t1", status="failed"))
            await c.session_update(sid, update_agent_message_text("edit rejected"))
            return S.PromptResponse(stop_reason="end_turn")
        await c.write_text_file(session_id=sid, path=path, content=changed)
        await c.session_update(sid, update_tool_call("t1", status="completed"))
        term = await c.create_terminal(
            session_id=sid, command=sys.executable, args=["-c", "print('checked')"])
        await c.session_update(sid, start_tool_call(
            "t2", "Check " + rel, kind="execute", status="in_progress",
            content=[tool_terminal_ref(term.terminal_id)]))
        await c.wait_for_terminal_exit(session_id=sid, terminal_id=term.terminal_id)
        await c.release_terminal(session_id=sid, terminal_id=term.terminal_id)
        await c.session_update(sid, update_tool_call("t2", status="completed"))
        await c.session_update(sid, update_agent_message_text("done"))
        return S.PromptResponse(stop_reason="end_turn")


asyncio.run(acp.run_agent(Coder()))
"""


def test_an_official_sdk_agent_edits_through_the_client(
    scripts: dict[str, tuple[Path, Path]], work: Path, tmp_path: Path
) -> None:
    agent = tmp_path / "sdk_coder.py"
    agent.write_text(SDK_CODER)
    done = _run(
        scripts,
        "stdio",
        "--yes",
        "--",
        PY,
        str(agent),
        prompts="edit app.py OLD NEW\n",
        cwd=work,
    )
    assert done.returncode == 0, done.stderr
    assert (work / "app.py").read_text() == "x = 'NEW'\n"
    assert done.stdout.strip() == "done"
    err = done.stderr.splitlines()
    path = str(work / "app.py")
    assert ["plan", "  [ ] read", "  [ ] edit", "  [ ] check"] == err[0:4]
    assert f"tool Edit app.py (edit) [done] {path}" in err
    assert "  -x = 'OLD'" in err and "  +x = 'NEW'" in err
    assert "tool Check app.py (execute) [done]" in err and "  | checked" in err


def test_an_official_typescript_sdk_agent_edits_through_the_client(
    scripts: dict[str, tuple[Path, Path]], work: Path
) -> None:
    """tests/peers/ts_coder_agent.mjs: the same turn from an agent written with the
    official TypeScript SDK 2.4.0 (`agent()` app, v1)."""
    from ts_peer import install

    root = install()
    agent = ["node", str(root / "ts_coder_agent.mjs")]
    done = _run(scripts, "stdio", "--yes", "--", *agent, prompts="edit app.py OLD NEW\n", cwd=work)
    assert done.returncode == 0, done.stderr
    assert (work / "app.py").read_text() == "x = 'NEW'\n"
    assert done.stdout.strip() == "done"
    err = done.stderr.splitlines()
    assert f"tool Edit app.py (edit) [done] {work / 'app.py'}" in err
    assert "  -x = 'OLD'" in err and "  +x = 'NEW'" in err
    assert "the agent asks permission: Edit app.py -- Allow (allow_once, --yes)" in err
    assert "tool Check app.py (execute) [done]" in err and "  | checked" in err
    done = _run(scripts, "stdio", "--", *agent, prompts="edit app.py NEW OLD\n", cwd=work)
    assert done.stdout.strip() == "edit rejected"
    assert (work / "app.py").read_text() == "x = 'NEW'\n"


class _Stream:
    """A text stream that says it is (or is not) a terminal."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.parts: list[str] = []

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def text(self) -> str:
        return "".join(self.parts)


def _client_tools() -> object:
    golden = Path(__file__).resolve().parents[2] / "generated" / "projects" / "echo-client-stdio"
    import_from(golden, "echo_agent_client")  # not on pytest's pythonpath
    from echo_agent_client._generated.runtime.client import client_tools

    return client_tools


def test_the_renderer_styles_a_terminal_and_reads_v2_shapes() -> None:
    tools: object = _client_tools()
    out, info = _Stream(True), _Stream(True)
    r = tools.Renderer(out=out, info=info)  # type: ignore[attr-defined]
    r.render({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}})
    r.render({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Run", "status": "failed"})
    assert "\x1b[2mhm\x1b[0m" in info.text() and "\x1b[31mfailed\x1b[0m" in info.text()
    # v2: agent_message with a content list, plan_update, a diff as a patch, terminal chunks
    out, info = _Stream(False), _Stream(False)
    r = tools.Renderer(out=out, info=info)  # type: ignore[attr-defined]
    r.render(
        {
            "sessionUpdate": "agent_message",
            "messageId": "m",
            "content": [{"type": "text", "text": "hi"}],
        }
    )
    entries = [{"content": "a", "priority": "low", "status": "in_progress"}]
    r.render({"sessionUpdate": "plan_update", "plan": {"entries": entries}})
    r.render(
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t",
            "content": [
                {
                    "type": "diff",
                    "changes": [{"operation": "update", "path": "/w/a.txt"}],
                    "patch": {"format": "git_patch", "text": "-a\n+b"},
                }
            ],
        }
    )
    r.render(  # no renderable patch: what changed, a line a file
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t",
            "content": [{"type": "diff", "changes": [{"operation": "add", "path": "/w/n.txt"}]}],
        }
    )
    r.render({"sessionUpdate": "terminal_output_chunk", "terminalId": "x", "data": "line\n"})
    assert out.text() == "hi"
    assert info.text().splitlines() == [
        "plan",
        "  [~] a",
        "tool t [pending]",
        "  -a",
        "  +b",
        "tool t [pending]",
        "  add /w/n.txt",
        "  | line",
    ]
    assert "\x1b[" not in info.text()
