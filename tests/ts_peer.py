"""The official TypeScript SDK as a test peer: one npm install per checkout, the drivers in
tests/peers/, and a Python handle on the remote-controlled client (ts_client.mjs).

The package is installed with npm into `.cache/npm-peers/` (never committed, kept between
runs; `ACP_TS_PEER_DIR` moves it); the drivers are copied beside its node_modules so their
`import "@agentclientprotocol/sdk/..."` resolves through the package's own export map.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PEERS = Path(__file__).resolve().parent / "peers"
SDK = "@agentclientprotocol/sdk"
SDK_VERSION = "2.4.0"
PY = sys.executable

# (test id, SDK entry of ts_client.mjs, schema file in the npm package)
REVISIONS = {
    "v1": ("v1", "schema/v1/schema.json"),
    "v1-unstable": ("v1-unstable", "schema/v1/schema.unstable.json"),
    "v2": ("v2", "schema/v2/schema.json"),
}


def peer_dir() -> Path:
    return Path(os.environ.get("ACP_TS_PEER_DIR") or REPO / ".cache" / "npm-peers")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # one install for every xdist worker
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def install() -> Path:
    """The directory holding node_modules/@agentclientprotocol/sdk@2.4.0 and the drivers."""
    root = peer_dir()
    with _locked(root.parent / (root.name + ".lock")):
        pkg = root / "node_modules" / SDK / "package.json"
        installed = json.loads(pkg.read_text())["version"] if pkg.exists() else None
        if installed != SDK_VERSION:
            npm = shutil.which("npm")
            if npm is None or shutil.which("node") is None:
                raise AssertionError(
                    "the TypeScript SDK interop tests need Node.js and npm on PATH "
                    f"(they install {SDK}@{SDK_VERSION} into {root})"
                )
            root.mkdir(parents=True, exist_ok=True)
            manifest = {"private": True, "type": "module", "dependencies": {SDK: SDK_VERSION}}
            (root / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--ignore-scripts"],
                cwd=root,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if done.returncode != 0:
                raise AssertionError(f"npm install {SDK}@{SDK_VERSION} failed:\n{done.stderr}")
        for script in sorted(PEERS.glob("*.mjs")):
            target = root / script.name
            text = script.read_bytes()
            if not target.exists() or target.read_bytes() != text:
                tmp = target.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_bytes(text)
                tmp.replace(target)
    return root


def schema_file(root: Path, revision: str) -> Path:
    return root / "node_modules" / SDK / REVISIONS[revision][1]


class PeerError(Exception):
    """A JSON-RPC error the TS SDK handed back for one of our requests."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message
        self.data = data


class TsClient:
    """ts_client.mjs: the SDK's `client()` app driving an agent subprocess."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.updates: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.sdk_errors: list[str] = []
        self.forwarded: list[dict[str, Any]] = []  # agent requests served by `serve`
        # `serve(method, params) -> result` answers them (ACP_TS_FORWARD names them)
        self.serve: Any = None
        self.closed = False
        self._next = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._changed = asyncio.Event()
        self._stderr = bytearray()
        loop = asyncio.get_running_loop()
        self._reader = loop.create_task(self._read())
        self._err_reader = loop.create_task(self._read_stderr())

    async def _read_stderr(self) -> None:  # drained as it comes: a full pipe would block
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(65536):
            self._stderr += chunk

    @classmethod
    async def start(cls, root: Path, api: str, command: list[str], env: dict[str, str]) -> TsClient:
        proc = await asyncio.create_subprocess_exec(
            "node",
            str(root / "ts_client.mjs"),
            api,
            "--",
            *command,
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            limit=16 * 1024 * 1024,
        )
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            msg = json.loads(line)
            if "id" in msg:
                fut = self._waiting.pop(msg["id"], None)
                if fut is not None and not fut.done():
                    if "error" in msg:
                        e = msg["error"]
                        fut.set_exception(PeerError(e["code"], e["message"], e.get("data")))
                    else:
                        fut.set_result(msg["result"])
                continue
            event = msg.get("event")
            if event == "update":
                self.updates.append(msg["params"])
            elif event == "forwarded":
                self.forwarded.append(msg)
                if self.serve is not None:
                    asyncio.get_running_loop().create_task(self._reply(msg))
            elif event == "request":
                self.requests.append(msg)
            elif event == "sdk_error":
                self.sdk_errors.append(msg["text"])
            elif event == "closed":
                self.closed = True
            self._changed.set()
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(AssertionError("the TS client driver exited"))

    async def _reply(self, msg: dict[str, Any]) -> None:
        try:
            result = await self.serve(msg["method"], msg.get("params") or {})
        except Exception as exc:  # noqa: BLE001 - handed to the agent as an error
            self.send("reply", rid=msg["rid"], error={"code": -32603, "message": str(exc)})
        else:
            self.send("reply", rid=msg["rid"], result=result)

    def send(self, op: str, **fields: Any) -> asyncio.Future[Any]:
        """Send one command; the future resolves with its result (PeerError on error)."""
        assert self.proc.stdin is not None
        self._next += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = fut
        fut.command_id = self._next  # type: ignore[attr-defined]
        line = json.dumps({"id": self._next, "op": op, **fields}) + "\n"
        self.proc.stdin.write(line.encode())
        return fut

    async def call(self, op: str, timeout: float = 20, **fields: Any) -> Any:
        return await asyncio.wait_for(self.send(op, **fields), timeout)

    async def request(self, method: str, params: Any = None, timeout: float = 20) -> Any:
        return await self.call("request", timeout, method=method, params=params or {})

    async def wait_for(self, predicate: Any, timeout: float = 20) -> None:
        """Until `predicate()` holds (checked after every event)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate():
            self._changed.clear()
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise AssertionError("timed out waiting for the TS client's events")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    def texts(self, session_id: str | None = None) -> list[str]:
        """The text of each agent_message_chunk the SDK accepted, in order."""
        out = []
        for p in self.updates:
            u = p.get("update") or {}
            if session_id is not None and p.get("sessionId") != session_id:
                continue
            content = u.get("content")
            chunk = u.get("sessionUpdate") == "agent_message_chunk"
            if chunk and isinstance(content, dict) and content.get("type") == "text":
                out.append(content["text"])
        return out

    async def close(self) -> tuple[int, str]:
        """End the connection; (the agent's exit code, the agent's and driver's stderr)."""
        try:
            result = await self.call("close", timeout=15)
            code = int(result["exitCode"]) if result.get("exitCode") is not None else -1
        finally:
            if self.proc.returncode is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.proc.wait(), 10)
                if self.proc.returncode is None:
                    self.proc.kill()
                    await self.proc.wait()
            self._reader.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._err_reader, 5)
        return code, self._stderr.decode(errors="replace")
