"""The coder example as a test subject: its project built per revision, and `Editor`, a raw
JSON-RPC client that serves what an editor serves (fs/* inside a temp folder, terminal/*
by running the command, session/request_permission with a chosen option) and records
every request the agent sends.  Used by test_coder.py and the SDK interop tests."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from hardening_support import spawn
from project_support import write_project
from wait_support import Arrivals

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable


def build_coder(
    tmp: Path, schema: dict[str, Any], package: str, transport: str = "stdio"
) -> dict[str, str]:
    """The project `agentgen new` makes from examples/coder on `schema` for `transport`,
    with its handlers; the environment that runs it (`python -m <package>`; over HTTP
    with `--port`)."""
    from generator.manifest.load import load_manifest

    write_project(
        tmp,
        package,
        schema=schema,
        manifest=load_manifest(REPO / "examples" / "coder" / "agent.yaml").data,
        transport=transport,
        handlers=(REPO / "examples" / "coder" / "handlers.py").read_text(),
        main="from ._generated import run_agent\nfrom .handlers import Agent\n\n"
        f"run_agent(Agent, None, transport={transport!r})\n",
    )
    return {**os.environ, "PYTHONPATH": str(tmp), "ACP_SESSION_DB": str(tmp / f"{package}.db")}


# the client methods FsAndTerminal serves (what a TS client forwards: ACP_TS_FORWARD)
SERVED = (
    "fs/read_text_file",
    "fs/write_text_file",
    "terminal/create",
    "terminal/output",
    "terminal/wait_for_exit",
    "terminal/kill",
    "terminal/release",
)


class FsAndTerminal:
    """What an editor serves an agent: files inside `root`, commands run as subprocesses."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.terminals: dict[str, asyncio.subprocess.Process] = {}
        self.outputs: dict[str, bytes] = {}
        self.released: set[str] = set()
        self.killed: set[str] = set()

    def _path(self, raw: Any) -> Path:
        path = Path(str(raw)).resolve()
        if not path.is_relative_to(self.root):
            raise PermissionError(f"{raw} is outside {self.root}")
        return path

    async def serve(self, method: str, params: dict[str, Any]) -> Any:
        if method == "fs/read_text_file":
            text = self._path(params["path"]).read_text()
            return {"content": text}
        if method == "fs/write_text_file":
            self._path(params["path"]).write_text(params["content"])
            return {}
        if method == "terminal/create":
            tid = f"term-{len(self.terminals) + 1}"
            proc = await asyncio.create_subprocess_exec(
                params["command"] if params["command"] != "python" else PY,
                *params.get("args", []),
                cwd=params.get("cwd") or str(self.root),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            self.terminals[tid] = proc
            return {"terminalId": tid}
        tid = params["terminalId"]
        proc = self.terminals[tid]
        if method == "terminal/wait_for_exit":
            out, _ = await proc.communicate()
            self.outputs[tid] = out or b""
            return {"exitCode": proc.returncode}
        if method == "terminal/output":
            status = {"exitCode": proc.returncode} if proc.returncode is not None else None
            out = {"output": self.outputs.get(tid, b"").decode(), "truncated": False}
            return {**out, "exitStatus": status} if status else out
        if method == "terminal/kill":
            if proc.returncode is None:
                proc.kill()
                self.killed.add(tid)
            return {}
        if method == "terminal/release":
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            self.released.add(tid)
            return {}
        raise KeyError(method)


class Editor:
    """A raw JSON-RPC client over the agent's stdio (its own implementation: the SDK
    peers are tested separately); `permit` picks the permission option kind."""

    def __init__(self, proc: asyncio.subprocess.Process, root: Path) -> None:
        self.proc = proc
        self.serves = FsAndTerminal(root)
        self.permit = "allow_once"
        self.refuse_writes: int | None = None  # an error code answering fs/write_text_file
        self.hold: set[str] = set()  # methods never answered (a user who has not decided yet)
        self.requests: list[dict[str, Any]] = []  # every request the agent sent
        self.updates: list[dict[str, Any]] = []
        self.updated = Arrivals()
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.next_id = 0
        self.reader = asyncio.get_running_loop().create_task(self._read())
        self.reader.add_done_callback(lambda _: self.updated.arrived())  # EOF: no more updates

    @classmethod
    async def start(cls, env: dict[str, str], package: str, root: Path) -> Editor:
        return cls(await spawn(env, package), root)

    async def _read(self) -> None:
        assert self.proc.stdout
        while line := await self.proc.stdout.readline():
            self._take(json.loads(line))

    def _take(self, msg: dict[str, Any]) -> None:
        if "method" in msg and "id" in msg:
            self.requests.append(msg)
            self.updated.arrived()
            asyncio.get_running_loop().create_task(self._answer(msg))
        elif msg.get("method") == "session/update":
            self.updates.append(msg["params"]["update"])
            self.updated.arrived()
        else:
            self.inbox.put_nowait(msg)

    async def _answer(self, msg: dict[str, Any]) -> None:
        method, params = msg["method"], msg.get("params") or {}
        if method in self.hold:
            return
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": msg["id"]}
        if method == "session/request_permission":
            chosen = next(o for o in params["options"] if o["kind"] == self.permit)
            reply["result"] = {"outcome": {"outcome": "selected", "optionId": chosen["optionId"]}}
        elif method == "fs/write_text_file" and self.refuse_writes is not None:
            reply["error"] = {"code": self.refuse_writes, "message": "refused: the user said no"}
        else:
            try:
                reply["result"] = await self.serves.serve(method, params)
            except (OSError, KeyError) as exc:
                reply["error"] = {"code": -32603, "message": str(exc)}
        await self.send(reply)

    async def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        await self.proc.stdin.drain()

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        rid = self.next_id
        if self.meta:  # e.g. the trace context of the editor's own span (`traceparent`)
            params = {**params, "_meta": dict(self.meta)}
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            msg = await asyncio.wait_for(self.inbox.get(), 30)
            if msg.get("id") == rid:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return dict(msg["result"])

    async def initialize(self, version: int, caps: dict[str, Any]) -> dict[str, Any]:
        if version == 2:
            params = {"protocolVersion": 2, "info": {"name": "editor", "version": "1"}}
            params["capabilities"] = caps
        else:
            params = {"protocolVersion": 1, "clientInfo": {"name": "editor", "version": "1"}}
            params["clientCapabilities"] = caps
        return await self.call("initialize", params)

    async def prompt(self, sid: str, text: str, *, v2: bool) -> str:
        """One prompt to its end: the stop reason (v2: from the idle state update)."""
        result = await self.call(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        )
        if not v2:
            return str(result["stopReason"])

        def idles() -> list[dict[str, Any]]:
            return [
                u
                for u in self.updates
                if u.get("sessionUpdate") == "state_update" and u.get("state") == "idle"
            ]

        def went_idle() -> bool:
            assert not self.reader.done(), "the agent's stdout ended before the turn went idle"
            return len(idles()) > self.idle_seen

        await self.updated.until("the v2 turn going idle", went_idle, 30)
        idle = idles()
        self.idle_seen = len(idle)
        return str(idle[-1].get("stopReason"))

    idle_seen = 0
    meta: dict[str, Any] | None = None  # `_meta` sent with every request

    def texts(self) -> list[str]:
        return [
            u["content"]["text"]
            for u in self.updates
            if u.get("sessionUpdate") == "agent_message_chunk"
            and u.get("content", {}).get("type") == "text"
        ]

    def kinds(self) -> list[str]:
        return [u["sessionUpdate"] for u in self.updates]

    def methods(self) -> list[str]:
        return [r["method"] for r in self.requests]

    async def stop(self) -> bytes:
        assert self.proc.stdin and self.proc.stderr
        self.proc.stdin.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), 10)
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        self.reader.cancel()
        return await self.proc.stderr.read()


class LinkedEditor(Editor):
    """The same editor over any link, not a process's pipes: `send_frame` writes one
    frame, `frames` holds what the agent sent (None: the link ended).  An agent's
    connection in this process (what stdio feeds), a WebSocket."""

    def __init__(
        self,
        send_frame: Any,
        frames: asyncio.Queue[bytes | None],
        root: Path,
    ) -> None:
        self._send_frame = send_frame
        self._frames = frames
        super().__init__(None, root)  # type: ignore[arg-type]

    async def _read(self) -> None:
        while (frame := await self._frames.get()) is not None:
            self._take(json.loads(frame))

    async def send(self, msg: dict[str, Any]) -> None:
        await self._send_frame(json.dumps(msg).encode())

    async def stop(self) -> bytes:
        self.reader.cancel()
        for proc in self.serves.terminals.values():
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        return b""


def decode_patch(data: str) -> str:
    return base64.b64decode(data).decode()
