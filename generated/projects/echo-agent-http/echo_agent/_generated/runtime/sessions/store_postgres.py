"""The session store on PostgreSQL (psycopg 3, async, a small connection pool), for several
replicas sharing sessions: ``ACP_SESSION_STORE=postgresql://user@host:5432/db``.

Same contract as the SQLite store (store.py): ``save``/``save_turn`` are durable when they
return; a turn's history rows and the session's state commit in one transaction, history read
back in sequence order; the lease (one owner per session) lives in the database, its expiry
on the database's clock (``now()``), so replicas with skewed clocks still agree.  The runtime
creates the tables and migrates them (``acp_schema`` holds the version; replicas starting
together serialize on an advisory lock).  Table names start with ``acp_``.

Outages: every call waits at most ``timeout`` seconds (``ACP_STORE_TIMEOUT``, default 2) for
a connection, for connecting and for its statements; when the database cannot be reached
the store is marked *down* and every call raises ``StoreUnavailableError`` at once (the
session core answers the transient ``StoreUnavailable`` error) while a probe tries the
server every ``PROBE_INTERVAL`` seconds; the first probe that gets an answer puts a fresh
pool in place, so the store is back within about a second of the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from ..wire.logsafe import redact, register_secrets
from ..wire.masking import url_secrets
from .store_common import (
    DEFAULT_HISTORY_BYTES,
    DEFAULT_HISTORY_TURNS,
    FROM_ENV,
    Limit,
    ModelRows,
    cursor_seq,
    env_limit,
    join_state,
    joined,
    model_keys,
    model_plan,
    split_state,
    stored_digest,
    trim_plan,
    unjoined,
)
from .store_postgres_schema import migrate

log = logging.getLogger("acp.runtime.store")

STORE_TIMEOUT = 2.0  # seconds; ACP_STORE_TIMEOUT
PROBE_INTERVAL = 0.5  # seconds between attempts to reach a database that is down
# what says the database cannot be reached (psycopg_pool's PoolTimeout and PoolClosed are
# OperationalErrors; a statement over the bound ends in TimeoutError)
_UNREACHABLE = (psycopg.OperationalError, OSError, TimeoutError)


class StoreUnavailableError(Exception):
    """The database cannot be reached now; the message says why (no credentials)."""


def store_timeout() -> float:
    """``ACP_STORE_TIMEOUT`` (seconds, > 0), else ``STORE_TIMEOUT``."""
    try:
        value = float(os.environ.get("ACP_STORE_TIMEOUT") or STORE_TIMEOUT)
    except ValueError:
        return STORE_TIMEOUT
    return value if value > 0 and math.isfinite(value) else STORE_TIMEOUT


VACUUM_AFTER = 8 * 1024 * 1024
"""Bytes of replaced states (each turn replaces its session's) after which the store
vacuums ``acp_sessions`` itself, in the background: a replaced state is a dead row version
until a vacuum, and autovacuum comes at most once a minute.  (A model's messages are not
in it: rows of ``acp_model_messages``, written once each, see ``_sync_models``.)"""

KNOWN_MODEL_BYTES = 16 * 1024 * 1024
KNOWN_MODEL_SESSIONS = 4096
"""At most this many bytes of model messages' keys, of this many sessions, kept between
turns (``_models``); past either, they are forgotten (read again from the database when
needed)."""


# a session's model messages, in order, with its row (one snapshot: one statement)
_MESSAGES = (
    "ARRAY(SELECT m.message FROM acp_model_messages m WHERE m.session_id = s.id ORDER BY m.seq)"
)


def _new_gen() -> int:
    """A write's ``mgen``: random, never 0 (the column's default), so that a row written
    since (by any replica, or deleted and made again) is never taken for this write's."""
    return random.getrandbits(62) + 1


