"""The default session store: embedded SQLite (stdlib ``sqlite3``, no server); the
interface it implements: ``store.SessionStore``.

``SqliteSessionStore`` (the default, stdlib ``sqlite3``, no server) keeps everything in
one file in WAL mode with ``synchronous=NORMAL``.  A write is durable when the awaited
call returns: the runtime saves a turn before it answers the prompt, so an acknowledged
turn survives a crash or restart.  Finished turns are group-committed: every turn queued
by any session until the next pass of the event loop is written in one transaction, and
each ``save_turn`` returns once that transaction commits (while one session at a time
is busy, its turn commits at once, in the pass of the loop it ends).  A small group commits on the
event loop (a WAL commit without fsync costs less than a hop to a thread); a large one,
and every other call, runs in a worker thread, so the event loop never waits on a lock
or copies megabytes.  A session's state is kept once, replaced by each turn (see
``store_sqlite_schema.STATE``), but for a model's message history: a row a message, a
turn inserting only those it added (``store_sqlite_turns.sync_models``).  History is
bounded per session (``max_history_bytes``, which counts the state too, /
``max_history_turns``: whole oldest turns go first; replay then starts at the oldest kept
turn's prompt); deleted sessions, and a large state replaced, give their pages back to
the file system.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from .store_common import (
    DEFAULT_HISTORY_BYTES,
    DEFAULT_HISTORY_TURNS,
    FROM_ENV,
    Limit,
    cursor_seq,
    env_limit,
    join_state,
    model_keys,
    private_file,
    split_state,
    unjoined,
)
from .store_sqlite_schema import (
    MODEL_ROWS,
    SCHEMA,
    STATE,
    last_turn,
    migrate,
    model_messages,
)
from .store_sqlite_turns import Turn, TurnWriter, sync_models

log = logging.getLogger("acp.runtime.store")


INLINE_BYTES = 256 * 1024
"""A group of queued turns up to this many bytes commits on the event loop (a WAL commit
with ``synchronous=NORMAL`` writes to the OS cache, no fsync: cheaper than a thread hop);
a larger group commits in a worker thread, so the event loop never copies megabytes."""

CHECKPOINT_BYTES = 4 * 1024 * 1024
"""After this many bytes committed, a WAL checkpoint runs in a thread once the turns are
answered, on a connection of its own (see ``_passive`` and ``_restart``: PASSIVE while
turns go on, then a short RESTART; no connection checkpoints inside a commit: a checkpoint fsyncs
and copies every page again, which a turn's answer need not wait for)."""

RESTART_TRIES = 50
RESTART_PAUSE = 0.001
"""How often, and how far apart (s), a checkpoint's RESTART tries again while another
process's reader or writer stands in its way (see ``_restart``)."""

WORKER_CACHE = 16 * 1024 * 1024
"""The worker-thread connection's page cache (bytes): room for a large turn's pages."""

_PAGE = 4096

FREE_KEEP = 256 * 1024
"""Free pages (bytes) a checkpoint leaves in the file for the next writes; past that it
gives them back to the file system first (see ``_give_back``)."""


class SqliteSessionStore:
    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout: float = 5.0,
        max_history_bytes: Limit = FROM_ENV,
        max_history_turns: Limit = FROM_ENV,
        inline_bytes: int = INLINE_BYTES,
    ) -> None:
        """``busy_timeout``: how long one call waits for a lock held by another process
        before it fails (the HTTP transport then retries twice, see ``_durably``).

        ``max_history_bytes`` / ``max_history_turns``: the history (and, for the bytes,
        the state) kept per session
        (``$ACP_HISTORY_MAX_BYTES``, default 256 MiB; ``$ACP_HISTORY_MAX_TURNS``, default
        100000; None: unbounded).  When a turn takes a session past either, its oldest whole
        turns are deleted until it holds at most 3/4 of the bound (the latest turn is
        always kept, however large); ``session/load`` then replays the turns kept, from
        the first kept turn's prompt on.  ``inline_bytes``: see ``INLINE_BYTES``."""
        self.path = str(path)
        self.max_history_bytes = env_limit(
            max_history_bytes, "ACP_HISTORY_MAX_BYTES", DEFAULT_HISTORY_BYTES
        )
        self.max_history_turns = env_limit(
            max_history_turns, "ACP_HISTORY_MAX_TURNS", DEFAULT_HISTORY_TURNS
        )
        self.inline_bytes = inline_bytes
        self._lock = threading.Lock()  # the worker-thread connection, one call at a time
        private_file(self.path)  # 0600 in a 0700 folder: conversations and file contents
        self._db = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=busy_timeout
        )
        with self._lock:
            # new files only (an existing one keeps its mode): free pages go back to the
            # file system on delete (``PRAGMA incremental_vacuum``)
            self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA journal_size_limit=16777216")
            # no connection checkpoints in a commit (an fsync, and the copy of every
            # page of a large turn, before the turn is answered): see CHECKPOINT_BYTES
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            # a large turn's pages stay in memory until its commit (the default 2 MB
            # cache spills a 4 MB turn to the WAL page by page, then writes it again)
            self._db.execute(f"PRAGMA cache_size={-WORKER_CACHE // 1024}")
            self._db.executescript(SCHEMA)
            if migrate(self._db) < MODEL_ROWS:
                # the state copies the upgrade dropped (schema 6), the states it cut
                # (schema 7): their pages back to the file system (auto_vacuum files;
                # any other reuses them for what comes next)
                self._db.executescript("PRAGMA incremental_vacuum")
        # the event loop's own connection: never waits for a lock (busy: the group goes
        # to the worker thread instead) and never checkpoints (see CHECKPOINT_BYTES)
        self._fast = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=0
        )
        self._fast.execute("PRAGMA synchronous=NORMAL")
        self._fast.execute("PRAGMA wal_autocheckpoint=0")
        self._fast.execute("PRAGMA journal_size_limit=16777216")  # per connection
        self._queue: list[Turn] = []
        self._flushing = False  # a group is scheduled or being written
        self._pass_done = False  # a turn committed at once in this pass of the loop
        self._alone = False  # the last group written held one turn
        self._scheduled = False  # a group waits for the next pass of the loop
        self._settle: list[asyncio.Future[None]] = []  # settled() callers
        self._unchecked = 0  # bytes committed since the last checkpoint
        self._checkpointing = False
        self._hold = False  # a checkpoint's RESTART runs: every group goes to the thread
        self._tasks: set[asyncio.Task[None]] = set()
        self._writer = TurnWriter(self._fast, self.max_history_bytes, self.max_history_turns)
        self._ckpt: sqlite3.Connection | None = None  # the checkpoints' own connection
        self._ckpt_lock = threading.Lock()

    def _run(self, fn: Any, *args: Any) -> Any:
        with self._lock:
            return fn(*args)

    def _save(self, sid: str, state: bytes, model: list[bytes] | None) -> None:
        # the state kept once (see STATE): the history row that held it lets it go; the
        # session's row holds it, newer than every history row written so far (hseq): load
        # reads it until a later turn's row takes it over
        self._db.execute(
            "UPDATE history SET state = NULL WHERE session_id = ?1 AND state IS NOT NULL "
            "AND seq > coalesce((SELECT hseq FROM sessions WHERE id = ?1), 0)",
            (sid,),
        )
        self._db.execute(
            "INSERT INTO sessions (id, state, hseq) VALUES (?1, ?2, coalesce("
            "(SELECT max(seq) FROM history WHERE session_id = ?1), 0)) "
            "ON CONFLICT(id) DO UPDATE SET state = excluded.state, hseq = excluded.hseq",
            (sid, state),
        )
        self._db.execute("INSERT OR IGNORE INTO session_order (session_id) VALUES (?)", (sid,))
        rows = sync_models(self._db, sid, model, model_keys(model), None)
        self._writer.kept_models(sid, rows, known=False)

    def _save_new(self, sid: str, state: bytes, model: list[bytes] | None) -> None:
        self._db.execute("BEGIN")
        try:
            self._save(sid, state, model)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _load(self, sid: str) -> dict[str, Any] | None:
        self._db.execute("BEGIN")  # the state and its model messages of one commit
        try:
            row = self._db.execute(
                f"SELECT {STATE} FROM sessions s WHERE s.id = ?", (sid,)
            ).fetchone()
            messages = model_messages(self._db, sid) if row else []
        finally:
            self._db.execute("COMMIT")
        return join_state(row[0], messages) if row else None

    def _append(self, sid: str, messages: list[bytes]) -> None:
        if not messages:
            return
        size = sum(map(len, messages))
        self._db.execute("BEGIN")
        try:
            turn, total = last_turn(self._db, sid)
            self._db.executemany(
                "INSERT INTO history (session_id, message, turn, size, total) VALUES (?, ?, ?, ?, ?)",
                [(sid, m, turn + 1, len(m), total + size) for m in messages],
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _history(self, sid: str) -> list[bytes]:
        rows = self._db.execute(
            "SELECT h.message, h.at, b.data, h.parts FROM history h "
            "LEFT JOIN blobs b ON b.id = h.blob "
            "WHERE h.session_id = ? AND h.size > 0 ORDER BY h.seq",
            (sid,),
        ).fetchall()
        out: list[bytes] = []
        for m, at, data, parts in rows:
            row = bytes(m) if data is None else b"".join((m[:at], data, m[at:]))
            out.extend(unjoined(row, parts))  # a small turn's messages in one row
        return out

    def _delete(self, sid: str) -> None:
        self._db.execute("BEGIN")
        try:
            self._db.execute("DELETE FROM sessions WHERE id = ?", (sid,))
            self._db.execute("DELETE FROM history WHERE session_id = ?", (sid,))
            self._db.execute("DELETE FROM session_order WHERE session_id = ?", (sid,))
            self._db.execute("DELETE FROM leases WHERE session_id = ?", (sid,))
            self._db.execute("DELETE FROM blobs WHERE session_id = ?", (sid,))
            self._db.execute("DELETE FROM model_messages WHERE session_id = ?", (sid,))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        # give the freed pages back to the file system (auto_vacuum=INCREMENTAL files)
        self._db.executescript("PRAGMA incremental_vacuum")  # steps until done (execute: 1 page)

    def _passive(self) -> None:
        # PASSIVE, on a connection of its own: the copy and its fsyncs while writers go on
        with self._ckpt_lock:
            if self._ckpt is None:
                self._ckpt = sqlite3.connect(
                    self.path, check_same_thread=False, isolation_level=None, timeout=0
                )
                self._ckpt.execute("PRAGMA wal_autocheckpoint=0")
            self._ckpt.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def _restart(self) -> None:
        # Then RESTART, so that the next write starts the WAL from its beginning (without
        # it, under a steady load, the WAL grew without end).  It copies what was committed
        # since the PASSIVE (little: the bulk is copied) under the worker connection's lock
        # (``_hold`` sends every group there meanwhile), so no writer of this store stands
        # in its way; another process's reader or writer may: then it tries again shortly,
        # and gives up after RESTART_TRIES (the next checkpoint tries again).
        with self._lock, self._ckpt_lock:
            if self._ckpt is None:
                return
            for _ in range(RESTART_TRIES):
                (busy, _, _) = self._ckpt.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
                if not busy:
                    return
                time.sleep(RESTART_PAUSE)

    def _vacuum(self) -> None:
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        self._db.execute("VACUUM")

    def _acquire(self, sid: str, owner: str, ttl: float, take_over: bool) -> str | None:
        self._db.execute("BEGIN IMMEDIATE")  # read and write under one write lock
        try:
            now = time.time()
            row = self._db.execute(
                "SELECT owner, expires FROM leases WHERE session_id = ?", (sid,)
            ).fetchone()
            if row is not None and row[0] != owner and row[1] > now and not take_over:
                self._db.execute("ROLLBACK")
                return str(row[0])
            self._db.execute(
                "INSERT INTO leases (session_id, owner, expires) VALUES (?, ?, ?) "
                "ON CONFLICT(session_id) DO UPDATE SET owner = excluded.owner, expires = excluded.expires",
                (sid, owner, now + ttl),
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return None

    def _renew(self, sid: str, owner: str, ttl: float) -> bool:
        cur = self._db.execute(
            "UPDATE leases SET expires = ? WHERE session_id = ? AND owner = ?",
            (time.time() + ttl, sid, owner),
        )
        return cur.rowcount == 1

    def _release(self, sid: str, owner: str) -> None:
        self._db.execute("DELETE FROM leases WHERE session_id = ? AND owner = ?", (sid, owner))

    def _list(self, after: int, limit: int) -> list[tuple[int, str, dict[str, Any]]]:
        self._db.execute("BEGIN")  # each state and its model messages of one commit
        try:
            rows = self._db.execute(
                f"SELECT o.seq, s.id, {STATE} FROM session_order o "
                "JOIN sessions s ON s.id = o.session_id WHERE o.seq > ? ORDER BY o.seq LIMIT ?",
                (after, limit),
            ).fetchall()
            return [
                (int(r[0]), str(r[1]), join_state(bytes(r[2]), model_messages(self._db, r[1])))
                for r in rows
            ]
        finally:
            self._db.execute("COMMIT")

    # ---- turns: group commit ---------------------------------------------------------
    def _commit_in_thread(self, group: list[Turn]) -> list[Any]:
        with self._lock:
            return self._writer.commit_each(self._db, group)

    async def save_turn(
        self,
        session_id: str,
        state: dict[str, Any],
        messages: list[bytes],
        *,
        owner: str | None = None,
    ) -> bool:
        loop = asyncio.get_running_loop()
        rest, model = split_state(state)
        keys = model_keys(model)
        t = Turn(
            session_id,
            rest,
            messages,
            owner,
            loop.create_future(),
            model,
            keys,
            self._writer.model_new(session_id, keys, model) if model else 0,
        )
        self._queue.append(t)
        if not self._flushing:
            self._flushing = True
            if self._alone and not self._pass_done:
                # the last group held one turn (one busy session): commit at once, so the
                # answer leaves in the same write as the turn's updates, a pass earlier;
                # turns ending later in this pass of the loop wait for the next group
                self._pass_done = True
                loop.call_soon(self._new_pass)
                self._flush()
            else:
                # the turns queued until the next pass of the loop (other sessions' turns
                # ending in this one) join the same transaction
                self._scheduled = True
                loop.call_soon(self._flush)
        return await t.future

    def _new_pass(self) -> None:
        self._pass_done = False

    async def settled(self) -> None:
        """Return once the group of turns waiting for the next pass of the loop (if any)
        is written on the event loop and its callers resumed: a transport's writer that
        waits for this sends those turns' answers in the same write as their updates
        (a group that goes to the worker thread does not hold it)."""
        if self._scheduled:
            waiter = asyncio.get_running_loop().create_future()
            self._settle.append(waiter)
            await waiter

    def _flush(self) -> None:
        self._scheduled = False
        try:
            self._flush_group()
        finally:
            # after the turns' callers were answered: they resume first, then the waiters
            waiters, self._settle = self._settle, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def _flush_group(self) -> None:
        group, self._queue = self._queue, []
        self._alone = len(group) == 1
        size = sum(t.written for t in group)  # a large state goes to the thread too
        if size <= self.inline_bytes and not self._hold:
            try:
                results = self._commit_each_inline(group)
            except sqlite3.OperationalError:  # locked by another connection or process
                results = None
            if results is not None:
                self._answer(group, results)
                self._wrote(size, len(group))
                self._next()
                return
        self._spawn(self._flush_in_thread(group))

    def _commit_each_inline(self, group: list[Turn]) -> list[Any]:
        try:
            return self._writer.commit(self._fast, group)
        except sqlite3.OperationalError:
            raise  # busy: the worker thread waits for the lock instead
        except Exception:  # noqa: BLE001 - one bad turn: sort it out in the thread
            raise sqlite3.OperationalError("retry in the worker thread") from None

    async def _flush_in_thread(self, group: list[Turn]) -> None:
        try:
            results = await asyncio.to_thread(self._commit_in_thread, group)
        except BaseException as exc:  # cancelled (the loop is closing): callers hear of it
            self._answer(group, [RuntimeError(f"the turn was not saved: {exc!r}")] * len(group))
            self._flushing = False
            raise
        self._answer(group, results)
        self._wrote(sum(t.written for t in group), len(group))
        self._next()

    def _wrote(self, size: int, rows: int = 1) -> None:
        """Count what a commit added to the WAL, roughly (the bytes, a history leaf and an
        index leaf, and a leaf for each of ``rows``: the turns of a group, which share the
        history's last leaf, or the rows another call wrote); checkpoint past
        ``CHECKPOINT_BYTES``."""
        self._unchecked += size + _PAGE * (2 + rows)
        if self._unchecked >= CHECKPOINT_BYTES and not self._checkpointing:
            self._checkpointing = True
            self._unchecked = 0
            self._spawn(self._checkpoint())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _next(self) -> None:
        if self._queue:  # queued while this group was written: the next group
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        else:
            self._flushing = False

    @staticmethod
    def _answer(group: list[Turn], results: list[Any]) -> None:
        for t, r in zip(group, results, strict=True):
            if t.future.done():  # the caller was cancelled
                continue
            if isinstance(r, BaseException):
                t.future.set_exception(r)
            else:
                t.future.set_result(r)

    def _give_back(self) -> None:
        # a large state replaced (or a large row rewritten without its state) leaves the
        # pages it held free: past FREE_KEEP of them, they go back to the file system
        # (auto_vacuum=INCREMENTAL files; any other file reuses them), so a session's file
        # holds about what it keeps, not what it held at its largest
        (free,) = self._db.execute("PRAGMA freelist_count").fetchone()
        if free * _PAGE > FREE_KEEP:
            self._db.executescript(f"PRAGMA incremental_vacuum({free - FREE_KEEP // _PAGE})")

    async def _checkpoint(self) -> None:
        try:
            await asyncio.to_thread(self._run, self._give_back)
            await asyncio.to_thread(self._passive)
            self._hold = True
            try:
                await asyncio.to_thread(self._restart)
            finally:
                self._hold = False
        except Exception as exc:  # noqa: BLE001 - the next one tries again
            log.warning("session store: WAL checkpoint failed (%s)", exc)
        finally:
            self._checkpointing = False

    # ---- the other calls: in the worker thread ---------------------------------------
    async def save(self, session_id: str, state: dict[str, Any]) -> None:
        rest, model = split_state(state)
        await asyncio.to_thread(self._run, self._save_new, session_id, rest, model)
        self._wrote(len(rest) + sum(map(len, model or ())))

    async def load(self, session_id: str) -> dict[str, Any] | None:
        state: dict[str, Any] | None = await asyncio.to_thread(self._run, self._load, session_id)
        return state

    async def append_history(self, session_id: str, messages: list[bytes]) -> None:
        if messages:
            await asyncio.to_thread(self._run, self._append, session_id, messages)
            self._wrote(sum(map(len, messages)), len(messages))

    async def history(self, session_id: str) -> list[bytes]:
        result: list[bytes] = await asyncio.to_thread(self._run, self._history, session_id)
        return result

    async def delete(self, session_id: str) -> None:
        await asyncio.to_thread(self._run, self._delete, session_id)
        self._wrote(0, 5)

    async def acquire(
        self, session_id: str, owner: str, ttl: float, *, take_over: bool = False
    ) -> str | None:
        held: str | None = await asyncio.to_thread(
            self._run, self._acquire, session_id, owner, ttl, take_over
        )
        self._wrote(0)
        return held

    async def renew(self, session_id: str, owner: str, ttl: float) -> bool:
        ok: bool = await asyncio.to_thread(self._run, self._renew, session_id, owner, ttl)
        self._wrote(0)
        return ok

    async def release(self, session_id: str, owner: str) -> None:
        await asyncio.to_thread(self._run, self._release, session_id, owner)
        self._wrote(0)

    async def list_sessions(
        self, cursor: str | None, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        after = cursor_seq(cursor)
        limit = max(limit, 1)
        rows = await asyncio.to_thread(self._run, self._list, after, limit + 1)
        page = rows[:limit]
        out = [(sid, state) for _, sid, state in page]
        return out, (str(page[-1][0]) if len(rows) > limit else None)

    async def vacuum(self) -> None:
        """Rewrite the file without free pages (``VACUUM``; the file of a store created
        before auto_vacuum was on shrinks only this way).  Needs the file to itself for a
        moment: run it when no turn is being saved."""
        await asyncio.to_thread(self._run, self._vacuum)

    def close(self) -> None:
        with self._lock, self._ckpt_lock:
            with contextlib.suppress(sqlite3.Error):  # copies left stay small leftovers
                self._writer.release_now(self._fast)
            self._fast.close()
            self._db.close()
            if self._ckpt is not None:
                self._ckpt.close()
