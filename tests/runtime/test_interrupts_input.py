"""Capability-aware interrupts and text prompts (issue 10 items 4 and 5), on a generated
agent driven in process: `elicitation/create` only to a client that declared elicitation
(form mode), else `session/request_permission` for a yes/no interrupt, else the turn ends
normally with a message; an error the client answers never becomes the prompt's error;
text that is not the agent's JSON input ends the turn normally, saying what it expects."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import hardening_support as hs
import orjson
import pytest
from wait_support import Arrivals

HANDLERS = """
from __future__ import annotations

from typing import Any

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent.agent import Turn


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> Any:
        # a text input arrives as `str` (issue 29 item 6), an object input as its model
        q = input.question if hasattr(input, "question") else input
        if type(q) is not str:
            q = f"not a str: {input!r}"
        if q == "confirm":
            r = await turn.interrupt("confirm", {"what": "delete"})
            await turn.send_text(f"approved={r.approved}")
        elif q == "ask":
            r = await turn.interrupt("ask", {"what": "name"})
            await turn.send_text(f"answer={r.answer}")
        else:
            await turn.send_text(f"question={q}")
        return None
"""


def _manifest(input_schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "ask-agent",
        "version": "0.1.0",
        "input": input_schema,
        "interrupts": [
            {
                "name": "confirm",
                "description": "Confirm the deletion",
                "payload": {
                    "schema": {"type": "object", "properties": {"what": {"type": "string"}}}
                },
                "resume": {
                    "schema": {
                        "type": "object",
                        "properties": {"approved": {"type": "boolean"}},
                        "required": ["approved"],
                    }
                },
            },
            {
                "name": "ask",
                "description": "Which name?",
                "payload": {
                    "schema": {"type": "object", "properties": {"what": {"type": "string"}}}
                },
                "resume": {
                    "schema": {
                        "type": "object",
                        "properties": {"answer": {"type": "string", "minLength": 1}},
                        "required": ["answer"],
                    }
                },
            },
        ],
    }


OBJECT_INPUT = {
    "type": "object",
    "properties": {"question": {"type": "string"}},
    "required": ["question"],
}


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("ask")
    hs.build(tmp, shared_acp, "askobj", manifest=_manifest(OBJECT_INPUT), handlers=HANDLERS)
    hs.build(tmp, shared_acp, "askstr", manifest=_manifest({"type": "string"}), handlers=HANDLERS)
    return {name: hs.load(tmp, name).Agent for name in ("askobj", "askstr")}


class Client:
    """One in-process connection to the agent, answering its requests with `answer`."""

    def __init__(self, pkg: str, agent_cls: Any, answer: Any) -> None:
        sessions = hs.runtime_of(pkg, "sessions")
        store = hs.runtime_of(pkg, "store").MemorySessionStore()
        self.msgs: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.answer = answer
        self.arrivals = Arrivals()

        async def sink(batch: list[tuple[bytes, Any]]) -> None:
            for frame, _ in batch:
                msg = orjson.loads(frame)
                if "method" in msg and "id" in msg:  # the agent asks the client
                    self.requests.append(msg)
                    reply = {"jsonrpc": "2.0", "id": msg["id"], **self.answer(msg)}
                    asyncio.get_running_loop().call_soon(self.conn.feed, orjson.dumps(reply))
                else:
                    self.msgs.append(msg)
            self.arrivals.arrived()

        self.conn = sessions.SessionCore(agent_cls, store)(sink)
        self.n = 0

    async def call(self, method: str, params: Any) -> dict[str, Any]:
        self.n += 1
        rid = self.n
        msg = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        self.conn.feed(json.dumps(msg).encode())

        def answered() -> dict[str, Any] | None:
            return next((m for m in self.msgs if m.get("id") == rid and "method" not in m), None)

        await self.arrivals.until(f"an answer to {method}", answered)
        m = answered()
        assert m is not None
        return m

    async def session(self, caps: dict[str, Any]) -> str:
        r = await self.call("initialize", {"protocolVersion": 1, "clientCapabilities": caps})
        assert "result" in r, r
        r = await self.call("session/new", {"cwd": "/w", "mcpServers": []})
        return str(r["result"]["sessionId"])

    async def prompt(self, sid: str, *blocks: Any) -> tuple[dict[str, Any], list[str]]:
        start = len(self.msgs)
        r = await self.call("session/prompt", {"sessionId": sid, "prompt": list(blocks)})
        said = [
            m["params"]["update"]["content"].get("text", "")
            for m in self.msgs[start:]
            if m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        ]
        return r, said


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


FORM = {"elicitation": {"form": {}}}


def _elicit_ok(msg: dict[str, Any]) -> dict[str, Any]:
    if msg["method"] == "elicitation/create":
        return {"result": {"action": "accept", "content": {"answer": "Ada"}}}
    return {"result": {"outcome": {"outcome": "selected", "optionId": "accept"}}}


def test_elicitation_when_declared(agents: dict[str, Any]) -> None:
    async def go() -> None:
        c = Client("askobj", agents["askobj"], _elicit_ok)
        sid = await c.session(FORM)
        r, said = await c.prompt(sid, text("ask"))
        assert r["result"] == {"stopReason": "end_turn"} and said == ["answer=Ada"]
        (req,) = c.requests
        assert req["method"] == "elicitation/create" and req["params"]["mode"] == "form"
        assert req["params"]["requestedSchema"]["required"] == ["answer"]
        await c.conn.close()

    asyncio.run(go())


@pytest.mark.parametrize(
    "caps",
    [{}, {"elicitation": {}}, {"elicitation": {"url": {}}}, {"elicitation": None}],
    ids=["nothing", "no-mode", "url-only", "null"],
)
def test_no_elicitation_declared(agents: dict[str, Any], caps: dict[str, Any]) -> None:
    """Without form elicitation declared: a yes/no interrupt asks permission; one that
    needs an answer ends the turn normally with a message, asking nothing."""

    async def go() -> None:
        c = Client("askobj", agents["askobj"], _elicit_ok)
        sid = await c.session(caps)
        r, said = await c.prompt(sid, text("confirm"))
        assert r["result"] == {"stopReason": "end_turn"} and said == ["approved=True"]
        assert [q["method"] for q in c.requests] == ["session/request_permission"]
        r, said = await c.prompt(sid, text("ask"))
        assert r["result"] == {"stopReason": "end_turn"}
        assert len(said) == 1 and "Which name?" in said[0] and "elicitation" in said[0]
        assert len(c.requests) == 1  # nothing more was asked
        r, said = await c.prompt(sid, text("hello"))  # the session goes on
        assert said == ["question=hello"]
        await c.conn.close()

    asyncio.run(go())


def test_client_error_to_an_interrupt_is_not_the_prompts_error(agents: dict[str, Any]) -> None:
    """The client answers elicitation/create with -32601 (and then with a resume that
    does not fit the schema): each prompt answers normally, end_turn, with a message."""

    async def go() -> None:
        answers = iter(
            [
                {"error": {"code": -32601, "message": "Method not found"}},
                {"result": {"action": "accept", "content": {"answer": ""}}},
            ]
        )
        c = Client("askobj", agents["askobj"], lambda msg: next(answers))
        sid = await c.session(FORM)
        r, said = await c.prompt(sid, text("ask"))
        assert r.get("result") == {"stopReason": "end_turn"}, r
        assert len(said) == 1 and "-32601" in said[0]
        r, said = await c.prompt(sid, text("ask"))
        assert r.get("result") == {"stopReason": "end_turn"}, r
        assert len(said) == 1 and "does not match" in said[0] and "answer" in said[0]
        await c.conn.close()

    asyncio.run(go())


@pytest.mark.wire_check_send_only  # a malformed prompt on purpose
def test_text_prompts_to_an_agent_with_an_input_schema(agents: dict[str, Any]) -> None:
    """Object input with one string field: JSON text that is the input is the input; other
    text fills the field; a prompt with no usable text ends normally saying what JSON the
    agent expects.  A string input takes the text as it is."""

    async def go() -> None:
        c = Client("askobj", agents["askobj"], _elicit_ok)
        sid = await c.session({})
        r, said = await c.prompt(sid, text('{"question": "as json"}'))
        assert r["result"] == {"stopReason": "end_turn"} and said == ["question=as json"]
        r, said = await c.prompt(sid, text("plain words"))
        assert said == ["question=plain words"]
        resource = {
            "type": "resource",
            "resource": {"uri": "x:1", "mimeType": "application/json", "text": '{"q": 1}'},
        }
        r, said = await c.prompt(sid, resource)
        assert r["result"] == {"stopReason": "end_turn"}, r
        assert len(said) == 1 and "input.question" in said[0] and '"question"' in said[0]
        r, said = await c.prompt(sid, {"type": "resource_link", "uri": "file:///x", "name": "x"})
        assert r["result"] == {"stopReason": "end_turn"}, r
        assert len(said) == 1 and "no input" in said[0]
        r = await c.call("session/prompt", {"sessionId": sid, "prompt": [7]})
        assert r["error"]["code"] == -32602  # not a content block at all: invalid params
        await c.conn.close()

        s = Client("askstr", agents["askstr"], _elicit_ok)
        sid = await s.session({})
        r, said = await s.prompt(sid, text('"quoted" {not json'))
        assert said == ['question="quoted" {not json']
        await s.conn.close()

    asyncio.run(go())
