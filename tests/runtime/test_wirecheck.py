"""The schema-checked wire (templates/runtime/wire/wirecheck.py): wrong frames are caught, in both
directions, in process and in a subprocess agent; right frames pass; off means off.

These tests point ACP_WIRE_CHECK_LOG at their own file: the violations they provoke on
purpose must not reach the suite's harness (tests/conftest.py), which fails any test
during which a violation is written to its file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import hardening_support as hs
import orjson
import pytest
from wait_support import Arrivals

# The handler sends what the prompt text names: a right chunk, or one of the wrong frames.
HANDLERS = """
from __future__ import annotations

from typing import Any

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent.agent import Turn

WRONG = {
    "missing": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}},
    "typo_key": {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "x", "annotation": {}},
    },
    "typo_tag": {"sessionUpdate": "agent_mesage_chunk", "content": {"type": "text", "text": "x"}},
    "extension_tag": {"sessionUpdate": "_acme/progress", "done": 3},
}


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> Any:
        text = "".join(b.get("text", "") for b in input if b.get("type") == "text")
        if text in WRONG:
            try:
                await turn.send_update(WRONG[text])
            except Exception as exc:
                await turn.send_text("raised " + type(exc).__name__)
                return None
            await turn.send_text("sent")
            return None
        await turn.send_text(text)
        return None
