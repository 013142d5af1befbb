"""What a request handler knows about the request it serves, and where its answer goes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .inbox import Effect


class RequestContext:
    """What a request handler knows about the request it serves."""

    __slots__ = ("after", "connection", "effect", "id", "method", "session_id")

    def __init__(self, rid: Any, method: str, session_id: str | None, connection: Any):
        self.id = rid
        self.method = method
        self.session_id = session_id
        self.connection = connection  # the jsonrpc.Connection (typed there: no cycle)
        # sent once the answer is queued (what the peer may only get after it: the
        # commands of a session it just learnt the id of)
        self.after: list[Callable[[], None]] = []
        # set by the router for a route that opens or closes a session: (kind, the
        # session, None while it has not succeeded); its answer carries the effect
        self.effect: tuple[str, str | None] | None = None


def answer_route(ctx: RequestContext, sid: str | None) -> tuple[str | None, Effect | None]:
    """Where a request's answer goes and what it did: the answer of a request that opens
    a session goes to the connection (its client learns the session from it)."""
    if ctx.effect is None:
        return sid, None
    kind, session = ctx.effect
    return (None if kind == "opens" else sid), (ctx.id, kind, session)


__all__ = ["RequestContext", "answer_route"]
