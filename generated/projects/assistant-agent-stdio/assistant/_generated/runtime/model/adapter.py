"""A pydantic-ai run as an ACP turn.

`await run_model(turn, agent, input)` runs the user's pydantic-ai `Agent` for one prompt
and shows it as an editor expects: text deltas as message chunks, thinking as thought
chunks, each tool call of the model as an ACP tool call (its title from the tool and its
arguments, a kind, the path it names as a location, raw input and output; in progress,
then completed or failed), the run's token usage as the revision's usage.  The model's
message history is the session's (history.py): a loaded session goes on with its
context.  The session's MCP servers are the model's tools too.  `session/cancel` stops
the stream and the tools in flight (the turn's task is cancelled); nothing of a run that
did not finish is kept.  A model error is a JSON-RPC error: 401/403 a plain message
naming the provider, 429/5xx/timeouts transient, with `retry_after` when the endpoint
gave one; no credential in any of them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import (
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolReturnPart,
)

from ..agent.authoring import Location, ToolCall, ToolKind
from ..agent.mcp_toolset import McpToolset
from ..wire.errors import RpcError
from . import history
from .editor import EDITOR_TOOLS, editor_toolset, tool_names
from .route import model_for, thinking

if TYPE_CHECKING:
    from ..agent.turns import Turn

MODEL_ERROR = -32603
_KINDS: tuple[tuple[ToolKind, tuple[str, ...]], ...] = (
    ("read", ("read", "view", "open", "cat", "get_file", "list")),
    ("edit", ("write", "edit", "patch", "replace", "create_file", "insert")),
    ("delete", ("delete", "remove", "rm")),
    ("move", ("move", "rename")),
    ("search", ("search", "grep", "find", "glob")),
    ("execute", ("run", "exec", "shell", "command", "terminal", "bash")),
    ("fetch", ("fetch", "http", "url", "download", "browse")),
    ("think", ("think", "plan", "reason")),
)
_PATH_KEYS = ("path", "file", "file_path", "filename", "filepath")


def tool_kind(name: str) -> ToolKind:
    """The ACP kind a tool's name suggests (`other` when none does)."""
    lowered = name.lower()
    for kind, words in _KINDS:
        if any(w in lowered for w in words):
            return kind
    return "other"


