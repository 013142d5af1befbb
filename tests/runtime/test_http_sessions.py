"""Sessions survive: the agent process is killed mid-session and restarted on the same
SQLite store; the official SDK client reconnects, loads the session (history replayed) and
continues it, nothing acknowledged is lost.  Plus the store itself and the well-known doc."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from runtime.agent.agent import AgentRuntime
from runtime.sessions.store_sqlite import SqliteSessionStore


def _revision() -> Any:
    """The locked default revision, as the generator describes it."""
    from generator.protocol.revision import describe
    from generator.sources import load_schema

    return describe(load_schema(None).data)


REVISION = _revision()


class EchoAgent(AgentRuntime):
    REVISIONS = (REVISION,)
    _acp_manifest: ClassVar[dict[str, Any]] = {
        "name": "echo-http",
        "version": "0.1.0",
        "title": "Echo",
        "links": {"docs": "https://example.org/docs"},
        "auth": [{"type": "api_key", "env": "ECHO_KEY", "header": "X-API-Key"}],
        "output_modes": {"sync": True, "streaming": True},
    }

    async def prompt(self, turn: Any, input: Any) -> Any:
        for block in input:
            await turn.send_text("echo:" + block.get("text", ""))
        return None


ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(port: int, db: Path) -> subprocess.Popen[bytes]:
    # this file runs as the agent's own process: the repository and the runtime (from
    # templates/, as pyproject's pythonpath gives pytest) on its path
    path = os.pathsep.join([str(ROOT), str(ROOT / "templates"), str(ROOT / "tests")])
    env = {
        **os.environ,
        "ACP_SESSION_DB": str(db),
        "ECHO_KEY": "k-123-secret",
        "PYTHONPATH": path,
    }
    proc = subprocess.Popen(
        [sys.executable, __file__, str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "agent did not start"
        time.sleep(0.05)  # a poll: the agent is another process, /health has no push


def texts(updates: list[Any]) -> list[tuple[str, str]]:
    return [(u.session_update, u.content.text) for u in updates]


def test_restart_and_resume(tmp_path: Path) -> None:
    import acp
    from acp import schema as S
    from acp.http.client import create_http_stream
    from wait_support import Updates

    port = free_port()
    db = tmp_path / "sessions.db"
    url = f"http://127.0.0.1:{port}/acp"
    headers = {"X-API-Key": "k-123-secret"}

    async def phase1() -> str:
        c = Updates()
        conn = acp.connect_to_agent(
            c, create_http_stream(url, headers=headers, client=httpx.AsyncClient(timeout=None))
        )
        init = await asyncio.wait_for(conn.initialize(protocol_version=1), 10)
        assert init.agent_capabilities.load_session is True
        sess = await asyncio.wait_for(conn.new_session(cwd="/tmp", mcp_servers=[]), 10)
        r = await asyncio.wait_for(
            conn.prompt(
                session_id=sess.session_id, prompt=[S.TextContentBlock(type="text", text="one")]
            ),
            10,
        )
        assert r.stop_reason == "end_turn"
        assert texts(c.updates) == [("agent_message_chunk", "echo:one")]
        return sess.session_id

    proc = start(port, db)
    try:
        sid = asyncio.run(phase1())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    proc = start(port, db)
    try:

        async def phase2() -> None:
            c = Updates()
            conn = acp.connect_to_agent(
                c, create_http_stream(url, headers=headers, client=httpx.AsyncClient(timeout=None))
            )
            await asyncio.wait_for(conn.initialize(protocol_version=1), 10)
            await asyncio.wait_for(
                conn.load_session(cwd="/tmp", mcp_servers=[], session_id=sid), 10
            )
            # the history replayed: the user's prompt, then the agent's answer
            assert texts(c.updates) == [
                ("user_message_chunk", "one"),
                ("agent_message_chunk", "echo:one"),
            ]
            c.updates.clear()
            r = await asyncio.wait_for(
                conn.prompt(session_id=sid, prompt=[S.TextContentBlock(type="text", text="two")]),
                10,
            )
            assert r.stop_reason == "end_turn"
            assert texts(c.updates) == [("agent_message_chunk", "echo:two")]
            await conn.close()

        asyncio.run(phase2())
        with httpx.Client(timeout=5) as h:
            doc = h.get(f"http://127.0.0.1:{port}/.well-known/agent.json").json()
            assert doc["name"] == "echo-http" and doc["links"]["docs"] == "https://example.org/docs"
            assert "schemas" in doc and doc["endpoints"]["acp"] == "/acp"
            assert doc["capabilities"]["loadSession"] is True
            r = h.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {"protocolVersion": 1},
                },
            )
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("ApiKey")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert b"k-123-secret" not in err


def test_sqlite_store_roundtrip(tmp_path: Path) -> None:
    async def go() -> None:
        st = SqliteSessionStore(tmp_path / "s.db")
        await st.save("a", {"state": "idle", "config_raw": {"m": 1}})
        await st.append_history("a", [b"1", b"2"])
        await st.append_history("a", [b"3"])
        st.close()
        st = SqliteSessionStore(tmp_path / "s.db")
        assert await st.load("a") == {"state": "idle", "config_raw": {"m": 1}}
        assert await st.history("a") == [b"1", b"2", b"3"]
        assert await st.load("zz") is None
        await st.delete("a")
        assert await st.load("a") is None and await st.history("a") == []

    asyncio.run(go())


class SlowAgent(EchoAgent):
    async def prompt(self, turn: Any, input: Any) -> Any:
        for i in range(500):
            await turn.send_text(f"tick{i}")
            await asyncio.sleep(0.01)
        return None


def test_generated_agent_over_websocket_with_cancel_and_auth(monkeypatch: Any) -> None:
    """The SDK's WebSocket client drives the runtime's agent: initialize, session/new, a
    streamed prompt, cancel (stopReason cancelled); a handshake without the key is refused."""
    import acp
    import websockets
    from acp import schema as S
    from acp.ws.client import create_websocket_stream
    from runtime.http.http_server import app_for
    from runtime.sessions.store import MemorySessionStore
    from test_http_transport import running_server
    from wait_support import Updates

    monkeypatch.setenv("ECHO_KEY", "k-ws-secret")
    with running_server(app_for(SlowAgent, store=MemorySessionStore())) as addr:

        async def go() -> None:
            c = Updates()
            t = await create_websocket_stream(
                f"ws://{addr}/acp", headers={"X-API-Key": "k-ws-secret"}
            )
            conn = acp.connect_to_agent(c, t)
            await asyncio.wait_for(conn.initialize(protocol_version=1), 10)
            sess = await asyncio.wait_for(conn.new_session(cwd="/tmp", mcp_servers=[]), 10)
            task = asyncio.ensure_future(
                conn.prompt(
                    session_id=sess.session_id, prompt=[S.TextContentBlock(type="text", text="go")]
                )
            )
            await c.until("three ticks", lambda: len(c.updates) >= 3)
            await conn.cancel(session_id=sess.session_id)
            r = await asyncio.wait_for(task, 10)
            assert r.stop_reason == "cancelled"
            got = [u.content.text for u in c.updates]
            assert 3 <= len(got) < 500 and got == [f"tick{i}" for i in range(len(got))]
            await conn.close()
            with pytest.raises(
                websockets.InvalidStatus
            ) as refused:  # no key: refused at the handshake
                await create_websocket_stream(f"ws://{addr}/acp")
            assert refused.value.response.status_code == 401
            assert refused.value.response.headers["WWW-Authenticate"].startswith("ApiKey")

        asyncio.run(go())


if __name__ == "__main__":
    from runtime.http.http_server import serve_http

    serve_http(EchoAgent, port=int(sys.argv[1]))
