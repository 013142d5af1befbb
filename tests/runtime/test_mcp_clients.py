"""The client's MCP servers seen from other sides (runtime/agent/mcp_servers.py): an HTTP agent
(WebSocket) refusing a remote client's stdio servers unless its operator allows them,
closing a session's servers when another connection resumes it, when a connection ends
and at shutdown; the model's pydantic-ai toolset on the session's own connections; and
the official Python SDK client passing an MCP server in session/new.  Every frame is
schema-checked (ACP_WIRE_CHECK)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import hardening_support as hs
import mcp_support as ms
import pytest
from mcp_support import WsPeer
from mcp_support import ws_turn as _ws_turn


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    return ms.build_agents(tmp_path_factory.mktemp("mcp_clients"), shared_acp, "mcp_clients")


# ---- HTTP: a remote client's stdio servers ---------------------------------------------


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
            init, _ = peer.call(1, "initialize", ms.init_params(True))
            mcp_caps = init["result"]["capabilities"]["session"]["mcp"]
            assert mcp_caps == ({"stdio": {}, "http": {}} if allowed else {"http": {}})
            servers = [
                ms.stdio_server(tmp_path, env={"MCP_SECRET": ms.ENV_SECRET}, v2=True),
                ms.http_server(url, headers={"Authorization": "Bearer " + ms.HEADER_SECRET}),
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
                other.call(1, "initialize", ms.init_params(True))
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
                last.call(1, "initialize", ms.init_params(True))
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
    assert any(h.get("authorization") == "Bearer " + ms.HEADER_SECRET for h in recorder.headers)
    assert ms.HEADER_SECRET not in frames + err and ms.ENV_SECRET not in frames + err


# ---- the model's view: a pydantic-ai toolset on the same connections ----------------------

MODEL_HANDLERS = """
from __future__ import annotations

from typing import Any

from pydantic_ai import Agent as Model
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ._generated.acp import AgentBase, Turn


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
        manifest=ms.MANIFEST,
        handlers=MODEL_HANDLERS,
    )
    runtime = tmp_path / "mcp_model_agent" / "_generated" / "runtime" / "agent"
    # shipped with a model project (its adapter imports it); this one copies it in
    shutil.copy(Path(ms.__file__).parents[1] / "templates/runtime/agent/mcp_toolset.py", runtime)

    async def main() -> ms.Peer:
        p = ms.Peer(await hs.StdioPeer.start(env, "mcp_model_agent"), False)
        await p.call("initialize", ms.init_params(False))
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
    assert not ms.said(p.texts(), "MCP server")


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
            server = ms.stdio_server(tmp_path, env={"MCP_SECRET": ms.ENV_SECRET})
            new = await conn.new_session(
                cwd=str(tmp_path),
                mcp_servers=[
                    acp.schema.McpServerStdio(
                        name=server["name"],
                        command=server["command"],
                        args=server["args"],
                        env=[acp.schema.EnvVariable(name="MCP_SECRET", value=ms.ENV_SECRET)],
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
    assert ms.ENV_SECRET not in json.dumps(dumped)


# ---- a project installed without the `mcp` package ----------------------------------------

NO_MCP = """
import sys


class NoMcp:
    # `mcp` is not installed here: any import of it fails as a missing package does
    def find_spec(self, name, path=None, target=None):
        if name == "mcp" or name.startswith("mcp."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoMcp())
"""


def test_an_agent_without_the_mcp_package_runs_and_says_so(built: Any, tmp_path: Path) -> None:
    """A real agent process in which `mcp` cannot be imported: it starts, advertises no
    MCP transport, tells the client once that the session's servers were not connected,
    and serves the session."""
    env, package = built["v1"]
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_MCP)
    env = {**env, "PYTHONPATH": f"{site}:{env['PYTHONPATH']}"}

    async def main() -> ms.Peer:
        p = ms.Peer(await hs.StdioPeer.start(env, package), False)
        init = await p.call("initialize", ms.init_params(False))
        caps = init["result"]["agentCapabilities"]["mcpCapabilities"]
        assert caps["http"] is False and caps["sse"] is False
        servers = [ms.stdio_server(tmp_path)]
        new = await p.call("session/new", {"cwd": str(tmp_path), "mcpServers": servers})
        await p.turn(new["result"]["sessionId"], "tools")
        await p.turn(new["result"]["sessionId"], "hello")
        rc, err = await p.peer.close()
        assert rc == 0, err
        return p

    texts = asyncio.run(main()).texts()
    assert len(ms.said(texts, "MCP servers 'tools' were not connected: the `mcp` package")) == 1
    assert "tools " in texts and "echo hello" in texts
