"""The session methods as a client meets them: which ones the session core serves (put
into the agent's capabilities by ``advertise``), the session id a request may name, and
the error for a session the store does not know."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import RpcError, invalid_params

if TYPE_CHECKING:
    from .agent import AgentRuntime

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
