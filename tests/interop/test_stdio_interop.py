"""A generated stdio agent in a real subprocess, driven by the official ACP SDK client
and by raw JSON-RPC lines; a generated client driving an SDK agent; acpbench's echo check."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from project_support import write_project
from wait_support import Arrivals

pytestmark = pytest.mark.slow  # interop with the SDK: `make test`, not `make test-fast`

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
SECRET = "sk-test-SECRET-9f8e7d"

HANDLERS = """
from __future__ import annotations

import asyncio
from typing import Any

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent.agent import Turn
from ._generated.runtime.wire.errors import AgentError


class QuotaExceeded(AgentError):
    code = 1001
    name = "QuotaExceeded"
    transient = True


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> Any:
        if isinstance(input, dict):
            await turn.send_text("got " + str(input.get("topic")))
            return {"summary": "about " + str(input.get("topic"))}
        text = "".join(b.get("text", "") for b in input if b.get("type") == "text")
        if text == "slow":
            await turn.send_text("started")
            await asyncio.sleep(60)
        if text == "boom":
            raise RuntimeError("failed with token " + "SECRET_IN_EXC")
        if text == "quota":
            raise QuotaExceeded("quota exceeded", details={"retry_after": 3})
        if text == "print":
            print("stray output that must not reach the protocol stream")
        if text == "route":
            await turn.send_text(repr(turn.provider("main")))
            return None
        if text == "ask":
            answer = await turn.interrupt("approval", {"action": "delete"})
            # a typed <Interrupt>Resume model when the manifest models have one
            approved = getattr(answer, "approved", None) if not isinstance(answer, dict) else answer.get("approved")
            await turn.send_text("approved=" + str(approved))
            return None
        for block in input:
            if block.get("type") == "text":
                await turn.send_text(block["text"])
        return None
