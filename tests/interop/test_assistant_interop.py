"""examples/assistant driven by a client nobody on the project wrote (the official Python
SDK's), its model a real OpenAI Chat Completions endpoint served here on 127.0.0.1 that
scripts the model's tool calls (issue 33's "Done when"): the client sees the streamed
text, a file edit as a diff asked with its permission, a command run in its terminal, and
the tool result of an MCP server it passed in session/new.  No network, no key."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, cast

import mcp_support as ms
import pytest
from coder_support import PY, SERVED, FsAndTerminal
from project_support import write_project
from sdk_editor import SdkEditor

pytestmark = pytest.mark.slow  # an SDK peer and an MCP server process

REPO = Path(__file__).resolve().parents[2]
SOURCE = 'print("hello")\n'
STEPS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "app.py"}),
    ("write_file", {"path": "app.py", "content": 'print("bye")\n'}),
    ("run_command", {"command": "python", "args": ["-m", "py_compile", "app.py"]}),
    ("tools_add", {"a": 40, "b": 2}),
]


class Scripted(BaseHTTPRequestHandler):
    """The model: one tool call a request until STEPS are done, then two text deltas
    quoting what the tools returned."""

    requests: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, *args: Any) -> None:
        return

    def _send(self, delta: dict[str, Any], finish: str | None, model: str) -> None:
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        results = [m for m in body["messages"] if m["role"] == "tool"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        model = body["model"]
        if len(results) < len(STEPS):
            name, args = STEPS[len(results)]
            call = {
                "index": 0,
                "id": f"call_{len(results)}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            self._send({"role": "assistant", "tool_calls": [call]}, None, model)
            self._send({}, "tool_calls", model)
        else:
            self._send({"role": "assistant", "content": "Done: "}, None, model)
            said = " | ".join(str(m["content"])[:40] for m in results)
            self._send({"content": said}, None, model)
            self._send({}, "stop", model)
        self.wfile.write(b"data: [DONE]\n\n")


@contextmanager
def model_server() -> Iterator[str]:
    Scripted.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def write_assistant(dest: Path, package: str, schema: dict[str, Any]) -> None:
    """examples/assistant generated for `schema` as `package` in `dest`."""
    from generator.manifest.load import load_manifest

    write_project(
        dest,
        package,
        schema=schema,
        manifest=load_manifest(REPO / "examples" / "assistant" / "agent.yaml").data,
        handlers=(REPO / "examples" / "assistant" / "handlers.py").read_text(),
        main="from ._generated import run_agent\nfrom .handlers import Agent\n\n"
        "run_agent(Agent, None)\n",
    )


def test_python_sdk_client_drives_the_assistant_through_a_whole_model_turn(
    tmp_path: Path,
) -> None:
    import acp
    from acp import schema as S

    from generator.sources import load_schema

    schema = dict(load_schema("npm:@agentclientprotocol/sdk@2.4.0#schema/v1/schema.json").data)
    write_assistant(tmp_path / "agent", "py_assistant", schema)
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text(SOURCE)
    serves = FsAndTerminal(work)
    server = ms.stdio_server(tmp_path)

    editor = SdkEditor(serves)

    async def go(url: str) -> str:
        env = {
            **os.environ,
            "PYTHONPATH": str(tmp_path / "agent"),
            "ACP_SESSION_DB": str(tmp_path / "sessions.db"),
            "ACP_MODEL": "openai:gpt-test",
            "OPENAI_BASE_URL": url,
            "OPENAI_API_KEY": "sk-test-not-a-key",
        }
        log = tmp_path / "agent.log"
        with log.open("wb") as err:
            async with acp.spawn_agent_process(
                cast(Any, editor),
                PY,
                "-m",
                "py_assistant",
                env=env,
                transport_kwargs={"stderr": err.fileno(), "shutdown_timeout": 10.0},
            ) as (conn, proc):
                caps = S.ClientCapabilities(
                    fs=S.FileSystemCapabilities(read_text_file=True, write_text_file=True),
                    terminal=True,
                )
                await asyncio.wait_for(
                    conn.initialize(protocol_version=1, client_capabilities=caps), 20
                )
                mcp = S.McpServerStdio(
                    name=server["name"], command=server["command"], args=server["args"], env=[]
                )
                new = await asyncio.wait_for(conn.new_session(cwd=str(work), mcp_servers=[mcp]), 20)
                prompt = [acp.text_block("Say bye instead of hello, then check it compiles.")]
                answer = await asyncio.wait_for(
                    conn.prompt(session_id=new.session_id, prompt=prompt), 60
                )
            assert proc.returncode == 0
        assert "Traceback" not in log.read_text(), log.read_text()
        return str(answer.stop_reason)

    with model_server() as url:
        assert asyncio.run(go(url)) == "end_turn"
    assert (work / "app.py").read_text() == 'print("bye")\n'
    # the model got the editor's tools, the MCP server's, and the manifest's instructions
    first = Scripted.requests[0]
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {"read_file", "write_file", "run_command", "tools_add"} <= offered, offered
    assert "careful coding assistant" in first["messages"][0]["content"]
    assert editor.calls[:2] == ["fs/read_text_file", "fs/read_text_file"]  # read, diff base
    assert "fs/write_text_file" in editor.calls and "terminal/release" in editor.calls
    assert editor.asked == ["Write app.py", "python -m py_compile app.py"]
    starts = [u for u in editor.updates if u["sessionUpdate"] == "tool_call"]
    assert [s["kind"] for s in starts] == ["read", "edit", "execute", "other"]
    diff = starts[1]["content"][0]
    assert diff["type"] == "diff" and diff["oldText"] == SOURCE
    assert starts[2]["title"] == "python -m py_compile app.py"
    assert starts[3]["title"] == "tools_add: 40" and starts[3]["rawInput"] == {"a": 40, "b": 2}
    ends = [u for u in editor.updates if u["sessionUpdate"] == "tool_call_update"]
    assert {u["toolCallId"] for u in ends if u.get("status") == "completed"} >= {
        s["toolCallId"] for s in starts
    }
    text = "".join(
        u["content"]["text"] for u in editor.updates if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert text.startswith("Done: ") and "wrote app.py" in text and "42" in text, text


def test_ts_sdk_client_sees_a_whole_model_turn(tmp_path: Path) -> None:
    """The same turn driven by the official TypeScript SDK 2.4.0's client (v1, fs and
    terminal served from a temp folder, an MCP server passed in session/new): it sees the
    streamed text, the edit with its diff and permission, the terminal run and the MCP
    tool's result."""
    import ts_peer
    from ts_peer import TsClient

    sdk_root = ts_peer.install()
    schema = json.loads(ts_peer.schema_file(sdk_root, "v1").read_text())
    write_assistant(tmp_path / "agent", "ts_assistant", schema)
    work = tmp_path / "work"
    work.mkdir()
    (work / "app.py").write_text(SOURCE)
    serves = FsAndTerminal(work)
    server = ms.stdio_server(tmp_path)

    async def go(url: str) -> tuple[TsClient, dict[str, Any]]:
        env = {
            **os.environ,
            "PYTHONPATH": str(tmp_path / "agent"),
            "ACP_SESSION_DB": str(tmp_path / "sessions.db"),
            "ACP_MODEL": "openai:gpt-test",
            "OPENAI_BASE_URL": url,
            "OPENAI_API_KEY": "sk-test-not-a-key",
            "ACP_TS_FORWARD": ",".join(SERVED),
        }
        api = ts_peer.REVISIONS["v1"][0]
        client = await TsClient.start(sdk_root, api, [PY, "-m", "ts_assistant"], env)
        client.serve = serves.serve
        try:
            allow = {"outcome": {"outcome": "selected", "optionId": "allow"}}
            await client.call("answer", method="session/request_permission", result=allow)
            caps = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}
            init = {"protocolVersion": 1, "clientInfo": {"name": "ts", "version": "1"}}
            await client.request("initialize", {**init, "clientCapabilities": caps})
            mcp = {
                "name": server["name"],
                "command": server["command"],
                "args": server["args"],
                "env": [],
            }
            request = {"cwd": str(work), "mcpServers": [mcp]}
            started = await client.call("session", 30, request=request)
            prompt = "Say bye instead of hello, then check it compiles."
            sid = started["sessionId"]
            got = await client.call("session_prompt", 60, session=sid, text=prompt)
            return client, dict(got)
        finally:
            code, err = await client.close()
            assert code == 0 and "Traceback" not in err, err

    with model_server() as url:
        client, got = asyncio.run(go(url))
    assert client.sdk_errors == []
    assert (work / "app.py").read_text() == 'print("bye")\n'
    assert got["text"].startswith("Done: ") and "wrote app.py" in got["text"], got
    assert "42" in got["text"], got  # the MCP server's tools_add result reached the model
    updates = [u["update"] for u in client.updates]
    starts = [u for u in updates if u["sessionUpdate"] == "tool_call"]
    assert [s["kind"] for s in starts] == ["read", "edit", "execute", "other"]
    assert starts[1]["content"][0]["type"] == "diff"
    assert starts[1]["content"][0]["oldText"] == SOURCE
    (perm, run) = [r for r in client.requests if r["method"] == "session/request_permission"]
    assert perm["params"]["toolCall"]["toolCallId"] == starts[1]["toolCallId"]
    assert run["params"]["toolCall"]["toolCallId"] == starts[2]["toolCallId"]
    methods = [f["method"] for f in client.forwarded]
    assert methods[:2] == ["fs/read_text_file", "fs/read_text_file"]
    assert "fs/write_text_file" in methods and methods[-1] == "terminal/release"
