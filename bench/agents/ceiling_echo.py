"""The ceiling: an echo agent with the standard library only and no validation at all.

It reads one JSON-RPC message a line, answers `initialize`, `session/new` and
`session/prompt` (each text block streamed back as one `agent_message_chunk`, then
`end_turn`) and writes each prompt's frames with one write.  No schema, no session
store, no concurrency: what a stdio agent in Python costs at the least, the bound the
generated agent is compared with (bench/bench_stdio.py).
"""

from __future__ import annotations

import json
import sys
import uuid


def main() -> None:
    read = sys.stdin.buffer.readline
    out = sys.stdout.buffer
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    while line := read():
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        frames = []
        if method == "initialize":
            result: object = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
        elif method == "session/new":
            result = {"sessionId": uuid.uuid4().hex}
        elif method == "session/prompt":
            sid = msg["params"]["sessionId"]
            for block in msg["params"]["prompt"]:
                if block.get("type") == "text":
                    update = {"sessionUpdate": "agent_message_chunk", "content": block}
                    note = {"sessionId": sid, "update": update}
                    frames.append({"jsonrpc": "2.0", "method": "session/update", "params": note})
            result = {"stopReason": "end_turn"}
        elif rid is None:
            continue  # a notification (session/cancel): nothing to answer
        else:
            error = {"code": -32601, "message": f"method not found: {method}"}
            frames.append({"jsonrpc": "2.0", "id": rid, "error": error})
            result = None
        if result is not None:
            frames.append({"jsonrpc": "2.0", "id": rid, "result": result})
        out.write(b"".join(dumps(f).encode() + b"\n" for f in frames))
        out.flush()


if __name__ == "__main__":
    main()
