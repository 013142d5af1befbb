"""A model agent you can trust with a long session (issue 36, items 2 to 8): real agent
processes over stdio, every frame schema-checked, no network.

- the model endpoint is a scripted OpenAI Chat Completions (or Anthropic Messages)
  server written here on 127.0.0.1: a stream cut before its finish is an error and
  nothing of it is kept; a 429 answers at once with its `retry_after` and the endpoint
  sees one request; 400/404 are not transient and carry the provider's message;
- pydantic-ai's FunctionModel scripts the loops: a turn at its request limit ends with
  `max_turn_requests` and keeps what it did; a tool the model has not got, called again
  and again, ends the same way; a tool's output above the bound is cut for the client and
  the model alike; a cancel while a write waits for permission or a command runs ends
  their tool calls; mode `ask` runs no command; an MCP tool's error is shown failed.
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
import mcp_support as ms
import pytest
from coder_support import Editor

SECRET = "sk-endings-secret-4711"

HANDLERS = """
from __future__ import annotations

import json
import os
from typing import Any

from pydantic_ai import Agent as Model, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from ._generated.acp import AgentBase, Turn, run_model

CALLS = {
    "write": ("write_file", {"path": "f.txt", "content": "new\\\\n"}),
    "run": ("run_command", {"command": "python", "args": ["-c", "import time; time.sleep(60)"]}),
    "oops": ("tools_oops", {}),
    "big": ("big", {}),
}


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    prompts = [p.content for m in messages for p in m.parts if p.part_kind == "user-prompt"]
    word = str(prompts[-1]).split()[0]
    since: list[Any] = []
    for m in messages:
        for p in m.parts:
            if p.part_kind == "user-prompt":
                since = []
            elif p.part_kind == "tool-return":
                since.append(p)
    if word == "loop":  # a tool, again and again
        return ModelResponse(parts=[ToolCallPart("noop", {}, tool_call_id=f"n{len(since)}")])
    if word == "badargs":  # a tool it has, with arguments the tool refuses, again
        return ModelResponse(parts=[ToolCallPart("count", {"n": "many"}, tool_call_id=f"b{len(messages)}")])
    if word == "unknown":  # a tool it has not got
        return ModelResponse(parts=[ToolCallPart("nope", {}, tool_call_id=f"u{len(since)}")])
    if word in CALLS and not since:
        name, args = CALLS[word]
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id="c-" + name)])
    if word in CALLS:
        return ModelResponse(parts=[TextPart(json.dumps([str(p.content) for p in since]))])
    if word == "history":  # what the model's history holds
        returns = [p for m in messages for p in m.parts if p.part_kind == "tool-return"]
        said = [p.content for m in messages for p in m.parts if p.part_kind == "text"]
        retried = [p for m in messages for p in m.parts if p.part_kind == "retry-prompt"]
        seen = {"returns": len(returns), "said": said, "retried": len(retried)}
        return ModelResponse(parts=[TextPart(json.dumps(seen))])
    return ModelResponse(parts=[TextPart("ok")])


async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
    for part in script(messages, info).parts:
        if isinstance(part, TextPart):
            yield part.content
        else:
            args = json.dumps(part.args)
            yield {0: DeltaToolCall(name=part.tool_name, json_args=args, tool_call_id=part.tool_call_id)}


SCRIPTED = Model(FunctionModel(stream_function=stream))


@SCRIPTED.tool_plain
def noop() -> str:
    return "nothing"


@SCRIPTED.tool_plain
def big() -> str:
    return "x" * 200_000


@SCRIPTED.tool_plain
def count(n: int) -> str:
    return str(n)


ROUTED = Model(instructions="Be brief.")
HELPER = Model(instructions="Help.")


@ROUTED.tool
async def delegate(ctx: RunContext[None], topic: str) -> str:
    # ask a helper model (the same endpoint) about `topic`
    return (await HELPER.run(topic, model=ctx.model)).output


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        if os.environ.get("MODEL_ENDPOINT"):
            await run_model(turn, ROUTED, input, provider="main", default_model="openai:gpt-test")
        else:
            await run_model(turn, SCRIPTED, input)
