"""One MCP server a client passed, connected with the official `mcp` SDK: stdio (the
command with its env, in the session's folder), streamable HTTP or SSE (with the headers),
or, where the revision has it (v1's unstable `acp` kind), a server the client provides on
the ACP connection itself: each MCP request goes out as an `mcp/message` request naming
the server's `serverId` (`acp_channel`).

A link lives in one task of its own (the SDK's transports are anyio context managers that
must be left in the task that entered them): it connects, lists the tools, is ready, and
stays open until `aclose`.  Connecting is bounded by `timeout` seconds, each tool call by
`ACP_MCP_CALL_TIMEOUT` (a server that never answers one fails that call); a failure or a
server that stops is kept as `error` for the session to report once.  `mcp` is imported
only here, inside the task: a project that never gets an MCP server needs no `mcp`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from ..wire.fields import env_option

if TYPE_CHECKING:
    from .authoring import McpServer

log = logging.getLogger("acp.runtime.mcp")

CALL_TIMEOUT = 300.0  # seconds a tool call may take (ACP_MCP_CALL_TIMEOUT)
STOP_TIMEOUT = 8.0  # seconds a link may take to close (the SDK's stdio shutdown: up to ~6)

CONNECTING, READY, FAILED, CLOSED = "connecting", "ready", "failed", "closed"


class McpTool(NamedTuple):
    """A tool of a connected MCP server: `name` is what a turn and the model call it
    (`<server>_<tool>`), `tool` the server's own name."""

    name: str
    server: str
    tool: str
    description: str | None
    input_schema: dict[str, Any]


def call_timeout() -> float:
    """``$ACP_MCP_CALL_TIMEOUT`` seconds (> 0), else ``CALL_TIMEOUT``."""
    return float(env_option("ACP_MCP_CALL_TIMEOUT", CALL_TIMEOUT, kind=float, minimum=0.001))


class McpToolResult(NamedTuple):
    """What a tool call returned: its MCP content blocks (wire dicts), the structured
    content, and whether the tool reported an error."""

    content: list[dict[str, Any]]
    structured: Any
    is_error: bool

    def text(self) -> str:
        """The text blocks, joined by newlines."""
        return "\n".join(
            str(b.get("text")) for b in self.content if b.get("type") == "text" and "text" in b
        )

    def wire(self) -> dict[str, Any]:
        """The result as MCP writes it (a tool call's raw output)."""
        out: dict[str, Any] = {"content": self.content, "isError": self.is_error}
        if self.structured is not None:
            out["structuredContent"] = self.structured
        return out


class McpToolError(Exception):
    """An MCP tool that could not be called (unknown, or its server failed)."""


class McpLinkError(Exception):
    """A server that cannot serve a call (not started, stopped, or timed out)."""


