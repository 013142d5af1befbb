"""The session stores' bounds and the SQLite store's write path: group commit across
sessions, a prompt's text and its echo stored once, per-session history retention (whole
turns, the latest kept), the memory store's least-recently-used bound, and deleted
sessions giving their pages back."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest
from runtime.sessions.store import MemorySessionStore
from runtime.sessions.store_sqlite import SqliteSessionStore


def frame(kind: str, text: str) -> bytes:
    update = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    note = {"sessionId": "s", "update": update}
    return orjson.dumps({"jsonrpc": "2.0", "method": "session/update", "params": note})


def turn(i: int, text: str = "") -> list[bytes]:
    return [frame("user_message_chunk", f"p{i}{text}"), frame("agent_message_chunk", f"a{i}")]


def make(kind: str, request: pytest.FixtureRequest, tmp_path: Path, **bounds: Any) -> Any:
    if kind == "memory":
        return MemorySessionStore(**bounds)
    if kind == "postgres":  # the same retention, on a fresh database
        import cluster_support as cs
        from runtime.sessions.store_postgres import PostgresSessionStore

        url = cs.fresh_database(request.getfixturevalue("postgres"))
        return PostgresSessionStore(url, **bounds)
    return SqliteSessionStore(tmp_path / "s.db", **bounds)


def test_sqlite_group_commit_one_transaction_for_all_sessions(tmp_path: Path) -> None:
    """Turns of eight sessions that end together are written by one transaction, and
    each caller hears its own answer: a turn whose owner lost the lease is refused (False)
    without failing the others; every written turn is on disk for a new connection."""
    store = SqliteSessionStore(tmp_path / "s.db")
    statements: list[str] = []

    async def go() -> None:
        for i in range(8):
            await store.save(f"s{i}", {"turns": 0})
            assert await store.acquire(f"s{i}", "r/a", 30) is None
        assert await store.acquire("s3", "r/b", 30, take_over=True) is None
        store._fast.set_trace_callback(statements.append)
        saved = await asyncio.gather(
            *(store.save_turn(f"s{i}", {"turns": 1}, turn(i), owner="r/a") for i in range(8))
        )
        assert saved == [i != 3 for i in range(8)]

    asyncio.run(go())
    assert statements.count("COMMIT") == 1, statements
    db = sqlite3.connect(tmp_path / "s.db")
    rows = db.execute("SELECT session_id, sum(parts) FROM history GROUP BY session_id").fetchall()
    assert sorted(rows) == [(f"s{i}", 2) for i in range(8) if i != 3]
    store.close()


def test_sqlite_kept_figures_never_outlive_another_connections_commit(tmp_path: Path) -> None:
    """The event loop's connection keeps each session's lease owner, turn number and byte
    count between its commits, so a turn of a session it wrote before reads nothing;
    another connection's commit (another replica here) makes it read them again: a lease
    taken over refuses the old owner's next turn, and turns written elsewhere meanwhile
    keep their numbers and byte counts in order."""
    a = SqliteSessionStore(tmp_path / "s.db")
    b = SqliteSessionStore(tmp_path / "s.db")
    statements: list[str] = []

    async def go() -> None:
        await a.save("s", {"turns": 0})
        assert await a.acquire("s", "r/a", 30) is None
        for i in range(2):
            assert await a.save_turn("s", {"turns": i + 1}, turn(i), owner="r/a") is True
        a._fast.set_trace_callback(statements.append)
        assert await a.save_turn("s", {"turns": 3}, turn(2), owner="r/a") is True
        a._fast.set_trace_callback(None)
        assert not [s for s in statements if s.startswith("SELECT")], statements
        assert await b.acquire("s", "r/b", 30, take_over=True) is None
        assert await a.save_turn("s", {"turns": 4}, turn(3), owner="r/a") is False
        for i in range(3, 5):
            assert await b.save_turn("s", {"turns": i + 1}, turn(i), owner="r/b") is True
        assert await a.acquire("s", "r/a", 30, take_over=True) is None
        assert await a.save_turn("s", {"turns": 6}, turn(5), owner="r/a") is True

    asyncio.run(go())
    a.close()
    b.close()
    db = sqlite3.connect(tmp_path / "s.db")
    rows = db.execute("SELECT turn, size, total FROM history ORDER BY seq").fetchall()
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5, 6]  # a row a turn (schema 5)
    sizes = [sum(map(len, turn(i))) for i in range(6)]
    assert [r[1] for r in rows] == sizes
    assert rows[-1][2] == sum(sizes)
    db.close()


def test_sqlite_kept_figures_stay_bounded_when_turns_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the event loop's connection keeps is bounded by KNOWN_SESSIONS, the owners it
    read included: a turn refused (its owner lost the lease) keeps its session's owner
    but writes nothing, so a run of them for ever new sessions must not grow it past the
    bound; the refusals stay refusals."""
    import runtime.sessions.store_sqlite_turns as turns_mod

    monkeypatch.setattr(turns_mod, "KNOWN_SESSIONS", 8)
    store = SqliteSessionStore(tmp_path / "s.db")
    writer = store._writer
    largest = 0

    async def go() -> None:
        nonlocal largest
        for i in range(40):  # the worker connection's commits: before the refusals
            assert await store.acquire(f"s{i}", "r/b", 30) is None
        for i in range(40):
            assert await store.save_turn(f"s{i}", {"turns": 1}, turn(i), owner="r/a") is False
            largest = max(largest, len(writer._owners), len(writer._known))

    asyncio.run(go())
    store.close()
    assert largest <= 8 + 1, largest


