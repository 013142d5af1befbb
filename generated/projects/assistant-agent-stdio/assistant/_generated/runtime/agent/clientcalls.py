"""A turn's requests to the client: text files, terminals, permission.

Each is gated by what the client declared at `initialize` and what the revision has
(`Revision.authoring.gate`; v2 has no fs/* or terminal/* method): otherwise
`ClientCapabilityMissing` is raised before anything is sent, so one handler runs on every
revision and every client.  A cancelled turn cancels its requests in flight
(`$/cancel_request`, jsonrpc.Connection.request) and kills and releases its terminals."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from ..wire.jsonrpc import log

if TYPE_CHECKING:
    from ..wire.jsonrpc import Connection
    from ..wire.revision import Revision
    from .authoring import ToolCall

PermissionKind = Literal["allow_once", "allow_always", "reject_once", "reject_always"]

CLEANUP_TIMEOUT = 5.0  # seconds a leftover terminal's kill + release may take


class ClientCapabilityMissing(Exception):
    """The client did not declare `capability` (or the revision has no `method`):
    nothing was sent."""

    def __init__(self, capability: str, method: str, reason: str) -> None:
        super().__init__(f"{method} needs the client capability {capability!r}: {reason}")
        self.capability = capability
        self.method = method


@dataclass(frozen=True)
class PermissionOption:
    option_id: str
    name: str
    kind: PermissionKind


@dataclass(frozen=True)
class PermissionOutcome:
    """The client's answer: the option it selected, or None when cancelled."""

    option: PermissionOption | None

    @property
    def cancelled(self) -> bool:
        return self.option is None

    @property
    def allowed(self) -> bool:
        return self.option is not None and self.option.kind.startswith("allow")

    @property
    def option_id(self) -> str | None:
        return self.option.option_id if self.option is not None else None


@dataclass(frozen=True)
class ExitStatus:
    exit_code: int | None
    signal: str | None


@dataclass(frozen=True)
class TerminalOutput:
    output: str
    truncated: bool
    exit_status: ExitStatus | None


def _exit(raw: Any) -> ExitStatus | None:
    if type(raw) is not dict:
        return None
    code, sig = raw.get("exitCode"), raw.get("signal")
    return ExitStatus(code if type(code) is int else None, sig if type(sig) is str else None)


class ClientTerminal:
    """A command running in the client's terminal (`Turn.create_terminal`); as an async
    context manager it is always released (killed first when the block raises)."""

    __slots__ = ("_forget", "_request", "_session_id", "id", "released")

    def __init__(
        self,
        request: Callable[[str, dict[str, Any]], Awaitable[Any]],
        forget: Callable[[str], object],
        session_id: str,
        terminal_id: str,
    ) -> None:
        # the turn's request to the client and its list of open terminals, passed in
        self._request = request
        self._forget = forget
        self._session_id = session_id
        self.id = terminal_id
        self.released = False

    async def _call(self, method: str) -> Any:
        return await self._request(method, {"sessionId": self._session_id, "terminalId": self.id})

    async def output(self) -> TerminalOutput:
        r = await self._call("terminal/output")
        r = r if type(r) is dict else {}
        return TerminalOutput(
            str(r.get("output") or ""), bool(r.get("truncated")), _exit(r.get("exitStatus"))
        )

    async def wait_for_exit(self) -> ExitStatus:
        return _exit(await self._call("terminal/wait_for_exit")) or ExitStatus(None, None)

    async def kill(self) -> None:
        await self._call("terminal/kill")

    async def release(self) -> None:
        if self.released:
            return
        self.released = True
        self._forget(self.id)
        await self._call("terminal/release")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        et: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.released:
            return
        if exc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.kill(), CLEANUP_TIMEOUT)
        await asyncio.wait_for(self.release(), CLEANUP_TIMEOUT)


