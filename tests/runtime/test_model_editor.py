"""The editor's files and terminal as the model's tools (issue 33 item 2): a scripted
model (pydantic-ai FunctionModel) reads a file, writes it (a diff, asked) and runs a
command in the client's terminal, through a raw editor of the tests' own
(tests/coder_support.Editor) that serves fs/* and terminal/* for real; the tools offered
follow what the client declared (none / fs / fs + terminal; v2 has neither)."""

from __future__ import annotations

import asyncio
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

import hardening_support as hs
import pytest
from coder_support import Editor

HANDLERS = """
from __future__ import annotations

import json
from typing import Any

from pydantic_ai import Agent as Model
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from ._generated.acp import AgentBase, Turn, run_model


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    prompts = [p.content for m in messages for p in m.parts if p.part_kind == "user-prompt"]
    if prompts[-1] == "tools":
        names = ",".join(sorted(t.name for t in info.function_tools))
        return ModelResponse(parts=[TextPart("tools " + names)])
    since: list[Any] = []  # the tool results of this run
    for m in messages:
        for p in m.parts:
            if p.part_kind == "user-prompt":
                since = []
            elif p.part_kind == "tool-return":
                since.append(p)
    steps = [
        ("read_file", {"path": "f.txt"}),
        ("write_file", {"path": "f.txt", "content": "new text\\n"}),
        ("run_command", {"command": "python", "args": ["-c", "print(40 + 2)"]}),
    ]
    if prompts[-1] == "disk":  # no terminal; a path that leaves the session's folder
        steps = [*steps[:2], ("read_file", {"path": "../outside.txt"})]
    if prompts[-1].startswith("cmd "):  # one command: ["program", "arg", ...]
        argv = json.loads(prompts[-1][4:])
        steps = [("run_command", {"command": argv[0], "args": argv[1:]})]
    if prompts[-1] == "small":  # a one-line file; a program that does not exist
        steps = [("read_file", {"path": "one.txt"}), ("run_command", {"command": "no-such-program-37"})]
    if len(since) < len(steps):
        name, args = steps[len(since)]
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id="c-" + name)])
    return ModelResponse(parts=[TextPart(json.dumps([str(p.content) for p in since]))])


async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
    for part in script(messages, info).parts:
        if isinstance(part, TextPart):
            yield part.content
        else:
            args = json.dumps(part.args)
            yield {0: DeltaToolCall(name=part.tool_name, json_args=args, tool_call_id=part.tool_call_id)}


MODEL = Model(FunctionModel(stream_function=stream))


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        await run_model(turn, MODEL, input)
"""

MANIFEST: dict[str, Any] = {
    "name": "editor-agent",
    "version": "0.1.0",
    "llm": {"instructions": "You edit files."},
    "modes": [{"id": "code", "name": "Code", "default": True}, {"id": "ask", "name": "Ask"}],
}
FS = {"readTextFile": True, "writeTextFile": True}
ON_DISK: dict[str, Any] = {**MANIFEST, "llm": {**MANIFEST["llm"], "on_disk": True}}
NEVER: dict[str, Any] = {**MANIFEST, "llm": {**MANIFEST["llm"], "on_disk": False}}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    tmp = tmp_path_factory.mktemp("editor_agent")
    plain = hs.build_revisions(
        tmp, shared_acp, "editor_agent", manifest=MANIFEST, handlers=HANDLERS, model_env=False
    )
    disk = hs.build_revisions(
        tmp, shared_acp, "editor_agent_disk", manifest=ON_DISK, handlers=HANDLERS, model_env=False
    )
    never = hs.build(
        tmp,
        shared_acp,
        "editor_agent_never_v2",
        rev="v2",
        unstable=False,
        manifest=NEVER,
        handlers=HANDLERS,
    )
    never.pop("ACP_MODEL", None)
    return {
        **plain,
        **{f"disk_{rev}": agent for rev, agent in disk.items()},
        "never_v2": (never, "editor_agent_never_v2"),
    }


async def _session(ed: Editor, root: Path, v2: bool, caps: dict[str, Any]) -> str:
    await ed.initialize(2 if v2 else 1, caps)
    new: dict[str, Any] = {"cwd": str(root)}
    if not v2:
        new["mcpServers"] = []
    return str((await ed.call("session/new", new))["sessionId"])


