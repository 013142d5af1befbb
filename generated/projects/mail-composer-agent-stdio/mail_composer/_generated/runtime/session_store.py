"""How the session core reaches its store: which store a generated agent opens, and each
call retried, then answered with a clear transient error when the store stays down, so
that nothing is acknowledged that is not saved."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import RpcError
from .store import SessionStore, open_store
from .store_sqlite import SqliteSessionStore

if TYPE_CHECKING:
    from .agent import Session

log = logging.getLogger("acp.runtime.sessions")

STORE_RETRY_DELAYS = (0.05, 0.25)


async def durably(failure: str, op: Callable[[], Awaitable[Any]], details: Any = None) -> Any:
    """Run one store call, retried twice (a locked database is often free a moment later);
    when it still fails: a clear, transient JSON-RPC error instead of a bare internal error."""
    for delay in (*STORE_RETRY_DELAYS, None):
        try:
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


def open_default_store(name: str, default_path: str | Path | None = None) -> SessionStore:
    """The store a generated agent uses: ``$ACP_SESSION_STORE`` (``sqlite:///path.db``,
    ``memory:`` or ``postgresql://...``, see ``store.open_store``), else SQLite at
    ``$ACP_SESSION_DB``, else at ``default_path``, else at
    ``$XDG_STATE_HOME/<name>/sessions.db`` (``~/.local/state/...``)."""
    url = os.environ.get("ACP_SESSION_STORE", "").strip()
    if url:
        try:
            return open_store(url)
        except ValueError as exc:  # says what to write instead; never the URL's credentials
            raise SystemExit(f"error: {exc}") from None
    path = os.environ.get("ACP_SESSION_DB") or default_path
    if not path:
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        path = Path(base) / name / "sessions.db"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return SqliteSessionStore(path)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def stored_state(s: Session) -> dict[str, Any]:
    """What the store keeps of a session besides its history."""
    return {
        "config_raw": s.config_raw,
        "state": s.state,
        "turns": s.turns,
        "mode": s.mode,
        "cwd": s.cwd or "/",
        "updatedAt": now(),
    }