class OpenTerminals:
    """The client terminals of a turn not released yet: what the turn's end kills and
    releases (the handler left them open, or the turn was cancelled)."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, ClientTerminal] = {}

    def add(self, term: ClientTerminal) -> None:
        self._open[term.id] = term

    def forget(self, terminal_id: str) -> None:
        self._open.pop(terminal_id, None)

    async def close_all(self) -> None:
        """Kill and release each open terminal (nothing is sent when none is open)."""
        for term in list(self._open.values()):
            try:
                await asyncio.wait_for(term.kill(), CLEANUP_TIMEOUT)
                await asyncio.wait_for(term.release(), CLEANUP_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - the client may be gone
                log.info("terminal %s not released: %s", term.id, type(exc).__name__)
        self._open.clear()


class ClientCalls:
    """The Turn's requests to the client (a part of Turn, which holds `_terminals`)."""

    __slots__ = ()

    if TYPE_CHECKING:
        _conn: Connection
        _terminals: OpenTerminals

        @property
        def session_id(self) -> str: ...

        def _rev(self) -> Revision: ...

        def _client_capabilities(self) -> dict[str, Any]: ...

        def resolve(self, path: str) -> str: ...

    def client_can(self, method: str) -> bool:
        """Whether `method` (e.g. "fs/read_text_file", "terminal/create") may be sent."""
        return self._missing(method) is None

    def revision_has(self, method: str) -> bool:
        """Whether the connection's protocol revision has the client method `method` at
        all, declared or not (v2 has no `fs/*` or `terminal/*`)."""
        return method in self._rev().side("client")

    @property
    def can_read_files(self) -> bool:
        return self.client_can("fs/read_text_file")

    @property
    def can_write_files(self) -> bool:
        return self.client_can("fs/write_text_file")

    @property
    def can_use_terminal(self) -> bool:
        return self.client_can("terminal/create")

    def _missing(self, method: str) -> ClientCapabilityMissing | None:
        rev = self._rev()
        gate = rev.authoring.gate(method)
        name = ".".join(gate) if gate else method
        if method not in rev.side("client"):
            return ClientCapabilityMissing(
                name, method, "this protocol revision has no such method"
            )
        if gate is None:
            return ClientCapabilityMissing(
                name, method, "this protocol revision has no such method"
            )
        node: Any = self._client_capabilities()
        for key in gate:
            node = node.get(key) if type(node) is dict else None
        if gate and node is not True:
            return ClientCapabilityMissing(name, method, "the client did not declare it")
        return None

    async def _client_request(self, method: str, params: dict[str, Any]) -> Any:
        missing = self._missing(method)
        if missing is not None:
            raise missing
        return await self._conn.request(method, params)

    # ---- files -------------------------------------------------------------------
    async def read_text_file(
        self, path: str, *, line: int | None = None, limit: int | None = None
    ) -> str:
        """The file's text as the client sees it (unsaved edits included): `fs/read_text_file`
        (`fs.readTextFile`); `line` is 1-based, `limit` a number of lines."""
        params: dict[str, Any] = {"sessionId": self.session_id, "path": self.resolve(path)}
        if line is not None:
            params["line"] = line
        if limit is not None:
            params["limit"] = limit
        r = await self._client_request("fs/read_text_file", params)
        content = r.get("content") if type(r) is dict else None
        return content if type(content) is str else ""

    async def write_text_file(self, path: str, content: str) -> None:
        """Write through the client (`fs/write_text_file`, `fs.writeTextFile`)."""
        await self._client_request(
            "fs/write_text_file",
            {"sessionId": self.session_id, "path": self.resolve(path), "content": content},
        )

    # ---- terminals ---------------------------------------------------------------
    async def create_terminal(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
    ) -> ClientTerminal:
        """Run `command` in a client terminal (`terminal/create`, capability `terminal`)."""
        params: dict[str, Any] = {"sessionId": self.session_id, "command": command}
        if args:
            params["args"] = list(args)
        if env:
            params["env"] = [{"name": k, "value": v} for k, v in env.items()]
        if cwd is not None:
            params["cwd"] = self.resolve(cwd)
        if output_byte_limit is not None:
            params["outputByteLimit"] = output_byte_limit
        r = await self._client_request("terminal/create", params)
        tid = r.get("terminalId") if type(r) is dict else None
        if type(tid) is not str:
            raise ValueError("the client's terminal/create answer carries no terminalId")
        term = ClientTerminal(self._client_request, self._terminals.forget, self.session_id, tid)
        self._terminals.add(term)
        return term

    @asynccontextmanager
    async def terminal(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
    ) -> AsyncIterator[ClientTerminal]:
        """`create_terminal` as a block: the terminal is released when it ends (and
        killed first when it raises or the turn is cancelled)."""
        term = await self.create_terminal(
            command, args, env=env, cwd=cwd, output_byte_limit=output_byte_limit
        )
        async with term:
            yield term

    # ---- permission --------------------------------------------------------------
    async def request_permission(
        self,
        options: Sequence[PermissionOption],
        *,
        tool_call: ToolCall | None = None,
        title: str | None = None,
    ) -> PermissionOutcome:
        """Ask the user (`session/request_permission`) with the agent's own options; the
        outcome is the option selected, or cancelled."""
        rev = self._rev()
        if not rev.request_permission:
            raise ClientCapabilityMissing(
                "session/request_permission",
                "session/request_permission",
                "this protocol revision has no such method",
            )
        shown = title or (tool_call.title if tool_call is not None else None) or "Permission"
        params: dict[str, Any] = {"sessionId": self.session_id}
        shape = rev.permission
        call: dict[str, Any] = {
            "toolCallId": tool_call.id if tool_call is not None else "permission",
            "title": shown,
        }
        if tool_call is not None:
            call["kind"] = tool_call.kind
        if shape.tool_call:
            params[shape.tool_call] = call
        if shape.title:
            params[shape.title] = shown
        subject = rev.authoring.permission_subject
        if subject and tool_call is not None:
            params[subject] = {"type": "tool_call", "toolCall": {"toolCallId": tool_call.id}}
        params["options"] = [
            {"optionId": o.option_id, "name": o.name, "kind": o.kind} for o in options
        ]
        r = await self._conn.request("session/request_permission", params)
        outcome = r.get("outcome") if type(r) is dict else None
        chosen = outcome.get("optionId") if type(outcome) is dict else None
        if type(outcome) is dict and outcome.get("outcome") == "selected":
            for o in options:
                if o.option_id == chosen:
                    return PermissionOutcome(o)
        return PermissionOutcome(None)


__all__ = [
    "ClientCalls",
    "ClientCapabilityMissing",
    "ClientTerminal",
    "ExitStatus",
    "OpenTerminals",
    "PermissionKind",
    "PermissionOption",
    "PermissionOutcome",
    "TerminalOutput",
]
