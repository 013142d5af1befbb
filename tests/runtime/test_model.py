"""A model in the agent (issue 33, the model half): a generated agent whose manifest has
`llm` runs a pydantic-ai agent through `run_model`, as real agent processes over stdio,
every frame schema-checked.

- no network, no key: pydantic-ai's FunctionModel scripts text, thinking and a tool call;
- the route a client sets with `providers/set` is the endpoint the model calls: a real
  OpenAI Chat Completions server written here on 127.0.0.1 streams the deltas, gets the
  route's headers, and the header values appear in no output, log or stored history;
- a stdio agent stopped and started again loads the session and the model sees the
  earlier turns;
- model errors: 401 a plain message naming the provider, 429 transient with its
  retry_after.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import hardening_support as hs
import pytest

SECRET = "sk-model-secret-4711"
TRACE = "trace-secret-0815"

HANDLERS = """
from __future__ import annotations

import json
import os
from typing import Any

from pydantic_ai import Agent as Model
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, DeltaToolCall, FunctionModel

from ._generated.acp import AgentBase, Turn, run_model


async def script(messages: list[ModelMessage], info: AgentInfo) -> Any:
    prompts = [p.content for m in messages for p in m.parts if p.part_kind == "user-prompt"]
    last = str(prompts[-1])
    answered = any(p.part_kind == "tool-return" for p in messages[-1].parts)
    if last == "slow":  # streams until cancelled
        yield "started "
        import asyncio

        await asyncio.sleep(60)
        yield "never"
        return
    if last.startswith("read ") and not answered:
        yield {0: DeltaThinkingPart(content="I should look at the file. ")}
        args = json.dumps({"path": last[5:]})
        yield {1: DeltaToolCall(name="read_file", json_args=args, tool_call_id="t1")}
        return
    yield f"seen {len(prompts)}: "
    yield " | ".join(str(p) for p in prompts)


def make() -> Model:
    model = Model(FunctionModel(stream_function=script))

    @model.tool_plain
    def read_file(path: str) -> str:
        return "contents of " + path

    return model


SCRIPTED = make()
ROUTED = Model(instructions="Be brief.")


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        if os.environ.get("MODEL_ROUTED"):
            await run_model(turn, ROUTED, input, provider="main", default_model="openai:gpt-test")
        else:
            await run_model(turn, SCRIPTED, input)
