"""MCP servers for the tests, made with the `mcp` package's own server API (MCPServer):
one run as a stdio command (a script), one served over streamable HTTP by uvicorn on
127.0.0.1 (port 0) in a thread, recording the headers of every request it gets."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from wait_support import ListeningServer

# tools: add, pid, env_sha (a digest of an env var: never its value), oops (a tool error),
# die (the server process exits mid-call)
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
