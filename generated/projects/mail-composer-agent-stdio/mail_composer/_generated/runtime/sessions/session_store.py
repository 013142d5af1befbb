"""How the session core reaches its store: which store a generated agent opens, and each
call retried, then answered with a clear transient error when the store stays down, so
that nothing is acknowledged that is not saved."""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import observe
from ..wire.errors import RpcError
from .store_common import private_folder

if TYPE_CHECKING:
    from ..agent.agent import Session
    from .store import SessionStore
    from .store_sqlite import SqliteSessionStore

log = logging.getLogger("acp.runtime.sessions")

STORE_RETRY_DELAYS = (0.05, 0.25)


async def durably(failure: str, op: Callable[[], Awaitable[Any]], details: Any = None) -> Any:
    """Run one store call, retried twice (a locked database is often free a moment later);
    when it still fails: a clear, transient JSON-RPC error instead of a bare internal error."""
    for delay in (*STORE_RETRY_DELAYS, None):
        try:
            with observe.store(op, STORE_CALLS):
                return await op()
        except ValueError:  # the request's fault (a cursor the store did not hand out)
            raise
        except Exception as exc:  # noqa: BLE001 - sqlite3.Error, OSError (disk full), any store's
            if delay is None:
                log.error("session store: %s (%s: %s)", failure, type(exc).__name__, str(exc)[:200])
                break
            await asyncio.sleep(delay)
    raise RpcError(
        -32603,
        f"session store unavailable: {failure}",
        {"name": "StoreUnavailable", "transient": True, "details": details},
    )


def open_default_store(
    name: str, default_path: str | Path | None = None, *, deferred: bool = False
) -> SessionStore:
    """The store a generated agent uses: ``$ACP_SESSION_STORE`` (``sqlite:///path.db``,
    ``memory:`` or ``postgresql://...``, see ``store.open_store``), else SQLite at
    ``$ACP_SESSION_DB``, else at ``default_path``, else at
    ``$XDG_STATE_HOME/<name>/sessions.db`` (``~/.local/state/...``).  ``deferred``: that
    SQLite file is opened at the store's first call (``DeferredSqliteStore``)."""
    url = os.environ.get("ACP_SESSION_STORE", "").strip()
    if url:
        from .store import open_store

        try:
            return open_store(url)
        except ValueError as exc:  # says what to write instead; never the URL's credentials
            raise SystemExit(f"error: {exc}") from None
    path = os.environ.get("ACP_SESSION_DB") or default_path
    if not path:
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        path = Path(base) / name / "sessions.db"
    private_folder(Path(path).parent)  # 0700: the file (0600) is made when SQLite opens it
    if deferred:
        return DeferredSqliteStore(str(path))
    from .store_sqlite import SqliteSessionStore

    return SqliteSessionStore(path)


# the store's calls: what a DeferredSqliteStore hands to the store it opened, and what a
# store span is named by (the one `durably`'s lambda makes)
STORE_CALLS = (
    "save",
    "load",
    "append_history",
    "history",
    "delete",
    "save_turn",
    "acquire",
    "renew",
    "release",
    "list_sessions",
)


class DeferredSqliteStore:
    """The SQLite store of a stdio agent, opened at its first call (the first session
    request), not before the agent answers ``initialize``: an editor waits for that
    answer, and neither it nor ``authenticate`` touches the store.  Nothing is
    acknowledged before the store is open (every write is awaited through it).  A file
    that cannot be opened fails that call: logged with the path, answered by ``durably``
    as the transient StoreUnavailable error; the next call tries again.  Once open, its
    calls are the opened store's own methods (set on this object: no extra hop)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._store: SqliteSessionStore | None = None

    def opened(self) -> SqliteSessionStore:
        """The store, opened now if it is not yet."""
        if self._store is None:
            from .store_sqlite import SqliteSessionStore

            try:
                store = SqliteSessionStore(self.path)
            except Exception as exc:
                log.error(
                    "session store: cannot open %s (%s: %s)",
                    self.path,
                    type(exc).__name__,
                    str(exc)[:200],
                )
                raise
            for call in STORE_CALLS:
                setattr(self, call, getattr(store, call))
            self._store = store
        return self._store

    def settled(self) -> Awaitable[None]:
        """``SqliteSessionStore.settled`` (nothing to wait for while it is not open)."""
        if self._store is None:
            return _nothing()
        return self._store.settled()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    def __getattr__(self, name: str) -> Any:  # vacuum, max_history_bytes, ...
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.opened(), name)

    async def save(self, session_id: str, state: dict[str, Any]) -> None:
        await self.opened().save(session_id, state)

    async def load(self, session_id: str) -> dict[str, Any] | None:
        return await self.opened().load(session_id)

    async def append_history(self, session_id: str, messages: list[bytes]) -> None:
        await self.opened().append_history(session_id, messages)

    async def history(self, session_id: str) -> list[bytes]:
        return await self.opened().history(session_id)

    async def delete(self, session_id: str) -> None:
        await self.opened().delete(session_id)

    async def save_turn(
        self,
        session_id: str,
        state: dict[str, Any],
        messages: list[bytes],
        *,
        owner: str | None = None,
    ) -> bool:
        return await self.opened().save_turn(session_id, state, messages, owner=owner)

    async def acquire(
        self, session_id: str, owner: str, ttl: float, *, take_over: bool = False
    ) -> str | None:
        return await self.opened().acquire(session_id, owner, ttl, take_over=take_over)

    async def renew(self, session_id: str, owner: str, ttl: float) -> bool:
        return await self.opened().renew(session_id, owner, ttl)

    async def release(self, session_id: str, owner: str) -> None:
        await self.opened().release(session_id, owner)

    async def list_sessions(
        self, cursor: str | None, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
        return await self.opened().list_sessions(cursor, limit)


async def _nothing() -> None:
    return None


def now() -> str:
    """The time, to the second, as RFC 3339 UTC ("2026-11-28T07:20:00Z"); formatted
    once a second (every saved turn asks)."""
    return _second(int(time.time()))


@functools.lru_cache(maxsize=1)
def _second(second: int) -> str:
    at = datetime.datetime.fromtimestamp(second, datetime.UTC)
    return at.isoformat().replace("+00:00", "Z")


def stored_state(s: Session) -> dict[str, Any]:
    """What the store keeps of a session besides its history (a model's own message
    history among it, where the agent runs one: model/history.py)."""
    state = {
        "config_raw": s.config_raw,
        "state": s.state,
        "turns": s.turns,
        "mode": s.mode,
        "cwd": s.cwd or "/",
        "updatedAt": now(),
    }
    if s.model_history is not None:
        state["model_history"] = s.model_history
    return state
