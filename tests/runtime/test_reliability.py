"""Reliability round 3 (issue 18) on a generated agent: a session stays busy until its turn
is saved (in process, over stdio and WebSocket with a locked SQLite file), every request's
params checked against the revision's models, session ids checked before any store, failed
loads that use up no session slot, idempotent delete, bounded echoes in errors."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import hardening_support as hs
import orjson
import pytest
from hardening_support import Core
from wait_support import Arrivals

PKG = "reliabagent"
PKG2 = "reliabagent2"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("reliab")
    env = hs.build(tmp, shared_acp, PKG, unstable=False)
    return {"env": env, "agent": hs.load(tmp, PKG).Agent}


@pytest.fixture(scope="module")
def built_v2(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    tmp = tmp_path_factory.mktemp("reliab2")
    hs.build(tmp, shared_acp, PKG2, rev="v2", unstable=False)
    return hs.load(tmp, PKG2).Agent


def _users(frames: list[bytes]) -> list[Any]:
    out = []
    for f in frames:
        u = orjson.loads(f)["params"]["update"]
        if u["sessionUpdate"] == "user_message_chunk":
            out.append(u["content"].get("text"))
        elif u["sessionUpdate"] == "user_message":
            out.append(u["content"][0].get("text"))
    return out


def _gated_store(package: str) -> Any:
    """A memory store whose turn saves wait for `gate` (a store that is slow or locked);
    `changed` wakes when a save starts (`saving`) and when it is stored (`saved`)."""
    base = hs.runtime_of(package, "store").MemorySessionStore

    class Gated(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.gate = asyncio.Event()
            self.gate.set()
            self.saving = 0
            self.saved = 0
            self.changed = Arrivals()

        async def save_turn(self, *args: Any, **kw: Any) -> bool:
            self.saving += 1
            self.changed.arrived()
            await self.gate.wait()
            ok = bool(await super().save_turn(*args, **kw))
            self.saved += 1
            self.changed.arrived()
            return ok

    return Gated()


def _core(package: str, agent: Any, store: Any, **kw: Any) -> Any:
    return hs.runtime_of(package, "sessions").SessionCore(agent, store, **kw)


# ---- 1. a session stays busy until its turn is saved --------------------------------------


def test_a_prompt_in_the_save_window_waits_for_the_save(built: dict[str, Any]) -> None:
    """p2's turn has ended but its save is held; p3 arrives: it must not run before p2 is
    saved (old code: p3 answered end_turn first and was never stored).  p2 is answered
    before p3 and the history holds p1, p2, p3 in order."""

    async def go() -> None:
        store = _gated_store(PKG)
        c = Core(_core(PKG, built["agent"], store))
        await c.call("initialize", {"protocolVersion": 1})
        sid = (await c.call("session/new", {"cwd": "/w", "mcpServers": []}))["result"]["sessionId"]
        assert "result" in await c.call("session/prompt", hs.text_prompt(sid, "p1"))
        store.gate.clear()
        saves = store.saving
        p2 = c.send("session/prompt", hs.text_prompt(sid, "p2"))
        await store.changed.until("p2 ran and waits on its save", lambda: store.saving > saves)
        p3 = c.send("session/prompt", hs.text_prompt(sid, "p3"))
        await asyncio.sleep(0.2)  # a window for a wrong answer: nothing may come
        assert c.answered(p3) is None and c.answered(p2) is None
        assert [m for m in c.msgs if "p3" in json.dumps(m)] == []  # p3 has not run
        store.gate.set()
        r2, r3 = await c.answer(p2), await c.answer(p3)
        assert r2["result"] == {"stopReason": "end_turn"}
        assert r3["result"] == {"stopReason": "end_turn"}
        assert c.position(p2) < c.position(p3)
        assert _users(await store.history(sid)) == ["p1", "p2", "p3"]
        assert (await store.load(sid))["turns"] == 3
        await c.conn.close()

    asyncio.run(go())


def test_v2_a_prompt_after_idle_waits_for_the_save(built_v2: Any) -> None:
    """v2 reports `idle` before the turn is saved: a client that prompts on idle must find
    its prompt run after the save, both turns stored, in order."""

    async def go() -> None:
        store = _gated_store(PKG2)
        c = Core(_core(PKG2, built_v2, store))
        init = {"protocolVersion": 2, "info": {"name": "t", "version": "0"}, "capabilities": {}}
        await c.call("initialize", init)
        sid = (await c.call("session/new", {"cwd": "/w", "mcpServers": []}))["result"]["sessionId"]
        store.gate.clear()
        assert "result" in await c.call("session/prompt", hs.text_prompt(sid, "p1"))
        await store.changed.until("idle sent, p1's save held", lambda: store.saving >= 1)
        p2 = c.send("session/prompt", hs.text_prompt(sid, "p2"))
        await asyncio.sleep(0.2)  # a window for a wrong answer: nothing may come
        assert c.answered(p2) is None  # waits for p1's save
        store.gate.set()
        assert "result" in await c.answer(p2)
        await store.changed.until("both turns stored", lambda: store.saved >= 2)
        assert _users(await store.history(sid)) == ["p1", "p2"]
        await c.conn.close()

    asyncio.run(go())


def _lock(db: Path) -> sqlite3.Connection:
    """Another process's write lock on the store (what a backup or a second writer holds)."""
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN EXCLUSIVE")
    return other