class PostgresSessionStore:
    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float | None = None,
        open_timeout: float | None = None,
        max_history_bytes: Limit = FROM_ENV,
        max_history_turns: Limit = FROM_ENV,
    ) -> None:
        """``timeout``: the longest any call waits on the database (default
        ``store_timeout()``); ``open_timeout``: the first connection's (default the same).
        ``max_history_bytes`` / ``max_history_turns``: the history kept per session, as in
        ``SqliteSessionStore`` (same variables and defaults; the bytes count the session's
        state, one row, replaced by each turn); the rows a trim deletes, and the state's
        old versions, are reclaimed by PostgreSQL's autovacuum."""
        self.max_history_bytes = env_limit(
            max_history_bytes, "ACP_HISTORY_MAX_BYTES", DEFAULT_HISTORY_BYTES
        )
        self.max_history_turns = env_limit(
            max_history_turns, "ACP_HISTORY_MAX_TURNS", DEFAULT_HISTORY_TURNS
        )
        self._url = url  # holds the password: never shown
        register_secrets(url_secrets(url))  # and redacted from any log line that quotes it
        self.timeout = timeout if timeout is not None else store_timeout()
        self._open_timeout = open_timeout if open_timeout is not None else self.timeout
        self._sizes = (min_size, max_size)
        self._pool = self._new_pool()
        self._ready: asyncio.Task[None] | None = None
        self.down: str | None = None  # why the database cannot be reached; None: it can
        self._probe: asyncio.Task[None] | None = None
        self._confirmed = 0.0  # monotonic time of the last call that reached the database
        self._closing: set[asyncio.Task[None]] = set()
        self._replaced = 0  # bytes of states replaced since the last vacuum (VACUUM_AFTER)
        self._vacuum: asyncio.Task[None] | None = None
        # each session's model rows as this store's last write of it left them, and the
        # ``mgen`` that write took: true while the row's ``mprev`` is that number
        self._models: dict[str, tuple[int, ModelRows]] = {}
        self._models_held = 0

    def _new_pool(self) -> AsyncConnectionPool[Any]:
        return AsyncConnectionPool(
            self._url,
            min_size=self._sizes[0],
            max_size=self._sizes[1],
            open=False,
            timeout=self.timeout,  # waiting for a free connection
            kwargs={"autocommit": True, "connect_timeout": max(2, math.ceil(self.timeout))},
        )

    async def _open(self) -> None:
        async with asyncio.timeout(self._open_timeout + self.timeout):
            await self._pool.open(wait=True, timeout=self._open_timeout)
            async with self._pool.connection() as conn:
                await migrate(conn)

    async def _conn(self) -> Any:
        if self.down is not None:
            raise StoreUnavailableError(self.down)
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_task(self._open())
        try:
            await asyncio.shield(self._ready)
        except _UNREACHABLE as exc:
            self._failed(exc)
            raise StoreUnavailableError(self.down) from exc
        return self._guarded(self._pool)

    @contextlib.asynccontextmanager
    async def _guarded(self, pool: AsyncConnectionPool[Any]) -> AsyncIterator[Any]:
        """One connection for one operation, the whole of it within ``timeout``."""
        try:
            async with asyncio.timeout(self.timeout), pool.connection() as conn:
                yield conn
        except _UNREACHABLE as exc:
            self._failed(exc)
            raise StoreUnavailableError(self.down) from exc
        self._confirmed = time.monotonic()

    def _failed(self, exc: BaseException) -> None:
        """The database did not answer: fail fast from now on, probe until it is back."""
        if self.down is not None:
            return
        detail = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        self.down = redact(
            f"PostgreSQL unreachable ({type(exc).__name__}{': ' + detail if detail else ''})"
        )
        log.error("session store: %s; answering StoreUnavailable until it is back", self.down)
        old, self._ready = self._pool, None
        self._pool = self._new_pool()  # opened by the first call after the probe succeeds
        closing = asyncio.get_running_loop().create_task(self._close_pool(old))
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._probe_until_back())

    async def _close_pool(self, pool: AsyncConnectionPool[Any]) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(pool.close(timeout=self.timeout), self.timeout * 2)

    async def _probe_until_back(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self.timeout):
                    conn = await AsyncConnection.connect(
                        self._url, autocommit=True, connect_timeout=max(2, math.ceil(self.timeout))
                    )
                    async with conn:
                        await conn.execute("SELECT 1")
            except Exception:  # noqa: BLE001 - still down, whatever the reason
                await asyncio.sleep(PROBE_INTERVAL)
                continue
            log.warning("session store: PostgreSQL reachable again")
            self.down = None
            return

    async def status(self) -> str | None:
        """None when the database answers (checked at most once a second), else why not:
        ``/ready`` (readiness) shows it."""
        if self.down is None and time.monotonic() - self._confirmed > 1.0:
            with contextlib.suppress(StoreUnavailableError):
                async with await self._conn() as conn:
                    await conn.execute("SELECT 1")
        return self.down

    async def save(self, session_id: str, state: dict[str, Any]) -> None:
        rest, model = split_state(state)
        keys = model_keys(model)
        try:
            async with await self._conn() as conn, conn.transaction(), conn.cursor() as cur:
                await cur.execute(
                    "INSERT INTO acp_sessions AS s (id, state, mgen) VALUES (%s, %s, %s) "
                    "ON CONFLICT (id) DO UPDATE SET state = excluded.state, "
                    "mgen = excluded.mgen, mprev = s.mgen RETURNING mprev",
                    (session_id, rest, mgen := _new_gen()),
                )
                row = await cur.fetchone()
                gen = (int(row[0]), mgen) if row else None
                rows = await self._sync_models(cur, session_id, model, keys, gen)
        except BaseException:
            self._forget_models(session_id)
            raise
        self._keep_models(session_id, gen, rows)

    async def load(self, session_id: str) -> dict[str, Any] | None:
        async with await self._conn() as conn:
            cur = await conn.execute(
                f"SELECT s.state, {_MESSAGES} FROM acp_sessions s WHERE s.id = %s", (session_id,)
            )
            row = await cur.fetchone()
        return join_state(row[0], row[1]) if row is not None else None

    async def _sync_models(
        self,
        cur: Any,
        session_id: str,
        model: list[bytes] | None,
        keys: list[bytes],
        gen: tuple[int, int] | None,
    ) -> ModelRows:
        """Make the session's model rows the state's (``model``, None: it has none): the
        rows the history let go deleted, the messages it added inserted, the others left
        as they are (``store_common.model_plan``).  ``gen``: the session row's (mprev,
        mgen) after this write locked it; the rows this store last wrote are known when
        its ``mprev`` is the ``mgen`` of that write.  Returns the rows kept."""
        known = self._models.get(session_id)
        if known is not None and gen is not None and known[0] == int(gen[0]):
            old = known[1]
        else:
            await cur.execute(
                "SELECT coalesce(digest, message), length(message) FROM acp_model_messages "
                "WHERE session_id = %s ORDER BY seq",
                (session_id,),
            )
            rows = await cur.fetchall()
            old = ModelRows([bytes(k) for k, _ in rows], [int(n) for _, n in rows])
        drop, same = model_plan(old.keys, keys)
        if drop == len(old.keys) and drop:
            await cur.execute("DELETE FROM acp_model_messages WHERE session_id = %s", (session_id,))
        elif drop:
            await cur.execute(
                "DELETE FROM acp_model_messages WHERE seq IN (SELECT seq FROM "
                "acp_model_messages WHERE session_id = %s ORDER BY seq LIMIT %s)",
                (session_id, drop),
            )
        if model is None or same == len(model):
            return old.after(drop, [], [])
        await cur.executemany(
            "INSERT INTO acp_model_messages (session_id, message, digest) VALUES (%s, %s, %s)",
            [
                (session_id, m, stored_digest(m, k))
                for m, k in zip(model[same:], keys[same:], strict=True)
            ],
        )
        return old.after(drop, keys[same:], model[same:])

    def _keep_models(self, session_id: str, gen: tuple[int, int] | None, rows: ModelRows) -> None:
        """After a commit: the session's rows as it left them, and its ``mgen``."""
        if gen is None:
            return
        old = self._models.get(session_id)
        self._models_held += rows.held - (old[1].held if old is not None else 0)
        self._models[session_id] = (int(gen[1]), rows)
        if self._models_held > KNOWN_MODEL_BYTES or len(self._models) > KNOWN_MODEL_SESSIONS:
            self._models.clear()
            self._models_held = 0

    def _forget_models(self, session_id: str) -> None:
        old = self._models.pop(session_id, None)
        if old is not None:
            self._models_held -= old[1].held

    async def append_history(self, session_id: str, messages: list[bytes]) -> None:
        if not messages:
            return
        async with await self._conn() as conn, conn.transaction(), conn.cursor() as cur:
            await cur.execute(
                "UPDATE acp_sessions SET hbytes = hbytes + %s, hturns = hturns + 1 "
                "WHERE id = %s RETURNING hturns",
                (sum(map(len, messages)), session_id),
            )
            row = await cur.fetchone()
            await cur.executemany(
                "INSERT INTO acp_history (session_id, message, turn, size) VALUES (%s, %s, %s, %s)",
                [(session_id, m, row[0] if row else 0, len(m)) for m in messages],
            )

    async def history(self, session_id: str) -> list[bytes]:
        async with await self._conn() as conn:
            cur = await conn.execute(
                "SELECT message, parts FROM acp_history WHERE session_id = %s ORDER BY seq",
                (session_id,),
            )
            rows = await cur.fetchall()
        return [m for message, parts in rows for m in unjoined(bytes(message), parts)]

    async def save_turn(
        self,
        session_id: str,
        state: dict[str, Any],
        messages: list[bytes],
        *,
        owner: str | None = None,
    ) -> bool:
        raw, model = split_state(state)
        keys = model_keys(model)
        try:
            gen, rows = await self._save_turn(session_id, raw, model, keys, messages, owner)
        except BaseException:
            self._forget_models(session_id)
            raise
        if gen is None:  # refused: not the owner
            return False
        self._keep_models(session_id, gen, rows)
        if self._replaced >= VACUUM_AFTER and (self._vacuum is None or self._vacuum.done()):
            self._replaced = 0
            self._vacuum = asyncio.get_running_loop().create_task(self._vacuum_states())
        return True

    async def _save_turn(
        self,
        session_id: str,
        raw: bytes,
        model: list[bytes] | None,
        keys: list[bytes],
        messages: list[bytes],
        owner: str | None,
    ) -> tuple[tuple[int, int] | None, ModelRows]:
        """The turn's transaction; the session row's (mprev, mgen) and the model rows it
        left, or (None, no rows) when ``owner`` does not hold the lease."""
        async with await self._conn() as conn, conn.transaction(), conn.cursor() as cur:
            if owner is not None:
                # the lease row locked until commit: a take-over waits for this turn
                await cur.execute(
                    "SELECT owner FROM acp_leases WHERE session_id = %s FOR UPDATE",
                    (session_id,),
                )
                row = await cur.fetchone()
                if row is None or row[0] != owner:
                    return None, ModelRows([], [])
            size = sum(map(len, messages))
            await cur.execute(
                "INSERT INTO acp_sessions AS s (id, state, hbytes, hturns, mgen) "
                "VALUES (%s, %s, %s, 1, %s) "
                "ON CONFLICT (id) DO UPDATE SET state = excluded.state, "
                "hbytes = s.hbytes + excluded.hbytes, hturns = s.hturns + 1, "
                "mgen = excluded.mgen, mprev = s.mgen "
                "RETURNING hbytes, hturns, hfirst, mprev",
                (session_id, raw, size, mgen := _new_gen()),
            )
            row = await cur.fetchone()
            kept, turn, first = (int(row[0]), int(row[1]), int(row[2])) if row else (size, 1, 1)
            gen = (int(row[3]), mgen) if row else None
            rows = await self._sync_models(cur, session_id, model, keys, gen)
            # the state (kept once, replaced) and its model messages counted by the same bound
            kept += len(raw) + rows.size
            self._replaced += len(raw)  # about the size of the version it replaced
            one = joined(messages, size)
            if one is not None:
                await cur.execute(
                    "INSERT INTO acp_history (session_id, message, turn, size, parts) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    (session_id, one, turn, size, len(messages)),
                )
            elif messages:
                await cur.executemany(
                    "INSERT INTO acp_history (session_id, message, turn, size) "
                    "VALUES (%s, %s, %s, %s)",
                    [(session_id, m, turn, len(m)) for m in messages],
                )
            # turns kept: the turn numbers from the first kept one (hfirst) to this one
            over_turns = (
                self.max_history_turns is not None and turn - first >= self.max_history_turns
            )
            if over_turns or (self.max_history_bytes is not None and kept > self.max_history_bytes):
                await self._trim(cur, session_id, kept)
        return gen, rows

    async def _vacuum_states(self) -> None:
        """``VACUUM acp_sessions`` (its TOAST table too): the space of replaced states
        reused by the next ones (see ``VACUUM_AFTER``).  A failure is logged: autovacuum
        does it later."""
        if self.down is not None or self._ready is None or not self._ready.done():
            return
        try:  # no statement bound (a vacuum may take a while): off the turns' path
            async with self._pool.connection() as conn:
                await conn.execute("VACUUM acp_sessions")
        except Exception as exc:  # noqa: BLE001 - the next one, or autovacuum, does it
            log.warning("session store: VACUUM acp_sessions failed (%s)", redact(str(exc)))

    async def _trim(self, cur: Any, session_id: str, kept: int) -> None:
        """The session's oldest whole turns past its retention (``store.trim_plan``)."""
        await cur.execute(
            "SELECT sum(size), min(seq), turn FROM acp_history WHERE session_id = %s "
            "GROUP BY turn ORDER BY turn",
            (session_id,),
        )
        turns = await cur.fetchall()
        cut, dropped = trim_plan(
            [int(t[0]) for t in turns], kept, self.max_history_bytes, self.max_history_turns
        )
        if cut:
            await cur.execute(
                "DELETE FROM acp_history WHERE session_id = %s AND seq < %s",
                (session_id, turns[cut][1]),
            )
            await cur.execute(
                "UPDATE acp_sessions SET hbytes = hbytes - %s, hfirst = %s WHERE id = %s",
                (dropped, turns[cut][2], session_id),
            )

    async def delete(self, session_id: str) -> None:
        self._forget_models(session_id)
        async with await self._conn() as conn, conn.transaction():
            for table, column in (
                ("acp_sessions", "id"),
                ("acp_history", "session_id"),
                ("acp_leases", "session_id"),
                ("acp_model_messages", "session_id"),
            ):
                await conn.execute(
                    f"DELETE FROM {table} WHERE {column} = %s",
                    (session_id,),
                )

    async def acquire(
        self, session_id: str, owner: str, ttl: float, *, take_over: bool = False
    ) -> str | None:
        async with await self._conn() as conn, conn.transaction():
            # the upsert locks the row whether or not its WHERE lets it change anything
            cur = await conn.execute(
                "INSERT INTO acp_leases AS l (session_id, owner, expires) "
                "VALUES (%s, %s, now() + make_interval(secs => %s)) "
                "ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, "
                "expires = excluded.expires "
                "WHERE l.owner = excluded.owner OR l.expires <= now() OR %s "
                "RETURNING 1",
                (session_id, owner, ttl, take_over),
            )
            if await cur.fetchone() is not None:
                return None
            cur = await conn.execute(
                "SELECT owner FROM acp_leases WHERE session_id = %s", (session_id,)
            )
            row = await cur.fetchone()
        return str(row[0]) if row is not None else None

    async def renew(self, session_id: str, owner: str, ttl: float) -> bool:
        async with await self._conn() as conn:
            cur = await conn.execute(
                "UPDATE acp_leases SET expires = now() + make_interval(secs => %s) "
                "WHERE session_id = %s AND owner = %s",
                (ttl, session_id, owner),
            )
            return bool(cur.rowcount == 1)

    async def release(self, session_id: str, owner: str) -> None:
        async with await self._conn() as conn:
            await conn.execute(
                "DELETE FROM acp_leases WHERE session_id = %s AND owner = %s", (session_id, owner)
            )

    async def list_sessions(
        self, cursor: str | None, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        after = cursor_seq(cursor)
        limit = max(limit, 1)
        async with await self._conn() as conn:
            cur = await conn.execute(
                f"SELECT s.created, s.id, s.state, {_MESSAGES} FROM acp_sessions s "
                "WHERE s.created > %s ORDER BY s.created LIMIT %s",
                (after, limit + 1),
            )
            rows = await cur.fetchall()
        page = rows[:limit]
        out = [(str(r[1]), join_state(r[2], r[3])) for r in page]
        return out, (str(page[-1][0]) if len(rows) > limit else None)

    async def aclose(self) -> None:
        """Close the pool, waiting at most ``timeout`` (a database that does not answer
        does not hold up a shutdown)."""
        if self._probe is not None:
            self._probe.cancel()
        if self._vacuum is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._vacuum, self.timeout)
        await self._close_pool(self._pool)
        for t in list(self._closing):
            with contextlib.suppress(BaseException):
                await t
