"""The session store's lease and listing (MemorySessionStore, SqliteSessionStore, and
PostgresSessionStore on a private server: one contract for all three), and the SQLite migration of a database written before leases existed."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from runtime.sessions.store import MemorySessionStore, SqliteSessionStore


def _stores(tmp_path: Path) -> dict[str, Callable[[], Any]]:
    return {
        "memory": MemorySessionStore,
        "sqlite": lambda: SqliteSessionStore(tmp_path / "s.db"),
    }


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "postgres":  # the same contract, on a fresh database
        import cluster_support as cs
        from runtime.sessions.store import open_store

        return open_store(cs.fresh_database(request.getfixturevalue("postgres")))
    return _stores(tmp_path)[request.param]()


def test_lease_one_owner_at_a_time(store: Any) -> None:
    async def go() -> None:
        await store.save("s", {"turns": 0})
        assert await store.acquire("s", "r/a", 30) is None
        assert await store.acquire("s", "r/a", 30) is None  # the holder again: still ok
        assert await store.acquire("s", "r/b", 30) == "r/a"  # refused, names the holder
        assert await store.renew("s", "r/b", 30) is False
        assert await store.renew("s", "r/a", 30) is True
        # take over: b holds it now; a finds out on renew, and its release changes nothing
        assert await store.acquire("s", "r/b", 30, take_over=True) is None
        assert await store.renew("s", "r/a", 30) is False
        await store.release("s", "r/a")
        assert await store.acquire("s", "r/a", 30) == "r/b"
        await store.release("s", "r/b")
        assert await store.acquire("s", "r/a", 30) is None

    asyncio.run(go())


def test_expired_lease_is_free(store: Any) -> None:
    async def go() -> None:
        assert await store.acquire("s", "r/a", 1.0) is None
        assert await store.acquire("s", "r/b", 30) == "r/a"
        await asyncio.sleep(1.2)
        assert await store.acquire("s", "r/b", 30) is None
        assert await store.renew("s", "r/a", 30) is False  # b holds it: a must stop

    asyncio.run(go())


def test_delete_drops_the_lease(store: Any) -> None:
    async def go() -> None:
        await store.save("s", {})
        assert await store.acquire("s", "r/a", 30) is None
        await store.delete("s")
        assert await store.renew("s", "r/a", 30) is False  # the holder finds out
        assert await store.acquire("s", "r/b", 30) is None
        assert await store.list_sessions(None, 10) == ([], None)

    asyncio.run(go())


def test_a_turn_is_saved_only_while_its_owner_holds_the_lease(store: Any) -> None:
    """save_turn(owner=...) checks the lease row in the same transaction: after a take-over
    the old owner's turn writes nothing (False), the new owner's is saved (True)."""

    async def go() -> None:
        await store.save("s", {"turns": 0})
        assert await store.acquire("s", "r/a", 30) is None
        assert await store.save_turn("s", {"turns": 1}, [b"a1"], owner="r/a") is True
        assert await store.acquire("s", "r/b", 30, take_over=True) is None
        assert await store.save_turn("s", {"turns": 2}, [b"a2"], owner="r/a") is False
        assert await store.load("s") == {"turns": 1}
        assert list(await store.history("s")) == [b"a1"]
        assert await store.save_turn("s", {"turns": 2}, [b"b2"], owner="r/b") is True
        assert list(await store.history("s")) == [b"a1", b"b2"]
        await store.release("s", "r/b")  # nobody holds it: an owner's save is refused too
        assert await store.save_turn("s", {"turns": 3}, [b"b3"], owner="r/b") is False
        assert await store.save_turn("s", {"turns": 3}, [b"x"]) is True  # no owner: unchecked

    asyncio.run(go())


def test_list_sessions_pages_in_creation_order(store: Any) -> None:
    async def go() -> None:
        for i in range(5):
            await store.save(f"s{i}", {"n": i})
        await store.save("s0", {"n": 10})  # an update keeps its place
        await store.save_turn("s5", {"n": 5}, [b"m"])  # a session first saved with a turn
        await store.delete("s2")
        seen: list[tuple[str, Any]] = []
        cursor = None
        pages = 0
        while True:
            page, cursor = await store.list_sessions(cursor, 2)
            assert len(page) <= 2
            seen += page
            pages += 1
            if cursor is None:
                break
        assert seen == [
            ("s0", {"n": 10}),
            ("s1", {"n": 1}),
            ("s3", {"n": 3}),
            ("s4", {"n": 4}),
            ("s5", {"n": 5}),
        ]
        assert pages == 3
        for bad in ("x", "-1", "9" * 40):
            with pytest.raises(ValueError):
                await store.list_sessions(bad, 2)

    asyncio.run(go())


def test_a_model_history_reads_back_through_every_change(store: Any) -> None:
    """A state's ``model_history`` list (a model's messages: a row a message in the
    database stores, a turn writing only those it added) reads back as it was saved
    whatever the change: grown at its end, its oldest let go, unchanged, cut at both ends,
    replaced, edited in the middle (a large message of the same size), a message
    repeated, emptied, dropped, by a turn or a ``save``; a refused turn changes nothing; each session keeps its own; delete takes it."""
    m = [{"kind": "request" if i % 2 else "response", "n": i, "text": f"t{i}"} for i in range(12)]
    m[4]["text"] = "x" * 5000  # a large one: told apart by its digest, not its bytes
    edited = {"kind": "request", "n": 4, "text": "y" * 5000}  # as large, not the same
    steps: list[list[Any] | None] = [
        m[:2],
        m[:4],
        m[2:6],
        m[2:6],
        m[3:5],
        [m[9], *m[3:6]],
        [m[9], m[3], edited, m[5]],
        [m[9], m[3], edited, m[5], m[5], m[9]],
        [],
        None,
        m[6:8],
        [*m[6:8], *m[:12]],
    ]

    def state(i: int, model: list[Any] | None) -> dict[str, Any]:
        out: dict[str, Any] = {"turns": i, "mode": "code"}
        if model is not None:
            out["model_history"] = model
        return out

    async def go() -> None:
        await store.save("s", state(0, []))
        await store.save("t", state(0, m[:3]))
        assert await store.acquire("s", "r/a", 30) is None
        for i, model in enumerate(steps, 1):
            if i % 3 == 0:
                await store.save("s", state(i, model))
            else:
                assert await store.save_turn("s", state(i, model), [b"p", b"a"], owner="r/a")
            assert await store.load("s") == state(i, model), (i, model)
            refused = await store.save_turn("s", state(99, m[:1]), [b"x"], owner="r/b")
            assert refused is False
            assert await store.load("s") == state(i, model), (i, model)
        page, _ = await store.list_sessions(None, 10)
        assert page == [("s", state(len(steps), steps[-1])), ("t", state(0, m[:3]))]
        await store.delete("s")
        assert await store.load("s") is None
        await store.save("s", state(1, m[:1]))  # the same id again: nothing of the old one
        assert await store.load("s") == state(1, m[:1])
        assert await store.load("t") == state(0, m[:3])

    asyncio.run(go())


def test_sqlite_lease_between_two_processes_handles(tmp_path: Path) -> None:
    """Two store objects on one file (two processes sharing it): the lease is in the file."""

    async def go() -> None:
        a = SqliteSessionStore(tmp_path / "s.db")
        b = SqliteSessionStore(tmp_path / "s.db")
        await a.save("s", {})
        assert await a.acquire("s", "p1/c", 30) is None
        assert await b.acquire("s", "p2/c", 30) == "p1/c"
        assert await b.acquire("s", "p2/c", 30, take_over=True) is None
        assert await a.renew("s", "p1/c", 30) is False
        a.close()
        b.close()

    asyncio.run(go())


def test_sqlite_migrates_a_database_from_before_leases(tmp_path: Path) -> None:
    """A file written by the previous schema (no leases, no order table, user_version 0)
    opens, keeps its sessions and history, lists them in their insertion order, and takes
    leases; opening it again migrates nothing twice."""
    db = tmp_path / "old.db"
    old = sqlite3.connect(db, isolation_level=None)
    old.executescript(
        """
        CREATE TABLE sessions (id TEXT PRIMARY KEY, state BLOB NOT NULL);
        CREATE TABLE history (
            session_id TEXT NOT NULL, seq INTEGER PRIMARY KEY AUTOINCREMENT, message BLOB NOT NULL);
        CREATE INDEX history_by_session ON history (session_id, seq);
        INSERT INTO sessions VALUES ('zeta', CAST('{"turns": 2}' AS BLOB));
        INSERT INTO sessions VALUES ('alpha', CAST('{"turns": 1}' AS BLOB));
        INSERT INTO history (session_id, message)
            VALUES ('zeta', CAST('m1' AS BLOB)), ('zeta', CAST('m2' AS BLOB));
        """
    )
    old.close()

    async def go() -> None:
        st = SqliteSessionStore(db)
        assert await st.list_sessions(None, 10) == (
            [("zeta", {"turns": 2}), ("alpha", {"turns": 1})],
            None,
        )
        assert await st.history("zeta") == [b"m1", b"m2"]
        assert await st.acquire("zeta", "r/a", 30) is None
        # history rebuilt without AUTOINCREMENT (schema 3): a new turn lands after the old rows
        assert await st.save_turn("zeta", {"turns": 3}, [b"m3"], owner="r/a")
        assert await st.history("zeta") == [b"m1", b"m2", b"m3"]
        await st.save("new", {"turns": 0})
        st.close()
        again = SqliteSessionStore(db)
        page, _ = await again.list_sessions(None, 10)
        assert [sid for sid, _ in page] == ["zeta", "alpha", "new"]
        assert await again.acquire("zeta", "r/b", 30) == "r/a"
        again.close()

    asyncio.run(go())
    check = sqlite3.connect(db)
    assert check.execute("PRAGMA user_version").fetchone() == (7,)
    (sql,) = check.execute("SELECT sql FROM sqlite_master WHERE name = 'history'").fetchone()
    assert "AUTOINCREMENT" not in sql
    assert check.execute(
        "SELECT name FROM sqlite_master WHERE name = 'history_by_session'"
    ).fetchone()


def file_of_schema(db: Path, version: int, rows: str) -> None:
    """A SQLite store file as schema ``version`` left it, holding ``rows`` (SQL)."""
    from runtime.sessions.store_sqlite_schema import MIGRATIONS, SCHEMA

    old = sqlite3.connect(db, isolation_level=None)
    old.executescript(SCHEMA)
    for step in MIGRATIONS[:version]:
        old.executescript(step)
    old.executescript(f"PRAGMA user_version = {version};\n{rows}")
    old.close()


def test_sqlite_schema_4_takes_over_a_schema_3_file(tmp_path: Path) -> None:
    """A file of schema 3 (the state and the byte and turn counters on the sessions row)
    opens with its states, history and counters: the next turn is numbered after the
    last, retention counts the bytes the session already held, and a state written by
    ``save`` after a session's turns stays the loaded one until the next turn."""
    db = tmp_path / "v3.db"
    file_of_schema(
        db,
        3,
        """
        INSERT INTO sessions (id, state, hbytes, hturns, hfirst)
            VALUES ('a', CAST('{"turns": 2}' AS BLOB), 8, 2, 1),
                   ('b', CAST('{"turns": 0}' AS BLOB), 0, 0, 1);
        INSERT INTO session_order (session_id) VALUES ('a'), ('b');
        INSERT INTO history (session_id, message, turn, size) VALUES
            ('a', CAST('p1' AS BLOB), 1, 2), ('a', CAST('e1' AS BLOB), 1, 2),
            ('a', CAST('p2' AS BLOB), 2, 2), ('a', CAST('e2' AS BLOB), 2, 2);
        """,
    )

    async def go() -> None:
        st = SqliteSessionStore(db, max_history_bytes=10)
        assert await st.load("a") == {"turns": 2}
        assert await st.history("a") == [b"p1", b"e1", b"p2", b"e2"]
        # 8 bytes held + 4: past the 10-byte bound, down to 3/4 of it (turns 1 and 2 go)
        assert await st.save_turn("a", {"turns": 3}, [b"p3", b"e3"]) is True
        assert await st.load("a") == {"turns": 3}
        assert await st.history("a") == [b"p3", b"e3"]
        await st.save("a", {"turns": 3, "mode": "plan"})
        assert await st.load("a") == {"turns": 3, "mode": "plan"}
        page, _ = await st.list_sessions(None, 10)
        assert page == [("a", {"turns": 3, "mode": "plan"}), ("b", {"turns": 0})]
        assert await st.save_turn("b", {"turns": 1}, []) is True  # no messages: its state
        assert await st.load("b") == {"turns": 1}
        assert await st.history("b") == []
        st.close()

    asyncio.run(go())
    check = sqlite3.connect(db)
    turns = check.execute(
        "SELECT turn, parts FROM history WHERE session_id = 'a' ORDER BY seq"
    ).fetchall()
    assert turns == [(3, 2)]  # schema 5: the turn's two messages in one row


