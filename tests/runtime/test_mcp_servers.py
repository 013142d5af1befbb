"""The MCP servers a client passes (runtime/agent/mcp_servers.py, mcp_link.py), with real
processes: a generated agent run over stdio (v1 and v2), MCP servers made with the `mcp`
package's MCPServer over stdio (a script), streamable HTTP and SSE (uvicorn on 127.0.0.1).
A handler lists and calls `turn.mcp` tools, each call shown as a tool call; a server that
cannot start, never answers or dies is reported once and the session goes on;
connections are closed on session/close, session/load and at EOF (no MCP process left);
header, env and URL secrets reach the servers and never the wire or a log record.  Every
frame is schema-checked (ACP_WIRE_CHECK).  The HTTP agent, the model's toolset and the
official Python SDK client: test_mcp_clients.py."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import hardening_support as hs
import mcp_support as ms
import pytest


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    return ms.build_agents(tmp_path_factory.mktemp("mcp_agent"), shared_acp, "mcp_agent")


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

        async def main() -> tuple[ms.Peer, int, int, bytes]:
            p = ms.Peer(await hs.StdioPeer.start(env, package), v2)
            init = await p.call("initialize", ms.init_params(v2))
            caps = init["result"]["capabilities" if v2 else "agentCapabilities"]
            if v2:
                assert caps["session"]["mcp"] == {"stdio": {}, "http": {}}
            else:
                assert caps["mcpCapabilities"]["http"] is True
                assert caps["mcpCapabilities"]["sse"] is True
            servers = [
                ms.stdio_server(tmp_path, env={"MCP_SECRET": ms.ENV_SECRET}, v2=v2),
                ms.http_server(url, headers={"X-Api-Key": ms.HEADER_SECRET}),
            ]
            if not v2:  # SSE is a v1 transport (v2 has http and stdio)
                sse = ms.http_server(sse_url, "events", {"X-Api-Key": ms.HEADER_SECRET}, kind="sse")
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
            pid = int(ms.said(p.texts(), "result ")[-1].split()[1])
            assert ms.alive(pid)
            rc, err = await p.peer.close()
            return p, pid, rc, err

        p, pid, rc, err = asyncio.run(main())
    texts = p.texts()
    listed = "tools_add,tools_die,tools_env_sha,tools_oops,tools_pid,web_mul"
    if not v2:
        listed = "events_mul," + listed
        assert "result 25 error=False" in texts
        assert any(h.get("x-api-key") == ms.HEADER_SECRET for h in sse_recorder.headers)
    assert "tools " + listed in texts
    assert "result 5 error=False" in texts and "result 42 error=False" in texts
    digest = hashlib.sha256(ms.ENV_SECRET.encode()).hexdigest()[:12]
    assert f"result {digest} error=False" in texts  # the env reached the server
    assert any(t.startswith("result ") and t.endswith("error=True") for t in texts)
    assert not ms.said(texts, "MCP server")  # nothing failed
    assert any(h.get("x-api-key") == ms.HEADER_SECRET for h in recorder.headers)
    assert rc == 0
    assert ms.gone(pid), "the MCP server outlived the agent's connection"
    wire = json.dumps(p.seen) + err.decode(errors="replace")
    assert ms.HEADER_SECRET not in wire and ms.ENV_SECRET not in wire


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_failures_are_reported_once_and_the_session_goes_on(
    built: Any, rev: str, tmp_path: Path
) -> None:
    env, package = built[rev]
    v2 = rev == "v2"
    stdio = {"type": "stdio"} if v2 else {}

    async def main() -> ms.Peer:
        p = ms.Peer(await hs.StdioPeer.start(env, package), v2)
        await p.call("initialize", ms.init_params(v2))
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
    assert len(ms.said(texts, "MCP server 'broken' could not start")) == 1
    assert ms.said(texts, "MCP server 'relative' could not start: its command must be an absolute")
    assert len(ms.said(texts, "MCP server 'tools' stopped")) == 1
    assert (
        ms.said(texts, "tools ")[0]
        == "tools tools_add,tools_die,tools_env_sha,tools_oops,tools_pid"
    )
    assert ms.said(texts, "failed tools_die")
    assert ms.said(texts, "failed no MCP tool named 'tools_add'")
    assert ms.said(texts, "tools ")[-1] == "tools "
    assert "echo hello" in texts


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_session_close_stops_its_mcp_servers(built: Any, rev: str, tmp_path: Path) -> None:
    env, package = built[rev]
    v2 = rev == "v2"

    async def main() -> None:
        p = ms.Peer(await hs.StdioPeer.start(env, package), v2)
        await p.call("initialize", ms.init_params(v2))
        servers = [ms.stdio_server(tmp_path, v2=v2)]
        sid = (await p.call("session/new", {"cwd": str(tmp_path), "mcpServers": servers}))[
            "result"
        ]["sessionId"]
        await p.turn(sid, "call tools_pid")
        pid = int(ms.said(p.texts(), "result ")[-1].split()[1])
        assert ms.alive(pid)
        closed = await p.call("session/close", {"sessionId": sid})
        assert "result" in closed, closed
        assert ms.gone(pid, timeout=10), "session/close left its MCP server running"
        await p.peer.close()

    asyncio.run(main())


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
            await c.call("initialize", ms.init_params(False))
            auth = {"Authorization": "Bearer " + ms.HEADER_SECRET}
            servers = [
                ms.http_server(f"{url}?token={url_secret}", headers=auth),
                ms.http_server(url.replace("/mcp", "/nowhere"), "lost", auth),
                {
                    "name": "exits",
                    "command": "/bin/false",
                    "args": [],
                    "env": [{"name": "MCP_SECRET", "value": ms.ENV_SECRET}],
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
    assert any(h.get("authorization") == "Bearer " + ms.HEADER_SECRET for h in recorder.headers)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert logged  # the loggers did write at DEBUG
    for secret in (ms.HEADER_SECRET, ms.ENV_SECRET, url_secret):
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
        init = await c.call("initialize", ms.init_params(False))
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
    told = ms.said(texts, "MCP servers 'tools', 'web' were not connected: the `mcp` package")
    assert len(told) == 1
    assert "tools " in texts


def test_session_load_reconnects_the_servers_it_names(built: Any, tmp_path: Path) -> None:
    """v1 `session/load` of a session this connection holds: the servers of the load
    request replace the earlier ones (the earlier process stopped, a new one started)."""
    env, package = built["v1"]

    async def main() -> None:
        p = ms.Peer(await hs.StdioPeer.start(env, package), False)
        await p.call("initialize", ms.init_params(False))
        servers = [ms.stdio_server(tmp_path)]
        sid = (await p.call("session/new", {"cwd": str(tmp_path), "mcpServers": servers}))[
            "result"
        ]["sessionId"]
        await p.turn(sid, "call tools_pid")
        first = int(ms.said(p.texts(), "result ")[-1].split()[1])
        load = {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": servers}
        assert "result" in await p.call("session/load", load)
        assert ms.gone(first, timeout=10), "session/load kept the earlier MCP server"
        await p.turn(sid, "call tools_pid")
        second = int(ms.said(p.texts(), "result ")[-1].split()[1])
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
    # a shell writes its pid at once (a Python start can take longer than the time allowed
    # on a loaded machine, and be stopped before it writes), then becomes `sleep`: same pid;
    # 3 s allowed (with 1 s, a shell on a machine at load 5 was once stopped before it wrote)
    mute = 'echo $$ > "$0"; exec sleep 60'

    async def main() -> ms.Peer:
        p = ms.Peer(
            await hs.StdioPeer.start({**env, "ACP_MCP_CONNECT_TIMEOUT": "3"}, package), False
        )
        await p.call("initialize", ms.init_params(False))
        server = {
            "name": "mute",
            "command": "/bin/sh",
            "args": ["-c", mute, str(pidfile)],
            "env": [],
        }
        new = await p.call("session/new", {"cwd": str(tmp_path), "mcpServers": [server]})
        sid = new["result"]["sessionId"]
        await p.turn(sid, "tools")
        pid = int(pidfile.read_text())
        assert ms.gone(pid, timeout=10), "the mute MCP server was not stopped"
        await p.turn(sid, "tools")
        await p.peer.close()
        return p

    texts = asyncio.run(main()).texts()
    assert ms.said(texts, "MCP server 'mute' could not start: no answer within 3 s") == [
        "MCP server 'mute' could not start: no answer within 3 s. The session goes on without it.\n"
    ]
    assert ms.said(texts, "tools ") == ["tools ", "tools "]


def test_an_acp_kind_server_is_reached_over_the_acp_connection(built: Any, tmp_path: Path) -> None:
    """v1's unstable `acp` kind: the client provides the MCP server itself (here it runs an
    MCPServer of the `mcp` package as its own child process and relays) and the agent
    reaches it with `mcp/message` requests on the ACP connection (serverId, requestId, the
    inner MCP method and params); the tool list and a call go through it.  Every frame,
    the `mcp/message` requests and their answers included, is schema-checked."""
    env, package = built["v1"]
    forwarded: list[dict[str, Any]] = []
    spec = ms.stdio_server(tmp_path)

    class Provider(ms.Peer):
        """A client that serves `mcp/message` from an MCP server process of its own."""

        def __init__(self, peer: hs.StdioPeer, server: asyncio.subprocess.Process) -> None:
            super().__init__(peer, False)
            self.server = server

        async def call(self, method: str, params: Any) -> dict[str, Any]:
            self.n += 1
            await self.peer.send(
                {"jsonrpc": "2.0", "id": self.n, "method": method, "params": params}
            )
            while True:
                msg = await self.peer.recv(30)
                if msg.get("method") == "mcp/message" and "id" in msg:
                    await self._serve(msg)
                elif msg.get("id") == self.n and "method" not in msg:
                    return msg
                else:
                    self.seen.append(msg)

        async def _serve(self, msg: dict[str, Any]) -> None:
            params = msg["params"]
            forwarded.append(params)
            inner = {"jsonrpc": "2.0", "id": params["requestId"], "method": params["method"]}
            if params.get("params") is not None:
                inner["params"] = params["params"]
            assert self.server.stdin is not None and self.server.stdout is not None
            self.server.stdin.write(json.dumps(inner).encode() + b"\n")
            while True:  # the inner answer (the server's own notifications are skipped)
                out = json.loads(await asyncio.wait_for(self.server.stdout.readline(), 30))
                if out.get("id") == params["requestId"] and "method" not in out:
                    break
            result = {"result": out["result"]} if "result" in out else {"error": out["error"]}
            await self.peer.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})

    async def main() -> Provider:
        server = await asyncio.create_subprocess_exec(
            spec["command"],
            *spec["args"],
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            p = Provider(await hs.StdioPeer.start(env, package), server)
            init = await p.call("initialize", ms.init_params(False))
            assert init["result"]["agentCapabilities"]["mcpCapabilities"]["acp"] is True
            acp = {"type": "acp", "name": "provided", "serverId": "srv-1"}
            new = await p.call("session/new", {"cwd": str(tmp_path), "mcpServers": [acp]})
            sid = new["result"]["sessionId"]
            await p.turn(sid, "tools")
            await p.turn(sid, 'call provided_add {"a": 40, "b": 2}')
            rc, _ = await p.peer.close()
            assert rc == 0
            return p
        finally:
            server.kill()
            await server.wait()

    texts = asyncio.run(main()).texts()
    assert ms.said(texts, "tools provided_add,"), texts
    assert "result 42 error=False" in texts, texts
    assert not ms.said(texts, "MCP server")  # nothing failed
    assert {f["serverId"] for f in forwarded} == {"srv-1"}
    methods = [f["method"] for f in forwarded]
    assert "tools/list" in methods and methods[-1] == "tools/call", methods
    assert forwarded[-1]["params"]["arguments"] == {"a": 40, "b": 2}


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_a_tool_call_the_server_never_answers_is_bounded(
    built: Any, rev: str, tmp_path: Path
) -> None:
    """Fails on the old code: the call waited until the connection ended (the turn with
    it).  `ACP_MCP_CALL_TIMEOUT` bounds one call; the server lives on for the next."""
    env, package = built[rev]
    v2 = rev == "v2"

    async def main() -> ms.Peer:
        p = ms.Peer(await hs.StdioPeer.start({**env, "ACP_MCP_CALL_TIMEOUT": "1"}, package), v2)
        await p.call("initialize", ms.init_params(v2))
        server = ms.stdio_server(tmp_path, env={"MCP_TEST_EXTRA": "1"}, v2=v2)
        new = await p.call("session/new", {"cwd": str(tmp_path), "mcpServers": [server]})
        sid = new["result"]["sessionId"]
        stalled = await p.turn(sid, "call tools_stall")
        assert [u.get("status") for u in stalled if "status" in u][-1] == "failed"
        await p.turn(sid, 'call tools_add {"a": 1, "b": 2}')
        await p.peer.close()
        return p

    texts = asyncio.run(main()).texts()
    assert ms.said(texts, "failed tools_stall: stall: no answer within 1 s"), texts
    assert ms.said(texts, "result 3")


def test_a_big_tool_result_is_shown_cut_and_handed_whole_to_the_handler(
    built: Any, tmp_path: Path
) -> None:
    """`turn.mcp.call`: the tool call the client sees carries at most
    `ACP_TOOL_OUTPUT_LIMIT` bytes of the result, with a note; the handler gets it whole.
    Fails on the old code: 20,000 characters in the tool call's content and raw output."""
    env, package = built["v1"]

    async def main() -> list[dict[str, Any]]:
        p = ms.Peer(
            await hs.StdioPeer.start({**env, "ACP_TOOL_OUTPUT_LIMIT": "1024"}, package), False
        )
        await p.call("initialize", ms.init_params(False))
        server = ms.stdio_server(tmp_path, env={"MCP_TEST_EXTRA": "1"})
        new = await p.call("session/new", {"cwd": str(tmp_path), "mcpServers": [server]})
        updates = await p.turn(new["result"]["sessionId"], "call tools_big")
        await p.peer.close()
        return updates

    updates = asyncio.run(main())
    done = [u for u in updates if u.get("status") == "completed"][-1]
    shown = json.dumps(done["content"])
    assert "y" * 1024 in shown and "y" * 1025 not in shown and "[output cut: 18976" in shown
    assert len(json.dumps(done["rawOutput"])) < 2000, done["rawOutput"]
    said = [u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"]
    assert "y" * 20000 in said[-1]  # the handler's own result is whole