"""


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("wirecheck")
    env = hs.build(tmp, shared_acp, "wcagent", handlers=HANDLERS)
    handlers = hs.load(tmp, "wcagent")
    return {
        "env": env,
        "agent": handlers.Agent,
        "serve": hs.runtime_of("wcagent", "serve"),
        "stdio": hs.runtime_of("wcagent", "stdio"),
        "wirecheck": hs.runtime_of("wcagent", "wirecheck"),
    }


@pytest.fixture
def own_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "violations.jsonl"
    monkeypatch.setenv("ACP_WIRE_CHECK", "1")
    monkeypatch.setenv("ACP_WIRE_CHECK_LOG", str(log))
    return log


def violations(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [json.loads(line)["violation"] for line in log.read_text().splitlines()]


class InProcess:
    def __init__(self, fa: dict[str, Any]) -> None:
        self.out: list[dict[str, Any]] = []
        self.arrivals = Arrivals()

        async def sink(batch: list[tuple[bytes, Any]]) -> None:
            self.out.extend(orjson.loads(f) for f, _ in batch)
            self.arrivals.arrived()

        self.conn = fa["serve"].agent_connection(fa["agent"](), sink)

    async def call(self, rid: Any, method: str, params: Any) -> dict[str, Any]:
        self.conn.feed(
            orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        )

        def answer() -> dict[str, Any] | None:
            return next((m for m in self.out if m.get("id") == rid and "method" not in m), None)

        await self.arrivals.until(f"the answer to {method}", answer)
        found = answer()
        assert found is not None
        return found

    async def prompt(self, sid: str, text: str) -> list[str]:
        self.out.clear()
        r = await self.call(text, "session/prompt", hs.text_prompt(sid, text))
        assert "result" in r, r
        return [
            m["params"]["update"].get("content", {}).get("text", "")
            for m in self.out
            if m.get("method") == "session/update"
        ]

    async def session(self) -> str:
        assert "result" in await self.call("i", "initialize", {"protocolVersion": 1})
        r = await self.call("n", "session/new", {"cwd": "/tmp", "mcpServers": []})
        return str(r["result"]["sessionId"])


def test_wrong_frames_sent_are_caught_and_raised(agent: dict[str, Any], own_log: Path) -> None:
    """A missing required field, a key the schema does not name and an unknown variant tag:
    each raises WireCheckError in the handler that sent it and is recorded; a right frame
    and an extension tag (`_...`) pass."""

    async def main() -> None:
        p = InProcess(agent)
        sid = await p.session()
        assert await p.prompt(sid, "hello") == ["hello"]
        assert violations(own_log) == []
        for case, where in [
            ("missing", "/update/agent_message_chunk/content/text/text: Field required"),
            ("typo_key", "/update/content/annotation: not a field of TextContent"),
            ("typo_tag", "sessionUpdate 'agent_mesage_chunk' is not a variant of this revision"),
        ]:
            assert await p.prompt(sid, case) == ["raised WireCheckError"], case
            found = violations(own_log)
            assert len(found) == 1, (case, found)
            assert found[0].startswith("ACP wire check (agent sent): session/update params")
            assert where in found[0], (case, found[0])
            own_log.unlink()
        assert await p.prompt(sid, "extension_tag") == ["", "sent"]
        assert violations(own_log) == []
        await p.conn.close()

    asyncio.run(main())


def test_wrong_frames_received_are_recorded_and_still_answered(
    agent: dict[str, Any], own_log: Path
) -> None:
    """What the peer sends is checked too: a request with wrong params is recorded (the
    runtime still answers it -32602), an unknown method and a notification sent as a
    request are named; a response to our request is checked against the result class."""

    async def main() -> None:
        p = InProcess(agent)
        sid = await p.session()
        r = await p.call(5, "session/prompt", {"sessionId": sid, "prompt": [{"text": "x"}]})
        assert r["error"]["code"] == -32602
        r = await p.call(6, "no/such", {})
        assert r["error"]["code"] == -32601
        r = await p.call(7, "session/cancel", {"sessionId": sid})
        found = violations(own_log)
        assert len(found) == 3, found
        assert all(v.startswith("ACP wire check (agent received)") for v in found)
        assert "session/prompt params (PromptRequest) /prompt/0" in found[0]
        assert "'no/such' is not a method this side may serve" in found[1]
        assert "'session/cancel' is a notification, sent as a request" in found[2]
        # a response: the agent asks the client (session/request_permission), the answer
        # lacks the required outcome
        own_log.unlink()
        ask = asyncio.ensure_future(
            p.conn.request(
                "session/request_permission",
                {
                    "sessionId": sid,
                    "toolCall": {"toolCallId": "t1"},
                    "options": [{"optionId": "ok", "name": "OK", "kind": "allow_once"}],
                },
            )
        )

        def asked() -> list[dict[str, Any]]:
            return [m for m in p.out if m.get("method") == "session/request_permission"]

        await p.arrivals.until("the permission request", asked)
        rid = asked()[0]["id"]
        p.conn.feed(orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": {"chosen": "ok"}}))
        assert await ask == {"chosen": "ok"}  # handed over as it came
        (found,) = violations(own_log)
        assert "(client" not in found and "agent received" in found
        assert "session/request_permission result (RequestPermissionResponse) /outcome" in found
        await p.conn.close()

    asyncio.run(main())


def test_off_means_off(
    agent: dict[str, Any], own_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACP_WIRE_CHECK", "0")

    async def main() -> None:
        p = InProcess(agent)
        sid = await p.session()
        assert await p.prompt(sid, "missing") == ["", "sent"]
        await p.conn.close()

    asyncio.run(main())
    assert violations(own_log) == []


@pytest.mark.slow
def test_subprocess_agent_reports_to_the_log(agent: dict[str, Any], own_log: Path) -> None:
    """An agent subprocess inherits the mode and the log file: that is how the suite's
    harness sees violations of every stdio/HTTP agent it starts."""
    env = {**agent["env"], "ACP_WIRE_CHECK": "1", "ACP_WIRE_CHECK_LOG": str(own_log)}

    async def main() -> bytes:
        peer = await hs.StdioPeer.start(env, "wcagent")
        sid = await hs.open_session(peer)
        r = await peer.call(9, "session/prompt", hs.text_prompt(sid, "typo_tag"))
        assert r["result"] == {"stopReason": "end_turn"}
        rc, err = await peer.close()
        assert rc == 0
        return err

    err = asyncio.run(main())
    (found,) = violations(own_log)
    assert "'agent_mesage_chunk' is not a variant" in found
    assert b"ACP wire check (agent sent)" in err  # logged on stderr too


def test_a_malformed_providers_set_is_logged_with_its_credentials_masked(
    agent: dict[str, Any], own_log: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Fails on the old code: the frame was quoted whole, Authorization header included
    (a refused route is never registered for redaction)."""
    secrets = ("sk-wire-secret-31337", "pw-in-url-2718", "query-key-1618")
    route = {
        "providerId": "main",
        "apiType": 5,  # not a string: the frame is malformed
        "baseUrl": f"https://user:{secrets[1]}@gw.example/v1?key={secrets[2]}",
        "headers": {"Authorization": f"Bearer {secrets[0]}"},
    }

    async def main() -> dict[str, Any]:
        p = InProcess(agent)
        await p.session()
        answer = await p.call(9, "providers/set", route)
        await p.conn.close()
        return answer

    with caplog.at_level("WARNING", logger="acp.runtime.wirecheck"):
        answer = asyncio.run(main())
    assert "error" in answer, answer
    (found,) = violations(own_log)
    assert "providers/set params" in found and "***" in found, found
    logged = caplog.text
    assert "providers/set" in logged
    for secret in secrets:
        assert secret not in found and secret not in logged and secret not in json.dumps(answer)
