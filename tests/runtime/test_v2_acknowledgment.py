"""v2 acknowledges a turn with its ``idle`` state_update (stopReason ``end_turn``): the session
core sends it only once the turn is saved, so no client sees a turn end that a crash or a
store outage loses (``make cluster`` lost such turns: acknowledged during a PostgreSQL
outage, kept only in one replica's memory).  When the save fails the idle update carries
stopReason ``error`` with the transient StoreUnavailable error instead."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import hardening_support as hs
import pytest
from hardening_support import Core

PKG = "ackagent2"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    tmp = tmp_path_factory.mktemp("ack2")
    hs.build(tmp, shared_acp, PKG, rev="v2", unstable=False)
    return hs.load(tmp, PKG).Agent


INIT = {"protocolVersion": 2, "info": {"name": "t", "version": "0"}, "capabilities": {}}
NEW = {"cwd": "/w", "mcpServers": []}


def _idle(c: Core) -> dict[str, Any] | None:
    for m in c.msgs:
        u = m.get("params", {}).get("update", {}) if m.get("method") == "session/update" else {}
        if u.get("sessionUpdate") == "state_update" and u.get("state") == "idle":
            return dict(u)
    return None


async def _wait_idle(c: Core) -> dict[str, Any]:
    await c.until(lambda: _idle(c), what="the idle update")
    u = _idle(c)
    assert u is not None
    return u


def test_idle_end_turn_only_after_the_turn_is_saved(built: Any) -> None:
    async def go() -> None:
        store = hs.runtime_of(PKG, "store").MemorySessionStore()
        gate, saving = asyncio.Event(), asyncio.Event()
        real = store.save_turn

        async def slow_save(*args: Any, **kwargs: Any) -> Any:
            saving.set()
            await gate.wait()
            return await real(*args, **kwargs)

        store.save_turn = slow_save
        core = hs.runtime_of(PKG, "sessions").SessionCore(built, store)
        c = Core(core)
        await c.call("initialize", INIT)
        sid = (await c.call("session/new", NEW))["result"]["sessionId"]
        await c.call("session/prompt", hs.text_prompt(sid, "hello"))
        await asyncio.wait_for(saving.wait(), 10)  # the turn has ended; its save waits

        def chunks() -> list[str]:
            return [
                m["params"]["update"]["content"]["text"]
                for m in c.msgs
                if m.get("method") == "session/update"
                and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
            ]

        await c.until(lambda: chunks() != [])  # what the turn wrote has reached the client
        assert chunks() == ["hello"]  # the turn ran and ended
        assert _idle(c) is None, "the turn was acknowledged before it was saved"
        gate.set()
        idle = await _wait_idle(c)
        assert idle["stopReason"] == "end_turn"
        assert (await store.load(sid))["turns"] == 1
        await c.conn.close()

    asyncio.run(go())


def test_unsaved_turn_ends_with_an_error_not_end_turn(built: Any) -> None:
    async def go() -> None:
        store = hs.runtime_of(PKG, "store").MemorySessionStore()
        core = hs.runtime_of(PKG, "sessions").SessionCore(built, store)
        c = Core(core)
        await c.call("initialize", INIT)
        sid = (await c.call("session/new", NEW))["result"]["sessionId"]

        async def down(*args: Any, **kwargs: Any) -> Any:
            raise OSError("the database is gone")

        store.save_turn = down
        await c.call("session/prompt", hs.text_prompt(sid, "hello"))
        idle = await _wait_idle(c)
        assert idle["stopReason"] == "error"
        assert idle["error"]["data"]["name"] == "StoreUnavailable"
        assert idle["error"]["data"]["transient"] is True
        await c.conn.close()

    asyncio.run(go())