def test_sqlite_small_turn_is_one_row_and_replays_message_by_message(tmp_path: Path) -> None:
    """Schema 5: a small turn's messages are one history row (``parts`` of them, joined by
    newlines) and replay as they were, in order, among rows written one a message (a
    message holding a newline, ``append_history``); retention counts the same bytes."""
    db = tmp_path / "s.db"
    many = [f'{{"n":{i},"text":"chunk {i}"}}'.encode() for i in range(50)]
    odd = [b'{"a":1}', b'{"b":\n2}']  # a newline inside: a row each

    async def go() -> None:
        st = SqliteSessionStore(db, max_history_bytes=10_000)
        await st.save("s", {"turns": 0})
        assert await st.save_turn("s", {"turns": 1}, many) is True
        await st.append_history("s", [b'{"x":1}', b'{"x":2}'])
        assert await st.save_turn("s", {"turns": 2}, odd) is True
        assert await st.save_turn("s", {"turns": 3}, [b'{"one":1}']) is True
        assert await st.history("s") == [*many, b'{"x":1}', b'{"x":2}', *odd, b'{"one":1}']
        assert await st.load("s") == {"turns": 3}
        st.close()

    asyncio.run(go())
    check = sqlite3.connect(db)
    rows = check.execute("SELECT turn, parts, size FROM history ORDER BY seq").fetchall()
    assert rows == [
        (1, 50, sum(map(len, many))),
        (2, 1, 7),
        (2, 1, 7),
        (3, 1, len(odd[0])),
        (3, 1, len(odd[1])),
        (4, 1, 9),
    ]
    check.close()


