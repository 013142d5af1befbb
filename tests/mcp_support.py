"""MCP servers for the tests, made with the `mcp` package's own server API (MCPServer):
one run as a stdio command (a script), one served over streamable HTTP or SSE by uvicorn
on 127.0.0.1 (port 0) in a thread, recording the headers of every request it gets; and
the generated agent the MCP tests drive (a handler calling `turn.mcp`), with a stdio peer
that runs its turns."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hardening_support as hs
import uvicorn
from wait_support import ListeningServer

# tools: add, pid, env_sha (a digest of an env var: never its value), oops (a tool error),
# die (the server process exits mid-call); with MCP_TEST_EXTRA=1 in its env, stall (a
# call that is never answered) and big (20,000 characters)
STDIO_SERVER = """
import hashlib
import os

from mcp.server.mcpserver import MCPServer

app = MCPServer("tools")


@app.tool()
def add(a: int, b: int) -> int:
    \"\"\"Add two numbers.\"\"\"
    return a + b


@app.tool()
def pid() -> int:
    return os.getpid()


@app.tool()
def env_sha(name: str) -> str:
    return hashlib.sha256(os.environ.get(name, "").encode()).hexdigest()[:12]


@app.tool()
def oops() -> str:
    raise ValueError("this tool always fails")


@app.tool()
def die() -> str:
    os._exit(3)


if os.environ.get("MCP_TEST_EXTRA") == "1":

    @app.tool()
    async def stall() -> str:
        import anyio

        await anyio.sleep(3600)
        return "never"

    @app.tool()
    def big() -> str:
        return "y" * 20000


app.run()
"""


def stdio_script(tmp: Path) -> Path:
    path = tmp / "mcp_tools_server.py"
    path.write_text(STDIO_SERVER)
    return path


def stdio_server(
    tmp: Path, name: str = "tools", env: dict[str, str] | None = None, *, v2: bool = False
) -> dict[str, Any]:
    """The `McpServerStdio` of a session/new running the script with this Python."""
    server: dict[str, Any] = {
        "name": name,
        "command": sys.executable,
        "args": [str(stdio_script(tmp))],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
    }
    if v2:
        server = {"type": "stdio", **server}
    return server


def http_server(
    url: str, name: str = "web", headers: dict[str, str] | None = None, *, kind: str = "http"
) -> dict[str, Any]:
    """An `McpServerHttp` (or, `kind` "sse", an `McpServerSse`) of a session/new."""
    return {
        "type": kind,
        "name": name,
        "url": url,
        "headers": [{"name": k, "value": v} for k, v in (headers or {}).items()],
    }


class Recorder:
    """ASGI middleware: the headers of every request, kept."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.headers: list[dict[str, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await self.app(scope, receive, send)


@contextlib.contextmanager
def running_http_mcp(kind: str = "http") -> Iterator[tuple[str, Recorder]]:
    """An MCP server (tool `mul`) on 127.0.0.1:<free port>, streamable HTTP (`kind`
    "http", at /mcp) or SSE ("sse", at /sse): (url, recorder)."""
    from mcp.server.mcpserver import MCPServer

    mcp = MCPServer("web")

    @mcp.tool()
    def mul(a: int, b: int) -> int:
        """Multiply two numbers."""
        return a * b

    app = Recorder(mcp.sse_app() if kind == "sse" else mcp.streamable_http_app())
    server = ListeningServer(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    assert server.listening.wait(15), "the MCP server did not start"
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/{'sse' if kind == 'sse' else 'mcp'}", app
    finally:
        server.should_exit = True
        thread.join(10)


def gone(pid: int, timeout: float = 0.0) -> bool:
    """Whether process `pid` has ended (not running, or a zombie), waiting up to `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def alive(pid: int) -> bool:
    return not gone(pid) and os.path.exists(f"/proc/{pid}")


# ---- the agent under test ------------------------------------------------------------

HEADER_SECRET = "hdr-4f1c9b2e-secret"
ENV_SECRET = "env-7d2a6c0f-secret"

HANDLERS = """
from __future__ import annotations

import json
from typing import Any

from ._generated.acp import AgentBase, McpToolError, Turn


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


def build_agents(tmp: Path, shared_acp: Path, prefix: str) -> dict[str, tuple[dict[str, str], str]]:
    """The agent above, generated for v1 (unstable) and v2 as `<prefix>_<rev>`:
    rev -> (env, package)."""
    return hs.build_revisions(tmp, shared_acp, prefix, manifest=MANIFEST, handlers=HANDLERS)


def init_params(v2: bool) -> dict[str, Any]:
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


def said(texts: list[str], prefix: str) -> list[str]:
    return [t for t in texts if t.startswith(prefix)]


# ---- an HTTP agent over one WebSocket -----------------------------------------------


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


def ws_turn(peer: WsPeer, rid: int, sid: str, text: str) -> list[dict[str, Any]]:
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
