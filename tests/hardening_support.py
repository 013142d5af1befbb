"""Shared by the hardening tests (fuzz, faults, load, security): build a generated agent
package under a unique name, import it in process or run it as a subprocess (stdio or
HTTP on 127.0.0.1), read a process's memory."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from project_support import import_from, write_project
from wait_support import Arrivals

PY = sys.executable

# A handler whose behaviour the tests steer through the prompt text.
HANDLERS = """
from __future__ import annotations

import asyncio
import os
from typing import Any

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent.agent import Turn


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> Any:
        text = "".join(b.get("text", "") for b in input if b.get("type") == "text")
        word, _, rest = text.partition(" ")
        if word == "hang":
            await turn.send_text("started")
            await asyncio.sleep(3600)
        if word == "slow":
            await turn.send_text("started")
            await asyncio.sleep(float(rest or 30))
        if word == "boom":
            raise RuntimeError("handler failed holding " + os.environ.get("FAKE_SECRET", "x"))
        if word == "print":
            print("stray print " * 20)
            print(rest)
            os.write(1, b"a raw write to fd 1\\n")
        if word == "leak":  # an error message holding the provider's header value
            route = turn.provider("main")
            raise RuntimeError("upstream refused " + str(route.headers if route else None))
        if word == "route":
            await turn.send_text(repr(turn.provider("main")))
            return None
        if word == "seq":  # seq <tag> <count> [delay]: numbered chunks
            parts = rest.split()
            tag, count = parts[0], int(parts[1])
            delay = float(parts[2]) if len(parts) > 2 else 0.0
            for i in range(count):
                await turn.send_text(f"{tag}:{i}")
                if delay:
                    await asyncio.sleep(delay)
            return None
        for block in input:
            if block.get("type") == "text":
                await turn.send_text(block["text"])
        return None
"""

MAIN = """
import os
import sys

from ._generated import run_agent
from .handlers import Agent

run_agent(Agent, None, transport=os.environ.get("ACP_TEST_TRANSPORT", "stdio"))
"""

MANIFEST: dict[str, Any] = {
    "name": "hard-agent",
    "version": "0.1.0",
    "title": "Hardening Agent",
    "description": "agent for the hardening tests",
    "config": {
        "options": [
            {
                "id": "model",
                "name": "Model",
                "type": "choice",
                "default": "small",
                "values": ["small", "large"],
            },
            {"id": "verbose", "name": "Verbose", "type": "boolean", "default": False},
        ],
    },
    "providers": [
        {
            "id": "main",
            "supported": ["openai", "anthropic"],
            "required": True,
            "default": {"api_type": "openai", "base_url": "https://api.openai.com/v1"},
        },
        {"id": "aux", "supported": ["openai"], "required": False},
    ],
}


def build(
    tmp: Path,
    shared_acp: Path,
    package: str,
    *,
    rev: str = "v1",
    unstable: bool = True,
    manifest: dict[str, Any] | None = None,
    handlers: str = HANDLERS,
) -> dict[str, str]:
    """Render `<tmp>/<package>` (a generated agent with `handlers`); returns its env."""
    suffix = ".unstable" if unstable else ""
    schema = json.loads((shared_acp / rev / f"schema{suffix}.json").read_text())
    meta_path = shared_acp / rev / f"meta{suffix}.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else None
    write_project(
        tmp,
        package,
        schema=schema,
        meta=meta,
        manifest=manifest or MANIFEST,
        transport="http",  # every agent-side module: the tests drive it over stdio and HTTP
        handlers=handlers,
        main=MAIN,
    )
    return {**os.environ, "PYTHONPATH": str(tmp)}


def load(tmp: Path, package: str) -> Any:
    """Import `<package>.handlers` in this process (unique package names: no clash)."""
    return import_from(tmp, f"{package}.handlers")


# the runtime's rooms: a module name -> its room (templates/runtime/<room>/<module>.py)
_ROOMS = {
    p.stem: p.parent.name
    for p in (Path(__file__).resolve().parents[1] / "templates" / "runtime").glob("*/*.py")
    if p.stem != "__init__"
}


def runtime_of(package: str, module: str) -> Any:
    """`<package>._generated.runtime.<room>.<module>` (`serve`: the top of the runtime)."""
    room = _ROOMS.get(module)
    dotted = f"{room}.{module}" if room else module
    return importlib.import_module(f"{package}._generated.runtime.{dotted}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_revisions(
    tmp: Path,
    shared_acp: Path,
    prefix: str,
    *,
    manifest: dict[str, Any],
    handlers: str,
    model_env: bool = True,
) -> dict[str, tuple[dict[str, str], str]]:
    """`handlers` and `manifest` generated for v1 (its unstable schema) and v2, as
    `<prefix>_<rev>`: rev -> (env, package).  `model_env=False`: no `ACP_MODEL` in the
    env (the manifest's or the agent's own model is the one run)."""
    out: dict[str, tuple[dict[str, str], str]] = {}
    for rev, unstable in (("v1", True), ("v2", False)):
        package = f"{prefix}_{rev}"
        env = build(
            tmp,
            shared_acp,
            package,
            rev=rev,
            unstable=unstable,
            manifest=manifest,
            handlers=handlers,
        )
        if not model_env:
            env.pop("ACP_MODEL", None)
        out[rev] = (env, package)
    return out


class Listening:
    """A generated HTTP agent started on a free port (`listening`): its process, the /acp
    URL it printed first on stderr, and the stderr lines after that one."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url
        self.where = url.split("://", 1)[1].split("/", 1)[0]  # host:port
        self.stderr: list[str] = []


