"""Client side: dispatch the agent's calls to a `ClientBase`, call the agent.

`ClientRuntime` is the base of the generated `ClientBase`: a method the user overrides
gets the agent's call (params validated into the protocol model); otherwise the
runtime's default `_rt_<name>` answers it (elicitation and permission requests: the
manifest's interrupts go to the generated `interrupt_<name>` handlers, whose default
asks on the terminal, or declines when stdin is not one); anything else answers -32601
(requests) or is ignored (notifications).  `AgentProxy` is the base of the generated
typed `AgentConnection` (one method per agent method).  `spawn_agent` runs an agent
command as a subprocess over stdio; when it exits, every request still waiting fails
at once with `AgentExited` (the process itself: agent_process.py).  Retrying transient
agent errors: retries.py; the terminal questions: prompts.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ..wire.errors import (
    AgentExited,
    ConnectionClosed,
    RpcError,
    method_not_found,
    unspoken_version,
)
from ..wire.jsonrpc import DEFAULT_MAX_MESSAGE_SIZE, Connection, log
from ..wire.requests import RequestContext
from ..wire.revision import Method, Revision, revision_for
from ..wire.routes import Handler, Router, runtime_attr
from ..wire.stdio import read_frames
from .permissions import approves, option_of

if TYPE_CHECKING:  # the terminal questions (prompts.py) are imported where a client asks
    from .prompts import Terminal

T = TypeVar("T")
P = TypeVar("P", bound="AgentProxy")


def _dump(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        return dump(by_alias=True, exclude_unset=True, mode="json")
    return obj


class ClientRuntime:
    METHODS: ClassVar[dict[str, Method]] = {}
    _acp_manifest: ClassVar[dict[str, Any]] = {}
    # interrupt name -> the generated handler method (`interrupt_<name>`)
    _acp_interrupts: ClassVar[dict[str, str]] = {}

    @classmethod
    def _protocol_models(cls) -> Any:
        return None

    @classmethod
    def _protocol_models_of(cls, package: str) -> Any:
        return cls._protocol_models() if not package else None

    @classmethod
    def protocol_models_of(cls, package: str) -> Any:
        """The protocol models module of the revision in `_generated/<package>` ("": the
        primary one), None when there is none (what the wire check validates against)."""
        return cls._protocol_models_of(package)

    @classmethod
    def _manifest_models(cls) -> Any:
        return None

    def __init__(self) -> None:
        self.connection: Connection | None = None
        self.revision: Revision | None = None  # set by `negotiate`
        # where interrupts are asked (the console shares its own); made on first use
        self.terminal: Terminal | None = None
        self._idle_waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        # what the runtime serves itself (the console client turns them on; --no-fs,
        # --no-terminal turn them off): the agent's file reads and writes, and terminals,
        # inside `root` (the session folder); `assume_yes` (--yes) allows writes and
        # permission requests without asking
        self.serve_fs = False
        self.serve_terminal = False
        self.assume_yes = False
        self.root = os.getcwd()
        # render every session update a handler does not take (the console client)
        self.render_updates = False
        self._tools: Any = None  # (Files, Terminals, Renderer), made on first use

    def declared_capabilities(self, revision: Revision) -> dict[str, Any]:
        """What this client tells the agent at `initialize` it can answer: elicitation in
        form mode where the revision has it (interrupts and plain elicitations are answered
        by a handler, on the terminal, or declined); `fs` and `terminal` when this client
        serves them and the revision has those methods (v2 has none)."""
        caps: dict[str, Any] = {}
        names = revision.client_capabilities
        if revision.elicitation and names.elicitation and names.elicitation_form:
            caps[names.elicitation] = {names.elicitation_form: {}}
        methods = revision.side("client")
        fs = {
            flag: True
            for flag, method in (
                ("readTextFile", "fs/read_text_file"),
                ("writeTextFile", "fs/write_text_file"),
            )
            if self.serve_fs and method in methods
        }
        if fs:
            caps["fs"] = fs
        if self.serve_terminal and "terminal/create" in methods:
            caps["terminal"] = True
        return caps

    @property
    def router(self) -> Router:
        """The agent's calls to this client, routed like the agent's own (routes.py)."""
        found, _ = Router.of(
            self,
            "client",
            models=lambda: self._protocol_models_of(self.revision.package if self.revision else ""),
            dump=_dump,
            default=self._runtime_handler,
        )
        methods = self.revision.side("client") if self.revision else self.METHODS
        if found.methods is not methods:  # `negotiate` chose the revision
            found.use(methods)
        return found

    def _runtime_handler(self, method: str, entry: Method | None) -> Handler | None:
        """The runtime default `_rt_<name>(params)` of a method of the table."""
        default = getattr(self, runtime_attr(method), None) if entry is not None else None
        if default is None:
            return None

        async def call(params: Any, ctx: Any) -> Any:
            return await default(params if type(params) is dict else {})

        return call

    async def handle_request(self, method: str, params: Any, ctx: RequestContext) -> Any:
        return await self.router.request(method, params, ctx)

    async def handle_notification(self, method: str, params: Any) -> None:
        try:
            await self.router.notification(method, params)
        finally:
            if method == "session/update" and self._idle_waiters:
                self._observe_update(params)

    # ---- v2: the turn ends with an idle state_update, after the prompt's answer -------
    def expect_turn_end(self, session_id: str) -> asyncio.Future[dict[str, Any]]:
        """A future for the next `state_update` to `idle` of `session_id` (v2 lifecycle:
        the prompt answers on acceptance); make it before sending the prompt."""
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._idle_waiters[session_id] = fut
        return fut

    def _observe_update(self, params: Any) -> None:
        sid = params.get("sessionId") if type(params) is dict else None
        update = _obj(params.get("update")) if type(params) is dict else {}
        if update.get("sessionUpdate") != "state_update" or update.get("state") != "idle":
            return
        fut = self._idle_waiters.pop(sid, None) if type(sid) is str else None
        if fut is not None and not fut.done():
            fut.set_result(update)

    def turn_error(self, idle: dict[str, Any]) -> RpcError | None:
        """The error an idle `state_update` reports for its turn, if any."""
        field = self.revision.turn.idle_error if self.revision is not None else None
        err = idle.get(field) if field else None
        if type(err) is not dict:
            err = _obj(idle.get("_meta")).get("error")
        if type(err) is not dict:
            return None
        code = err.get("code")
        return RpcError(
            code if type(code) is int else -32603, str(err.get("message", "")), err.get("data")
        )

    # ---- interrupts and questions (runtime defaults) -------------------------------
    def _terminal(self) -> Terminal:
        if self.terminal is None:
            from .prompts import Terminal

            self.terminal = Terminal()
        return self.terminal

    def _interrupt_spec(self, name: str) -> dict[str, Any]:
        for spec in self._acp_manifest.get("interrupts") or ():
            if type(spec) is dict and spec.get("name") == name:
                return spec
        return {}

    def _mclass(self, name: str) -> Any:
        mm = self._manifest_models()
        return getattr(mm, name, None) if mm is not None else None

    async def _run_interrupt(self, name: str, payload: Any, message: str) -> Any:
        """The user's `interrupt_<name>` handler with the typed payload: its answer (a
        `<Name>Resume`) or None (declined)."""
        from ..wire.fields import camel

        cls = self._mclass(camel(name) + "Payload")
        typed = payload
        if cls is not None:
            try:
                typed = cls.model_validate(payload if payload is not None else {})
            except Exception as exc:
                if not hasattr(exc, "errors"):
                    raise
                log.warning("interrupt %r: the agent's payload does not match its schema", name)
                return None
        return await getattr(self, self._acp_interrupts[name])(typed, message)

    async def _ask_interrupt(self, name: str, payload: Any, message: str) -> Any:
        """The generated handlers' default: ask on the terminal (None: declined)."""
        from ..wire.fields import camel
        from .prompts import ask_form

        spec = self._interrupt_spec(name)
        schema = (spec.get("resume") or {}).get("schema") or {}
        shown = _dump(payload)
        content = await ask_form(self._terminal(), message, schema, name=name, payload=shown)
        if content is None:
            return None
        cls = self._mclass(camel(name) + "Resume")
        return cls.model_validate(content) if cls is not None else content

    async def _rt_elicitation_create(self, params: dict[str, Any]) -> dict[str, Any]:
        from .prompts import ask_form
        from .retries import one_line

        meta = _obj(params.get("_meta"))
        name = meta.get("interrupt")
        message = str(params.get("message") or name or "the agent asks for input")
        if type(name) is str and name in self._acp_interrupts:
            answer = await self._run_interrupt(name, meta.get("payload"), message)
            if answer is None:
                return {"action": "decline"}
            return {"action": "accept", "content": _dump(answer)}
        if params.get("mode", "form") != "form":
            print(f"the agent asks: {one_line(message)} (declined: not a form)", file=sys.stderr)
            return {"action": "decline"}
        schema = params.get("requestedSchema")
        content = await ask_form(self._terminal(), message, schema if type(schema) is dict else {})
        return (
            {"action": "decline"} if content is None else {"action": "accept", "content": content}
        )

    # ---- files, terminals, updates (runtime defaults) -------------------------------
    def tools(self) -> Any:
        """This client's (Files, Terminals, Renderer)."""
        if self._tools is None:
            from .client_tools import Files, Renderer, Terminals

            files = Files(self.root, self._confirm_write)
            terminals = Terminals(self.root, files)
            self._tools = (files, terminals, Renderer(terminal_output=terminals.output_text))
        return self._tools

    async def close_tools(self) -> None:
        """Kill every terminal the agent left running (the client is exiting)."""
        if self._tools is not None:
            await self._tools[1].close()

    async def _confirm_write(self, path: str, content: str) -> bool:
        from .prompts import ask_yes_no, say

        if self.assume_yes:
            say(f"the agent writes {path} ({len(content)} characters) -- allowed (--yes)\n")
            return True
        term = self._terminal()
        if not term.interactive():
            term.unanswered += 1
            say(
                f"the agent asks to write {path} -- refused: stdin is not a terminal, nobody "
                "can answer here (--yes allows writes)\n"
            )
            return False
        return await ask_yes_no(
            term, f"the agent wants to write {path} ({len(content)} characters)"
        )

    async def _rt_session_update(self, params: dict[str, Any]) -> None:
        update = params.get("update")
        if self.render_updates and type(update) is dict:
            self.tools()[2].render(update)

    def _serving(self, method: str, enabled: bool) -> None:
        if not enabled:  # not declared: the agent must not ask
            raise method_not_found(method)

    async def _rt_fs_read_text_file(self, params: dict[str, Any]) -> dict[str, Any]:
        self._serving("fs/read_text_file", self.serve_fs)
        return dict(await self.tools()[0].read(params))

    async def _rt_fs_write_text_file(self, params: dict[str, Any]) -> dict[str, Any]:
        self._serving("fs/write_text_file", self.serve_fs)
        return dict(await self.tools()[0].write(params))

    async def _rt_terminal_create(self, params: dict[str, Any]) -> dict[str, Any]:
        self._serving("terminal/create", self.serve_terminal)
        return dict(await self.tools()[1].create(params))

    async def _rt_terminal_output(self, params: dict[str, Any]) -> dict[str, Any]:
        self._serving("terminal/output", self.serve_terminal)
        return dict(await self.tools()[1].output(params))

    async def _rt_terminal_wait_for_exit(self, params: dict[str, Any]) -> dict[str, Any]:
        self._serving("terminal/wait_for_exit", self.serve_terminal)
        return dict(await self.tools()[1].wait_for_exit(params))

    async def _rt_terminal_kill(self, params: dict[str, Any]) -> dict[str, Any]:
        self._serving("terminal/kill", self.serve_terminal)
        return dict(await self.tools()[1].kill(params))

    async def _rt_terminal_release(self, params: dict[str, Any]) -> dict[str, Any]:
        self._serving("terminal/release", self.serve_terminal)
        return dict(await self.tools()[1].release(params))

    async def _rt_session_request_permission(self, params: dict[str, Any]) -> dict[str, Any]:

        options = [o for o in params.get("options") or () if type(o) is dict]
        meta = _obj(params.get("_meta"))
        name = meta.get("interrupt")
        tool = _obj(params.get("toolCall"))
        shown = self.tools()[2].tool_title(tool.get("toolCallId")) if tool else None
        title = str(params.get("title") or tool.get("title") or shown or name or "a permission")
        if type(name) is str and name in self._acp_interrupts:
            payload = meta["payload"] if "payload" in meta else tool.get("rawInput")
            answer = await self._run_interrupt(name, payload, title)
            chosen = option_of(
                options,
                "allow"
                if approves(None if answer is None else _dump(answer), self._interrupt_spec(name))
                else "reject",
            )
        else:
            from .prompts import ask_choice

            chosen = await ask_choice(self._terminal(), title, options, yes=self.assume_yes)
        if chosen is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": chosen}}


