"""The MCP servers a client passes in `session/new`, `session/load` and `session/resume`,
connected for the life of the session (README, "MCP servers from the client").

* When: the session layer (sessions.py) calls `McpHub.open` once a session is opened;
  every server starts connecting in the background (mcp_link.py), so the answer never
  waits for one.  The first use (`turn.mcp`, the model's toolset) waits until every
  server is ready or failed, at most `CONNECT_TIMEOUT` seconds after the session opened
  (env `ACP_MCP_CONNECT_TIMEOUT`).
* Failures: a server that cannot start, does not answer in time, or stops later is told
  to the client once, as an agent message ("MCP server 'x' could not start: ..."); the
  session goes on without it.  No header or env value appears in a message or a log line.
* End: every link of a session is closed when the session closes, is deleted, is taken
  over by another connection (load/resume) or when the connection ends.
* Who may start a command: an agent served to remote clients (HTTP) refuses stdio
  servers (-32602 naming the server) unless its operator allows them
  (`ACP_ALLOW_STDIO_MCP=1` or `--allow-stdio-mcp`); a stdio agent, started by the editor
  on its own machine, runs them.  A stdio command must be an absolute path.
* Without the `mcp` package nothing is connected: the servers are reported once as not
  connected and `mcpCapabilities` advertises no transport.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import logging
import os
import re
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from .. import observe
from ..wire.errors import invalid_params
from ..wire.fields import bounded, tool_output_limit
from ..wire.logsafe import RedactingFilter, SecretLimit, redact, register_secrets
from ..wire.masking import url_secrets
from .authoring import McpServer, TextContent, ToolContent, mcp_servers
from .mcp_link import (
    FAILED,
    READY,
    Channel,
    McpLink,
    McpLinkError,
    McpTool,
    McpToolError,
    McpToolResult,
)

if TYPE_CHECKING:
    from ..wire.revision import AgentCapabilityNames
    from .authoring import Authoring
    from .context import AgentContext

CONNECT_TIMEOUT = 10.0
ALLOW_STDIO_ENV = "ACP_ALLOW_STDIO_MCP"
MIN_REDACTED = 4  # a shorter secret value is not cut out of text: it would blank words
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# the loggers of the mcp SDK's clients and their HTTP library that write a server's URL
# (its query may hold a token): registered secrets are redacted out of their records
SDK_LOGGERS = (
    "httpx2",
    "httpcore2",
    "mcp.client.streamable_http",
    "mcp.client.sse",
    "mcp.client.stdio",
    "mcp.client.session",
    "mcp.client.client",
)
_REDACTING = RedactingFilter()
log = logging.getLogger("acp.runtime.mcp")


def guard_sdk_logs() -> None:
    """Redact registered secrets out of what the SDK's loggers write (once)."""
    for name in SDK_LOGGERS:
        logger = logging.getLogger(name)
        if _REDACTING not in logger.filters:
            logger.addFilter(_REDACTING)


@functools.cache
def mcp_installed() -> bool:
    """Whether the `mcp` package can be imported (checked once, without importing it)."""
    try:
        return importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):  # a finder that refuses it: not available
        return False


def connect_timeout() -> float:
    raw = os.environ.get("ACP_MCP_CONNECT_TIMEOUT", "").strip()
    try:
        value = float(raw) if raw else CONNECT_TIMEOUT
    except ValueError:
        return CONNECT_TIMEOUT
    return value if value > 0 else CONNECT_TIMEOUT


class McpPolicy(NamedTuple):
    """Which MCP servers this agent starts: `remote` (served over HTTP) refuses stdio
    commands unless `allow_stdio` (its operator's explicit choice)."""

    remote: bool = False
    allow_stdio: bool = False

    @classmethod
    def http(cls, allow_stdio: bool | None = None) -> McpPolicy:
        """An HTTP agent's policy: `allow_stdio`, else `ACP_ALLOW_STDIO_MCP=1`."""
        if allow_stdio is None:
            allow_stdio = os.environ.get(ALLOW_STDIO_ENV, "").strip() == "1"
        return cls(remote=True, allow_stdio=allow_stdio)

    def runs_stdio(self) -> bool:
        return not self.remote or self.allow_stdio


