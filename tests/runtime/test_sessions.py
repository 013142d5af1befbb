"""The session core (runtime/sessions/sessions.py) on a generated agent: one owner per session over
HTTP with two connections (issue 11 item 3), stdio agents that persist and advertise what
they serve, session/list, close and delete, and prompts that fail before they run leaving
no trace in history."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import hardening_support as hs
import orjson
import pytest
from hardening_support import Core
from wait_support import Updates

PKG = "sessagent"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("sessions")
    env = hs.build(tmp, shared_acp, PKG, unstable=False)
    return {"env": env, "tmp": tmp, "agent": hs.load(tmp, PKG).Agent}


def _history(frames: list[bytes]) -> list[tuple[str, str]]:
    out = []
    for f in frames:
        u = orjson.loads(f)["params"]["update"]
        out.append((u["sessionUpdate"], u["content"].get("text", "?")))
    return out


def _core(built: dict[str, Any], store: Any, **kw: Any) -> Any:
    sessions = hs.runtime_of(PKG, "sessions")
    return sessions.SessionCore(built["agent"], store, **kw)


def _idle_sent(c: Core) -> bool:
    """v2: the turn's `idle` state_update (sent once the turn is saved) has been written."""
    return any(
        m.get("method") == "session/update" and m["params"]["update"].get("state") == "idle"
        for m in c.msgs
    )


# ---- one owner per session -------------------------------------------------------------


def test_two_http_connections_one_session(built: dict[str, Any], tmp_path: Path) -> None:
    """Issue 11 item 3, over HTTP with the official SDK client, two connections with the
    same credentials: B loads A's session while A's turn runs: A's turn ends cancelled
    (saved), A's next prompt gets "session in use" (-32001) naming session/load, B's turns
    run; turns never overlap and the store counts exactly the turns that ran.  A takes it
    back with session/load and B is refused in turn."""
    import acp
    import httpx
    from acp import schema as S
    from acp.http.client import create_http_stream
    from test_http_transport import running_server

    http = hs.runtime_of(PKG, "http_server")
    store = hs.runtime_of(PKG, "store_sqlite").SqliteSessionStore(tmp_path / "s.db")

    def prompt(conn: Any, sid: str, text: str) -> Any:
        return conn.prompt(session_id=sid, prompt=[S.TextContentBlock(type="text", text=text)])

    auth = hs.runtime_of(PKG, "auth").Auth(
        [{"type": "bearer", "env": "SESS_TOKEN"}], {"SESS_TOKEN": "tok-sessions-1"}
    )
    app = http.app_for(built["agent"], store=store, auth=auth)
    with running_server(app) as addr:
        url = f"http://{addr}/acp"
        same_token = {"Authorization": "Bearer tok-sessions-1"}

        async def connect() -> tuple[Any, Updates]:
            c = Updates()
            conn = acp.connect_to_agent(
                c,
                create_http_stream(url, headers=same_token, client=httpx.AsyncClient(timeout=None)),
            )
            await asyncio.wait_for(conn.initialize(protocol_version=1), 10)
            return conn, c

        async def go() -> None:
            a, ca = await connect()
            b, cb = await connect()
            sid = (await asyncio.wait_for(a.new_session(cwd="/tmp", mcp_servers=[]), 10)).session_id
            running = asyncio.ensure_future(prompt(a, sid, "seq a 400 0.01"))
            await ca.until("A's turn streaming", lambda: len(ca.updates) >= 3)
            await asyncio.wait_for(b.load_session(cwd="/tmp", mcp_servers=[], session_id=sid), 10)
            first = await asyncio.wait_for(running, 10)
            assert first.stop_reason == "cancelled"  # A's turn ended by the take-over
            streamed_a = len(ca.updates)
            # B's load replayed A's saved (cancelled) turn: the prompt and what it streamed
            replay = [(u.session_update, u.content.text) for u in cb.updates]
            assert replay[0] == ("user_message_chunk", "seq a 400 0.01")
            assert replay[1:] == [("agent_message_chunk", f"a:{i}") for i in range(streamed_a)]

            with pytest.raises(acp.RequestError) as refused:
                await asyncio.wait_for(prompt(a, sid, "hello"), 10)
            assert refused.value.code == -32001
            assert "in use" in str(refused.value) and "session/load" in str(refused.value)
            assert len(ca.updates) == streamed_a  # nothing ran for A

            for text in ("b1", "b2"):
                r = await asyncio.wait_for(prompt(b, sid, text), 10)
                assert r.stop_reason == "end_turn"

            # A takes it back; now B is the one refused
            await asyncio.wait_for(a.load_session(cwd="/tmp", mcp_servers=[], session_id=sid), 10)
            with pytest.raises(acp.RequestError) as refused_b:
                await asyncio.wait_for(prompt(b, sid, "b3"), 10)
            assert refused_b.value.code == -32001
            assert (await asyncio.wait_for(prompt(a, sid, "a2"), 10)).stop_reason == "end_turn"
            await a.close()
            await b.close()

        asyncio.run(go())

    async def counts() -> tuple[int, list[tuple[str, str]]]:
        state = await store.load(sid_holder[0])
        return state["turns"], _history(await store.history(sid_holder[0]))

    sid_holder = [asyncio.run(store.list_sessions(None, 10))[0][0][0]]
    turns, hist = asyncio.run(counts())
    users = [t for kind, t in hist if kind == "user_message_chunk"]
    assert users == [
        "seq a 400 0.01",
        "b1",
        "b2",
        "a2",
    ]  # the 4 turns that ran; no "hello", no "b3"
    assert turns == 4
    store.close()


