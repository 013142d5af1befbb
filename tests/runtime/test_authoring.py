"""The Turn authoring API (runtime/agent/authoring.py, clientcalls.py, commands.py) in process:
one handler that uses every call, on v1 and v2 (what each sends is schema-checked by the
wire check, tests/conftest.py); `ClientCapabilityMissing` before anything is sent; the
wire check refusing an agent-to-client request the client did not declare; a cancelled
turn cancelling its client requests and killing and releasing its terminals; and the
handler passing `mypy --strict`."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hardening_support as hs
import mypy_support
import orjson
import pytest

MANIFEST: dict[str, Any] = {
    "name": "author-agent",
    "version": "0.1.0",
    "commands": [{"name": "go", "description": "Use everything", "input_hint": "what"}],
    "modes": [{"id": "code", "name": "Code", "default": True}, {"id": "ask", "name": "Ask"}],
    "config": {
        "options": [
            {"id": "model", "type": "choice", "values": ["small", "large"], "category": "model"}
        ]
    },
}

# Every Turn call; on a revision or client without fs/terminal, each ClientCapabilityMissing
# is reported as text (one handler for every revision).
HANDLERS = """
from __future__ import annotations

import asyncio
from typing import Any

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent.agent import Turn
from ._generated.runtime.agent.authoring import (
    BlockContent,
    DiffContent,
    Location,
    PlanEntry,
    TerminalContent,
    TextContent,
)
from ._generated.runtime.agent.clientcalls import (
    ClientCapabilityMissing,
    ExitStatus,
    PermissionOption,
    PermissionOutcome,
    TerminalOutput,
)

OPTIONS = [
    PermissionOption("yes", "Yes", "allow_once"),
    PermissionOption("always", "Always", "allow_always"),
    PermissionOption("no", "No", "reject_once"),
    PermissionOption("never", "Never", "reject_always"),
]


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        text = "".join(b.get("text", "") for b in input if b.get("type") == "text")
        if text == "raw-fs":  # past the gate: the wire check must refuse it
            try:
                await turn._conn.request(
                    "fs/read_text_file", {"sessionId": turn.session_id, "path": "/x"}
                )
            except Exception as exc:
                await turn.send_text("raised " + type(exc).__name__)
            return
        if text == "hang":  # a terminal left open, waiting: the client cancels the turn
            term = await turn.create_terminal("sleep", ["60"])
            await turn.send_text("waiting " + term.id)
            await term.wait_for_exit()
            return
        if text == "hang-block":
            async with turn.terminal("sleep", ["60"]) as term:
                await turn.send_text("waiting " + term.id)
                await term.wait_for_exit()
            return
        await self.everything(turn)

    async def everything(self, turn: Turn) -> None:
        command = turn.command
        assert command is not None and command.name == "go"
        await turn.send_text(f"command {command.args}")
        await turn.send_content({"type": "text", "text": "a block"})
        await turn.send_content(
            {"type": "resource_link", "uri": "file:///tmp/a.txt", "name": "a.txt"}
        )
        await turn.send_thought("thinking")
        await turn.set_plan([PlanEntry("one", "high"), "two", PlanEntry("three", "low")])
        await turn.update_plan_entry(0, status="in_progress")
        await turn.update_plan_entry(0, status="completed", content="one, done")
        call = await turn.start_tool_call(
            "Read a.txt", kind="read", locations=[Location("a.txt", 3)], raw_input={"p": 1}
        )
        await call.update(status="in_progress", content=[TextContent("reading")])
        await call.update(
            content=[
                DiffContent("a.txt", "old\\n", "new\\n"),
                DiffContent("b.txt", None, "fresh\\n"),
                BlockContent({"type": "text", "text": "block"}),
            ]
        )
        await call.complete(raw_output={"ok": True})
        async with turn.tool_call("Think", kind="think") as thinking:
            await thinking.update(title="Thinking hard")
        try:
            async with turn.tool_call("Fail", kind="other"):
                raise ValueError("boom")
        except ValueError:
            pass
        await turn.report_usage(120, 1000, cost=0.25)
        await turn.set_title("A session")
        await turn.set_mode("ask")
        await turn.send_text(f"mode {turn.mode}")
        names = [s.name for s in turn.mcp_servers]
        await turn.send_text(f"mcp {names}")
        await turn.send_text(f"cwd {turn.cwd}")
        try:
            content = await turn.read_text_file("a.txt", line=1, limit=10)
            await turn.send_text(f"read {content}")
            await turn.write_text_file("a.txt", "new")
        except ClientCapabilityMissing as exc:
            await turn.send_text(f"missing {exc.capability}")
        try:
            async with turn.terminal(
                "echo", ["hi"], env={"A": "1"}, cwd=".", output_byte_limit=1000
            ) as term:
                await turn.start_tool_call(
                    "echo", kind="execute", content=[TerminalContent(term.id)]
                )
                out: TerminalOutput = await term.output()
                status: ExitStatus = await term.wait_for_exit()
                await term.kill()
                await turn.send_text(f"terminal {out.output} {status.exit_code}")
        except ClientCapabilityMissing as exc:
            await turn.send_text(f"missing {exc.capability}")
        answer: PermissionOutcome = await turn.request_permission(OPTIONS, tool_call=call)
        await turn.send_text(f"permission {answer.option_id} {answer.allowed}")
        other = await turn.request_permission(OPTIONS[2:], title="Again?")
        await turn.send_text(f"permission {other.cancelled}")
        await asyncio.sleep(0)
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    """built(rev) -> (package, tmp): the agent on that revision, importable in process."""
    tmp = tmp_path_factory.mktemp("authoring")
    done: dict[str, str] = {}

    def get(rev: str) -> tuple[str, Path]:
        if rev not in done:
            package = "author_" + rev.replace("-", "_")
            version, unstable = rev.split("-", maxsplit=1)[0], rev.endswith("unstable")
            hs.build(
                tmp,
                shared_acp,
                package,
                rev=version,
                unstable=unstable,
                manifest=MANIFEST,
                handlers=HANDLERS,
            )
            done[rev] = package
        return done[rev], tmp

    return get


