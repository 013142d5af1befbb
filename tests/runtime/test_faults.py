"""Faults: the client vanishes mid-turn, a handler raises / hangs / prints, the session
store is locked or the disk is full, the agent is SIGKILLed mid-session.  Each test states
what must hold."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import socket
import sqlite3
import struct
import time
from pathlib import Path
from typing import Any

import hardening_support as hs
import httpx
import orjson
import pytest
from hardening_support import Core
from wait_support import Arrivals, Updates

pytestmark = pytest.mark.slow  # faults under load and timeouts: `make test`, not `make test-fast`

PKG = "faultagent"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("faults")
    env = hs.build(tmp, shared_acp, PKG)
    return {"env": env, "tmp": tmp}


# ---- stdio --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stdin_eof", "both_pipes_closed"])
def test_stdio_client_vanishes_mid_turn(built: dict[str, Any], how: str) -> None:
    """The client goes away while a turn streams (its stdin reaches EOF, or both pipes
    close so writes fail with EPIPE): the agent process exits by itself with code 0 within
    10 s, and nothing on stderr is a traceback."""

    async def main() -> None:
        peer = await hs.StdioPeer.start(built["env"], PKG)
        sid = await hs.open_session(peer)
        await peer.send(
            {
                "jsonrpc": "2.0",
                "id": 9,
                "method": "session/prompt",
                "params": hs.text_prompt(sid, "seq t 100000 0.001"),
            }
        )
        for _ in range(5):
            m = await peer.recv()
            assert m["method"] == "session/update"
        assert peer.proc.stdin and peer.proc.stderr
        if how == "both_pipes_closed":
            peer.task.cancel()
            transport: Any = peer.proc._transport  # type: ignore[attr-defined]
            transport.get_pipe_transport(1).close()  # our read end of its stdout
            await asyncio.sleep(0.2)  # the agent writes into a closed pipe meanwhile
        peer.proc.stdin.close()
        rc = await asyncio.wait_for(peer.proc.wait(), 10)
        err = await peer.proc.stderr.read()
        assert rc == 0, err.decode()[-2000:]
        assert b"Traceback" not in err, err.decode()[-2000:]

    asyncio.run(main())


@pytest.mark.slow
def test_handler_raises_prints_and_hangs(built: dict[str, Any]) -> None:
    """A handler that raises answers exactly {code -32603, "internal error"}: no stack
    trace, no exception text (which held a secret) on the wire.  A handler that prints
    (print() and a raw write to fd 1) does not corrupt stdout: every line stays JSON, the
    text lands on stderr.  A handler that hangs past ACP_TURN_TIMEOUT gets a clear
    transient -32603 "timed out" error in about that time, and the session takes the next
    prompt (it was freed).  The agent serves on after each."""
    secret = "sk-fault-SECRET-31337"
    env = {**built["env"], "FAKE_SECRET": secret, "ACP_TURN_TIMEOUT": "1.5"}

    async def main() -> None:
        peer = await hs.StdioPeer.start(env, PKG)
        sid = await hs.open_session(peer)
        wire: list[Any] = []

        r = await peer.call(10, "session/prompt", hs.text_prompt(sid, "boom"))
        wire.append(r)
        assert r["error"] == {"code": -32603, "message": "internal error"}

        r = await peer.call(11, "session/prompt", hs.text_prompt(sid, "print hello-on-stderr"))
        assert r["result"] == {"stopReason": "end_turn"}

        started = time.monotonic()
        await peer.send(
            {
                "jsonrpc": "2.0",
                "id": 12,
                "method": "session/prompt",
                "params": hs.text_prompt(sid, "hang"),
            }
        )
        r, seen = await peer.until_id(12, timeout=15)
        took = time.monotonic() - started
        wire += [r, *seen]
        assert 1.0 < took < 8, took
        err = r["error"]
        assert err["code"] == -32603 and "timed out after 1.5 s" in err["message"]
        assert err["data"] == {
            "name": "TurnTimeout",
            "transient": True,
            "details": {"timeout": 1.5},
        }
        r = await peer.call(13, "session/prompt", hs.text_prompt(sid, "after"))
        assert r["result"] == {"stopReason": "end_turn"}

        assert peer.bad_lines == []
        assert secret not in json.dumps(wire) and "Traceback" not in json.dumps(wire)
        rc, stderr = await peer.close()
        assert rc == 0
        assert b"hello-on-stderr" in stderr and b"a raw write to fd 1" in stderr
        assert b"timed out" in stderr

    asyncio.run(main())


def test_turn_timeout_settings(built: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-turn limit: constructor argument over ACP_TURN_TIMEOUT over the class's
    TURN_TIMEOUT; a value that is not a number is ignored (no limit), 0 means none."""
    handlers = hs.load(built["tmp"], PKG)
    agent_cls = handlers.Agent
    monkeypatch.delenv("ACP_TURN_TIMEOUT", raising=False)
    assert agent_cls().turn_timeout is None
    monkeypatch.setenv("ACP_TURN_TIMEOUT", "2.5")
    assert agent_cls().turn_timeout == 2.5
    assert agent_cls(turn_timeout=7).turn_timeout == 7
    monkeypatch.setenv("ACP_TURN_TIMEOUT", "soon")
    assert agent_cls().turn_timeout is None
    monkeypatch.setenv("ACP_TURN_TIMEOUT", "0")
    assert agent_cls().turn_timeout is None
    monkeypatch.delenv("ACP_TURN_TIMEOUT")
    sub = type("Limited", (agent_cls,), {"TURN_TIMEOUT": 30.0})
    assert sub().turn_timeout == 30.0


