"""Tests that pass as generated; add yours beside them."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from echo_agent._generated.dispatcher import (
    MANIFEST,
    REVISIONS,
    AgentBase,
    AgentConnection,
    ClientBase,
)
from echo_agent._generated.runtime.client import spawn_agent
from echo_agent.handlers import Agent

# The agent over stdio, whatever the project's transport: one dispatcher serves both.
# Its sessions stay in memory here (the installed agent keeps them in SQLite).
SERVE = (
    "import asyncio\n"
    "from echo_agent.handlers import Agent\n"
    "from echo_agent._generated.runtime.serve import serve_agent_stdio\n"
    "from echo_agent._generated.runtime.store import MemorySessionStore\n"
    "asyncio.run(serve_agent_stdio(Agent(), store=MemorySessionStore()))\n"
)


def test_handlers_subclass_the_generated_base() -> None:
    assert issubclass(Agent, AgentBase)


def test_the_agent_introduces_itself_and_opens_a_session() -> None:
    """For each protocol revision the agent serves: `initialize` in that revision's shape
    (field names from the generated revision description), then `session/new`."""

    async def run(rev: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
        async with spawn_agent(ClientBase(), AgentConnection, sys.executable, "-c", SERVE) as agent:
            init = await agent.call(
                "initialize",
                {
                    "protocolVersion": rev.protocol_version,
                    rev.init.request_capabilities: {},
                    rev.init.request_info: {"name": "test", "version": "0"},
                },
            )
            session = None
            if not MANIFEST.get("auth") and not any(
                p.get("required") for p in MANIFEST.get("providers") or ()
            ):
                session = await agent.call("session/new", {"cwd": os.getcwd(), "mcpServers": []})
            return init, session

    for rev in REVISIONS:
        init, session = asyncio.run(asyncio.wait_for(run(rev), 60))
        assert init["protocolVersion"] == rev.protocol_version
        info = init.get(rev.init.response_info) or {}
        assert info.get("name") == MANIFEST["name"]
        if session is not None:
            assert session["sessionId"]


def _opens_sessions() -> bool:
    """A session needs no credentials or provider set up front (else the tests above
    stop at `initialize`)."""
    return not MANIFEST.get("auth") and not any(
        p.get("required") for p in MANIFEST.get("providers") or ()
    )


async def _prompt(rev: Any, text: str, *, cancel: bool = False) -> str:
    """One prompt in revision `rev`, until its turn ends: its stop reason. v1 answers the
    prompt at the end of the turn; v2 on acceptance, and an idle `state_update` ends it."""
    client = ClientBase()
    async with spawn_agent(client, AgentConnection, sys.executable, "-c", SERVE) as agent:
        await agent.call(
            "initialize",
            {
                "protocolVersion": rev.protocol_version,
                rev.init.request_capabilities: {},
                rev.init.request_info: {"name": "test", "version": "0"},
            },
        )
        agent.revision = client.revision = rev
        session = await agent.call("session/new", {"cwd": os.getcwd(), "mcpServers": []})
        sid = session["sessionId"]
        ended = client.expect_turn_end(sid) if rev.turn.lifecycle == "v2" else None
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        answer = asyncio.ensure_future(agent.call("session/prompt", prompt))
        if cancel:
            agent.connection.notify("session/cancel", {"sessionId": sid})
        result = await answer
        if ended is None:
            return str(result["stopReason"])
        idle = await ended
        return str(idle.get("stopReason"))


def test_a_prompt_ends_its_turn() -> None:
    """For each revision: a text prompt runs the handler (or, to an agent with an input
    schema the text does not fit, says what input it expects) and the turn ends."""
    if not _opens_sessions():
        return
    for rev in REVISIONS:
        stop = asyncio.run(asyncio.wait_for(_prompt(rev, "hello"), 60))
        assert stop == "end_turn", (rev.protocol_version, stop)


def test_a_cancelled_prompt_ends_its_turn() -> None:
    """`session/cancel` right after the prompt: the turn ends, cancelled or finished."""
    if not _opens_sessions():
        return
    for rev in REVISIONS:
        stop = asyncio.run(asyncio.wait_for(_prompt(rev, "hello", cancel=True), 60))
        assert stop in ("cancelled", "end_turn"), (rev.protocol_version, stop)