@pytest.mark.parametrize(
    ("built_as", "caps", "offered"),
    [
        ("v1", {}, ""),
        ("v1", {"fs": FS}, "read_file,write_file"),
        ("v1", {"fs": FS, "terminal": True}, "read_file,run_command,write_file"),
        # v2 has no fs or terminal: by default the tools work on disk for a local (stdio)
        # client (issue 37 item 3: before, a project moved to v2 lost them unless
        # llm.on_disk, and run_command even then)
        ("v2", {}, "read_file,run_command,write_file"),
        # llm.on_disk: true, the tools without a client's fs or terminal (v1 too); false: never
        ("disk_v1", {}, "read_file,run_command,write_file"),
        ("disk_v1", {"fs": FS}, "read_file,run_command,write_file"),
        ("disk_v1", {"fs": FS, "terminal": True}, "read_file,run_command,write_file"),
        ("disk_v2", {}, "read_file,run_command,write_file"),
        ("never_v2", {}, ""),
    ],
)
def test_the_tools_offered_follow_the_clients_capabilities(
    built: Any, tmp_path: Path, built_as: str, caps: dict[str, Any], offered: str
) -> None:
    env, package = built[built_as]
    v2 = built_as.endswith("v2")

    async def main() -> list[str]:
        ed = await Editor.start(env, package, tmp_path)
        sid = await _session(ed, tmp_path, v2, caps)
        await ed.prompt(sid, "tools", v2=v2)
        await ed.stop()
        return ed.texts()

    assert "".join(asyncio.run(main())) == "tools " + offered


@pytest.mark.parametrize("permit", ["allow_once", "reject_once"])
def test_a_model_reads_writes_and_runs_through_the_editor(
    built: Any, tmp_path: Path, permit: str
) -> None:
    env, package = built["v1"]
    (tmp_path / "f.txt").write_text("old text\n")

    async def main() -> Editor:
        ed = await Editor.start(env, package, tmp_path)
        ed.permit = permit
        sid = await _session(ed, tmp_path, False, {"fs": FS, "terminal": True})
        assert await ed.prompt(sid, "change f.txt and check", v2=False) == "end_turn"
        await ed.stop()
        return ed

    ed = asyncio.run(main())
    allowed = permit == "allow_once"
    assert (tmp_path / "f.txt").read_text() == ("new text\n" if allowed else "old text\n")
    calls = [u for u in ed.updates if u["sessionUpdate"] == "tool_call"]
    assert [c["kind"] for c in calls] == ["read", "edit", "execute"]
    diff = calls[1]["content"][0]
    assert diff["type"] == "diff" and diff["oldText"] == "old text\n"
    assert diff["newText"] == "new text\n" and diff["path"] == str(tmp_path / "f.txt")
    asked = [r for r in ed.requests if r["method"] == "session/request_permission"]
    assert len(asked) == 2  # the write and the command
    methods = ed.methods()
    assert ("fs/write_text_file" in methods) is allowed
    assert ("terminal/create" in methods) is allowed
    if allowed:
        assert "terminal/release" in methods  # always released
    said = json.loads(ed.texts()[-1])  # what each tool told the model
    if allowed:
        assert said[1] == "wrote f.txt" and said[2].startswith("exit code 0") and "42" in said[2]
    else:
        assert "did not allow writing f.txt" in said[1] and "did not allow running" in said[2]
    finals = {
        u["toolCallId"]: u["status"]
        for u in ed.updates
        if u["sessionUpdate"] == "tool_call_update" and u.get("status")
    }
    assert list(finals.values()) == (
        ["completed", "completed", "completed"] if allowed else ["completed", "failed", "failed"]
    )


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_on_disk_a_model_reads_and_writes_inside_the_session_folder_only(
    built: Any, tmp_path: Path, rev: str
) -> None:
    """`llm.on_disk`, a client with no fs (v2 has none): the file is read and written on
    disk, the write shown as a diff and asked; a path outside the session's folder is
    refused (the tool's answer, the turn goes on); the client gets no fs request."""
    env, package = built["disk_" + rev]
    v2 = rev == "v2"
    work = tmp_path / "work"
    work.mkdir()
    (work / "f.txt").write_text("old text\n")
    (tmp_path / "outside.txt").write_text("a secret next door\n")

    async def main() -> Editor:
        ed = await Editor.start(env, package, work)
        sid = await _session(ed, work, v2, {})
        assert await ed.prompt(sid, "disk", v2=v2) == "end_turn"
        await ed.stop()
        return ed

    ed = asyncio.run(main())
    assert (work / "f.txt").read_text() == "new text\n"
    assert not [m for m in ed.methods() if m.startswith(("fs/", "terminal/"))]
    asked = [r for r in ed.requests if r["method"] == "session/request_permission"]
    assert len(asked) == 1  # the write
    calls: dict[str, dict[str, Any]] = {}  # the first update of each (v2: tool_call_update)
    for u in ed.updates:
        if u["sessionUpdate"] in ("tool_call", "tool_call_update"):
            calls.setdefault(u["toolCallId"], u)
    assert [c["kind"] for c in calls.values()] == ["read", "edit", "read"]
    diff = list(calls.values())[1]["content"][0]
    assert diff["type"] == "diff"
    assert "old text" in json.dumps(diff) and "new text" in json.dumps(diff)
    said = json.loads(ed.texts()[-1])
    assert said[0] == "old text\n" and said[1] == "wrote f.txt"
    assert said[2] == "cannot read ../outside.txt: ../outside.txt is outside the session's folder"
    assert "secret" not in json.dumps(ed.updates)
    # what the generated client shows of the write before it asks (issue 37 item 4: on v2
    # `patch` is an object {format, text} and the client showed nothing of it)
    from runtime.client.client_tools import Renderer

    screen = io.StringIO()
    renderer = Renderer(out=screen, info=screen)
    for update in ed.updates:
        renderer.render(update)
    shown = screen.getvalue().splitlines()
    assert "  -old text" in shown and "  +new text" in shown, shown


