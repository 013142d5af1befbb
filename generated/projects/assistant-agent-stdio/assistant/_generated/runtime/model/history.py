"""A model's message history, kept with its session (`Session.model_history`, saved in
the session store's state with each turn): pydantic-ai's messages as JSON, bounded, and
read back after a restart or on another replica."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..wire.fields import env_option

if TYPE_CHECKING:
    from ..agent.context import Session

log = logging.getLogger("acp.runtime.model")

MAX_MESSAGES = 400  # messages kept per session (ACP_MODEL_HISTORY)


def history_limit() -> int:
    """``$ACP_MODEL_HISTORY`` when it is a whole number >= 1, else the default."""
    return int(env_option("ACP_MODEL_HISTORY", MAX_MESSAGES, minimum=1))


def load(session: Session) -> tuple[list[Any], str | None]:
    """The session's messages as pydantic-ai's `ModelMessage`s, and a problem to tell the
    user when a stored history no longer parses (it is then dropped, the session goes on)."""
    raw = session.model_history
    if not raw:
        return [], None
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    try:
        return list(ModelMessagesTypeAdapter.validate_python(raw)), None
    except ValueError as exc:  # written by a pydantic-ai this one cannot read
        log.warning("session %s: the model history does not parse (%s)", session.id, exc)
        session.model_history = None
        return [], "the earlier conversation could not be read back; starting afresh"


def save(session: Session, messages: list[Any]) -> None:
    """Keep `messages` (a whole run's) with the session, at most `history_limit()` of them,
    cut where a user's request starts (a tool call is never parted from its result).  One
    turn longer than the limit is kept whole: the latest turn is never dropped."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, UserPromptPart

    def starts_turn(m: Any) -> bool:
        return isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) for p in m.parts)

    keep = messages
    limit = history_limit()
    if len(keep) > limit:
        starts = [i for i, m in enumerate(keep) if starts_turn(m)]
        inside = [i for i in starts if i >= len(keep) - limit]
        # the first turn that fits whole, else the latest turn (longer than the limit)
        start = inside[0] if inside else (starts[-1] if starts else 0)
        keep = keep[start:]
    session.model_history = ModelMessagesTypeAdapter.dump_python(keep, mode="json")


__all__ = ["MAX_MESSAGES", "history_limit", "load", "save"]
