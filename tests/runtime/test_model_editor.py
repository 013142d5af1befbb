"""The editor's files and terminal as the model's tools (issue 33 item 2): a scripted
model (pydantic-ai FunctionModel) reads a file, writes it (a diff, asked) and runs a
command in the client's terminal, through a raw editor of the tests' own
(tests/coder_support.Editor) that serves fs/* and terminal/* for real; the tools offered
follow what the client declared (none / fs / fs + terminal; v2 has neither)."""

from __future__ import annotations

import asyncio
import io
import json
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
        # v2 has no fs: by default the file tools work on disk for a local (stdio) client
        # (issue 37 item 3: before, a project moved to v2 lost them unless llm.on_disk)
        ("v2", {}, "read_file,write_file"),
        # llm.on_disk: true, the file tools without a client's fs (v1 too); false: never
        ("disk_v1", {}, "read_file,write_file"),
        ("disk_v1", {"fs": FS, "terminal": True}, "read_file,run_command,write_file"),
        ("disk_v2", {}, "read_file,write_file"),
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


@pytest.mark.parametrize(("built_as", "offered"), [("v2", ""), ("disk_v2", "read_file,write_file")])
def test_over_http_the_file_tools_work_on_disk_only_when_the_manifest_says_so(
    built: Any, tmp_path: Path, built_as: str, offered: str
) -> None:
    """The default on-disk file tools of v2 are for a client on the agent's machine: an
    HTTP agent's session folder is the server's, so there only `llm.on_disk: true`
    offers them (issue 37 item 3)."""
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
