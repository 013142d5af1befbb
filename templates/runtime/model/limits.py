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


__all__ = [
    "REQUEST_LIMIT",
    "TOOL_OUTPUT_LIMIT",
    "bounded",
    "tool_output_limit",
    "usage_limits",
]