def test_websocket_prompt_on_another_connections_session(built: dict[str, Any]) -> None:
    """Over WebSocket (no session header to check) a prompt or config change on a session
    another live connection holds is refused with "session in use" instead of running on
    a second copy; after the owner closes, it is taken without a load."""

    async def go() -> None:
        store = hs.runtime_of(PKG, "store").MemorySessionStore()
        core = _core(built, store)
        a, b = Core(core), Core(core)
        for c in (a, b):
            await c.call("initialize", {"protocolVersion": 1})
        sid = (await a.call("session/new", {"cwd": "/w", "mcpServers": []}))["result"]["sessionId"]
        r = await b.call("session/prompt", hs.text_prompt(sid, "hi"))
        assert r["error"]["code"] == -32001 and r["error"]["data"]["name"] == "SessionInUse"
        r = await b.call(
            "session/set_config_option", {"sessionId": sid, "configId": "model", "value": "large"}
        )
        assert r["error"]["code"] == -32001
        assert b.texts(sid) == []
        assert (await a.call("session/prompt", hs.text_prompt(sid, "mine")))["result"] == {
            "stopReason": "end_turn"
        }
        await a.conn.close()  # the lease is released with the connection
        r = await b.call("session/prompt", hs.text_prompt(sid, "now mine"))
        assert r["result"] == {"stopReason": "end_turn"}
        assert b.texts(sid) == ["now mine"]
        await b.conn.close()

    asyncio.run(go())


