"""The SQLite session store's file format: the tables (``SCHEMA``) and the steps that bring
an older file up to date (``MIGRATIONS``, run by ``migrate`` once per step, each in one
transaction, the version kept in ``PRAGMA user_version``), and the reads that know where
schema 4 keeps a session's latest state and turn (``STATE``, ``last_turn``) and where
schema 7 keeps a model's messages (``model_rows``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import orjson

from .store_common import MODEL_HISTORY, ModelRows, model_keys, split_state, stored_digest

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, state BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS history (
    session_id TEXT NOT NULL, seq INTEGER PRIMARY KEY AUTOINCREMENT, message BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS history_by_session ON history (session_id, seq);
"""

# Schema versions (PRAGMA user_version); each step runs once, in one transaction, on a
# database older than it.  1: leases, and the creation order session/list pages by.
# 2: history retention (each row's turn and size, each session's kept bytes and turn
# count) and large strings stored once per turn (``blobs``).  3: history's seq without
# AUTOINCREMENT (a small commit wrote the ``sqlite_sequence`` page too: one WAL page of
# four; a session's rows keep their order, new ones above every row left).  4: a turn's
# state and the session's running byte count on its last history row (``state``,
# ``total``), so a small turn writes no ``sessions`` row; ``sessions.hseq`` (the last
# history row when ``save`` wrote the row's state) and ``hdropped`` (bytes trimmed);
# ``hbytes``/``hturns`` are no longer kept up to date.  5: a small turn's messages in one
# history row (``parts``: how many, joined by newlines, which no stored frame holds), so
# a turn of many updates writes one row and one index entry, not one of each a message.
# 6: one state a session: the copies older turns' rows kept (every turn's, never deleted
# nor counted) are dropped, the latest moved to ``sessions.state``; from then on a turn's
# row takes the state over from the row (or the ``sessions`` row) that held it, which lets
# it go (see ``store_sqlite_turns.TurnWriter._write_turn``).
# 7: a model's message history (the state's ``model_history`` list) a row a message in
# ``model_messages`` (a large one with its digest), not in the state, which holds their count:
# a turn inserts the messages it added and deletes those the history let go, so a large
# tool result is written once, not with every turn's state (``store_common.split_state``,
# ``store_sqlite_turns.sync_models``); the upgrade moves every state's list to its rows
# (``_model_rows_of_states``).
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS leases (
        session_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires REAL NOT NULL);
    CREATE TABLE IF NOT EXISTS session_order (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL UNIQUE);
    INSERT OR IGNORE INTO session_order (session_id) SELECT id FROM sessions ORDER BY rowid;
    """,
    """
    ALTER TABLE history ADD COLUMN turn INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE history ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE history ADD COLUMN blob INTEGER;
    ALTER TABLE history ADD COLUMN at INTEGER NOT NULL DEFAULT 0;
    UPDATE history SET size = length(message);
    ALTER TABLE sessions ADD COLUMN hbytes INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN hturns INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN hfirst INTEGER NOT NULL DEFAULT 1;
    UPDATE sessions SET hfirst = 0 WHERE id IN (SELECT session_id FROM history);
    UPDATE sessions SET hbytes = coalesce(
        (SELECT sum(size) FROM history WHERE history.session_id = sessions.id), 0);
    CREATE TABLE IF NOT EXISTS blobs (
        id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, turn INTEGER NOT NULL,
        data BLOB NOT NULL);
    CREATE INDEX IF NOT EXISTS blobs_by_session ON blobs (session_id, turn);
    """,
    """
    CREATE TABLE history_v3 (
        session_id TEXT NOT NULL, seq INTEGER PRIMARY KEY, message BLOB NOT NULL,
        turn INTEGER NOT NULL DEFAULT 0, size INTEGER NOT NULL DEFAULT 0, blob INTEGER,
        at INTEGER NOT NULL DEFAULT 0);
    INSERT INTO history_v3 (session_id, seq, message, turn, size, blob, at)
        SELECT session_id, seq, message, turn, size, blob, at FROM history;
    DROP TABLE history;
    ALTER TABLE history_v3 RENAME TO history;
    CREATE INDEX history_by_session ON history (session_id, seq);
    DELETE FROM sqlite_sequence WHERE name = 'history';
    """,
    """
    ALTER TABLE history ADD COLUMN state BLOB;
    ALTER TABLE history ADD COLUMN total INTEGER;
    ALTER TABLE sessions ADD COLUMN hseq INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN hdropped INTEGER NOT NULL DEFAULT 0;
    UPDATE sessions SET hseq = coalesce(
        (SELECT max(seq) FROM history WHERE history.session_id = sessions.id), 0);
    UPDATE history SET total = (SELECT hbytes FROM sessions WHERE sessions.id = history.session_id)
        WHERE seq IN (SELECT max(seq) FROM history GROUP BY session_id);
    """,
    """
    ALTER TABLE history ADD COLUMN parts INTEGER NOT NULL DEFAULT 1;
    """,
    """
    UPDATE sessions SET state = coalesce((SELECT h.state FROM history h
        WHERE h.session_id = sessions.id AND h.seq > sessions.hseq AND h.state IS NOT NULL
        ORDER BY h.seq DESC LIMIT 1), state);
    UPDATE sessions SET hseq = coalesce(
        (SELECT max(seq) FROM history WHERE history.session_id = sessions.id), 0);
    UPDATE history SET state = NULL WHERE state IS NOT NULL;
    """,
    """
    CREATE TABLE IF NOT EXISTS model_messages (
        session_id TEXT NOT NULL, seq INTEGER PRIMARY KEY, message BLOB NOT NULL,
        digest BLOB);
    CREATE INDEX IF NOT EXISTS model_messages_by_session ON model_messages (session_id, seq);
    """,
)

ONE_STATE = 6
"""The schema version from which a session's state is kept once (see ``STATE``)."""

