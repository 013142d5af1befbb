"""Prompt turns: the manifest's conversation states, the `Turn` a handler streams with,
and the two lifecycles: v1 (`session/prompt` answers when the turn ends, with its stop
reason) and v2 (`session/prompt` answers on acceptance; the turn reports itself with
`user_message` and `state_update` updates)."""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from .. import observe
from ..wire.errors import RpcError, from_validation_error, invalid_params
from ..wire.fields import model_dump, need
from ..wire.jsonrpc import Connection, log
from .authoring import Authoring, McpServer, mcp_servers
from .clientcalls import ClientCalls, OpenTerminals
from .commands import SessionExtras, SlashCommand, parse_command
from .config import SessionConfig
from .context import AgentContext, Session
from .interrupts import InterruptDeclined, Interrupts, InterruptUnavailable
from .mcp_servers import McpHub, TurnMcp
from .providers import ProviderRoute, Providers

if TYPE_CHECKING:
    from ..wire.revision import Revision

_dumps = orjson.dumps


EXAMPLE_MAX = 2000  # characters of the schema quoted in an interrupt message


class InputMismatch(Exception):
    """A prompt that does not carry the agent's input: the turn is accepted and ends
    normally, telling the user what JSON the agent expects (never a JSON-RPC error)."""

    def __init__(self, problem: str, schema: Any) -> None:
        super().__init__(problem)
        self.problem = problem
        self.schema = schema

    def message(self) -> str:
        example = _dumps(self.schema).decode() if self.schema is not None else "{}"
        if len(example) > EXAMPLE_MAX:
            example = example[:EXAMPLE_MAX] + "..."
        return (
            f"This agent takes JSON input ({self.problem}). Send a JSON document matching "
            f"this schema, as text or as an application/json resource: {example}"
        )


def _text_input(schema: Any) -> bool:
    """A plain-text input schema (`type: string`, no enum, const or format): the handler
    gets the validated text as `str`, not its model (generator/render `text_input` says
    the same, typing `Input` as `str`)."""
    return (
        type(schema) is dict
        and schema.get("type") == "string"
        and not {"enum", "const", "format"} & schema.keys()
    )


def _single_string(schema: Any, text: str) -> Any:
    """The input a plain text makes for a single-string input schema: the text itself for
    ``{"type": "string"}``, ``{key: text}`` for an object whose one property is a string
    (and nothing else is required); None for any other schema."""
    if type(schema) is not dict or not text:
        return None
    if schema.get("type") == "string":
        return text
    props = schema.get("properties")
    if schema.get("type") == "object" and type(props) is dict and len(props) == 1:
        key, prop = next(iter(props.items()))
        only = set(schema.get("required") or ()) <= {key}
        if type(prop) is dict and prop.get("type") == "string" and only:
            return {key: text}
    return None