def test_take_over_across_replicas_sharing_a_store(built: dict[str, Any], tmp_path: Path) -> None:
    """Two processes' cores on one SQLite file: a take-over on one stops the other's
    running turn at its next renewal, and the stale owner writes nothing afterwards."""

    async def go() -> None:
        store_mod = hs.runtime_of(PKG, "store")
        s1 = store_mod.SqliteSessionStore(tmp_path / "s.db")
        s2 = store_mod.SqliteSessionStore(tmp_path / "s.db")
        a = Core(_core(built, s1, lease_ttl=0.3, replica="one"))
        b = Core(_core(built, s2, lease_ttl=0.3, replica="two"))
        for c in (a, b):
            await c.call("initialize", {"protocolVersion": 1})
        sid = (await a.call("session/new", {"cwd": "/w", "mcpServers": []}))["result"]["sessionId"]
        await a.call("session/prompt", hs.text_prompt(sid, "first"))
        written = len(a.texts(sid))
        rid = a.send("session/prompt", hs.text_prompt(sid, "seq x 1000 0.01"))
        await a.until(lambda: len(a.texts(sid)) > written)  # the long turn is running
        r = await b.call("session/load", {"sessionId": sid, "cwd": "/w", "mcpServers": []})
        assert "result" in r, r
        assert b.texts(sid) == ["first", "first"]  # the running turn was never saved
        r = await a.answer(rid, timeout=5)  # ended within a renewal period
        # not "cancelled": that would read as an acknowledged turn, and it is in no history
        assert r["error"]["code"] == -32001, r
        assert len(a.texts(sid)) < 1000
        r = await a.call("session/prompt", hs.text_prompt(sid, "again"))
        assert r["error"]["code"] == -32001
        await b.call("session/prompt", hs.text_prompt(sid, "b"))
        hist = _history(await s2.history(sid))
        assert [t for k, t in hist if k == "user_message_chunk"] == ["first", "b"]
        assert (await s2.load(sid))["turns"] == 2
        await a.conn.close()
        await b.conn.close()
        s1.close()
        s2.close()

    asyncio.run(go())


def test_a_stale_owner_prompt_right_after_a_take_over_is_not_saved(
    built: dict[str, Any], tmp_path: Path
) -> None:
    """Two processes' cores on one SQLite file, a long lease: B takes the session over
    while A still trusts its last ownership check (less than OWNER_CHECK ago), and A's
    next prompt runs.  Its save is refused by the store (the lease row names B, checked in
    the save's transaction): A's client gets -32001, and the history holds only what was
    acknowledged."""

    async def go() -> None:
        store_mod = hs.runtime_of(PKG, "store")
        s1 = store_mod.SqliteSessionStore(tmp_path / "s.db")
        s2 = store_mod.SqliteSessionStore(tmp_path / "s.db")
        a = Core(_core(built, s1, lease_ttl=30, replica="one"))
        b = Core(_core(built, s2, lease_ttl=30, replica="two"))
        for c in (a, b):
            await c.call("initialize", {"protocolVersion": 1})
        sid = (await a.call("session/new", {"cwd": "/w", "mcpServers": []}))["result"]["sessionId"]
        await a.call("session/prompt", hs.text_prompt(sid, "first"))
        r = await b.call("session/load", {"sessionId": sid, "cwd": "/w", "mcpServers": []})
        assert "result" in r, r
        r = await a.call("session/prompt", hs.text_prompt(sid, "stale"))
        assert r.get("error", {}).get("code") == -32001, r
        r = await a.call("session/prompt", hs.text_prompt(sid, "again"))  # and stays refused
        assert r["error"]["code"] == -32001, r
        await b.call("session/prompt", hs.text_prompt(sid, "b"))
        hist = _history(await s2.history(sid))
        assert [t for k, t in hist if k == "user_message_chunk"] == ["first", "b"]
        assert (await s2.load(sid))["turns"] == 2
        await a.conn.close()
        await b.conn.close()
        s1.close()
        s2.close()

    asyncio.run(go())


# ---- no trace of a prompt that never ran ---------------------------------------------------