def test_sqlite_lone_session_commits_its_turn_in_the_pass_it_ends(tmp_path: Path) -> None:
    """When the last group held one turn (one busy session), the next turn commits at once:
    ``save_turn`` returns before the loop's next pass (so the prompt's answer leaves in the
    same write as its updates); a second turn ending in that pass waits for the next group,
    and both are on disk."""
    store = SqliteSessionStore(tmp_path / "s.db")
    order: list[str] = []

    async def go() -> None:
        loop = asyncio.get_running_loop()
        await store.save("s", {"turns": 0})
        await store.save("t", {"turns": 0})
        assert await store.save_turn("s", {"turns": 1}, turn(0)) is True  # a group of one
        loop.call_soon(order.append, "next pass")
        assert await store.save_turn("s", {"turns": 2}, turn(1)) is True
        order.append("saved")
        loop.call_soon(order.append, "next pass")
        saved = await asyncio.gather(
            store.save_turn("s", {"turns": 3}, turn(2)), store.save_turn("t", {"turns": 1}, turn(0))
        )
        assert saved == [True, True]

    asyncio.run(go())
    assert order == ["saved", "next pass", "next pass"]
    db = sqlite3.connect(tmp_path / "s.db")
    rows = db.execute("SELECT session_id, sum(parts) FROM history GROUP BY session_id").fetchall()
    assert sorted(rows) == [("s", 6), ("t", 2)]
    store.close()


def test_sqlite_settled_returns_after_the_pending_group_is_answered(tmp_path: Path) -> None:
    """``settled()`` (what the stdio writer awaits before it writes) returns at once when
    no group waits for the next pass, else only after that group committed and its
    callers resumed, so their answers are queued before the writer takes the queue."""
    store = SqliteSessionStore(tmp_path / "s.db")
    order: list[str] = []

    async def save(sid: str) -> None:
        assert await store.save_turn(sid, {"turns": 1}, turn(0)) is True
        order.append(f"saved {sid}")

    async def go() -> None:
        for sid in ("a", "b"):
            await store.save(sid, {"turns": 0})
        await store.settled()  # nothing pending
        savers = [asyncio.create_task(save(sid)) for sid in ("a", "b")]
        await asyncio.sleep(0)  # both turns queued: one group for the next pass
        await store.settled()
        order.append("settled")
        await asyncio.gather(*savers)

    asyncio.run(go())
    assert order == ["saved a", "saved b", "settled"]
    store.close()


