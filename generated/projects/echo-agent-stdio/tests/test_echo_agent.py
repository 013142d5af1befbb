"""Tests that pass as generated; add yours beside them."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from echo_agent._generated.dispatcher import (
    MANIFEST,
    PROFILE,
    AgentBase,
    AgentConnection,
    ClientBase,
)
from echo_agent._generated.runtime.client import spawn_agent
from echo_agent.handlers import Agent

# The agent over stdio, whatever the project's transport: one dispatcher serves both.
SERVE = (
    "import asyncio\n"
    "from echo_agent.handlers import Agent\n"
    "from echo_agent._generated.runtime.serve import serve_agent_stdio\n"
    "asyncio.run(serve_agent_stdio(Agent()))\n"
)


def test_handlers_subclass_the_generated_base() -> None:
    assert issubclass(Agent, AgentBase)


def test_the_agent_introduces_itself_and_opens_a_session() -> None:
    async def run() -> tuple[dict[str, Any], dict[str, Any] | None]:
        async with spawn_agent(ClientBase(), AgentConnection, sys.executable, "-c", SERVE) as agent:
            init = await agent.call(
                "initialize",
                {
                    "protocolVersion": PROFILE["protocol_version"],
                    "clientCapabilities": {},
                    "clientInfo": {"name": "test", "version": "0"},
                },
            )
            session = None
            if not MANIFEST.get("auth") and not any(
                p.get("required") for p in MANIFEST.get("providers") or ()
            ):
                session = await agent.call("session/new", {"cwd": os.getcwd(), "mcpServers": []})
            return init, session

    init, session = asyncio.run(asyncio.wait_for(run(), 60))
    assert init["protocolVersion"] == PROFILE["protocol_version"]
    info = init.get("agentInfo") or init.get("info") or {}
    assert info.get("name") == MANIFEST["name"]
    if session is not None:
        assert session["sessionId"]