@pytest.mark.wire_check_send_only  # malformed params on purpose
def test_refused_prompts_leave_no_trace(built: dict[str, Any]) -> None:
    """Invalid params and content nested too deeply to record are refused with -32602 and
    nothing of them reaches history; a prompt while a turn runs waits and is recorded in
    its turn."""

    async def go() -> None:
        store = hs.runtime_of(PKG, "store").MemorySessionStore()
        c = Core(_core(built, store))
        await c.call("initialize", {"protocolVersion": 1})
        sid = (await c.call("session/new", {"cwd": "/w", "mcpServers": []}))["result"]["sessionId"]
        r = await c.call(
            "session/prompt",
            {"sessionId": sid, "prompt": [{"type": "text", "text": "ok?"}, 5]},
        )
        assert r["error"]["code"] == -32602
        deep: Any = {"type": "text", "text": "deep"}
        for _ in range(260):
            deep = {"type": "resource_link", "uri": "x", "name": "n", "_meta": {"inner": deep}}
        r = await c.call(
            "session/prompt",
            {"sessionId": sid, "prompt": [{"type": "text", "text": "before"}, deep]},
        )
        assert r["error"]["code"] == -32602, r
        assert r["error"]["data"]["errors"][0]["loc"] == ["params", "prompt", 1]
        written = len(c.texts(sid))
        slow = c.send("session/prompt", hs.text_prompt(sid, "slow 0.3"))
        await c.until(lambda: len(c.texts(sid)) > written)  # "started": the turn is running
        # a prompt while the turn runs waits its turn (recorded once it runs)
        waiting = c.send("session/prompt", hs.text_prompt(sid, "while running"))
        assert (await c.answer(slow))["result"] == {"stopReason": "end_turn"}
        assert (await c.answer(waiting))["result"] == {"stopReason": "end_turn"}
        r = await c.call("session/prompt", hs.text_prompt(sid, "good"))
        assert r["result"] == {"stopReason": "end_turn"}
        assert _history(await store.history(sid)) == [
            ("user_message_chunk", "slow 0.3"),
            ("agent_message_chunk", "started"),
            ("agent_message_chunk", "slow 0.3"),
            ("user_message_chunk", "while running"),
            ("agent_message_chunk", "while running"),
            ("user_message_chunk", "good"),
            ("agent_message_chunk", "good"),
        ]
        assert (await store.load(sid))["turns"] == 3
        await c.conn.close()

    asyncio.run(go())


# ---- list / close / delete, and what is advertised -----------------------------------------


@pytest.mark.wire_check_send_only  # malformed params on purpose
def test_list_close_delete(built: dict[str, Any]) -> None:
    async def go() -> None:
        store = hs.runtime_of(PKG, "store").MemorySessionStore()
        c = Core(_core(built, store))
        init = (await c.call("initialize", {"protocolVersion": 1}))["result"]
        caps = init["agentCapabilities"]
        assert caps["loadSession"] is True
        assert caps["sessionCapabilities"] == {"resume": {}, "list": {}, "close": {}, "delete": {}}
        made = []
        for cwd in ("/a", "/b", "/a"):
            r = await c.call("session/new", {"cwd": cwd, "mcpServers": []})
            made.append(r["result"]["sessionId"])
        listed = (await c.call("session/list", {}))["result"]
        assert [s["sessionId"] for s in listed["sessions"]] == made
        assert [s["cwd"] for s in listed["sessions"]] == ["/a", "/b", "/a"]
        assert all(s["updatedAt"].endswith("Z") for s in listed["sessions"])
        assert "nextCursor" not in listed
        only_a = (await c.call("session/list", {"cwd": "/a"}))["result"]["sessions"]
        assert [s["sessionId"] for s in only_a] == [made[0], made[2]]
        r = await c.call("session/list", {"cursor": "not-ours"})
        assert r["error"]["code"] == -32602
        r = await c.call("session/load", {"sessionId": made[0], "cwd": 7, "mcpServers": []})
        assert r["error"]["code"] == -32602  # params checked against the revision's model

        # close: the session's work ends here and its lease is free for another connection
        assert (await c.call("session/close", {"sessionId": made[1]}))["result"] == {}
        r = await c.call("session/close", {"sessionId": made[1]})
        assert r["error"]["code"] == -32602
        other = Core(c.conn.core)
        await other.call("initialize", {"protocolVersion": 1})
        r = await other.call("session/prompt", hs.text_prompt(made[1], "x"))
        assert r["result"] == {"stopReason": "end_turn"}

        # delete: gone from the store and from list; its holder forgets it
        assert (await other.call("session/delete", {"sessionId": made[1]}))["result"] == {}
        assert await store.load(made[1]) is None
        listed = (await c.call("session/list", {}))["result"]["sessions"]
        assert [s["sessionId"] for s in listed] == [made[0], made[2]]
        r = await other.call("session/prompt", hs.text_prompt(made[1], "y"))
        assert r["error"]["code"] == -32602
        r = await c.call("session/delete", {"sessionId": "sess_nope"})
        assert r["result"] == {}  # deleting what is not there succeeds (TCK ACP-DELETE-002)
        await c.conn.close()
        await other.conn.close()

    asyncio.run(go())