class Turn(Authoring, ClientCalls):
    """One prompt turn: what the handler uses to stream, interrupt and read config; what
    it shows (authoring.py) and asks the client (clientcalls.py)."""

    __slots__ = (
        "_conn",
        "_host",
        "_prefix",
        "_terminals",
        "command",
        "message_id",
        "reply_id",
        "session",
        "started",
        "stop_reason",
        "usage",
    )

    def __init__(
        self, host: TurnRunner, conn: Connection, session: Session, terminals: OpenTerminals
    ) -> None:
        self._host = host
        self._conn = conn
        self.session = session
        shape = host.ctx.revision.turn
        # the agent's reply: its chunks carry one message id where the revision requires it
        self.reply_id = str(uuid.uuid4()) if shape.chunk_message_id_required else None
        msg_id = (
            b'"' + shape.chunk_message_id.encode() + b'":' + _dumps(self.reply_id) + b","
            if self.reply_id is not None and shape.chunk_message_id
            else b""
        )
        self._prefix = (
            b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":'
            + _dumps(session.id)
            + b',"update":{"sessionUpdate":"agent_message_chunk",'
            + msg_id
            + b'"content":{"type":"text","text":'
        )
        self.stop_reason = "end_turn"
        self.started = False  # (v2) the background turn task began
        self.message_id: str | None = None
        self.usage: dict[str, Any] | None = None
        self.command: SlashCommand | None = None
        self._init_authoring()
        self._terminals = terminals  # the runner closes what is left open when the turn ends

    @property
    def session_id(self) -> str:
        return self.session.id

    def _rev(self) -> Revision:
        return self._host.ctx.revision

    def _client_capabilities(self) -> dict[str, Any]:
        return self._host.ctx.client_capabilities

    @property
    def cwd(self) -> str:
        """The session's working directory (absolute, as the client gave it)."""
        return self.session.cwd or "/"

    @property
    def stop_reasons(self) -> tuple[str, ...]:
        """The stop reasons the revision has (a handler sets `stop_reason` to one)."""
        return self._rev().turn.stop_reasons

    @property
    def mode(self) -> str | None:
        """The session's current mode id (the manifest's `modes`), if it has modes."""
        return self.session.mode

    async def set_mode(self, mode_id: str) -> None:
        """Switch the session's mode and tell the client: v1 `current_mode_update`, else
        `config_option_update` of the `mode` option."""
        host = self._host
        self.session.mode = host.extras.check_mode(mode_id, ("modeId",))
        if self._rev().authoring.modes and self._has("current_mode_update"):
            await self._send({"sessionUpdate": "current_mode_update", "currentModeId": mode_id})
        elif host.extras.mode_as_option() and self._has("config_option_update"):
            result: dict[str, Any] = {"configOptions": host.config.options(self.session.config_raw)}
            host.extras.with_modes(self.session, result, opened=False)
            await self._send({"sessionUpdate": "config_option_update", **result})

    @property
    def mcp_servers(self) -> list[McpServer]:
        """The MCP servers the client passed when the session was created or loaded."""
        return mcp_servers(self.session.mcp_servers)

    @property
    def local_client(self) -> bool:
        """Whether the client runs on this agent's machine (stdio: an editor started the
        agent), so that the session's folder on disk is the user's (over HTTP it is the
        server's)."""
        return not self._host.mcp.policy.remote

    @property
    def mcp(self) -> TurnMcp:
        """The session's connected MCP servers: `list_tools()`, `call(name, args)` (shown
        as a tool call), `toolset()` (the same tools for a pydantic-ai agent)."""
        return TurnMcp(self._host.mcp.sessions.get(self.session.id), self)

    @property
    def config(self) -> Any:
        return self.session.config

    @property
    def cancelled(self) -> bool:
        return self.session.cancel_requested

    def provider(self, provider_id: str) -> ProviderRoute | None:
        return self._host.providers.route(provider_id)

    @property
    def llm(self) -> dict[str, Any]:
        """The manifest's `llm` block ({} without one): the default model, the provider
        whose route the model uses, its instructions (model/adapter.py reads it)."""
        block = self._host.ctx.manifest.get("llm")
        return dict(block) if type(block) is dict else {}

    def option_default(self, option_id: str) -> Any:
        """The default of the manifest's config option `option_id` (None: none)."""
        config = self._host.ctx.manifest.get("config") or {}
        for opt in config.get("options") or () if type(config) is dict else ():
            if type(opt) is dict and opt.get("id") == option_id:
                return opt.get("default")
        return None

    async def send_text(self, text: str) -> None:
        """Stream a piece of text as an `agent_message_chunk`."""
        self._conn.send_raw(self._prefix + _dumps(text) + b"}}}}", self.session.id)
        await self._conn.drain()

    async def send_update(self, update: dict[str, Any]) -> None:
        """Send any `session/update` (a wire dict with `sessionUpdate`)."""
        self._conn.notify("session/update", {"sessionId": self.session.id, "update": update})
        await self._conn.drain()

    async def send_output(self, output: Any) -> None:
        """Validate `output` against the manifest's output and stream it as JSON."""
        data = self._host.dump_output(output)
        chunk: dict[str, Any] = {"sessionUpdate": "agent_message_chunk"}
        key = self._rev().turn.chunk_message_id
        if self.reply_id is not None and key:
            chunk[key] = self.reply_id
        await self.send_update(
            {
                **chunk,
                "content": {
                    "type": "resource",
                    "resource": {
                        "uri": f"acp:output/{self.session.id}/{self.session.turns}",
                        "mimeType": "application/json",
                        "text": _dumps(data).decode(),
                    },
                },
            }
        )

    async def interrupt(self, name: str, payload: Any = None) -> Any:
        """Pause for the client; returns the typed resume.  Asked with `elicitation/create`
        when the client declared it, else `session/request_permission` for a yes/no
        resume; otherwise (or when the client answers with an error) the turn ends
        normally with a message to the user (see interrupts.py)."""
        return await self._host.interrupts.ask(self.session, name, payload)