def test_sqlite_schema_5_takes_over_a_schema_4_file(tmp_path: Path) -> None:
    """A file of schema 4 (every message a row) opens: its rows replay as before, the next
    turn is numbered after them and written as one row, and both replay in order."""
    db = tmp_path / "v4.db"
    file_of_schema(
        db,
        4,
        """
        INSERT INTO sessions (id, state, hfirst) VALUES ('a', CAST('{"turns": 1}' AS BLOB), 1);
        INSERT INTO session_order (session_id) VALUES ('a');
        INSERT INTO history (session_id, message, turn, size, state, total) VALUES
            ('a', CAST('p1' AS BLOB), 1, 2, NULL, 4),
            ('a', CAST('e1' AS BLOB), 1, 2, CAST('{"turns": 1}' AS BLOB), 4);
        """,
    )

    async def go() -> None:
        st = SqliteSessionStore(db)
        assert await st.history("a") == [b"p1", b"e1"]
        assert await st.save_turn("a", {"turns": 2}, [b"p2", b"e2"]) is True
        assert await st.history("a") == [b"p1", b"e1", b"p2", b"e2"]
        assert await st.load("a") == {"turns": 2}
        st.close()

    asyncio.run(go())
    check = sqlite3.connect(db)
    assert check.execute("PRAGMA user_version").fetchone() == (7,)
    rows = check.execute("SELECT turn, parts, total FROM history ORDER BY seq").fetchall()
    assert rows == [(1, 1, 4), (1, 1, 4), (2, 2, 8)]
    check.close()