def test_a_one_line_file_is_one_line_and_a_failed_run_says_why_once(
    built: Any, tmp_path: Path
) -> None:
    """Issue 37 item 11: `read_file` reported 2 lines for a one-line file, and a command
    the generated client cannot start came back to the model as `cannot run `x`: cannot
    run x: command not found`. The editor's terminal is the generated client's own
    (runtime.client.client_tools.Terminals); pydantic-ai's first-run banner, which it
    shows to a terminal or a coding agent (AI_AGENT), stays off the agent's stderr."""
    from runtime.client.client_tools import Terminals
    from runtime.wire.errors import RpcError

    env, package = built["v1"]
    env = {k: v for k, v in env.items() if k not in ("CI", "PYTEST_VERSION")}
    env = {**env, "AI_AGENT": "1"}  # what makes pydantic-ai show its banner on a pipe
    (tmp_path / "one.txt").write_text("the only line\n")
    terminals = Terminals(str(tmp_path))

    async def main() -> tuple[Editor, bytes]:
        ed = await Editor.start(env, package, tmp_path)
        served = ed.serves.serve

        async def serve(method: str, params: dict[str, Any]) -> Any:
            if method != "terminal/create":
                return await served(method, params)
            try:
                return await terminals.create(params)
            except RpcError as exc:  # the Editor answers an OSError's text as the error
                raise OSError(exc.message) from None

        ed.serves.serve = serve  # type: ignore[method-assign]
        sid = await _session(ed, tmp_path, False, {"fs": FS, "terminal": True})
        assert await ed.prompt(sid, "small", v2=False) == "end_turn"
        return ed, await ed.stop()

    ed, stderr = asyncio.run(main())
    said = json.loads(ed.texts()[-1])
    assert said[0] == "the only line\n"
    assert said[1] == "cannot run no-such-program-37: command not found", said[1]
    outputs = [u.get("rawOutput") for u in ed.updates if u.get("rawOutput")]
    assert {"lines": 1} in outputs, outputs
    assert b"pydantic-ai v" not in stderr and b"Logfire" not in stderr, stderr.decode()


def test_the_test_model_answers_text_and_calls_no_tool(built: Any, tmp_path: Path) -> None:
    """Issue 37 item 8: `ACP_MODEL=test` (what the generated tests and the README's first
    try use) through a client that allows everything answers text and calls no tool
    (before: pydantic-ai's own `test` called each tool with made-up arguments, writing a
    file `a` holding `a` and running the command `a`)."""
    env, package = built["v1"]
    env = {**env, "ACP_MODEL": "test"}

    async def main() -> Editor:
        ed = await Editor.start(env, package, tmp_path)
        sid = await _session(ed, tmp_path, False, {"fs": FS, "terminal": True})
        assert await ed.prompt(sid, "hello", v2=False) == "end_turn"
        await ed.stop()
        return ed

    ed = asyncio.run(main())
    assert "".join(ed.texts()), ed.updates
    assert ed.methods() == [], ed.methods()  # no read, no permission, no write, no terminal
    assert "tool_call" not in ed.kinds()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("built_as", "offered"), [("v2", ""), ("disk_v2", "read_file,run_command,write_file")]
)
def test_over_http_the_file_tools_work_on_disk_only_when_the_manifest_says_so(
    built: Any, tmp_path: Path, built_as: str, offered: str
) -> None:
    """The default on-disk tools of v2 are for a client on the agent's machine: an HTTP
    agent's session folder is the server's, so there only `llm.on_disk: true` offers
    them (issue 37 item 3)."""
    import mcp_support as ms
    from mcp_support import WsPeer, ws_turn

    env, package = built[built_as]
    port = hs.free_port()
    proc = hs.start_http(env, package, port, ACP_SESSION_DB=str(tmp_path / "s.db"))
    try:
        peer = WsPeer(port)
        peer.call(1, "initialize", ms.init_params(True))
        new, _ = peer.call(2, "session/new", {"cwd": str(tmp_path)})
        updates = ws_turn(peer, 3, new["result"]["sessionId"], "tools")
        peer.close()
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    texts = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"]
    assert "".join(texts) == "tools " + offered


