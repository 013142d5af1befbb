"""A scriptable stdio ACP client (v1) for the conformance kit's tests: `conform_client.py
-- AGENT_COMMAND...`, the prompt on stdin.  Right by default; FAKE_CLIENT_DEFECT plants
one defect (tests/e2e/test_conform_client.py lists them)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

DEFECT = os.environ.get("FAKE_CLIENT_DEFECT", "")
THINK = 1.0  # seconds a permission question waits for the user (a SIGINT cancels the turn)


def main() -> int:
    argv = sys.argv[sys.argv.index("--") + 1 :]
    prompt = sys.stdin.readline().strip() or "hello"
    agent = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert agent.stdin is not None and agent.stdout is not None
    lock = threading.Lock()
    answers: dict[int, dict[str, Any]] = {}
    arrived = threading.Condition()
    sid_box: dict[str, str] = {}
    interrupted = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: interrupted.set())  # Ctrl-C: cancel the turn

    def send(msg: dict[str, Any]) -> None:
        with lock:
            agent.stdin.write(json.dumps(msg).encode() + b"\n")  # type: ignore[union-attr]
            agent.stdin.flush()  # type: ignore[union-attr]

    def handle(msg: dict[str, Any]) -> None:
        method, rid = msg.get("method"), msg.get("id")
        params = msg.get("params") or {}
        if method is None:
            with arrived:
                answers[rid] = msg  # type: ignore[index]
                arrived.notify_all()
            return
        if method == "session/update":
            kind = (params.get("update") or {}).get("sessionUpdate")
            if DEFECT == "crash-on-unknown" and kind not in (
                "agent_message_chunk",
                "user_message_chunk",
            ):
                os._exit(4)
            return
        if rid is None:
            if DEFECT == "answers-notification":
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {"code": -32601, "message": "Method not found"},
                    }
                )
            return
        if method == "session/request_permission":
            options = params.get("options") or []
            if interrupted.wait(THINK):
                send(
                    {
                        "jsonrpc": "2.0",
                        "method": "session/cancel",
                        "params": {"sessionId": sid_box["sid"]},
                    }
                )
                if DEFECT == "cancel-keeps-question":
                    return  # the question stays pending after the cancel
                outcome = (
                    {"outcome": "selected", "optionId": options[0]["optionId"]}
                    if DEFECT == "cancel-selects"
                    else {"outcome": "cancelled"}
                )
                send({"jsonrpc": "2.0", "id": rid, "result": {"outcome": outcome}})
                return
            chosen = "made-up" if DEFECT == "unoffered-option" else options[0]["optionId"]
            send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {"outcome": {"outcome": "selected", "optionId": chosen}},
                }
            )
        elif method == "fs/read_text_file":
            reply_id = rid + 1 if DEFECT == "wrong-id" else rid
            text = Path(params["path"]).read_text()
            send({"jsonrpc": "2.0", "id": reply_id, "result": {"content": text}})
        else:
            send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "error": {"code": -32601, "message": "Method not found"},
                }
            )

    def reader() -> None:
        for line in agent.stdout:  # type: ignore[union-attr]
            if line.strip():
                handle(json.loads(line))

    threading.Thread(target=reader, daemon=True).start()

    def request(rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        with arrived:
            arrived.wait_for(lambda: rid in answers, timeout=20)
        return answers.get(rid, {})

    cwd = os.getcwd()
    caps = {"fs": {"readTextFile": True, "writeTextFile": False}, "terminal": False}
    init = {
        "protocolVersion": 1,
        "clientCapabilities": caps,
        "clientInfo": {"name": "fake", "version": "1"},
    }
    if DEFECT == "no-initialize":
        request(1, "session/new", {"cwd": cwd, "mcpServers": []})
    advertised = request(2, "initialize", init).get("result", {}).get("agentCapabilities") or {}
    if "list" in (advertised.get("sessionCapabilities") or {}):
        page = request(10, "session/list", {}).get("result") or {}
        if "nextCursor" in page:
            cursor = page["nextCursor"]
            if DEFECT == "cursor-changed":  # decoded and re-encoded: the padding dropped
                cursor = cursor.rstrip("=").replace("=", "")
            request(11, "session/list", {"cursor": cursor})
    sid = (
        request(3, "session/new", {"cwd": cwd, "mcpServers": []})
        .get("result", {})
        .get("sessionId", "")
    )
    sid_box["sid"] = sid
    if DEFECT == "calls-load":
        request(4, "session/load", {"sessionId": sid, "cwd": cwd, "mcpServers": []})
    blocks: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
    if DEFECT == "image-prompt":
        blocks.append({"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="})
    request(5, "session/prompt", {"sessionId": sid, "prompt": blocks})
    agent.stdin.close()
    agent.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