# ---- the session store fails --------------------------------------------------------------


class FlakyStore:
    """A MemorySessionStore whose writes raise while `failing` > 0 (one per call)."""

    def __init__(self, inner: Any, exc: Exception) -> None:
        self.inner = inner
        self.exc = exc
        self.failing = 0
        self.calls = 0

    def _maybe_fail(self) -> None:
        self.calls += 1
        if self.failing > 0:
            self.failing -= 1
            raise self.exc

    async def save(self, sid: str, state: dict[str, Any]) -> None:
        self._maybe_fail()
        await self.inner.save(sid, state)

    async def save_turn(
        self, sid: str, state: dict[str, Any], messages: list[bytes], **kw: Any
    ) -> bool:
        self._maybe_fail()
        saved: bool = await self.inner.save_turn(sid, state, messages, **kw)
        return saved

    async def load(self, sid: str) -> Any:
        return await self.inner.load(sid)

    async def history(self, sid: str) -> list[bytes]:
        return list(await self.inner.history(sid))

    async def append_history(self, sid: str, messages: list[bytes]) -> None:
        self._maybe_fail()
        await self.inner.append_history(sid, messages)

    async def delete(self, sid: str) -> None:
        await self.inner.delete(sid)

    def __getattr__(self, name: str) -> Any:  # the lease and listing: never failing here
        return getattr(self.inner, name)