"""

MANIFEST: dict[str, Any] = {
    "name": "endings-agent",
    "version": "0.1.0",
    "providers": [{"id": "main", "supported": ["openai", "anthropic"], "required": False}],
    "llm": {"provider": "main", "instructions": "Be brief.", "on_disk": True},
    "modes": [{"id": "code", "name": "Code", "default": True}, {"id": "ask", "name": "Ask"}],
}
FS = {"readTextFile": True, "writeTextFile": True}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    tmp = tmp_path_factory.mktemp("endings_agent")
    return hs.build_revisions(
        tmp, shared_acp, "endings_agent", manifest=MANIFEST, handlers=HANDLERS, model_env=False
    )


# ---- a scripted model endpoint on 127.0.0.1 ---------------------------------------------
class Endpoint(BaseHTTPRequestHandler):
    """Plays `script` in order, one entry per request: `("stream", pieces, finished)` a
    Chat Completions (or, on `/v1/messages`, an Anthropic) stream, close-delimited
    (HTTP/1.0), with its end or cut after the pieces; `("status", code, headers, body)`
    an error."""

    script: ClassVar[list[tuple[Any, ...]]] = []
    seen: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "body": body})
        step = type(self).script.pop(0) if type(self).script else ("stream", ["ok"], True)
        if step[0] == "tool":  # a Chat Completions stream calling one tool
            self._tool_call(body["model"], step[1], step[2])
            return
        if step[0] == "status":
            _, code, headers, payload = step
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(json.dumps(payload).encode())
            return
        _, pieces, finished = step
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if self.path.endswith("/messages"):
            self._anthropic(pieces, finished)
        elif self.path.endswith("/responses"):
            self._responses(body["model"], pieces, finished)
        else:
            self._chat(body["model"], pieces, finished)

    def _tool_call(self, model: str, name: str, args: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": model}
        call = {"index": 0, "id": "call_1", "type": "function"}
        call["function"] = {"name": name, "arguments": json.dumps(args)}
        delta = {"role": "assistant", "tool_calls": [call]}
        self._event({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        end = {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
        self._event({**base, "choices": [end]})
        self.wfile.write(b"data: [DONE]\n\n")

    def _event(self, data: dict[str, Any], name: str | None = None) -> None:
        head = f"event: {name}\n".encode() if name else b""
        self.wfile.write(head + b"data: " + json.dumps(data).encode() + b"\n\n")
        self.wfile.flush()

    def _chat(self, model: str, pieces: list[str], finished: bool) -> None:
        base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": model}
        for piece in pieces:
            delta = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
            self._event({**base, "choices": [delta]})
        if finished:
            end = {"index": 0, "delta": {}, "finish_reason": "stop"}
            self._event({**base, "choices": [end]})
            self.wfile.write(b"data: [DONE]\n\n")

    def _responses(self, model: str, pieces: list[str], finished: bool) -> None:
        response: dict[str, Any] = {
            "id": "r1",
            "object": "response",
            "created_at": 0,
            "model": model,
            "status": "in_progress",
            "output": [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
        n = iter(range(100))
        self._event({"type": "response.created", "response": response, "sequence_number": next(n)})
        item = {"id": "m1", "type": "message", "role": "assistant", "status": "in_progress"}
        added = {"type": "response.output_item.added", "output_index": 0}
        self._event({**added, "item": {**item, "content": []}, "sequence_number": next(n)})
        text = ""
        for piece in pieces:
            text += piece
            delta = {"type": "response.output_text.delta", "item_id": "m1", "output_index": 0}
            self._event(
                {
                    **delta,
                    "content_index": 0,
                    "delta": piece,
                    "logprobs": [],
                    "sequence_number": next(n),
                }
            )
        if finished:
            part = {"type": "output_text", "text": text, "annotations": []}
            done = {**item, "status": "completed", "content": [part]}
            self._event(
                {
                    "type": "response.output_item.done",
                    "output_index": 0,
                    "item": done,
                    "sequence_number": next(n),
                }
            )
            usage = {
                "input_tokens": 5,
                "output_tokens": 2,
                "total_tokens": 7,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            }
            final = {**response, "status": "completed", "output": [done], "usage": usage}
            self._event(
                {"type": "response.completed", "response": final, "sequence_number": next(n)}
            )

    def _anthropic(self, pieces: list[str], finished: bool) -> None:
        message = {
            "id": "m1",
            "type": "message",
            "role": "assistant",
            "model": "gpt-test",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 0},
        }
        self._event({"type": "message_start", "message": message}, "message_start")
        block = {"type": "content_block_start", "index": 0}
        self._event({**block, "content_block": {"type": "text", "text": ""}}, block["type"])
        for piece in pieces:
            delta = {"type": "text_delta", "text": piece}
            self._event(
                {"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta"
            )
        if finished:
            self._event({"type": "content_block_stop", "index": 0}, "content_block_stop")
            delta = {"stop_reason": "end_turn", "stop_sequence": None}
            self._event(
                {"type": "message_delta", "delta": delta, "usage": {"output_tokens": 3}},
                "message_delta",
            )
            self._event({"type": "message_stop"}, "message_stop")


@contextmanager
def endpoint(*script: tuple[Any, ...]) -> Iterator[str]:
    Endpoint.script = list(script)
    Endpoint.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def _session(ed: Editor, root: Path, v2: bool, caps: dict[str, Any] | None = None) -> str:
    await ed.initialize(2 if v2 else 1, caps or {})
    new: dict[str, Any] = {"cwd": str(root)}
    if not v2:
        new["mcpServers"] = []
    return str((await ed.call("session/new", new))["sessionId"])


async def _turn(ed: Editor, sid: str, text: str, v2: bool) -> dict[str, Any]:
    """One prompt: `{"stop": reason}` or `{"error": error}` (v1: the answer; v2: idle)."""
    ed.next_id += 1
    rid = ed.next_id
    prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
    await ed.send({"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": prompt})
    while True:
        msg = await asyncio.wait_for(ed.inbox.get(), 30)
        if msg.get("id") == rid:
            break
    if "error" in msg:
        return {"error": msg["error"]}
    if not v2:
        return {"stop": msg["result"]["stopReason"]}

    def idle() -> list[dict[str, Any]]:
        return [u for u in ed.updates if u.get("state") == "idle"]

    await ed.updated.until("the turn going idle", lambda: len(idle()) > ed.idle_seen, 30)
    ed.idle_seen = len(idle())
    last = idle()[-1]
    if last.get("stopReason") == "error" or "error" in last.get("_meta", {}):
        return {"error": last.get("error") or last["_meta"]["error"]}
    return {"stop": last["stopReason"]}


def _env_path(env: dict[str, str], url: str) -> dict[str, str]:
    """The model read from the environment: an OpenAI-compatible gateway's base URL."""
    return {
        **env,
        "MODEL_ENDPOINT": "1",
        "OPENAI_BASE_URL": url + "/v1",
        "OPENAI_API_KEY": SECRET,
    }