def _check_blocks(prompt: list[Any]) -> None:
    """Each item of a prompt is a content block (an object with a string `type`)."""
    for i, b in enumerate(prompt):
        if type(b) is not dict or type(b.get("type")) is not str:
            raise invalid_params(
                f"params.prompt[{i}]: expected a content block",
                [{"loc": ["params", "prompt", i], "msg": "expected a content block with a type"}],
            )


def agent_error(exc: BaseException) -> RpcError | None:
    """The JSON-RPC error a handler's exception stands for (an RpcError, an error with
    `to_rpc`, or a manifest error class with a `code`); None for any other exception."""
    if isinstance(exc, RpcError):
        return exc
    to_rpc = getattr(exc, "to_rpc", None)
    if to_rpc is not None:
        r = to_rpc()
        if isinstance(r, RpcError):
            return r
    code = getattr(type(exc), "code", None)
    if isinstance(code, int) and not isinstance(code, bool):
        name = (
            getattr(type(exc), "error_name", None)
            or getattr(type(exc), "name", None)
            or type(exc).__name__
        )
        return RpcError(
            code,
            str(exc) or str(name),
            {
                "name": str(name),
                "transient": bool(getattr(type(exc), "transient", False)),
                "details": model_dump(getattr(exc, "details", None) or getattr(exc, "data", None)),
            },
        )
    return None


class PromptHandler(Protocol):
    """What runs a turn: the user's `prompt` (AgentRuntime, overridden in handlers.py)."""

    async def prompt(self, turn: Turn, input: Any) -> Any: ...


