"""The PostgreSQL session store (templates/runtime/sessions/store_postgres.py) on a private server,
and ``open_store``'s URL selection.  The lease/listing contract shared with the SQLite and
memory stores is in test_session_store.py (parametrized over all three)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import cluster_support as cs
import pytest
from runtime.sessions.store import MemorySessionStore, open_store
from runtime.sessions.store_sqlite import SqliteSessionStore


def test_open_store_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(open_store("memory:"), MemorySessionStore)
    st = open_store(f"sqlite:///{tmp_path}/a.db")  # four slashes: an absolute path
    assert isinstance(st, SqliteSessionStore) and st.path == f"{tmp_path}/a.db"
    assert open_store("sqlite:///:memory:").path == ":memory:"  # type: ignore[attr-defined]
    monkeypatch.setenv("ACP_SESSION_STORE", "")
    monkeypatch.setenv("ACP_SESSION_DB", str(tmp_path / "b.db"))
    assert open_store().path == str(tmp_path / "b.db")  # type: ignore[attr-defined]
    monkeypatch.setenv("ACP_SESSION_STORE", "memory:")
    assert isinstance(open_store(), MemorySessionStore)
    from runtime.sessions.store_postgres import PostgresSessionStore

    assert isinstance(open_store("postgresql://u@127.0.0.1:1/db"), PostgresSessionStore)
    with pytest.raises(ValueError, match="unknown store 'mysql'") as err:
        open_store("mysql://root:hunter2@127.0.0.1/db")
    assert "hunter2" not in str(err.value)
    for bad in ("sqlite://", "sqlite:///", "sqlite:relative.db"):
        with pytest.raises(ValueError, match="give a file"):
            open_store(bad)


@pytest.mark.slow
def test_roundtrip_history_order_and_delete(postgres: cs.Server) -> None:
    async def go() -> None:
        st: Any = open_store(cs.fresh_database(postgres))
        await st.save("s", {"turns": 0, "config_raw": {"model": "x"}})
        assert await st.load("s") == {"turns": 0, "config_raw": {"model": "x"}}
        assert await st.load("nope") is None

        # two sessions' turns written concurrently: each history stays in its own order
        async def turns(sid: str) -> None:
            for t in range(20):
                await st.save_turn(
                    sid, {"turns": t + 1}, [f"{sid}:{t}:{i}".encode() for i in range(3)]
                )

        await asyncio.gather(turns("s"), turns("u"))
        for sid in ("s", "u"):
            assert await st.history(sid) == [
                f"{sid}:{t}:{i}".encode() for t in range(20) for i in range(3)
            ]
            assert await st.load(sid) == {"turns": 20}
        await st.append_history("s", [b'{"a":1}'])
        assert (await st.history("s"))[-1] == b'{"a":1}'
        await st.delete("s")
        assert await st.load("s") is None and await st.history("s") == []
        await st.aclose()

    asyncio.run(go())


@pytest.mark.slow
def test_small_turn_is_one_row_and_replays_message_by_message(postgres: cs.Server) -> None:
    """Schema 3: a small turn of several messages is one row (``parts``), replayed message
    by message; a message holding a newline, and a turn past ``JOIN_BELOW``, stay a row
    a message; the bytes counted for retention are the messages' own."""
    from runtime.sessions.store_common import JOIN_BELOW

    url = cs.fresh_database(postgres)
    many = [f'{{"n":{i}}}'.encode() for i in range(50)]
    odd = [b'{"a":1}', b'{"b":\n2}']
    big = [b"x" * (JOIN_BELOW // 2), b"y" * (JOIN_BELOW // 2)]

    async def go() -> None:
        st: Any = open_store(url)
        await st.save("s", {"turns": 0})
        for t, msgs in enumerate((many, odd, big)):
            assert await st.save_turn("s", {"turns": t + 1}, msgs) is True
        assert await st.history("s") == [*many, *odd, *big]
        await st.aclose()

    asyncio.run(go())
    import psycopg

    with psycopg.connect(url) as c:
        rows = c.execute("SELECT turn, parts, size FROM acp_history ORDER BY seq").fetchall()
        hbytes = c.execute("SELECT hbytes FROM acp_sessions").fetchall()
    assert rows == [
        (1, 50, sum(map(len, many))),
        (2, 1, len(odd[0])),
        (2, 1, len(odd[1])),
        (3, 1, len(big[0])),
        (3, 1, len(big[1])),
    ]
    assert hbytes == [(sum(map(len, [*many, *odd, *big])),)]


@pytest.mark.slow
def test_schema_created_once_by_replicas_starting_together(postgres: cs.Server) -> None:
    """Five stores (five replicas) open one fresh database at once: the tables are created
    exactly once (advisory lock), every store works, and the version is recorded."""
    url = cs.fresh_database(postgres)

    async def go() -> None:
        stores: list[Any] = [open_store(url) for _ in range(5)]
        await asyncio.gather(*(s.save(f"s{i}", {"i": i}) for i, s in enumerate(stores)))
        page, _ = await stores[0].list_sessions(None, 10)
        assert sorted(sid for sid, _ in page) == [f"s{i}" for i in range(5)]
        for s in stores:
            await s.aclose()

    asyncio.run(go())
    import psycopg

    with psycopg.connect(url) as c:
        assert c.execute("SELECT version FROM acp_schema").fetchall() == [(4,)]


@pytest.mark.slow
def test_schema_4_moves_a_schema_3_databases_model_histories_to_rows(postgres: cs.Server) -> None:
    """A database as schema 3 left it (a model's history inside each session's state)
    opens with every state as it was; each model history is now ``acp_model_messages``
    rows, the state holding their count; the next turn inserts only the message it
    added."""
    import orjson
    import psycopg
    from runtime.sessions.store_postgres_schema import _MIGRATIONS

    url = cs.fresh_database(postgres)
    model = [{"kind": "request", "text": "r" * 100_000}, {"kind": "response", "text": "ok"}]
    states = {
        "a": {"turns": 1, "model_history": model},
        "b": {"turns": 1, "mode": "plan", "model_history": []},
        "c": {"turns": 2},
    }
    with psycopg.connect(url, autocommit=True) as c:
        for step in _MIGRATIONS[:3]:
            for stmt in step.split(";"):
                if stmt.strip():
                    c.execute(stmt)  # type: ignore[arg-type]
        c.execute("CREATE TABLE acp_schema (version integer NOT NULL)")
        c.execute("INSERT INTO acp_schema (version) VALUES (3)")
        for sid, state in states.items():
            c.execute(
                "INSERT INTO acp_sessions (id, state) VALUES (%s, %s)", (sid, orjson.dumps(state))
            )

    async def go() -> None:
        st = open_store(url)
        for sid, state in states.items():
            assert await st.load(sid) == state
        page, _ = await st.list_sessions(None, 10)
        assert page == list(states.items())
        grown = {"turns": 2, "model_history": [*model, {"kind": "request", "text": "next"}]}
        assert await st.save_turn("a", grown, [b"p2"]) is True
        assert await st.load("a") == grown
        await st.aclose()  # type: ignore[attr-defined]

    asyncio.run(go())
    with psycopg.connect(url) as c:
        assert c.execute("SELECT version FROM acp_schema").fetchall() == [(4,)]
        rows = c.execute(
            "SELECT session_id, length(message) > 100000 FROM acp_model_messages ORDER BY seq"
        ).fetchall()
        assert rows == [("a", True), ("a", False), ("a", False)]
        sizes = c.execute("SELECT max(length(state)) FROM acp_sessions").fetchone()
        assert sizes is not None and sizes[0] < 100, sizes


@pytest.mark.slow
def test_unreachable_server_is_an_error_not_a_hang() -> None:
    """No server there: the first call raises StoreUnavailableError within the store's
    bound (the session core turns it into the transient StoreUnavailable error); the store
    is then marked down with the reason, and the next calls raise at once."""
    from runtime.sessions.store_postgres import PostgresSessionStore, StoreUnavailableError

    async def go() -> None:
        st = PostgresSessionStore(
            f"postgresql://postgres:pw-SECRET-1@127.0.0.1:{cs.free_port()}/postgres",
            timeout=1.0,
        )
        for _ in range(3):  # a hang would end in wait_for's TimeoutError instead
            with pytest.raises(StoreUnavailableError, match="PostgreSQL unreachable"):
                await asyncio.wait_for(st.load("x"), 10)
        reason = await st.status()
        assert reason is not None and "PostgreSQL unreachable" in reason
        assert "pw-SECRET-1" not in reason
        await asyncio.wait_for(st.aclose(), 10)

    asyncio.run(go())


@pytest.mark.slow
def test_outage_fails_fast_then_recovers_within_seconds() -> None:
    """PostgreSQL stopped under an open store (``pg_ctl stop -m immediate``): calls raise
    StoreUnavailableError within the bound instead of waiting on the pool (30 s, three
    times, before); started again, the store works again within seconds (a probe puts a
    fresh pool in place) instead of after the pool's reconnect backoff."""
    cs.need("postgresql")
    from runtime.sessions.store_postgres import PostgresSessionStore, StoreUnavailableError

    server = cs.start_postgres()
    try:

        async def go() -> None:
            st = PostgresSessionStore(server.url, timeout=1.0)
            await st.save("s", {"n": 1})
            assert await st.status() is None
            await asyncio.to_thread(server.outage)
            for op in (lambda: st.load("s"), lambda: st.save("s", {"n": 2}), st.status):
                with contextlib.suppress(StoreUnavailableError):
                    await asyncio.wait_for(op(), 8)
            assert st.down is not None and "PostgreSQL unreachable" in st.down
            with pytest.raises(StoreUnavailableError):
                await asyncio.wait_for(st.load("s"), 8)
            await asyncio.to_thread(server.restart)
            deadline = asyncio.get_running_loop().time() + 15
            while True:
                try:
                    assert await asyncio.wait_for(st.load("s"), 8) == {"n": 1}
                    break
                except StoreUnavailableError:
                    assert asyncio.get_running_loop().time() < deadline, "not back in 15 s"
                    await asyncio.sleep(0.1)  # a poll: PostgreSQL is another process
            assert await st.status() is None
            await st.aclose()

        asyncio.run(go())
    finally:
        server.stop()


def test_the_store_url_password_is_redacted_from_logs() -> None:
    """A PostgreSQL or Redis URL's password is registered as a secret when the store or
    router is created: a log line that quotes the URL (a driver's error, a user's
    message) shows it redacted.  Nothing is connected: opening the store is lazy."""
    import logging

    from runtime.sessions.store import open_store
    from runtime.wire import logsafe

    open_store("postgresql://acp:pg-SECRET-9911@127.0.0.1:1/db")
    record = logging.LogRecord(
        "acp.runtime", logging.ERROR, __file__, 1, "cannot reach %s", ("pg-SECRET-9911",), None
    )
    assert logsafe.RedactingFilter().filter(record)
    assert "pg-SECRET-9911" not in record.getMessage()


@pytest.mark.slow
def test_agent_with_postgres_down(tmp_path: Path, shared_acp: Path) -> None:
    """An HTTP agent on PostgreSQL: started while the database is down it starts and
    answers at once; ``/health`` (liveness) stays 200 while ``/ready`` (readiness) answers
    503 with the reason; ``session/new`` answers the transient StoreUnavailable error within
    the bound; when the database is back ``/ready`` is 200 within seconds and sessions work;
    after a second outage, SIGTERM ends the agent within its shutdown grace although it
    holds a session whose lease it cannot release."""
    cs.need("postgresql")
    import re
    import signal
    import subprocess

    import hardening_support as hs
    import httpx
    from test_redis_router import Reader, rpc

    server = cs.start_postgres()
    env = hs.build(tmp_path, shared_acp, "pgdownagent")
    proc = None
    try:
        server.outage()
        proc = subprocess.Popen(
            [hs.PY, "-m", "pgdownagent", "--port", "0", "--shutdown-grace", "6"],
            env={
                **env,
                "ACP_TEST_TRANSPORT": "http",
                "ACP_SESSION_STORE": server.url,
                "ACP_STORE_TIMEOUT": "1",
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        m = re.match(r"listening on (\S+) ", proc.stderr.readline())
        assert m
        url = m.group(1)
        base = url.rsplit("/", 1)[0]

        async def new_session(http: httpx.AsyncClient) -> dict[str, Any]:
            json_ = {"Content-Type": "application/json"}
            r = await http.post(
                url, content=rpc(0, "initialize", {"protocolVersion": 1}), headers=json_
            )
            assert r.status_code == 200
            h = {"Acp-Connection-Id": r.headers["Acp-Connection-Id"]}
            main = Reader(http, url, h)
            r = await http.post(
                url,
                content=rpc("n", "session/new", {"cwd": "/tmp", "mcpServers": []}),
                headers={**h, **json_},
            )
            assert r.status_code == 202
            answer = await main.wait_for(lambda msg: msg.get("id") == "n", 10)
            await main.stop()
            return answer

        async def ready(http: httpx.AsyncClient) -> httpx.Response:
            return await http.get(f"{base}/ready")

        async def go() -> None:
            async with httpx.AsyncClient(timeout=20) as http:
                assert (await http.get(f"{base}/health")).status_code == 200
                r = await ready(http)
                assert r.status_code == 503
                assert "PostgreSQL unreachable" in r.json()["reason"]
                answer = await new_session(http)  # within 10 s, not after the pool's 30
                assert answer["error"]["code"] == -32603
                assert answer["error"]["data"]["name"] == "StoreUnavailable"
                assert answer["error"]["data"]["transient"] is True

                await asyncio.to_thread(server.restart)
                deadline = asyncio.get_running_loop().time() + 15
                while (await ready(http)).status_code != 200:
                    assert asyncio.get_running_loop().time() < deadline, "not ready in 15 s"
                    await asyncio.sleep(0.2)  # a poll: the agent's /ready, another process
                assert "sessionId" in (await new_session(http))["result"]

                await asyncio.to_thread(server.outage)  # the session above is still held
                assert (await http.get(f"{base}/health")).status_code == 200
                deadline = asyncio.get_running_loop().time() + 15
                while (await ready(http)).status_code != 503:
                    assert asyncio.get_running_loop().time() < deadline, "still ready"
                    await asyncio.sleep(0.2)  # a poll: the agent's /ready, another process

        asyncio.run(go())
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(6 + 5)  # the grace, plus the interpreter's exit
        except subprocess.TimeoutExpired:
            pytest.fail("SIGTERM did not end the agent within its shutdown grace")
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        server.stop()