def test_sqlite_large_turn_commits_off_the_event_loop_and_shares_its_text(
    tmp_path: Path,
) -> None:
    """A turn larger than ``inline_bytes`` is written by the worker thread (never by the
    event loop's connection); a 1 MB prompt and its 1 MB echo are stored once (blobs), and
    replay gives back both messages byte for byte."""
    store = SqliteSessionStore(tmp_path / "s.db")
    statements: list[str] = []
    text = os.urandom(400_000).hex() + '"\\\n'  # escapes too
    messages = [frame("user_message_chunk", text), frame("agent_message_chunk", text)]

    async def go() -> None:
        await store.save("s", {"turns": 0})
        store._fast.set_trace_callback(statements.append)
        assert await store.save_turn("s", {"turns": 1}, messages) is True
        assert await store.history("s") == messages

    asyncio.run(go())
    assert not any("INSERT" in s for s in statements), statements
    db = sqlite3.connect(tmp_path / "s.db")
    (held,) = db.execute(
        "SELECT (SELECT sum(length(message)) FROM history) + (SELECT sum(length(data)) FROM blobs)"
    ).fetchone()
    assert held < len(messages[0]) + 1000, (held, len(messages[0]))
    store.close()
    again = SqliteSessionStore(tmp_path / "s.db")
    assert asyncio.run(again.history("s")) == messages
    again.close()


def test_sqlite_large_turn_is_answered_before_the_checkpoint(tmp_path: Path) -> None:
    """A commit never checkpoints: a 5 MB turn is answered once it is in the WAL (durable
    against a crash with ``synchronous=NORMAL``), and the copy into the database file (a
    checkpoint: fsyncs, every page written again) runs in the worker thread afterwards."""
    store = SqliteSessionStore(tmp_path / "s.db")
    text = os.urandom(2_500_000).hex()
    messages = [frame("user_message_chunk", text), frame("agent_message_chunk", text)]
    sizes: list[int] = []

    async def go() -> None:
        await store.save("s", {"turns": 0})
        assert await store.save_turn("s", {"turns": 1}, messages) is True
        sizes.append(os.path.getsize(tmp_path / "s.db"))
        await asyncio.gather(*store._tasks)  # the checkpoint
        sizes.append(os.path.getsize(tmp_path / "s.db"))

    asyncio.run(go())
    assert sizes[0] < 1_000_000, sizes
    assert sizes[1] > 5_000_000, sizes
    store.close()
    again = SqliteSessionStore(tmp_path / "s.db")
    assert asyncio.run(again.history("s")) == messages
    again.close()


def test_sqlite_checkpoint_never_waits_for_a_reader(tmp_path: Path) -> None:
    """A WAL checkpoint holds up no turn for long: with a reader pinning an old snapshot
    (the checkpoint cannot finish), it gives up at once instead of waiting, and every turn
    saved meanwhile is written.  (A RESTART checkpoint on the store's own connection waited
    up to ``busy_timeout`` holding the write lock: every turn waited with it.)"""
    store = SqliteSessionStore(tmp_path / "s.db", busy_timeout=60.0)
    reader = sqlite3.connect(tmp_path / "s.db", isolation_level=None)

    async def go() -> int:
        await store.save("s", {"turns": 0})
        for i in range(5):
            assert await store.save_turn("s", {"turns": i}, turn(i)) is True
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM history").fetchall()  # pins this snapshot
        for i in range(5, 10):
            assert await store.save_turn("s", {"turns": i}, turn(i)) is True
        checkpoint = asyncio.ensure_future(store._checkpoint())
        saved = 10
        async with asyncio.timeout(10):  # not busy_timeout's 60 s
            while not checkpoint.done() and saved < 5000:
                assert await store.save_turn("s", {"turns": saved}, turn(saved)) is True
                saved += 1
                await asyncio.sleep(0)  # the turns come one after the other, as prompts do
            await checkpoint
        return saved

    saved = asyncio.run(go())
    reader.execute("ROLLBACK")
    reader.close()
    store.close()
    again = SqliteSessionStore(tmp_path / "s.db")
    assert len(asyncio.run(again.history("s"))) == 2 * saved
    again.close()


