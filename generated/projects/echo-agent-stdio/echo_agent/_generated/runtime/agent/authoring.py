"""What a handler shows the user during a turn: message and thought chunks, any content
block, tool calls (with text, diff and terminal content), the plan, usage and the session
title.  One vocabulary; the revision description (`Revision.authoring`) says which
`sessionUpdate` each call becomes (v1 `tool_call` + `tool_call_update`, `plan`; v2
`tool_call_update` only, `plan_update`, a diff as `changes` + a git patch).

The calls to the client (files, terminals, permission) are in clientcalls.py."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ..wire.fields import model_dump

if TYPE_CHECKING:
    from ..wire.jsonrpc import Connection
    from ..wire.revision import Revision

ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]
ToolStatus = Literal["pending", "in_progress", "completed", "failed", "cancelled"]
PlanPriority = Literal["high", "medium", "low"]
PlanStatus = Literal["pending", "in_progress", "completed"]


@dataclass(frozen=True)
class Location:
    """A file (absolute path) a tool call touches, optionally a line in it."""

    path: str
    line: int | None = None


@dataclass(frozen=True)
class TextContent:
    """Text shown in a tool call."""

    text: str


@dataclass(frozen=True)
class BlockContent:
    """Any ACP content block (a wire dict or a generated model) shown in a tool call."""

    block: Any


@dataclass(frozen=True)
class DiffContent:
    """A change of one file: `old_text` None for a new file."""

    path: str
    old_text: str | None
    new_text: str


@dataclass(frozen=True)
class TerminalContent:
    """A client terminal (from `Turn.create_terminal`) embedded in a tool call."""

    terminal_id: str


ToolContent = TextContent | BlockContent | DiffContent | TerminalContent


@dataclass
class PlanEntry:
    content: str
    priority: PlanPriority = "medium"
    status: PlanStatus = "pending"


class McpServer(NamedTuple):
    """One MCP server the client passed at session/new (stdio: command; http/sse: url;
    acp, where the revision has it: a server of the client's, reached over ACP itself)."""

    name: str
    transport: str  # "stdio" | "http" | "sse" | another the revision knows
    command: str | None
    args: tuple[str, ...]
    env: dict[str, str]
    url: str | None
    headers: dict[str, str]
    server_id: str | None = None  # "acp": the client component's id, for `mcp/message`


_UNSET: Any = object()


def _block(block: Any) -> dict[str, Any]:
    data = model_dump(block)
    if type(data) is not dict or type(data.get("type")) is not str:
        raise TypeError("a content block is an object with a string `type`")
    return data


def git_patch(path: str, old_text: str | None, new_text: str) -> str:
    """A `diff --git` section (absolute paths) from old to new text."""
    import difflib  # here, not at an agent's start-up: few agents write a patch

    old = (old_text or "").splitlines(keepends=True)
    new = new_text.splitlines(keepends=True)
    body = difflib.unified_diff(
        old, new, fromfile=path if old_text is not None else "/dev/null", tofile=path
    )
    lines = [ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in body]
    return f"diff --git {path} {path}\n" + "".join(lines)


def _location(loc: Location | str) -> dict[str, Any]:
    if isinstance(loc, str):
        loc = Location(loc)
    out: dict[str, Any] = {"path": loc.path}
    if loc.line is not None:
        out["line"] = loc.line
    return out


_ENDED = frozenset({"completed", "failed", "cancelled"})


class ToolCall:
    """A tool call of a turn (from `Turn.start_tool_call` or `Turn.tool_call`)."""

    __slots__ = ("_emit", "_fields", "_statuses", "id", "kind", "status", "title")

    def __init__(
        self,
        emit: Callable[[dict[str, Any]], Awaitable[None]],
        fields: Callable[..., dict[str, Any]],
        statuses: Collection[str],
        tool_call_id: str,
        title: str,
        kind: ToolKind,
    ) -> None:
        # the turn's own send and field builder, passed in: a tool call holds no turn
        self._emit = emit
        self._fields = fields
        self._statuses = statuses
        self.id = tool_call_id
        self.title = title
        self.kind: ToolKind = kind
        self.status: ToolStatus = "pending"

    async def update(
        self,
        *,
        status: ToolStatus | None = None,
        title: str | None = None,
        kind: ToolKind | None = None,
        content: Sequence[ToolContent] | None = None,
        locations: Sequence[Location | str] | None = None,
        raw_input: Any = _UNSET,
        raw_output: Any = _UNSET,
    ) -> None:
        """Report progress: only the fields given are sent (`tool_call_update`)."""
        fields = self._fields(
            status=status,
            title=title,
            kind=kind,
            content=content,
            locations=locations,
            raw_input=raw_input,
            raw_output=raw_output,
        )
        if status is not None:
            self.status = status
        if title is not None:
            self.title = title
        if kind is not None:
            self.kind = kind
        await self._emit({"sessionUpdate": "tool_call_update", "toolCallId": self.id, **fields})

    async def complete(
        self, *, raw_output: Any = _UNSET, content: Sequence[ToolContent] | None = None
    ) -> None:
        await self.update(status="completed", raw_output=raw_output, content=content)

    async def fail(
        self, *, raw_output: Any = _UNSET, content: Sequence[ToolContent] | None = None
    ) -> None:
        await self.update(status="failed", raw_output=raw_output, content=content)

    async def cancel(self) -> None:
        """Cancelled where the revision has that status (v2), else failed."""
        await self.update(status="cancelled" if "cancelled" in self._statuses else "failed")


class Authoring:
    """The Turn's display calls (a part of Turn: it provides `_rt`, `_conn`, `session`)."""

    __slots__ = ("_calls", "_plan", "_plan_id", "_thought_id")

    if TYPE_CHECKING:
        _conn: Connection
        reply_id: str | None

        @property
        def session_id(self) -> str: ...

        def _rev(self) -> Revision: ...

        @property
        def cwd(self) -> str: ...

    def _init_authoring(self) -> None:
        self._plan: list[PlanEntry] = []
        self._plan_id: str | None = None  # made when the plan is first sent (v2)
        self._thought_id: str | None = None
        self._calls: list[ToolCall] = []  # every tool call of the turn: each one ends

    async def _send(self, update: dict[str, Any]) -> None:
        self._conn.notify("session/update", {"sessionId": self.session_id, "update": update})
        await self._conn.drain()

    def _has(self, tag: str) -> bool:
        return tag in self._rev().authoring.updates

    def _chunk(self, tag: str, message_id: str | None, block: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"sessionUpdate": tag}
        key = self._rev().turn.chunk_message_id
        if key and message_id is not None:
            out[key] = message_id
        out["content"] = block
        return out

    def resolve(self, path: str) -> str:
        """`path` as an absolute path: relative paths are read from the session's cwd."""
        return os.path.normpath(os.path.join(self.cwd, path))

    # ---- messages ----------------------------------------------------------------
    async def send_content(self, block: Any) -> None:
        """Stream any content block (text, image, audio, resource, resource link; a wire
        dict or a generated model) as part of the agent's message."""
        await self._send(self._chunk("agent_message_chunk", self.reply_id, _block(block)))

    async def send_thought(self, text: str) -> None:
        """Stream the agent's reasoning (`agent_thought_chunk`; clients show it apart)."""
        if self._thought_id is None and self._rev().turn.chunk_message_id_required:
            self._thought_id = str(uuid.uuid4())
        await self._send(
            self._chunk("agent_thought_chunk", self._thought_id, {"type": "text", "text": text})
        )

    # ---- tool calls --------------------------------------------------------------
    def _content(self, item: ToolContent) -> dict[str, Any]:
        if isinstance(item, TextContent):
            return {"type": "content", "content": {"type": "text", "text": item.text}}
        if isinstance(item, BlockContent):
            return {"type": "content", "content": _block(item.block)}
        if isinstance(item, TerminalContent):
            return {"type": "terminal", "terminalId": item.terminal_id}
        path = self.resolve(item.path)
        if self._rev().authoring.diff == "changes":
            op = "add" if item.old_text is None else "modify"
            return {
                "type": "diff",
                "changes": [{"operation": op, "path": path}],
                "patch": {
                    "format": "git_patch",
                    "text": git_patch(path, item.old_text, item.new_text),
                },
            }
        diff: dict[str, Any] = {"type": "diff", "path": path, "newText": item.new_text}
        if item.old_text is not None:
            diff["oldText"] = item.old_text
        return diff

    def _tool_fields(
        self,
        *,
        status: ToolStatus | None,
        title: str | None,
        kind: ToolKind | None,
        content: Sequence[ToolContent] | None,
        locations: Sequence[Location | str] | None,
        raw_input: Any,
        raw_output: Any,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if title is not None:
            out["title"] = title
        if kind is not None:
            out["kind"] = kind
        if status is not None:
            statuses = self._rev().authoring.tool_call_statuses
            out["status"] = status if status in statuses or not statuses else "failed"
        if content is not None:
            out["content"] = [self._content(c) for c in content]
        if locations is not None:
            out["locations"] = [
                _location(
                    Location(
                        self.resolve(loc.path if isinstance(loc, Location) else loc),
                        loc.line if isinstance(loc, Location) else None,
                    )
                )
                for loc in locations
            ]
        if raw_input is not _UNSET:
            out["rawInput"] = model_dump(raw_input)
        if raw_output is not _UNSET:
            out["rawOutput"] = model_dump(raw_output)
        return out

    async def start_tool_call(
        self,
        title: str,
        *,
        kind: ToolKind = "other",
        status: ToolStatus = "pending",
        content: Sequence[ToolContent] = (),
        locations: Sequence[Location | str] = (),
        raw_input: Any = _UNSET,
    ) -> ToolCall:
        """Announce a tool call (v1 `tool_call`; v2 its first `tool_call_update`)."""
        call = ToolCall(
            self._send,
            self._tool_fields,
            self._rev().authoring.tool_call_statuses,
            "call_" + uuid.uuid4().hex[:16],
            title,
            kind,
        )
        call.status = status
        fields = self._tool_fields(
            status=status,
            title=title,
            kind=kind,
            content=content or None,
            locations=locations or None,
            raw_input=raw_input,
            raw_output=_UNSET,
        )
        tag = "tool_call" if self._has("tool_call") else "tool_call_update"
        self._calls.append(call)
        await self._send({"sessionUpdate": tag, "toolCallId": call.id, **fields})
        return call

    async def end_tool_calls(self, outcome: str) -> None:
        """End every tool call of the turn still open (pending or in progress) as the turn
        ended: `completed`, `failed` or `cancelled` (failed where the revision has no
        such status).  The turn's runner calls it last, whatever path the turn took: an
        editor shows a call left open as running forever."""
        open_calls = [c for c in self._calls if c.status not in _ENDED]
        self._calls.clear()
        for call in open_calls:
            try:
                if outcome == "cancelled":
                    await call.cancel()
                elif outcome == "completed":
                    await call.complete()
                else:
                    await call.fail(raw_output={"error": "the turn ended before this tool call"})
            except Exception:  # noqa: BLE001 - the connection may be gone: nothing to tell
                return

    @asynccontextmanager
    async def tool_call(
        self,
        title: str,
        *,
        kind: ToolKind = "other",
        content: Sequence[ToolContent] = (),
        locations: Sequence[Location | str] = (),
        raw_input: Any = _UNSET,
    ) -> AsyncIterator[ToolCall]:
        """A tool call in progress while the block runs: completed when it returns (unless
        the block ended it itself), failed when it raises, cancelled with the turn."""
        call = await self.start_tool_call(
            title,
            kind=kind,
            status="in_progress",
            content=content,
            locations=locations,
            raw_input=raw_input,
        )
        try:
            yield call
        except BaseException as exc:
            if call.status not in ("completed", "failed", "cancelled"):
                import asyncio

                if isinstance(exc, asyncio.CancelledError):
                    await call.cancel()
                else:
                    await call.fail()
            raise
        if call.status not in ("completed", "failed", "cancelled"):
            await call.complete()

    # ---- plan --------------------------------------------------------------------
    @property
    def plan(self) -> list[PlanEntry]:
        return list(self._plan)

    async def set_plan(self, entries: Sequence[PlanEntry | str]) -> None:
        """Show the plan (replaces the previous one): v1 `plan`, v2 `plan_update`."""
        self._plan = [e if isinstance(e, PlanEntry) else PlanEntry(e) for e in entries]
        await self._send_plan()

    async def update_plan_entry(
        self,
        index: int,
        *,
        status: PlanStatus | None = None,
        content: str | None = None,
        priority: PlanPriority | None = None,
    ) -> None:
        """Change one entry of the plan (the whole plan is sent again, as ACP wants)."""
        entry = self._plan[index]
        if status is not None:
            entry.status = status
        if content is not None:
            entry.content = content
        if priority is not None:
            entry.priority = priority
        await self._send_plan()

    async def _send_plan(self) -> None:
        entries = [
            {"content": e.content, "priority": e.priority, "status": e.status} for e in self._plan
        ]
        if self._has("plan"):
            await self._send({"sessionUpdate": "plan", "entries": entries})
        elif self._has("plan_update"):
            if self._plan_id is None:
                self._plan_id = "plan_" + uuid.uuid4().hex[:12]
            plan = {"type": "items", "planId": self._plan_id, "entries": entries}
            await self._send({"sessionUpdate": "plan_update", "plan": plan})

    # ---- session -----------------------------------------------------------------
    async def report_usage(
        self, used: int, size: int, *, cost: float | None = None, currency: str = "USD"
    ) -> None:
        """Context window use (tokens used of size) and cost, where the revision has
        `usage_update`."""
        if not self._has("usage_update"):
            return
        update: dict[str, Any] = {"sessionUpdate": "usage_update", "used": used, "size": size}
        if cost is not None:
            update["cost"] = {"amount": cost, "currency": currency}
        await self._send(update)

    async def set_title(self, title: str) -> None:
        """The session's title (`session_info_update`)."""
        if self._has("session_info_update"):
            await self._send({"sessionUpdate": "session_info_update", "title": title})


def mcp_servers(raw: Any) -> list[McpServer]:
    """The MCP servers of a session/new or session/load request, typed."""
    out: list[McpServer] = []
    for s in raw if isinstance(raw, list) else ():
        if type(s) is not dict or type(s.get("name")) is not str:
            continue
        transport = s.get("type") if type(s.get("type")) is str else "stdio"
        pairs = s.get("env") if transport == "stdio" else s.get("headers")
        pairs = pairs if isinstance(pairs, list) else []
        named = {str(p.get("name")): str(p.get("value")) for p in pairs if type(p) is dict}
        args = s.get("args")
        args = args if isinstance(args, list) else []
        out.append(
            McpServer(
                name=s["name"],
                transport=str(transport),
                command=s.get("command") if type(s.get("command")) is str else None,
                args=tuple(str(a) for a in args),
                env=named if transport == "stdio" else {},
                url=s.get("url") if type(s.get("url")) is str else None,
                headers=named if transport != "stdio" else {},
                server_id=s.get("serverId") if type(s.get("serverId")) is str else None,
            )
        )
    return out


__all__ = [
    "BlockContent",
    "DiffContent",
    "Location",
    "McpServer",
    "PlanEntry",
    "PlanPriority",
    "PlanStatus",
    "TerminalContent",
    "TextContent",
    "ToolCall",
    "ToolContent",
    "ToolKind",
    "ToolStatus",
    "git_patch",
    "mcp_servers",
]