@pytest.mark.slow
def test_stdio_prompt_while_the_store_is_locked(built: dict[str, Any], tmp_path: Path) -> None:
    """Over stdio with the SQLite file locked by another process: p2 ends while locked, p3
    comes once p2's chunk is seen; the lock goes 0.9 s later.  Answers in turn order, and a restarted
    agent replays p1, p2, p3."""
    db = tmp_path / "stdio.db"
    env = {**built["env"], "ACP_SESSION_DB": str(db)}

    async def go() -> None:
        peer = await hs.StdioPeer.start(env, PKG)
        sid = await hs.open_session(peer)
        assert "result" in await peer.call(3, "session/prompt", hs.text_prompt(sid, "p1"))
        other = _lock(db)
        try:
            await peer.send(
                {
                    "jsonrpc": "2.0",
                    "id": 4,
                    "method": "session/prompt",
                    "params": hs.text_prompt(sid, "p2"),
                }
            )
            chunk = await peer.recv()  # p2 ran (its save now waits on the lock)
            assert chunk["params"]["update"]["content"]["text"] == "p2", chunk
            await peer.send(
                {
                    "jsonrpc": "2.0",
                    "id": 5,
                    "method": "session/prompt",
                    "params": hs.text_prompt(sid, "p3"),
                }
            )
            await asyncio.sleep(0.9)
        finally:
            other.execute("COMMIT")
            other.close()
        order = []
        while len(order) < 2:
            m = await peer.recv()
            if "method" not in m:
                order.append((m["id"], m.get("result")))
        assert order == [(4, {"stopReason": "end_turn"}), (5, {"stopReason": "end_turn"})]
        await peer.close()
        peer = await hs.StdioPeer.start(env, PKG)
        await peer.call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        await peer.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "session/load",
                "params": {"sessionId": sid, "cwd": "/tmp", "mcpServers": []},
            }
        )
        r, seen = await peer.until_id(2)
        assert "result" in r, r
        users = [
            u["params"]["update"]["content"]["text"]
            for u in seen
            if u["params"]["update"]["sessionUpdate"] == "user_message_chunk"
        ]
        assert users == ["p1", "p2", "p3"]
        await peer.close()

    asyncio.run(go())