Answer = Callable[[dict[str, Any]], Any]


class Client:
    """The client end, in process: answers the agent's requests from `answers` (a
    method with no entry is never answered)."""

    def __init__(self, package: str, tmp: Path, answers: dict[str, Answer]) -> None:
        handlers = hs.load(tmp, package)
        self.serve = hs.runtime_of(package, "serve")
        self.out: list[dict[str, Any]] = []
        self.answers = answers
        self.changed = asyncio.Event()

        async def sink(batch: list[tuple[bytes, Any]]) -> None:
            for frame, _ in batch:
                msg = orjson.loads(frame)
                self.out.append(msg)
                self.changed.set()
                answer = self.answers.get(msg.get("method", ""))
                if "id" in msg and "method" in msg and answer is not None:
                    reply = {"jsonrpc": "2.0", "id": msg["id"], "result": answer(msg["params"])}
                    asyncio.get_running_loop().call_soon(self.conn.feed, orjson.dumps(reply))

        self.conn = self.serve.agent_connection(handlers.Agent(), sink)

    def feed(self, msg: dict[str, Any]) -> None:
        self.conn.feed(orjson.dumps({"jsonrpc": "2.0", **msg}))

    async def wait(self, pred: Callable[[], Any], timeout: float = 10) -> Any:
        async with asyncio.timeout(timeout):
            while not (found := pred()):
                self.changed.clear()
                await self.changed.wait()
            return found

    def answer_to(self, rid: Any) -> Any:
        return next((m for m in self.out if m.get("id") == rid and "method" not in m), None)

    async def call(self, rid: Any, method: str, params: Any) -> dict[str, Any]:
        self.feed({"id": rid, "method": method, "params": params})
        msg = await self.wait(lambda: self.answer_to(rid))
        assert "result" in msg, msg
        return dict(msg["result"])

    def updates(self) -> list[dict[str, Any]]:
        return [m["params"]["update"] for m in self.out if m.get("method") == "session/update"]

    def texts(self) -> list[str]:
        return [
            u["content"]["text"]
            for u in self.updates()
            if u["sessionUpdate"] == "agent_message_chunk" and u["content"]["type"] == "text"
        ]

    def requests(self) -> list[str]:
        return [m["method"] for m in self.out if "method" in m and "id" in m]

    async def session(self, v2: bool, caps: dict[str, Any], cwd: str, *, mcp: bool = True) -> str:
        if v2:
            init = {"protocolVersion": 2, "info": {"name": "t", "version": "1"}}
            init["capabilities"] = caps
        else:
            init = {"protocolVersion": 1, "clientInfo": {"name": "t", "version": "1"}}
            init["clientCapabilities"] = caps
        await self.call("i", "initialize", init)
        # a server that does not exist: the session goes on, told so (mcp_servers.py)
        servers = [{"name": "files", "command": "/bin/mcp-files", "args": [], "env": []}]
        if v2:
            servers[0]["type"] = "stdio"
        new = await self.call(
            "n", "session/new", {"cwd": cwd, "mcpServers": servers if mcp else []}
        )
        return str(new["sessionId"])