@pytest.mark.parametrize(
    "exc",
    [
        sqlite3.OperationalError("database is locked"),
        OSError(errno.ENOSPC, "No space left on device"),
    ],
    ids=["locked", "disk_full"],
)
def test_store_failures(
    built: dict[str, Any], exc: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Policy when the store cannot write (after 2 retries): nothing acknowledged is
    unsaved.  session/new answers a transient -32603 StoreUnavailable and creates nothing;
    a brief lock (one failure) is retried and succeeds; a finished turn whose save fails
    still streamed its updates and answers StoreUnavailable with its stopReason, its
    messages are kept and written ahead of the next saved turn (history in order, nothing
    lost); a config change that cannot be saved is refused and undone.  The agent serves
    on throughout, and a fresh connection loads the whole history."""
    agent_cls = hs.load(built["tmp"], PKG).Agent
    http = hs.runtime_of(PKG, "http_server")
    store_mod = hs.runtime_of(PKG, "store")
    monkeypatch.setattr(hs.runtime_of(PKG, "session_store"), "STORE_RETRY_DELAYS", (0.0, 0.0))
    store = FlakyStore(store_mod.MemorySessionStore(), exc)
    factory = http.agent_factory(agent_cls, store)

    def unavailable(answer: dict[str, Any]) -> dict[str, Any]:
        err = answer["error"]
        assert err["code"] == -32603 and err["message"].startswith("session store unavailable")
        assert err["data"]["name"] == "StoreUnavailable" and err["data"]["transient"] is True
        return err

    async def main() -> None:
        c = Core(factory)
        await c.call("initialize", {"protocolVersion": 1})
        store.failing = 3
        r = await c.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        unavailable(r)
        store.failing = 1  # a lock that clears: the retry succeeds
        r = await c.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        sid = r["result"]["sessionId"]
        assert await store.load(sid) is not None

        store.failing = 3  # the turn finishes; its save fails
        r = await c.call("session/prompt", hs.text_prompt(sid, "first"))
        err = unavailable(r)
        assert err["data"]["details"] == {"stopReason": "end_turn"}
        assert c.texts(sid) == ["first"]  # streamed all the same
        assert await store.history(sid) == []

        store.failing = 3  # the option cannot be saved: refused, unchanged
        r = await c.call(
            "session/set_config_option", {"sessionId": sid, "configId": "model", "value": "large"}
        )
        unavailable(r)

        r = await c.call("session/prompt", hs.text_prompt(sid, "second"))  # store healed
        assert r["result"] == {"stopReason": "end_turn"}
        saved = [orjson.loads(f)["params"]["update"] for f in await store.history(sid)]
        assert [(u["sessionUpdate"], u["content"]["text"]) for u in saved] == [
            ("user_message_chunk", "first"),
            ("agent_message_chunk", "first"),
            ("user_message_chunk", "second"),
            ("agent_message_chunk", "second"),
        ]
        assert (await store.load(sid))["config_raw"]["model"] == "small"
        await c.conn.close()

        other = Core(factory)  # a new connection: loads everything acknowledged and more
        await other.call("initialize", {"protocolVersion": 1})
        r = await other.call("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []})
        cur = {o["id"]: o["currentValue"] for o in r["result"]["configOptions"]}
        assert cur["model"] == "small"
        assert other.texts(sid) == ["first", "first", "second", "second"]
        await other.conn.close()

    asyncio.run(main())


# ---- HTTP ---------------------------------------------------------------------------------


def _post(c: httpx.Client, url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return c.post(url, json=body, headers=headers)


def _sse_socket(port: int, cid: str, sid: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(
        (
            f"GET /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
            f"Acp-Connection-Id: {cid}\r\nAcp-Session-Id: {sid}\r\n\r\n"
        ).encode()
    )
    return s


@pytest.mark.slow
def test_http_client_vanishes_mid_turn(built: dict[str, Any], tmp_path: Path) -> None:
    """Over HTTP the client's session stream is reset (RST) mid-turn, and a WebSocket
    client drops mid-turn: the server keeps serving (health, a new client's full prompt),
    the first connection's turn still finishes (its answer waits, bounded, on the stream),
    and after SIGTERM nothing on stderr is a traceback."""
    port = hs.free_port()
    proc = hs.start_http(built["env"], PKG, port, ACP_SESSION_DB=str(tmp_path / "s.db"))
    url = f"http://127.0.0.1:{port}/acp"
    try:
        with httpx.Client(timeout=10) as c:
            r = _post(
                c,
                url,
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {"protocolVersion": 1},
                },
            )
            cid = r.headers["Acp-Connection-Id"]
            h = {"Acp-Connection-Id": cid}
            r = _post(
                c,
                url,
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "session/new",
                    "params": {"cwd": "/tmp", "mcpServers": []},
                },
                **h,
            )
            assert r.status_code == 202
            sid = None
            with c.stream("GET", url, headers={**h, "Accept": "text/event-stream"}) as s:
                for line in s.iter_lines():
                    if line.startswith("data:") and '"sessionId"' in line:
                        sid = json.loads(line[5:])["result"]["sessionId"]
                        break
            assert sid
            raw = _sse_socket(port, cid, sid)
            r = _post(
                c,
                url,
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "session/prompt",
                    "params": hs.text_prompt(sid, "seq t 300 0.005"),
                },
                **h,
                **{"Acp-Session-Id": sid},
            )
            assert r.status_code == 202
            got = b""
            while got.count(b"data:") < 5:
                got += raw.recv(4096)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            raw.close()  # RST: the reader vanished mid-turn

            # the WebSocket client drops mid-turn as well
            async def ws_drop() -> None:
                import websockets

                async with websockets.connect(f"ws://127.0.0.1:{port}/acp") as ws:
                    await ws.send(hs.rpc(1, "initialize", {"protocolVersion": 1}))
                    await asyncio.wait_for(ws.recv(), 10)
                    await ws.send(hs.rpc(2, "session/new", {"cwd": "/tmp", "mcpServers": []}))
                    wsid = json.loads(await asyncio.wait_for(ws.recv(), 10))["result"]["sessionId"]
                    await ws.send(
                        hs.rpc(3, "session/prompt", hs.text_prompt(wsid, "seq w 500 0.005"))
                    )
                    for _ in range(3):
                        await asyncio.wait_for(ws.recv(), 10)
                    ws.transport.abort()  # type: ignore[attr-defined]

            asyncio.run(ws_drop())

            assert c.get(f"http://127.0.0.1:{port}/health").status_code == 200
            # a new client: the whole exchange works
            r = _post(
                c,
                url,
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {"protocolVersion": 1},
                },
            )
            h2 = {"Acp-Connection-Id": r.headers["Acp-Connection-Id"]}
            _post(
                c,
                url,
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "session/new",
                    "params": {"cwd": "/tmp", "mcpServers": []},
                },
                **h2,
            )
            with c.stream("GET", url, headers={**h2, "Accept": "text/event-stream"}) as s:
                for line in s.iter_lines():
                    if line.startswith("data:") and '"sessionId"' in line:
                        sid2 = json.loads(line[5:])["result"]["sessionId"]
                        break
            sh2 = {**h2, "Acp-Session-Id": sid2}
            _post(
                c,
                url,
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "session/prompt",
                    "params": hs.text_prompt(sid2, "still here"),
                },
                **sh2,
            )
            with c.stream("GET", url, headers={**sh2, "Accept": "text/event-stream"}) as s:
                seen = []
                for line in s.iter_lines():
                    if line.startswith("data:"):
                        seen.append(json.loads(line[5:]))
                        if seen[-1].get("id") == 2:
                            break
            assert seen[-1]["result"] == {"stopReason": "end_turn"}
            # the first connection's turn finished: its answer waits on its session stream
            with c.stream(
                "GET", url, headers={**h, "Acp-Session-Id": sid, "Accept": "text/event-stream"}
            ) as s:
                for line in s.iter_lines():
                    if line.startswith("data:") and '"id":2' in line:
                        assert json.loads(line[5:])["result"] == {"stopReason": "end_turn"}
                        break
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert b"Traceback" not in err, err.decode()[-3000:]


@pytest.mark.slow
def test_sigkill_mid_turn_and_restart(built: dict[str, Any], tmp_path: Path) -> None:
    """SIGKILL of an HTTP agent while a turn streams, restart on the same SQLite file:
    the SDK client's session/load replays exactly the turns acknowledged before the kill
    (the cut turn left nothing half-written), session/resume works on another connection,
    and the session continues with a new prompt."""
    import acp
    from acp import schema as S
    from acp.http.client import create_http_stream

    port = hs.free_port()
    db = tmp_path / "sessions.db"
    url = f"http://127.0.0.1:{port}/acp"

    def texts(updates: list[Any]) -> list[tuple[str, str]]:
        return [(u.session_update, u.content.text) for u in updates]

    def client(c: Updates) -> Any:
        return acp.connect_to_agent(
            c,  # type: ignore[arg-type]  # the SDK protocol: only session_update is used
            create_http_stream(url, client=httpx.AsyncClient(timeout=None)),
        )

    def block(text: str) -> list[Any]:
        return [S.TextContentBlock(type="text", text=text)]

    async def phase1() -> str:
        c = Updates()
        conn = client(c)
        await asyncio.wait_for(conn.initialize(protocol_version=1), 10)
        sess = await asyncio.wait_for(conn.new_session(cwd="/tmp", mcp_servers=[]), 10)
        for text in ("one", "two"):
            r = await asyncio.wait_for(
                conn.prompt(session_id=sess.session_id, prompt=block(text)), 10
            )
            assert r.stop_reason == "end_turn"
        cut = asyncio.ensure_future(
            conn.prompt(session_id=sess.session_id, prompt=block("seq cut 100000 0.002"))
        )
        await c.until("the cut turn streaming", lambda: len(c.updates) >= 10)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        cut.cancel()
        return sess.session_id

    proc = hs.start_http(built["env"], PKG, port, ACP_SESSION_DB=str(db))
    try:
        sid = asyncio.run(phase1())
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    proc = hs.start_http(built["env"], PKG, port, ACP_SESSION_DB=str(db))
    try:

        async def phase2() -> None:
            c = Updates()
            conn = client(c)
            await asyncio.wait_for(conn.initialize(protocol_version=1), 10)
            await asyncio.wait_for(
                conn.load_session(cwd="/tmp", mcp_servers=[], session_id=sid), 10
            )
            assert texts(c.updates) == [
                ("user_message_chunk", "one"),
                ("agent_message_chunk", "one"),
                ("user_message_chunk", "two"),
                ("agent_message_chunk", "two"),
            ]
            c.updates.clear()
            r = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=block("three")), 10)
            assert r.stop_reason == "end_turn" and texts(c.updates) == [
                ("agent_message_chunk", "three")
            ]

            c2 = Updates()
            other = client(c2)
            await asyncio.wait_for(other.initialize(protocol_version=1), 10)
            await asyncio.wait_for(other.resume_session(cwd="/tmp", session_id=sid), 10)
            assert c2.updates == []  # resume: no replay
            r = await asyncio.wait_for(other.prompt(session_id=sid, prompt=block("four")), 10)
            assert r.stop_reason == "end_turn" and texts(c2.updates) == [
                ("agent_message_chunk", "four")
            ]

        asyncio.run(phase2())
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert b"Traceback" not in err, err.decode()[-3000:]
    assert os.path.exists(db)


def test_unserializable_result_still_answered(built: dict[str, Any]) -> None:
    """A handler returning something JSON cannot carry still gets its request exactly one
    answer (-32603), the connection lives on; typed models nested in outgoing params are
    serialized by alias (a client passing a model's RootModel id in a dict)."""
    import pydantic

    hs.load(built["tmp"], PKG)
    jsonrpc = hs.runtime_of(PKG, "jsonrpc")
    out: list[dict[str, Any]] = []
    arrivals = Arrivals()

    class Sid(pydantic.RootModel[str]):
        pass

    async def sink(batch: list[tuple[bytes, Any]]) -> None:
        out.extend(orjson.loads(f) for f, _ in batch)
        arrivals.arrived()

    async def on_request(method: str, params: Any, ctx: Any) -> Any:
        return object() if method == "bad" else {"ok": True}

    async def on_note(method: str, params: Any) -> None:
        return None

    async def main() -> None:
        conn = jsonrpc.Connection(sink, on_request, on_note)
        conn.feed(b'{"jsonrpc":"2.0","id":1,"method":"bad"}')
        conn.feed(b'{"jsonrpc":"2.0","id":2,"method":"good"}')
        conn.notify("x", {"sessionId": Sid("s-1")})
        await arrivals.until("two answers and the notification", lambda: len(out) >= 3)
        await conn.close()
        by_id = {m.get("id"): m for m in out if "method" not in m}
        assert by_id[1]["error"] == {"code": -32603, "message": "internal error"}
        assert by_id[2]["result"] == {"ok": True}
        assert {"jsonrpc": "2.0", "method": "x", "params": {"sessionId": "s-1"}} in out

    asyncio.run(main())


def test_real_sqlite_lock(built: dict[str, Any], tmp_path: Path) -> None:
    """Another process holds the SQLite file's write lock: session/new waits the busy
    timeout (and two retries), then answers the transient StoreUnavailable error in
    bounded time and keeps nothing; once the lock is released it succeeds and the
    session is on disk."""
    agent_cls = hs.load(built["tmp"], PKG).Agent
    http = hs.runtime_of(PKG, "http_server")
    store_mod = hs.runtime_of(PKG, "store")
    db = tmp_path / "s.db"
    store = store_mod.SqliteSessionStore(db, busy_timeout=0.2)
    factory = http.agent_factory(agent_cls, store)
    holder = sqlite3.connect(db, isolation_level=None)

    async def main() -> None:
        c = Core(factory)
        await c.call("initialize", {"protocolVersion": 1})
        holder.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()
        r = await c.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        assert time.monotonic() - started < 5
        assert r["error"]["data"]["name"] == "StoreUnavailable", r
        holder.execute("ROLLBACK")
        r = await c.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        sid = r["result"]["sessionId"]
        await c.conn.close()
        rows = sqlite3.connect(db).execute("SELECT id FROM sessions").fetchall()
        assert rows == [(sid,)]

    try:
        asyncio.run(main())
    finally:
        holder.close()
        store.close()


def test_close_from_inside_a_handler(built: dict[str, Any]) -> None:
    """A handler (or a notification) that closes its own connection: close() finishes
    (the `closed` event is set) instead of waiting on itself, and nothing is left pending."""
    hs.load(built["tmp"], PKG)
    jsonrpc = hs.runtime_of(PKG, "jsonrpc")

    async def sink(batch: list[tuple[bytes, Any]]) -> None:
        return None

    async def main() -> None:
        conn: Any = None

        async def on_request(method: str, params: Any, ctx: Any) -> Any:
            await conn.close()
            return {}

        async def on_note(method: str, params: Any) -> None:
            await conn.close()

        for frame in (b'{"jsonrpc":"2.0","id":1,"method":"m"}', b'{"jsonrpc":"2.0","method":"n"}'):
            conn = jsonrpc.Connection(sink, on_request, on_note)
            conn.feed(frame)
            await asyncio.wait_for(conn.closed.wait(), 5)

    asyncio.run(main())


def test_late_cancel_does_not_mark_a_reused_id(built: dict[str, Any]) -> None:
    """A `$/cancel_request` for a request whose handler swallows the cancellation and
    answers: that answer stands, and a later request reusing the id is not reported as
    cancelled (-32800) when the connection closes under it."""
    hs.load(built["tmp"], PKG)
    jsonrpc = hs.runtime_of(PKG, "jsonrpc")
    out: list[dict[str, Any]] = []
    arrivals = Arrivals()
    started: dict[str, asyncio.Event] = {"stubborn": asyncio.Event(), "slow": asyncio.Event()}

    async def sink(batch: list[tuple[bytes, Any]]) -> None:
        out.extend(orjson.loads(f) for f, _ in batch)
        arrivals.arrived()

    async def on_request(method: str, params: Any, ctx: Any) -> Any:
        started[method].set()
        if method == "stubborn":
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                return {"finished": "anyway"}
        await asyncio.sleep(10)
        return {}

    async def on_note(method: str, params: Any) -> None:
        return None

    async def main() -> None:
        conn = jsonrpc.Connection(sink, on_request, on_note)
        conn.feed(b'{"jsonrpc":"2.0","id":1,"method":"stubborn"}')
        await asyncio.wait_for(started["stubborn"].wait(), 5)
        conn.feed(b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}}')
        await arrivals.until("the stubborn handler's answer", lambda: out)
        conn.feed(b'{"jsonrpc":"2.0","id":1,"method":"slow"}')
        await asyncio.wait_for(started["slow"].wait(), 5)
        await conn.close()
        assert out == [{"jsonrpc": "2.0", "id": 1, "result": {"finished": "anyway"}}]

    asyncio.run(main())


@pytest.mark.slow
def test_abandoned_http_connections_expire(built: dict[str, Any]) -> None:
    """A client that vanishes without DELETE leaves its connection behind: after
    `idle_timeout` with no SSE reader, no WebSocket and no request in flight the server
    ends it (memory stays bounded); a connection with an open stream or a turn still
    running is kept; the abandoned session remains loadable from the store."""
    from test_http_transport import running_server

    agent_cls = hs.load(built["tmp"], PKG).Agent
    http = hs.runtime_of(PKG, "http_server")
    store = hs.runtime_of(PKG, "store").MemorySessionStore()
    app = http.app_for(agent_cls, store=store, idle_timeout=0.6)
    server = app.state.acp
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    new = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "session/new",
        "params": {"cwd": "/tmp", "mcpServers": []},
    }
    with running_server(app) as addr, httpx.Client(timeout=10) as c:
        url = f"http://{addr}/acp"
        port = int(addr.rsplit(":", 1)[1])
        gone = c.post(url, json=init).headers["Acp-Connection-Id"]
        reading = c.post(url, json=init).headers["Acp-Connection-Id"]
        reader = socket.create_connection(("127.0.0.1", port), timeout=10)
        reader.sendall(
            f"GET /acp HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
            f"Acp-Connection-Id: {reading}\r\n\r\n".encode()
        )
        working = c.post(url, json=init).headers["Acp-Connection-Id"]
        h = {"Acp-Connection-Id": working}
        c.post(url, json=new, headers=h)
        with c.stream("GET", url, headers={**h, "Accept": "text/event-stream"}) as s:
            for line in s.iter_lines():
                if line.startswith("data:") and '"sessionId"' in line:
                    sid = json.loads(line[5:])["result"]["sessionId"]
                    break
        prompt = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "session/prompt",
            "params": hs.text_prompt(sid, "slow 2.5"),
        }
        assert c.post(url, json=prompt, headers={**h, "Acp-Session-Id": sid}).status_code == 202
        deadline = time.monotonic() + 10
        while gone in server.connections:
            assert time.monotonic() < deadline, "the abandoned connection was never ended"
            time.sleep(0.1)  # a poll: the server runs in another thread, no notice of an end
        assert reading in server.connections and working in server.connections
        while working in server.connections:  # its turn ends, then it idles out too
            assert time.monotonic() < deadline, "the finished connection was never ended"
            time.sleep(0.1)  # a poll: the server runs in another thread, no notice of an end
        assert reading in server.connections  # its reader is still there
        reader.close()
        while reading in server.connections:
            assert time.monotonic() < deadline + 5, "a closed reader's connection was kept"
            time.sleep(0.1)  # a poll: the server runs in another thread, no notice of an end
        # the session outlives its connection
        h2 = {"Acp-Connection-Id": c.post(url, json=init).headers["Acp-Connection-Id"]}
        load = {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "session/load",
            "params": {"sessionId": sid, "cwd": "/tmp", "mcpServers": []},
        }
        assert c.post(url, json=load, headers=h2).status_code == 202
        texts = []
        with c.stream("GET", url, headers={**h2, "Accept": "text/event-stream"}) as s:
            for line in s.iter_lines():
                if line.startswith("data:"):
                    m = json.loads(line[5:])
                    if m.get("method") == "session/update":
                        texts.append(m["params"]["update"]["content"]["text"])
                    elif m.get("id") == 5:
                        break
        assert texts == ["slow 2.5", "started", "slow 2.5"]  # the prompt, then the agent