@contextlib.contextmanager
def listening(
    env: dict[str, str], package: str, *args: str, cwd: Path | None = None
) -> Iterator[Listening]:
    """`python -m package --port 0 ARGS` until the block ends (terminated, then killed)."""
    proc = subprocess.Popen(
        [PY, "-m", package, "--port", "0", *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.fullmatch(r"listening on (https?://127\.0\.0\.1:\d+/acp) \(.*\)\n", line)
        assert m, f"first stderr line of the agent: {line!r}"
        agent = Listening(proc, m.group(1))
        threading.Thread(target=lambda: agent.stderr.extend(proc.stderr or ()), daemon=True).start()
        yield agent
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def start_http(env: dict[str, str], package: str, port: int, **extra_env: str) -> subprocess.Popen:
    """Run the generated agent over HTTP on 127.0.0.1:`port`; waits for /health."""
    import httpx

    full = {**env, "ACP_TEST_TRANSPORT": "http", **extra_env}
    proc = subprocess.Popen(
        [PY, "-m", package, "--port", str(port)],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise AssertionError(f"agent exited: {err}")
        assert time.monotonic() < deadline, "agent did not start"
        time.sleep(0.05)  # a poll: the agent is another process, /health has no push


def rss_kib(pid: int) -> int:
    """VmRSS of a process in KiB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def spawn(
    env: dict[str, str], package: str, *args: str, **kw: Any
) -> asyncio.subprocess.Process:
    """`python -m <package> *args` in `env`, stdin, stdout and stderr piped."""
    return await asyncio.create_subprocess_exec(
        PY,
        "-m",
        package,
        *args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        **kw,
    )


class StdioPeer:
    """Raw JSON-RPC lines to and from an agent subprocess; every read has a timeout."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.msgs: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.bad_lines: list[bytes] = []
        self.task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def start(cls, env: dict[str, str], package: str, *args: str) -> StdioPeer:
        return cls(await spawn(env, package, *args, limit=64 * 1024 * 1024))

    async def _read(self) -> None:
        assert self.proc.stdout
        while line := await self.proc.stdout.readline():
            try:
                msg = json.loads(line)
            except ValueError:
                self.bad_lines.append(line)
                continue
            if type(msg) is list and msg and all(type(m) is dict for m in msg):
                for m in msg:  # a JSON-RPC batch's answers, one array
                    self.msgs.put_nowait(m)
                continue
            if type(msg) is not dict:
                self.bad_lines.append(line)
                continue
            self.msgs.put_nowait(msg)

    async def send_bytes(self, data: bytes) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(data)
        await self.proc.stdin.drain()

    async def send(self, obj: Any) -> None:
        await self.send_bytes(json.dumps(obj).encode() + b"\n")

    async def recv(self, timeout: float = 10) -> dict[str, Any]:
        return await asyncio.wait_for(self.msgs.get(), timeout)

    async def until_id(self, rid: Any, timeout: float = 10) -> tuple[dict[str, Any], list[Any]]:
        seen: list[Any] = []
        while True:
            msg = await self.recv(timeout)
            if "method" not in msg and msg.get("id") == rid:
                return msg, seen
            seen.append(msg)

    async def call(self, rid: Any, method: str, params: Any = None) -> dict[str, Any]:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        await self.send(msg)
        return (await self.until_id(rid))[0]

    async def close(self, timeout: float = 10) -> tuple[int, bytes]:
        """Close stdin (EOF); the agent must exit by itself within `timeout`."""
        assert self.proc.stdin and self.proc.stderr
        self.proc.stdin.close()
        try:
            rc = await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError("the agent did not exit after EOF") from None
        err = await self.proc.stderr.read()
        self.task.cancel()
        return rc, err


async def open_session(peer: StdioPeer, base: int = 1) -> str:
    r = await peer.call(base, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    assert "result" in r, r
    r = await peer.call(base + 1, "session/new", {"cwd": "/tmp", "mcpServers": []})
    assert "result" in r, r
    return str(r["result"]["sessionId"])


def rpc(rid: int, method: str, params: Any) -> str:
    """A JSON-RPC request as the text a peer sends (one WebSocket message, one line)."""
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


def text_prompt(sid: str, text: str) -> dict[str, Any]:
    return {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}


class Core:
    """One connection of an agent's session core (or the HTTP transport's agent factory),
    in process: frames in, messages out."""

    def __init__(self, core: Any) -> None:
        self.msgs: list[dict[str, Any]] = []
        self.arrivals = Arrivals()

        async def sink(batch: list[tuple[bytes, Any]]) -> None:
            self.msgs.extend(orjson.loads(f) for f, _ in batch)
            self.arrivals.arrived()

        self.conn = core(sink)
        self.n = 0

    def send(self, method: str, params: Any) -> int:
        self.n += 1
        msg = {"jsonrpc": "2.0", "id": self.n, "method": method, "params": params}
        self.conn.feed(json.dumps(msg).encode())  # stdlib: deeper nesting than orjson writes
        return self.n

    def answered(self, rid: int) -> dict[str, Any] | None:
        for m in self.msgs:
            if m.get("id") == rid and "method" not in m:
                return m
        return None

    async def answer(self, rid: int, timeout: float = 10) -> dict[str, Any]:
        await self.arrivals.until(f"an answer to {rid}", lambda: self.answered(rid), timeout)
        m = self.answered(rid)
        assert m is not None
        return m

    async def call(self, method: str, params: Any) -> dict[str, Any]:
        return await self.answer(self.send(method, params))

    def position(self, rid: int) -> int:
        return next(i for i, m in enumerate(self.msgs) if m.get("id") == rid and "method" not in m)

    async def until(self, pred: Any, timeout: float = 10, what: str = "a condition") -> None:
        """Wake on each batch written until `pred()` holds (a condition on what was written)."""
        await self.arrivals.until(what, pred, timeout)

    def texts(self, sid: str) -> list[str]:
        return [
            m["params"]["update"]["content"]["text"]
            for m in self.msgs
            if m.get("method") == "session/update" and m["params"]["sessionId"] == sid
        ]