class McpSession:
    """The MCP servers of one session: their links, the reports owed to the client."""

    def __init__(
        self,
        sid: str,
        servers: list[McpServer],
        cwd: str | None,
        send: Callable[[str, str], None],
        *,
        installed: bool = True,
        channel: Channel | None = None,
    ) -> None:
        self.sid = sid
        self._send = send  # (session id, text): one agent message to the client
        self._timeout = connect_timeout()
        self._deadline = 0.0
        self.links: list[McpLink] = []
        self._reported: set[int] = set()
        self._pending: list[str] = []
        self._announced = False
        self._stopping: set[asyncio.Task[None]] = set()
        # header and env values, URL credentials: never in a message (nor a log line)
        self.secrets = [v for s in servers for v in (*s.env.values(), *s.headers.values()) if v]
        self.secrets += [v for s in servers if s.url for v in url_secrets(s.url)]
        self._refused: list[str] = []
        if not installed:
            names = ", ".join(repr(s.name) for s in servers)
            self._refused.append(
                f"MCP servers {names} were not connected: the `mcp` package is not "
                "installed in the agent's environment."
            )
            servers = []
        taken: set[str] = set()
        for server in servers:
            problem = _problem(server, channel is not None)
            if problem is not None:
                self._refused.append(
                    f"MCP server {server.name!r} could not start: {problem}. "
                    "The session goes on without it."
                )
                continue
            prefix = _UNSAFE.sub("_", server.name) or "mcp"
            n, base = 2, prefix
            while prefix in taken:
                prefix, n = f"{base}_{n}", n + 1
            taken.add(prefix)
            self.links.append(McpLink(server, prefix, cwd, self._timeout, channel))

    def start(self) -> None:
        self._deadline = asyncio.get_running_loop().time() + self._timeout
        for link in self.links:
            link.start().add_done_callback(functools.partial(self._ended, link))
        for text in self._refused:
            self._tell(text)

    def announced(self) -> None:
        """The session's answer is out: what was owed to the client may be sent."""
        self._announced = True
        pending, self._pending = self._pending, []
        for text in pending:
            self._send(self.sid, text)

    def _tell(self, text: str) -> None:
        text = self._clean(text)
        if self._announced:
            self._send(self.sid, text)
        else:
            self._pending.append(text)

    def _clean(self, text: str) -> str:
        for value in sorted(self.secrets, key=len, reverse=True):
            if len(value) >= MIN_REDACTED:
                text = text.replace(value, "[redacted]")
        return redact(text)

    def _ended(self, link: McpLink, _task: asyncio.Task[None]) -> None:
        self._report(link)

    def _report(self, link: McpLink) -> None:
        """A failed link is told once; a closed one (the session ended) is not."""
        if link.state != FAILED or id(link) in self._reported:
            return
        self._reported.add(id(link))
        verb = "stopped" if link.stopped else "could not start"
        text = self._clean(f"MCP server {link.server.name!r} {verb}: {link.error or 'unknown'}")
        log.info("session %s: %s", self.sid, text)
        self._tell(text + ". The session goes on without it.")

    async def ready(self) -> list[McpLink]:
        """The links that are ready, once every link is ready or failed (waiting at most
        until the connect deadline; a link not ready by then is failed and closed)."""
        loop = asyncio.get_running_loop()
        waiting = [lk for lk in self.links if lk.state not in (READY, FAILED)]
        if waiting:
            left = max(0.0, self._deadline - loop.time())
            await asyncio.gather(*(lk.wait_ready(left) for lk in waiting))
        for link in self.links:
            if link.state not in (READY, FAILED):
                link.give_up(f"no answer within {self._timeout:g} s")
                self._report(link)
                self._stopping.add(loop.create_task(link.aclose()))
        return [lk for lk in self.links if lk.state == READY]

    async def tools(self) -> list[McpTool]:
        return [t for link in await self.ready() for t in link.tools]

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> McpToolResult:
        """Call the tool `name` (`<server>_<tool>`) without showing it to the client."""
        for link in await self.ready():
            for tool in link.tools:
                if tool.name == name:
                    try:
                        calling = link.call(tool.tool, dict(arguments or {}))
                        with observe.tool(tool.tool, link.server.name) as span:
                            result = await calling
                            span.set_tool_result(result)
                            return result
                    except McpLinkError as exc:
                        self._report(link)
                        raise McpToolError(self._clean(f"{name}: {exc}")) from None
        raise McpToolError(f"no MCP tool named {name!r}")

    async def aclose(self) -> None:
        await asyncio.gather(*(link.aclose() for link in self.links))