async def _route(ed: Editor, url: str, api: str) -> None:
    route = {
        "providerId": "main",
        "apiType": api,
        "baseUrl": url + ("/v1" if api == "openai" else ""),
        "headers": {"Authorization": f"Bearer {SECRET}", "x-api-key": SECRET},
    }
    await ed.call("providers/set", route)


def _said(ed: Editor) -> dict[str, Any]:
    return dict(json.loads(ed.texts()[-1]))


# ---- item 2: a turn ends end_turn only on a stream that finished --------------------------
@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_a_chat_stream_cut_before_its_finish_is_a_transient_error_and_not_kept(
    built: Any, tmp_path: Path, rev: str
) -> None:
    """Fails on the old code: the cut stream ended `end_turn` and its text was kept."""
    env, package = built[rev]
    v2 = rev == "v2"
    cut = ("stream", ["Half", " an", " answer"], False)
    with endpoint(cut, ("stream", ["whole"], True)) as url:

        async def main() -> tuple[dict[str, Any], dict[str, Any]]:
            ed = await Editor.start(_env_path(env, url), package, tmp_path)
            sid = await _session(ed, tmp_path, v2)
            first = await _turn(ed, sid, "hello", v2)
            second = await _turn(ed, sid, "again", v2)
            await ed.stop()
            return first, second

        first, second = asyncio.run(main())
    assert "error" in first, first
    assert first["error"]["data"]["transient"] is True, first
    assert first["error"]["data"]["name"] == "ModelUnavailable"
    assert second == {"stop": "end_turn"}
    # nothing of the cut answer went back to the model
    sent = json.dumps(Endpoint.seen[1]["body"]["messages"])
    assert "Half" not in sent and "hello" not in sent, sent