class TurnRunner:
    """Runs the prompt turns of one connection: `session/prompt` and `session/cancel`,
    and what a `Turn` asks of its connection (modes, config, providers, interrupts)."""

    __slots__ = ("_handler", "config", "ctx", "extras", "interrupts", "mcp", "providers")

    def __init__(
        self,
        ctx: AgentContext,
        handler: PromptHandler,
        *,
        config: SessionConfig,
        extras: SessionExtras,
        interrupts: Interrupts,
        providers: Providers,
        mcp: McpHub | None = None,
    ) -> None:
        self.ctx = ctx
        self.mcp = mcp if mcp is not None else McpHub(ctx)  # the sessions' MCP servers
        self._handler = handler
        self.config = config
        self.extras = extras
        self.interrupts = interrupts
        self.providers = providers

    def _parse_input(self, prompt: list[Any], command: SlashCommand | None = None) -> Any:
        """The handler's input from the prompt's content blocks: the blocks as they are
        without an input schema or for a slash command (``turn.command``: its argument
        text is no input); else the JSON resource (``application/json``), or the
        text: as is for a string input, else when it parses as the input, else put into the
        one string field of a single-string object input.  A prompt that gives none of
        these is still accepted (agents MUST take text): its turn only tells the user what
        JSON the agent expects (an ``InputMismatch`` is returned)."""
        _check_blocks(prompt)
        schema = self.ctx.manifest.get("input")
        if not schema or command is not None:
            return prompt
        doc: str | None = None
        for b in prompt:
            res = b.get("resource") if b["type"] == "resource" else None
            if (
                type(res) is dict
                and res.get("mimeType") == "application/json"
                and type(res.get("text")) is str
            ):
                doc = res["text"]
                break
        text = "".join(
            b["text"] for b in prompt if b["type"] == "text" and type(b.get("text")) is str
        )
        if doc is None and type(schema) is dict and schema.get("type") == "string" and text:
            doc = _dumps(text).decode()  # a string input takes the text as it is
        problem = "the prompt carries no input"
        candidates: list[Any] = []
        source = doc if doc is not None else text
        if source.strip():
            try:
                candidates.append(orjson.loads(source))
            except orjson.JSONDecodeError:
                problem = "the prompt is not JSON"
        if doc is None:
            wrapped = _single_string(schema, text)
            if wrapped is not None:
                candidates.append(wrapped)
        for data in candidates:
            try:
                return self._typed_input(data)
            except InputMismatch as exc:
                problem = exc.problem
        return InputMismatch(problem, schema)

    def _typed_input(self, data: Any) -> Any:
        cls = self.ctx.mclass("Input")
        if cls is None:
            return data
        try:
            obj = cls.model_validate(data)
        except Exception as exc:
            if hasattr(exc, "errors"):
                err = from_validation_error(exc, ("input",))
                raise InputMismatch(err.message.removeprefix("invalid params: "), None) from None
            raise
        root = getattr(obj, "root", None)
        if isinstance(root, str) and _text_input(self.ctx.manifest.get("input")):
            return root  # a text input reaches the handler as `str`
        return obj

    def dump_output(self, output: Any) -> Any:
        cls = self.ctx.mclass("Output") if self.ctx.manifest.get("output") else None
        if cls is None:
            return model_dump(output)
        try:
            obj = output if isinstance(output, cls) else cls.model_validate(model_dump(output))
            return obj.model_dump(by_alias=True, exclude_none=True, mode="json")
        except Exception as exc:
            if hasattr(exc, "errors"):
                err = from_validation_error(exc, ("output",))
                raise RpcError(
                    -32603, "the agent's output does not match its output schema", err.data
                ) from None
            raise

    async def _run_turn(self, s: Session, turn: Turn, input: Any, terminals: OpenTerminals) -> str:
        """Run the handler; returns the stop reason (raises RpcError on failure).  Every
        tool call the turn left open ends with it (completed, cancelled or failed)."""
        limit = asyncio.timeout(self.ctx.turn_timeout)
        ended = False
        outcome = "failed"
        try:
            async with limit:
                if isinstance(input, InputMismatch):  # accepted, but nothing to run
                    await turn.send_text(input.message())
                else:
                    out = await self._handler.prompt(turn, input)
                    if out is not None:
                        await turn.send_output(out)
            self.ctx.transition(s, "agent", "agent_message")
            ended = True
            outcome = "completed"
            return turn.stop_reason
        except TimeoutError as exc:
            if not limit.expired():  # the handler's own timeout: an error like any other
                log.error("prompt handler failed: %s", type(exc).__name__, exc_info=exc)
                raise RpcError(-32603, "internal error") from None
            log.warning("turn of session %s timed out after %s s", s.id, self.ctx.turn_timeout)
            s.state = self.ctx.machine.initial  # the session is free for the next prompt
            outcome = "cancelled"
            raise RpcError(
                -32603,
                f"the turn timed out after {self.ctx.turn_timeout:g} s",
                {
                    "name": "TurnTimeout",
                    "transient": True,
                    "details": {"timeout": self.ctx.turn_timeout},
                },
            ) from None
        except asyncio.CancelledError:
            outcome = "cancelled"
            if s.cancel_requested:
                return "cancelled"
            raise
        except InterruptDeclined:
            outcome = "cancelled"
            return "cancelled"
        except InterruptUnavailable as exc:  # the client cannot answer: say so, end normally
            log.info("session %s: interrupt %s unavailable", s.id, exc.interrupt)
            await turn.send_text(exc.message)
            return "end_turn"
        except Exception as exc:  # noqa: BLE001 - user code: mapped to a JSON-RPC error below
            err = agent_error(exc)
            if err is None:
                log.error("prompt handler failed: %s", type(exc).__name__, exc_info=exc)
                err = RpcError(-32603, "internal error")
            raise err from None
        finally:
            await turn.end_tool_calls(outcome)  # before the turn's answer or idle
            await terminals.close_all()  # left open by the handler (or cancelled)
            # A turn that did not end with the agent's message (cancelled, declined
            # interrupt, error) leaves the session ready for the next prompt.
            if not ended and s.state != self.ctx.machine.initial:
                s.state = self.ctx.machine.initial
            s.task = None

    async def prompt(self, params: Any, request: Any) -> Any:
        """`session/prompt`: v1 answers when the turn ends, v2 when it is accepted."""
        s = self.ctx.session(params)
        prompt = need(params, "prompt", list)
        command = parse_command(prompt, self.ctx.manifest.get("commands"))
        input = self._parse_input(prompt, command)
        self.ctx.transition(s, "client", "user_message")
        s.cancel_requested = False
        s.turns += 1
        terminals = OpenTerminals()
        turn = Turn(self, self.ctx.conn(), s, terminals)
        turn.command = command
        shape = self.ctx.revision.turn
        if shape.lifecycle == "v2":
            turn.message_id = (
                params.get("messageId") if type(params.get("messageId")) is str else None
            ) or str(uuid.uuid4())
            task = asyncio.get_running_loop().create_task(
                self._v2_turn(s, turn, input, prompt, terminals)
            )
            task.add_done_callback(lambda t: self._v2_never_ran(s, turn, prompt))
            s.task = task
            accepted: dict[str, Any] = {}
            if shape.prompt_message_id:
                accepted[shape.prompt_message_id] = turn.message_id
            return accepted
        s.task = asyncio.current_task()
        try:
            with observe.turn(s.id, prompt) as span:
                reason = await self._run_turn(s, turn, input, terminals)
                span.set_stop_reason(reason)
        except (RpcError, asyncio.CancelledError):  # failed, or `$/cancel_request`
            self._reset_state(s)
            raise
        result: dict[str, Any] = {"stopReason": reason}
        if turn.usage and shape.prompt_usage:
            result[shape.prompt_usage] = turn.usage
        return result

    def _reset_state(self, s: Session) -> None:
        s.state = self.ctx.machine.initial

    def _v2_update(self, s: Session, update: dict[str, Any]) -> None:
        self.ctx.conn().notify("session/update", {"sessionId": s.id, "update": update})

    def _v2_user_message(self, s: Session, turn: Turn, prompt: list[Any]) -> None:
        self._v2_update(
            s, {"sessionUpdate": "user_message", "messageId": turn.message_id, "content": prompt}
        )

    def _v2_never_ran(self, s: Session, turn: Turn, prompt: list[Any]) -> None:
        """A turn cancelled before its task began: the client still sees it accepted and
        ended (user_message, then idle with stopReason cancelled)."""
        if turn.started:
            return
        self._v2_user_message(s, turn, prompt)
        self._v2_update(
            s, {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}
        )
        self._reset_state(s)
        s.task = None

    async def _v2_turn(
        self, s: Session, turn: Turn, input: Any, prompt: list[Any], terminals: OpenTerminals
    ) -> None:
        turn.started = True
        idle: dict[str, Any] = {"sessionUpdate": "state_update", "state": "idle"}
        try:
            await asyncio.sleep(0)  # the prompt's answer is queued first
        except asyncio.CancelledError:  # cancelled before the handler ran
            self._v2_user_message(s, turn, prompt)
            self._reset_state(s)
            s.task = None
            self._v2_update(s, {**idle, "stopReason": "cancelled"})
            return
        self._v2_user_message(s, turn, prompt)
        self._v2_update(s, {"sessionUpdate": "state_update", "state": "running"})
        try:
            with observe.turn(s.id, prompt) as span:
                idle["stopReason"] = await self._run_turn(s, turn, input, terminals)
                span.set_stop_reason(idle["stopReason"])
            shape = self.ctx.revision.turn
            if turn.usage and shape.idle_usage:
                idle[shape.idle_usage] = turn.usage
        except RpcError as err:
            self._reset_state(s)
            shape = self.ctx.revision.turn
            if shape.idle_error:  # the revision has an `error` stop reason carrying it
                idle["stopReason"] = "error"
                idle[shape.idle_error] = err.to_wire()
            else:
                idle["stopReason"] = "end_turn"
                idle["_meta"] = {"error": err.to_wire()}
        except asyncio.CancelledError:
            idle["stopReason"] = "cancelled"
        self._v2_update(s, idle)

    async def cancel(self, params: Any, request: Any) -> None:
        """`session/cancel`: cancel the session's running turn, where its state allows."""
        if type(params) is not dict or type(params.get("sessionId")) is not str:
            return
        s = self.ctx.sessions.get(params["sessionId"])
        if s is None or s.task is None:
            return
        nxt = self.ctx.machine.step(s.state, "client", "cancel")
        if nxt is None:
            log.warning("cancel not allowed in state %s; ignored", s.state)
            return
        s.state = nxt
        s.cancel_requested = True
        s.task.cancel()
