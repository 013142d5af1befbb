"""The MCP servers a client passes (runtime/mcp_servers.py, mcp_link.py), with real
processes: a generated agent run over stdio (v1 and v2) and over HTTP (WebSocket), MCP
servers made with the `mcp` package's MCPServer over stdio (a script) and streamable HTTP
(uvicorn on 127.0.0.1).  A handler lists and calls `turn.mcp` tools, each call shown as a
tool call; a server that cannot start or dies is reported once and the session goes on;
connections are closed on session/close and at EOF (no MCP process left); an HTTP agent
refuses stdio servers unless its operator allows them; header and env values reach the
servers and never the wire or the logs.  Every frame is schema-checked (ACP_WIRE_CHECK)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import hardening_support as hs
import mcp_support as ms
import pytest

HEADER_SECRET = "hdr-4f1c9b2e-secret"
ENV_SECRET = "env-7d2a6c0f-secret"

HANDLERS = """
from __future__ import annotations

import json
from typing import Any

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent import Turn
from ._generated.runtime.mcp_servers import McpToolError


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        text = "".join(b.get("text", "") for b in input if b.get("type") == "text")
        word, _, rest = text.partition(" ")
        if word == "tools":
            names = sorted(t.name for t in await turn.mcp.list_tools())
            await turn.send_text("tools " + ",".join(names))
        elif word == "call":
            name, _, args = rest.partition(" ")
            try:
                r = await turn.mcp.call(name, json.loads(args or "{}"))
            except McpToolError as exc:
                await turn.send_text(f"failed {exc}")
                return
            await turn.send_text(f"result {r.text()} error={r.is_error}")
        else:
            await turn.send_text("echo " + text)