"""

MANIFEST: dict[str, Any] = {
    "name": "test-agent",
    "version": "0.1.0",
    "title": "Test Agent",
    "description": "agent for the runtime tests",
    "config": {
        "schema": {"type": "object", "properties": {"model": {"type": "string"}}},
        "options": [
            {
                "id": "model",
                "name": "Model",
                "type": "choice",
                "default": "small",
                "values": ["small", "large"],
            },
            {"id": "verbose", "name": "Verbose", "type": "boolean", "default": False},
        ],
    },
    "interrupts": [
        {
            "name": "approval",
            "description": "approve the action",
            "payload": {"schema": {"type": "object"}},
            "resume": {
                "schema": {"type": "object", "properties": {"approved": {"type": "boolean"}}}
            },
        }
    ],
    "errors": [{"code": 1001, "name": "QuotaExceeded", "description": "quota", "transient": True}],
    "providers": [
        {
            "id": "main",
            "supported": ["openai", "anthropic"],
            "required": True,
            "default": {"api_type": "openai", "base_url": "https://api.openai.com/v1"},
        },
        {"id": "aux", "supported": ["openai"], "required": False},
    ],
}


def build_agent(
    tmp: Path,
    shared_acp: Path,
    rev: str = "v1",
    unstable: bool = True,
    manifest: dict | None = None,
) -> dict[str, str]:
    """Render the `tagent` package (this file's HANDLERS and MANIFEST); returns its env."""
    from hardening_support import build

    return build(
        tmp,
        shared_acp,
        "tagent",
        rev=rev,
        unstable=unstable,
        manifest=manifest or MANIFEST,
        handlers=HANDLERS,
    )


class Raw:
    """Raw JSON-RPC lines to/from an agent subprocess."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def start(cls, env: dict[str, str], *extra: str) -> Raw:
        proc = await asyncio.create_subprocess_exec(
            PY,
            "-m",
            "tagent",
            *extra,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            limit=64 * 1024 * 1024,
        )
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stdout
        while line := await self.proc.stdout.readline():
            self.lines.put_nowait(json.loads(line))  # every stdout line must be JSON

    async def send(self, obj: Any) -> None:
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        assert self.proc.stdin
        self.proc.stdin.write(data + b"\n")
        await self.proc.stdin.drain()

    async def recv(self, timeout: float = 10) -> dict[str, Any]:
        return await asyncio.wait_for(self.lines.get(), timeout)

    async def until_id(
        self, rid: Any, timeout: float = 10
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        seen = []
        while True:
            msg = await self.recv(timeout)
            if msg.get("id") == rid and ("result" in msg or "error" in msg):
                return msg, seen
            seen.append(msg)

    async def call(self, rid: Any, method: str, params: Any = None) -> dict[str, Any]:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        await self.send(msg)
        return (await self.until_id(rid))[0]

    async def stop(self) -> tuple[int, bytes]:
        assert self.proc.stdin
        self.proc.stdin.close()
        rc = await asyncio.wait_for(self.proc.wait(), 10)
        assert self.proc.stderr
        err = await self.proc.stderr.read()
        self.task.cancel()
        return rc, err


async def _session(raw: Raw) -> str:
    r = await raw.call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    assert "result" in r, r
    r = await raw.call(2, "session/new", {"cwd": "/tmp", "mcpServers": []})
    return str(r["result"]["sessionId"])


def test_sdk_client_initialize_prompt_cancel_providers(tmp_path: Path, shared_acp: Path) -> None:
    import acp
    from acp.exceptions import RequestError

    env = build_agent(tmp_path, shared_acp)
    updates: list[tuple[str, Any]] = []
    arrivals = Arrivals()

    class C:
        async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
            updates.append((session_id, update))
            arrivals.arrived()

        async def create_elicitation(self, message: str, mode: Any, **kw: Any) -> Any:
            return acp.AcceptElicitationResponse(action="accept", content={"approved": True})

    async def main() -> None:
        async with acp.spawn_agent_process(
            C(), PY, "-m", "tagent", env=env, use_unstable_protocol=True
        ) as (conn, _proc):
            # the client declares form elicitation: the agent may ask with elicitation/create
            caps = acp.schema.ClientCapabilities(
                elicitation=acp.schema.ElicitationCapabilities(
                    form=acp.schema.ElicitationFormCapabilities()
                )
            )
            init = await conn.initialize(protocol_version=1, client_capabilities=caps)
            assert init.agent_info is not None and init.agent_info.name == "test-agent"
            assert (
                init.agent_capabilities is not None
                and init.agent_capabilities.providers is not None
            )
            new = await conn.new_session(cwd="/tmp", mcp_servers=[])
            sid = new.session_id
            opts = {o.root.id if hasattr(o, "root") else o.id for o in (new.config_options or [])}
            assert opts == {"model", "verbose"}

            blocks = [acp.text_block(f"part {i};") for i in range(20)]
            resp = await conn.prompt(session_id=sid, prompt=blocks)
            assert resp.stop_reason == "end_turn"
            texts = [
                u.content.text
                for s, u in updates
                if s == sid and u.session_update == "agent_message_chunk"
            ]
            assert texts == [f"part {i};" for i in range(20)]

            # interrupt through elicitation/create, answer handed back to the handler
            updates.clear()
            resp = await conn.prompt(session_id=sid, prompt=[acp.text_block("ask")])
            assert [u.content.text for _, u in updates] == ["approved=True"]

            # cancel: the turn ends with stopReason cancelled
            task = asyncio.create_task(conn.prompt(session_id=sid, prompt=[acp.text_block("slow")]))
            await arrivals.until(
                '"started": the slow turn runs',
                lambda: any(getattr(u.content, "text", "") == "started" for _, u in updates),
            )
            await conn.cancel(session_id=sid)
            resp = await asyncio.wait_for(task, 10)
            assert resp.stop_reason == "cancelled"

            # providers (v1 unstable): list never shows headers; set/disable rules
            raw = conn._conn
            listed = await raw.send_request("providers/list", {})
            assert {p["providerId"] for p in listed["providers"]} == {"main", "aux"}
            await raw.send_request(
                "providers/set",
                {
                    "providerId": "main",
                    "apiType": "anthropic",
                    "baseUrl": "https://proxy.example",
                    "headers": {"Authorization": SECRET},
                },
            )
            listed = await raw.send_request("providers/list", {})
            main = next(p for p in listed["providers"] if p["providerId"] == "main")
            assert main["current"] == {"apiType": "anthropic", "baseUrl": "https://proxy.example"}
            assert SECRET not in json.dumps(listed)
            updates.clear()
            await conn.prompt(session_id=sid, prompt=[acp.text_block("route")])
            shown = updates[0][1].content.text
            assert "proxy.example" in shown and SECRET not in shown
            for params, what in [
                (
                    {
                        "providerId": "nope",
                        "apiType": "openai",
                        "baseUrl": "x",
                        "headers": {"k": SECRET},
                    },
                    "unknown id",
                ),
                (
                    {
                        "providerId": "aux",
                        "apiType": "anthropic",
                        "baseUrl": "x",
                        "headers": {"k": SECRET},
                    },
                    "unsupported",
                ),
            ]:
                with pytest.raises(RequestError) as ei:
                    await raw.send_request("providers/set", params)
                assert ei.value.code == -32602, what
                assert SECRET not in str(ei.value) + json.dumps(ei.value.data)
            with pytest.raises(RequestError) as ei:
                await raw.send_request("providers/disable", {"providerId": "main"})
            assert ei.value.code == -32602
            assert await raw.send_request("providers/disable", {"providerId": "ghost"}) == {}
            await raw.send_request("providers/disable", {"providerId": "aux"})
            listed = await raw.send_request("providers/list", {})
            assert (
                next(p for p in listed["providers"] if p["providerId"] == "aux")["current"] is None
            )

            info = await conn.ext_method("agent/info", {})
            assert info["name"] == "test-agent" and "schemas" in info
            assert "approval" in info["schemas"]["interrupts"]

    asyncio.run(main())


@pytest.mark.wire_check_send_only  # malformed frames on purpose
def test_raw_error_classes(tmp_path: Path, shared_acp: Path) -> None:
    env = build_agent(tmp_path, shared_acp)
    env["ACP_MAX_MESSAGE_SIZE"] = "100000"

    async def main() -> None:
        raw = await Raw.start(env)
        sid = await _session(raw)
        await raw.send(b"{not json")
        m = await raw.recv()
        assert m["id"] is None and m["error"]["code"] == -32700
        await raw.send([1, 2])  # a batch of two invalid entries: one array, an error each
        errors: Any = await raw.recv()
        assert [(e["id"], e["error"]["code"]) for e in errors] == [(None, -32600)] * 2
        await raw.send({"jsonrpc": "1.0", "id": 7, "method": "initialize"})
        m = await raw.recv()
        assert m["id"] == 7 and m["error"]["code"] == -32600
        assert (await raw.call(8, "no/such"))["error"]["code"] == -32601
        m = await raw.call(9, "session/new", {"mcpServers": []})
        assert m["error"]["code"] == -32602 and m["error"]["data"]["errors"][0]["loc"] == [
            "params",
            "cwd",
        ]
        m = await raw.call(10, "session/prompt", {"sessionId": "ghost", "prompt": []})
        assert m["error"]["code"] == -32602 and "unknown session" in m["error"]["message"]
        m = await raw.call(11, "session/prompt", {"sessionId": sid, "prompt": [{"text": "x"}]})
        assert m["error"]["data"]["errors"][0]["loc"][:3] == ["params", "prompt", 0]
        assert m["error"]["data"]["pointer"] == "/prompt/0/type"
        m = await raw.call(
            12, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "boom"}]}
        )
        assert m["error"] == {"code": -32603, "message": "internal error"}
        m = await raw.call(
            13, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "quota"}]}
        )
        assert m["error"]["code"] == 1001
        assert m["error"]["data"] == {
            "name": "QuotaExceeded",
            "transient": True,
            "details": {"retry_after": 3},
        }
        # oversized message: an error, and the connection lives on
        await raw.send(
            {"jsonrpc": "2.0", "id": 14, "method": "initialize", "params": {"pad": "x" * 200000}}
        )
        m = await raw.recv()
        assert (
            m["id"] is None
            and m["error"]["code"] == -32600
            and "too large" in m["error"]["message"]
        )
        m = await raw.call(
            15, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "print"}]}
        )
        assert m["result"] == {"stopReason": "end_turn"}
        # $/cancel_request cancels that request: -32800
        await raw.send(
            {
                "jsonrpc": "2.0",
                "id": 16,
                "method": "session/prompt",
                "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "slow"}]},
            }
        )
        first = await raw.recv()
        assert first["method"] == "session/update"
        # a second prompt while the turn runs waits in the session's line
        await raw.send(
            {
                "jsonrpc": "2.0",
                "id": 17,
                "method": "session/prompt",
                "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]},
            }
        )
        await raw.send(
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 16}}
        )
        m, _ = await raw.until_id(16)
        assert m["error"]["code"] == -32800
        m, _ = await raw.until_id(17)  # its turn came once the cancelled one ended
        assert m["result"] == {"stopReason": "end_turn"}
        # the session is usable again after the cancelled request
        m = await raw.call(
            161, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}
        )
        assert m["result"] == {"stopReason": "end_turn"}
        # config: invalid _meta.config -> -32602 with the location
        m = await raw.call(
            18,
            "session/set_config_option",
            {"sessionId": sid, "configId": "model", "value": "huge"},
        )
        assert m["error"]["code"] == -32602
        m = await raw.call(
            19,
            "session/set_config_option",
            {"sessionId": sid, "configId": "model", "value": "large"},
        )
        assert any(
            o["id"] == "model" and o["currentValue"] == "large"
            for o in m["result"]["configOptions"]
        )
        m = await raw.call(
            21, "session/new", {"cwd": "/tmp", "mcpServers": [], "_meta": {"config": "nope"}}
        )
        assert m["error"]["code"] == -32602
        assert m["error"]["data"]["errors"][0]["loc"] == ["params", "_meta", "config"]
        m = await raw.call(
            22,
            "session/new",
            {"cwd": "/tmp", "mcpServers": [], "_meta": {"config": {"model": "huge", "verbose": 3}}},
        )
        assert m["error"]["code"] == -32602
        locs = [e["loc"] for e in m["error"]["data"]["errors"]]
        assert locs == [
            ["params", "_meta", "config", "model"],
            ["params", "_meta", "config", "verbose"],
        ]
        m = await raw.call(
            23,
            "session/new",
            {"cwd": "/tmp", "mcpServers": [], "_meta": {"config": {"model": "large"}}},
        )
        cur = {o["id"]: o["currentValue"] for o in m["result"]["configOptions"]}
        assert cur == {"model": "large", "verbose": False}
        # EOF with a turn in flight: clean exit
        await raw.send(
            {
                "jsonrpc": "2.0",
                "id": 20,
                "method": "session/prompt",
                "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "slow"}]},
            }
        )
        rc, err = await raw.stop()
        assert rc == 0
        assert b"stray output" in err
        assert (
            b"SECRET_IN_EXC" not in err or b"Traceback" in err
        )  # logged to stderr only, never on the wire

    asyncio.run(main())


def test_v2_lifecycle(tmp_path: Path, shared_acp: Path) -> None:
    env = build_agent(tmp_path, shared_acp, rev="v2", unstable=False)

    async def main() -> None:
        raw = await Raw.start(env)
        r = await raw.call(
            1, "initialize", {"protocolVersion": 2, "info": {"name": "t", "version": "1"}}
        )
        assert r["result"]["info"]["name"] == "test-agent"
        sid = (await raw.call(2, "session/new", {"cwd": "/tmp"}))["result"]["sessionId"]
        await raw.send(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "session/prompt",
                "params": {
                    "sessionId": sid,
                    "prompt": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                },
            }
        )
        answer = await raw.recv()
        assert answer["id"] == 3 and list(answer["result"]) == ["messageId"]
        kinds = []
        while True:
            u = (await raw.recv())["params"]["update"]
            kinds.append(
                (
                    u["sessionUpdate"],
                    u.get("state"),
                    u.get("text") or (u.get("content") or {}).get("text")
                    if isinstance(u.get("content"), dict)
                    else None,
                )
            )
            if u["sessionUpdate"] == "state_update" and u["state"] == "idle":
                assert u["stopReason"] == "end_turn"
                break
            if u["sessionUpdate"] == "user_message":
                assert u["messageId"]
        assert [k[0] for k in kinds] == [
            "user_message",
            "state_update",
            "agent_message_chunk",
            "agent_message_chunk",
            "state_update",
        ]
        await raw.stop()

    asyncio.run(main())


def test_acpbench_echo_check(tmp_path: Path, shared_acp: Path, acpbench: Path) -> None:
    env = build_agent(
        tmp_path, shared_acp, unstable=False, manifest={"name": "echo", "version": "0.1.0"}
    )
    tool = acpbench
    r = subprocess.run(
        [
            PY,
            str(tool),
            "--prompts",
            "40",
            "--sessions",
            "2",
            "--blocks",
            "7",
            "--",
            PY,
            "-m",
            "tagent",
        ],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout
    assert "failures=0 bad_lines=0" in r.stdout


def test_generated_client_drives_sdk_agent(tmp_path: Path, shared_acp: Path) -> None:
    write_project(
        tmp_path,
        "tclient",
        schema=json.loads((shared_acp / "v1" / "schema.json").read_text()),
        manifest={"name": "c", "version": "1"},
        role="client",
    )
    driver = tmp_path / "drive.py"
    driver.write_text(
        textwrap.dedent(f"""
        import asyncio, json, sys
        from tclient._generated.dispatcher import AgentConnection, ClientBase
        from tclient._generated.runtime.client.client import spawn_agent

        class Client(ClientBase):
            def __init__(self):
                super().__init__()
                self.chunks = []
            async def session_update(self, params):
                p = params if isinstance(params, dict) else params.model_dump(by_alias=True, mode="json")
                self.chunks.append(p["update"]["content"]["text"])

        async def main():
            client = Client()
            async with spawn_agent(client, AgentConnection, sys.executable, {str(REPO / "bench" / "agents" / "sdk_echo.py")!r}) as agent:
                init = await agent.initialize({{"protocolVersion": 1, "clientCapabilities": {{}}}})
                new = await agent.session_new({{"cwd": "/tmp", "mcpServers": []}})
                sid = new["sessionId"] if isinstance(new, dict) else new.session_id
                resp = await agent.session_prompt({{"sessionId": sid, "prompt": [{{"type": "text", "text": "x%d" % i}} for i in range(10)]}})
                stop = resp["stopReason"] if isinstance(resp, dict) else resp.stop_reason
                stop = getattr(stop, "value", stop)
                print(json.dumps({{"stop": stop, "chunks": client.chunks}}))

        asyncio.run(main())
    """)
    )
    r = subprocess.run(
        [PY, str(driver)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"stop": "end_turn", "chunks": [f"x{i}" for i in range(10)]}


@pytest.mark.slow
def test_interrupt_on_a_revision_without_elicitation(tmp_path: Path, shared_acp: Path) -> None:
    """The legacy schema has no `elicitation/create`: an interrupt becomes its equivalent,
    `session/request_permission` with approve/decline options; approving resumes the
    handler with the resume schema's required booleans set, declining ends the turn
    `cancelled`, and the session takes the next prompt either way."""
    manifest = json.loads(json.dumps(MANIFEST))
    manifest["interrupts"][0]["resume"]["schema"]["required"] = ["approved"]
    env = build_agent(tmp_path, shared_acp, rev="legacy", unstable=False, manifest=manifest)

    async def turn(raw: Raw, sid: str, rid: int, choice: str) -> tuple[dict[str, Any], list[Any]]:
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "ask"}]}
        await raw.send({"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": prompt})
        while True:
            msg = await raw.recv()
            if msg.get("method") == "session/request_permission":
                break
            assert "elicitation" not in str(msg.get("method")), msg
        params = msg["params"]
        assert params["sessionId"] == sid
        assert params["toolCall"]["title"] == "approve the action"
        assert params["toolCall"]["rawInput"] == {"action": "delete"}
        kinds = {o["optionId"]: o["kind"] for o in params["options"]}
        assert kinds == {"accept": "allow_once", "decline": "reject_once"}
        outcome = {"outcome": {"outcome": "selected", "optionId": choice}}
        await raw.send({"jsonrpc": "2.0", "id": msg["id"], "result": outcome})
        return await raw.until_id(rid)

    async def main() -> None:
        raw = await Raw.start(env)
        sid = await _session(raw)
        answer, seen = await turn(raw, sid, 10, "accept")
        assert answer["result"]["stopReason"] == "end_turn", answer
        texts = [m["params"]["update"]["content"]["text"] for m in seen if m.get("method")]
        assert texts == ["approved=True"]
        answer, seen = await turn(raw, sid, 11, "decline")
        assert answer["result"]["stopReason"] == "cancelled", answer
        answer, _ = await turn(raw, sid, 12, "accept")  # not stuck in a running state
        assert answer["result"]["stopReason"] == "end_turn", answer
        rc, err = await raw.stop()
        assert rc == 0, err

    asyncio.run(main())


def test_boolean_option_on_a_revision_without_boolean_options(
    tmp_path: Path, shared_acp: Path
) -> None:
    """The legacy schema's SessionConfigOption has the select kind only (the revision
    description says so): a boolean option is served as a select of "true" / "false",
    and session/set_config_option with "false" turns it off (every frame schema-checked)."""
    env = build_agent(tmp_path, shared_acp, rev="legacy", unstable=False)

    async def main() -> None:
        raw = await Raw.start(env)
        r = await raw.call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        assert "result" in r, r
        r = await raw.call(2, "session/new", {"cwd": "/tmp", "mcpServers": []})
        opts = {o["id"]: o for o in r["result"]["configOptions"]}
        verbose = opts["verbose"]
        assert verbose["type"] == "select" and verbose["currentValue"] == "false", verbose
        assert [o["value"] for o in verbose["options"]] == ["true", "false"]
        sid = r["result"]["sessionId"]
        set_on = {"sessionId": sid, "configId": "verbose", "value": "true"}
        r = await raw.call(3, "session/set_config_option", set_on)
        opts = {o["id"]: o for o in r["result"]["configOptions"]}
        assert opts["verbose"]["currentValue"] == "true", r
        rc, err = await raw.stop()
        assert rc == 0, err

    asyncio.run(main())
