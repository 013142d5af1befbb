"""Slash commands and modes (issue 16) on generated agents, in process through the session
core: a session's current mode survives session/load (v1) and session/resume (v2) in a
fresh process sharing the store, whether the client or the handler switched it; and a
prompt `/name args` reaches the handler of an agent WITH an input schema as
`turn.command` instead of failing input parsing.  Every frame is schema-checked
(tests/conftest.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import hardening_support as hs
import pytest
from hardening_support import Core

MODES = [
    {"id": "code", "name": "Code", "description": "Edits files", "default": True},
    {"id": "ask", "name": "Ask", "description": "Never writes"},
]
COMMANDS = [
    {"name": "help", "description": "What this agent understands"},
    {"name": "plan", "description": "Plan a task", "input_hint": "the task"},
]

MODE_HANDLERS = """
from __future__ import annotations

from typing import Any

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent.agent import Turn


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> Any:
        text = "".join(b.get("text", "") for b in input if b.get("type") == "text")
        if text.startswith("switch "):
            await turn.set_mode(text.removeprefix("switch "))
        await turn.send_text(f"mode {turn.mode}")
        return None
"""

TYPED_HANDLERS = """
from __future__ import annotations

from typing import Any

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent.agent import Turn


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> Any:
        if turn.command is not None:
            kinds = [b["type"] for b in input]
            await turn.send_text(f"command {turn.command.name} [{turn.command.args}] {kinds}")
            return None
        await turn.send_text(f"task {input.task} {input.priority}")
        return None
"""


def _manifest(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "version": "0.1.0",
        "title": "Modes",
        "description": "agent for the commands and modes tests",
        **extra,
    }


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    """agents(kind, rev) -> the Agent class, built once per (kind, revision)."""
    tmp = tmp_path_factory.mktemp("cmdmodes")
    built: dict[tuple[str, str], Any] = {}

    def get(kind: str, rev: str) -> Any:
        if (kind, rev) not in built:
            package = f"cmdmodes_{kind}_{rev}"
            if kind == "modes":
                manifest = _manifest("mode-agent", modes=MODES)
                handlers = MODE_HANDLERS
            else:
                manifest = _manifest(
                    "typed-agent",
                    commands=COMMANDS,
                    input={
                        "type": "object",
                        "properties": {
                            "task": {"type": "string"},
                            "priority": {"type": "integer"},
                        },
                        "required": ["task", "priority"],
                    },
                )
                handlers = TYPED_HANDLERS
            hs.build(
                tmp, shared_acp, package, rev=rev, unstable=False, manifest=manifest,
                handlers=handlers,
            )  # fmt: skip
            built[kind, rev] = (package, hs.load(tmp, package).Agent)
        return built[kind, rev]

    return get


def _init(rev: str) -> dict[str, Any]:
    if rev == "v2":
        return {"protocolVersion": 2, "info": {"name": "t", "version": "0"}, "capabilities": {}}
    return {"protocolVersion": 1}


def _current_mode(rev: str, result: dict[str, Any]) -> Any:
    if rev == "v1":
        return result["modes"]["currentModeId"]
    (opt,) = [o for o in result["configOptions"] if o["configId"] == "mode"]
    return opt["currentValue"]


async def _set_mode(c: Core, rev: str, sid: str, mode: str) -> dict[str, Any]:
    if rev == "v1":
        return await c.call("session/set_mode", {"sessionId": sid, "modeId": mode})
    params = {"sessionId": sid, "configId": "mode", "type": "id", "value": mode}
    return await c.call("session/set_config_option", params)


def _texts(c: Core, sid: str) -> list[str]:
    """The agent's message text chunks of session `sid`."""
    out = []
    for m in c.msgs:
        if m.get("method") != "session/update" or m["params"]["sessionId"] != sid:
            continue
        update = m["params"]["update"]
        if update["sessionUpdate"].startswith("agent_message") and "content" in update:
            out.append(update["content"]["text"])
    return out


def _idles(c: Core, sid: str) -> int:
    """How many v2 `idle` state_updates (a turn saved and over) session `sid` has sent."""
    return sum(
        1
        for m in c.msgs
        if m.get("method") == "session/update"
        and m["params"]["sessionId"] == sid
        and m["params"]["update"].get("state") == "idle"
    )