def test_an_anthropic_stream_cut_before_message_stop_is_a_transient_error(
    built: Any, tmp_path: Path
) -> None:
    """The routed Messages API: a stream without `message_stop` is no finished answer."""
    env, package = built["v1"]
    cut = ("stream", ["Half"], False)
    with endpoint(cut, ("stream", ["whole"], True)) as url:

        async def main() -> tuple[dict[str, Any], dict[str, Any]]:
            ed = await Editor.start({**env, "MODEL_ENDPOINT": "1"}, package, tmp_path)
            sid = await _session(ed, tmp_path, False)
            await _route(ed, url, "anthropic")
            first = await _turn(ed, sid, "hello", False)
            second = await _turn(ed, sid, "again", False)
            await ed.stop()
            return first, second

        first, second = asyncio.run(main())
    assert first["error"]["data"]["transient"] is True, first
    assert second == {"stop": "end_turn"}
    assert [s["path"] for s in Endpoint.seen] == ["/v1/messages", "/v1/messages"]
    assert "Half" not in json.dumps(Endpoint.seen[1]["body"]["messages"])


def test_a_responses_stream_cut_before_its_completion_is_a_transient_error(
    built: Any, tmp_path: Path
) -> None:
    """The Responses API (`openai-responses:` ids): no `response.completed`, no answer."""
    env, package = built["v2"]
    cut = ("stream", ["Half"], False)
    with endpoint(cut, ("stream", ["whole"], True)) as url:

        async def main() -> tuple[dict[str, Any], dict[str, Any]]:
            run_env = {**_env_path(env, url), "ACP_MODEL": "openai-responses:gpt-test"}
            ed = await Editor.start(run_env, package, tmp_path)
            sid = await _session(ed, tmp_path, True)
            first = await _turn(ed, sid, "hello", True)
            second = await _turn(ed, sid, "again", True)
            await ed.stop()
            return first, second

        first, second = asyncio.run(main())
    assert first["error"]["data"]["transient"] is True, first
    assert second == {"stop": "end_turn"}
    assert [s["path"] for s in Endpoint.seen] == ["/v1/responses", "/v1/responses"]
    assert "Half" not in json.dumps(Endpoint.seen[1]["body"]["input"])


# ---- item 3: no silent retry ---------------------------------------------------------------
RATE_LIMITED = ("status", 429, {"Retry-After": "7"}, {"error": {"message": "slow down"}})


@pytest.mark.parametrize(("rev", "path"), [("v1", "env"), ("v1", "routed"), ("v2", "env")])
def test_a_429_answers_at_once_with_retry_after_and_no_second_request(
    built: Any, tmp_path: Path, rev: str, path: str
) -> None:
    """Fails on the old code: the OpenAI client retried twice (3 requests, 14 s).
    (`providers/set`, the routed path, is v1's unstable schema only.)"""
    env, package = built[rev]
    v2 = rev == "v2"
    with endpoint(RATE_LIMITED, RATE_LIMITED, RATE_LIMITED) as url:

        async def main() -> tuple[dict[str, Any], bytes]:
            run_env = _env_path(env, url) if path == "env" else {**env, "MODEL_ENDPOINT": "1"}
            ed = await Editor.start(run_env, package, tmp_path)
            sid = await _session(ed, tmp_path, v2)
            if path == "routed":
                await _route(ed, url, "openai")
            answer = await _turn(ed, sid, "hello", v2)
            return answer, await ed.stop()

        answer, err = asyncio.run(main())
    data = answer["error"]["data"]
    assert data["retry_after"] == 7 and data["transient"] is True, answer
    assert len(Endpoint.seen) == 1  # the agent did not retry behind the editor's back
    assert SECRET not in json.dumps(answer) and SECRET.encode() not in err


# ---- item 4: errors by what the user can do ------------------------------------------------
@pytest.mark.parametrize(
    ("status", "message", "name"),
    [
        (400, "This model's maximum context length is 8192 tokens", "ModelContextTooLong"),
        (404, "The model `gpt-test` does not exist", "ModelRequestRejected"),
        (422, "messages: field required", "ModelRequestRejected"),
    ],
)
def test_a_refused_request_is_not_transient_and_says_the_providers_words(
    built: Any, tmp_path: Path, status: int, message: str, name: str
) -> None:
    """Fails on the old code: every status but 401/403 was `ModelUnavailable`, transient."""
    env, package = built["v1"]
    refused = ("status", status, {}, {"error": {"message": message, "type": "invalid"}})
    with endpoint(refused) as url:

        async def main() -> dict[str, Any]:
            ed = await Editor.start(_env_path(env, url), package, tmp_path)
            sid = await _session(ed, tmp_path, False)
            answer = await _turn(ed, sid, "hello", False)
            await ed.stop()
            return answer

        answer = asyncio.run(main())
    error = answer["error"]
    assert error["data"]["transient"] is False and error["data"]["name"] == name, error
    assert message in error["message"] and f"HTTP {status}" in error["message"]
    if name == "ModelContextTooLong":
        assert "start a new session" in error["message"]
    assert len(Endpoint.seen) == 1