def _problem(server: McpServer, channel: bool = False) -> str | None:
    """Why a server cannot be started at all, or None (`channel`: the revision carries
    `mcp/message`, so an `acp` server can be reached)."""
    if server.transport == "stdio":
        if not server.command or not os.path.isabs(server.command):
            return "its command must be an absolute path"
        return None
    if server.transport in ("http", "sse"):
        return None if server.url else "it has no url"
    if server.transport == "acp" and channel:
        return None if server.server_id else "it has no serverId"
    return f"its transport {server.transport!r} is not one this agent serves"


class McpHub:
    """The MCP sessions of one agent connection (held by the runtime as `mcp_hub`)."""

    def __init__(self, ctx: AgentContext) -> None:
        self._ctx = ctx
        self.policy = McpPolicy()
        self.sessions: dict[str, McpSession] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def transports(self) -> set[str]:
        """The transports this agent connects (stdio is listed when it runs commands)."""
        if not mcp_installed():
            return set()
        served = {"http", "sse"} | ({"stdio"} if self.policy.runs_stdio() else set())
        return served | ({"acp"} if self._channel() is not None else set())

    def _channel(self) -> Channel | None:
        """Requests to the client, where the revision has `mcp/message` (the `acp` kind)."""
        rev = self._ctx.revision
        if rev is None or "mcp/message" not in rev.side("client"):
            return None
        ctx = self._ctx

        async def channel(method: str, params: Any) -> Any:
            conn = ctx.connection
            if conn is None:
                raise McpLinkError("the connection has ended")
            return await conn.request(method, params)

        return channel

    def advertise(self, names: AgentCapabilityNames, caps: dict[str, Any]) -> None:
        """`mcpCapabilities` (v1) / `session.mcp` (v2) in `caps`: what is served."""
        if not names.mcp:
            return
        served = self.transports()
        wanted = {t: t in served for t in names.mcp_fields}
        doc = caps
        for key in names.mcp[:-1]:
            doc = doc.setdefault(key, {})
        doc[names.mcp[-1]] = names.mark(names.mcp_flags, wanted)

    def check(self, params: Any) -> None:
        """Refuse (-32602, naming the server) a stdio server this agent may not start."""
        raw = params.get("mcpServers") if type(params) is dict else None
        if self.policy.runs_stdio() or type(raw) is not list:
            return
        for i, server in enumerate(mcp_servers(raw)):
            if server.transport == "stdio":
                raise invalid_params(
                    f"MCP server {server.name!r}: this agent is served over HTTP and does not "
                    "start stdio MCP servers sent by a remote client (its operator can allow "
                    f"them: {ALLOW_STDIO_ENV}=1 or --allow-stdio-mcp)",
                    [{"loc": ["params", "mcpServers", i], "msg": "stdio MCP server refused"}],
                )

    def open(self, sid: str, params: Any, cwd: str | None, request: Any) -> None:
        """Start connecting the servers of session `sid` (any earlier set is closed)."""
        self.discard(sid)
        raw = params.get("mcpServers") if type(params) is dict else None
        servers = mcp_servers(raw)
        if not servers:
            return
        installed = mcp_installed()
        if installed:
            guard_sdk_logs()
        session = McpSession(
            sid, servers, cwd, self._message, installed=installed, channel=self._channel()
        )
        try:
            register_secrets(session.secrets, self._ctx.connection)
        except SecretLimit:
            pass  # still never in a message: McpSession cleans its own values out
        after = getattr(request, "after", None)
        self.sessions[sid] = session
        session.start()
        if isinstance(after, list):
            after.append(session.announced)
        else:
            asyncio.get_running_loop().call_soon(session.announced)

    def discard(self, sid: str) -> None:
        """Close the servers of session `sid` (in the background; `aclose` awaits them)."""
        session = self.sessions.pop(sid, None)
        if session is None or not session.links:
            return
        task = asyncio.get_running_loop().create_task(session.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """The connection ended: every server of every session closed (and awaited)."""
        for sid in list(self.sessions):
            self.discard(sid)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def _message(self, sid: str, text: str) -> None:
        conn = self._ctx.connection
        if conn is None or sid not in self.sessions:
            return
        update: dict[str, Any] = {"sessionUpdate": "agent_message_chunk"}
        shape = self._ctx.revision.turn
        if shape.chunk_message_id:
            update[shape.chunk_message_id] = str(uuid.uuid4())
        update["content"] = {"type": "text", "text": text + "\n"}
        conn.notify("session/update", {"sessionId": sid, "update": update})


class TurnMcp:
    """`turn.mcp`: the session's MCP tools for a handler; each call shown as a tool call."""

    def __init__(self, session: McpSession | None, turn: Authoring) -> None:
        self._session = session
        self._turn = turn

    async def list_tools(self) -> list[McpTool]:
        """Every tool of every server that is connected (waits for them, bounded)."""
        return await self._session.tools() if self._session is not None else []

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> McpToolResult:
        """Call tool `name` (`<server>_<tool>`), shown to the client as a tool call (in
        progress, then completed or failed, with raw input and output).  Raises
        `McpToolError` when the tool is unknown or its server failed."""
        args = dict(arguments or {})
        call = await self._turn.start_tool_call(name, status="in_progress", raw_input=args)
        try:
            if self._session is None:
                raise McpToolError(f"no MCP tool named {name!r}")
            result = await self._session.call(name, args)
        except McpToolError as exc:
            await call.fail(raw_output={"error": str(exc)}, content=[TextContent(str(exc))])
            raise
        except asyncio.CancelledError:
            await call.cancel()
            raise
        shown, raw = _shown(result)
        if result.is_error:
            await call.fail(raw_output=raw, content=shown)
        else:
            await call.complete(raw_output=raw, content=shown)
        return result

    async def call_quietly(
        self, name: str, arguments: dict[str, Any] | None = None
    ) -> McpToolResult:
        """Call tool `name` without a tool call of its own (the model adapter shows the
        model's tool calls itself)."""
        if self._session is None:
            raise McpToolError(f"no MCP tool named {name!r}")
        return await self._session.call(name, arguments)

    def toolset(self, *, show: bool = False) -> Any:
        """The session's MCP tools as a pydantic-ai toolset (needs `pydantic-ai-slim`):
        the same connections; `show`: each call also shown as a tool call of its own."""
        try:  # by name: shipped with the model adapter (pydantic-ai), not in every project
            module = importlib.import_module(".mcp_toolset", __package__)
        except ModuleNotFoundError as exc:
            raise RuntimeError(
                "turn.mcp.toolset() needs pydantic-ai and the runtime's mcp_toolset module "
                f"(a project whose agent uses a model): {exc}"
            ) from None
        return module.McpToolset(self, show=show)


def _shown(result: McpToolResult) -> tuple[list[ToolContent], dict[str, Any]]:
    """What the client is shown of a result: its text blocks as tool call content, and the
    result as its raw output (other blocks stay there), each within the tool output bound
    (`ACP_TOOL_OUTPUT_LIMIT`: above it the text, cut with a note, stands for the whole)."""
    limit = tool_output_limit()
    text = bounded(result.text(), limit)
    raw = result.wire()
    if len(orjson.dumps(raw, default=str)) > limit:
        raw = {"content": [{"type": "text", "text": text}], "isError": result.is_error}
    return ([TextContent(text)] if text else []), raw


__all__ = [
    "ALLOW_STDIO_ENV",
    "CONNECT_TIMEOUT",
    "McpHub",
    "McpPolicy",
    "McpSession",
    "McpTool",
    "McpToolError",
    "McpToolResult",
    "TurnMcp",
    "mcp_installed",
]