# ---- run_command on disk (v2 has no terminal; issue 37 item 3) ---------------------------------
SECRET = "sk-disk-secret-3737"
SHOW_ENV = (
    "import os, sys; print(sorted(k for k in os.environ if k.startswith(('ACP_', 'OPENAI_'))));"
    "print(os.getcwd()); print('SHOWN' if 'KEEP_ME' in os.environ else 'LOST');"
    "print(any(v.startswith('sk-disk-') for v in os.environ.values())); sys.exit(3)"
)


def _cmd(*argv: str) -> str:
    return "cmd " + json.dumps([sys.executable, *argv])


def _finals(ed: Editor) -> list[str]:
    out: dict[str, str] = {}
    for u in ed.updates:
        if u.get("sessionUpdate") in ("tool_call", "tool_call_update") and u.get("status"):
            out[u["toolCallId"]] = u["status"]
    return list(out.values())


@pytest.mark.parametrize("permit", ["allow_once", "reject_once"])
def test_on_v2_a_command_runs_on_disk_asked_first_without_the_agents_secrets(
    built: Any, tmp_path: Path, permit: str
) -> None:
    """Fails on the old code (no `run_command` on v2): asked with v2's permission request,
    run by the agent in the session's folder with no ACP_/OPENAI_ variable or key, shown
    as an `execute` tool call with its output, the model told its exit code and output."""
    env, package = built["v2"]
    env = {**env, "OPENAI_API_KEY": SECRET, "ACP_SESSION_SECRET": SECRET, "KEEP_ME": "1"}

    async def main() -> tuple[Editor, bytes]:
        ed = await Editor.start(env, package, tmp_path)
        ed.permit = permit
        sid = await _session(ed, tmp_path, True, {})
        assert await ed.prompt(sid, _cmd("-c", SHOW_ENV), v2=True) == "end_turn"
        return ed, await ed.stop()

    ed, stderr = asyncio.run(main())
    assert not [m for m in ed.methods() if m.startswith(("fs/", "terminal/"))]
    asked = [r for r in ed.requests if r["method"] == "session/request_permission"]
    assert len(asked) == 1
    (said,) = json.loads(ed.texts()[-1])
    calls = [u for u in ed.updates if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
    assert calls[0]["kind"] == "execute" and calls[0]["status"] == "pending"
    if permit == "reject_once":
        assert said == f"the user did not allow running `{sys.executable} -c {SHOW_ENV}`"
        assert _finals(ed) == ["failed"]
        return
    assert said == f"exit code 3\n[]\n{tmp_path.resolve()}\nSHOWN\nFalse\n", said
    assert _finals(ed) == ["failed"]  # a non-zero exit, as from a terminal
    last = calls[-1]
    assert last["rawOutput"] == {"exitCode": 3, "truncated": False}
    assert last["content"][0]["content"]["text"] == said.split("\n", 1)[1]
    assert SECRET.encode() not in stderr and SECRET not in json.dumps(ed.updates)


def test_a_command_on_disk_tells_the_model_what_a_terminal_would(
    built: Any, tmp_path: Path
) -> None:
    """The same program, its output above `ACP_TOOL_OUTPUT_LIMIT`: run in the generated
    client's terminal (v1) and on disk (v2), the model is told the same text (the last
    bytes kept, `(cut)`); a program that does not exist fails the same way too."""
    from runtime.client.client_tools import Terminals
    from runtime.wire.errors import RpcError

    big = "import sys; sys.stdout.write('a' * 9000 + 'é' * 3000 + 'END\\n')"
    limit = {"ACP_TOOL_OUTPUT_LIMIT": "4096"}
    terminals = Terminals(str(tmp_path))

    async def said(rev: str, prompt: str) -> str:
        env, package = built[rev]
        v2 = rev == "v2"
        ed = await Editor.start({**env, **limit}, package, tmp_path)
        served = ed.serves.serve

        async def serve(method: str, params: dict[str, Any]) -> Any:
            if method == "terminal/create":
                try:
                    return await terminals.create(params)
                except RpcError as exc:
                    raise OSError(exc.message) from None
            if method in ("terminal/output", "terminal/wait_for_exit", "terminal/release"):
                return await getattr(terminals, method.split("/")[1])(params)
            return await served(method, params)

        ed.serves.serve = serve  # type: ignore[method-assign]
        sid = await _session(ed, tmp_path, v2, {} if v2 else {"terminal": True})
        assert await ed.prompt(sid, prompt, v2=v2) == "end_turn"
        await ed.stop()
        if not v2:
            assert "terminal/create" in ed.methods()
        return str(json.loads(ed.texts()[-1])[0])

    async def main() -> list[str]:
        return [
            await said(rev, prompt)
            for prompt in (_cmd("-c", big), "cmd " + json.dumps(["no-such-program-37"]))
            for rev in ("v1", "v2")
        ]

    term, disk, term_missing, disk_missing = asyncio.run(main())
    assert disk == term, (disk[:200], term[:200])
    assert disk.startswith("exit code 0 (cut)\n") and "[output cut:" in disk
    assert "éé" in disk and "aaaa" not in disk  # the last bytes, whole characters
    assert disk_missing == term_missing == "cannot run no-such-program-37: command not found"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended


SLEEPER = (
    "import os, subprocess, sys, time;"
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
    "open('pids', 'w').write(f'{os.getpid()} {p.pid}'); print('started', flush=True);"
    "time.sleep(60)"
)


def test_a_cancel_kills_a_command_on_disk_and_ends_its_tool_call_cancelled(
    built: Any, tmp_path: Path
) -> None:
    """v2, `session/cancel` while the command (and a child of its own) runs: the turn ends
    `cancelled`, its tool call `cancelled`, the whole process group killed."""
    env, package = built["v2"]

    async def main() -> tuple[str, Editor, list[int]]:
        ed = await Editor.start(env, package, tmp_path)
        sid = await _session(ed, tmp_path, True, {})
        turn = asyncio.get_running_loop().create_task(ed.prompt(sid, _cmd("-c", SLEEPER), v2=True))
        for _ in range(600):  # the command has started its child
            if (tmp_path / "pids").exists() and (tmp_path / "pids").read_text().count(" "):
                break
            await asyncio.sleep(0.05)
        pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
        assert all(_alive(p) for p in pids)
        cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
        await ed.send(cancel)
        stop = await turn
        await ed.stop()
        return stop, ed, pids

    stop, ed, pids = asyncio.run(main())
    assert stop == "cancelled"
    assert _finals(ed) == ["cancelled"]
    for _ in range(100):  # the kill is sent before the turn ends; the child may linger a moment
        if not any(_alive(p) for p in pids):
            break
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids), pids