def test_a_missing_key_is_a_configuration_error_naming_the_variable(
    built: Any, tmp_path: Path
) -> None:
    """Fails on the old code: -32603 "internal error" (a traceback on stderr)."""
    env, package = built["v2"]
    run_env = {**env, "MODEL_ENDPOINT": "1"}
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        run_env.pop(name, None)

    async def main() -> dict[str, Any]:
        ed = await Editor.start(run_env, package, tmp_path)
        sid = await _session(ed, tmp_path, True)
        answer = await _turn(ed, sid, "hello", True)
        await ed.stop()
        return answer

    error = asyncio.run(main())["error"]
    assert error["data"]["name"] == "ModelConfiguration" and error["data"]["transient"] is False
    assert "OPENAI_API_KEY" in error["message"], error


# ---- item 5: every tool call ends ------------------------------------------------------------
def _finals(ed: Editor) -> dict[str, str]:
    """Each tool call's last status."""
    out: dict[str, str] = {}
    for u in ed.updates:
        if u.get("sessionUpdate") in ("tool_call", "tool_call_update") and u.get("status"):
            out[u["toolCallId"]] = u["status"]
    return out


@pytest.mark.parametrize(
    ("rev", "word", "held"),
    [
        ("v1", "write", "session/request_permission"),
        ("v2", "write", "session/request_permission"),
        ("v1", "run", "terminal/wait_for_exit"),
    ],
)
def test_a_cancel_ends_the_tool_call_that_waits(
    built: Any, tmp_path: Path, rev: str, word: str, held: str
) -> None:
    """Fails on the old code: the write stayed `pending`, the command `in_progress`."""
    env, package = built[rev]
    v2 = rev == "v2"
    caps = {} if v2 else {"fs": FS, "terminal": True}

    async def main() -> tuple[str, Editor]:
        ed = await Editor.start(env, package, tmp_path)
        ed.hold = {held}
        sid = await _session(ed, tmp_path, v2, caps)
        turn = asyncio.get_running_loop().create_task(_turn(ed, sid, word, v2))
        await ed.updated.until(f"the agent waiting on {held}", lambda: held in ed.methods(), 30)
        cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
        await ed.send(cancel)
        stop = (await turn)["stop"]
        await ed.stop()
        return stop, ed

    stop, ed = asyncio.run(main())
    assert stop == "cancelled"
    assert list(_finals(ed).values()) == ["cancelled" if v2 else "failed"]
    assert (tmp_path / "f.txt").exists() is False


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_an_mcp_tools_error_is_shown_failed_with_the_error(
    built: Any, tmp_path: Path, rev: str
) -> None:
    """Fails on the old code: shown `completed`, the error as a raw output."""
    env, package = built[rev]
    v2 = rev == "v2"

    async def main() -> Editor:
        ed = await Editor.start(env, package, tmp_path)
        await ed.initialize(2 if v2 else 1, {})
        server = ms.stdio_server(tmp_path, v2=v2)
        sid = (await ed.call("session/new", {"cwd": str(tmp_path), "mcpServers": [server]}))[
            "sessionId"
        ]
        assert await ed.prompt(sid, "oops", v2=v2) == "end_turn"
        await ed.stop()
        return ed

    ed = asyncio.run(main())
    assert list(_finals(ed).values()) == ["failed"]
    last = [u for u in ed.updates if u.get("status") == "failed"][-1]
    # the server's own words (MCPServer does not pass the exception's text on)
    assert "Error executing tool oops" in json.dumps(last["content"])
    assert last["rawOutput"] == {"error": "Error executing tool oops"}
    assert "Error executing tool oops" in _said_list(ed)[0]


def _said_list(ed: Editor) -> list[str]:
    return list(json.loads(ed.texts()[-1]))


