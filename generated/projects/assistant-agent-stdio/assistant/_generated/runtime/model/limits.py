"""The bounds of a model's turn, each a turn ending rather than a crash:

- `ACP_MODEL_REQUEST_LIMIT` (default 50, pydantic-ai's own): model requests in one turn;
  `ACP_MODEL_TOOL_CALL_LIMIT` (default none): tool calls in one turn.  Reaching either,
  or a model that keeps calling a tool it has not got (or with arguments the tool refuses)
  past its retries, ends the turn with ACP's `max_turn_requests` and a line saying why;
  what the run did is kept in the model's history.
- `ACP_TOOL_OUTPUT_LIMIT` (default 64 KiB, like `run_command`'s): the bytes of one tool's
  output the model gets; more is cut, with a note, and the model, the client and the
  stored history all see the same cut text.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..wire.fields import TOOL_OUTPUT_LIMIT, bounded, env_option, tool_output_limit

REQUEST_LIMIT = 50


def usage_limits() -> Any:
    """pydantic-ai's `UsageLimits` for one turn, from the environment."""
    from pydantic_ai.usage import UsageLimits

    calls = env_option("ACP_MODEL_TOOL_CALL_LIMIT", None, minimum=1)
    return UsageLimits(
        request_limit=int(env_option("ACP_MODEL_REQUEST_LIMIT", REQUEST_LIMIT, minimum=1)),
        tool_calls_limit=int(calls) if calls is not None else None,
    )


def output_bound() -> Any:
    """A pydantic-ai capability cutting every tool's result (the agent's own tools, the
    editor's, the MCP servers') to `tool_output_limit()` bytes, before the model, the
    client or the history sees it."""
    from pydantic_ai.capabilities import Hooks

    limit = tool_output_limit()

    async def cut(ctx: Any, /, *, call: Any, tool_def: Any, args: Any, result: Any) -> Any:
        return bound_result(result, limit)

    return Hooks(after_tool_execute=cut)


def bound_result(result: Any, limit: int) -> Any:
    """`result` as it is when it fits `limit` bytes (as text, or as JSON), else its text
    cut with a note."""
    if isinstance(result, str):
        return bounded(result, limit)
    try:
        raw = orjson.dumps(result, default=str)
    except TypeError:  # not JSON at all: pydantic-ai serialises it its own way
        return result
    return result if len(raw) <= limit else bounded(raw.decode("utf-8", "replace"), limit)


__all__ = [
    "REQUEST_LIMIT",
    "TOOL_OUTPUT_LIMIT",
    "bound_result",
    "bounded",
    "output_bound",
    "tool_output_limit",
    "usage_limits",
]