FS_TERMINAL = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}
SERVED: dict[str, Answer] = {
    "fs/read_text_file": lambda p: {"content": "file text"},
    "fs/write_text_file": lambda p: {},
    "terminal/create": lambda p: {"terminalId": "t1"},
    "terminal/output": lambda p: {
        "output": "hi",
        "truncated": False,
        "exitStatus": {"exitCode": 0},
    },
    "terminal/wait_for_exit": lambda p: {"exitCode": 0},
    "terminal/kill": lambda p: {},
    "terminal/release": lambda p: {},
    "session/request_permission": lambda p: (
        {"outcome": {"outcome": "selected", "optionId": "yes"}}
        if len(p["options"]) == 4
        else {"outcome": {"outcome": "cancelled"}}
    ),
}


@pytest.mark.parametrize("rev", ["v1", "v1-unstable", "v2"])
def test_every_turn_call_maps_onto_the_revision(built: Any, rev: str) -> None:
    package, tmp = built(rev)
    v2 = rev == "v2"

    async def main() -> Client:
        c = Client(package, tmp, SERVED)
        sid = await c.session(v2, FS_TERMINAL, "/work/dir")
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "/go far away"}]}
        await c.call("p", "session/prompt", prompt)
        if v2:
            await c.wait(
                lambda: [u for u in c.updates() if u.get("state") == "idle"],
            )
        await c.conn.close()
        return c

    c = asyncio.run(main())
    # the session's MCP server does not exist: told once (runtime/agent/mcp_servers.py)
    reports = [t for t in c.texts() if t.startswith("MCP server")]
    told = "MCP server 'files' could not start: FileNotFoundError: No such file or directory."
    assert reports == [told + " The session goes on without it.\n"]
    texts = [t for t in c.texts() if t not in reports]
    assert texts[0] == "command far away"
    assert "mode ask" in texts and "mcp ['files']" in texts and "cwd /work/dir" in texts
    kinds = [u["sessionUpdate"] for u in c.updates()]
    assert "agent_thought_chunk" in kinds and "usage_update" in kinds
    assert "session_info_update" in kinds
    calls = [u for u in c.updates() if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
    statuses = {u.get("title"): u.get("status") for u in calls if u.get("title")}
    assert statuses["Fail"] == "in_progress"  # its start; its end is by id below
    fail_id = next(u["toolCallId"] for u in calls if u.get("title") == "Fail")
    assert [u.get("status") for u in calls if u["toolCallId"] == fail_id][-1] == "failed"
    read = next(u for u in calls if u.get("title") == "Read a.txt")
    assert read["locations"] == [{"path": "/work/dir/a.txt", "line": 3}]
    perms = [m["params"] for m in c.out if m.get("method") == "session/request_permission"]
    assert [o["kind"] for o in perms[0]["options"]] == [
        "allow_once",
        "allow_always",
        "reject_once",
        "reject_always",
    ]
    assert "permission yes True" in texts and "permission True" in texts
    if v2:
        assert "plan_update" in kinds and "tool_call" not in kinds
        assert "config_option_update" in kinds  # set_mode: the `mode` option
        assert "missing fs/read_text_file" in texts and "missing terminal/create" in texts
        assert not [m for m in c.requests() if m.startswith(("fs/", "terminal/"))]
        assert perms[0]["title"] == "Read a.txt"
        assert perms[0]["subject"]["toolCall"]["toolCallId"] == read["toolCallId"]
    else:
        assert "plan" in kinds and "current_mode_update" in kinds
        assert "read file text" in texts and "terminal hi 0" in texts
        assert [m for m in c.requests() if m.startswith(("fs/", "terminal/"))] == [
            "fs/read_text_file",
            "fs/write_text_file",
            "terminal/create",
            "terminal/output",
            "terminal/wait_for_exit",
            "terminal/kill",
            "terminal/release",
        ]
        assert perms[0]["toolCall"]["toolCallId"] == read["toolCallId"]
        create = next(m["params"] for m in c.out if m.get("method") == "terminal/create")
        assert create["env"] == [{"name": "A", "value": "1"}] and create["cwd"] == "/work/dir"


@pytest.mark.parametrize("caps", [{}, {"fs": {"readTextFile": True}}])
def test_undeclared_capability_raises_before_sending(built: Any, caps: dict[str, Any]) -> None:
    """Not declared: ClientCapabilityMissing names the capability; nothing is sent."""
    package, tmp = built("v1")

    async def main() -> Client:
        c = Client(package, tmp, SERVED)
        sid = await c.session(False, caps, "/w")
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "/go"}]}
        await c.call("p", "session/prompt", prompt)
        await c.conn.close()
        return c

    c = asyncio.run(main())
    texts = c.texts()
    if caps:  # read declared, write not
        assert "read file text" in texts and "missing fs.writeTextFile" in texts
        assert [m for m in c.requests() if m.startswith("fs/")] == ["fs/read_text_file"]
    else:
        assert "missing fs.readTextFile" in texts
        assert not [m for m in c.requests() if m.startswith("fs/")]
    assert "missing terminal" in texts
    assert not [m for m in c.requests() if m.startswith("terminal/")]