# ---- item 7: limits as turn endings ----------------------------------------------------------
@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_the_request_limit_ends_the_turn_with_max_turn_requests_and_keeps_the_run(
    built: Any, tmp_path: Path, rev: str
) -> None:
    """Fails on the old code: -32603 "internal error", and the run's tool calls were
    missing from the model's history afterwards."""
    env, package = built[rev]
    v2 = rev == "v2"

    async def main() -> tuple[str, dict[str, Any], Editor]:
        ed = await Editor.start({**env, "ACP_MODEL_REQUEST_LIMIT": "3"}, package, tmp_path)
        sid = await _session(ed, tmp_path, v2)
        stop = (await _turn(ed, sid, "loop", v2))["stop"]
        after = await _turn(ed, sid, "history", v2)
        assert after == {"stop": "end_turn"}, after
        await ed.stop()
        return stop, _said(ed), ed

    stop, said, ed = asyncio.run(main())
    assert stop == "max_turn_requests"
    assert said["returns"] == 3  # the three tool calls the run made are in the history
    assert any("request_limit of 3" in s for s in said["said"]), said
    assert set(_finals(ed).values()) == {"completed"}
    assert any("ACP_MODEL_REQUEST_LIMIT" in t for t in ed.texts())


def test_the_tool_call_limit_ends_the_turn_and_no_call_is_left_open(
    built: Any, tmp_path: Path
) -> None:
    env, package = built["v2"]

    async def main() -> tuple[str, Editor]:
        ed = await Editor.start({**env, "ACP_MODEL_TOOL_CALL_LIMIT": "2"}, package, tmp_path)
        sid = await _session(ed, tmp_path, True)
        stop = (await _turn(ed, sid, "loop", True))["stop"]
        await ed.stop()
        return stop, ed

    stop, ed = asyncio.run(main())
    assert stop == "max_turn_requests"
    finals = list(_finals(ed).values())
    assert finals.count("completed") == 2 and set(finals) <= {"completed", "failed"}, finals
    assert any("ACP_MODEL_TOOL_CALL_LIMIT" in t for t in ed.texts())


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_a_tool_it_has_not_got_called_again_ends_the_turn_cleanly(
    built: Any, tmp_path: Path, rev: str
) -> None:
    """Fails on the old code: -32603 "internal error" with a traceback on stderr."""
    env, package = built[rev]
    v2 = rev == "v2"

    async def main() -> tuple[str, bytes]:
        ed = await Editor.start(env, package, tmp_path)
        sid = await _session(ed, tmp_path, v2)
        stop = (await _turn(ed, sid, "unknown", v2))["stop"]
        assert (await _turn(ed, sid, "history", v2)) == {"stop": "end_turn"}
        return stop, await ed.stop()

    stop, err = asyncio.run(main())
    assert stop == "max_turn_requests"
    assert b"Traceback" not in err


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_a_tools_output_above_the_bound_is_cut_for_the_model_and_the_client(
    built: Any, tmp_path: Path, rev: str
) -> None:
    """Fails on the old code: 200,000 bytes reached the client and the model."""
    env, package = built[rev]
    v2 = rev == "v2"

    async def main() -> Editor:
        ed = await Editor.start({**env, "ACP_TOOL_OUTPUT_LIMIT": "4096"}, package, tmp_path)
        sid = await _session(ed, tmp_path, v2)
        assert (await _turn(ed, sid, "big", v2)) == {"stop": "end_turn"}
        await ed.stop()
        return ed

    ed = asyncio.run(main())
    (seen,) = _said_list(ed)  # what the model got
    assert seen.startswith("x" * 4096) and "[output cut: 195904 more bytes" in seen
    raw = [u for u in ed.updates if u.get("status") == "completed"][-1]["rawOutput"]
    assert len(json.dumps(raw)) < 5000 and "output cut" in json.dumps(raw)