@pytest.mark.slow
def test_websocket_prompt_while_the_store_is_locked(built: dict[str, Any], tmp_path: Path) -> None:
    """The same over WebSocket (the issue's report): p3 is answered after p2, and a new
    connection's session/load replays all three turns."""
    import websockets
    from test_http_transport import running_server

    http = hs.runtime_of(PKG, "http_server")
    db = tmp_path / "ws.db"
    store = hs.runtime_of(PKG, "store_sqlite").SqliteSessionStore(db)
    app = http.app_for(built["agent"], store=store)
    with running_server(app) as addr:

        async def go() -> None:
            async with websockets.connect(f"ws://{addr}/acp") as ws:

                async def send(rid: int, method: str, params: Any) -> None:
                    msg = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
                    await ws.send(json.dumps(msg))

                async def until(rid: int) -> tuple[dict[str, Any], list[Any]]:
                    seen = []
                    while True:
                        m = json.loads(await asyncio.wait_for(ws.recv(), 15))
                        if m.get("id") == rid and "method" not in m:
                            return m, seen
                        seen.append(m)

                await send(1, "initialize", {"protocolVersion": 1})
                await until(1)
                await send(2, "session/new", {"cwd": "/w", "mcpServers": []})
                sid = (await until(2))[0]["result"]["sessionId"]
                await send(3, "session/prompt", hs.text_prompt(sid, "p1"))
                await until(3)
                other = _lock(db)
                try:
                    await send(4, "session/prompt", hs.text_prompt(sid, "p2"))
                    chunk = json.loads(await asyncio.wait_for(ws.recv(), 15))
                    assert chunk["params"]["update"]["content"]["text"] == "p2", chunk
                    await send(5, "session/prompt", hs.text_prompt(sid, "p3"))
                    await asyncio.sleep(0.9)
                finally:
                    other.execute("COMMIT")
                    other.close()
                ids = []
                while len(ids) < 2:
                    m = json.loads(await asyncio.wait_for(ws.recv(), 15))
                    if "method" not in m:
                        assert m["result"] == {"stopReason": "end_turn"}, m
                        ids.append(m["id"])
                assert ids == [4, 5]
            async with websockets.connect(f"ws://{addr}/acp") as ws:
                await ws.send(hs.rpc(1, "initialize", {"protocolVersion": 1}))
                await asyncio.wait_for(ws.recv(), 10)
                await ws.send(
                    hs.rpc(2, "session/load", {"sessionId": sid, "cwd": "/w", "mcpServers": []})
                )
                users = []
                while True:
                    m = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    if m.get("id") == 2:
                        assert "result" in m, m
                        break
                    u = m["params"]["update"]
                    if u["sessionUpdate"] == "user_message_chunk":
                        users.append(u["content"]["text"])
                assert users == ["p1", "p2", "p3"]

        asyncio.run(go())
    store.close()


# ---- 2. every request's params checked against the revision's models ----------------------


@pytest.mark.wire_check_send_only  # invalid content on purpose
def test_schema_invalid_prompts_are_refused_with_a_pointer(built: dict[str, Any]) -> None:
    """The issue's three prompts: each answers -32602 naming the JSON pointer of the
    problem; none reaches the handler (no update), none is stored or replayed."""
    bad = [
        ({"type": "text", "text": 5}, "/prompt/1/text"),
        ({"type": "text"}, "/prompt/1/text"),
        ({"type": "resource_link", "name": "x", "uri": 7}, "/prompt/1/uri"),
    ]

    async def go() -> None:
        store = hs.runtime_of(PKG, "store").MemorySessionStore()
        c = Core(_core(PKG, built["agent"], store))
        await c.call("initialize", {"protocolVersion": 1})
        sid = (await c.call("session/new", {"cwd": "/w", "mcpServers": []}))["result"]["sessionId"]
        for block, pointer in bad:
            prompt = [{"type": "text", "text": "ok"}, block]
            r = await c.call("session/prompt", {"sessionId": sid, "prompt": prompt})
            assert r["error"]["code"] == -32602, r
            assert r["error"]["data"]["pointer"] == pointer, r
            assert pointer in r["error"]["message"]
        assert [m for m in c.msgs if m.get("method") == "session/update"] == []
        assert await store.history(sid) == []
        assert (await store.load(sid))["turns"] == 0
        r = await c.call("session/new", {"cwd": 7, "mcpServers": []})
        assert r["error"]["data"]["pointer"] == "/cwd", r
        r = await c.call(
            "session/set_config_option", {"sessionId": sid, "configId": ["model"], "value": "large"}
        )
        assert r["error"]["code"] == -32602 and r["error"]["data"]["pointer"] == "/configId", r
        await c.conn.close()

    asyncio.run(go())


# ---- 3. failed loads over WebSocket use up no session slot ---------------------------------


