"""Agent-side protocol plumbing implemented from the manifest.

`AgentRuntime` is the base of the generated `AgentBase`.  It answers every agent
method it can implement from the manifest (initialize, authenticate, `_agent/info`,
providers/*, session/new, session/set_config_option, session/prompt, session/cancel)
on plain wire dicts; a user override of the typed method in `handlers.py` takes over
(its params are validated into the protocol model first).  The user's handler is
`async def prompt(self, turn, input)`.

It is a `Dispatcher` (dispatch.py: routing, typed callers) that composes one
collaborator per concern around one `AgentContext` (context.py: the revision, the
connection, the sessions, the client's capabilities, the models): `TurnRunner`
(turns.py: the v1 and v2 prompt lifecycles), `Interrupts` (interrupts.py), `Providers`
(providers.py), `SessionConfig` (config.py) and `SessionExtras` (commands.py: commands
and modes).  Initialize, authentication, `_agent/info` and session/new live here; each
`_rt_<name>` default answers its method itself or hands it to its collaborator.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import os
import sys
import uuid
from collections.abc import Awaitable, Iterable
from typing import Any, ClassVar

from ..wire.errors import (
    AUTH_REQUIRED,
    INVALID_PARAMS,
    INVALID_REQUEST,
    UNSUPPORTED_VERSION,
    RpcError,
    invalid_params,
)
from ..wire.fields import need
from ..wire.jsonrpc import Connection, log
from ..wire.revision import Revision, revision_for
from ..wire.routes import Handler, Router
from . import agent_auth
from .commands import SessionExtras
from .config import SessionConfig, SessionSetup
from .context import STATE_ERROR, AgentContext, Session, StateMachine
from .dispatch import Dispatcher, immediate_methods
from .interrupts import InterruptDeclined, Interrupts
from .mcp_servers import McpHub
from .providers import ProviderRoute, Providers
from .turns import Turn, TurnRunner


class AgentRuntime(Dispatcher):
    """Runtime defaults for every agent method the manifest describes."""

    # seconds one prompt turn may take (handler, streaming and interrupts); None: no limit.
    # The environment variable ACP_TURN_TIMEOUT overrides it, a constructor argument both.
    TURN_TIMEOUT: ClassVar[float | None] = None

    def __init__(self, *, turn_timeout: float | None = None) -> None:
        m = self._acp_manifest
        timeout = turn_timeout if turn_timeout is not None else _turn_timeout(self)
        ctx = self._acp_ctx = AgentContext(m, self._manifest_models, timeout)
        self._acp_extras = SessionExtras(ctx)
        self._acp_config = SessionConfig(ctx, self._acp_extras)
        self._acp_providers = Providers(m)
        # the MCP servers clients pass (mcp_servers.py); the session layer opens and
        # closes them, an HTTP transport sets its policy
        self.mcp_hub = McpHub(ctx)
        # what the session layer (sessions.py) asks of this runtime
        self.session_setup = SessionSetup(ctx, self._acp_config, self._acp_extras)
        self._acp_turns = TurnRunner(
            ctx,
            self,
            config=self._acp_config,
            extras=self._acp_extras,
            interrupts=Interrupts(ctx),
            providers=self._acp_providers,
            mcp=self.mcp_hub,
        )
        self._login_methods = agent_auth.manifest_methods(m)
        self._authenticated = False
        # the version a client asked for in `initialize` when it is older than every
        # revision served: that client cannot speak the answer (_spoken_first)
        self._unspoken: int | None = None
        # the generated AgentBase sets REVISIONS; a bare runtime answers nothing (-32601)
        self._methods = {}
        if self.REVISIONS:
            self._use_revision(self.REVISIONS[-1])

    # ---- the shared context, as attributes of the runtime ------------------------
    @property
    def revision(self) -> Revision:
        return self._acp_ctx.revision

    @revision.setter
    def revision(self, rev: Revision) -> None:
        self._acp_ctx.revision = rev

    @property
    def connection(self) -> Connection | None:
        return self._acp_ctx.connection

    @connection.setter
    def connection(self, conn: Connection | None) -> None:
        self._acp_ctx.connection = conn

    @property
    def sessions(self) -> dict[str, Session]:
        return self._acp_ctx.sessions

    @property
    def client_capabilities(self) -> dict[str, Any]:
        return self._acp_ctx.client_capabilities

    @client_capabilities.setter
    def client_capabilities(self, caps: dict[str, Any]) -> None:
        self._acp_ctx.client_capabilities = caps

    @property
    def turn_timeout(self) -> float | None:
        return self._acp_ctx.turn_timeout

    @turn_timeout.setter
    def turn_timeout(self, seconds: float | None) -> None:
        self._acp_ctx.turn_timeout = seconds

    # ---- the user's API ----------------------------------------------------------
    async def prompt(self, turn: Turn, input: Any) -> Any:
        """Handle one prompt. Override in handlers.py."""
        raise RpcError(-32603, "the agent has no prompt handler (override `prompt` in handlers.py)")

    async def authenticate_with(self, method_id: str) -> None:
        """Log the user in for the manifest's `agent` auth method `method_id` (the client
        called `authenticate` / `auth/login`). Return once logged in; raise `RpcError` to
        refuse. Override in handlers.py: as generated it refuses."""
        raise RpcError(
            AUTH_REQUIRED,
            f"auth method {method_id!r} has no login flow yet "
            "(override `authenticate_with` in handlers.py)",
        )

    async def is_authenticated(self) -> bool:
        """Whether the user is logged in already (e.g. credentials a terminal login saved):
        asked at `session/new` until `authenticate` succeeds. Override in handlers.py."""
        return False

    async def log_out(self) -> None:
        """`auth/logout` (v2): forget the user's credentials. Override in handlers.py."""

    @classmethod
    def login(cls, method_id: str, argv: list[str]) -> int:
        """The interactive login of the manifest's `terminal` auth method `method_id`: the
        client runs the agent's command with the method's args in a terminal; the exit
        status is the result (0: logged in). `argv`: the arguments before the method's.
        Override in handlers.py: as generated it explains what to write and returns 1."""
        sys.stderr.write(
            f"{cls._acp_manifest.get('name', 'agent')}: the terminal login {method_id!r} is not "
            "written yet: override the classmethod `login` in handlers.py (ask for the "
            "credentials, store them, return 0) and `is_authenticated` (read them back)\n"
        )
        return 1

    # ---- connection plumbing -----------------------------------------------------
    def attach(self, conn: Connection) -> None:
        self._acp_ctx.connection = conn

    # ---- initialize / auth / info ----------------------------------------------------
    def _info(self) -> dict[str, Any]:
        m = self._acp_manifest
        out = {"name": m.get("name", "agent"), "version": str(m.get("version", "0"))}
        if m.get("title"):
            out["title"] = m["title"]
        return out

    def _capabilities(self) -> dict[str, Any]:
        """The agent's capabilities, each where this revision's AgentCapabilities puts it."""
        names = self.revision.agent_capabilities
        caps: dict[str, Any] = {}
        if names.load_session:
            caps[names.load_session] = False
        if names.prompt:
            # embedded context: JSON input travels as an embedded resource; flags on v1,
            # `{}` markers on v2 (a v2 client reads `true` as "not advertised")
            prompt = {"image": False, "audio": False, "embeddedContext": True}
            wanted = {k: v for k, v in prompt.items() if k in names.prompt_fields}
            _put(caps, names.prompt, names.mark(names.prompt_flags, wanted))
        if self._acp_providers and names.providers:
            caps[names.providers] = True if names.providers_is_flag else {}
        self.mcp_hub.advertise(names, caps)
        return caps

    def _auth_methods(self) -> list[dict[str, Any]]:
        shape = self.revision.auth_method
        if self._login_methods:
            return agent_auth.listed(self._login_methods, shape, self.client_capabilities)
        # no stdio method: the HTTP schemes, listed for information (nothing is required)
        out = []
        for a in self._acp_manifest.get("auth") or ():
            if a.get("type") in (None, "none"):
                continue
            entry = {shape.id: a["type"], "name": a["type"]}
            if shape.agent_type:
                entry["type"] = shape.agent_type
            if a.get("env"):
                entry["description"] = f"credential from ${a['env']}"
            out.append(entry)
        return out

    def _negotiate(self, version: int) -> Revision:
        """ACP's rule: the client's version when the agent serves it, else the agent's latest."""
        return revision_for(self.REVISIONS, version) or self.REVISIONS[-1]

    async def _rt_initialize(self, params: Any, ctx: Any) -> Any:
        version = need(params, "protocolVersion", int)
        rev = self._negotiate(version)
        self._use_revision(rev)
        # ACP: a client offers the latest version it speaks and the agent answers with
        # its own latest when it does not serve that one; a client that offered an older
        # version than every one served cannot speak the answer: its other requests are
        # refused, saying why (a client that disconnects never sees it)
        oldest = min(r.protocol_version for r in self.REVISIONS)
        self._unspoken = version if version < oldest else None
        if self._unspoken is not None:
            log.warning("%s", self._unspoken_message())
        shape = rev.init
        if rev.protocol_version == version and shape.request_info_required:
            # the request is in this revision's shape: check what it requires
            need(params, shape.request_info, dict)
        # in another revision's body, a client that also speaks ours declares its
        # capabilities under our field name as well (runtime.client.client.negotiate)
        caps = params.get(shape.request_capabilities)
        self._acp_ctx.client_capabilities = caps if type(caps) is dict else {}
        result: dict[str, Any] = {"protocolVersion": rev.protocol_version}
        result[shape.response_info] = self._info()
        result[shape.response_capabilities] = self._capabilities()
        if shape.auth_methods:
            result[shape.auth_methods] = self._auth_methods()
        llm = self._acp_manifest.get("llm")
        if type(llm) is dict:  # a model agent: its model code loads once this is answered
            asyncio.get_running_loop().call_soon(_warm_model, llm)
        return result

    async def _rt_authenticate(self, params: Any, ctx: Any) -> Any:
        mid = need(params, "methodId", str)
        method = next((m for m in self._login_methods if m.id == mid), None)
        if method is not None and method.type == "terminal":
            raise invalid_params(
                f"auth method {mid!r} is a terminal login: run the agent with "
                f"{' '.join(method.args)} in a terminal, then connect again",
                [{"loc": ["params", "methodId"], "msg": "a terminal method"}],
            )
        if method is None and mid not in {
            a[self.revision.auth_method.id] for a in self._auth_methods()
        }:
            raise invalid_params(
                "unknown auth method",
                [{"loc": ["params", "methodId"], "msg": "unknown auth method"}],
            )
        if method is not None:
            await self.authenticate_with(mid)
            self._authenticated = True
        return {}

    async def _rt_auth_login(self, params: Any, ctx: Any) -> Any:
        return await self._rt_authenticate(params, ctx)

    async def _rt_auth_logout(self, params: Any, ctx: Any) -> Any:
        await self.log_out()
        self._authenticated = False
        return {}

    def _register_routes(self, router: Router) -> None:
        # every session request (new, load, resume, list, prompt, delete, ...) of every
        # revision this agent serves needs the login: a stored session is no less private
        # than a new one
        names = {
            m.name
            for rev in self.REVISIONS
            for m in rev.methods
            if m.side == "agent" and m.kind == "request" and m.name.startswith("session/")
        }
        for name in sorted(names | {"session/new"}):
            router.wrap(name, self._login_first, gate=True)
        # every other request of a client that cannot speak the version answered
        every = {
            m.name
            for rev in self.REVISIONS
            for m in rev.methods
            if m.side == "agent" and m.kind == "request" and m.name != "initialize"
        }
        for name in sorted(every):
            router.wrap(name, self._spoken_first, gate=True)

    def _spoken_first(self, handler: Handler) -> Handler:
        """A request after an `initialize` that offered an older protocol version than
        this agent serves: refused, naming the versions (`_rt_initialize`).  No coroutine
        of its own: a request hands on the handler's (every request passes here)."""

        def spoken(params: Any, ctx: Any) -> Awaitable[Any]:
            if self._unspoken is not None:
                raise RpcError(
                    INVALID_REQUEST,
                    self._unspoken_message(),
                    {
                        "name": UNSUPPORTED_VERSION,
                        "transient": False,
                        "details": {
                            "requested": self._unspoken,
                            "supported": [r.protocol_version for r in self.REVISIONS],
                        },
                    },
                )
            return handler(params, ctx)

        return spoken

    def _unspoken_message(self) -> str:
        served = " and ".join(str(r.protocol_version) for r in self.REVISIONS)
        latest = max(r.protocol_version for r in self.REVISIONS)
        return (
            f"this agent speaks ACP protocol version {served}; the client's initialize "
            f"asked for version {self._unspoken}, which it does not serve: use a client "
            f"that speaks version {latest}, or serve version "
            f"{self._unspoken} too (in the agent's project: agentgen regen --schema "
            f"v{self._unspoken} --schema v{latest})"
        )

    def _login_first(self, handler: Handler) -> Handler:
        """A session request needs a login when the manifest has stdio auth methods.  Once
        logged in (or with none), the handler's coroutine is handed on as it is."""

        async def logging_in(params: Any, ctx: Any) -> Any:
            if not await self.is_authenticated():
                raise RpcError(
                    AUTH_REQUIRED,
                    "authentication required: log in with one of the auth methods "
                    "`initialize` lists",
                )
            self._authenticated = True
            return await handler(params, ctx)

        def logged_in(params: Any, ctx: Any) -> Awaitable[Any]:
            if self._login_methods and not self._authenticated:
                return logging_in(params, ctx)
            return handler(params, ctx)

        return logged_in

    async def _rt_agent_info(self, params: Any, ctx: Any) -> Any:
        return self.agent_info()

    def agent_info(self) -> dict[str, Any]:
        """`_agent/info` (and the HTTP well-known document): identity, links,
        capabilities and the manifest's schemas."""
        m = self._acp_manifest
        info: dict[str, Any] = {
            **self._info(),
            "description": m.get("description"),
            "links": m.get("links") or {},
            "protocolVersion": self.revision.protocol_version,
            "capabilities": self._capabilities(),
            "outputModes": m.get("output_modes") or {},
            "schemas": {
                "config": (m.get("config") or {}).get("schema"),
                "input": m.get("input"),
                "output": m.get("output"),
                "interrupts": {
                    i["name"]: {
                        "payload": (i.get("payload") or {}).get("schema"),
                        "resume": (i.get("resume") or {}).get("schema"),
                    }
                    for i in m.get("interrupts") or ()
                },
                "errors": [
                    {k: e.get(k) for k in ("code", "name", "description", "transient", "data")}
                    for e in m.get("errors") or ()
                ],
            },
            "providers": [
                {
                    "providerId": p["id"],
                    "supported": list(p.get("supported") or ()),
                    "required": bool(p.get("required")),
                }
                for p in m.get("providers") or ()
            ],
            "configOptions": self._acp_config.options({}),
            "states": m.get("states"),
        }
        return info

    # ---- sessions: session/new here; config, modes, turns and providers answered by
    # their collaborators
    async def _rt_session_prompt(self, params: Any, ctx: Any) -> Any:
        return await self._acp_turns.prompt(params, ctx)

    async def _rt_session_cancel(self, params: Any, ctx: Any) -> None:
        await self._acp_turns.cancel(params, ctx)

    async def _rt_session_set_mode(self, params: Any, ctx: Any) -> Any:
        return await self._acp_extras.set_mode(params, ctx)

    async def _rt_providers_list(self, params: Any, ctx: Any) -> Any:
        return await self._acp_providers.list_routes(params, ctx)

    async def _rt_providers_set(self, params: Any, ctx: Any) -> Any:
        return await self._acp_providers.set_route(params, ctx)

    async def _rt_providers_disable(self, params: Any, ctx: Any) -> Any:
        return await self._acp_providers.disable(params, ctx)

    async def _rt_session_new(self, params: Any, ctx: Any) -> Any:
        need(params, "cwd", str)
        if "mcpServers" in params and type(params["mcpServers"]) is not list:
            raise invalid_params(
                "params.mcpServers: expected an array",
                [{"loc": ["params", "mcpServers"], "msg": "expected an array"}],
            )
        meta = params.get("_meta") or {}
        given = meta.get("config") if type(meta) is dict else None
        if given is not None and type(given) is not dict:
            raise invalid_params(
                "params._meta.config: expected an object",
                [{"loc": ["params", "_meta", "config"], "msg": "expected an object"}],
            )
        raw = {**self._acp_config.defaults(), **(given or {})}
        config = self._acp_config.validate(raw, ("params", "_meta", "config"))
        sid = "sess_" + uuid.uuid4().hex
        s = self._acp_ctx.sessions[sid] = Session(sid, config, raw, self._acp_ctx.machine.initial)
        s.cwd = params["cwd"]
        s.mcp_servers = params.get("mcpServers")
        return self.session_setup.opened(s, params, ctx)

    async def _rt_session_set_config_option(self, params: Any, ctx: Any) -> Any:
        return await self._acp_config.set_option(params, ctx)