def test_sqlite_schema_6_keeps_one_state_of_a_schema_5_file(tmp_path: Path) -> None:
    """A file as schema 5 wrote it (every turn's last row holding a copy of the state,
    auto_vacuum on, as the store creates its files) opens with each session's latest
    state (a turn's, or a ``save``'s newer than the session's turns) and its history as
    before; the older copies are gone and their pages given back to the file system; the
    next turn moves the state to its row."""
    db = tmp_path / "v5.db"
    pre = sqlite3.connect(db, isolation_level=None)
    pre.execute("PRAGMA auto_vacuum=INCREMENTAL")  # before the first table, as the store does
    pre.close()
    big = "s" * 100_000
    copies = ",\n".join(
        f"('a', CAST('p{i}\ne{i}' AS BLOB), {i}, 4, CAST('{{\"turns\": {i}, \"m\": \"{big}\"}}' AS BLOB), {4 * i}, 2)"
        for i in range(1, 21)
    )
    file_of_schema(
        db,
        5,
        f"""
        INSERT INTO sessions (id, state, hfirst, hseq) VALUES
            ('a', CAST('{{"turns": 0}}' AS BLOB), 1, 0),
            ('b', CAST('{{"turns": 1, "mode": "plan"}}' AS BLOB), 1, 21);
        INSERT INTO session_order (session_id) VALUES ('a'), ('b');
        INSERT INTO history (session_id, message, turn, size, state, total, parts) VALUES
            {copies};
        INSERT INTO history (session_id, message, turn, size, state, total, parts) VALUES
            ('b', CAST('q1\nf1' AS BLOB), 1, 4, CAST('{{"turns": 1}}' AS BLOB), 4, 2);
        """,
    )
    before = os.path.getsize(db)
    assert before > 20 * 100_000

    async def go() -> None:
        st = SqliteSessionStore(db)
        assert await st.load("a") == {"turns": 20, "m": big}
        assert await st.load("b") == {"turns": 1, "mode": "plan"}
        assert await st.history("a") == [f"{x}{i}".encode() for i in range(1, 21) for x in "pe"]
        assert await st.history("b") == [b"q1", b"f1"]
        assert await st.save_turn("b", {"turns": 2}, [b"q2", b"f2"]) is True
        assert await st.load("b") == {"turns": 2}
        st.close()

    asyncio.run(go())
    assert os.path.getsize(db) < before // 10, (os.path.getsize(db), before)
    check = sqlite3.connect(db)
    assert check.execute("PRAGMA user_version").fetchone() == (7,)
    held = check.execute(
        "SELECT session_id, turn FROM history WHERE state IS NOT NULL ORDER BY seq"
    ).fetchall()
    assert held == [("b", 2)]
    states = check.execute("SELECT id, length(state) FROM sessions ORDER BY id").fetchall()
    assert states == [("a", len(f'{{"turns": 20, "m": "{big}"}}')), ("b", 0)]
    check.close()