"""

MANIFEST: dict[str, Any] = {"name": "mcp-agent", "version": "0.1.0"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    tmp = tmp_path_factory.mktemp("mcp_agent")
    out = {}
    for rev, unstable in (("v1", True), ("v2", False)):
        package = f"mcp_agent_{rev}"
        env = hs.build(
            tmp,
            shared_acp,
            package,
            rev=rev,
            unstable=unstable,
            manifest=MANIFEST,
            handlers=HANDLERS,
        )
        out[rev] = (env, package)
    return out


def _init(v2: bool) -> dict[str, Any]:
    if v2:
        return {"protocolVersion": 2, "info": {"name": "t", "version": "1"}, "capabilities": {}}
    return {
        "protocolVersion": 1,
        "clientInfo": {"name": "t", "version": "1"},
        "clientCapabilities": {},
    }


class Peer:
    """A stdio agent subprocess and the turns of its sessions."""

    def __init__(self, peer: hs.StdioPeer, v2: bool) -> None:
        self.peer = peer
        self.v2 = v2
        self.seen: list[dict[str, Any]] = []
        self.n = 100

    async def call(self, method: str, params: Any) -> dict[str, Any]:
        self.n += 1
        answer, seen = (
            await self.peer.until_id(self.n, 30) if await self._send(method, params) else ({}, [])
        )
        self.seen += seen
        return answer

    async def _send(self, method: str, params: Any) -> bool:
        await self.peer.send({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        return True

    async def turn(self, sid: str, text: str) -> list[dict[str, Any]]:
        """One prompt; the updates of its turn (until the answer, v1, or idle, v2)."""
        start = len(self.seen)
        answer = await self.call("session/prompt", hs.text_prompt(sid, text))
        assert "result" in answer, answer
        if self.v2:
            while not any(
                u.get("params", {}).get("update", {}).get("state") == "idle"
                for u in self.seen[start:]
            ):
                self.seen.append(await self.peer.recv(30))
        return [
            m["params"]["update"] for m in self.seen[start:] if m.get("method") == "session/update"
        ]

    async def settle(self, seconds: float = 0.3) -> None:
        """Read what arrives within `seconds` (messages sent outside a turn)."""
        with contextlib.suppress(TimeoutError):
            while True:
                self.seen.append(await self.peer.recv(seconds))

    def texts(self) -> list[str]:
        return [
            u["content"]["text"]
            for m in self.seen
            if m.get("method") == "session/update"
            and (u := m["params"]["update"])["sessionUpdate"] == "agent_message_chunk"
            and u["content"].get("type") == "text"
        ]


def _said(texts: list[str], prefix: str) -> list[str]:
    return [t for t in texts if t.startswith(prefix)]


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_stdio_agent_connects_and_calls_the_clients_mcp_servers(
    built: Any, rev: str, tmp_path: Path
) -> None:
    env, package = built[rev]
    v2 = rev == "v2"
    with (
        ms.running_http_mcp() as (url, recorder),
        ms.running_http_mcp("sse") as (sse_url, sse_recorder),
    ):

        async def main() -> tuple[Peer, int, int, bytes]:
            p = Peer(await hs.StdioPeer.start(env, package), v2)
            init = await p.call("initialize", _init(v2))
            caps = init["result"]["capabilities" if v2 else "agentCapabilities"]
            if v2:
                assert caps["session"]["mcp"] == {"stdio": {}, "http": {}}
            else:
                assert caps["mcpCapabilities"]["http"] is True
                assert caps["mcpCapabilities"]["sse"] is True
            servers = [
                ms.stdio_server(tmp_path, env={"MCP_SECRET": ENV_SECRET}, v2=v2),
                ms.http_server(url, headers={"X-Api-Key": HEADER_SECRET}),
            ]
            if not v2:  # SSE is a v1 transport (v2 has http and stdio)
                sse = ms.http_server(sse_url, "events", {"X-Api-Key": HEADER_SECRET}, kind="sse")
                servers.append(sse)
            new = await p.call("session/new", {"cwd": str(tmp_path), "mcpServers": servers})
            sid = new["result"]["sessionId"]
            await p.turn(sid, "tools")
            if not v2:
                await p.turn(sid, 'call events_mul {"a": 5, "b": 5}')
            updates = await p.turn(sid, 'call tools_add {"a": 2, "b": 3}')
            calls = [u for u in updates if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
            assert calls[0]["title"] == "tools_add" and calls[0]["status"] == "in_progress"
            assert calls[0]["rawInput"] == {"a": 2, "b": 3}
            assert calls[-1]["status"] == "completed"
            assert calls[-1]["rawOutput"]["content"] == [{"type": "text", "text": "5"}]
            assert {c["toolCallId"] for c in calls} == {calls[0]["toolCallId"]}
            await p.turn(sid, 'call web_mul {"a": 6, "b": 7}')
            await p.turn(sid, 'call tools_env_sha {"name": "MCP_SECRET"}')
            failed = await p.turn(sid, "call tools_oops")
            assert [u.get("status") for u in failed if "status" in u][-1] == "failed"
            await p.turn(sid, "call tools_pid")
            pid = int(_said(p.texts(), "result ")[-1].split()[1])
            assert ms.alive(pid)
            rc, err = await p.peer.close()
            return p, pid, rc, err

        p, pid, rc, err = asyncio.run(main())
    texts = p.texts()
    listed = "tools_add,tools_die,tools_env_sha,tools_oops,tools_pid,web_mul"
    if not v2:
        listed = "events_mul," + listed
        assert "result 25 error=False" in texts
        assert any(h.get("x-api-key") == HEADER_SECRET for h in sse_recorder.headers)
    assert "tools " + listed in texts
    assert "result 5 error=False" in texts and "result 42 error=False" in texts
    digest = hashlib.sha256(ENV_SECRET.encode()).hexdigest()[:12]
    assert f"result {digest} error=False" in texts  # the env reached the server
    assert any(t.startswith("result ") and t.endswith("error=True") for t in texts)
    assert not _said(texts, "MCP server")  # nothing failed
    assert any(h.get("x-api-key") == HEADER_SECRET for h in recorder.headers)
    assert rc == 0
    assert ms.gone(pid), "the MCP server outlived the agent's connection"
    wire = json.dumps(p.seen) + err.decode(errors="replace")
    assert HEADER_SECRET not in wire and ENV_SECRET not in wire


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_failures_are_reported_once_and_the_session_goes_on(
    built: Any, rev: str, tmp_path: Path
) -> None:
    env, package = built[rev]
    v2 = rev == "v2"
    stdio = {"type": "stdio"} if v2 else {}

    async def main() -> Peer:
        p = Peer(await hs.StdioPeer.start(env, package), v2)
        await p.call("initialize", _init(v2))
        servers = [
            {**stdio, "name": "broken", "command": "/bin/false", "args": [], "env": []},
            {**stdio, "name": "relative", "command": "python3", "args": [], "env": []},
            ms.stdio_server(tmp_path, v2=v2),
        ]
        new = await p.call("session/new", {"cwd": str(tmp_path), "mcpServers": servers})
        sid = new["result"]["sessionId"]
        await p.turn(sid, "tools")
        await p.turn(sid, "call tools_die")
        await p.turn(sid, "call tools_add {}")
        await p.turn(sid, "tools")
        await p.turn(sid, "hello")
        await p.settle()
        rc, _ = await p.peer.close()
        assert rc == 0
        return p

    texts = asyncio.run(main()).texts()
    assert len(_said(texts, "MCP server 'broken' could not start")) == 1
    assert _said(texts, "MCP server 'relative' could not start: its command must be an absolute")
    assert len(_said(texts, "MCP server 'tools' stopped")) == 1
    assert (
        _said(texts, "tools ")[0] == "tools tools_add,tools_die,tools_env_sha,tools_oops,tools_pid"
    )
    assert _said(texts, "failed tools_die")
    assert _said(texts, "failed no MCP tool named 'tools_add'")
    assert _said(texts, "tools ")[-1] == "tools "
    assert "echo hello" in texts


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_session_close_stops_its_mcp_servers(built: Any, rev: str, tmp_path: Path) -> None:
    env, package = built[rev]
    v2 = rev == "v2"

    async def main() -> None:
        p = Peer(await hs.StdioPeer.start(env, package), v2)
        await p.call("initialize", _init(v2))
        servers = [ms.stdio_server(tmp_path, v2=v2)]
        sid = (await p.call("session/new", {"cwd": str(tmp_path), "mcpServers": servers}))[
            "result"
        ]["sessionId"]
        await p.turn(sid, "call tools_pid")
        pid = int(_said(p.texts(), "result ")[-1].split()[1])
        assert ms.alive(pid)
        closed = await p.call("session/close", {"sessionId": sid})
        assert "result" in closed, closed
        assert ms.gone(pid, timeout=10), "session/close left its MCP server running"
        await p.peer.close()

    asyncio.run(main())


# ---- HTTP: a remote client's stdio servers ---------------------------------------------


class WsPeer:
    def __init__(self, port: int) -> None:
        import websockets.sync.client as ws_client

        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(
            ws_client.connect(f"ws://127.0.0.1:{port}/acp", open_timeout=10, max_size=None)
        )
        self.frames: list[str] = []

    def call(self, rid: int, method: str, params: Any) -> tuple[dict[str, Any], list[Any]]:
        self.ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}))
        seen: list[Any] = []
        while True:
            raw = self.ws.recv(timeout=30)
            self.frames.append(str(raw))
            msg = json.loads(raw)
            if "method" not in msg and msg.get("id") == rid:
                return msg, seen
            seen.append(msg)

    def close(self) -> None:
        self._stack.close()


def _ws_turn(peer: WsPeer, rid: int, sid: str, text: str) -> list[dict[str, Any]]:
    """A v2 prompt over the WebSocket: the updates until the turn's idle state_update."""
    answer, seen = peer.call(rid, "session/prompt", hs.text_prompt(sid, text))
    assert "result" in answer, answer
    updates = [m["params"]["update"] for m in seen if m.get("method") == "session/update"]
    while not any(u.get("state") == "idle" for u in updates):
        raw = peer.ws.recv(timeout=30)
        peer.frames.append(str(raw))
        msg = json.loads(raw)
        if msg.get("method") == "session/update":
            updates.append(msg["params"]["update"])
    return updates