def _put(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Set `value` at `path` in `doc`, creating the objects on the way."""
    for key in path[:-1]:
        doc = doc.setdefault(key, {})
    doc[path[-1]] = value


def _turn_timeout(rt: AgentRuntime) -> float | None:
    raw = os.environ.get("ACP_TURN_TIMEOUT", "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            log.warning("ACP_TURN_TIMEOUT=%r is not a number of seconds; ignored", raw[:20])
        else:
            return value if value > 0 else None
    return rt.TURN_TIMEOUT


def iter_sessions(rt: AgentRuntime) -> Iterable[Session]:
    return rt.sessions.values()


def _warm_model(llm: dict[str, Any]) -> None:
    """Start importing the model code the first turn needs (model/route.py `warm`), in a
    background thread; the model room ships with model projects only."""
    try:
        route = importlib.import_module("..model.route", __package__)
    except ImportError:
        return
    route.warm(llm)


async def close_model_clients() -> None:
    """Close the provider clients the model room keeps across turns (model/clients.py) on
    the running loop, when it was loaded: the agent is shutting down."""
    clients = sys.modules.get(importlib.util.resolve_name("..model.clients", __package__))
    if clients is not None:
        await clients.close_all()


__all__ = [
    "INVALID_PARAMS",
    "STATE_ERROR",
    "AgentRuntime",
    "InterruptDeclined",
    "ProviderRoute",
    "Session",
    "StateMachine",
    "Turn",
    "close_model_clients",
    "immediate_methods",
    "iter_sessions",
]