def describe(exc: BaseException) -> str:
    """A short reason for a failure, with no header or env value (the caller redacts the
    values it knows too): the exception's type and first line, nested groups unwrapped."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError | PermissionError):
        return f"{type(exc).__name__}: {exc.strerror or 'cannot run the command'}"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(status, int):
        return f"HTTP status {status}"
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


Channel = Callable[[str, Any], Awaitable[Any]]  # (method, params): a request to the client


@contextlib.asynccontextmanager
async def acp_channel(channel: Channel, server_id: str) -> AsyncIterator[Any]:
    """An `mcp` SDK transport over the ACP connection: every MCP request the SDK writes
    is sent to the client as `mcp/message` (`serverId`, `requestId`, `method`, `params`)
    and its answer (`result`, or an MCP `error`) read back as the MCP response; an ACP
    error of the outer request becomes the MCP request's error.  The revision carries no
    MCP notification from this side (the SDK's `notifications/initialized` and
    cancellations are not sent) and none from the server is read."""
    import anyio
    from mcp.shared.message import SessionMessage
    from mcp.types import ErrorData, JSONRPCError, JSONRPCRequest, JSONRPCResponse

    from ..wire.errors import RpcError

    sdk_write, outgoing = anyio.create_memory_object_stream[SessionMessage](16)
    incoming, sdk_read = anyio.create_memory_object_stream[SessionMessage | Exception](16)

    async def forward(req: JSONRPCRequest) -> None:
        params: dict[str, Any] = {"serverId": server_id, "requestId": str(req.id)}
        params["method"] = req.method  # the revision types requestId as a string
        if req.params is not None:
            params["params"] = req.params
        reply: JSONRPCResponse | JSONRPCError
        try:
            answer = await channel("mcp/message", params)
            if type(answer) is dict and "result" in answer:
                result = answer["result"]
                reply = JSONRPCResponse(
                    jsonrpc="2.0", id=req.id, result=result if type(result) is dict else {}
                )
            else:
                err = answer.get("error") if type(answer) is dict else None
                err = err if type(err) is dict else {}
                code = err["code"] if type(err.get("code")) is int else -32603
                text = str(err.get("message") or "the MCP server answered no result")
                error = ErrorData(code=code, message=text, data=err.get("data"))
                reply = JSONRPCError(jsonrpc="2.0", id=req.id, error=error)
        except RpcError as exc:
            error = ErrorData(code=exc.code, message=exc.message)
            reply = JSONRPCError(jsonrpc="2.0", id=req.id, error=error)
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await incoming.send(SessionMessage(reply))

    async def pump() -> None:
        async with anyio.create_task_group() as calls:
            async for sent in outgoing:
                if isinstance(sent.message, JSONRPCRequest):
                    calls.start_soon(forward, sent.message)

    async with anyio.create_task_group() as tg, incoming, sdk_read, sdk_write, outgoing:
        tg.start_soon(pump)
        try:
            yield sdk_read, sdk_write
        finally:
            tg.cancel_scope.cancel()


class McpLink:
    """One server of one session: its connection task, its tools, its state."""

    def __init__(
        self,
        server: McpServer,
        prefix: str,
        cwd: str | None,
        timeout: float,
        channel: Channel | None = None,
    ) -> None:
        self.server = server
        self.channel = channel  # the ACP connection's requests, for an `acp` server
        self.prefix = prefix  # the tools' name prefix: the server's name, made a safe name
        self.cwd = cwd
        self.timeout = timeout
        self.state = CONNECTING
        self.error: str | None = None  # why it failed, once it did
        self.stopped = False  # it failed after it was ready (else: it never started)
        self.tools: list[McpTool] = []
        self._client: Any = None
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._scope: Any = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> asyncio.Task[None]:
        """Start connecting; the task ends when the link is closed or has failed."""
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self._task

    async def wait_ready(self, timeout: float | None) -> bool:
        """Whether the server is ready, waiting for it at most `timeout` seconds."""
        if not self._ready.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), timeout)
        return self.state == READY

    async def _run(self) -> None:
        if self._closing.is_set():  # closed before it began: nothing to start
            self.state = CLOSED
            self._ready.set()
            return
        import anyio

        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.timeout) as scope:
                self._scope = scope
                async with contextlib.AsyncExitStack() as stack:
                    client = await self._open(stack)
                    tools = await self._list(client)
                    scope.deadline = math.inf  # connected: no deadline from now on
                    self._client, self.tools, self.state = client, tools, READY
                    self._ready.set()
                    await self._closing.wait()
            if scope.cancelled_caught and self.state == CONNECTING and not self._closing.is_set():
                self._fail(f"no answer within {self.timeout:g} s")
        except Exception as exc:  # noqa: BLE001 - any failure of the server is reported once
            if not self._closing.is_set():
                self._fail(describe(exc))
        finally:
            if self.state != FAILED:
                self.state = CLOSED if self._closing.is_set() else FAILED
                if self.state == FAILED and self.error is None:
                    self.error = "the connection ended"
            self._client = None
            self._ready.set()

    def give_up(self, reason: str) -> None:
        """Fail a link that is not ready in time (the caller then closes it)."""
        self._fail(reason)

    def _fail(self, reason: str) -> None:
        if self.error is None:
            self.error = reason
            self.stopped = self.state == READY
        self.state = FAILED

    async def _open(self, stack: contextlib.AsyncExitStack) -> Any:
        from mcp import Client
        from mcp.types import Implementation

        server = self.server
        transport: Any
        if server.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            cwd = self.cwd if self.cwd and os.path.isdir(self.cwd) else None
            params = StdioServerParameters(
                command=server.command or "", args=list(server.args), env=server.env, cwd=cwd
            )
            transport = stdio_client(params)
        elif server.transport == "sse":
            from mcp.client.sse import sse_client

            transport = sse_client(server.url or "", headers=dict(server.headers))
        elif server.transport == "acp":
            if self.channel is None or not server.server_id:
                raise McpLinkError("no ACP channel to reach it")
            transport = acp_channel(self.channel, server.server_id)
        else:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = await stack.enter_async_context(
                create_mcp_http_client(headers=dict(server.headers))
            )
            transport = streamable_http_client(server.url or "", http_client=http)
        client = Client(transport, client_info=Implementation(name="acp-agent", version="1"))
        return await stack.enter_async_context(client)

    async def _list(self, client: Any) -> list[McpTool]:
        tools: list[McpTool] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            for t in page.tools:
                schema = t.input_schema if isinstance(t.input_schema, dict) else {}
                tools.append(
                    McpTool(
                        f"{self.prefix}_{t.name}", self.server.name, t.name, t.description, schema
                    )
                )
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def call(self, tool: str, arguments: dict[str, Any]) -> McpToolResult:
        client = self._client
        if self.state != READY or client is None:
            raise McpLinkError(self.error or "not connected")
        limit = call_timeout()
        try:
            async with asyncio.timeout(limit):
                result = await client.call_tool(tool, arguments)
        except TimeoutError:  # the server lives on: only this call is given up
            raise McpLinkError(f"{tool}: no answer within {limit:g} s") from None
        except Exception as exc:  # noqa: BLE001 - any failure: the call fails, reported
            if not self._closing.is_set():
                # the SDK fails every call once its connection is gone: the server stopped
                reason = describe(exc)
                if "closed" in reason.lower() or self._task is None or self._task.done():
                    self._fail(reason)
                    self._closing.set()  # let its task unwind what is left
                raise McpLinkError(reason) from None
            raise McpLinkError("the session is closing") from None
        content = [
            b.model_dump(by_alias=True, exclude_none=True, mode="json") for b in result.content
        ]
        return McpToolResult(content, result.structured_content, bool(result.is_error))

    async def aclose(self) -> None:
        """Close the connection (a stdio server's process is stopped and reaped)."""
        self._closing.set()
        task = self._task
        if task is None or task.done():
            return
        if self.state == CONNECTING and self._scope is not None:
            self._scope.cancel()
        done, _ = await asyncio.wait({task}, timeout=STOP_TIMEOUT)
        if not done:
            log.warning("MCP server %r did not close in time", self.server.name)
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait({task}, timeout=1.0)


__all__ = [
    "CALL_TIMEOUT",
    "Channel",
    "McpLink",
    "McpLinkError",
    "McpTool",
    "McpToolError",
    "McpToolResult",
    "acp_channel",
    "describe",
]