def test_stdio_agent_persists_sessions_across_restarts(
    built: dict[str, Any], tmp_path: Path
) -> None:
    """A stdio agent keeps its sessions in SQLite ($ACP_SESSION_DB): it advertises
    session/load and the session capabilities; after a restart the session loads (history
    replayed), is listed, resumes and continues."""
    env = {**built["env"], "ACP_SESSION_DB": str(tmp_path / "stdio.db")}

    async def go() -> None:
        peer = await hs.StdioPeer.start(env, PKG)
        r = await peer.call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        caps = r["result"]["agentCapabilities"]
        assert caps["loadSession"] is True and "resume" in caps["sessionCapabilities"]
        r = await peer.call(2, "session/new", {"cwd": "/proj", "mcpServers": []})
        sid = r["result"]["sessionId"]
        r = await peer.call(3, "session/prompt", hs.text_prompt(sid, "remember me"))
        assert r["result"] == {"stopReason": "end_turn"}
        peer.proc.kill()
        await peer.proc.wait()
        peer.task.cancel()

        peer = await hs.StdioPeer.start(env, PKG)
        await peer.call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        r = await peer.call(2, "session/list", {})
        assert [s["sessionId"] for s in r["result"]["sessions"]] == [sid]
        await peer.send(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "session/load",
                "params": {"sessionId": sid, "cwd": "/proj", "mcpServers": []},
            }
        )
        r, seen = await peer.until_id(3)
        assert "result" in r, r
        assert [
            (m["params"]["update"]["sessionUpdate"], m["params"]["update"]["content"]["text"])
            for m in seen
        ] == [("user_message_chunk", "remember me"), ("agent_message_chunk", "remember me")]
        r = await peer.call(4, "session/prompt", hs.text_prompt(sid, "again"))
        assert r["result"] == {"stopReason": "end_turn"}
        rc, err = await peer.close()
        assert rc == 0, err

    asyncio.run(go())


