"""A pydantic-ai run as an ACP turn.

`await run_model(turn, agent, input)` runs the user's pydantic-ai `Agent` for one prompt
and shows it as an editor expects: text deltas as message chunks, thinking as thought
chunks, each tool call of the model as an ACP tool call (its title from the tool and its
arguments, a kind, the path it names as a location, raw input and output; in progress,
then completed, or failed with the error as its content), the run's token usage as the
revision's usage.  The model's message history is the session's (history.py): a loaded
session goes on with its context.  The session's MCP servers are the model's tools too.
Every tool call of the turn ends (the turn owns them: turns.py closes what is left open).
`session/cancel` stops the stream and the tools in flight; nothing of a run that did not
finish is kept, and an answer cut before its end is an error, not a finished one.  A
model error is a JSON-RPC error classified by what the user can do (failures.py); a limit
of the turn (limits.py) ends it with `max_turn_requests`, keeping what the run did.
"""

from __future__ import annotations

import inspect
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

from ..agent.authoring import Location, TextContent, ToolCall, ToolKind
from ..agent.mcp_toolset import McpToolset
from ..wire.errors import clip
from . import clients, history, limits
from .editor import EDITOR_TOOLS, editor_toolset, tool_names
from .failures import MODEL_ERROR, StreamCut, model_error
from .route import model_for, thinking

if TYPE_CHECKING:
    from ..agent.turns import Turn

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
    offered too.  The turn's limits (limits.py) end it with `max_turn_requests`."""
    from pydantic_ai import capture_run_messages

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
    if "usage_limits" not in run_options:
        run_options["usage_limits"] = limits.usage_limits()
    run_options["capabilities"] = [limits.output_bound(), *(run_options.get("capabilities") or ())]
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
    calls: dict[str, ToolCall] = {}
    shown = EDITOR_TOOLS - taken if own else frozenset()
    with capture_run_messages() as ran:
        try:
            model = model_for(turn, provider, default_model, models)
            async with (
                clients.held(model),  # its provider client is kept for the next turns
                agent.run_stream_events(
                    text,
                    message_history=messages or None,
                    model=model,
                    toolsets=extra or None,
                    **run_options,
                ) as events,
            ):
                async for event in events:
                    result = await _show(turn, event, calls, shown)
                    if result is not None:
                        done = list(result.all_messages())
                        _finished(done[len(messages) :])
                        history.save(turn.session, done)
                        await _usage(turn, result)
                        return result.output
        except Exception as exc:
            why = _limit(exc)
            if why is not None:  # a limit: the turn ends, what the run did is kept
                await _limit_reached(turn, list(ran), why, list(calls.values()))
                return None
            err = model_error(exc, provider)
            if err is not None:
                await _failed_with(list(calls.values()), err.message)
                raise err from None
            raise
    return None


async def _failed_with(open_calls: list[ToolCall], message: str) -> None:
    """The tool calls still open when a model error ends the turn (a tool of the agent's
    whose own model call failed, say) fail with that error as their content."""
    for call in open_calls:
        if call.status in ("pending", "in_progress"):
            await call.fail(raw_output={"error": message}, content=[TextContent(message)])


def _finished(new: Sequence[Any]) -> None:
    """Raise `StreamCut` when one of the run's answers ended before the provider said it
    was finished (a Responses or Messages stream closed before its terminal event)."""
    from pydantic_ai.messages import ModelResponse

    for message in new:
        if isinstance(message, ModelResponse) and message.state == "incomplete":
            raise StreamCut(message.model_name or "the model")


def _limit(exc: BaseException) -> str | None:
    """Why `exc` is a limit of the turn (None: it is not one)."""
    from pydantic_ai.exceptions import ModelAPIError, UnexpectedModelBehavior, UsageLimitExceeded

    if isinstance(exc, UsageLimitExceeded):
        said = str(exc).split(". Consider", 1)[0]
        return f"{said} (ACP_MODEL_REQUEST_LIMIT, ACP_MODEL_TOOL_CALL_LIMIT)"
    if isinstance(exc, UnexpectedModelBehavior) and not isinstance(exc, ModelAPIError):
        said = str(exc)
        if "retries" in said.lower():  # a tool it has not got, or arguments refused, again
            return f"the model kept making tool calls that fail validation: {clip(said, 200)}"
    return None


async def _limit_reached(turn: Turn, ran: list[Any], why: str, unrun: list[ToolCall]) -> None:
    """End the turn at a limit: the tool calls shown but never run (`unrun`: the limit
    came first) fail, the user is told why, the stop reason is `max_turn_requests` (where
    the revision has it), and the run's messages are kept up to the last whole step,
    closed by a line telling the model where it stopped."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart

    for call in unrun:
        await call.fail(raw_output={"error": f"not run: {why}"})
    keep = list(ran)
    while (
        keep
        and isinstance(keep[-1], ModelResponse)
        and (
            keep[-1].state != "complete" or any(isinstance(p, ToolCallPart) for p in keep[-1].parts)
        )
    ):
        keep.pop()  # an answer whose tool calls never ran, or one cut short
    note = f"[the turn stopped here: {why}]"
    if keep and isinstance(keep[-1], ModelRequest):
        keep.append(ModelResponse(parts=[TextPart(note)]))
    if keep:
        history.save(turn.session, keep)
    await turn.send_text(f"\n({note[1:-1]})\n")
    if "max_turn_requests" in turn.stop_reasons:
        turn.stop_reason = "max_turn_requests"


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
        call = calls.pop(event.tool_call_id, None)
        if call is not None:
            await _result(call, event.part)
    elif kind == "AgentRunResultEvent":
        return event.result
    return None


async def _result(call: ToolCall, done: Any) -> None:
    """End a tool call as its result says: completed on success; failed, with the error as
    its content, when the tool failed, was refused or has to be retried."""
    outcome = getattr(done, "outcome", "success")
    if isinstance(done, ToolReturnPart) and outcome == "success":
        await call.complete(raw_output=done.model_response_object())
        return
    content = getattr(done, "content", "")
    if isinstance(done, ToolReturnPart):
        error = done.model_response_str(wrap_if_error=False)
    else:
        error = content if isinstance(content, str) else json.dumps(content, default=str)
    await call.fail(raw_output={"error": error}, content=[TextContent(error)])


async def _usage(turn: Turn, result: Any) -> None:
    usage = result.usage  # a property in pydantic-ai 2 (a method before)
    if inspect.ismethod(usage):
        usage = usage()
    used = int(getattr(usage, "input_tokens", 0) or 0) + int(
        getattr(usage, "output_tokens", 0) or 0
    )
    if used:
        await turn.report_usage(used, max(used, int(getattr(usage, "total_tokens", 0) or used)))


def _text_of(blocks: Any) -> str:
    if isinstance(blocks, list):
        return "\n".join(
            str(b.get("text", "")) for b in blocks if type(b) is dict and b.get("type") == "text"
        )
    return str(blocks)


__all__ = ["MODEL_ERROR", "model_error", "run_model", "tool_kind"]
