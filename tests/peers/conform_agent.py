"""A scriptable stdio ACP agent for the conformance kit's tests (stdlib only, quick to start).

Right by default, for the protocol version FAKE_PROTOCOL names (1, 2, or `both`: each
connection in the version its client asks for, else 2); FAKE_DEFECT
plants one defect, each one the kit must catch under the requirement named for it
(tests/e2e/test_conform_agent.py lists them).  A prompt whose text is `hang` starts a turn
that runs until it is cancelled.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Any

SPEAKS = os.environ.get("FAKE_PROTOCOL", "1")
DEFECT = os.environ.get("FAKE_DEFECT", "")


class Agent:
    def __init__(self) -> None:
        self.sessions: dict[str, dict[str, Any]] = {}
        self.cancels: dict[str, asyncio.Event] = {}
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.next_id = 1000
        self.out = sys.stdout.buffer
        self.version = 2 if SPEAKS == "both" else int(SPEAKS)

    @property
    def v2(self) -> bool:
        return self.version >= 2

    # ---- wire ------------------------------------------------------------------------------
    def write(self, msg: Any) -> None:
        data = json.dumps(msg, ensure_ascii=False)
        result = msg.get("result") if isinstance(msg, dict) else None
        latin = isinstance(result, dict) and "protocolVersion" in result and type(msg["id"]) is int
        if DEFECT == "latin1" and latin:
            self.out.write(data.encode("latin-1", "replace") + b"\n")
        else:
            self.out.write(data.encode() + b"\n")
        self.out.flush()

    def reply(self, rid: Any, result: Any) -> None:
        if DEFECT == "string-id-as-int" and isinstance(rid, str):
            rid = 0
        self.write({"jsonrpc": "2.0", "id": rid, "result": result})

    def error(self, rid: Any, code: int, message: str) -> None:
        msg: dict[str, Any] = {
            "jsonrpc": "2.0",
            "id": rid,
            "error": {"code": code, "message": message},
        }
        if DEFECT == "result-and-error":
            msg["result"] = None
        self.write(msg)

    def update(self, sid: str, update: dict[str, Any]) -> None:
        self.write(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {"sessionId": sid, "update": update},
            }
        )

    async def call(self, method: str, params: Any) -> Any:
        rid = self.next_id
        self.next_id += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[rid] = fut
        self.write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return await fut

    # ---- one frame ----------------------------------------------------------------------------
    def handle_line(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            self.error(None, -32700, "Parse error")
            return
        if isinstance(msg, list):
            self.handle_batch(msg)
            return
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            self.error(None, -32600, "Invalid Request")
            return
        if "method" not in msg:
            fut = self.pending.pop(msg.get("id"), None)
            if fut is not None and not fut.done():
                fut.set_result(msg)
            return
        if "id" not in msg:
            if DEFECT == "answers-notification":
                self.write({"jsonrpc": "2.0", "id": None, "result": {}})
            self.notification(msg["method"], msg.get("params") or {})
            return
        asyncio.get_running_loop().create_task(
            self.request(msg["id"], msg["method"], msg.get("params") or {})
        )

    def handle_batch(self, items: list[Any]) -> None:
        if not items:
            err = {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32600, "message": "Invalid Request"},
            }
            self.write([err] if DEFECT == "batch-empty-wrapped" else err)
            return
        calls = [m for m in items if isinstance(m, dict) and "id" in m and "method" in m]
        for m in items:
            if isinstance(m, dict) and "id" not in m and "method" in m:
                self.notification(m["method"], m.get("params") or {})
        if calls:
            asyncio.get_running_loop().create_task(self.batch(calls))

    async def batch(self, calls: list[dict[str, Any]]) -> None:
        answers = []
        for m in calls:
            result = await self.answer(m["method"], m.get("params") or {})
            answers.append({"jsonrpc": "2.0", "id": m["id"], "result": result})
        self.write(answers)

    def notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "session/cancel":
            event = self.cancels.get(params.get("sessionId", ""))
            if event is not None:
                event.set()

    async def request(self, rid: Any, method: str, params: dict[str, Any]) -> None:
        if method.startswith("_"):
            if DEFECT != "ext-silent":
                self.reply(rid, {})
            return
        if method == "session/prompt":
            await self.prompt(rid, params)
            return
        if method in ("session/load", "session/resume"):
            await self.reopen(rid, method, params)
            return
        result = await self.answer(method, params)
        if result is None:
            self.error(rid, -32601, "Method not found")
        else:
            self.reply(rid, result)

    # ---- methods ----------------------------------------------------------------------------------
    async def answer(self, method: str, params: dict[str, Any]) -> Any:
        if method == "initialize":
            return self.initialize(params)
        if method == "session/new":
            return self.new(params)
        if method == "session/list":
            return self.list(params)
        if method in ("session/close", "session/delete", "session/set_mode"):
            return {}
        if method == "session/set_config_option":
            return self.set_config(params)
        return None

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        if SPEAKS == "both":
            self.version = asked if asked in (1, 2) else 2
        version = asked if DEFECT == "echo-version" else self.version
        title = "Fake Agent \u00e9t\u00e9" if DEFECT == "latin1" else "Fake Agent"
        info = {"name": "fake-agent", "version": "1.0.0", "title": title}
        methods: list[dict[str, Any]] = []
        if DEFECT == "terminal-auth":
            methods.append(
                {"id": "login", "name": "Log in", "type": "terminal", "args": ["--login"]}
            )
        if self.v2:
            caps = {"session": {"prompt": {"embeddedContext": {}}, "delete": {}}}
            return {
                "protocolVersion": version,
                "info": info,
                "capabilities": caps,
                "authMethods": methods,
            }
        caps = {
            "loadSession": True,
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
            "sessionCapabilities": {"resume": {}, "list": {}, "close": {}, "delete": {}},
        }
        return {
            "protocolVersion": version,
            "agentInfo": info,
            "agentCapabilities": caps,
            "authMethods": methods,
        }

    def options(self, value: str) -> list[dict[str, Any]]:
        key = "configId" if self.v2 else "id"
        choices = [{"value": "small", "name": "Small"}, {"value": "large", "name": "Large"}]
        return [
            {
                key: "model",
                "name": "Model",
                "type": "select",
                "currentValue": value,
                "options": choices,
            },
            {
                key: "style",
                "name": "Style",
                "type": "select",
                "currentValue": "plain",
                "options": [{"value": "plain", "name": "Plain"}],
            },
        ]

    def new(self, params: dict[str, Any]) -> dict[str, Any]:
        sid = "sess_fixed" if DEFECT == "same-session" else f"sess_{uuid.uuid4().hex}"
        self.sessions[sid] = {"cwd": params.get("cwd"), "history": []}
        result: dict[str, Any] = {"sessionId": sid, "configOptions": self.options("small")}
        if not self.v2:
            current = "missing" if DEFECT == "bad-mode" else "ask"
            result["modes"] = {
                "currentModeId": current,
                "availableModes": [{"id": "ask", "name": "Ask"}, {"id": "code", "name": "Code"}],
            }
        return result

    def list(self, params: dict[str, Any]) -> dict[str, Any]:
        cwd = params.get("cwd")
        found = [
            {"sessionId": sid, "cwd": s["cwd"]}
            for sid, s in self.sessions.items()
            if cwd is None or s["cwd"] == cwd or DEFECT == "list-ignores-cwd"
        ]
        return {"sessions": found}

    def set_config(self, params: dict[str, Any]) -> dict[str, Any]:
        options = self.options(str(params.get("value")))
        return {"configOptions": options[:1] if DEFECT == "config-partial" else options}

    async def reopen(self, rid: Any, method: str, params: dict[str, Any]) -> None:
        sid = params.get("sessionId", "")
        history = self.sessions.get(sid, {}).get("history", [])
        replay = method == "session/load" or DEFECT == "resume-replays"
        if replay and DEFECT != "late-replay":
            for update in history:
                self.update(sid, update)
        self.reply(rid, {})
        if replay and DEFECT == "late-replay":
            for update in history:
                self.update(sid, update)

    # ---- a prompt turn --------------------------------------------------------------------------------
    def chunk(self, text: str, kind: str = "agent_message_chunk") -> dict[str, Any]:
        update: dict[str, Any] = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
        if self.v2:
            update["messageId"] = str(uuid.uuid4())
        return update

    def state(self, state: str, stop: str | None = None) -> dict[str, Any]:
        update: dict[str, Any] = {"sessionUpdate": "state_update", "state": state}
        if stop is not None:
            update["stopReason"] = stop
        return update

    async def prompt(self, rid: Any, params: dict[str, Any]) -> None:
        sid = params.get("sessionId", "")
        if sid not in self.sessions:
            self.error(rid, -32602, "Unknown session")
            return
        blocks = [b for b in params.get("prompt") or [] if isinstance(b, dict)]
        text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        history = self.sessions[sid]["history"]
        history.append(self.chunk(text, "user_message_chunk"))
        if self.v2:
            mid = str(uuid.uuid4())
            self.reply(rid, {"messageId": mid})
            self.update(sid, {"sessionUpdate": "user_message", "messageId": mid, "content": blocks})
            if DEFECT != "no-running":
                self.update(sid, self.state("running"))
        if text == "hang":
            stop = await self.hang(sid)
        else:
            stop = await self.echo(sid, text, history)
        if self.v2:
            self.update(sid, self.state("idle", stop))
        else:
            self.reply(rid, {"stopReason": stop})
        if text != "hang" and DEFECT == "update-after-answer":
            self.update(sid, self.chunk("one more"))
        if text == "hang" and DEFECT == "update-after-cancel":
            self.update(sid, self.chunk("still here"))

    async def echo(self, sid: str, text: str, history: list[dict[str, Any]]) -> str:
        if DEFECT == "undeclared-fs":
            await self.call("fs/read_text_file", {"sessionId": sid, "path": "/etc/hostname"})
        update = self.chunk(text)
        history.append(update)
        self.update("sess_other" if DEFECT == "wrong-session-update" else sid, update)
        return "end_turn"

    async def hang(self, sid: str) -> str:
        event = self.cancels[sid] = asyncio.Event()
        self.update(sid, self.chunk("started"))
        await event.wait()
        if DEFECT == "cancel-ignored":
            await asyncio.sleep(1.5)
            return "end_turn"
        return "cancelled"


async def main() -> None:
    if DEFECT == "stdout-noise":
        sys.stdout.write("fake agent starting\n")
        sys.stdout.flush()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    agent = Agent()
    while True:
        line = await reader.readline()
        if not line:
            return
        if line.strip():
            agent.handle_line(line)


if __name__ == "__main__":
    asyncio.run(main())
