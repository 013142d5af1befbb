"""The coder example (examples/coder) driven by the official SDK clients: the TypeScript
SDK 2.4.0 (`client()`, tests/peers/ts_client.mjs) on v1, serving fs and terminal from a
temp folder, and on v2 (which has neither: the agent reads and writes on disk); the
Python SDK 0.12.1 (`acp`) on v1.  Each sees the whole turn: the plan, the thought, the
edit tool call with its diff, the permission request with the agent's options, the file
edited, and on v1 the compile `execute` tool call with the client's terminal in it.
Every frame our runtime writes or reads is schema-checked (tests/conftest.py)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, cast

import pytest
import ts_peer
from coder_support import PY, SERVED, FsAndTerminal, build_coder
from sdk_editor import SdkEditor
from ts_peer import TsClient

pytestmark = pytest.mark.slow

SOURCE = "def greet():\n    return 'hello'\n"
PROMPT = "replace `hello` with `bye` in app.py"
FS_TERMINAL = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}


@pytest.fixture(scope="module")
def sdk_root() -> Path:
    return ts_peer.install()


def _init(revision: str) -> dict[str, Any]:
    if revision == "v2":  # v2 has no fs/terminal capabilities
        return {"protocolVersion": 2, "info": {"name": "ts", "version": "1"}, "capabilities": {}}
    return {
        "protocolVersion": 1,
        "clientInfo": {"name": "ts", "version": "1"},
        "clientCapabilities": FS_TERMINAL,
    }


@pytest.mark.parametrize("revision", ["v1", "v2"])
def test_ts_client_sees_the_whole_coder_turn(sdk_root: Path, tmp_path: Path, revision: str) -> None:
    schema = json.loads(ts_peer.schema_file(sdk_root, revision).read_text())
    package = f"ts_coder_{revision}"
    env = build_coder(tmp_path / "agent", schema, package)
    work = tmp_path / "work"
    work.mkdir()
    target = work / "app.py"
    target.write_text(SOURCE)
    serves = FsAndTerminal(work)
    v1 = revision == "v1"

    async def go() -> tuple[TsClient, dict[str, Any]]:
        api = ts_peer.REVISIONS[revision][0]
        client = await TsClient.start(
            sdk_root, api, [PY, "-m", package], {**env, "ACP_TS_FORWARD": ",".join(SERVED)}
        )
        client.serve = serves.serve
        try:
            allow = {"outcome": {"outcome": "selected", "optionId": "allow"}}
            await client.call("answer", method="session/request_permission", result=allow)
            await client.request("initialize", _init(revision))
            started = await client.call("session", request={"cwd": str(work), "mcpServers": []})
            got = await client.call("session_prompt", session=started["sessionId"], text=PROMPT)
            return client, dict(got)
        finally:
            code, err = await client.close()
            assert code == 0 and "Traceback" not in err, err

    client, got = asyncio.run(go())
    assert client.sdk_errors == []
    assert target.read_text() == SOURCE.replace("hello", "bye")
    assert "Replaced 1 occurrence of `hello` in app.py" in got["text"]
    updates = [u["update"] for u in client.updates]
    kinds = [u["sessionUpdate"] for u in updates]
    assert ("plan" if v1 else "plan_update") in kinds
    assert "agent_thought_chunk" in kinds
    calls = [u for u in updates if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
    edit = calls[0]
    assert edit["kind"] == "edit" and edit["content"][0]["type"] == "diff"
    assert edit["locations"] == [{"path": str(target)}]
    (perm,) = [r for r in client.requests if r["method"] == "session/request_permission"]
    assert {o["kind"] for o in perm["params"]["options"]} >= {"allow_once", "reject_once"}
    methods = [f["method"] for f in client.forwarded]
    if v1:
        assert methods == [
            "fs/read_text_file",
            "fs/write_text_file",
            "terminal/create",
            "terminal/wait_for_exit",
            "terminal/release",
        ]
        (execute,) = [c for c in calls if c.get("kind") == "execute"]
        assert execute["content"] == [{"type": "terminal", "terminalId": "term-1"}]
        assert "(compiles)" in got["text"]
    else:
        assert methods == []  # v2: neither fs nor terminal exists; done on disk
        assert not [c for c in calls if c.get("kind") == "execute"]


def test_python_sdk_client_sees_the_v1_coder_turn(tmp_path: Path) -> None:
    import acp
    from acp import schema as S

    from generator.sources import load_schema

    schema = dict(load_schema("npm:@agentclientprotocol/sdk@2.4.0#schema/v1/schema.json").data)
    env = build_coder(tmp_path / "agent", schema, "py_coder")
    work = tmp_path / "work"
    work.mkdir()
    target = work / "app.py"
    target.write_text(SOURCE)
    serves = FsAndTerminal(work)

    editor = SdkEditor(serves)

    async def go() -> str:
        log = tmp_path / "agent.log"
        with log.open("wb") as err:
            async with acp.spawn_agent_process(
                cast(Any, editor),
                PY,
                "-m",
                "py_coder",
                env=env,
                transport_kwargs={"stderr": err.fileno(), "shutdown_timeout": 10.0},
            ) as (conn, proc):
                caps = S.ClientCapabilities(
                    fs=S.FileSystemCapabilities(read_text_file=True, write_text_file=True),
                    terminal=True,
                )
                await asyncio.wait_for(
                    conn.initialize(protocol_version=1, client_capabilities=caps), 20
                )
                new = await asyncio.wait_for(conn.new_session(cwd=str(work), mcp_servers=[]), 20)
                answer = await asyncio.wait_for(
                    conn.prompt(session_id=new.session_id, prompt=[acp.text_block(PROMPT)]), 60
                )
            assert proc.returncode == 0  # stdin closed: the agent ends on EOF, cleanly
        assert "Traceback" not in log.read_text(), log.read_text()
        return str(answer.stop_reason)

    assert asyncio.run(go()) == "end_turn"
    assert target.read_text() == SOURCE.replace("hello", "bye")
    assert editor.calls == [
        "fs/read_text_file",
        "fs/write_text_file",
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/release",
    ]
    assert {"allow_once", "reject_once"} <= set(editor.options)
    kinds = [u["sessionUpdate"] for u in editor.updates]
    for kind in ("plan", "agent_thought_chunk", "tool_call", "tool_call_update"):
        assert kind in kinds, kinds
    starts = [u for u in editor.updates if u["sessionUpdate"] == "tool_call"]
    assert [s["kind"] for s in starts] == ["edit", "execute"]
    assert starts[0]["content"][0]["type"] == "diff"
    (shown,) = starts[1]["content"]
    assert (shown["type"], shown["terminalId"]) == ("terminal", "term-1")
    assert os.path.basename(starts[0]["locations"][0]["path"]) == "app.py"