"""

MANIFEST: dict[str, Any] = {
    "name": "model-agent",
    "version": "0.1.0",
    "providers": [{"id": "main", "supported": ["openai", "anthropic"], "required": False}],
    "llm": {"provider": "main", "instructions": "Be brief."},
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    tmp = tmp_path_factory.mktemp("model_agent")
    return hs.build_revisions(
        tmp, shared_acp, "model_agent", manifest=MANIFEST, handlers=HANDLERS, model_env=False
    )


def _init(v2: bool) -> dict[str, Any]:
    if v2:
        return {"protocolVersion": 2, "info": {"name": "t", "version": "0"}}
    caps = {"fs": {"readTextFile": True, "writeTextFile": True}}
    return {"protocolVersion": 1, "clientCapabilities": caps}


class Peer:
    def __init__(self, peer: hs.StdioPeer, v2: bool) -> None:
        self.peer = peer
        self.v2 = v2
        self.rid = 0
        self.updates: list[dict[str, Any]] = []

    async def call(self, method: str, params: Any) -> dict[str, Any]:
        self.rid += 1
        await self.peer.send({"jsonrpc": "2.0", "id": self.rid, "method": method, "params": params})
        msg, seen = await self.peer.until_id(self.rid, timeout=30)
        self.updates += [m["params"]["update"] for m in seen if m.get("method") == "session/update"]
        return msg

    async def turn(self, sid: str, text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """One prompt until its turn ends (v1: the answer; v2: the idle state_update)."""
        start = len(self.updates)
        r = await self.call("session/prompt", hs.text_prompt(sid, text))
        if self.v2 and "result" in r:
            while not any(
                u.get("sessionUpdate") == "state_update" and u.get("state") == "idle"
                for u in self.updates[start:]
            ):
                msg = await self.peer.recv(timeout=30)
                if msg.get("method") == "session/update":
                    self.updates.append(msg["params"]["update"])
        return r, self.updates[start:]


def _text(updates: list[dict[str, Any]], tag: str) -> str:
    return "".join(
        u["content"]["text"] for u in updates if u.get("sessionUpdate") == tag and "content" in u
    )


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_a_scripted_model_streams_text_thinking_and_a_tool_call(built: Any, rev: str) -> None:
    env, package = built[rev]
    v2 = rev == "v2"

    async def main() -> list[dict[str, Any]]:
        p = Peer(await hs.StdioPeer.start(env, package), v2)
        await p.call("initialize", _init(v2))
        new = {"cwd": "/work/proj"} if v2 else {"cwd": "/work/proj", "mcpServers": []}
        sid = (await p.call("session/new", new))["result"]["sessionId"]
        r, first = await p.turn(sid, "hello")
        if "error" in r:
            _, err = await p.peer.close()
            raise AssertionError((r, err.decode()[-3000:]))
        assert _text(first, "agent_message_chunk") == "seen 1: hello"
        r, second = await p.turn(sid, "read notes.txt")
        assert "result" in r, r
        await p.peer.close()
        return second

    updates = asyncio.run(main())
    assert _text(updates, "agent_thought_chunk") == "I should look at the file. "
    calls = [u for u in updates if u.get("sessionUpdate") in ("tool_call", "tool_call_update")]
    assert calls[0]["title"] == "read_file: notes.txt" and calls[0]["kind"] == "read"
    assert calls[0]["status"] == "in_progress"
    assert calls[0]["rawInput"] == {"path": "notes.txt"}
    assert calls[0]["locations"][0]["path"] == "/work/proj/notes.txt"
    assert calls[-1]["status"] == "completed"
    assert calls[-1]["rawOutput"] == {"return_value": "contents of notes.txt"}
    # the model's context holds the earlier turn
    assert _text(updates, "agent_message_chunk") == "seen 2: hello | read notes.txt"


def test_a_restarted_agent_continues_the_conversation(built: Any, tmp_path: Path) -> None:
    env, package = built["v1"]
    env = {**env, "ACP_SESSION_DB": str(tmp_path / "sessions.db")}

    async def main() -> str:
        p = Peer(await hs.StdioPeer.start(env, package), False)
        await p.call("initialize", _init(False))
        sid = (await p.call("session/new", {"cwd": "/w", "mcpServers": []}))["result"]["sessionId"]
        await p.turn(sid, "one")
        await p.turn(sid, "two")
        p.peer.proc.kill()  # no goodbye: what was answered is stored
        await p.peer.proc.wait()
        q = Peer(await hs.StdioPeer.start(env, package), False)
        await q.call("initialize", _init(False))
        r = await q.call("session/load", {"sessionId": sid, "cwd": "/w", "mcpServers": []})
        assert "result" in r, r
        _, after = await q.turn(sid, "three")
        await q.peer.close()
        return _text(after, "agent_message_chunk")

    assert asyncio.run(main()) == "seen 3: one | two | three"


# ---- a routed model: the OpenAI Chat Completions wire, served here -------------------------
def test_each_model_message_is_stored_once(built: Any, tmp_path: Path) -> None:
    """A model agent's turns store the model's messages a row each, a turn inserting only
    those it added (issue 36 item 1): after four turns (one with a tool call) the rows are
    the history's messages, numbered 1 to N, none written again; the state holds their
    count, not them."""
    import sqlite3

    env, package = built["v1"]
    db = tmp_path / "sessions.db"
    env = {**env, "ACP_SESSION_DB": str(db)}

    async def main() -> None:
        p = Peer(await hs.StdioPeer.start(env, package), False)
        await p.call("initialize", _init(False))
        sid = (await p.call("session/new", {"cwd": "/w", "mcpServers": []}))["result"]["sessionId"]
        for text in ("one", "read notes.txt", "three", "four"):
            r, _ = await p.turn(sid, text)
            assert "result" in r, r
        await p.peer.close()

    asyncio.run(main())
    check = sqlite3.connect(db)
    # one, four, three: a request and its answer; the tool call: two of each
    assert check.execute("SELECT count(*), min(seq), max(seq) FROM model_messages").fetchone() == (
        10,
        1,
        10,
    )
    (state,) = check.execute(
        "SELECT h.state FROM history h WHERE h.state IS NOT NULL ORDER BY h.seq DESC LIMIT 1"
    ).fetchone()
    assert json.loads(state)["model_history"] == 10
    check.close()


class ChatServer(BaseHTTPRequestHandler):
    """`POST /v1/chat/completions` streaming two deltas (or the status the test sets)."""

    seen: ClassVar[list[dict[str, Any]]] = []
    status = 200

    def log_message(self, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
        if type(self).status != 200:
            self.send_response(type(self).status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Retry-After", "7")
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "no", "type": "x"}}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for piece in ("Hi", " there"):
            chunk = {
                "id": "c1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
            }
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        end = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13},
        }
        self.wfile.write(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")


@contextmanager
def chat_server(status: int = 200) -> Iterator[str]:
    ChatServer.seen = []
    ChatServer.status = status
    server = ThreadingHTTPServer(("127.0.0.1", 0), ChatServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _routed(env: dict[str, str], package: str, url: str, db: Path) -> tuple[Any, bytes]:
    env = {**env, "MODEL_ROUTED": "1", "ACP_SESSION_DB": str(db)}

    async def main() -> tuple[Any, bytes]:
        p = Peer(await hs.StdioPeer.start(env, package), False)
        await p.call("initialize", _init(False))
        route = {
            "providerId": "main",
            "apiType": "openai",
            "baseUrl": url,
            "headers": {"Authorization": f"Bearer {SECRET}", "X-Trace": TRACE},
        }
        assert "result" in await p.call("providers/set", route)
        sid = (await p.call("session/new", {"cwd": "/w", "mcpServers": []}))["result"]["sessionId"]
        r, updates = await p.turn(sid, "say hi")
        _, err = await p.peer.close()
        return (r, updates), err

    return asyncio.run(main())


def test_the_route_the_client_sets_is_the_endpoint_with_its_headers(
    built: Any, tmp_path: Path
) -> None:
    env, package = built["v1"]
    db = tmp_path / "sessions.db"
    with chat_server() as url:
        (r, updates), err = _routed(env, package, url, db)
    assert r["result"]["stopReason"] == "end_turn", r
    assert _text(updates, "agent_message_chunk") == "Hi there"
    (request,) = ChatServer.seen
    assert request["path"] == "/v1/chat/completions"
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert headers["authorization"] == f"Bearer {SECRET}" and headers["x-trace"] == TRACE
    assert request["body"]["model"] == "gpt-test" and request["body"]["stream"] is True
    usage = [u for u in updates if u.get("sessionUpdate") == "usage_update"]
    assert usage and usage[-1]["used"] == 13
    # the header values reached the endpoint and nowhere else
    stored = b"".join(f.read_bytes() for f in tmp_path.glob("sessions.db*"))
    for secret in (SECRET, TRACE):
        assert secret.encode() not in err and secret.encode() not in stored
        assert secret not in json.dumps(updates)


@pytest.mark.parametrize(("status", "transient"), [(401, False), (429, True)])
def test_model_errors_name_the_provider_and_hide_the_credentials(
    built: Any, tmp_path: Path, status: int, transient: bool
) -> None:
    env, package = built["v1"]
    with chat_server(status) as url:
        (r, _), err = _routed(env, package, url, tmp_path / "sessions.db")
    error = r["error"]
    assert "'main'" in error["message"] and f"HTTP {status}" in error["message"], error
    assert error["data"]["transient"] is transient, error
    if transient:
        assert error["data"]["retry_after"] == 7.0, error
    for secret in (SECRET, TRACE):
        assert secret not in json.dumps(r) and secret.encode() not in err


def test_a_history_that_no_longer_parses_is_dropped_with_a_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stored model history another pydantic-ai wrote and this one cannot read: dropped,
    said once, the session goes on; a good one round-trips, bounded at a user's request."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
    from runtime.agent.context import Session
    from runtime.model import history

    s = Session("s1", None, {}, "idle")
    s.model_history = [{"kind": "from-the-future", "parts": 3}]
    messages, problem = history.load(s)
    assert messages == [] and problem and "could not be read back" in problem
    assert s.model_history is None
    turns = []
    for i in range(5):
        turns += [
            ModelRequest(parts=[UserPromptPart(f"q{i}")]),
            ModelResponse(parts=[TextPart(f"a{i}")]),
        ]
    history.save(s, turns)
    assert [m.parts[0].content for m in history.load(s)[0]][:2] == ["q0", "a0"]
    monkeypatch.setenv("ACP_MODEL_HISTORY", "3")
    history.save(s, turns)
    kept = history.load(s)[0]
    assert [m.parts[0].content for m in kept] == ["q4", "a4"]  # cut where a request starts


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_cancel_stops_the_model_stream_promptly(built: Any, rev: str) -> None:
    env, package = built[rev]
    v2 = rev == "v2"

    async def main() -> tuple[str, float]:
        import time

        p = Peer(await hs.StdioPeer.start(env, package), v2)
        await p.call("initialize", _init(v2))
        new = {"cwd": "/w"} if v2 else {"cwd": "/w", "mcpServers": []}
        sid = (await p.call("session/new", new))["result"]["sessionId"]
        p.rid += 1
        rid = p.rid
        await p.peer.send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "session/prompt",
                "params": hs.text_prompt(sid, "slow"),
            }
        )
        while True:  # the stream has begun
            msg = await p.peer.recv(timeout=30)
            update = msg.get("params", {}).get("update", {})
            if update.get("sessionUpdate") == "agent_message_chunk":
                break
        started = time.monotonic()
        cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
        await p.peer.send(cancel)
        while True:
            msg = await p.peer.recv(timeout=30)
            if not v2 and msg.get("id") == rid and "method" not in msg:
                stop = msg["result"]["stopReason"]
                break
            update = msg.get("params", {}).get("update", {})
            if (
                v2
                and update.get("sessionUpdate") == "state_update"
                and update.get("state") == "idle"
            ):
                stop = update["stopReason"]
                break
        took = time.monotonic() - started
        await p.peer.close()
        return stop, took

    stop, took = asyncio.run(main())
    assert stop == "cancelled"
    assert took < 10  # the model's 60 s stream did not run out