def _args(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return raw
    return raw


def _title(name: str, args: Any) -> str:
    if type(args) is dict and args:
        first = next(iter(args.values()))
        if isinstance(first, str | int | float):
            return f"{name}: {str(first)[:80]}"
    return name


def _locations(turn: Turn, args: Any) -> list[Location]:
    if type(args) is not dict:
        return []
    out = []
    for key in _PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value:
            out.append(Location(turn.resolve(value)))
    return out


async def run_model(
    turn: Turn,
    agent: Any,
    prompt: Any,
    *,
    default_model: str | None = None,
    provider: str | None = None,
    toolsets: Sequence[Any] = (),
    editor: bool = True,
    models: Mapping[str, Any] | None = None,
    **run_options: Any,
) -> Any:
    """Run `agent` (a pydantic-ai `Agent`) on `prompt` (text, or the prompt's content
    blocks: their text is joined) as this turn; returns the run's output.  The model:
    `model_for` (the session's pick, `$ACP_MODEL`, `default_model` or the agent's own;
    through the route the client set for `provider`); `default_model`, `provider` and the
    instructions default to the manifest's `llm` block; `models`: model objects by id (a
    pick, `$ACP_MODEL` or the default found there runs that object).  The session's
    reasoning level (the `thought_level` option) is the run's `thinking` setting, unless
    `model_settings` names one.  `editor`: offer the editor's files and terminal as tools
    where the client declared them (editor.py); the session's MCP servers' tools are
    offered too."""
    llm = turn.llm
    default_model = default_model or llm.get("default_model")
    provider = provider or llm.get("provider")
    if llm.get("instructions") and "instructions" not in run_options:
        run_options["instructions"] = llm["instructions"]
    think = thinking(turn)
    if think is not None:
        run_options["model_settings"] = {
            "thinking": think,
            **(run_options.get("model_settings") or {}),
        }
    text = prompt if isinstance(prompt, str) else _text_of(prompt)
    messages, problem = history.load(turn.session)
    if problem:
        await turn.send_text(f"({problem})\n")
    extra = list(toolsets)
    taken = tool_names(agent)
    disk = llm.get("on_disk")  # unset: on disk where the revision has no fs (editor.py)
    own = (
        editor_toolset(turn, taken, on_disk=disk if type(disk) is bool else None)
        if editor
        else None
    )
    if own is not None:
        extra.append(own)
    if turn.mcp_servers:
        extra.append(McpToolset(turn.mcp, show=False))
    model = model_for(turn, provider, default_model, models)
    calls: dict[str, ToolCall] = {}
    try:
        async with agent.run_stream_events(
            text,
            message_history=messages or None,
            model=model,
            toolsets=extra or None,
            **run_options,
        ) as events:
            async for event in events:
                result = await _show(
                    turn, event, calls, EDITOR_TOOLS - taken if own else frozenset()
                )
                if result is not None:
                    history.save(turn.session, list(result.all_messages()))
                    await _usage(turn, result)
                    return result.output
    except BaseException as exc:
        for call in calls.values():  # what was in flight ends with the run
            if call.status not in ("completed", "failed"):
                await _quietly(call.cancel())
        err = model_error(exc, provider)
        if err is not None:
            raise err from None
        raise
    return None


async def _show(turn: Turn, event: Any, calls: dict[str, ToolCall], shown: frozenset[str]) -> Any:
    """Send what `event` shows (not the calls of tools in `shown`: they show themselves);
    the run's result when it is the last one."""
    kind = type(event).__name__
    if isinstance(event, PartStartEvent):
        part = event.part
        if isinstance(part, TextPart) and part.content:
            await turn.send_text(part.content)
        elif isinstance(part, ThinkingPart) and part.content:
            await turn.send_thought(part.content)
    elif isinstance(event, PartDeltaEvent):
        delta = event.delta
        if isinstance(delta, TextPartDelta) and delta.content_delta:
            await turn.send_text(delta.content_delta)
        elif isinstance(delta, ThinkingPartDelta) and delta.content_delta:
            await turn.send_thought(delta.content_delta)
    elif isinstance(event, FunctionToolCallEvent) and event.part.tool_name not in shown:
        part = event.part
        args = _args(part.args)
        calls[part.tool_call_id] = await turn.start_tool_call(
            _title(part.tool_name, args),
            kind=tool_kind(part.tool_name),
            status="in_progress",
            locations=_locations(turn, args),
            raw_input=args,
        )
    elif isinstance(event, FunctionToolResultEvent):
        call = calls.get(event.tool_call_id)
        if call is not None:
            done = event.part
            if isinstance(done, ToolReturnPart):
                await call.complete(raw_output=done.model_response_object())
            else:  # a retry prompt: the tool failed (the model is told why)
                await call.fail(raw_output={"error": str(getattr(done, "content", ""))})
    elif kind == "AgentRunResultEvent":
        return event.result
    return None


async def _usage(turn: Turn, result: Any) -> None:
    usage = result.usage  # a property in pydantic-ai 2 (a method before)
    if callable(usage):
        usage = usage()
    used = int(getattr(usage, "input_tokens", 0) or 0) + int(
        getattr(usage, "output_tokens", 0) or 0
    )
    if used:
        await turn.report_usage(used, max(used, int(getattr(usage, "total_tokens", 0) or used)))


async def _quietly(awaitable: Any) -> None:
    try:
        await awaitable
    except Exception:  # noqa: BLE001 - the connection may be gone: the run's error wins
        return


def model_error(exc: BaseException, provider: str | None) -> RpcError | None:
    """The JSON-RPC error a model failure stands for (None: not a model failure).  The
    message names the provider and the status; never a header, a key or the URL's query."""
    from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError

    if not isinstance(exc, ModelAPIError):
        return None
    who = provider or getattr(exc, "model_name", None) or "the model"
    status = exc.status_code if isinstance(exc, ModelHTTPError) else None
    if status in (401, 403):
        return RpcError(
            MODEL_ERROR,
            f"the model provider {who!r} refused the credentials (HTTP {status}): "
            "check the API key (or the route's headers)",
            {"name": "ModelAuthentication", "transient": False, "details": {"status": status}},
        )
    data: dict[str, Any] = {"name": "ModelUnavailable", "transient": True}
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, int | float):
        data["retry_after"] = float(retry_after)
    data["details"] = {"status": status}
    what = f"HTTP {status}" if status else type(exc).__name__
    return RpcError(MODEL_ERROR, f"the model provider {who!r} failed ({what}); retry", data)


def _text_of(blocks: Any) -> str:
    if isinstance(blocks, list):
        return "\n".join(
            str(b.get("text", "")) for b in blocks if type(b) is dict and b.get("type") == "text"
        )
    return str(blocks)


__all__ = ["model_error", "run_model", "tool_kind"]