def _obj(value: Any) -> dict[str, Any]:
    return value if type(value) is dict else {}


class AgentProxy:
    """Typed calls to the agent; generated subclasses add one method per agent method."""

    METHODS: ClassVar[dict[str, Method]] = {}
    # the revisions this client speaks, oldest first (set by the generated dispatcher)
    REVISIONS: ClassVar[tuple[Revision, ...]] = ()

    @classmethod
    def _protocol_models(cls) -> Any:
        return None

    @classmethod
    def _protocol_models_of(cls, package: str) -> Any:
        return cls._protocol_models() if not package else None

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.revision: Revision | None = None  # set by `negotiate`

    def _typed(self, method: str, raw: Any) -> Any:
        """`raw`, the result of `method`, as the negotiated revision's result model."""
        entry = (self.revision.side("agent") if self.revision else self.METHODS).get(method)
        pm = self._protocol_models_of(self.revision.package if self.revision else "")
        rcls = (
            getattr(pm, entry.result, None) if pm is not None and entry and entry.result else None
        )
        return rcls.model_validate(raw) if rcls is not None and raw is not None else raw

    async def _request(self, method: str, params: Any) -> Any:
        return self._typed(method, await self.connection.request(method, _dump(params)))

    async def _notify(self, method: str, params: Any) -> None:
        self.connection.notify(method, _dump(params))

    async def _negotiate(
        self,
        client: ClientRuntime | None,
        *,
        name: str,
        version: str,
        capabilities: dict[str, Any] | None,
    ) -> Any:
        raw = await negotiate(self, client, name=name, version=version, capabilities=capabilities)
        return self._typed("initialize", raw)

    async def call(self, method: str, params: Any = None) -> Any:
        """Any method by wire name (extensions included), on wire dicts."""
        return await self.connection.request(method, _dump(params))

    async def batch(self, *calls: tuple[str, Any]) -> list[Any]:
        """Several requests at once: each result typed as its method's result model, in
        the order given, or the `RpcError` that request got (returned, not raised). On v1
        they travel as one JSON-RPC batch (stdio, WebSocket; an HTTP agent refuses
        batches, 501); v2 removed batches, so there they are sent side by side, one
        message each.

        ``await agent.batch(("session/new", {"cwd": "/"}), ("session/list", {}))``
        """
        if self.revision is not None and self.revision.turn.lifecycle == "v2":
            raws = list(
                await asyncio.gather(
                    *(self.connection.request(m, _dump(p)) for m, p in calls),
                    return_exceptions=True,
                )
            )
            for raw in raws:
                if isinstance(raw, BaseException) and not isinstance(raw, RpcError):
                    raise raw
        else:
            raws = await self.connection.request_batch([(m, _dump(p)) for m, p in calls])
        return [
            raw if isinstance(raw, RpcError) else self._typed(method, raw)
            for (method, _), raw in zip(calls, raws, strict=True)
        ]