def test_sqlite_schema_7_moves_a_schema_6_files_model_histories_to_rows(tmp_path: Path) -> None:
    """A file as schema 6 wrote it (each session's state once, on its last turn's row or
    on its ``sessions`` row, a model's history inside it) opens with every state as it
    was; each model history is now ``model_messages`` rows, the states holding their count;
    the next turn inserts only the message it added."""
    import orjson

    db = tmp_path / "v6.db"
    big = "r" * 100_000
    model = [{"kind": "request", "n": 0, "text": big}, {"kind": "response", "n": 1, "text": "ok"}]
    on_row = {"turns": 1, "model_history": model}
    on_session = {"turns": 1, "mode": "plan", "model_history": model[:1]}
    plain = {"turns": 2}

    def blob(state: dict[str, Any]) -> str:
        return "x'" + orjson.dumps(state).hex() + "'"

    file_of_schema(
        db,
        6,
        f"""
        INSERT INTO sessions (id, state, hfirst, hseq) VALUES
            ('a', x'', 1, 0), ('b', {blob(on_session)}, 1, 2), ('c', x'', 1, 0);
        INSERT INTO session_order (session_id) VALUES ('a'), ('b'), ('c');
        INSERT INTO history (seq, session_id, message, turn, size, state, total, parts) VALUES
            (1, 'a', CAST('p1' AS BLOB), 1, 2, {blob(on_row)}, 2, 1),
            (2, 'b', CAST('q1' AS BLOB), 1, 2, NULL, 2, 1),
            (3, 'c', CAST('r1' AS BLOB), 1, 2, {blob(plain)}, 2, 1);
        """,
    )

    async def go() -> None:
        st = SqliteSessionStore(db)
        assert await st.load("a") == on_row
        assert await st.load("b") == on_session
        assert await st.load("c") == plain
        page, _ = await st.list_sessions(None, 10)
        assert page == [("a", on_row), ("b", on_session), ("c", plain)]
        grown = {"turns": 2, "model_history": [*model, {"kind": "request", "n": 2}]}
        assert await st.save_turn("a", grown, [b"p2"]) is True
        assert await st.load("a") == grown
        st.close()

    asyncio.run(go())
    check = sqlite3.connect(db)
    assert check.execute("PRAGMA user_version").fetchone() == (7,)
    rows = check.execute(
        "SELECT session_id, seq, length(message) FROM model_messages ORDER BY seq"
    ).fetchall()
    # a's two messages and b's one moved once; the turn after added a's third alone
    assert [(sid, n > 100_000) for sid, _, n in rows] == [
        ("a", True),
        ("a", False),
        ("b", True),
        ("a", False),
    ]
    states = check.execute(
        "SELECT coalesce(max(length(h.state)), 0) + length(s.state) FROM sessions s "
        "LEFT JOIN history h ON h.session_id = s.id GROUP BY s.id ORDER BY s.id"
    ).fetchall()
    assert all(n < 100 for (n,) in states), states
    check.close()


def test_updated_at_is_the_current_second_in_rfc3339_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    """``now()`` (a saved session's ``updatedAt``) formats each second once: the text is
    the clock's second, and follows the clock when it moves on."""
    import datetime

    from runtime.sessions import session_store

    clock = [1795850415.2]
    monkeypatch.setattr(session_store.time, "time", lambda: clock[0])
    assert session_store.now() == "2026-11-28T07:20:15Z"
    clock[0] = 1795850415.9
    assert session_store.now() == "2026-11-28T07:20:15Z"
    clock[0] = 1795850416.0
    assert session_store.now() == "2026-11-28T07:20:16Z"
    monkeypatch.undo()
    stamp = datetime.datetime.fromisoformat(session_store.now())  # 3.11 reads the Z
    assert abs(stamp.timestamp() - datetime.datetime.now(datetime.UTC).timestamp()) < 2