@pytest.fixture(scope="module")
def built_v2(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    tmp = tmp_path_factory.mktemp("sessions2")
    hs.build(tmp, shared_acp, "sessagent2", rev="v2", unstable=False)
    return hs.load(tmp, "sessagent2").Agent


def test_v2_resume_replays_what_replay_from_asks(built_v2: Any) -> None:
    """v2 has no session/load: session/resume takes the session over, replaying nothing
    without `replayFrom`, everything from `{"type": "start"}`, and refusing a cursor it
    does not know (-32602, located); capabilities advertise `session` (and `delete`)."""

    async def go() -> None:
        sessions = hs.runtime_of("sessagent2", "sessions")
        store = hs.runtime_of("sessagent2", "store").MemorySessionStore()
        core = sessions.SessionCore(built_v2, store)
        a, b = Core(core), Core(core)
        init = {"protocolVersion": 2, "info": {"name": "t", "version": "0"}, "capabilities": {}}
        r = await a.call("initialize", init)
        caps = r["result"]["capabilities"]
        assert caps["session"]["delete"] == {} and "loadSession" not in caps
        await b.call("initialize", init)
        sid = (await a.call("session/new", {"cwd": "/w", "mcpServers": []}))["result"]["sessionId"]
        accepted = await a.call("session/prompt", hs.text_prompt(sid, "hello"))
        assert list(accepted["result"]) == ["messageId"]
        # v2: the turn runs on after the answer; its idle is sent once the turn is saved
        await a.until(lambda: _idle_sent(a), what="the turn's idle update")
        kinds = [
            orjson.loads(f)["params"]["update"]["sessionUpdate"] for f in await store.history(sid)
        ]
        assert kinds[0] == "user_message" and kinds[-1] == "state_update"
        assert (await store.load(sid))["turns"] == 1

        resume = {"sessionId": sid, "cwd": "/w", "mcpServers": []}
        r = await b.call("session/resume", resume)
        assert "result" in r, r
        assert not [m for m in b.msgs if m.get("method") == "session/update"]
        r = await a.call("session/prompt", hs.text_prompt(sid, "mine?"))
        assert r["error"]["code"] == -32001 and "session/resume" in r["error"]["message"]
        r = await b.call("session/resume", {**resume, "replayFrom": {"type": "_later"}})
        assert r["error"]["code"] == -32602
        assert r["error"]["data"]["errors"][0]["loc"] == ["params", "replayFrom", "type"]
        r = await b.call("session/resume", {**resume, "replayFrom": {"type": "start"}})
        assert "result" in r, r
        replayed = [
            m["params"]["update"]["sessionUpdate"]
            for m in b.msgs
            if m.get("method") == "session/update"
        ]
        # the history, each chunked message primed by its whole-message update first
        primed = []
        for kind in kinds:
            if kind.endswith("_chunk") and kind.removesuffix("_chunk") not in primed:
                primed.append(kind.removesuffix("_chunk"))
            primed.append(kind)
        assert replayed == primed
        await a.conn.close()
        await b.conn.close()

    asyncio.run(go())


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_a_long_session_keeps_one_state_on_disk(
    rev: str, built: dict[str, Any], built_v2: Any, tmp_path: Path
) -> None:
    """Issue 36 item 1, through the runtime on both revisions: 30 turns of a session on
    the default store (SQLite), a config option changed between them (``save``), leave
    one copy of the session's state in the file (before: one a turn), and a new store on
    the same file loads the latest state (its turn count) and replays every turn."""
    import sqlite3

    pkg, agent = (PKG, built["agent"]) if rev == "v1" else ("sessagent2", built_v2)
    path = tmp_path / "s.db"
    init: dict[str, Any] = (
        {"protocolVersion": 1}
        if rev == "v1"
        else {"protocolVersion": 2, "info": {"name": "t", "version": "0"}, "capabilities": {}}
    )

    async def go() -> str:
        store = hs.runtime_of(pkg, "store_sqlite").SqliteSessionStore(path)
        core = hs.runtime_of(pkg, "sessions").SessionCore(agent, store)
        a = Core(core)
        await a.call("initialize", init)
        sid = (await a.call("session/new", {"cwd": "/w", "mcpServers": []}))["result"]["sessionId"]
        for i in range(30):
            r = await a.call("session/prompt", hs.text_prompt(sid, f"turn {i}"))
            assert "result" in r, r
            if rev == "v2":
                await a.until(
                    lambda i=i: (
                        sum(
                            m.get("method") == "session/update"
                            and m["params"]["update"].get("state") == "idle"
                            for m in a.msgs
                        )
                        > i
                    ),
                    what="the turn's idle update",
                )
            if i == 10 and rev == "v1":
                change = {"sessionId": sid, "configId": "model", "value": "large"}
                assert "result" in await a.call("session/set_config_option", change)
        await a.conn.close()
        store.close()
        return str(sid)

    sid = asyncio.run(go())
    db = sqlite3.connect(path)
    in_rows = db.execute("SELECT count(*) FROM history WHERE state IS NOT NULL").fetchone()[0]
    in_session = db.execute("SELECT length(state) > 0 FROM sessions").fetchone()[0]
    db.close()
    assert in_rows + in_session == 1, (in_rows, in_session)

    async def reload() -> None:
        store = hs.runtime_of(pkg, "store_sqlite").SqliteSessionStore(path)
        assert (await store.load(sid))["turns"] == 30
        frames = await store.history(sid)
        store.close()
        for i in range(30):  # every prompt replayed, in order
            at = next(k for k, f in enumerate(frames) if f'"turn {i}"'.encode() in f)
            frames = frames[at + 1 :]

    asyncio.run(reload())
