"""The coder example (examples/coder) and the Turn authoring API it exercises: the whole
coder turn on each revision and client capability set (the capability matrix), the
rejected, not-found, ask-mode, /help and /undo paths, and the wire check refusing a
request whose client capability was not declared.  Every frame is schema-checked
(tests/conftest.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from coder_support import Editor, build_coder

pytestmark = pytest.mark.slow

REVISIONS = {
    "v1": "v1/schema.json",
    "v1-unstable": "v1/schema.unstable.json",
    "v2": "v2/schema.json",
}
CAPS = {
    "none": {},
    "fs": {"fs": {"readTextFile": True, "writeTextFile": True}},
    "fs+terminal": {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True},
}
SOURCE = "def greet():\n    return 'hello'\n"


@pytest.fixture(scope="module")
def coder(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    """coder(revision) -> (package, env), built once per revision."""
    built: dict[str, tuple[str, dict[str, str]]] = {}
    tmp = tmp_path_factory.mktemp("coder")

    def get(revision: str) -> tuple[str, dict[str, str]]:
        if revision not in built:
            package = "coder_" + revision.replace("-", "_")
            schema = json.loads((shared_acp / REVISIONS[revision]).read_text())
            built[revision] = (package, build_coder(tmp, schema, package))
        return built[revision]

    return get


async def _session(ed: Editor, revision: str, caps: dict[str, Any], cwd: Path) -> str:
    version = 2 if revision == "v2" else 1
    await ed.initialize(version, caps)
    new = await ed.call("session/new", {"cwd": str(cwd), "mcpServers": []})
    return str(new["sessionId"])


def _run(coder: Any, revision: str, caps: dict[str, Any], tmp: Path, body: Any) -> Any:
    package, env = coder(revision)

    async def go() -> Any:
        ed = await Editor.start(env, package, tmp)
        try:
            sid = await _session(ed, revision, caps, tmp)
            return await body(ed, sid)
        finally:
            err = await ed.stop()
            assert b"Traceback" not in err, err.decode()

    return asyncio.run(go())


@pytest.mark.parametrize("caps", list(CAPS))
@pytest.mark.parametrize("revision", ["v1", "v2"])
def test_coder_turn_takes_the_path_the_client_allows(
    coder: Any, tmp_path: Path, revision: str, caps: str
) -> None:
    """The capability matrix: the edit reaches the file on every revision and capability
    set; fs/* only when declared (never on v2), terminal/* only when declared (never on
    v2), and the compile tool call exactly when the terminal is used."""
    target = tmp_path / "app.py"
    target.write_text(SOURCE)
    v2 = revision == "v2"

    async def body(ed: Editor, sid: str) -> Editor:
        reason = await ed.prompt(sid, "replace `hello` with `bye` in app.py", v2=v2)
        assert reason == "end_turn"
        return ed

    ed = _run(coder, revision, CAPS[caps], tmp_path, body)
    assert target.read_text() == SOURCE.replace("hello", "bye")
    methods = ed.methods()
    fs = caps != "none" and not v2
    terminal = caps == "fs+terminal" and not v2
    assert ("fs/read_text_file" in methods) is fs
    assert ("fs/write_text_file" in methods) is fs
    assert any(m.startswith("terminal/") for m in methods) is terminal
    if terminal:  # created, waited for, released
        assert [m for m in methods if m.startswith("terminal/")] == [
            "terminal/create",
            "terminal/wait_for_exit",
            "terminal/release",
        ]
        assert ed.serves.released == {"term-1"}
    assert methods.count("session/request_permission") == 1
    perm = next(r["params"] for r in ed.requests if r["method"] == "session/request_permission")
    assert {"allow_once", "reject_once"} <= {o["kind"] for o in perm["options"]}

    kinds = ed.kinds()
    plan_tag = "plan_update" if v2 else "plan"
    assert plan_tag in kinds and "agent_thought_chunk" in kinds
    plans = [u for u in ed.updates if u["sessionUpdate"] == plan_tag]
    entries = plans[0]["plan"]["entries"] if v2 else plans[0]["entries"]
    assert len(entries) == 3
    calls = [u for u in ed.updates if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
    edit = calls[0]
    assert edit["sessionUpdate"] == ("tool_call_update" if v2 else "tool_call")
    assert edit["kind"] == "edit" and edit["locations"] == [{"path": str(target)}]
    diff = edit["content"][0]
    assert diff["type"] == "diff"
    if v2:
        assert diff["changes"] == [{"operation": "modify", "path": str(target)}]
        assert "-    return 'hello'" in diff["patch"]["text"]
        assert "+    return 'bye'" in diff["patch"]["text"]
    else:
        assert diff["path"] == str(target) and diff["oldText"] == SOURCE
        assert diff["newText"] == SOURCE.replace("hello", "bye")
    ends = [c.get("status") for c in calls if c["toolCallId"] == edit["toolCallId"]]
    assert ends[-1] == "completed"
    executes = [c for c in calls if c.get("kind") == "execute"]
    assert bool(executes) is terminal
    if terminal:
        assert executes[0]["content"] == [{"type": "terminal", "terminalId": "term-1"}]
        done = [c for c in calls if c["toolCallId"] == executes[0]["toolCallId"]]
        assert done[-1]["status"] == "completed"
    summary = ed.texts()[-1]
    assert summary.startswith("Replaced 1 occurrence of `hello` in app.py")
    assert ("(compiles)" in summary) is terminal


@pytest.mark.parametrize("revision", ["v1", "v2"])
def test_coder_rejected_edit_leaves_the_file_untouched(
    coder: Any, tmp_path: Path, revision: str
) -> None:
    target = tmp_path / "app.py"
    target.write_text(SOURCE)

    async def body(ed: Editor, sid: str) -> Editor:
        ed.permit = "reject_once"
        reason = await ed.prompt(sid, "replace `hello` with `bye` in app.py", v2=revision == "v2")
        assert reason == "end_turn"
        return ed

    ed = _run(coder, revision, CAPS["fs+terminal"], tmp_path, body)
    assert target.read_text() == SOURCE
    assert "fs/write_text_file" not in ed.methods()
    assert not any(m.startswith("terminal/") for m in ed.methods())
    calls = [u for u in ed.updates if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
    assert calls[-1]["status"] == "failed"
    assert "rejected" in ed.texts()[-1]


def test_a_refused_write_fails_the_tool_call_and_the_turn_goes_on(
    coder: Any, tmp_path: Path
) -> None:
    """The edit allowed, then the write refused by the client (the interactive client's
    answer `n`, with its code): the agent's turn ends normally, the edit tool call fails,
    the file is untouched (before: the refusal was -32000, ACP's auth_required, and the
    coder let it end the turn as an error)."""
    from runtime.client.client_tools import REFUSED
    from runtime.wire.errors import AUTH_REQUIRED

    assert REFUSED != AUTH_REQUIRED and not -32768 <= REFUSED <= -32000
    target = tmp_path / "app.py"
    target.write_text(SOURCE)

    async def body(ed: Editor, sid: str) -> Editor:
        ed.refuse_writes = REFUSED
        reason = await ed.prompt(sid, "replace `hello` with `bye` in app.py", v2=False)
        assert reason == "end_turn"
        return ed

    ed = _run(coder, "v1", CAPS["fs"], tmp_path, body)
    assert target.read_text() == SOURCE
    assert "fs/write_text_file" in ed.methods()
    calls = [u for u in ed.updates if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
    assert calls[-1]["status"] == "failed"
    assert "not written (refused: the user said no)" in ed.texts()[-1]


def test_coder_old_text_not_found_makes_no_edit(coder: Any, tmp_path: Path) -> None:
    target = tmp_path / "app.py"
    target.write_text(SOURCE)

    async def body(ed: Editor, sid: str) -> Editor:
        assert await ed.prompt(sid, "replace `nowhere` with `x` in app.py", v2=False) == "end_turn"
        return ed

    ed = _run(coder, "v1", CAPS["fs+terminal"], tmp_path, body)
    assert target.read_text() == SOURCE
    assert ed.methods() == ["fs/read_text_file"]
    assert not [u for u in ed.updates if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
    assert "is not in app.py" in ed.texts()[-1]


@pytest.mark.parametrize("revision", ["v1", "v2"])
def test_coder_commands_modes_and_undo(coder: Any, tmp_path: Path, revision: str) -> None:
    """/help and /undo are advertised after session/new; the ask mode (v1 session/set_mode,
    v2 the `mode` config option of category mode) shows the diff and writes nothing;
    /undo puts the last edit back."""
    target = tmp_path / "app.py"
    target.write_text(SOURCE)
    v2 = revision == "v2"
    package, env = coder(revision)

    async def go() -> None:
        ed = await Editor.start(env, package, tmp_path)
        try:
            await ed.initialize(2 if v2 else 1, CAPS["fs"])
            new = await ed.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
            sid = new["sessionId"]
            if v2:
                (mode,) = [o for o in new["configOptions"] if o["configId"] == "mode"]
                assert mode["category"] == "mode" and mode["currentValue"] == "code"
                assert [o["value"] for o in mode["options"]] == ["code", "ask"]
            else:
                assert new["modes"]["currentModeId"] == "code"
                assert [m["id"] for m in new["modes"]["availableModes"]] == ["code", "ask"]
            await ed.updated.until(
                "the available commands", lambda: "available_commands_update" in ed.kinds()
            )
            (cmds,) = [u for u in ed.updates if u["sessionUpdate"] == "available_commands_update"]
            assert [c["name"] for c in cmds["availableCommands"]] == ["help", "undo"]

            assert await ed.prompt(sid, "/help", v2=v2) == "end_turn"
            assert "replace `OLD` with `NEW` in PATH" in ed.texts()[-1]

            if v2:
                r = await ed.call(
                    "session/set_config_option",
                    {"sessionId": sid, "configId": "mode", "type": "id", "value": "ask"},
                )
                assert r["configOptions"][0]["currentValue"] == "ask"
            else:
                await ed.call("session/set_mode", {"sessionId": sid, "modeId": "ask"})
            await ed.prompt(sid, "replace `hello` with `bye` in app.py", v2=v2)
            assert target.read_text() == SOURCE
            assert "session/request_permission" not in ed.methods()
            assert "Ask mode" in ed.texts()[-1]

            if v2:
                await ed.call(
                    "session/set_config_option",
                    {"sessionId": sid, "configId": "mode", "type": "id", "value": "code"},
                )
            else:
                await ed.call("session/set_mode", {"sessionId": sid, "modeId": "code"})
            await ed.prompt(sid, "replace `hello` with `bye` in app.py", v2=v2)
            assert target.read_text() == SOURCE.replace("hello", "bye")
            await ed.prompt(sid, "/undo", v2=v2)
            assert target.read_text() == SOURCE
            assert ed.texts()[-1].startswith("Undid the last edit")
            await ed.prompt(sid, "/undo", v2=v2)
            assert ed.texts()[-1] == "Nothing to undo in this session."
        finally:
            err = await ed.stop()
            assert b"Traceback" not in err, err.decode()

    asyncio.run(go())


def test_coder_refuses_a_path_outside_the_session_folder(coder: Any, tmp_path: Path) -> None:
    inside = tmp_path / "work"
    inside.mkdir()
    outside = tmp_path / "secret.py"
    outside.write_text(SOURCE)

    async def body(ed: Editor, sid: str) -> Editor:
        await ed.prompt(sid, "replace `hello` with `bye` in ../secret.py", v2=False)
        return ed

    ed = _run(coder, "v1", {}, inside, body)
    assert outside.read_text() == SOURCE
    assert ed.methods() == []
    assert "outside the session's folder" in ed.texts()[-1]


@pytest.mark.parametrize("caps", ["none", "fs"])
def test_coder_missing_file_is_a_message(coder: Any, tmp_path: Path, caps: str) -> None:
    """A file that does not exist (on disk, or the client's fs/read_text_file error):
    the turn ends normally with a message, nothing is written."""

    async def body(ed: Editor, sid: str) -> Editor:
        assert await ed.prompt(sid, "replace `a` with `b` in gone.py", v2=False) == "end_turn"
        return ed

    ed = _run(coder, "v1", CAPS[caps], tmp_path, body)
    assert ed.texts()[-1].startswith("Cannot read gone.py")
    assert not (tmp_path / "gone.py").exists()
    assert ed.methods() == (["fs/read_text_file"] if caps == "fs" else [])