# ---- item 8: mode ask never runs a command ---------------------------------------------------
def test_in_ask_mode_run_command_never_runs(built: Any, tmp_path: Path) -> None:
    """Fails on the old code: the command ran after the permission question."""
    env, package = built["v1"]

    async def main() -> tuple[Editor, bytes]:
        ed = await Editor.start(env, package, tmp_path)
        sid = await _session(ed, tmp_path, False, {"fs": FS, "terminal": True})
        await ed.call("session/set_mode", {"sessionId": sid, "modeId": "ask"})
        assert (await _turn(ed, sid, "run", False)) == {"stop": "end_turn"}
        return ed, await ed.stop()

    ed, err = asyncio.run(main())
    assert not {"session/request_permission", "terminal/create"} & set(ed.methods())
    assert "not run: the session is in ask mode" in _said_list(ed)[0]
    assert list(_finals(ed).values()) == ["completed"]
    # the run's usage read as pydantic-ai 2 gives it (the old `usage()` warned each turn)
    assert any(u.get("sessionUpdate") == "usage_update" for u in ed.updates)
    assert b"PydanticAIDeprecationWarning" not in err, err.decode()[-2000:]


# ---- issue 36 leftovers: arguments refused twice; a model error with a tool call open ----------
@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_a_tool_called_with_bad_arguments_again_ends_the_turn_cleanly_and_keeps_the_run(
    built: Any, tmp_path: Path, rev: str
) -> None:
    """A tool the model has, called twice with arguments it refuses (`n` not a number):
    the turn ends `max_turn_requests` (not -32603), every tool call shown ends, and the
    next turn's model sees the run (its refused calls and the note where it stopped)."""
    env, package = built[rev]
    v2 = rev == "v2"

    async def main() -> tuple[dict[str, Any], dict[str, Any], Editor, bytes]:
        ed = await Editor.start(env, package, tmp_path)
        sid = await _session(ed, tmp_path, v2)
        first = await _turn(ed, sid, "badargs", v2)
        after = await _turn(ed, sid, "history", v2)
        return first, after, ed, await ed.stop()

    first, after, ed, err = asyncio.run(main())
    assert first == {"stop": "max_turn_requests"}, first
    assert after == {"stop": "end_turn"}, after
    said = _said(ed)
    # the refused calls and what the model was told of them (a retry prompt, or in
    # pydantic-ai 2 a tool return with a retry outcome) are kept
    assert said["retried"] + said["returns"] >= 1, said
    assert any("fail validation" in s for s in said["said"]), said
    assert set(_finals(ed).values()) <= {"completed", "failed"}, _finals(ed)
    assert b"Traceback" not in err, err.decode()[-2000:]


SERVER_ERROR = ("status", 500, {}, {"error": {"message": "the server broke"}})


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_a_model_error_while_a_tool_call_is_open_ends_it_failed_and_answers_transient(
    built: Any, tmp_path: Path, rev: str
) -> None:
    """The endpoint streams a call of the agent's tool `delegate` (shown in progress),
    whose helper model then gets a 500: the call ends `failed` with the model error as its
    content (fails on the old code: a bare "the turn ended before this tool call"), the
    turn answers the transient model error, and nothing of the run is kept."""
    env, package = built[rev]
    v2 = rev == "v2"
    with endpoint(("tool", "delegate", {"topic": "x"}), SERVER_ERROR) as url:

        async def main() -> tuple[dict[str, Any], dict[str, Any], Editor, bytes]:
            ed = await Editor.start(_env_path(env, url), package, tmp_path)
            sid = await _session(ed, tmp_path, v2)
            answer = await _turn(ed, sid, "hello", v2)
            again = await _turn(ed, sid, "hello again", v2)  # the endpoint's default: "ok"
            return answer, again, ed, await ed.stop()

        answer, again, ed, err = asyncio.run(main())
    data = answer["error"]["data"]
    assert data["transient"] is True and data["name"] == "ModelUnavailable", answer
    assert list(_finals(ed).values()) == ["failed"], _finals(ed)
    calls = [u for u in ed.updates if u.get("sessionUpdate") in ("tool_call", "tool_call_update")]
    assert calls[0]["status"] == "in_progress" and "delegate" in calls[0]["title"]
    # the call says why it failed: the model error (before: "the turn ended before ...")
    assert calls[-1]["rawOutput"] == {"error": answer["error"]["message"]}, calls[-1]
    assert calls[-1]["content"][0]["content"]["text"] == answer["error"]["message"]
    assert again == {"stop": "end_turn"}, again
    # the failed run left nothing in the history: the next request holds no tool call
    last = Endpoint.seen[-1]["body"]["messages"]
    assert not any(m.get("tool_calls") for m in last), last
    assert SECRET not in json.dumps(answer) and SECRET.encode() not in err
