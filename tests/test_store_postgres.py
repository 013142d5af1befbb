"""The PostgreSQL session store (templates/runtime/store_postgres.py) on a private server,
and ``open_store``'s URL selection.  The lease/listing contract shared with the SQLite and
memory stores is in test_session_store.py (parametrized over all three)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "templates"))

import cluster_support as cs
from runtime.store import MemorySessionStore, SqliteSessionStore, open_store


@pytest.fixture(scope="module")
def pg() -> Iterator[cs.Server]:
    cs.need("postgresql")
    server = cs.start_postgres()
    try:
        yield server
    finally:
        server.stop()


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
    from runtime.store_postgres import PostgresSessionStore

    assert isinstance(open_store("postgresql://u@127.0.0.1:1/db"), PostgresSessionStore)
    with pytest.raises(ValueError, match="unknown store 'mysql'") as err:
        open_store("mysql://root:hunter2@127.0.0.1/db")
    assert "hunter2" not in str(err.value)
    for bad in ("sqlite://", "sqlite:///", "sqlite:relative.db"):
        with pytest.raises(ValueError, match="give a file"):
            open_store(bad)


@pytest.mark.slow
def test_roundtrip_history_order_and_delete(pg: cs.Server) -> None:
    async def go() -> None:
        st: Any = open_store(cs.fresh_database(pg))
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
def test_schema_created_once_by_replicas_starting_together(pg: cs.Server) -> None:
    """Five stores (five replicas) open one fresh database at once: the tables are created
    exactly once (advisory lock), every store works, and the version is recorded."""
    url = cs.fresh_database(pg)

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
        assert c.execute("SELECT version FROM acp_schema").fetchall() == [(2,)]


@pytest.mark.slow
def test_unreachable_server_is_an_error_not_a_hang() -> None:
    """No server there: each call raises within the open timeout (the HTTP transport turns
    that into a transient StoreUnavailable error), and the next call tries again."""
    from psycopg_pool import PoolTimeout
    from runtime.store_postgres import PostgresSessionStore

    async def go() -> None:
        st = PostgresSessionStore(
            f"postgresql://postgres@127.0.0.1:{cs.free_port()}/postgres", open_timeout=1.0
        )
        for _ in range(2):  # a hang would end in wait_for's TimeoutError instead
            with pytest.raises(PoolTimeout):
                await asyncio.wait_for(st.load("x"), 10)
        await st.aclose()

    asyncio.run(go())


def test_the_store_url_password_is_redacted_from_logs() -> None:
    """A PostgreSQL or Redis URL's password is registered as a secret when the store or
    router is created: a log line that quotes the URL (a driver's error, a user's
    message) shows it redacted.  Nothing is connected: opening the store is lazy."""
    import logging

    from runtime import jsonrpc
    from runtime.store import open_store

    open_store("postgresql://acp:pg-SECRET-9911@127.0.0.1:1/db")
    record = logging.LogRecord(
        "acp.runtime", logging.ERROR, __file__, 1, "cannot reach %s", ("pg-SECRET-9911",), None
    )
    assert jsonrpc.RedactingFilter().filter(record)
    assert "pg-SECRET-9911" not in record.getMessage()
