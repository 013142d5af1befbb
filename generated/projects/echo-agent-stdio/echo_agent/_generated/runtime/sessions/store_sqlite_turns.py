"""How the SQLite store writes finished turns (store_sqlite.py): a group of them, of any
sessions, in one transaction, each turn's messages as history rows (the last one carrying
the session's state, kept there alone, and running byte count), a prompt's text shared with its echo stored
once, a model's messages a row each (only those the turn added: ``sync_models``),
history trimmed to its bounds; and what the event loop's connection keeps between
its commits so that a small turn reads nothing (``TurnWriter._head``)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from typing import Any

from .shared_runs import shared_runs
from .store_common import ModelRows, joined, model_plan, trim_plan
from .store_sqlite_schema import insert_models, last_turn, model_rows, state_row

SHARED_STRING = 64 * 1024
"""A run of at least this many bytes that two messages of one turn hold (a prompt's text
and its echo) is stored once (table ``blobs``), each message keeping its place."""

STATE_APART = 16 * 1024
"""A large turn whose last message has at least this many bytes keeps its state on a row
of its own (see ``TurnWriter._rows``)."""

LET_GO = "UPDATE history SET state = NULL WHERE seq = ?"  # a row lets its state copy go

RELEASE_ROWS = 32
RELEASE_BYTES = 64 * 1024
RELEASE_AT_ONCE = 4096
"""A copy of the state that a turn took over is let go (its row's ``state`` set to NULL)
by that turn's commit when it has ``RELEASE_AT_ONCE`` bytes or more (or its size is not
known), before the turn's rows are written (they reuse its pages); a smaller one waits
and goes with others, in the commit by which ``RELEASE_ROWS`` rows or ``RELEASE_BYTES``
bytes of them wait, or when the store closes (each small turn's release its own statement
was a sixth of its store CPU).  Until then (or after a crash) a small copy is a leftover
on an old row: ``load`` reads the latest, and it goes with its row."""

KNOWN_SESSIONS = 4096
"""At most this many sessions' figures kept by the event loop's connection between
commits of other connections (see ``_head``); past it, it forgets them all."""

KNOWN_MODEL_BYTES = 16 * 1024 * 1024
"""At most this many bytes of model messages' keys kept (``TurnWriter._models``, and
``hints``); past it, those are forgotten (read again from the file when needed)."""


def _held(rows: ModelRows | None) -> int:
    return rows.held if rows is not None else 0


def sync_models(
    db: sqlite3.Connection,
    sid: str,
    messages: list[bytes] | None,
    keys: list[bytes],
    old: ModelRows | None,
) -> ModelRows:
    """Make the session's stored model messages (``old``: as read before, None: read them
    now) the state's (``messages``, None: it has none): the rows the history let go are
    deleted, the messages it added inserted, the others left as they are
    (``store_common.model_plan``).  Returns the rows kept."""
    if old is None:
        old = model_rows(db, sid)
    drop, same = model_plan(old.keys, keys)
    if drop == len(old.keys) and drop:
        db.execute("DELETE FROM model_messages WHERE session_id = ?", (sid,))
    elif drop:
        db.execute(
            "DELETE FROM model_messages WHERE seq IN (SELECT seq FROM model_messages "
            "WHERE session_id = ? ORDER BY seq LIMIT ?)",
            (sid, drop),
        )
    if messages is None or same == len(messages):
        return old.after(drop, [], [])
    insert_models(db, sid, messages[same:], keys[same:])
    return old.after(drop, keys[same:], messages[same:])


class Turn:
    """A queued ``save_turn``: answered once the transaction that wrote it commits.
    ``state``: without the model's messages, which are ``model`` (None: it has none) with
    their ``keys`` (``store_common.split_state``, ``model_keys``)."""

    __slots__ = (
        "future",
        "keys",
        "messages",
        "model",
        "owner",
        "sid",
        "size",
        "state",
        "written",
    )

    def __init__(
        self,
        sid: str,
        state: bytes,
        messages: list[bytes],
        owner: str | None,
        future: asyncio.Future[bool],
        model: list[bytes] | None = None,
        keys: list[bytes] | None = None,
        model_new: int = 0,
    ) -> None:
        self.sid = sid
        self.state = state
        self.messages = messages
        self.owner = owner
        self.model = model
        self.keys = keys or []
        self.size = sum(map(len, messages))  # the history's bytes
        # and the state's, and the model messages it adds: what the commit writes
        self.written = self.size + len(state) + model_new
        self.future = future


class TurnWriter:
    """Writes groups of turns for one store: ``commit`` (a group, one transaction) and
    ``commit_each`` (a failed group turn by turn).  ``fast``: the store's event loop
    connection, the only one whose figures are kept (see ``_known_valid``)."""

    def __init__(
        self, fast: sqlite3.Connection, max_history_bytes: int | None, max_history_turns: int | None
    ) -> None:
        self.fast = fast
        self.max_history_bytes = max_history_bytes
        self.max_history_turns = max_history_turns
        self._known: dict[str, list[int]] = {}  # see _head
        self._owners: dict[str, str | None] = {}  # see _owner
        self._models: dict[str, ModelRows] = {}  # the model rows, kept like _head's figures
        self._models_held = 0  # bytes of keys in _models
        self._known_version = -1
        # history rows whose state copy a later committed turn took over: (seq, bytes)
        self._release: list[tuple[int, int]] = []
        self._release_bytes = 0
        # the model rows each session's last turn written by either connection left
        # (never checked against the file: only to tell how much a turn will write)
        self.hints: dict[str, ModelRows] = {}
        self._hints_held = 0

    def model_new(self, sid: str, keys: list[bytes], messages: list[bytes]) -> int:
        """About the bytes of model messages a turn adds (all of them when the session's
        last rows are not known): what decides where it commits."""
        old = self.hints.get(sid)
        same = 0 if old is None else model_plan(old.keys, keys)[1]
        return sum(map(len, messages[same:]))

    def kept_models(self, sid: str, rows: ModelRows, *, known: bool) -> None:
        """Keep ``rows`` as the session's model rows: as a hint, and (``known``: the event
        loop's connection, its figures valid) as what it knows."""
        held = _held(rows)
        self._hints_held += held - _held(self.hints.get(sid))
        self.hints[sid] = rows
        if self._hints_held > KNOWN_MODEL_BYTES or len(self.hints) > KNOWN_SESSIONS:
            self.hints.clear()
            self._hints_held = 0
        if known:
            self._models_held += held - _held(self._models.get(sid))
            self._models[sid] = rows

    def _write_turn(
        self,
        db: sqlite3.Connection,
        t: Turn,
        known: dict[str, list[int]] | None,
        released: list[tuple[int, int]],
    ) -> None:
        """One turn: its messages as one history row (a small turn: ``parts`` messages
        joined by newlines) or a row each (a large turn, see ``_rows``), the last row
        carrying the session's state after the turn and the session's running byte
        count (``total``), so a small turn writes the history's pages alone (no
        ``sessions`` row: a page of its own in the WAL, a third of a small commit's
        cost).  The state is kept once: the row that held it before (the previous turn's)
        lets it go (added to ``released``: see ``RELEASE_ROWS``), and so does the
        ``sessions`` row after a ``save`` (once).  A turn with no messages writes one empty row (``size`` 0, never
        replayed) for its state.  The model's messages are rows of ``model_messages``,
        made the state's in the same transaction (``sync_models``: those it added
        inserted, those it let go deleted).  History and state (with its model messages)
        are counted by one bound (``max_history_bytes``).  ``known``: what the event
        loop's connection read and wrote before (see ``_head``)."""
        head = self._head(db, t.sid, known)
        if head is None:  # a turn before any save(): the session's row and place in the list
            db.execute("INSERT INTO sessions (id, state, hseq) VALUES (?, x'', 0)", (t.sid,))
            db.execute("INSERT OR IGNORE INTO session_order (session_id) VALUES (?)", (t.sid,))
            head = [1, 0, *last_turn(db, t.sid), 0, 0, 0]
            if known is not None:
                known[t.sid] = head
        first, dropped, last, total, held_at, in_session, held_bytes = head
        if held_at:  # the state's previous copy goes: one state a session
            if 0 <= held_bytes < RELEASE_AT_ONCE:
                released.append((held_at, held_bytes))  # with others (RELEASE_ROWS)
            else:  # now: the pages it frees are this turn's to reuse
                db.execute(LET_GO, (held_at,))
        if in_session:
            db.execute("UPDATE sessions SET state = x'' WHERE id = ?", (t.sid,))
            head[5] = 0
        turn = last + 1
        total += t.size
        head[2], head[3] = turn, total
        messages = t.messages or [b""]
        shared = shared_runs(messages, SHARED_STRING) if t.size >= 2 * SHARED_STRING else None
        run, where = shared if shared is not None else (b"", {})
        blob = None
        if run:
            cur = db.execute(
                "INSERT INTO blobs (session_id, turn, data) VALUES (?, ?, ?)", (t.sid, turn, run)
            )
            blob = cur.lastrowid
        one = None if run else joined(messages, t.size)
        if one is not None:  # a small turn: one row (``parts``), read back by ``unjoined``
            cur = db.execute(
                "INSERT INTO history (session_id, message, turn, size, state, total, parts) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (t.sid, one, turn, t.size, t.state, total, len(messages)),
            )
            head[4] = int(cur.lastrowid or 0)
        else:
            head[4] = self._rows(db, t, messages, turn, total, run, blob, where)
        head[6] = len(t.state)
        old = self._models.get(t.sid) if known is not None else None
        if t.model is None and old is not None and not old.keys:
            model_size = 0  # none before, none now (an agent without a model): nothing
        else:
            rows = sync_models(db, t.sid, t.model, t.keys, old)
            self.kept_models(t.sid, rows, known=known is not None)
            model_size = rows.size
        # the state counted with its model messages, as the other stores count it
        kept = total - dropped + len(t.state) + model_size
        over_bytes = self.max_history_bytes is not None and kept > self.max_history_bytes
        # turns kept: the turn numbers from the first kept one (hfirst) to this one
        over_turns = self.max_history_turns is not None and turn - first >= self.max_history_turns
        if over_bytes or over_turns:
            self._trim(db, t.sid, kept, head)

    @staticmethod
    def _rows(
        db: sqlite3.Connection,
        t: Turn,
        messages: list[bytes],
        turn: int,
        total: int,
        run: bytes,
        blob: int | None,
        where: dict[int, int],
    ) -> int:
        """A row a message: a large turn (its shared run stored once, in ``blob``, cut out
        of each message at ``where``), or one whose messages hold a newline.  Returns the
        last row's seq (the one holding the state: the last message's, or an empty row
        after it)."""
        # the state on a row of its own (empty, never replayed) when the last message is
        # large: the next turn lets the state go by rewriting its row, which would write
        # that message again
        apart = len(messages[-1]) >= STATE_APART
        end = -1 if apart else len(messages) - 1
        rows: list[tuple[str, bytes, int, int, int | None, int, bytes | None, int]] = []
        for k, m in enumerate(messages):
            state = t.state if k == end else None
            at = where.get(k)
            if at is None:
                rows.append((t.sid, m, turn, len(m), None, 0, state, total))
            else:
                cut = m[:at] + m[at + len(run) :]
                rows.append((t.sid, cut, turn, len(m), blob, at, state, total))
        if apart:
            rows.append((t.sid, b"", turn, 0, None, 0, t.state, total))
        db.executemany(
            "INSERT INTO history (session_id, message, turn, size, blob, at, state, total) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        return int(db.execute("SELECT last_insert_rowid()").fetchone()[0])

    def _head(
        self, db: sqlite3.Connection, sid: str, known: dict[str, list[int]] | None
    ) -> list[int] | None:
        """The session's first kept turn, bytes trimmed, latest turn, bytes written
        (``hfirst``, ``hdropped``, ``last_turn``), where its state is (``state_row``: the
        history row holding it, the bytes of the ``sessions`` row's) and that copy's bytes
        (-1: not known), None before its row exists.  The event
        loop's connection keeps what it read and wrote (``known``, true while no other
        connection commits: see ``_known_valid``), so a turn of a session it wrote
        before reads nothing."""
        if known is not None:
            head = known.get(sid)
            if head is not None:
                return head
        row = db.execute("SELECT hfirst, hdropped FROM sessions WHERE id = ?", (sid,)).fetchone()
        if row is None:
            return None
        # the held copy's size unknown (-1): let go in this commit
        head = [int(row[0]), int(row[1]), *last_turn(db, sid), *state_row(db, sid), -1]
        if known is not None:
            known[sid] = head
        return head

    def _owner(
        self, db: sqlite3.Connection, sid: str, known: dict[str, str | None] | None
    ) -> str | None:
        """Who holds the session's lease (None: nobody), kept like ``_head``'s figures."""
        if known is not None and sid in known:
            return known[sid]
        row = db.execute("SELECT owner FROM leases WHERE session_id = ?", (sid,)).fetchone()
        owner = None if row is None else str(row[0])
        if known is not None:
            known[sid] = owner
        return owner

    def _known_valid(self, db: sqlite3.Connection) -> bool:
        """Under the write lock: may this commit use what the event loop's connection
        kept?  ``PRAGMA data_version`` changes whenever another connection (the worker
        thread's, another process's) committed since this one last looked: then it
        forgets it all.  Never for the worker connection, whose own saves, leases and
        deletes would not change its ``data_version``."""
        if db is not self.fast:
            return False
        (version,) = db.execute("PRAGMA data_version").fetchone()
        if (
            version != self._known_version
            or max(len(self._known), len(self._owners), len(self._models)) > KNOWN_SESSIONS
            or self._models_held > KNOWN_MODEL_BYTES
        ):
            self._forget()
            self._known_version = version
        return True

    def _forget(self) -> None:
        self._known.clear()
        self._owners.clear()
        self._models.clear()
        self._models_held = 0
        self._known_version = -1

    def _trim(self, db: sqlite3.Connection, sid: str, kept: int, head: list[int]) -> None:
        turns = db.execute(
            "SELECT sum(size), min(seq), turn FROM history WHERE session_id = ? "
            "GROUP BY turn ORDER BY turn",
            (sid,),
        ).fetchall()
        cut, dropped = trim_plan(
            [t[0] for t in turns], kept, self.max_history_bytes, self.max_history_turns
        )
        if cut:
            first_seq, first_turn = turns[cut][1], turns[cut][2]
            db.execute("DELETE FROM history WHERE session_id = ? AND seq < ?", (sid, first_seq))
            db.execute("DELETE FROM blobs WHERE session_id = ? AND turn < ?", (sid, first_turn))
            db.execute(
                "UPDATE sessions SET hdropped = hdropped + ?, hfirst = ? WHERE id = ?",
                (dropped, first_turn, sid),
            )
            head[0], head[1] = first_turn, head[1] + dropped

    def commit(self, db: sqlite3.Connection, group: list[Turn]) -> list[bool]:
        """Every turn of the group in one transaction: True written, False refused (its
        owner does not hold the lease).  IMMEDIATE: the write lock first, so no other
        process moves a lease between the check and the write."""
        db.execute("BEGIN IMMEDIATE")
        released: list[tuple[int, int]] = []
        try:
            valid = self._known_valid(db)
            known = self._known if valid else None
            owners = self._owners if valid else None
            out = []
            for t in group:
                if t.owner is not None and self._owner(db, t.sid, owners) != t.owner:
                    out.append(False)
                    continue
                self._write_turn(db, t, known, released)
                out.append(True)
            let_go = self._releasing(db, released) if released else -1
            db.execute("COMMIT")
        except BaseException:
            if db is self.fast:
                self._forget()  # it may hold what the rolled-back writes said
            with contextlib.suppress(sqlite3.Error):  # a failed COMMIT may have ended it
                db.execute("ROLLBACK")
            raise
        if released:
            self._released(released, let_go)
        return out

    def _releasing(self, db: sqlite3.Connection, released: list[tuple[int, int]]) -> int:
        """In the commit (``released`` not empty): let the waiting copies go with this
        commit's when enough wait (``RELEASE_ROWS``); returns how many of those waiting
        before it went (-1: none).  No lock: the two connections' commits are serialized
        by the database, and what a race between their Python could do is leave a small
        copy waiting twice or not at all (a leftover, see ``RELEASE_ROWS``)."""
        waiting = self._release
        n = len(waiting)
        size = self._release_bytes
        for _, more in released:
            size += more
        if n + len(released) < RELEASE_ROWS and size < RELEASE_BYTES:
            return -1
        seqs = [(seq,) for seq, _ in waiting[:n]]
        seqs.extend((seq,) for seq, _ in released)
        db.executemany(LET_GO, seqs)
        return n

    def _released(self, released: list[tuple[int, int]], let_go: int) -> None:
        """After the commit: its copies wait, or they and the ``let_go`` first waiting
        ones are gone."""
        if let_go >= 0:
            del self._release[:let_go]
            self._release_bytes = sum(n for _, n in self._release)
            return
        self._release.extend(released)
        for _, more in released:
            self._release_bytes += more

    def release_now(self, db: sqlite3.Connection) -> None:
        """Let every waiting copy go (the store closing), in a transaction of its own."""
        seqs = [(seq,) for seq, _ in self._release]
        self._release.clear()
        self._release_bytes = 0
        if seqs:
            with db:
                db.executemany(LET_GO, seqs)

    def commit_each(self, db: sqlite3.Connection, group: list[Turn]) -> list[Any]:
        """The group in one transaction; if that fails, each turn in its own, so one bad
        turn fails alone.  Per turn: True, False, or the exception it raised."""
        try:
            return list(self.commit(db, group))
        except Exception as exc:  # noqa: BLE001 - answered to the callers
            if len(group) == 1:
                return [exc]
        out: list[Any] = []
        for t in group:
            try:
                out.append(self.commit(db, [t])[0])
            except Exception as exc:  # noqa: BLE001 - answered to that turn's caller
                out.append(exc)
        return out