def _stop(proc: subprocess.Popen[bytes]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    return err.decode(errors="replace")


@pytest.mark.parametrize("allowed", [False, True], ids=["default", "allowed"])
def test_http_agent_refuses_stdio_servers_unless_allowed(
    built: Any, allowed: bool, tmp_path: Path
) -> None:
    env, package = built["v2"]
    port = hs.free_port()
    extra = {"ACP_ALLOW_STDIO_MCP": "1"} if allowed else {}
    proc = hs.start_http(env, package, port, ACP_SESSION_DB=str(tmp_path / "s.db"), **extra)
    pids: list[int] = []
    with ms.running_http_mcp() as (url, recorder):
        try:
            peer = WsPeer(port)
            init, _ = peer.call(1, "initialize", _init(True))
            mcp_caps = init["result"]["capabilities"]["session"]["mcp"]
            assert mcp_caps == ({"stdio": {}, "http": {}} if allowed else {"http": {}})
            servers = [
                ms.stdio_server(tmp_path, env={"MCP_SECRET": ENV_SECRET}, v2=True),
                ms.http_server(url, headers={"Authorization": "Bearer " + HEADER_SECRET}),
            ]
            new, _ = peer.call(2, "session/new", {"cwd": str(tmp_path), "mcpServers": servers})
            if not allowed:
                assert new["error"]["code"] == -32602
                assert "MCP server 'tools'" in new["error"]["message"]
                assert "ACP_ALLOW_STDIO_MCP" in new["error"]["message"]
                # the HTTP server alone is fine
                new, _ = peer.call(3, "session/new", {"cwd": "/tmp", "mcpServers": servers[1:]})
            sid = new["result"]["sessionId"]
            _ws_turn(peer, 4, sid, 'call web_mul {"a": 3, "b": 4}')
            if allowed:
                _ws_turn(peer, 5, sid, 'call tools_add {"a": 1, "b": 1}')
                updates = _ws_turn(peer, 6, sid, "call tools_pid")
                texts = [
                    u["content"]["text"]
                    for u in updates
                    if u["sessionUpdate"] == "agent_message_chunk"
                ]
                pids.append(int(next(t for t in texts if t.startswith("result ")).split()[1]))
                assert ms.alive(pids[0])
                # another connection resumes the session with its own server: the first
                # connection's is closed (the session moved), the new one connected
                other = WsPeer(port)
                other.call(1, "initialize", _init(True))
                resumed, _ = other.call(
                    2,
                    "session/resume",
                    {"sessionId": sid, "cwd": "/tmp", "mcpServers": servers[:1]},
                )
                assert "result" in resumed, resumed
                assert ms.gone(pids[0], timeout=10), "a taken-over session kept its MCP server"
                updates = _ws_turn(other, 3, sid, "call tools_pid")
                texts = [
                    u["content"]["text"]
                    for u in updates
                    if u["sessionUpdate"] == "agent_message_chunk"
                ]
                pids.append(int(next(t for t in texts if t.startswith("result ")).split()[1]))
                assert pids[1] != pids[0] and ms.alive(pids[1])
                peer.frames += other.frames
                other.close()  # its connection ends: its sessions' servers are closed
                assert ms.gone(pids[1], timeout=10), "an MCP server outlived its connection"
                # a connection still open when the agent shuts down (SIGTERM)
                last = WsPeer(port)
                last.call(1, "initialize", _init(True))
                new, _ = last.call(2, "session/new", {"cwd": "/tmp", "mcpServers": servers[:1]})
                updates = _ws_turn(last, 3, new["result"]["sessionId"], "call tools_pid")
                texts = [
                    u["content"]["text"]
                    for u in updates
                    if u["sessionUpdate"] == "agent_message_chunk"
                ]
                pids.append(int(next(t for t in texts if t.startswith("result ")).split()[1]))
                assert ms.alive(pids[2])
            peer.close()
        finally:
            err = _stop(proc)
        if allowed:
            assert ms.gone(pids[2]), "an MCP server outlived the agent's shutdown"
    frames = "".join(peer.frames)
    assert "result 12 error=False" in frames
    if allowed:
        assert "result 2 error=False" in frames
    assert any(h.get("authorization") == "Bearer " + HEADER_SECRET for h in recorder.headers)
    assert HEADER_SECRET not in frames + err and ENV_SECRET not in frames + err


# ---- the model's view: a pydantic-ai toolset on the same connections ----------------------

MODEL_HANDLERS = """
from __future__ import annotations

from typing import Any

from pydantic_ai import Agent as Model
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent import Turn


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [p for m in messages for p in m.parts if p.part_kind == "tool-return"]
    if not returns:
        return ModelResponse(parts=[ToolCallPart("tools_add", {"a": 20, "b": 22})])
    names = ",".join(sorted(t.name for t in info.function_tools))
    return ModelResponse(parts=[TextPart(f"sum {returns[0].content} of {names}")])


MODEL = Model(FunctionModel(script))


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        result = await MODEL.run("add", toolsets=[turn.mcp.toolset()])
        await turn.send_text(result.output)
"""


def test_the_models_toolset_calls_the_sessions_mcp_server(tmp_path: Path, shared_acp: Path) -> None:
    """`turn.mcp.toolset()` with pydantic-ai's FunctionModel: the model sees the server's
    tools under their prefixed names and its call reaches the session's own connection
    (one MCP process for the session, started once)."""
    import shutil

    env = hs.build(
        tmp_path,
        shared_acp,
        "mcp_model_agent",
        rev="v1",
        unstable=False,
        manifest=MANIFEST,
        handlers=MODEL_HANDLERS,
    )
    runtime = tmp_path / "mcp_model_agent" / "_generated" / "runtime"
    # shipped with a model project (its adapter imports it); this one copies it in
    shutil.copy(Path(ms.__file__).parents[1] / "templates/runtime/mcp_toolset.py", runtime)

    async def main() -> Peer:
        p = Peer(await hs.StdioPeer.start(env, "mcp_model_agent"), False)
        await p.call("initialize", _init(False))
        servers = [ms.stdio_server(tmp_path)]
        new = await p.call("session/new", {"cwd": str(tmp_path), "mcpServers": servers})
        await p.turn(new["result"]["sessionId"], "add")
        await p.peer.close()
        return p

    p = asyncio.run(main())
    # the structured content, as MCPServer wraps a plain return value
    assert (
        "sum {'result': 42} of tools_add,tools_die,tools_env_sha,tools_oops,tools_pid" in p.texts()
    )
    assert not _said(p.texts(), "MCP server")


# ---- the official Python SDK as the client ------------------------------------------------


def test_python_sdk_client_passes_an_mcp_server_and_sees_the_tool_result(
    built: Any, tmp_path: Path
) -> None:
    import acp

    env, package = built["v1"]
    updates: list[Any] = []

    class C:
        async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
            updates.append(update)

    async def main() -> None:
        async with acp.spawn_agent_process(
            C(), hs.PY, "-m", package, env=env, use_unstable_protocol=True
        ) as (conn, _proc):
            init = await conn.initialize(protocol_version=1)
            mcp_caps = init.agent_capabilities.mcp_capabilities
            assert mcp_caps.http is True and mcp_caps.sse is True
            server = ms.stdio_server(tmp_path, env={"MCP_SECRET": ENV_SECRET})
            new = await conn.new_session(
                cwd=str(tmp_path),
                mcp_servers=[
                    acp.schema.McpServerStdio(
                        name=server["name"],
                        command=server["command"],
                        args=server["args"],
                        env=[acp.schema.EnvVariable(name="MCP_SECRET", value=ENV_SECRET)],
                    )
                ],
            )
            prompt = [acp.text_block('call tools_add {"a": 40, "b": 2}')]
            resp = await conn.prompt(session_id=new.session_id, prompt=prompt)
            assert resp.stop_reason == "end_turn"

    asyncio.run(main())
    dumped = [u.model_dump(by_alias=True, exclude_none=True) for u in updates]
    calls = [u for u in dumped if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
    assert calls[0]["title"] == "tools_add" and calls[-1]["status"] == "completed"
    assert calls[-1]["rawOutput"]["content"] == [{"type": "text", "text": "42"}]
    texts = [u["content"]["text"] for u in dumped if u["sessionUpdate"] == "agent_message_chunk"]
    assert "result 42 error=False" in texts
    assert ENV_SECRET not in json.dumps(dumped)


def test_no_header_env_or_url_secret_in_any_log_line_or_message(
    built: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """In process, every logger at DEBUG (the runtime's, the mcp SDK's, httpx's): servers
    that work and servers that fail (an HTTP 404, a command that exits) carry header, env
    and URL secrets; none of them is in a log record or in what the client gets."""
    import logging

    env, package = built["v1"]
    tmp = Path(env["PYTHONPATH"])
    handlers = hs.load(tmp, package)
    sessions = hs.runtime_of(package, "sessions")
    store = hs.runtime_of(package, "store").MemorySessionStore()
    url_secret = "urlkey-5e8b1d"
    caplog.set_level(logging.DEBUG)

    with ms.running_http_mcp() as (url, recorder):

        async def main() -> hs.Core:
            c = hs.Core(sessions.SessionCore(handlers.Agent, store))
            await c.call("initialize", _init(False))
            auth = {"Authorization": "Bearer " + HEADER_SECRET}
            servers = [
                ms.http_server(f"{url}?token={url_secret}", headers=auth),
                ms.http_server(url.replace("/mcp", "/nowhere"), "lost", auth),
                {
                    "name": "exits",
                    "command": "/bin/false",
                    "args": [],
                    "env": [{"name": "MCP_SECRET", "value": ENV_SECRET}],
                },
            ]
            new = await c.call("session/new", {"cwd": str(tmp_path), "mcpServers": servers})
            sid = new["result"]["sessionId"]
            done = await c.call(
                "session/prompt", hs.text_prompt(sid, 'call web_mul {"a": 2, "b": 2}')
            )
            assert done["result"]["stopReason"] == "end_turn"
            await c.conn.close()
            return c

        c = asyncio.run(main())
    told = json.dumps(c.msgs)
    assert "result 4 error=False" in told
    assert "MCP server 'lost' could not start: MCPError: Not Found" in told
    assert "MCP server 'exits' could not start" in told
    assert any(h.get("authorization") == "Bearer " + HEADER_SECRET for h in recorder.headers)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert logged  # the loggers did write at DEBUG
    for secret in (HEADER_SECRET, ENV_SECRET, url_secret):
        assert secret not in told, secret
        assert secret not in logged, secret


def test_without_the_mcp_package_nothing_is_advertised_and_the_servers_are_told_once(
    built: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project installed without its `mcp` extra: `mcpCapabilities` advertises no
    transport, a session's servers are reported (once) as not connected, the session goes
    on, and `turn.mcp` lists nothing."""
    env, package = built["v1"]
    tmp = Path(env["PYTHONPATH"])
    handlers = hs.load(tmp, package)
    hub = hs.runtime_of(package, "mcp_servers")
    monkeypatch.setattr(hub, "mcp_installed", lambda: False)
    sessions = hs.runtime_of(package, "sessions")
    store = hs.runtime_of(package, "store").MemorySessionStore()

    async def main() -> tuple[dict[str, Any], hs.Core]:
        c = hs.Core(sessions.SessionCore(handlers.Agent, store))
        init = await c.call("initialize", _init(False))
        servers = [ms.stdio_server(tmp_path), ms.http_server("http://127.0.0.1:9/mcp")]
        new = await c.call("session/new", {"cwd": str(tmp_path), "mcpServers": servers})
        sid = new["result"]["sessionId"]
        await c.call("session/prompt", hs.text_prompt(sid, "tools"))
        await c.conn.close()
        return init, c

    init, c = asyncio.run(main())
    mcp_caps = init["result"]["agentCapabilities"]["mcpCapabilities"]
    assert mcp_caps["http"] is False and mcp_caps["sse"] is False
    texts = [
        m["params"]["update"]["content"]["text"]
        for m in c.msgs
        if m.get("method") == "session/update"
    ]
    told = _said(texts, "MCP servers 'tools', 'web' were not connected: the `mcp` package")
    assert len(told) == 1
    assert "tools " in texts


def test_session_load_reconnects_the_servers_it_names(built: Any, tmp_path: Path) -> None:
    """v1 `session/load` of a session this connection holds: the servers of the load
    request replace the earlier ones (the earlier process stopped, a new one started)."""
    env, package = built["v1"]

    async def main() -> None:
        p = Peer(await hs.StdioPeer.start(env, package), False)
        await p.call("initialize", _init(False))
        servers = [ms.stdio_server(tmp_path)]
        sid = (await p.call("session/new", {"cwd": str(tmp_path), "mcpServers": servers}))[
            "result"
        ]["sessionId"]
        await p.turn(sid, "call tools_pid")
        first = int(_said(p.texts(), "result ")[-1].split()[1])
        load = {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": servers}
        assert "result" in await p.call("session/load", load)
        assert ms.gone(first, timeout=10), "session/load kept the earlier MCP server"
        await p.turn(sid, "call tools_pid")
        second = int(_said(p.texts(), "result ")[-1].split()[1])
        assert second != first and ms.alive(second)
        rc, _ = await p.peer.close()
        assert rc == 0 and ms.gone(second)

    asyncio.run(main())


def test_a_server_that_never_answers_is_given_up_and_stopped(built: Any, tmp_path: Path) -> None:
    """A command that starts but never answers `initialize`: the first use waits for it
    at most ACP_MCP_CONNECT_TIMEOUT seconds, then it is told once as not started, and its
    process is stopped (no orphan)."""
    env, package = built["v1"]
    pidfile = tmp_path / "mute.pid"
    mute = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"

    async def main() -> Peer:
        p = Peer(await hs.StdioPeer.start({**env, "ACP_MCP_CONNECT_TIMEOUT": "1"}, package), False)
        await p.call("initialize", _init(False))
        server = {"name": "mute", "command": hs.PY, "args": ["-c", mute, str(pidfile)], "env": []}
        new = await p.call("session/new", {"cwd": str(tmp_path), "mcpServers": [server]})
        sid = new["result"]["sessionId"]
        await p.turn(sid, "tools")
        pid = int(pidfile.read_text())
        assert ms.gone(pid, timeout=10), "the mute MCP server was not stopped"
        await p.turn(sid, "tools")
        await p.peer.close()
        return p

    texts = asyncio.run(main()).texts()
    assert _said(texts, "MCP server 'mute' could not start: no answer within 1 s") == [
        "MCP server 'mute' could not start: no answer within 1 s. The session goes on without it.\n"
    ]
    assert _said(texts, "tools ") == ["tools ", "tools "]
