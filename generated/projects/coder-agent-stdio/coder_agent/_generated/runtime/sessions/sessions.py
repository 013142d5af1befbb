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

When the store fails (after two retries) nothing is acknowledged that is not saved (see
session_store.py); a finished turn whose save failed is written ahead of the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import observe
from ..wire.errors import RpcError
from ..wire.jsonrpc import DEFAULT_MAX_MESSAGE_SIZE, Connection, Sink
from ..wire.requests import RequestContext
from ..wire.routes import Handler, Route, Wrapper
from .session_methods import (
    SESSION_IN_USE,
    advertise,
    check_params,
    check_session_id,
    list_sessions,
    replay_from,
    session_in_use,
    unknown_session,
)
from .session_record import (
    UPDATE_PREFIX,
    CallbackSender,
    is_idle,
    primed,
    send_callback,
    unsaved_idle,
    user_frames,
)
from .session_store import durably, stored_state
from .turn_slots import TurnSlots

if TYPE_CHECKING:
    from ..agent.agent import AgentRuntime, Session
    from .store import SessionStore


log = logging.getLogger("acp.runtime.sessions")

LEASE_TTL = 30.0
# a prompt re-checks the lease in the store when it was last confirmed longer ago than
# this: a take-over by another replica stops a new turn within it (a running one within
# lease_ttl / 3); locally, a take-over is seen at once
OWNER_CHECK = 1.0
TAKE_OVER_WAIT = 10.0  # seconds a take-over waits for the previous owner's turn to end

# requests that act on one existing session: the connection must own it
_OWNED = frozenset({"session/prompt", "session/set_config_option", "session/set_mode"})


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
        max_queued_prompts: int | None = None,
    ) -> None:
        self.make_agent = make_agent
        self.store = store
        self.max_message_size = max_message_size
        self.lease_ttl = lease_ttl
        self.replica = replica or uuid.uuid4().hex[:12]
        self.callbacks = callbacks
        self.max_queued_prompts = max_queued_prompts  # None: $ACP_MAX_QUEUED_PROMPTS or 256
        self.owners: dict[str, SessionConnection] = {}  # local connection holding each lease
        self.unsaved: dict[str, list[bytes]] = {}  # turns whose save failed, per session
        self.params_models: dict[tuple[str, str], Any] = {}  # (revision, method) -> model
        observe.gauge("acp.sessions.active", self, lambda core: len(core.owners))

    def __call__(self, sink: Sink) -> SessionConnection:
        return SessionConnection(self, self.make_agent(), sink)