async def _prompt_text(c: Core, rev: str, sid: str, text: str) -> str:
    """The text the turn sent, once the turn is saved (v1: its answer; v2: the turn runs on
    after the answer until its idle update, sent once the turn is saved)."""
    before, idles = len(_texts(c, sid)), _idles(c, sid)
    r = await c.call("session/prompt", hs.text_prompt(sid, text))
    assert "result" in r, r
    if rev != "v1":
        await c.until(lambda: _idles(c, sid) > idles, what=f"the idle update after {text!r}")
    texts = _texts(c, sid)
    assert len(texts) > before, f"no text for {text!r}"
    return texts[-1]


async def _reopen(c: Core, rev: str, sid: str) -> dict[str, Any]:
    method = "session/load" if rev == "v1" else "session/resume"
    r = await c.call(method, {"sessionId": sid, "cwd": "/w", "mcpServers": []})
    assert "result" in r, r
    return dict(r["result"])


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_the_mode_survives_load_and_resume(agents: Any, rev: str) -> None:
    """The client switches to `ask`: a fresh process (a new session core on the same
    store) loads (v1) / resumes (v2) the session in `ask`, and its turn runs in `ask`;
    a mode the handler switches to (`turn.set_mode`) is kept the same way; a stored mode
    the manifest no longer declares comes back as the default.  (Before, the mode was
    not stored and came back as the default `code`.)"""
    package, agent = agents("modes", rev)
    sessions = hs.runtime_of(package, "sessions")
    store = hs.runtime_of(package, "store").MemorySessionStore()

    async def fresh() -> Core:
        c = Core(sessions.SessionCore(agent, store))
        assert "result" in await c.call("initialize", _init(rev))
        return c

    async def go() -> None:
        a = await fresh()
        new = await a.call("session/new", {"cwd": "/w", "mcpServers": []})
        sid = new["result"]["sessionId"]
        assert _current_mode(rev, new["result"]) == "code"
        r = await _set_mode(a, rev, sid, "ask")
        assert "result" in r, r
        assert await _prompt_text(a, rev, sid, "hello") == "mode ask"
        await a.conn.close()

        b = await fresh()
        assert _current_mode(rev, await _reopen(b, rev, sid)) == "ask"
        assert await _prompt_text(b, rev, sid, "hello") == "mode ask"
        assert await _prompt_text(b, rev, sid, "switch code") == "mode code"
        await b.conn.close()

        c = await fresh()
        assert _current_mode(rev, await _reopen(c, rev, sid)) == "code"
        assert "result" in await _set_mode(c, rev, sid, "ask")
        await c.conn.close()
        assert (await store.load(sid))["mode"] == "ask"  # saved by the set alone, no turn

        # stored in a mode the agent no longer declares: loads in the default mode
        await store.save(sid, {**(await store.load(sid)), "mode": "gone"})
        d = await fresh()
        assert _current_mode(rev, await _reopen(d, rev, sid)) == "code"
        await d.conn.close()

    asyncio.run(go())


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_a_slash_command_reaches_a_typed_input_agent(agents: Any, rev: str) -> None:
    """An agent with an input schema and commands: `/plan write the docs` reaches the
    handler as `turn.command` (the input is the prompt's content blocks), `/help` with
    no arguments too; JSON input still arrives typed, and `/unknown` is not a command
    (it is parsed as input, which it is not: the turn says what JSON is expected).
    (Before, every command failed input parsing.)"""
    package, agent = agents("typed", rev)
    sessions = hs.runtime_of(package, "sessions")
    store = hs.runtime_of(package, "store").MemorySessionStore()

    async def go() -> None:
        c = Core(sessions.SessionCore(agent, store))
        await c.call("initialize", _init(rev))
        sid = (await c.call("session/new", {"cwd": "/w", "mcpServers": []}))["result"]["sessionId"]
        said = await _prompt_text(c, rev, sid, "/plan write the docs")
        assert said == "command plan [write the docs] ['text']"
        assert await _prompt_text(c, rev, sid, "/help") == "command help [] ['text']"
        said = await _prompt_text(c, rev, sid, '{"task": "ship", "priority": 1}')
        assert said == "task ship 1"
        said = await _prompt_text(c, rev, sid, "/unknown thing")
        assert not said.startswith("command") and "task" in said and "priority" in said
        await c.conn.close()

    asyncio.run(go())
