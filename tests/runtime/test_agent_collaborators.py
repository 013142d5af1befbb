"""The agent runtime's collaborators work on their own, around an `AgentContext`, with no
`AgentRuntime`: the seam AgentRuntime composes them through (issue 21)."""

from __future__ import annotations

import asyncio
import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from runtime.agent.providers import Providers
from runtime.wire.errors import RpcError

GOLDEN = Path(__file__).resolve().parents[2] / "generated" / "projects" / "echo-agent-stdio"


@pytest.fixture
def echo(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The golden echo agent's generated package (its revision, models and runtime)."""
    monkeypatch.syspath_prepend(str(GOLDEN))
    return importlib.import_module("echo_agent._generated")


class Handler:
    """Not an AgentRuntime: only what `TurnRunner` asks of one (`PromptHandler`)."""

    async def prompt(self, turn: Any, input: Any) -> Any:
        await turn.send_text("echo:" + input[0]["text"])
        async with turn.tool_call("look", kind="read") as call:
            await call.update(content=[])
        return None


def test_a_turn_runs_with_the_collaborators_alone(echo: ModuleType) -> None:
    rt = "echo_agent._generated.runtime."
    context = importlib.import_module(rt + "agent.context")
    turns = importlib.import_module(rt + "agent.turns")
    jsonrpc = importlib.import_module(rt + "wire.jsonrpc")
    wirecheck = importlib.import_module(rt + "wire.wirecheck")
    config = importlib.import_module(rt + "agent.config")
    commands = importlib.import_module(rt + "agent.commands")
    interrupts = importlib.import_module(rt + "agent.interrupts")
    providers = importlib.import_module(rt + "agent.providers")
    errors = importlib.import_module(rt + "wire.errors")
    dispatcher = importlib.import_module("echo_agent._generated.dispatcher")
    models = importlib.import_module("echo_agent._generated.models")
    sent: list[dict[str, Any]] = []

    async def sink(batch: list[tuple[bytes, str | None]]) -> None:
        sent.extend(json.loads(frame) for frame, _ in batch)

    async def unused(*args: Any) -> Any:
        raise AssertionError("nothing is received in this test")

    async def main() -> dict[str, Any]:
        check = wirecheck.WireCheck(
            "agent", models, dispatcher.AGENT_METHODS, dispatcher.CLIENT_METHODS
        )
        conn = jsonrpc.Connection(sink, unused, unused, wire_check=check)
        ctx = context.AgentContext(dispatcher.MANIFEST, lambda: None, None)
        ctx.revision = dispatcher.REVISION
        ctx.connection = conn
        s = ctx.sessions["sess_1"] = context.Session("sess_1", {}, {}, ctx.machine.initial)
        s.cwd = "/work"
        extras = commands.SessionExtras(ctx)
        runner = turns.TurnRunner(
            ctx,
            Handler(),
            config=config.SessionConfig(ctx, extras),
            extras=extras,
            interrupts=interrupts.Interrupts(ctx),
            providers=providers.Providers({}),
        )
        params = {"sessionId": "sess_1", "prompt": [{"type": "text", "text": "hi"}]}
        result: dict[str, Any] = await runner.prompt(params, None)
        await conn.flush()
        # the session's states moved through the turn and back
        assert s.state == ctx.machine.initial and s.turns == 1 and s.task is None
        with pytest.raises(errors.RpcError, match="unknown session"):
            await runner.prompt({**params, "sessionId": "sess_2"}, None)
        await conn.close()
        return result

    assert asyncio.run(main()) == {"stopReason": "end_turn"}
    updates = [m["params"]["update"] for m in sent if m.get("method") == "session/update"]
    assert updates[0]["sessionUpdate"] == "agent_message_chunk"
    assert updates[0]["content"] == {"type": "text", "text": "echo:hi"}
    assert [u.get("status") for u in updates[1:]] == ["in_progress", None, "completed"]


def test_providers_alone_route_mask_and_refuse() -> None:
    manifest = {
        "providers": [
            {"id": "llm", "supported": ["openai"], "required": True},
            {"id": "extra", "supported": ["anthropic"]},
        ]
    }
    providers = Providers(manifest)
    assert providers and not Providers({})
    assert providers.route("llm") is None

    async def main() -> dict[str, Any]:
        await providers.set_route(
            {
                "providerId": "llm",
                "apiType": "openai",
                "baseUrl": "https://user:pw-secret@llm.example/v1",
                "headers": {"Authorization": "Bearer sk-123"},
            },
            None,
        )
        with pytest.raises(RpcError, match="does not support apiType"):
            await providers.set_route(
                {"providerId": "extra", "apiType": "openai", "baseUrl": "https://x"}, None
            )
        with pytest.raises(RpcError, match="required"):
            await providers.disable({"providerId": "llm"}, None)
        assert await providers.disable({"providerId": "extra"}, None) == {}
        listed: dict[str, Any] = await providers.list_routes({}, None)
        return listed

    listed = asyncio.run(main())
    route = providers.route("llm")
    assert route is not None and route.headers == {"Authorization": "Bearer sk-123"}
    assert "sk-123" not in repr(route) and "pw-secret" not in json.dumps(listed)
    assert [p["providerId"] for p in listed["providers"]] == ["llm", "extra"]
    assert listed["providers"][1]["current"] is None


MANIFEST_WITH_MODES: dict[str, Any] = {
    "name": "t",
    "modes": [{"id": "code", "name": "Code", "default": True}, {"id": "ask", "name": "Ask"}],
    "config": {
        "options": [
            {"id": "style", "type": "string", "values": ["terse", "long"], "default": "terse"}
        ]
    },
}


def _setup(echo: ModuleType) -> Any:
    from runtime.agent.commands import SessionExtras
    from runtime.agent.config import SessionConfig, SessionSetup
    from runtime.agent.context import AgentContext

    ctx = AgentContext(MANIFEST_WITH_MODES, lambda: None, None)
    ctx.revision = echo.dispatcher.REVISION
    extras = SessionExtras(ctx)
    return SessionSetup(ctx, SessionConfig(ctx, extras), extras)


def test_session_setup_restores_a_stored_session(echo: ModuleType) -> None:
    """What the session layer asks to rebuild a stored session (session/load, resume): its
    config, state and turns kept; a mode the manifest no longer has becomes the default."""
    setup = _setup(echo)
    s = setup.restore(
        "sess_1", {"config_raw": {"style": "long"}, "state": "running", "turns": 3, "mode": "gone"}
    )
    assert (s.id, s.config_raw, s.state, s.turns, s.mode) == (
        "sess_1",
        {"style": "long"},
        "running",
        3,
        "code",
    )
    kept = setup.restore("sess_2", {"mode": "ask"})
    assert (kept.state, kept.turns, kept.mode, kept.config_raw) == ("idle", 0, "ask", {})
    with pytest.raises(RpcError) as refused:  # a saved config today's manifest refuses
        setup.restore("sess_3", {"config_raw": {"style": "nope"}})
    assert refused.value.data["errors"][0]["loc"][:2] == ["params", "sessionId"]


def test_session_setup_answers_an_opened_session(echo: ModuleType) -> None:
    """The answer session/new, load and resume share: id, config options and modes."""
    setup = _setup(echo)
    s = setup.restore("sess_1", {"config_raw": {"style": "long"}})
    result = setup.opened(s, {"cwd": "/w", "mcpServers": []}, None)
    assert result["sessionId"] == "sess_1"
    assert [(o["id"], o["currentValue"]) for o in result["configOptions"]] == [("style", "long")]
    assert result["modes"]["currentModeId"] == "code"
    assert s.mcp_servers == []


def test_the_public_interface_the_http_server_and_wire_check_read(echo: ModuleType) -> None:
    """`agent_info()` is the `_agent/info` answer (the HTTP well-known document reads it);
    `protocol_models_of` is the revision's models module on the agent and the client."""
    agent = echo.dispatcher.AgentBase()
    routed = asyncio.run(agent.router.request("_agent/info", None, None))
    assert agent.agent_info() == routed
    assert routed["name"] == "echo-agent"
    models = importlib.import_module("echo_agent._generated.models")
    assert agent.protocol_models_of("") is models
    assert echo.dispatcher.ClientBase.protocol_models_of("") is models