async def unless_closed(fut: asyncio.Future[T], conn: Connection) -> T:
    """`await fut`, unless the connection ends first (its error is raised)."""
    closed = asyncio.ensure_future(conn.closed.wait())
    waiting: list[asyncio.Future[Any]] = [fut, closed]
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        closed.cancel()
    if fut.done():
        return fut.result()
    raise conn.close_reason or ConnectionClosed()


async def prompt_turn(
    agent: AgentProxy, client: ClientRuntime, session_id: str, *blocks: dict[str, Any] | str
) -> str:
    """Send one prompt (`blocks`, a str as a text block) and wait until its turn ends:
    the stop reason; an error the turn ended with is raised.  v1 answers `session/prompt`
    at the end of the turn; v2 on acceptance, and the turn ends with an idle
    `state_update`: both are waited for here."""
    from .content import prompt

    v2 = client.revision is not None and client.revision.turn.lifecycle == "v2"
    ended = client.expect_turn_end(session_id) if v2 else None
    try:
        result = await agent.call("session/prompt", prompt(session_id, *blocks))
        if ended is None:
            return str(result.get("stopReason") if type(result) is dict else result)
        idle = await unless_closed(ended, agent.connection)
    finally:
        if ended is not None:
            ended.cancel()
    err = client.turn_error(idle)
    if err is not None:
        raise err
    return str(idle.get("stopReason"))