def test_a_command_on_disk_past_its_time_is_killed_and_in_ask_mode_never_runs(
    built: Any, tmp_path: Path
) -> None:
    """`ACP_COMMAND_TIMEOUT`: the command is killed, the model told so with its output so
    far; in mode `ask` the command is shown, never asked, never run."""
    env, package = built["v2"]
    env = {**env, "ACP_COMMAND_TIMEOUT": "0.5"}

    async def main() -> Editor:
        ed = await Editor.start(env, package, tmp_path)
        sid = await _session(ed, tmp_path, True, {})
        assert await ed.prompt(sid, _cmd("-c", SLEEPER), v2=True) == "end_turn"
        (tmp_path / "pids").unlink()
        params = {"sessionId": sid, "configId": "mode", "type": "id", "value": "ask"}
        await ed.call("session/set_config_option", params)
        assert await ed.prompt(sid, _cmd("-c", SLEEPER), v2=True) == "end_turn"
        await ed.stop()
        return ed

    ed = asyncio.run(main())
    timed_out, in_ask = [json.loads(t)[0] for t in ed.texts() if t.startswith("[")]
    assert timed_out == "killed after 0.5 s (ACP_COMMAND_TIMEOUT)\nstarted\n", timed_out
    assert in_ask.startswith("not run: the session is in ask mode")
    assert not (tmp_path / "pids").exists()
    assert len([r for r in ed.requests if r["method"] == "session/request_permission"]) == 1
    assert _finals(ed) == ["failed", "completed"]