def test_wire_check_refuses_an_undeclared_client_request(
    built: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request past the gate (the raw connection) whose capability the client did not
    declare is a violation: raised in the handler, recorded."""
    log = tmp_path / "violations.jsonl"
    monkeypatch.setenv("ACP_WIRE_CHECK", "1")
    monkeypatch.setenv("ACP_WIRE_CHECK_LOG", str(log))
    package, tmp = built("v1")

    async def main() -> Client:
        c = Client(package, tmp, SERVED)
        sid = await c.session(False, {}, "/w")
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "raw-fs"}]}
        await c.call("p", "session/prompt", prompt)
        await c.conn.close()
        return c

    c = asyncio.run(main())
    assert [t for t in c.texts() if not t.startswith("MCP server")] == ["raised WireCheckError"]
    found = [json.loads(line)["violation"] for line in log.read_text().splitlines()]
    assert len(found) == 1
    assert "'fs/read_text_file' needs the client capability fs.readTextFile" in found[0]
    assert "fs/read_text_file" not in c.requests()


@pytest.mark.parametrize("text", ["hang", "hang-block"])
def test_cancel_reaches_client_calls_and_terminals(built: Any, text: str) -> None:
    """session/cancel while the handler waits on a client terminal: the pending request
    is cancelled ($/cancel_request), the terminal killed and released, the turn ends
    cancelled."""
    package, tmp = built("v1")
    answers = {k: v for k, v in SERVED.items() if k != "terminal/wait_for_exit"}

    async def main() -> Client:
        c = Client(package, tmp, answers)
        sid = await c.session(False, FS_TERMINAL, "/w")
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        c.feed({"id": "p", "method": "session/prompt", "params": prompt})
        await c.wait(lambda: "terminal/wait_for_exit" in c.requests())
        c.feed({"method": "session/cancel", "params": {"sessionId": sid}})
        answer = await c.wait(lambda: c.answer_to("p"))
        assert answer["result"]["stopReason"] == "cancelled"
        await c.conn.close()
        return c

    c = asyncio.run(main())
    wait_id = next(m["id"] for m in c.out if m.get("method") == "terminal/wait_for_exit")
    cancels = [m["params"] for m in c.out if m.get("method") == "$/cancel_request"]
    assert cancels == [{"requestId": wait_id}]
    assert c.requests()[-2:] == ["terminal/kill", "terminal/release"]


def test_a_handler_using_every_turn_call_passes_mypy_strict(built: Any, tmp_path: Path) -> None:
    """The handler checked as its project checks it (strict); the generated code it
    imports is read, not reported here."""
    package, tmp = built("v1")
    config = tmp_path / "pyproject.toml"
    config.write_text(mypy_support.project_config(silent=[f"{package}.*"]), encoding="utf-8")
    r = mypy_support.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "-m", f"{package}.handlers"],
        kind="project",
        cwd=tmp,
        env={**os.environ, "MYPYPATH": str(tmp)},
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_commands_and_modes_after_session_new_and_load(built: Any) -> None:
    """v1: `modes` in the session/new and session/load answers; the commands advertised
    after the session/new answer (so the client knows the session) and before the
    session/load answer (nothing of a load comes after it); the prompt's
    `/go` parsed; the config option's category sent."""
    package, tmp = built("v1")

    async def main() -> Client:
        c = Client(package, tmp, SERVED)
        sid = await c.session(False, {}, "/w", mcp=False)
        load = {"sessionId": sid, "cwd": "/w", "mcpServers": []}
        c.feed({"id": "l", "method": "session/load", "params": load})
        await c.wait(lambda: c.answer_to("l"))
        await c.wait(lambda: len([u for u in c.updates() if "availableCommands" in u]) == 2)
        await c.conn.close()
        return c

    c = asyncio.run(main())
    order = [
        m.get("id") or m["params"]["update"]["sessionUpdate"]
        for m in c.out
        if m.get("id") in ("n", "l") or m.get("method") == "session/update"
    ]
    # a new session's commands follow its answer; a loaded one's precede it (ACP-LOAD-002)
    assert order == ["n", "available_commands_update", "available_commands_update", "l"]
    new, load = c.answer_to("n")["result"], c.answer_to("l")["result"]
    for answer in (new, load):
        assert answer["modes"]["currentModeId"] == "code"
        assert [m["id"] for m in answer["modes"]["availableModes"]] == ["code", "ask"]
        (model,) = answer["configOptions"]
        assert model["category"] == "model"
    (cmd,) = c.updates()[0]["availableCommands"]
    assert cmd == {"name": "go", "description": "Use everything", "input": {"hint": "what"}}