def test_sqlite_wal_stays_bounded_under_a_steady_load(tmp_path: Path) -> None:
    """Turns that keep coming while checkpoints run (in their thread) leave frames the
    checkpoint did not copy; the WAL still starts again from its beginning, so its file
    stays near ``CHECKPOINT_BYTES`` (at most ``journal_size_limit``, 16 MiB) instead of
    growing with every turn (5000 turns of ~4 KB here: ~60 MB of frames)."""
    store = SqliteSessionStore(tmp_path / "s.db")
    wal = tmp_path / "s.db-wal"
    text = "x" * 2000
    largest = 0

    async def go() -> None:
        nonlocal largest
        await store.save("s", {"turns": 0})
        for i in range(5000):
            assert await store.save_turn("s", {"turns": i}, turn(i, text)) is True
            if i % 50 == 0:
                largest = max(largest, wal.stat().st_size)
        await asyncio.gather(*store._tasks)

    asyncio.run(go())
    store.close()
    assert largest <= 20 * 1024 * 1024, largest


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_history_retention_keeps_the_latest_whole_turns(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Past ``max_history_turns`` the oldest whole turns go, down to 3/4 of the bound;
    replay starts at a kept turn's prompt and ends with the latest turn."""
    store = make(kind, request, tmp_path, max_history_turns=8)

    async def go() -> list[bytes]:
        await store.save("s", {"turns": 0})
        for i in range(20):
            assert await store.save_turn("s", {"turns": i + 1}, turn(i)) is True
        return list(await store.history("s"))

    kept = asyncio.run(go())
    assert kept == [m for i in range(12, 20) for m in turn(i)], [m[-20:] for m in kept]


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_history_retention_by_bytes_keeps_the_last_turn_however_large(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    store = make(kind, request, tmp_path, max_history_bytes=10_000)
    big = "x" * 3000

    async def go() -> None:
        await store.save("s", {"turns": 0})
        for i in range(10):
            await store.save_turn("s", {"turns": i + 1}, turn(i, big))
        kept = list(await store.history("s"))
        assert sum(map(len, kept)) <= 10_000
        assert kept == [m for i in range(8, 10) for m in turn(i, big)]
        await store.save_turn("s", {"turns": 11}, turn(10, "y" * 50_000))
        assert list(await store.history("s")) == turn(10, "y" * 50_000)
        assert await store.load("s") == {"turns": 11}

    asyncio.run(go())


def test_memory_store_forgets_the_least_recently_used_sessions() -> None:
    """``max_sessions`` and ``max_bytes`` bound the memory store: the least recently used
    sessions go whole (a load counts as a use); a leased session keeps its lease, so its
    owner's next turn is still saved."""
    store = MemorySessionStore(max_sessions=3, max_bytes=20_000)

    async def go() -> None:
        for i in range(3):
            await store.save(f"s{i}", {"n": i})
        assert await store.acquire("s0", "r/a", 30) is None
        await store.load("s0")  # s1 is now the least recently used
        await store.save("s3", {"n": 3})
        assert await store.load("s1") is None
        page, _ = await store.list_sessions(None, 10)
        assert [sid for sid, _ in page] == ["s0", "s2", "s3"]
        for i in range(10):  # 10 x 3 KB turns in s3: the others go first, then s3's oldest
            await store.save_turn("s3", {"n": 3}, turn(i, "z" * 3000))
        assert store.bytes_held <= 20_000
        assert await store.load("s0") is None and await store.load("s2") is None
        assert list(await store.history("s3"))[-2:] == turn(9, "z" * 3000)
        assert await store.save_turn("s0", {"n": 0}, [b"m"], owner="r/a") is True

    asyncio.run(go())


def test_memory_store_bounds_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACP_MEMORY_MAX_SESSIONS", "7")
    monkeypatch.setenv("ACP_MEMORY_MAX_BYTES", "none")
    monkeypatch.setenv("ACP_HISTORY_MAX_TURNS", "lots")  # not a count: logged, default kept
    store = MemorySessionStore()
    assert (store.max_sessions, store.max_bytes, store.max_history_turns) == (7, None, 100_000)


def test_sqlite_deleted_sessions_give_their_pages_back(tmp_path: Path) -> None:
    """Deleting sessions frees their pages in the file (``auto_vacuum=INCREMENTAL``), and
    ``vacuum()`` rewrites the file."""
    path = tmp_path / "s.db"
    store = SqliteSessionStore(path)

    def pages() -> int:
        return int(sqlite3.connect(path).execute("PRAGMA page_count").fetchone()[0])

    async def go() -> None:
        for i in range(4):
            await store.save(f"s{i}", {"n": i})
            for k in range(10):
                await store.save_turn(f"s{i}", {"n": i}, turn(k, os.urandom(60_000).hex()))
        full = pages()
        for i in range(4):
            await store.delete(f"s{i}")
        assert pages() < full // 4, (pages(), full)
        await store.vacuum()

    asyncio.run(go())
    store.close()


@pytest.mark.parametrize(
    "kind", ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.slow)]
)
def test_history_and_state_are_counted_by_one_bound(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``max_history_bytes`` bounds what a session keeps, its state (a model's history
    here, 20 KB) and its history rows together: past it, the oldest whole turns go, the
    latest turn and the latest state stay.  (Before: the state was not counted, so the
    history alone filled the bound.)"""
    store = make(kind, request, tmp_path, max_history_bytes=50_000)
    model = "m" * 20_000

    async def go() -> None:
        await store.save("s", {"turns": 0})
        for i in range(20):
            state = {"turns": i + 1, "model": model}
            assert await store.save_turn("s", state, turn(i, "x" * 3000)) is True
            kept = list(await store.history("s"))
            assert sum(map(len, kept)) + len(orjson.dumps(state)) <= 50_000, (i, len(kept))
            assert kept[-2:] == turn(i, "x" * 3000)
        assert await store.load("s") == {"turns": 20, "model": model}

    asyncio.run(go())


def _stored_bytes(path: Path) -> int:
    """The bytes of the file's pages in use (page count less free pages)."""
    db = sqlite3.connect(path)
    (pages,) = db.execute("PRAGMA page_count").fetchone()
    (free,) = db.execute("PRAGMA freelist_count").fetchone()
    (size,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    return int((pages - free) * size)


def _file_bytes(path: Path) -> int:
    """The file's size once its WAL is checkpointed (its page count, as a reader sees it)."""
    db = sqlite3.connect(path)
    (pages,) = db.execute("PRAGMA page_count").fetchone()
    (size,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    return int(pages * size)


def test_sqlite_keeps_one_state_a_session(tmp_path: Path) -> None:
    """A session's state is on disk once, replaced each turn: 30 turns of a session whose
    state is 200 KB (a model's history) use about one state's pages, not 30 (before: each
    turn's last row kept its copy, never deleted); a ``save`` between turns (a mode
    change) and rows appended without a state keep it once too; every reopen loads the
    latest state."""
    path = tmp_path / "s.db"
    store = SqliteSessionStore(path)
    model = os.urandom(100_000).hex()  # 200 KB, incompressible

    async def go() -> None:
        await store.save("s", {"turns": 0})
        await store.save("t", {"turns": 0})
        for i in range(30):
            assert await store.save_turn("s", {"turns": i, "model": model}, turn(i)) is True
            assert await store.save_turn("t", {"turns": i}, turn(i)) is True
            if i == 10:
                await store.save("s", {"turns": i, "model": model, "mode": "plan"})
            if i == 20:
                await store.append_history("s", turn(99))
        assert await store.load("s") == {"turns": 29, "model": model}
        assert await store.load("t") == {"turns": 29}

    asyncio.run(go())
    store.close()
    db = sqlite3.connect(path)
    held = db.execute(
        "SELECT session_id, count(*) FROM history WHERE state IS NOT NULL GROUP BY session_id"
    ).fetchall()
    assert sorted(held) == [("s", 1), ("t", 1)]
    assert db.execute("SELECT id, length(state) FROM sessions ORDER BY id").fetchall() == [
        ("s", 0),
        ("t", 0),
    ]
    db.close()
    assert _stored_bytes(path) < 3 * 200_000, _stored_bytes(path)
    again = SqliteSessionStore(path)

    async def reload() -> None:
        assert await again.load("s") == {"turns": 29, "model": model}
        await again.save("s", {"turns": 30})  # save: the session's row takes it over
        assert await again.load("s") == {"turns": 30}
        page, _ = await again.list_sessions(None, 10)
        assert page == [("s", {"turns": 30}), ("t", {"turns": 29})]

    asyncio.run(reload())
    again.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM history WHERE state IS NOT NULL").fetchone() == (1,)
    db.close()


def test_sqlite_file_does_not_grow_with_turns_after_a_large_state(tmp_path: Path) -> None:
    """After a turn whose state holds a large tool result (2 MB here), the next ten turns
    add less than 1 MB to the file: each replaces the state, and the pages the first
    replacement left free go back to the file system at the next checkpoint (before:
    each turn added a copy, 2 MB a turn)."""
    path = tmp_path / "s.db"
    store = SqliteSessionStore(path)
    result = os.urandom(1_000_000).hex()

    async def settle() -> None:
        while store._tasks:  # the checkpoint (and its giving back) after the turns
            await asyncio.gather(*list(store._tasks))

    async def go() -> int:
        await store.save("s", {"turns": 0})
        model = [f"m{i}" for i in range(20)]
        await store.save_turn("s", {"model": [*model, result]}, turn(0, result))
        await settle()
        after_big = _file_bytes(path)
        for i in range(1, 11):
            model.append(f"m{i}")
            await store.save_turn("s", {"model": [*model, result]}, turn(i))
        await settle()
        assert await store.load("s") == {"model": [*model, result]}
        return after_big

    after_big = asyncio.run(go())
    after = _file_bytes(path)
    store.close()
    assert 2_000_000 < after_big and after - after_big < 1_000_000, (after_big, after)


@pytest.mark.slow
def test_postgres_table_does_not_grow_a_copy_a_turn_after_a_large_state(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """PostgreSQL keeps one state a session, but a replaced state is a dead row version
    until a vacuum: the store vacuums ``acp_sessions`` itself once enough states were
    replaced (``VACUUM_AFTER``), so ten turns of a session whose state holds a 2 MB tool
    result grow its tables by a few copies, not ten (before: 20 MB until autovacuum)."""
    import psycopg

    store = make("postgres", request, tmp_path)
    result = os.urandom(1_000_000).hex()  # does not compress (TOAST would)

    async def size() -> int:
        async with await psycopg.AsyncConnection.connect(store._url, autocommit=True) as c:
            cur = await c.execute("SELECT pg_total_relation_size('acp_sessions')")
            row = await cur.fetchone()
            return int(row[0]) if row else 0

    async def go() -> None:
        await store.save("s", {"turns": 0})
        model = [f"m{i}" for i in range(20)]
        await store.save_turn("s", {"model": [*model, result]}, turn(0, result))
        before = await size()
        for i in range(1, 11):
            model.append(f"m{i}")
            await store.save_turn("s", {"model": [*model, result]}, turn(i))
            vacuum = getattr(store, "_vacuum", None)
            if vacuum is not None:
                await vacuum  # the background vacuum, when one ran
        assert await store.load("s") == {"model": [*model, result]}
        grown = await size() - before
        assert grown < 12_000_000, grown
        await store.aclose()

    asyncio.run(go())


def model_message(i: int, text: str) -> dict[str, Any]:
    """About a pydantic-ai message as model/history.py keeps it (JSON)."""
    return {
        "kind": "request" if i % 2 == 0 else "response",
        "parts": [{"part_kind": "text", "content": text, "timestamp": "2026-12-06T17:00:00Z"}],
        "provider_response_id": f"r{i}",
    }


def _written() -> int:
    """Bytes this process has written (``/proc/self/io``'s ``wchar``: every thread's)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/self/io")
def test_sqlite_ten_turns_after_a_5_mb_tool_result_add_and_write_under_1_mb(
    tmp_path: Path,
) -> None:
    """Issue 36 item 1 on SQLite: after a turn whose model history takes in a 5 MB tool
    result, the next ten turns add less than 1 MB to the file and write less than 1 MB
    (WAL and checkpoints): the result is a row of ``model_messages`` written once, the
    state holding the count of the model's messages.  Before (schema 6): every turn
    wrote the whole state again, 5 MB a turn (50 MB), the file held by giving pages back."""
    path = tmp_path / "s.db"
    store = SqliteSessionStore(path)
    result = os.urandom(2_500_000).hex()  # 5 MB, incompressible

    async def settle() -> None:
        while store._tasks:  # the checkpoint (and its giving back) after the turns
            await asyncio.gather(*list(store._tasks))

    async def go() -> tuple[int, int]:
        model: list[dict[str, Any]] = []
        await store.save("s", {"turns": 0, "model_history": model})
        for i in range(20):
            model.append(model_message(i, f"short {i}"))
            await store.save_turn("s", {"turns": i, "model_history": model}, turn(i))
        model.append(model_message(20, result))
        await store.save_turn("s", {"turns": 20, "model_history": model}, turn(20, result))
        await settle()
        after_big, wrote = _file_bytes(path), _written()
        for i in range(21, 31):
            model.append(model_message(i, f"short {i}"))
            await store.save_turn("s", {"turns": i, "model_history": model}, turn(i))
        await settle()
        wrote = _written() - wrote
        assert await store.load("s") == {"turns": 30, "model_history": model}
        return after_big, wrote

    after_big, wrote = asyncio.run(go())
    after = _file_bytes(path)
    store.close()
    assert 5_000_000 < after_big and after - after_big < 1_000_000, (after_big, after)
    assert wrote < 1_000_000, wrote
    db = sqlite3.connect(path)
    # the result once, as a model message (and once in the turn's frame)
    rows = db.execute("SELECT count(*), max(length(message)) FROM model_messages").fetchone()
    assert rows[0] == 31 and rows[1] > 5_000_000, rows
    db.close()


@pytest.mark.slow
def test_postgres_ten_turns_after_a_5_mb_tool_result_add_under_1_mb(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Issue 36 item 1 on PostgreSQL: after a turn whose model history takes in a 5 MB tool
    result, the next ten turns grow the store's tables by less than 1 MB, with no vacuum:
    the result is a row of ``acp_model_messages`` written once, and what each turn
    replaces (``acp_sessions.state``) is small.  Before (schema 3): each turn replaced
    the whole state, leaving a dead 5 MB version a turn until a vacuum (+10.9 MB)."""
    import psycopg

    store = make("postgres", request, tmp_path)
    result = os.urandom(2_500_000).hex()  # 5 MB; does not compress (TOAST would)

    async def size() -> int:
        async with await psycopg.AsyncConnection.connect(store._url, autocommit=True) as c:
            cur = await c.execute(
                "SELECT sum(pg_total_relation_size(oid)) FROM pg_class "
                "WHERE relkind = 'r' AND relname LIKE 'acp%%'"
            )
            row = await cur.fetchone()
            return int(row[0]) if row else 0

    async def go() -> None:
        model: list[dict[str, Any]] = []
        await store.save("s", {"turns": 0, "model_history": model})
        for i in range(20):
            model.append(model_message(i, f"short {i}"))
            await store.save_turn("s", {"turns": i, "model_history": model}, turn(i))
        model.append(model_message(20, result))
        await store.save_turn("s", {"turns": 20, "model_history": model}, turn(20, result))
        vacuum = getattr(store, "_vacuum", None)
        if vacuum is not None:
            await vacuum
        before = await size()
        assert before > 5_000_000, before
        for i in range(21, 31):
            model.append(model_message(i, f"short {i}"))
            await store.save_turn("s", {"turns": i, "model_history": model}, turn(i))
        vacuum = getattr(store, "_vacuum", None)
        if vacuum is not None:
            await vacuum
        grown = await size() - before
        assert await store.load("s") == {"turns": 30, "model_history": model}
        page, _ = await store.list_sessions(None, 10)
        assert page == [("s", {"turns": 30, "model_history": model})]
        await store.aclose()
        assert grown < 1_000_000, grown

    asyncio.run(go())


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def test_a_failed_turn_keeps_none_of_its_model_messages(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn's model messages, its state and its history rows commit together: a turn
    that fails after its messages were inserted leaves the session as the last saved turn
    left it (no half turn), and the next turn, which takes the same messages again, is
    saved whole (what the store remembered of the session's rows went with the failure)."""
    store = make(kind, request, tmp_path)
    model = [model_message(i, f"m{i}") for i in range(6)]
    fail = [True]
    if kind == "sqlite":
        from runtime.sessions import store_sqlite_turns

        insert = store_sqlite_turns.insert_models

        def failing(db: Any, sid: str, messages: list[bytes], digests: list[bytes]) -> None:
            insert(db, sid, messages, digests)
            if fail[0]:
                raise sqlite3.IntegrityError("disk trouble")

        monkeypatch.setattr(store_sqlite_turns, "insert_models", failing)
    else:
        sync = store._sync_models

        async def failing_sync(*args: Any) -> Any:
            rows = await sync(*args)
            if fail[0]:
                raise RuntimeError("connection trouble")
            return rows

        monkeypatch.setattr(store, "_sync_models", failing_sync)

    async def go() -> None:
        fail[0] = False
        await store.save("s", {"turns": 0, "model_history": model[:2]})
        assert await store.save_turn("s", {"turns": 1, "model_history": model[:4]}, turn(1))
        fail[0] = True
        with pytest.raises(Exception, match="trouble"):
            await store.save_turn("s", {"turns": 2, "model_history": model[:6]}, turn(2))
        assert await store.load("s") == {"turns": 1, "model_history": model[:4]}
        assert list(await store.history("s")) == turn(1)
        fail[0] = False
        assert await store.save_turn("s", {"turns": 2, "model_history": model[1:6]}, turn(2))
        assert await store.load("s") == {"turns": 2, "model_history": model[1:6]}
        assert list(await store.history("s")) == [*turn(1), *turn(2)]
        if kind == "postgres":
            await store.aclose()

    asyncio.run(go())
    if kind == "sqlite":
        store.close()
        db = sqlite3.connect(tmp_path / "s.db")
        assert db.execute("SELECT count(*) FROM model_messages").fetchone() == (5,)
        db.close()


def _copies(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT count(*) FROM history WHERE state IS NOT NULL").fetchone()[0])
    finally:
        db.close()


def test_sqlite_small_state_copies_go_together_and_all_by_close(tmp_path: Path) -> None:
    """A small state's old copies are let go together (store_sqlite_turns.RELEASE_ROWS),
    not a statement a turn: while the store is open at most that many wait; closing it
    leaves one a session; every load meanwhile reads the latest; a reopened store too."""
    from runtime.sessions import store_sqlite_turns as turns

    path = tmp_path / "s.db"
    store = SqliteSessionStore(path)
    seen: list[int] = []

    async def go() -> None:
        await store.save("s", {"turns": 0})
        for i in range(1, 3 * turns.RELEASE_ROWS):
            assert await store.save_turn("s", {"turns": i}, turn(i)) is True
            assert await store.load("s") == {"turns": i}
            seen.append(_copies(path))

    asyncio.run(go())
    assert max(seen) <= turns.RELEASE_ROWS + 1, seen
    assert min(seen[turns.RELEASE_ROWS :]) < max(seen), seen  # they did go, during the run
    store.close()
    assert _copies(path) == 1
    again = SqliteSessionStore(path)
    assert asyncio.run(again.load("s")) == {"turns": 3 * turns.RELEASE_ROWS - 1}
    again.close()


def test_sqlite_a_failed_commit_lets_no_copy_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit that lets the waiting copies go fails after doing so: rolled back (the
    turn is written again by the worker thread's connection), every load reads the
    latest state, and the copies that commit had let go still wait: closing the store
    leaves one (none left over on an old row)."""
    from runtime.sessions import store_sqlite_turns as turns

    path = tmp_path / "s.db"
    store = SqliteSessionStore(path)
    real = turns.TurnWriter._releasing
    failing = {"left": 1, "fired": 0}

    def releasing(self: Any, db: sqlite3.Connection, released: list[tuple[int, int]]) -> int:
        went = real(self, db, released)
        if failing["left"] and went >= 0:
            failing["left"] -= 1
            failing["fired"] += 1
            raise sqlite3.DatabaseError("database disk image is malformed (planted)")
        return went

    monkeypatch.setattr(turns.TurnWriter, "_releasing", releasing)
    last = 3 * turns.RELEASE_ROWS

    async def go() -> None:
        await store.save("s", {"turns": 0})
        for i in range(1, last + 1):
            assert await store.save_turn("s", {"turns": i}, turn(i)) is True
            assert await store.load("s") == {"turns": i}

    asyncio.run(go())
    assert failing["fired"] == 1, failing
    store.close()
    assert _copies(path) == 1
    again = SqliteSessionStore(path)
    assert asyncio.run(again.load("s")) == {"turns": last}
    again.close()