class SessionConnection(Connection):
    """One connection's sessions: the runtime core (``Connection``) with the session
    methods served from the store, each session's updates recorded while a turn runs."""

    transport = "stdio"  # the HTTP transport's connections say "http" or "websocket"

    def __init__(self, core: SessionCore, rt: AgentRuntime, sink: Sink) -> None:
        from ..agent.agent import immediate_methods

        super().__init__(
            sink,
            rt.router.request,  # every request through the runtime's routes
            rt.handle_notification,
            max_message_size=core.max_message_size,
            immediate_notifications=immediate_methods(),
        )
        self.core = core
        self.rt = rt
        self.owner = f"{core.replica}/{uuid.uuid4().hex[:12]}"
        self.held: set[str] = set()  # sessions whose lease this connection holds
        self.lost: set[str] = set()  # taken over elsewhere: write nothing more for them
        self.confirmed: dict[str, float] = {}  # when the store last confirmed our lease
        self.recorded: dict[str, list[bytes]] = {}
        self.slots = TurnSlots(core.max_queued_prompts)
        self.turns = self.slots.holders  # done when the turn ended and was saved
        # v2: a turn's idle state_update (its acknowledgment) waits here until the turn is
        # saved, so that no client sees a turn end that a crash or a store outage can lose
        self.saving: set[str] = set()
        self.held_idle: dict[str, bytes] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._about: tuple[Any, tuple[tuple[str, Any], ...]] = (None, ())
        self._shared = rt.session_setup.context  # (its revision: `about`, each request)
        rt.attach(self)
        self._register_routes()

    def about(self) -> tuple[tuple[str, Any], ...]:
        """What a served request's span says of its connection (observe): the same tuple
        while the revision holds (a new one once initialize negotiates another)."""
        rev = self._shared.revision
        if self._about[0] is not rev:
            facts = (
                ("acp.transport", self.transport),
                ("acp.revision", rev.protocol_version),
                ("acp.replica", self.core.replica),
            )
            self._about = (rev, facts)
        return self._about[1]

    @property
    def v2(self) -> bool:
        """The connection's revision (negotiated at initialize) has the v2 lifecycle."""
        return self.rt.revision.turn.lifecycle == "v2"

    # ---- recording ---------------------------------------------------------------
    def _enqueue(self, frame: bytes, session_id: str | None, *, checked: bool = False) -> None:
        if session_id is not None and frame.startswith(UPDATE_PREFIX):
            buf = self.recorded.get(session_id)
            if buf is not None:
                buf.append(frame)
                if session_id in self.saving and is_idle(frame):
                    self.held_idle[session_id] = frame  # sent by _save_later once saved
                    return
        super()._enqueue(frame, session_id, checked=checked)

    # ---- state -------------------------------------------------------------------
    def _hold(self, sid: str) -> None:
        self.held.add(sid)
        self.confirmed[sid] = time.monotonic()
        self.lost.discard(sid)
        self.core.owners[sid] = self
        if self._renewer is None:
            self._renewer = asyncio.get_running_loop().create_task(self._renew_loop())

    def _forget(self, sid: str) -> None:
        self.rt.mcp_hub.discard(sid)  # its MCP servers are closed
        self.held.discard(sid)
        self.rt.sessions.pop(sid, None)
        if self.core.owners.get(sid) is self:
            del self.core.owners[sid]

    async def _restore(self, sid: str, params: dict[str, Any], *, take_over: bool) -> Session:
        """Make this connection the session's owner, rebuilt from the store if needed."""
        core = self.core
        if take_over:
            prev = core.owners.get(sid)
            if prev is not None and prev is not self:
                await prev.evict(sid, save=True)  # its turn ends (and is saved) first
        elif sid in self.held and sid in self.rt.sessions:
            return self.rt.sessions[sid]
        saved = await durably("could not load the session", lambda: core.store.load(sid))
        if saved is None:
            raise unknown_session(sid)
        holder = await durably(
            "could not take the session",
            lambda: core.store.acquire(sid, self.owner, core.lease_ttl, take_over=take_over),
        )
        if holder is not None:
            raise session_in_use(sid, self.v2)
        s = self.rt.sessions.get(sid) if sid in self.held else None
        if s is None:
            try:
                s = self.rt.session_setup.restore(sid, saved)
            except BaseException:
                await core.store.release(sid, self.owner)
                raise
            self.rt.sessions[sid] = s
        cwd = params.get("cwd")
        s.cwd = cwd if type(cwd) is str else str(saved.get("cwd") or "/")
        self._hold(sid)
        observe.metric("acp.lease.moves", take_over=take_over)  # to this replica, from the store
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

    # ---- routes ------------------------------------------------------------------
    def _register_routes(self) -> None:
        """The session methods this core serves, and what it adds around the runtime's
        routes: the lease of an owned session, the turn recording, persistence."""
        router = self.rt.router
        self.routes = router.route
        router.guard = self._guard
        router.provide("session/load", self._load)
        router.provide("session/resume", self._resume)
        router.provide("session/list", self._list)
        router.provide("session/close", self._close)
        router.provide("session/delete", self._delete)
        for name in _OWNED:
            router.wrap(name, self._owned(name))
        router.wrap("session/new", self._persisted)
        router.wrap(
            "initialize",
            self._advertised(lambda r: r.get(self.rt.revision.init.response_capabilities)),
        )
        router.wrap("_agent/info", self._advertised(lambda r: r.get("capabilities")))

    def _guard(self, route: Route, params: Any) -> None:
        """Before any request runs: the session id it names, and (for what the runtime
        serves; handlers.py's overrides get it from their typed caller) its params."""
        if type(params) is dict:
            check_session_id(params.get("sessionId"))
        if route.served and route.handler is not None and route.name in self.rt.router.methods:
            rt = self.rt
            check_params(
                self.core.params_models, rt.revision, rt.protocol_models_of, route.name, params
            )

    async def _load(self, params: Any, ctx: Any) -> Any:
        return await self._attach(params, ctx, replay=True)

    async def _resume(self, params: Any, ctx: Any) -> Any:
        return await self._attach(params, ctx, replay=replay_from(params, v2=self.v2))

    def _owned(self, name: str) -> Wrapper:
        """A request acting on one existing session: this connection must own it (taken
        silently when nobody does); a prompt's turn is recorded and saved, a config
        change saved."""

        def wrapper(handler: Handler) -> Handler:
            async def call(params: Any, ctx: Any) -> Any:
                sid = params.get("sessionId") if type(params) is dict else None
                if type(sid) is not str:
                    return await handler(params, ctx)
                if sid not in self.held or sid not in self.rt.sessions:
                    await self._own(sid, params)
                if name == "session/prompt":
                    return await self._prompt(sid, params, ctx, handler)
                return await self._set_config(sid, params, ctx, handler)

            return call

        return wrapper

    async def _own(self, sid: str, params: dict[str, Any]) -> None:
        """Take a session this connection does not hold yet (refused while another
        local connection holds it)."""
        other = self.core.owners.get(sid)
        if other is not None and other is not self:
            raise session_in_use(sid, self.v2)
        store = self.core.store
        saved = await durably("could not load the session", lambda: store.load(sid))
        if saved is not None:
            await self._restore(sid, params, take_over=False)

    def _persisted(self, handler: Handler) -> Handler:
        async def call(params: Any, ctx: Any) -> Any:
            self.rt.mcp_hub.check(params)  # a stdio MCP server this agent may not start
            result = await handler(params, ctx)
            if type(result) is dict:
                await self._created(result, params, ctx)
            return result

        return call

    def _advertised(self, caps: Callable[[dict[str, Any]], Any]) -> Wrapper:
        """initialize and `_agent/info` list the session methods this core serves (in
        the capabilities object `caps` finds in their result)."""

        def wrapper(handler: Handler) -> Handler:
            async def call(params: Any, ctx: Any) -> Any:
                result = await handler(params, ctx)
                if type(result) is dict:
                    advertise(self.rt, caps(result))
                return result

            return call

        return wrapper

    async def _created(self, result: dict[str, Any], params: Any, ctx: Any) -> None:
        sid = result.get("sessionId")
        s = self.rt.sessions.get(sid) if type(sid) is str else None
        if s is None:
            return  # a user override that keeps no runtime session: nothing to persist
        cwd = params.get("cwd") if type(params) is dict else None
        s.cwd = cwd if type(cwd) is str else "/"
        state = stored_state(s)
        store = self.core.store
        try:
            await durably("the session was not created", lambda: store.save(s.id, state))
            await durably(
                "the session was not created",
                lambda: store.acquire(s.id, self.owner, self.core.lease_ttl),
            )
        except RpcError:
            self.rt.sessions.pop(s.id, None)
            raise
        self._hold(s.id)
        self.rt.mcp_hub.open(s.id, params, s.cwd, ctx)

    async def _attach(self, params: Any, ctx: Any, *, replay: bool) -> dict[str, Any]:
        sid = params.get("sessionId") if type(params) is dict else None
        if type(sid) is not str:
            raise unknown_session(sid)
        self.rt.mcp_hub.check(params)
        s = await self._restore(sid, params, take_over=True)
        if replay:
            store = self.core.store
            history = await durably(
                "could not read the session history", lambda: store.history(sid)
            )
            frames = [*history, *self.core.unsaved.get(sid, ())]
            for frame in primed(frames, sid, self.rt.revision.sessions.replay_primers):
                self.send_raw(frame, sid)
        result = self.rt.session_setup.opened(s, params, None, loaded=True)  # commands before it
        self.rt.mcp_hub.open(sid, params, s.cwd, ctx)  # its MCP servers, from this request
        return result

    async def _list(self, params: Any, ctx: Any) -> dict[str, Any]:
        return await list_sessions(self.core.store, params)

    async def _close(self, params: Any, ctx: Any) -> dict[str, Any]:
        sid = params.get("sessionId") if type(params) is dict else None
        if type(sid) is not str or sid not in self.held:
            raise unknown_session(sid)
        await self.evict(sid, save=True)
        self.lost.discard(sid)
        await self.core.store.release(sid, self.owner)
        return {}

    async def _delete(self, params: Any, ctx: Any) -> dict[str, Any]:
        sid = params.get("sessionId") if type(params) is dict else None
        store = self.core.store
        if type(sid) is not str:
            raise unknown_session(sid)
        if await durably("could not delete the session", lambda: store.load(sid)) is None:
            return {}  # deleting what is not there succeeds (ACP TCK ACP-DELETE-002)
        prev = self.core.owners.get(sid)
        if prev is not None:
            await prev.evict(sid, save=False)
        await durably("could not delete the session", lambda: store.delete(sid))
        self.core.unsaved.pop(sid, None)
        return {}

    async def _set_config(
        self, sid: str, params: dict[str, Any], ctx: RequestContext, handler: Handler
    ) -> Any:
        """session/set_config_option or session/set_mode, the session's new state saved."""
        s = self.rt.sessions.get(sid)
        before = (s.config, s.config_raw, s.mode) if s is not None else None
        result = await handler(params, ctx)
        if s is None or before is None:
            return result
        state = stored_state(s)
        store = self.core.store
        try:
            await durably("the option was not changed", lambda: store.save(sid, state))
        except RpcError:
            s.config, s.config_raw, s.mode = before
            raise
        return result

    # ---- turns -------------------------------------------------------------------
    async def _prompt(
        self, sid: str, params: dict[str, Any], ctx: RequestContext, handler: Handler
    ) -> Any:
        rt = self.rt
        s = rt.sessions.get(sid)
        if s is not None and self.slots.busy(sid):
            if s.task is not None and rt.session_setup.refuses_prompt(s):
                # the manifest's own states refuse a prompt while a turn runs: the
                # runtime answers the state error; nothing of it is recorded
                return await handler(params, ctx)
            # a turn runs or is being saved: wait in line (served in arrival order)
            await self.slots.wait(sid)
            s = rt.sessions.get(sid)
        if s is None:  # unknown (or taken over meanwhile): the runtime refuses it
            return await handler(params, ctx)
        # the session is this prompt's from here (no await before): a prompt arriving
        # meanwhile waits in line instead of running beside it
        task = asyncio.current_task()
        assert task is not None
        if self.turns.get(sid) is not task:
            self.slots.hold(sid, task)
        store = self.core.store
        now = time.monotonic()
        if now - self.confirmed.get(sid, 0.0) > OWNER_CHECK:  # taken over by another replica?
            if not await durably(
                "could not check the session's owner",
                lambda: store.renew(sid, self.owner, self.core.lease_ttl),
            ):
                await self.evict(sid, save=False)
                raise session_in_use(sid, self.v2)
            self.confirmed[sid] = now
        user = [] if self.v2 else user_frames(sid, params)
        before = s.turns
        self.recorded[sid] = []
        try:
            result = await handler(params, ctx)
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
            self.slots.hold(
                sid, asyncio.get_running_loop().create_task(self._save_later(sid, s, turn, params))
            )
            return result
        frames = await self._save_turn(sid, s, user, result)
        send_callback(self.core.callbacks, sid, params, result, frames)
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
                    super()._enqueue(
                        unsaved_idle(idle, err, self.rt.revision.turn.idle_error)
                        if unsaved
                        else idle,
                        sid,
                    )
                return
            self.saving.discard(sid)
            idle = self.held_idle.pop(sid, None)
            if idle is not None:
                super()._enqueue(idle, sid)
            send_callback(self.core.callbacks, sid, params, None, frames)
        finally:
            self.saving.discard(sid)
            idle = self.held_idle.pop(sid, None)
            if idle is not None:  # cancelled meanwhile: the client still sees the turn end
                super()._enqueue(idle, sid)

    async def _save_turn(self, sid: str, s: Session, user: list[bytes], result: Any) -> list[bytes]:
        """Write the turn (after any earlier unsaved one); on failure keep it unsaved."""
        frames = self.recorded.pop(sid, [])
        if sid in self.lost:
            # taken over elsewhere: the new owner's state wins, and this turn is not
            # acknowledged (it is in no history)
            raise session_in_use(sid, self.v2)
        core = self.core
        batch = core.unsaved.pop(sid, []) + user + frames
        state = stored_state(s)
        stop = result.get("stopReason") if type(result) is dict else None
        try:
            saved = await durably(
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
            raise session_in_use(sid, self.v2)
        return frames

    # ---- end -----------------------------------------------------------------------
    async def close(self) -> None:
        """End the connection: its turns are cancelled (and saved), its leases released."""
        if self._closed:
            return
        for sid in list(self.held):
            s = self.rt.sessions.get(sid)
            if s is not None and s.task is not None and not s.task.done() and self.v2:
                s.task.cancel()  # v2 turns run outside the request tasks close() cancels
        # no MCP server outlives its connection; closed while the connection's secrets are
        # still registered (the SDK's shutdown logs are redacted with them)
        await self.rt.mcp_hub.aclose()
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