async def negotiate(
    agent: AgentProxy,
    client: ClientRuntime | None = None,
    *,
    name: str = "client",
    version: str = "0",
    capabilities: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`initialize`, offering the highest revision this client speaks; the revision the
    agent answers (when this client speaks it) serves the connection from then on.  An
    agent that refuses the offer is asked again with the next older revision.  The
    client's capabilities are `capabilities`, else what `client` can answer; they are
    declared under every revision's field name whose revision this client speaks (v1
    `clientCapabilities`, v2 `capabilities`), so an agent that answers an older
    revision than offered reads them too."""
    revisions = sorted(agent.REVISIONS, key=lambda r: r.protocol_version, reverse=True)
    if not revisions:
        raise RpcError(-32603, "this client has no protocol revision (REVISIONS is empty)")

    def caps_for(rev: Revision) -> dict[str, Any]:
        if capabilities is not None:
            return capabilities
        return client.declared_capabilities(rev) if client is not None else {}

    last: RpcError | None = None
    for offer in revisions:
        params: dict[str, Any] = {
            "protocolVersion": offer.protocol_version,
            offer.init.request_capabilities: caps_for(offer),
            offer.init.request_info: {"name": name, "version": version},
        }
        # an agent may answer with an older revision (its own latest) and read the body
        # with that revision's names: the capabilities also go under each older
        # revision's field, in its shape, so such an agent knows what this client answers
        for older in revisions:
            field = older.init.request_capabilities
            if older.protocol_version < offer.protocol_version and field not in params:
                params[field] = caps_for(older)
        try:
            result = await agent.connection.request("initialize", params)
        except ConnectionClosed:
            raise
        except RpcError as err:
            last = err
            continue
        answered = result.get("protocolVersion") if type(result) is dict else None
        chosen = revision_for(revisions, answered)
        if chosen is None:
            raise unspoken_version(answered, [r.protocol_version for r in reversed(revisions)])
        agent.revision = chosen
        if client is not None:
            client.revision = chosen
        return dict(result)
    assert last is not None
    raise last


# ---- the agent as a subprocess ------------------------------------------------------


@contextlib.asynccontextmanager
async def spawn_agent(
    client: ClientRuntime,
    proxy_cls: type[P],
    *command: str,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    env: dict[str, str] | None = None,
    grace: float = 5.0,
) -> AsyncIterator[P]:
    """Start `command` as an agent subprocess; yield a typed proxy to it.

    The agent runs in its own process group.  When it exits (or closes its stdout),
    every request still waiting fails at once with `AgentExited` (its exit status).  On
    leaving, its stdin is closed; an agent still running `grace` seconds later gets
    SIGTERM, then SIGKILL, with everything it started (a child holding the agent's
    stdout open is ended too: it would keep the pipe, and this client, waiting)."""
    from .agent_process import StdoutGuard, end_agent, exit_status, relay_stderr, start_agent

    proc = await start_agent(command, env)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin, stdout = proc.stdin, proc.stdout
    loop = asyncio.get_running_loop()

    async def sink(batch: list[tuple[bytes, Any]]) -> None:
        try:
            stdin.write(b"\n".join([f for f, _ in batch]) + b"\n")
            await stdin.drain()
        except (OSError, RuntimeError):
            # the agent is gone: let the watcher end the connection with its status first
            await exit_status(proc, 1.0)
            raise

    conn = Connection(
        sink, client.handle_request, client.handle_notification, max_message_size=max_message_size
    )
    client.connection = conn
    guard = StdoutGuard(conn)
    reader = loop.create_task(read_frames(stdout, guard, max_message_size))
    relay = loop.create_task(relay_stderr(proc.stderr, guard, command))

    async def watch() -> None:
        exited = loop.create_task(exit_status(proc, None))
        try:
            await asyncio.wait({reader, exited}, return_when=asyncio.FIRST_COMPLETED)
            if not reader.done():  # exited: what it wrote before is still read
                await asyncio.wait({reader}, timeout=0.5)
            status = await exit_status(proc, 2.0)
        finally:
            exited.cancel()
        await conn.close_with(AgentExited(status))

    watcher = loop.create_task(watch())
    try:
        yield proxy_cls(conn)
    finally:
        if not conn.closed.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(conn.flush(), grace)
        with contextlib.suppress(Exception):
            stdin.close()
        await end_agent(proc, reader, grace)
        if not relay.done():  # what the agent logged last is still relayed, briefly
            await asyncio.wait({relay}, timeout=0.5)
        for task in (reader, watcher, relay):
            task.cancel()
        await asyncio.gather(reader, watcher, relay, return_exceptions=True)
        await conn.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), 1.0)
