"""`agentgen inspect` without a browser: the page's WebSocket protocol driven directly
(events in, operations out) against the echo agent, the wire view's verdicts and
pointers, and the browser the inspector opens (`BROWSER` honoured)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest
import websockets
from inspect_support import PY, build_example, inspector, load_schema_file, schema_path

from generator.inspect.bridge import problem_pointer


class Page:
    """What the page does over its socket: sends operations, collects events."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self.refs = 0

    async def until(self, pred: Any) -> dict[str, Any]:
        for event in self.events:
            if pred(event):
                return event
        while True:
            event = json.loads(await asyncio.wait_for(self.ws.recv(), 20))
            self.events.append(event)
            if pred(event):
                return event

    async def op(self, kind: str, **data: Any) -> dict[str, Any]:
        self.refs += 1
        ref = self.refs
        await self.ws.send(json.dumps({"op": kind, "ref": ref, **data}))
        return await self.until(lambda e: e["kind"] == "reply" and e["ref"] == ref)


def test_the_socket_drives_the_echo_agent_and_marks_every_frame(
    tmp_path: Path, shared_acp: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    schema = schema_path(shared_acp)
    env = build_example(tmp_path, load_schema_file(schema), "echo", "echo_socket")
    cache = tmp_path_factory.getbasetemp() / "inspect-cache"
    with inspector(
        "--schema", str(schema), "--", PY, "-m", "echo_socket", cwd=tmp_path, cache=cache, env=env
    ) as running:

        async def session() -> Page:
            url = f"ws://127.0.0.1:{running.port}/ws?token={running.token}"
            async with websockets.connect(url, origin=running.base) as ws:
                page = Page(ws)
                init = await page.until(lambda e: e["kind"] == "initialized")
                assert init["facts"]["protocolVersion"] == 1
                assert init["result"]["agentInfo"]["name"] == "echo-agent"
                new = await page.op(
                    "call", method="session/new", params={"cwd": str(tmp_path), "mcpServers": []}
                )
                sid = new["result"]["sessionId"]
                text = {"type": "text", "text": "hi there"}
                resource = {
                    "type": "resource",
                    "resource": {
                        "uri": f"file://{tmp_path}/a.txt",
                        "mimeType": "text/plain",
                        "text": "a",
                    },
                }
                done = await page.op(
                    "call",
                    method="session/prompt",
                    params={"sessionId": sid, "prompt": [text, resource]},
                )
                assert done["result"] == {"stopReason": "end_turn"}
                # an unknown method: the agent's error comes back to the page
                err = await page.op("call", method="_nope/x", params={})
                assert err["error"]["code"] == -32601
                return page

        page = asyncio.run(session())
    frames = [e for e in page.events if e["kind"] == "frame"]
    assert [f["dir"] for f in frames[:2]] == ["out", "in"]
    assert frames[0]["msg"]["method"] == "initialize" and frames[1]["method"] == "initialize"
    assert all(f["problems"] == [] for f in frames), [f for f in frames if f["problems"]]
    echoed = [
        f["msg"]["params"]["update"]["content"]["text"]
        for f in frames
        if f["dir"] == "in"
        and f["msg"].get("method") == "session/update"
        and f["msg"]["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    ]
    assert echoed == ["hi there"]
    sizes = [f["size"] for f in frames]
    assert all(s > 0 for s in sizes)


def test_problem_pointer_walks_the_frame_not_the_union_branch_names() -> None:
    msg = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"update": {"sessionUpdate": "plan", "entries": [{"content": 1}]}},
    }
    text = "session/update params (SessionNotification) /update/plan/entries/0/content: Input should be a valid string"
    assert problem_pointer(msg, text) == "/params/update/entries/0/content"
    # a missing field: the pointer of the object that lacks it
    missing = "initialize result (InitializeResponse) /protocolVersion: Field required"
    assert problem_pointer({"jsonrpc": "2.0", "id": 1, "result": {}}, missing) == "/result"
    # a frame-level problem points at the frame itself
    assert problem_pointer({"jsonrpc": "1.0", "method": "x"}, '"jsonrpc" must be "2.0"') == ""
    assert problem_pointer("not an object", "a frame must be a JSON object") == ""


def test_the_browser_named_by_BROWSER_gets_the_url(
    tmp_path: Path, shared_acp: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "fake-browser"
    browser.write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "BROWSER": f"{browser} %s"}
    agent = tmp_path / "idle_agent.py"
    agent.write_text("import sys\nsys.stdin.read()\n")
    cache = tmp_path_factory.getbasetemp() / "inspect-cache"
    with inspector(
        "--schema",
        str(schema_path(shared_acp)),
        "--",
        PY,
        str(agent),
        cwd=tmp_path,
        cache=cache,
        env=env,
        open_browser=True,
    ) as running:
        deadline = time.monotonic() + 20
        # a poll: another process writes the file, 0.3 s after the inspector serves
        while not (opened.exists() and opened.read_text().strip()):
            assert time.monotonic() < deadline, "the browser was not opened"
            time.sleep(0.05)
        assert opened.read_text().strip() == running.url


def test_sigterm_ends_the_inspector_and_its_agent(
    tmp_path: Path, shared_acp: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    pid_file = tmp_path / "agent.pid"
    agent = tmp_path / "stubborn_agent.py"  # ignores the end of its stdin
    agent.write_text(
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n"
    )
    cache = tmp_path_factory.getbasetemp() / "inspect-cache"
    with inspector(
        "--schema", str(schema_path(shared_acp)), "--", PY, str(agent), cwd=tmp_path, cache=cache
    ) as running:
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text()):  # a poll: another process
            assert time.monotonic() < deadline, "the agent did not start"
            time.sleep(0.05)
        pid = int(pid_file.read_text())
        running.proc.terminate()
        assert running.proc.wait(20) == 0, "".join(running.stderr)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_an_agent_that_cannot_start_is_named_on_stderr(
    tmp_path: Path, shared_acp: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cache = tmp_path_factory.getbasetemp() / "inspect-cache"
    missing = str(tmp_path / "no-such-agent")
    with inspector(
        "--schema", str(schema_path(shared_acp)), "--", missing, cwd=tmp_path, cache=cache
    ) as running:
        line = running.wait_stderr("agentgen inspect: cannot start the agent")
    assert (
        line == f"agentgen inspect: cannot start the agent `{missing}`: No such file or directory\n"
    )


def test_a_v2_agent_under_the_default_schema_names_the_inspect_that_speaks_it(
    tmp_path: Path, shared_acp: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Issue 37 item 5: inspect started for v1 (the locked default's revision) facing a
    v2-only agent says the command that speaks v2 (before: only "the agent speaks protocol
    version 2; this client speaks 1")."""
    from inspect_support import build_example

    env = build_example(
        tmp_path, load_schema_file(shared_acp / "v2" / "schema.json"), "echo", "echo_two"
    )
    cache = tmp_path_factory.getbasetemp() / "inspect-cache"
    with inspector(
        *("--schema", str(schema_path(shared_acp)), "--", PY, "-m", "echo_two"),
        cwd=tmp_path,
        cache=cache,
        env=env,
    ) as running:
        line = running.wait_stderr("agentgen inspect: the agent speaks")
    assert line == (
        "agentgen inspect: the agent speaks ACP protocol version 2; this inspector was started "
        "for version 1 (its --schema, else the locked default): run "
        f"`agentgen inspect --schema v2 -- {PY} -m echo_two`\n"
    )