MODEL_ROWS = 7
"""The schema version from which a model's messages are rows (``model_messages``)."""


def _model_rows_of_states(db: sqlite3.Connection) -> None:
    """Schema 7's upgrade: each session's model history moves from its state (kept once,
    where ``state_row`` says) to its rows, the state keeping their count."""
    sids = [str(r[0]) for r in db.execute("SELECT id FROM sessions").fetchall()]
    key = f'"{MODEL_HISTORY}"'.encode()
    for sid in sids:
        seq, _ = state_row(db, sid)
        if seq:
            row = db.execute("SELECT state FROM history WHERE seq = ?", (seq,)).fetchone()
        else:
            row = db.execute("SELECT state FROM sessions WHERE id = ?", (sid,)).fetchone()
        raw = bytes(row[0]) if row is not None and row[0] is not None else b""
        if key not in raw:
            continue
        rest, messages = split_state(orjson.loads(raw))
        if messages is None:
            continue
        insert_models(db, sid, messages, model_keys(messages))
        if seq:
            db.execute("UPDATE history SET state = ? WHERE seq = ?", (rest, seq))
        else:
            db.execute("UPDATE sessions SET state = ? WHERE id = ?", (rest, sid))


AFTER: dict[int, Callable[[sqlite3.Connection], None]] = {MODEL_ROWS - 1: _model_rows_of_states}
"""What a step does beyond its SQL, in the same transaction (by the step's index)."""


def insert_models(
    db: sqlite3.Connection, sid: str, messages: list[bytes], keys: list[bytes]
) -> None:
    """Model messages appended to the session's rows, in order (``keys``: theirs,
    ``store_common.model_keys``)."""
    db.executemany(
        "INSERT INTO model_messages (session_id, message, digest) VALUES (?, ?, ?)",
        [(sid, m, stored_digest(m, k)) for m, k in zip(messages, keys, strict=True)],
    )


def model_rows(db: sqlite3.Connection, sid: str) -> ModelRows:
    """The session's stored model messages: each one's key (``store_common.model_keys``)
    and bytes, in order."""
    rows = db.execute(
        "SELECT coalesce(digest, message), length(message) FROM model_messages "
        "WHERE session_id = ? ORDER BY seq",
        (sid,),
    ).fetchall()
    return ModelRows([bytes(k) for k, _ in rows], [int(n) for _, n in rows])


def model_messages(db: sqlite3.Connection, sid: str) -> list[bytes]:
    """The session's model messages, in order (``store_common.join_state``)."""
    return [
        bytes(r[0])
        for r in db.execute(
            "SELECT message FROM model_messages WHERE session_id = ? ORDER BY seq", (sid,)
        ).fetchall()
    ]


def migrate(db: sqlite3.Connection) -> int:
    """Bring an existing database up to ``len(MIGRATIONS)`` (another process may be
    doing the same: the version is read again under the write lock); returns the version
    found."""
    found = -1
    while True:
        (version,) = db.execute("PRAGMA user_version").fetchone()
        if found < 0:
            found = int(version)
        if version >= len(MIGRATIONS):
            return found
        db.execute("BEGIN IMMEDIATE")
        try:
            (version,) = db.execute("PRAGMA user_version").fetchone()
            if version < len(MIGRATIONS):
                for stmt in MIGRATIONS[version].split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                after = AFTER.get(version)
                if after is not None:
                    after(db)
                db.execute(f"PRAGMA user_version = {version + 1}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


STATE = (
    "coalesce((SELECT h.state FROM history h WHERE h.session_id = s.id AND h.seq > s.hseq "
    "AND h.state IS NOT NULL ORDER BY h.seq DESC LIMIT 1), s.state)"
)
"""A session's state, kept once (schema 6): on the last history row of its latest turn,
or, before any turn and when ``save`` wrote it since (``hseq``: the last history row at
that save), on its ``sessions`` row; the place that does not hold it holds nothing
(``sessions.state`` empty, ``history.state`` NULL)."""


def state_row(db: sqlite3.Connection, sid: str) -> tuple[int, int]:
    """Where the session's state is: the seq of the history row holding it (0: none) and
    the bytes of the ``sessions`` row's (0: empty); (0, 0) before the session's row."""
    row = db.execute(
        "SELECT (SELECT h.seq FROM history h WHERE h.session_id = s.id AND h.seq > s.hseq "
        "AND h.state IS NOT NULL ORDER BY h.seq DESC LIMIT 1), length(s.state) "
        "FROM sessions s WHERE s.id = ?",
        (sid,),
    ).fetchone()
    return (int(row[0] or 0), int(row[1])) if row else (0, 0)


def last_turn(db: sqlite3.Connection, sid: str) -> tuple[int, int]:
    """The session's latest turn number and the bytes of history it ever wrote (kept or
    trimmed: ``sessions.hdropped`` counts the trimmed ones); (0, 0) before any turn."""
    row = db.execute(
        "SELECT turn, total FROM history WHERE session_id = ? ORDER BY seq DESC LIMIT 1", (sid,)
    ).fetchone()
    return (int(row[0]), int(row[1] or 0)) if row else (0, 0)
