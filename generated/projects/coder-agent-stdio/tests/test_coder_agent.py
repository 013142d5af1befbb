"""Tests that pass as generated; add yours beside them."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from coder_agent._generated.dispatcher import (
    MANIFEST,
    REVISIONS,
    AgentBase,
    AgentConnection,
    ClientBase,
)
from coder_agent._generated.runtime.client import spawn_agent
from coder_agent.handlers import Agent

# The agent over stdio, whatever the project's transport: one dispatcher serves both.
# Its sessions stay in memory here (the installed agent keeps them in SQLite).
SERVE = (
    "import asyncio\n"
    "from coder_agent.handlers import Agent\n"
    "from coder_agent._generated.runtime.serve import serve_agent_stdio\n"
    "from coder_agent._generated.runtime.store import MemorySessionStore\n"
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