@pytest.mark.slow
def test_failed_websocket_loads_do_not_use_the_session_cap(built: dict[str, Any]) -> None:
    """max_sessions=3: five loads of unknown ids all answer -32602 (not "too many
    sessions"), and session/new still works; three real sessions then fill the cap."""
    import websockets
    from test_http_transport import running_server

    http = hs.runtime_of(PKG, "http_server")
    store = hs.runtime_of(PKG, "store").MemorySessionStore()
    app = http.app_for(built["agent"], store=store, max_sessions=3)
    with running_server(app) as addr:

        async def go() -> None:
            async with websockets.connect(f"ws://{addr}/acp") as ws:
                n = 0

                async def call(method: str, params: Any) -> dict[str, Any]:
                    nonlocal n
                    n += 1
                    msg = {"jsonrpc": "2.0", "id": n, "method": method, "params": params}
                    await ws.send(json.dumps(msg))
                    while True:
                        m = json.loads(await asyncio.wait_for(ws.recv(), 10))
                        if m.get("id") == n and "method" not in m:
                            return m

                await call("initialize", {"protocolVersion": 1})
                for i in range(5):
                    load = {"sessionId": f"sess_nope{i}", "cwd": "/w", "mcpServers": []}
                    r = await call("session/load", load)
                    assert r["error"]["code"] == -32602, r
                for _ in range(3):
                    r = await call("session/new", {"cwd": "/w", "mcpServers": []})
                    assert "result" in r, r
                r = await call("session/new", {"cwd": "/w", "mcpServers": []})
                assert r["error"]["code"] == -32600, r

        asyncio.run(go())


# ---- 4-6. delete is idempotent; ids checked before any store; echoes bounded ---------------


