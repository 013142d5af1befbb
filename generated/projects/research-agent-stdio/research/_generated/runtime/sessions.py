"""The session core: every session method of the revision, persisted in a ``SessionStore``,
one owner per session; stdio, HTTP and WebSocket use it alike (a transport only moves frames).

``SessionCore(make_agent, store)`` is called with a transport's sink and returns that
connection's ``SessionConnection`` (a ``jsonrpc.Connection``), whose agent runtime is
``make_agent()``.  Methods served (each only when the revision's method table has it):

* ``session/new``: saved before it is answered; the connection takes the session's lease.
* ``session/load`` (v1): rebuilds the session from the store and replays its history as
  ``session/update`` notifications; ``session/resume``: the same without replay (v1) or with
  the replay ``replayFrom`` asks for (v2: absent = none, ``{"type": "start"}`` = all).
  Both take the session over: a connection that held it has its running turn cancelled
  (saved as cancelled) and gets ``SESSION_IN_USE`` on its next use of the session.
* ``session/list`` (pages of the store's sessions), ``session/close`` (ends the session's
  work on this connection and releases it), ``session/delete`` (gone from the store).
* ``session/prompt``: the user's prompt is recorded only once the turn is accepted, then
  every ``session/update`` of the turn; one atomic ``save_turn`` when it ends.  v2: the
  turn's ``idle`` state_update (what acknowledges it) is held back until that save is done;
  a turn whose save fails ends with stopReason ``error`` (the transient StoreUnavailable).

The lease (store.py): the connection that creates, loads or resumes a session owns it and
renews it every ``lease_ttl / 3`` seconds while it lives; any other connection's prompt or
config change gets ``SESSION_IN_USE`` (a session nobody holds, e.g. after a restart, is
taken silently).  On the same process a take-over cancels the previous owner's turn at
once; across replicas sharing a store, the previous owner finds out at its next renewal
(at most ``lease_ttl / 3`` s) or at its next prompt (``OWNER_CHECK`` s after the store
last confirmed the lease), and then writes nothing more.  Whatever the timing, a turn is
saved only while its connection holds the lease (``save_turn(owner=...)`` checks the lease
row in the save's own transaction); a turn whose save is refused answers
``SESSION_IN_USE``, so no turn of a stale owner is ever acknowledged or recorded.

When the store fails (after two retries) nothing is acknowledged that is not saved: see
``_durably``; a finished turn whose save failed is kept in memory and written ahead of the
session's next saved turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import importlib
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from .dispatch import runtime_attr
from .errors import RpcError, from_validation_error, invalid_params
from .jsonrpc import DEFAULT_MAX_MESSAGE_SIZE, Connection, RequestContext, Sink
from .store import SessionStore, open_store
from .store_sqlite import SqliteSessionStore

if TYPE_CHECKING:
    from .agent import AgentRuntime, Session


class CallbackSender(Protocol):
    """What the session core needs of callbacks.py's sender. callbacks.py (and httpx) ship
    only in projects whose manifest declares async output with a callback, so it is
    loaded by name in `callbacks_for`, never imported here."""

    def schedule(self, url: str, payload: dict[str, Any]) -> Any: ...


log = logging.getLogger("acp.runtime.sessions")

SESSION_IN_USE = -32001  # implementation-defined (JSON-RPC server error range)
LEASE_TTL = 30.0
LIST_PAGE = 50
STORE_RETRY_DELAYS = (0.05, 0.25)
# a prompt re-checks the lease in the store when it was last confirmed longer ago than
# this: a take-over by another replica stops a new turn within it (a running one within
# lease_ttl / 3); locally, a take-over is seen at once
OWNER_CHECK = 1.0
TAKE_OVER_WAIT = 10.0  # seconds a take-over waits for the previous owner's turn to end

_UNSET: Any = object()
_UPDATE_PREFIX = b'{"jsonrpc":"2.0","method":"session/update"'
# requests that act on one existing session: the connection must own it
_OWNED = frozenset({"session/prompt", "session/set_config_option", "session/set_mode"})
# served by the core itself
_CORE = frozenset(
    {"session/load", "session/resume", "session/list", "session/close", "session/delete"}
)


def _unknown(sid: Any) -> RpcError:
    return invalid_params(
        f"unknown session {sid!r}", [{"loc": ["params", "sessionId"], "msg": "unknown session"}]
    )


MAX_SESSION_ID = 256


def _check_session_id(sid: Any) -> None:
    """A session id is 1 to ``MAX_SESSION_ID`` printable characters: anything else (a NUL
    byte, which PostgreSQL cannot store; a megabyte) is refused before any store sees it,
    the same -32602 whatever the store."""
    if type(sid) is str and 0 < len(sid) <= MAX_SESSION_ID and sid.isprintable():
        return
    if type(sid) is not str:
        return  # absent or not a string: the params check names it
    what = f"1 to {MAX_SESSION_ID} printable characters"
    err = invalid_params(
        f"params.sessionId: not a session id ({what}) (at /sessionId)",
        [{"loc": ["params", "sessionId"], "msg": f"expected {what}", "pointer": "/sessionId"}],
    )
    err.data["pointer"] = "/sessionId"
    raise err


def _is_idle(frame: bytes) -> bool:
    """A ``state_update`` to ``idle`` (cheap test first: most updates are chunks)."""
    if b'"state_update"' not in frame or b'"idle"' not in frame:
        return False
    update = orjson.loads(frame).get("params", {}).get("update", {})
    return bool(update.get("sessionUpdate") == "state_update" and update.get("state") == "idle")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


async def _durably(failure: str, op: Callable[[], Awaitable[Any]], details: Any = None) -> Any:
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


class SessionCore:
    """Per process: the store, the replica id in lease owners, which local connection holds
    which session, turns whose save failed.  ``core(sink)`` makes one connection."""

    def __init__(
        self,
        make_agent: Callable[[], AgentRuntime],
        store: SessionStore,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        lease_ttl: float = LEASE_TTL,
        replica: str | None = None,
        callbacks: CallbackSender | None = None,
    ) -> None:
        self.make_agent = make_agent
        self.store = store
        self.max_message_size = max_message_size
        self.lease_ttl = lease_ttl
        self.replica = replica or uuid.uuid4().hex[:12]
        self.callbacks = callbacks
        self.owners: dict[str, SessionConnection] = {}  # local connection holding each lease
        self.unsaved: dict[str, list[bytes]] = {}  # turns whose save failed, per session
        self.params_models: dict[tuple[str, str], Any] = {}  # (revision, method) -> model

    def __call__(self, sink: Sink) -> SessionConnection:
        return SessionConnection(self, self.make_agent(), sink)


def advertise(rt: AgentRuntime, caps: Any) -> None:
    """Put the session methods this core serves into an agent-capabilities object, under
    the names the connection's revision description gives them (v1 ``loadSession`` and
    ``sessionCapabilities.*``; v2 ``session`` and ``session.delete``)."""
    if type(caps) is not dict:
        return
    methods = rt._methods
    names = rt.revision.agent_capabilities
    if names.load_session:
        caps[names.load_session] = "session/load" in methods
    if not names.session:
        return
    sc = caps
    for key in names.session:
        inner = sc.get(key)
        if type(inner) is not dict:
            inner = sc[key] = {}
        sc = inner
    for name in ("resume", "list", "close", "delete"):
        if f"session/{name}" in methods and name in names.session_fields:
            sc.update(names.mark(names.session_flags, {name: True}))


def _primed(frames: list[bytes], sid: str, primers: tuple[tuple[str, str], ...]) -> list[bytes]:
    """A replay's frames with each message primed: before the first chunk of a message
    id, that message's whole-message update with `content: []` (unless one came before),
    so a client that patches messages by id starts it empty (v2 session/resume)."""
    if not primers:
        return frames
    whole_of = dict(primers)
    wholes = set(whole_of.values())
    seen: set[tuple[str, str]] = set()
    out: list[bytes] = []
    for frame in frames:
        try:
            update = orjson.loads(frame)["params"]["update"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            out.append(frame)
            continue
        tag = update.get("sessionUpdate") if type(update) is dict else None
        mid = update.get("messageId") if type(update) is dict else None
        if type(tag) is str and type(mid) is str:
            whole = tag if tag in wholes else whole_of.get(tag)
            if whole is not None and (whole, mid) not in seen:
                seen.add((whole, mid))
                if whole != tag:
                    primer = {"sessionUpdate": whole, "messageId": mid, "content": []}
                    params = {"sessionId": sid, "update": primer}
                    out.append(
                        orjson.dumps(
                            {"jsonrpc": "2.0", "method": "session/update", "params": params}
                        )
                    )
        out.append(frame)
    return out


class SessionConnection(Connection):
    """One connection's sessions: the runtime core (``Connection``) with the session
    methods served from the store, each session's updates recorded while a turn runs."""

    def __init__(self, core: SessionCore, rt: AgentRuntime, sink: Sink) -> None:
        from .agent import immediate_methods

        super().__init__(
            sink,
            self._on_request,
            rt.handle_notification,
            max_message_size=core.max_message_size,
            immediate_notifications=immediate_methods(),
        )
        self.core = core
        self.rt = rt
        self.owner = f"{core.replica}/{uuid.uuid4().hex[:12]}"
        self.held: set[str] = set()  # sessions whose lease this connection holds
        self.lost: set[str] = set()  # taken over elsewhere: write nothing more for them
        self.cwd: dict[str, str] = {}
        self.confirmed: dict[str, float] = {}  # when the store last confirmed our lease
        self.recorded: dict[str, list[bytes]] = {}
        self.turns: dict[str, asyncio.Task[Any]] = {}  # done when the turn ended and was saved
        # v2: a turn's idle state_update (its acknowledgment) waits here until the turn is
        # saved, so that no client sees a turn end that a crash or a store outage can lose
        self.saving: set[str] = set()
        self.held_idle: dict[str, bytes] = {}
        self._renewer: asyncio.Task[None] | None = None
        rt.attach(self)

    @property
    def v2(self) -> bool:
        """The connection's revision (negotiated at initialize) has the v2 lifecycle."""
        return self.rt.revision.turn.lifecycle == "v2"

    # ---- recording ---------------------------------------------------------------
    def _enqueue(self, frame: bytes, session_id: str | None, *, checked: bool = False) -> None:
        if session_id is not None and frame.startswith(_UPDATE_PREFIX):
            buf = self.recorded.get(session_id)
            if buf is not None:
                buf.append(frame)
                if session_id in self.saving and _is_idle(frame):
                    self.held_idle[session_id] = frame  # sent by _save_later once saved
                    return
        super()._enqueue(frame, session_id, checked=checked)

    # ---- state -------------------------------------------------------------------
    def _state(self, s: Session) -> dict[str, Any]:
        return {
            "config_raw": s.config_raw,
            "state": s.state,
            "turns": s.turns,
            "cwd": self.cwd.get(s.id, "/"),
            "updatedAt": _now(),
        }

    def _in_use(self, sid: str) -> RpcError:
        take_over = "session/resume" if self.v2 else "session/load"
        return RpcError(
            SESSION_IN_USE,
            f"session {sid} is in use by another connection; {take_over} takes it over",
            {
                "name": "SessionInUse",
                "transient": True,
                "details": {"sessionId": sid, "takeOver": take_over},
            },
        )

    def _hold(self, sid: str) -> None:
        self.held.add(sid)
        self.confirmed[sid] = time.monotonic()
        self.lost.discard(sid)
        self.core.owners[sid] = self
        if self._renewer is None:
            self._renewer = asyncio.get_running_loop().create_task(self._renew_loop())

    def _forget(self, sid: str) -> None:
        self.held.discard(sid)
        self.rt.sessions.pop(sid, None)
        if self.core.owners.get(sid) is self:
            del self.core.owners[sid]

    async def _restore(self, sid: str, params: dict[str, Any], *, take_over: bool) -> Session:
        """Make this connection the session's owner, rebuilt from the store if needed."""
        from .agent import Session

        core = self.core
        if take_over:
            prev = core.owners.get(sid)
            if prev is not None and prev is not self:
                await prev.evict(sid, save=True)  # its turn ends (and is saved) first
        elif sid in self.held and sid in self.rt.sessions:
            return self.rt.sessions[sid]
        saved = await _durably("could not load the session", lambda: core.store.load(sid))
        if saved is None:
            raise _unknown(sid)
        holder = await _durably(
            "could not take the session",
            lambda: core.store.acquire(sid, self.owner, core.lease_ttl, take_over=take_over),
        )
        if holder is not None:
            raise self._in_use(sid)
        s = self.rt.sessions.get(sid) if sid in self.held else None
        if s is None:
            raw = saved.get("config_raw") or {}
            try:
                config = self.rt._validate_config(raw, ("params", "sessionId"))
            except BaseException:
                await core.store.release(sid, self.owner)
                raise
            s = Session(sid, config, raw, saved.get("state") or self.rt._machine.initial)
            s.turns = int(saved.get("turns") or 0)
            self.rt.sessions[sid] = s
        cwd = params.get("cwd")
        self.cwd[sid] = cwd if type(cwd) is str else str(saved.get("cwd") or "/")
        self._hold(sid)
        return s

    async def evict(self, sid: str, *, save: bool) -> None:
        """Another connection takes the session: end its running turn here (saved when
        ``save``, i.e. this connection still held the lease), then forget it."""
        if not save:
            self.lost.add(sid)
        s = self.rt.sessions.get(sid)
        turn = self.turns.get(sid)
        if s is not None and s.task is not None and not s.task.done():
            s.cancel_requested = True
            s.task.cancel()
        if turn is not None and not turn.done() and turn is not asyncio.current_task():
            done, _ = await asyncio.wait({turn}, timeout=TAKE_OVER_WAIT)
            if not done:
                log.warning("session %s: the previous owner's turn did not end in time", sid)
        self._forget(sid)
        if save:
            self.lost.add(sid)

    async def _renew_loop(self) -> None:
        core = self.core
        while True:
            await asyncio.sleep(core.lease_ttl / 3)
            for sid in list(self.held):
                try:
                    ok = await core.store.renew(sid, self.owner, core.lease_ttl)
                except Exception as exc:  # noqa: BLE001 - keep the session; retry next round
                    log.warning("session %s: lease not renewed (%s)", sid, type(exc).__name__)
                    continue
                if ok:
                    self.confirmed[sid] = time.monotonic()
                elif sid in self.held:
                    log.info("session %s was taken over by another connection", sid)
                    await self.evict(sid, save=False)

    # ---- requests ----------------------------------------------------------------
    async def _on_request(self, method: str, params: Any, ctx: RequestContext) -> Any:
        rt = self.rt
        if type(params) is dict:
            _check_session_id(params.get("sessionId"))
        entry = rt._methods.get(method)
        # in the revision's method table and not overridden in handlers.py
        served = entry is not None and not rt._overridden(entry.attr)
        if served:  # (handlers.py's overrides get the same check from their typed caller)
            self._validate(method, params)
        if served and method == "session/load":
            return await self._attach(params, replay=True)
        if served and method == "session/resume":
            return await self._attach(params, replay=self._replay_from(params))
        if served and method == "session/list":
            return await self._list(params)
        if served and method == "session/close":
            return await self._close(params)
        if served and method == "session/delete":
            return await self._delete(params)
        sid = params.get("sessionId") if type(params) is dict else None
        if method in _OWNED and type(sid) is str:
            if sid not in self.held or sid not in rt.sessions:
                other = self.core.owners.get(sid)
                if other is not None and other is not self:
                    raise self._in_use(sid)
                store = self.core.store
                saved = await _durably("could not load the session", lambda: store.load(sid))
                if saved is not None:
                    await self._restore(sid, params, take_over=False)
            if method == "session/prompt":
                return await self._prompt(sid, params, ctx)
            if method == "session/set_config_option":
                return await self._set_config(sid, params, ctx)
        result = await rt.handle_request(method, params, ctx)
        if method == "initialize" and type(result) is dict:
            advertise(rt, result.get(rt.revision.init.response_capabilities))
        elif method == "_agent/info" and type(result) is dict:
            advertise(rt, result.get("capabilities"))
        elif method == "session/new" and type(result) is dict:
            await self._created(result, params)
        return result

    def _validate(self, method: str, params: Any) -> None:
        """Every request's params checked against the revision's model of them before
        anything runs or is stored (-32602 with the JSON pointer of the first problem).
        Not ``initialize``: its body may be another revision's, the negotiation checks
        what it reads, nothing of it is stored, and the handshake stays fast (importing a
        revision's models costs ~0.3 s of CPU once per process: it happens at the first
        session request instead)."""
        if method == "initialize":
            return
        rev = self.rt.revision
        key = (rev.package, method)
        pcls = self.core.params_models.get(key, _UNSET)
        if pcls is _UNSET:
            entry = rev.side("agent").get(method)
            pm = self.rt._protocol_models_of(rev.package)
            pcls = (
                getattr(pm, entry.params, None)
                if pm is not None and entry and entry.params
                else None
            )
            if method not in _CORE and not hasattr(self.rt, runtime_attr(method)):
                pcls = None  # a method nobody implements answers -32601 whatever its params
            self.core.params_models[key] = pcls
        if pcls is None:
            return
        if type(params) is not dict:
            raise invalid_params(
                "params must be an object", [{"loc": ["params"], "msg": "expected an object"}]
            )
        try:
            pcls.model_validate(params)
        except Exception as exc:
            if hasattr(exc, "errors"):
                raise from_validation_error(exc, ("params",), params) from None
            raise

    async def _created(self, result: dict[str, Any], params: Any) -> None:
        sid = result.get("sessionId")
        s = self.rt.sessions.get(sid) if type(sid) is str else None
        if s is None:
            return  # a user override that keeps no runtime session: nothing to persist
        cwd = params.get("cwd") if type(params) is dict else None
        self.cwd[s.id] = cwd if type(cwd) is str else "/"
        state = self._state(s)
        store = self.core.store
        try:
            await _durably("the session was not created", lambda: store.save(s.id, state))
            await _durably(
                "the session was not created",
                lambda: store.acquire(s.id, self.owner, self.core.lease_ttl),
            )
        except RpcError:
            self.rt.sessions.pop(s.id, None)
            raise
        self._hold(s.id)

    def _replay_from(self, params: Any) -> bool:
        if not self.v2:
            return False
        cursor = params.get("replayFrom") if type(params) is dict else None
        if cursor is None:
            return False
        kind = cursor.get("type") if type(cursor) is dict else None
        if kind == "start":
            return True
        raise invalid_params(
            f"params.replayFrom: replay from {kind!r} is not supported (use {{'type': 'start'}})",
            [{"loc": ["params", "replayFrom", "type"], "msg": "unsupported replay cursor"}],
        )

    async def _attach(self, params: Any, *, replay: bool) -> dict[str, Any]:
        sid = params.get("sessionId") if type(params) is dict else None
        if type(sid) is not str:
            raise _unknown(sid)
        s = await self._restore(sid, params, take_over=True)
        if replay:
            store = self.core.store
            history = await _durably(
                "could not read the session history", lambda: store.history(sid)
            )
            frames = [*history, *self.core.unsaved.get(sid, ())]
            for frame in _primed(frames, sid, self.rt.revision.sessions.replay_primers):
                self.send_raw(frame, sid)
        result: dict[str, Any] = {"sessionId": sid}
        opts = self.rt._config_options(s.config_raw)
        if opts:
            result["configOptions"] = opts
        self.rt._session_opened(s, params, result, None)  # modes; commands after the answer
        return result

    async def _list(self, params: Any) -> dict[str, Any]:
        cursor = params.get("cursor") if type(params) is dict else None
        cwd = params.get("cwd") if type(params) is dict else None
        if cursor is not None and type(cursor) is not str:
            raise invalid_params(
                "params.cursor: expected a string",
                [{"loc": ["params", "cursor"], "msg": "expected a string"}],
            )
        store = self.core.store
        try:
            page, nxt = await _durably(
                "could not list the sessions", lambda: store.list_sessions(cursor, LIST_PAGE)
            )
        except ValueError:
            raise invalid_params(
                "params.cursor: not a cursor this agent handed out",
                [{"loc": ["params", "cursor"], "msg": "unknown cursor"}],
            ) from None
        sessions = []
        for sid, state in page:
            where = str(state.get("cwd") or "/")
            if cwd is not None and where != cwd:
                continue
            info: dict[str, Any] = {"sessionId": sid, "cwd": where}
            if type(state.get("updatedAt")) is str:
                info["updatedAt"] = state["updatedAt"]
            sessions.append(info)
        result: dict[str, Any] = {"sessions": sessions}
        if nxt is not None:
            result["nextCursor"] = nxt
        return result

    async def _close(self, params: Any) -> dict[str, Any]:
        sid = params.get("sessionId") if type(params) is dict else None
        if type(sid) is not str or sid not in self.held:
            raise _unknown(sid)
        await self.evict(sid, save=True)
        self.lost.discard(sid)
        await self.core.store.release(sid, self.owner)
        return {}

    async def _delete(self, params: Any) -> dict[str, Any]:
        sid = params.get("sessionId") if type(params) is dict else None
        store = self.core.store
        if type(sid) is not str:
            raise _unknown(sid)
        if await _durably("could not delete the session", lambda: store.load(sid)) is None:
            return {}  # deleting what is not there succeeds (ACP TCK ACP-DELETE-002)
        prev = self.core.owners.get(sid)
        if prev is not None:
            await prev.evict(sid, save=False)
        await _durably("could not delete the session", lambda: store.delete(sid))
        self.core.unsaved.pop(sid, None)
        return {}

    async def _set_config(self, sid: str, params: dict[str, Any], ctx: RequestContext) -> Any:
        s = self.rt.sessions.get(sid)
        before = (s.config, s.config_raw) if s is not None else None
        result = await self.rt.handle_request("session/set_config_option", params, ctx)
        if s is None or before is None:
            return result
        state = self._state(s)
        store = self.core.store
        try:
            await _durably("the option was not changed", lambda: store.save(sid, state))
        except RpcError:
            s.config, s.config_raw = before
            raise
        return result

    # ---- turns -------------------------------------------------------------------
    def _user_frames(self, sid: str, params: dict[str, Any]) -> list[bytes]:
        """The user's prompt as the history records it (v1: ``user_message_chunk``
        updates; v2 records the agent's own ``user_message`` update instead).  Built before
        the turn runs: content JSON cannot carry is refused before anything happens."""
        blocks = params.get("prompt")
        if self.v2 or type(blocks) is not list:
            return []
        frames = []
        for i, block in enumerate(blocks):
            msg = {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {
                    "sessionId": sid,
                    "update": {"sessionUpdate": "user_message_chunk", "content": block},
                },
            }
            try:
                frames.append(orjson.dumps(msg))
            except TypeError:  # orjson: nested deeper than it serializes (255 levels)
                raise invalid_params(
                    f"params.prompt[{i}]: content nested too deeply",
                    [{"loc": ["params", "prompt", i], "msg": "nested too deeply"}],
                ) from None
        return frames

    async def _prompt(self, sid: str, params: dict[str, Any], ctx: RequestContext) -> Any:
        rt = self.rt
        while True:
            s = rt.sessions.get(sid)
            running = self.turns.get(sid)
            if s is None or running is None or running.done():
                break
            if s.task is not None:
                # a turn runs: the runtime refuses the prompt (the state error); nothing
                # of it is recorded
                return await rt.handle_request("session/prompt", params, ctx)
            # the previous turn ended but is still being saved: the session stays busy
            # until it is, so this prompt waits (turns are stored and answered in order)
            await asyncio.wait({running})
        if s is None:  # unknown session: the runtime refuses it
            return await rt.handle_request("session/prompt", params, ctx)
        # the session is this prompt's from here (no await before): a prompt arriving
        # meanwhile waits above instead of running beside it
        self.turns[sid] = asyncio.current_task()  # type: ignore[assignment]
        store = self.core.store
        now = time.monotonic()
        if now - self.confirmed.get(sid, 0.0) > OWNER_CHECK:  # taken over by another replica?
            if not await _durably(
                "could not check the session's owner",
                lambda: store.renew(sid, self.owner, self.core.lease_ttl),
            ):
                await self.evict(sid, save=False)
                raise self._in_use(sid)
            self.confirmed[sid] = now
        user = self._user_frames(sid, params)
        before = s.turns
        self.recorded[sid] = []
        try:
            result = await rt.handle_request("session/prompt", params, ctx)
        except BaseException:
            if s.turns == before:  # refused before it ran: no trace in history
                self.recorded.pop(sid, None)
                raise
            with contextlib.suppress(RpcError):  # the turn's own error is the answer
                await self._save_turn(sid, s, user, None)
            raise
        if s.turns == before:
            self.recorded.pop(sid, None)
            return result
        if self.v2 and s.task is not None and not s.task.done():
            # v2 answers on acceptance: the turn runs on; save it when it ends
            turn = s.task
            self.turns[sid] = asyncio.get_running_loop().create_task(
                self._save_later(sid, s, turn, params)
            )
            return result
        frames = await self._save_turn(sid, s, user, result)
        self._callback(sid, params, result, frames)
        return result

    async def _save_later(
        self, sid: str, s: Session, turn: asyncio.Task[Any], params: dict[str, Any]
    ) -> None:
        self.saving.add(sid)
        try:
            with contextlib.suppress(BaseException):
                await asyncio.shield(turn)
            await asyncio.sleep(0)  # the turn's last updates (done callbacks) are queued first
            try:
                frames = await self._save_turn(sid, s, [], None)
            except RpcError as err:
                self.saving.discard(sid)
                idle = self.held_idle.pop(sid, None)
                if idle is not None:  # the turn ends, unsaved: an error, not its end_turn
                    unsaved = err.code != SESSION_IN_USE
                    super()._enqueue(self._unsaved_idle(sid, idle, err) if unsaved else idle, sid)
                return
            self.saving.discard(sid)
            idle = self.held_idle.pop(sid, None)
            if idle is not None:
                super()._enqueue(idle, sid)
            self._callback(sid, params, None, frames)
        finally:
            self.saving.discard(sid)
            idle = self.held_idle.pop(sid, None)
            if idle is not None:  # cancelled meanwhile: the client still sees the turn end
                super()._enqueue(idle, sid)

    def _unsaved_idle(self, sid: str, idle: bytes, err: RpcError) -> bytes:
        """The idle update of a turn whose save failed: stopReason ``error`` with the store's
        error (the revision's error stop reason), else the original one with it in _meta."""
        msg = orjson.loads(idle)
        update = msg["params"]["update"]
        field = self.rt.revision.turn.idle_error
        if field:
            update["stopReason"] = "error"
            update[field] = err.to_wire()
        else:
            update["_meta"] = {**(update.get("_meta") or {}), "error": err.to_wire()}
        return orjson.dumps(msg)

    async def _save_turn(self, sid: str, s: Session, user: list[bytes], result: Any) -> list[bytes]:
        """Write the turn (after any earlier unsaved one); on failure keep it unsaved."""
        frames = self.recorded.pop(sid, [])
        if sid in self.lost:
            # taken over elsewhere: the new owner's state wins, and this turn is not
            # acknowledged (it is in no history)
            raise self._in_use(sid)
        core = self.core
        batch = core.unsaved.pop(sid, []) + user + frames
        state = self._state(s)
        stop = result.get("stopReason") if type(result) is dict else None
        try:
            saved = await _durably(
                "the turn finished but was not saved",
                lambda: core.store.save_turn(sid, state, batch, owner=self.owner),
                {"stopReason": stop},
            )
        except RpcError:
            core.unsaved[sid] = batch
            raise
        if saved is False:
            # the store says another owner holds the lease (taken over between our last
            # check and this save): nothing was written, so nothing is acknowledged
            log.info("session %s was taken over before its turn was saved", sid)
            await self.evict(sid, save=False)
            raise self._in_use(sid)
        return frames

    def _callback(self, sid: str, params: dict[str, Any], result: Any, frames: list[bytes]) -> None:
        callbacks = self.core.callbacks
        meta = params.get("_meta")
        url = meta.get("callbackUrl") if type(meta) is dict and callbacks is not None else None
        if url is None or callbacks is None:
            return
        updates = [orjson.loads(f)["params"]["update"] for f in frames]
        stop = result.get("stopReason") if type(result) is dict else None
        if stop is None:  # v2: the stop reason is in the turn's last state_update
            for u in reversed(updates):
                if u.get("sessionUpdate") == "state_update" and u.get("state") == "idle":
                    stop = u.get("stopReason")
                    break
        callbacks.schedule(url, {"sessionId": sid, "stopReason": stop, "updates": updates})

    # ---- end -----------------------------------------------------------------------
    async def close(self) -> None:
        """End the connection: its turns are cancelled (and saved), its leases released."""
        if self._closed:
            return
        for sid in list(self.held):
            s = self.rt.sessions.get(sid)
            if s is not None and s.task is not None and not s.task.done() and self.v2:
                s.task.cancel()  # v2 turns run outside the request tasks close() cancels
        await super().close()
        pending = [
            t for t in self.turns.values() if not t.done() and t is not asyncio.current_task()
        ]
        if pending:
            await asyncio.wait(pending, timeout=TAKE_OVER_WAIT)
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        for sid in list(self.held):
            if self.core.owners.get(sid) is self:
                del self.core.owners[sid]
            with contextlib.suppress(Exception):
                await self.core.store.release(sid, self.owner)
        self.held.clear()


def callbacks_for(agent_cls: type[AgentRuntime]) -> CallbackSender | None:
    """A callback sender when the manifest declares ``output_modes.async.callback``."""
    modes = (getattr(agent_cls, "_acp_manifest", {}) or {}).get("output_modes") or {}
    async_mode = modes.get("async") if type(modes) is dict else None
    if type(async_mode) is dict and async_mode.get("callback"):
        sender: CallbackSender = importlib.import_module(".callbacks", __package__).CallbackSender()
        return sender
    return None
