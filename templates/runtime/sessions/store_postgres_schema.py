"""The PostgreSQL store's tables (store_postgres.py): each schema version's statements,
run once, in order, in one transaction, by the first replica that opens an older
database (``migrate``; replicas starting together serialize on an advisory lock), and
schema 4's move of each state's model history to its rows."""

from __future__ import annotations

from typing import Any

import orjson
from psycopg import AsyncConnection

from .store_common import MODEL_HISTORY, model_keys, split_state, stored_digest

MODEL_ROWS = 4
"""The schema version from which a model's messages are rows (``acp_model_messages``)."""

_LOCK_KEY = 0x0AC95E55  # pg_advisory_xact_lock key held while migrating

# Each step runs once, in order, in one transaction, on a database older than it.
_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE acp_sessions (
        id text PRIMARY KEY,
        created bigserial UNIQUE,
        state bytea NOT NULL
    );
    CREATE TABLE acp_history (
        seq bigserial PRIMARY KEY,
        session_id text NOT NULL,
        message bytea NOT NULL
    );
    CREATE INDEX acp_history_by_session ON acp_history (session_id, seq);
    CREATE TABLE acp_leases (
        session_id text PRIMARY KEY,
        owner text NOT NULL,
        expires timestamptz NOT NULL
    );
    """,
    # 2: history retention (each row's turn and size, each session's kept bytes and turns)
    """
    ALTER TABLE acp_history ADD COLUMN turn bigint NOT NULL DEFAULT 0;
    ALTER TABLE acp_history ADD COLUMN size bigint NOT NULL DEFAULT 0;
    UPDATE acp_history SET size = length(message);
    ALTER TABLE acp_sessions ADD COLUMN hbytes bigint NOT NULL DEFAULT 0;
    ALTER TABLE acp_sessions ADD COLUMN hturns bigint NOT NULL DEFAULT 0;
    ALTER TABLE acp_sessions ADD COLUMN hfirst bigint NOT NULL DEFAULT 1;
    UPDATE acp_sessions SET hfirst = 0 WHERE id IN (SELECT session_id FROM acp_history);
    UPDATE acp_sessions s SET hbytes = coalesce(
        (SELECT sum(h.size) FROM acp_history h WHERE h.session_id = s.id), 0);
    """,
    # 3: a small turn's messages in one row (``parts``: how many, joined by newlines,
    # which no stored frame holds), so a turn of many updates inserts one row, not one a
    # message
    """
    ALTER TABLE acp_history ADD COLUMN parts integer NOT NULL DEFAULT 1;
    """,
    # 4: a model's message history (the state's ``model_history`` list) a row a message,
    # not in the state (which holds their count): a turn inserts the messages it added and
    # deletes those the history let go, so a large tool result is written once, not as a
    # dead version of the state every turn.  ``mgen``: a random number each write of the
    # session's row sets, ``mprev`` the one it replaced: a store whose last write left
    # ``mgen`` knows the rows without reading them.  The upgrade moves each state's list
    # to its rows (``_model_rows_of_states``).
    """
    CREATE TABLE acp_model_messages (
        seq bigserial PRIMARY KEY,
        session_id text NOT NULL,
        message bytea NOT NULL,
        digest bytea
    );
    CREATE INDEX acp_model_messages_by_session ON acp_model_messages (session_id, seq);
    ALTER TABLE acp_sessions ADD COLUMN mgen bigint NOT NULL DEFAULT 0;
    ALTER TABLE acp_sessions ADD COLUMN mprev bigint NOT NULL DEFAULT 0;
    """,
)


async def migrate(conn: AsyncConnection[Any]) -> int:
    """Create or upgrade the tables to ``len(_MIGRATIONS)``; returns the version found."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        await conn.execute("CREATE TABLE IF NOT EXISTS acp_schema (version integer NOT NULL)")
        cur = await conn.execute("SELECT version FROM acp_schema")
        row = await cur.fetchone()
        found = int(row[0]) if row is not None else 0
        if row is None:
            await conn.execute("INSERT INTO acp_schema (version) VALUES (0)")
        for version in range(found, len(_MIGRATIONS)):
            for stmt in _MIGRATIONS[version].split(";"):
                if stmt.strip():
                    await conn.execute(stmt)
            if version == MODEL_ROWS - 1:
                await _model_rows_of_states(conn)
            await conn.execute("UPDATE acp_schema SET version = %s", (version + 1,))
    return found


async def _model_rows_of_states(conn: AsyncConnection[Any]) -> None:
    """Schema 4's upgrade: each session's model history moves from its state to its rows,
    the state keeping their count."""
    cur = await conn.execute(
        "SELECT id FROM acp_sessions WHERE position(%s::bytea in state) > 0",
        (f'"{MODEL_HISTORY}"'.encode(),),
    )
    for (sid,) in await cur.fetchall():
        cur = await conn.execute("SELECT state FROM acp_sessions WHERE id = %s", (sid,))
        row = await cur.fetchone()
        if row is None:
            continue
        rest, model = split_state(orjson.loads(row[0]))
        if model is None:
            continue
        async with conn.cursor() as c:
            await c.executemany(
                "INSERT INTO acp_model_messages (session_id, message, digest) VALUES (%s, %s, %s)",
                [
                    (sid, m, stored_digest(m, k))
                    for m, k in zip(model, model_keys(model), strict=True)
                ],
            )
        await conn.execute("UPDATE acp_sessions SET state = %s WHERE id = %s", (rest, sid))