class _Spy:
    """Wraps a store: records every call it gets."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)

        async def call(*args: Any, **kw: Any) -> Any:
            self.calls.append((name, args[0] if args else None))
            return await fn(*args, **kw)

        return call


@pytest.mark.wire_check_send_only  # hostile ids on purpose
def test_session_ids_are_checked_before_the_store_and_echoes_are_bounded(
    built: dict[str, Any],
) -> None:
    """A NUL byte, a control character, a 1 MiB id: every session method answers the same
    -32602 (pointer /sessionId) and the store never sees the id; an answer never echoes
    more than a few hundred characters of what was sent; delete of an unknown (valid) id
    succeeds."""

    async def go() -> None:
        store = _Spy(hs.runtime_of(PKG, "store").MemorySessionStore())
        c = Core(_core(PKG, built["agent"], store))
        await c.call("initialize", {"protocolVersion": 1})
        big = "s" * (1 << 20)
        for sid in ("sess_\x00x", "a\nb", big, ""):
            for method, extra in (
                ("session/load", {"cwd": "/w", "mcpServers": []}),
                ("session/resume", {"cwd": "/w"}),
                ("session/prompt", {"prompt": [{"type": "text", "text": "x"}]}),
                ("session/delete", {}),
                ("session/close", {}),
                ("session/set_config_option", {"configId": "model", "value": "large"}),
            ):
                n = len(c.msgs)
                r = await c.call(method, {"sessionId": sid, **extra})
                assert r["error"]["code"] == -32602, (method, r)
                assert r["error"]["data"]["pointer"] == "/sessionId", (method, r)
                assert sum(len(json.dumps(m)) for m in c.msgs[n:]) < 2000, method
        assert store.calls == []  # no hostile id reached the store
        # unknown (well-formed) ids: echoed at most MAX_ECHO characters, marked as cut
        long_id = "x" * 250
        r = await c.call("session/load", {"sessionId": long_id, "cwd": "/w", "mcpServers": []})
        assert r["error"]["code"] == -32602 and len(json.dumps(r)) < 1200
        r = await c.call("no/such_method_" + "m" * 100_000, {})
        assert r["error"]["code"] == -32601
        assert len(json.dumps(r)) < 1500 and "[cut: " in r["error"]["message"]
        r = await c.call("session/delete", {"sessionId": "sess_never_was"})
        assert r["result"] == {}
        many = [{"type": "text", "text": i} for i in range(500)]
        r = await c.call("session/prompt", {"sessionId": "sess_never_was", "prompt": many})
        assert r["error"]["code"] == -32602 and len(r["error"]["data"]["errors"]) <= 20
        assert "more errors not listed" in r["error"]["data"]["cut"]
        await c.conn.close()

    asyncio.run(go())


# ---- 12. a client that drops mid-body: one short line, rate-limited -------------------------


@pytest.mark.slow
def test_a_client_dropping_mid_body_logs_one_short_line(
    built: dict[str, Any], tmp_path: Path
) -> None:
    """The HTTP agent (Hypercorn): ten POSTs that announce 1000 bytes, send 10 and hang
    up.  No traceback on stderr, one short warning for all of them (rate-limited like the
    other peer-triggered ones)."""
    import signal
    import socket

    port = hs.free_port()
    proc = hs.start_http(built["env"], PKG, port, ACP_SESSION_DB=str(tmp_path / "s.db"))
    try:
        for _ in range(10):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(
                    b"POST /acp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Accept: application/json, text/event-stream\r\n"
                    b"Content-Length: 1000\r\n\r\n" + b'{"jsonrpc"'
                )
            time.sleep(0.05)  # ten separate slow writers, one after another
        time.sleep(0.5)  # a window for the other nine drops: they must not log
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    text = err.decode()
    assert "Traceback" not in text, text[-3000:]
    dropped = [line for line in text.splitlines() if "disconnected before" in line]
    assert len(dropped) == 1, text[-3000:]


# ---- 10. connection flood: unused connections expire soon; a per-address cap ---------------


@pytest.mark.slow
def test_unused_connections_expire_soon_and_one_address_cannot_take_every_slot(
    built: dict[str, Any],
) -> None:
    """max_per_address=2, unused_timeout=0.5 s: a third initialize from the same address
    gets 503 (Retry-After) while the process has room; the two connections that never
    opened a session expire within a second, one that opened a session stays."""
    import httpx
    from test_http_transport import running_server

    http = hs.runtime_of(PKG, "http_server")
    store = hs.runtime_of(PKG, "store").MemorySessionStore()
    app = http.app_for(built["agent"], store=store, max_per_address=2, unused_timeout=0.5)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
    hdr = {"Accept": "application/json, text/event-stream"}
    with running_server(app) as addr, httpx.Client(timeout=10, headers=hdr) as c:
        url = f"http://{addr}/acp"
        ids = [c.post(url, json=init).headers["Acp-Connection-Id"] for _ in range(2)]
        r = c.post(url, json=init)
        assert r.status_code == 503 and r.headers["Retry-After"] == "1", r.text
        assert "this address" in r.json()["error"]["message"]
        new = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "session/new",
            "params": {"cwd": "/w", "mcpServers": []},
        }
        r = c.post(url, json=new, headers={"Acp-Connection-Id": ids[0]})
        assert r.status_code == 202, r.text
        time.sleep(1.5)  # idle past unused_timeout=0.5: the timeout under test
        live = [c.delete(url, headers={"Acp-Connection-Id": i}).status_code for i in ids]
        assert live[1] == 404  # never opened a session: expired
        assert live[0] != 404  # has a session: kept (the 600 s idle timeout applies)
        assert c.post(url, json=init).status_code == 200


# ---- 11. the generated HTTP client checks a message's size before sending it ---------------


def test_http_client_refuses_a_message_over_the_limit_before_sending() -> None:
    """A request over max_message_size answers -32600 "message too large" at once, with
    no HTTP request (the URL's port is closed: a POST would fail with ConnectError)."""
    from runtime.client import http_client
    from runtime.wire import jsonrpc
    from runtime.wire.errors import RpcError

    async def go() -> None:
        t = http_client.HttpTransport(f"http://127.0.0.1:{hs.free_port()}/acp", http2=False)

        async def on_request(method: str, params: Any, ctx: Any) -> Any:
            return None

        async def on_note(method: str, params: Any) -> None:
            return None

        conn = jsonrpc.Connection(t.sink, on_request, on_note, max_message_size=1000)
        t.conn = conn
        with pytest.raises(RpcError) as refused:
            await asyncio.wait_for(
                conn.request("initialize", {"protocolVersion": 1, "_meta": {"x": "x" * 2000}}), 10
            )
        assert refused.value.code == -32600 and "too large" in refused.value.message
        await conn.close()
        await t.http.aclose()

    asyncio.run(go())
