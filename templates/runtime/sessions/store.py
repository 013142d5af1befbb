"""Session persistence: the ``SessionStore`` interface and its embedded SQLite default.

What is stored per session (enough to rebuild it in a fresh process and to replay it):

* ``state``: a JSON object the runtime owns — the raw config (``config_raw``), the
  conversation state name, the turn count, the current mode, a model's message history
  (``model_history``); opaque to the store, but for that list, which the database stores
  keep a row a message so that a turn writes only the messages it added
  (``store_common.split_state``; the memory store keeps the state whole);
* ``history``: the ordered list of wire messages of the session that a client needs
  to rebuild its view on ``session/load`` (the user's prompts as ``user_message_chunk``
  updates and every ``session/update`` the agent sent), appended in batches;
* a ``lease``: which connection owns the session now (``"<replica>/<connection>"``) and
  until when; one owner at a time, so two connections never run turns of one session
  at once (see sessions.py).  Times are ``time.time()``.

``SqliteSessionStore`` (store_sqlite.py) is the default; ``MemorySessionStore`` keeps
sessions in process; ``PostgresSessionStore`` (store_postgres.py) is shared by replicas.
What every store shares (list cursors, history bounds, retention): store_common.py.

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

import logging
import time
from typing import Any, Protocol

import orjson

from .store_common import (
    DEFAULT_HISTORY_BYTES,
    DEFAULT_HISTORY_TURNS,
    FROM_ENV,
    Limit,
    cursor_seq,
    env_limit,
    trim_plan,
)

log = logging.getLogger("acp.runtime.store")


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


MEMORY_MAX_SESSIONS = 1024
MEMORY_MAX_BYTES = 64 * 1024 * 1024


class MemorySessionStore:
    """In-process store (tests, or when nothing must survive a restart), bounded.

    ``max_sessions`` / ``max_bytes`` (``$ACP_MEMORY_MAX_SESSIONS``, default 1024;
    ``$ACP_MEMORY_MAX_BYTES``, default 64 MiB; state + history bytes of every session):
    past either, the least recently used sessions (saved, loaded, replayed or given a
    turn least recently) are forgotten whole, as if deleted, except their unexpired
    leases, so a connection that holds one keeps saving its turns; when one session
    alone holds more than ``max_bytes``, its oldest turns go as below.
    ``max_history_bytes`` / ``max_history_turns`` per session: as in
    ``SqliteSessionStore`` (the oldest whole turns go, down to 3/4 of the bound; the
    latest turn stays).  None: unbounded."""

    def __init__(
        self,
        *,
        max_sessions: Limit = FROM_ENV,
        max_bytes: Limit = FROM_ENV,
        max_history_bytes: Limit = FROM_ENV,
        max_history_turns: Limit = FROM_ENV,
    ) -> None:
        self.max_sessions = env_limit(max_sessions, "ACP_MEMORY_MAX_SESSIONS", MEMORY_MAX_SESSIONS)
        self.max_bytes = env_limit(max_bytes, "ACP_MEMORY_MAX_BYTES", MEMORY_MAX_BYTES)
        self.max_history_bytes = env_limit(
            max_history_bytes, "ACP_HISTORY_MAX_BYTES", DEFAULT_HISTORY_BYTES
        )
        self.max_history_turns = env_limit(
            max_history_turns, "ACP_HISTORY_MAX_TURNS", DEFAULT_HISTORY_TURNS
        )
        self._state: dict[str, bytes] = {}
        self._history: dict[str, list[tuple[int, list[bytes]]]] = {}  # (bytes, messages) a turn
        self._hbytes: dict[str, int] = {}
        self._size: dict[str, int] = {}  # bytes held, least recently used first
        self._total = 0
        self._created: dict[str, int] = {}  # creation sequence (list order, cursors)
        self._seq = 0
        self._leases: dict[str, tuple[str, float]] = {}

    @property
    def bytes_held(self) -> int:
        """State and history bytes held now (what ``max_bytes`` bounds)."""
        return self._total

    def _touch(self, sid: str, grow: int = 0) -> None:
        """``sid`` becomes the most recently used; its size grows by ``grow``."""
        self._size[sid] = self._size.pop(sid, 0) + grow
        self._total += grow

    def _bound(self, sid: str) -> None:
        turns = self._history.get(sid)
        if turns is not None:
            over_turns = self.max_history_turns is not None and len(turns) > self.max_history_turns
            # history and state counted by one bound, as in the database stores
            held = self._hbytes[sid] + len(self._state.get(sid, b""))
            over_bytes = self.max_history_bytes is not None and held > self.max_history_bytes
            if over_turns or over_bytes:
                self._trim(sid, self.max_history_bytes, self.max_history_turns, held)
        max_sessions, max_bytes = self.max_sessions, self.max_bytes
        while (max_sessions is not None and len(self._size) > max_sessions) or (
            max_bytes is not None and self._total > max_bytes
        ):
            oldest = next(iter(self._size))
            if oldest == sid:  # the only session: it alone is too large
                if max_bytes is not None:
                    self._trim(sid, max_bytes - len(self._state.get(sid, b"")), None, None)
                return
            self._forget(oldest)

    def _trim(
        self, sid: str, max_bytes: int | None, max_turns: int | None, held: int | None
    ) -> None:
        """``held``: the bytes ``max_bytes`` counts (default: the history's)."""
        turns = self._history[sid]
        held = self._hbytes[sid] if held is None else held
        cut, dropped = trim_plan([n for n, _ in turns], held, max_bytes, max_turns)
        if cut:
            del turns[:cut]
            self._hbytes[sid] -= dropped
            self._touch(sid, -dropped)

    def _forget(self, sid: str) -> None:
        self._total -= self._size.pop(sid, 0)
        self._state.pop(sid, None)
        self._history.pop(sid, None)
        self._hbytes.pop(sid, None)
        self._created.pop(sid, None)
        held = self._leases.get(sid)
        if held is not None and held[1] <= time.time():
            del self._leases[sid]

    def _put_state(self, session_id: str, state: dict[str, Any]) -> None:
        raw = orjson.dumps(state)
        old = self._state.get(session_id)
        self._state[session_id] = raw
        self._touch(session_id, len(raw) - (len(old) if old is not None else 0))
        if session_id not in self._created:
            self._seq += 1
            self._created[session_id] = self._seq

    def _put_turn(self, session_id: str, messages: list[bytes]) -> None:
        size = sum(map(len, messages))
        self._history.setdefault(session_id, []).append((size, list(messages)))
        self._hbytes[session_id] = self._hbytes.get(session_id, 0) + size
        self._touch(session_id, size)

    async def save(self, session_id: str, state: dict[str, Any]) -> None:
        self._put_state(session_id, state)
        self._bound(session_id)

    async def load(self, session_id: str) -> dict[str, Any] | None:
        raw = self._state.get(session_id)
        if raw is None:
            return None
        self._touch(session_id)
        return orjson.loads(raw)  # type: ignore[no-any-return]

    async def append_history(self, session_id: str, messages: list[bytes]) -> None:
        self._put_turn(session_id, messages)
        self._bound(session_id)

    async def history(self, session_id: str) -> list[bytes]:
        turns = self._history.get(session_id)
        if turns is None:
            return []
        self._touch(session_id)
        return [m for _, messages in turns for m in messages]

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
        self._put_turn(session_id, messages)
        self._put_state(session_id, state)
        self._bound(session_id)
        return True

    async def delete(self, session_id: str) -> None:
        self._forget(session_id)
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
    if url == "memory:":
        return MemorySessionStore()
    if not url or (url.startswith("sqlite:///") and len(url) > len("sqlite:///")):
        from .store_sqlite import SqliteSessionStore

        path = url[len("sqlite:///") :] if url else os.environ.get("ACP_SESSION_DB")
        return SqliteSessionStore(path or "sessions.db")
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


def __getattr__(name: str) -> Any:
    """``store.SqliteSessionStore``, imported at first use: an agent on another store
    (``memory:``, PostgreSQL) never imports store_sqlite.py and sqlite3."""
    if name == "SqliteSessionStore":
        from .store_sqlite import SqliteSessionStore

        return SqliteSessionStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
