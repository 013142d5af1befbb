"""The session methods as a client meets them: which ones the session core serves (put
into the agent's capabilities by ``advertise``), the session id a request may name, and
the error for a session the store does not know; the session core's checks that need
no connection (a request's params against the revision's model, v2's replay cursor) and
session/list, a page of the store."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..wire.errors import RpcError, from_validation_error, invalid_params
from ..wire.revision import Revision
from .session_store import durably

if TYPE_CHECKING:
    from ..agent.agent import AgentRuntime
    from .store import SessionStore

SESSION_IN_USE = -32001  # implementation-defined (JSON-RPC server error range)


def unknown_session(sid: Any) -> RpcError:
    return invalid_params(
        f"unknown session {sid!r}", [{"loc": ["params", "sessionId"], "msg": "unknown session"}]
    )


MAX_SESSION_ID = 256


def check_session_id(sid: Any) -> None:
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


def advertise(rt: AgentRuntime, caps: Any) -> None:
    """Put the session methods this core serves into an agent-capabilities object, under
    the names the connection's revision description gives them (v1 ``loadSession`` and
    ``sessionCapabilities.*``; v2 ``session`` and ``session.delete``)."""
    if type(caps) is not dict:
        return
    methods = rt.revision.side("agent")
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


def session_in_use(sid: str, v2: bool) -> RpcError:
    """The error for a session another connection holds (``take_over``: the method that
    takes it over on this revision)."""
    take_over = "session/resume" if v2 else "session/load"
    return RpcError(
        SESSION_IN_USE,
        f"session {sid} is in use by another connection; {take_over} takes it over",
        {
            "name": "SessionInUse",
            "transient": True,
            "details": {"sessionId": sid, "takeOver": take_over},
        },
    )


LIST_PAGE = 50
_UNSET: Any = object()


async def list_sessions(store: SessionStore, params: Any) -> dict[str, Any]:
    """session/list: one page of the store's sessions (``cwd`` filters it)."""
    cursor = params.get("cursor") if type(params) is dict else None
    cwd = params.get("cwd") if type(params) is dict else None
    if cursor is not None and type(cursor) is not str:
        raise invalid_params(
            "params.cursor: expected a string",
            [{"loc": ["params", "cursor"], "msg": "expected a string"}],
        )
    try:
        page, nxt = await durably(
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


def replay_from(params: Any, *, v2: bool) -> bool:
    """Whether a session/resume replays the history: v2's ``replayFrom`` (absent: no,
    ``{"type": "start"}``: all of it)."""
    if not v2:
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


def check_params(
    cache: dict[tuple[str, str], Any],
    rev: Revision,
    models_of: Callable[[str], Any],
    method: str,
    params: Any,
) -> None:
    """Every request's params checked against the revision's model of them before
    anything runs or is stored (-32602 with the JSON pointer of the first problem).
    Not ``initialize``: its body may be another revision's, the negotiation checks
    what it reads, nothing of it is stored, and the handshake stays fast (importing a
    revision's models costs ~0.3 s of CPU once per process: it happens at the first
    session request instead)."""
    if method == "initialize":
        return
    key = (rev.package, method)
    pcls = cache.get(key, _UNSET)
    if pcls is _UNSET:
        entry = rev.side("agent").get(method)
        pm = models_of(rev.package)
        pcls = (
            getattr(pm, entry.params, None) if pm is not None and entry and entry.params else None
        )
        cache[key] = pcls
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
