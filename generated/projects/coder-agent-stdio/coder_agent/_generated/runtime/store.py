"""Session persistence: the ``SessionStore`` interface and its embedded SQLite default.

What is stored per session (enough to rebuild it in a fresh process and to replay it):

* ``state``: a JSON object the runtime owns — the raw config (``config_raw``), the
  conversation state name, the turn count; opaque to the store;
* ``history``: the ordered list of wire messages of the session that a client needs
  to rebuild its view on ``session/load`` (the user's prompts as ``user_message_chunk``
  updates and every ``session/update`` the agent sent), appended in batches;
* a ``lease``: which connection owns the session now (``"<replica>/<connection>"``) and
  until when; one owner at a time, so two connections never run turns of one session
  at once (see sessions.py).  Times are ``time.time()``.

``SqliteSessionStore`` (the default, stdlib ``sqlite3``, no server) keeps everything in
one file in WAL mode with ``synchronous=NORMAL``; every call runs in a worker thread
(``asyncio.to_thread``) behind one lock, so the event loop never blocks on the disk.
A write is durable when the awaited call returns: the HTTP transport saves a session
before it answers the request that changed it, so an acknowledged change survives a
crash or restart.

Replicas behind a load balancer: write a second implementation of the same methods on
a shared server and pass it to ``serve_http(..., store=...)``.  With
Postgres: one ``sessions(id text primary key, state jsonb, updated timestamptz)`` table
(``INSERT .. ON CONFLICT (id) DO UPDATE``) and one ``history(session_id, seq bigserial,
message jsonb)`` table read ``ORDER BY seq``; with Redis: ``SET acp:s:<id>`` for the
state and ``RPUSH``/``LRANGE acp:h:<id>`` for the history.  Any replica can then serve
``session/load`` / ``session/resume`` for a session created on another one; a
connection's SSE streams stay on the replica that holds the connection (route on the
``Acp-Connection-Id`` header or an affinity cookie), while sessions move freely.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Protocol

import orjson


class SessionStore(Protocol):
    async def save(self, session_id: str, state: dict[str, Any]) -> None: ...
    async def load(self, session_id: str) -> dict[str, Any] | None: ...
    async def append_history(self, session_id: str, messages: list[bytes]) -> None: ...
    async def history(self, session_id: str) -> list[bytes]: ...
    async def delete(self, session_id: str) -> None: ...
    async def save_turn(
        self,
        session_id: str,
        state: dict[str, Any],
        messages: list[bytes],
        *,
        owner: str | None = None,
    ) -> bool:
        """``append_history`` + ``save`` as one atomic write (one per finished turn).
        With ``owner``: only while ``owner`` holds the session's lease row (expired or
        not), checked in the same transaction; else nothing is written and it returns
        False (another owner took the session over: the turn is not acknowledged)."""
        ...

    async def acquire(
        self, session_id: str, owner: str, ttl: float, *, take_over: bool = False
    ) -> str | None:
        """Take the session's lease for ``owner`` until now+ttl. Returns None when ``owner``
        now holds it; otherwise the id of the owner that holds an unexpired lease (nothing
        changed). With take_over=True it always succeeds; the previous owner finds out on
        renew."""
        ...

    async def renew(self, session_id: str, owner: str, ttl: float) -> bool:
        """Extend ``owner``'s lease; False when ``owner`` does not hold it now (another
        owner took it over, or the session was deleted): stop the session's turn."""
        ...

    async def release(self, session_id: str, owner: str) -> None:
        """Drop the lease if ``owner`` holds it."""
        ...

    async def list_sessions(
        self, cursor: str | None, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        """(session_id, state) pairs in creation order after ``cursor``, and the next
        cursor or None.  A cursor this store did not hand out raises ValueError."""
        ...


_CURSOR_DIGITS = 18  # a cursor is a 64-bit sequence number


def cursor_seq(cursor: str | None) -> int:
    """The sequence number a ``list_sessions`` cursor stands for (every store's cursors are
    decimal sequence numbers); ValueError for one no store hands out."""
    if cursor is None:
        return 0
    if not cursor.isdigit() or len(cursor) > _CURSOR_DIGITS:
        raise ValueError("not a cursor this store handed out")
    return int(cursor)


class MemorySessionStore:
    """In-process store (tests, or when nothing must survive a restart)."""

    def __init__(self) -> None:
        self._state: dict[str, bytes] = {}
        self._history: dict[str, list[bytes]] = {}
        self._created: dict[str, int] = {}  # creation sequence (list order, cursors)
        self._seq = 0
        self._leases: dict[str, tuple[str, float]] = {}

    async def save(self, session_id: str, state: dict[str, Any]) -> None:
        self._state[session_id] = orjson.dumps(state)
        if session_id not in self._created:
            self._seq += 1
            self._created[session_id] = self._seq

    async def load(self, session_id: str) -> dict[str, Any] | None:
        raw = self._state.get(session_id)
        return orjson.loads(raw) if raw is not None else None

    async def append_history(self, session_id: str, messages: list[bytes]) -> None:
        self._history.setdefault(session_id, []).extend(messages)

    async def history(self, session_id: str) -> list[bytes]:
        return list(self._history.get(session_id, ()))

    async def save_turn(
        self,
        session_id: str,
        state: dict[str, Any],
        messages: list[bytes],
        *,
        owner: str | None = None,
    ) -> bool:
        if owner is not None and (self._leases.get(session_id) or ("",))[0] != owner:
            return False
        await self.append_history(session_id, messages)
        await self.save(session_id, state)
        return True

    async def delete(self, session_id: str) -> None:
        self._state.pop(session_id, None)
        self._history.pop(session_id, None)
        self._created.pop(session_id, None)
        self._leases.pop(session_id, None)

    async def acquire(
        self, session_id: str, owner: str, ttl: float, *, take_over: bool = False
    ) -> str | None:
        now = time.time()
        held = self._leases.get(session_id)
        if held is not None and held[0] != owner and held[1] > now and not take_over:
            return held[0]
        self._leases[session_id] = (owner, now + ttl)
        return None

    async def renew(self, session_id: str, owner: str, ttl: float) -> bool:
        held = self._leases.get(session_id)
        if held is None or held[0] != owner:
            return False
        self._leases[session_id] = (owner, time.time() + ttl)
        return True

    async def release(self, session_id: str, owner: str) -> None:
        held = self._leases.get(session_id)
        if held is not None and held[0] == owner:
            del self._leases[session_id]

    async def list_sessions(
        self, cursor: str | None, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        after = cursor_seq(cursor)
        ordered = sorted((seq, sid) for sid, seq in self._created.items() if seq > after)
        page = ordered[: max(limit, 1)]
        out = [(sid, orjson.loads(self._state[sid])) for _, sid in page]
        more = len(ordered) > len(page)
        return out, (str(page[-1][0]) if more else None)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, state BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS history (
    session_id TEXT NOT NULL, seq INTEGER PRIMARY KEY AUTOINCREMENT, message BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS history_by_session ON history (session_id, seq);
"""

# Schema versions (PRAGMA user_version); each step runs once, in one transaction, on a
# database older than it.  1: leases, and the creation order session/list pages by.
_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS leases (
        session_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires REAL NOT NULL);
    CREATE TABLE IF NOT EXISTS session_order (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL UNIQUE);
    INSERT OR IGNORE INTO session_order (session_id) SELECT id FROM sessions ORDER BY rowid;
    """,
)


class SqliteSessionStore:
    def __init__(self, path: str | Path, *, busy_timeout: float = 5.0) -> None:
        """``busy_timeout``: how long one call waits for a lock held by another process
        before it fails (the HTTP transport then retries twice, see ``_durably``)."""
        self.path = str(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=busy_timeout
        )
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self._migrate()

    def _migrate(self) -> None:
        """Bring an existing database up to ``len(_MIGRATIONS)`` (another process may be
        doing the same: the version is read again under the write lock)."""
        while True:
            (version,) = self._db.execute("PRAGMA user_version").fetchone()
            if version >= len(_MIGRATIONS):
                return
            self._db.execute("BEGIN IMMEDIATE")
            try:
                (version,) = self._db.execute("PRAGMA user_version").fetchone()
                if version < len(_MIGRATIONS):
                    for stmt in _MIGRATIONS[version].split(";"):
                        if stmt.strip():
                            self._db.execute(stmt)
                    self._db.execute(f"PRAGMA user_version = {version + 1}")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _run(self, fn: Any, *args: Any) -> Any:
        with self._lock:
            return fn(*args)

    def _save(self, sid: str, state: bytes) -> None:
        self._db.execute(
            "INSERT INTO sessions (id, state) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET state = excluded.state",
            (sid, state),
        )
        self._db.execute("INSERT OR IGNORE INTO session_order (session_id) VALUES (?)", (sid,))

    def _save_new(self, sid: str, state: bytes) -> None:
        self._db.execute("BEGIN")
        try:
            self._save(sid, state)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _load(self, sid: str) -> bytes | None:
        row = self._db.execute("SELECT state FROM sessions WHERE id = ?", (sid,)).fetchone()
        return row[0] if row else None

    def _append(self, sid: str, messages: list[bytes]) -> None:
        self._db.execute("BEGIN")
        try:
            self._db.executemany(
                "INSERT INTO history (session_id, message) VALUES (?, ?)",
                [(sid, m) for m in messages],
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _turn(self, sid: str, state: bytes, messages: list[bytes], owner: str | None) -> bool:
        # IMMEDIATE: the write lock first, so no other process moves the lease between
        # the check and the write
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if owner is not None:
                row = self._db.execute(
                    "SELECT owner FROM leases WHERE session_id = ?", (sid,)
                ).fetchone()
                if row is None or row[0] != owner:
                    self._db.execute("ROLLBACK")
                    return False
            if messages:
                self._db.executemany(
                    "INSERT INTO history (session_id, message) VALUES (?, ?)",
                    [(sid, m) for m in messages],
                )
            self._save(sid, state)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return True

    def _history(self, sid: str) -> list[bytes]:
        rows = self._db.execute(
            "SELECT message FROM history WHERE session_id = ? ORDER BY seq", (sid,)
        ).fetchall()
        return [bytes(r[0]) for r in rows]

    def _delete(self, sid: str) -> None:
        self._db.execute("BEGIN")
        try:
            self._db.execute("DELETE FROM sessions WHERE id = ?", (sid,))
            self._db.execute("DELETE FROM history WHERE session_id = ?", (sid,))
            self._db.execute("DELETE FROM session_order WHERE session_id = ?", (sid,))
            self._db.execute("DELETE FROM leases WHERE session_id = ?", (sid,))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

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

    def _list(self, after: int, limit: int) -> list[tuple[int, str, bytes]]:
        rows = self._db.execute(
            "SELECT o.seq, s.id, s.state FROM session_order o JOIN sessions s ON s.id = o.session_id "
            "WHERE o.seq > ? ORDER BY o.seq LIMIT ?",
            (after, limit),
        ).fetchall()
        return [(int(r[0]), str(r[1]), bytes(r[2])) for r in rows]

    async def save(self, session_id: str, state: dict[str, Any]) -> None:
        await asyncio.to_thread(self._run, self._save_new, session_id, orjson.dumps(state))

    async def load(self, session_id: str) -> dict[str, Any] | None:
        raw = await asyncio.to_thread(self._run, self._load, session_id)
        return orjson.loads(raw) if raw is not None else None

    async def append_history(self, session_id: str, messages: list[bytes]) -> None:
        if messages:
            await asyncio.to_thread(self._run, self._append, session_id, messages)

    async def history(self, session_id: str) -> list[bytes]:
        result: list[bytes] = await asyncio.to_thread(self._run, self._history, session_id)
        return result

    async def save_turn(
        self,
        session_id: str,
        state: dict[str, Any],
        messages: list[bytes],
        *,
        owner: str | None = None,
    ) -> bool:
        saved: bool = await asyncio.to_thread(
            self._run, self._turn, session_id, orjson.dumps(state), messages, owner
        )
        return saved

    async def delete(self, session_id: str) -> None:
        await asyncio.to_thread(self._run, self._delete, session_id)

    async def acquire(
        self, session_id: str, owner: str, ttl: float, *, take_over: bool = False
    ) -> str | None:
        held: str | None = await asyncio.to_thread(
            self._run, self._acquire, session_id, owner, ttl, take_over
        )
        return held

    async def renew(self, session_id: str, owner: str, ttl: float) -> bool:
        ok: bool = await asyncio.to_thread(self._run, self._renew, session_id, owner, ttl)
        return ok

    async def release(self, session_id: str, owner: str) -> None:
        await asyncio.to_thread(self._run, self._release, session_id, owner)

    async def list_sessions(
        self, cursor: str | None, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        after = cursor_seq(cursor)
        limit = max(limit, 1)
        rows = await asyncio.to_thread(self._run, self._list, after, limit + 1)
        page = rows[:limit]
        out = [(sid, orjson.loads(state)) for _, sid, state in page]
        return out, (str(page[-1][0]) if len(rows) > limit else None)

    def close(self) -> None:
        with self._lock:
            self._db.close()


def open_store(url: str | None = None) -> SessionStore:
    """The store a URL names (``ACP_SESSION_STORE`` when ``url`` is None):

    * ``sqlite:///relative.db``, ``sqlite:////absolute/path.db``, ``sqlite:///:memory:``;
      no URL: SQLite at ``$ACP_SESSION_DB``, else ``sessions.db``;
    * ``memory:``: in process, nothing survives a restart;
    * ``postgresql://...`` (or ``postgres://``): PostgreSQL, shared by replicas
      (store_postgres.py; needs ``psycopg[binary,pool]``).
    """
    import os

    url = url if url is not None else os.environ.get("ACP_SESSION_STORE", "")
    if not url:
        return SqliteSessionStore(os.environ.get("ACP_SESSION_DB") or "sessions.db")
    if url == "memory:":
        return MemorySessionStore()
    if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        return SqliteSessionStore(url[len("sqlite:///") :])
    if url.startswith("sqlite:"):
        raise ValueError(
            f"ACP_SESSION_STORE={url!r}: give a file: sqlite:///relative.db or "
            "sqlite:////absolute/path.db"
        )
    if url.startswith(("postgresql://", "postgres://")):
        # loaded by name: HTTP agents ship it (with the `postgres` extra: psycopg)
        import importlib

        try:
            postgres = importlib.import_module(".store_postgres", __package__)
        except ModuleNotFoundError as exc:
            raise ValueError(
                f"ACP_SESSION_STORE: the PostgreSQL store needs {exc.name!r} "
                "(HTTP agents ship it; install the project's `postgres` extra)"
            ) from None
        store: SessionStore = postgres.PostgresSessionStore(url)
        return store
    scheme = url.split(":", 1)[0]
    raise ValueError(
        f"ACP_SESSION_STORE: unknown store {scheme!r}; use sqlite:///path.db, memory: "
        "or postgresql://user@host/db"
    )
