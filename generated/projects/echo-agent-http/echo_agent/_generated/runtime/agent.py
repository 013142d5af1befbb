"""Agent-side protocol plumbing implemented from the manifest.

`AgentRuntime` is the base of the generated `AgentBase`.  It answers every agent
method it can implement from the manifest (initialize, authenticate, `_agent/info`,
providers/*, session/new, session/set_config_option, session/prompt, session/cancel)
on plain wire dicts; a user override of the typed method in `handlers.py` takes over
(its params are validated into the protocol model first).  The user's handler is
`async def prompt(self, turn, input)`.

It composes one mixin per concern: `Dispatcher` (dispatch.py: routing, typed callers),
`Turns` (turns.py: the v1 and v2 prompt lifecycles), `Interrupts` (interrupts.py) and
`Providers` (providers.py); initialize, authentication, `_agent/info`, sessions and
config live here.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterable
from typing import Any, ClassVar

from . import agent_auth
from .commands import MODE_OPTION, SessionExtras
from .dispatch import Dispatcher, _model_dump, _need, immediate_methods
from .errors import (
    AUTH_REQUIRED,
    INVALID_PARAMS,
    RpcError,
    from_validation_error,
    invalid_params,
)
from .interrupts import InterruptDeclined, Interrupts, _camel
from .jsonrpc import Connection, log
from .providers import ProviderRoute, Providers
from .revision import Revision, revision_for
from .routes import Handler, Router
from .turns import STATE_ERROR, StateMachine, Turn, Turns


class Session:
    __slots__ = (
        "cancel_requested",
        "config",
        "config_raw",
        "cwd",
        "id",
        "mcp_servers",
        "mode",
        "state",
        "task",
        "turns",
    )

    def __init__(self, sid: str, config: Any, config_raw: dict[str, Any], state: str) -> None:
        self.id = sid
        self.config = config
        self.config_raw = config_raw
        self.state = state
        self.task: asyncio.Task[Any] | None = None
        self.cancel_requested = False
        self.turns = 0
        self.cwd: str | None = None
        self.mcp_servers: Any = None  # as the client sent them (Turn.mcp_servers types them)
        self.mode: str | None = None  # the current mode's id, when the manifest has modes


class AgentRuntime(Dispatcher, Turns, Interrupts, Providers, SessionExtras):
    """Runtime defaults for every agent method the manifest describes."""

    # seconds one prompt turn may take (handler, streaming and interrupts); None: no limit.
    # The environment variable ACP_TURN_TIMEOUT overrides it, a constructor argument both.
    TURN_TIMEOUT: ClassVar[float | None] = None

    def __init__(self, *, turn_timeout: float | None = None) -> None:
        self.turn_timeout = turn_timeout if turn_timeout is not None else _turn_timeout(self)
        self.connection: Connection | None = None
        self.sessions: dict[str, Session] = {}
        self.client_capabilities: dict[str, Any] = {}
        m = self._acp_manifest
        self._machine = StateMachine(m.get("states"))
        self._init_providers(m)
        self._login_methods = agent_auth.manifest_methods(m)
        self._authenticated = False
        self._mm: Any = None
        # the generated AgentBase sets REVISIONS; a bare runtime answers nothing (-32601)
        self._methods = {}
        self._dispatch_cache = {}
        if self.REVISIONS:
            self._use_revision(self.REVISIONS[-1])

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
        self.connection = conn

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
        if self._providers and names.providers:
            caps[names.providers] = True if names.providers_is_flag else {}
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
        version = _need(params, "protocolVersion", int)
        rev = self._negotiate(version)
        self._use_revision(rev)
        shape = rev.init
        if rev.protocol_version == version and shape.request_info_required:
            # the request is in this revision's shape: check what it requires
            _need(params, shape.request_info, dict)
        # in another revision's body, a client that also speaks ours declares its
        # capabilities under our field name as well (runtime.client.negotiate)
        caps = params.get(shape.request_capabilities)
        self.client_capabilities = caps if type(caps) is dict else {}
        result: dict[str, Any] = {"protocolVersion": rev.protocol_version}
        result[shape.response_info] = self._info()
        result[shape.response_capabilities] = self._capabilities()
        if shape.auth_methods:
            result[shape.auth_methods] = self._auth_methods()
        return result

    async def _rt_authenticate(self, params: Any, ctx: Any) -> Any:
        mid = _need(params, "methodId", str)
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
        router.wrap("session/new", self._login_first)

    def _login_first(self, handler: Handler) -> Handler:
        """session/new needs a login when the manifest has stdio auth methods."""

        async def new_session(params: Any, ctx: Any) -> Any:
            if self._login_methods and not self._authenticated:
                if not await self.is_authenticated():
                    raise RpcError(
                        AUTH_REQUIRED,
                        "authentication required: log in with one of the auth methods "
                        "`initialize` lists",
                    )
                self._authenticated = True
            return await handler(params, ctx)

        return new_session

    async def _rt_agent_info(self, params: Any, ctx: Any) -> Any:
        """`_agent/info`: identity, links, capabilities and the manifest's schemas."""
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
            "configOptions": self._config_options({}),
            "states": m.get("states"),
        }
        return info

    # ---- sessions and config -------------------------------------------------------
    def _validate_config(self, raw: dict[str, Any], loc: tuple[Any, ...]) -> Any:
        cls = self._mclass("Config") if self._acp_manifest.get("config") else None
        if cls is None:
            self._check_options(raw, loc)
            return raw
        try:
            return cls.model_validate(raw)
        except Exception as exc:
            if hasattr(exc, "errors"):
                raise from_validation_error(exc, loc) from None
            raise

    def _check_options(self, raw: dict[str, Any], loc: tuple[Any, ...]) -> None:
        """Without a Config model: check option values against the manifest's options."""
        types: dict[str, tuple[type, ...]] = {
            "boolean": (bool,),
            "string": (str,),
            "integer": (int,),
            "number": (int, float),
        }
        errs: list[dict[str, Any]] = []
        for opt in (self._acp_manifest.get("config") or {}).get("options") or ():
            if opt["id"] not in raw:
                continue
            val = raw[opt["id"]]
            want = types.get(str(opt.get("type")))
            bad_bool = isinstance(val, bool) and opt.get("type") in ("integer", "number")
            where = [*loc, opt["id"]] if loc[-1:] != ("value",) else list(loc)
            if want is not None and (not isinstance(val, want) or bad_bool):
                errs.append(
                    {"loc": where, "msg": f"expected {opt.get('type')}", "type": "type_error"}
                )
            elif opt.get("values") and val not in opt["values"]:
                errs.append({"loc": where, "msg": "not one of the allowed values", "type": "enum"})
        if errs:
            raise invalid_params(
                "; ".join(".".join(map(str, e["loc"])) + ": " + e["msg"] for e in errs), errs
            )

    def _config_defaults(self) -> dict[str, Any]:
        cfg = self._acp_manifest.get("config") or {}
        out: dict[str, Any] = {}
        for opt in cfg.get("options") or ():
            if "default" in opt and opt["default"] is not None:
                out[opt["id"]] = opt["default"]
        return out

    def _config_options(self, raw: dict[str, Any]) -> list[dict[str, Any]]:
        cfg = self._acp_manifest.get("config") or {}
        v2 = self.revision.turn.lifecycle == "v2"  # the v2 schema has the open "other" kind
        out = []
        shape = self.revision.config_option
        for opt in cfg.get("options") or ():
            cur = raw.get(opt["id"], opt.get("default"))
            base: dict[str, Any] = {shape.id: opt["id"], "name": opt.get("name") or opt["id"]}
            if opt.get("description"):
                base["description"] = opt["description"]
            if opt.get("category") and self.revision.authoring.config_category:
                base["category"] = opt["category"]
            if opt.get("type") == "boolean" and "boolean" in shape.kinds:
                out.append({**base, "type": "boolean", shape.current_value: bool(cur)})
            elif opt.get("type") == "boolean":
                # a revision without boolean options (the legacy one): a select of two
                # values; session/set_config_option takes "true" / "false" for it
                out.append(
                    {
                        **base,
                        "type": "select",
                        shape.current_value: "true" if cur else "false",
                        shape.select_options: [
                            {"value": "true", "name": "on"},
                            {"value": "false", "name": "off"},
                        ],
                    }
                )
            elif (
                v2 and not opt.get("values") and opt.get("type") in ("string", "integer", "number")
            ):
                # v2 carries implementation-specific kinds ("_" + name, the "other" variant);
                # v1 has select and boolean only: there such an option is set through
                # session/new `_meta.config` or session/set_config_option, not listed
                out.append({**base, "type": "_" + opt["type"], shape.current_value: cur})
            elif opt.get("values"):
                vals = [str(v) for v in opt["values"]]
                out.append(
                    {
                        **base,
                        "type": "select",
                        shape.current_value: str(cur) if cur is not None else vals[0],
                        shape.select_options: [{"value": v, "name": v} for v in vals],
                    }
                )
        return out

    def _session(self, params: Any) -> Session:
        sid = _need(params, "sessionId", str)
        s = self.sessions.get(sid)
        if s is None:
            raise invalid_params(
                f"unknown session {sid!r}",
                [{"loc": ["params", "sessionId"], "msg": "unknown session"}],
            )
        return s

    async def _rt_session_new(self, params: Any, ctx: Any) -> Any:
        _need(params, "cwd", str)
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
        raw = {**self._config_defaults(), **(given or {})}
        config = self._validate_config(raw, ("params", "_meta", "config"))
        sid = "sess_" + uuid.uuid4().hex
        s = self.sessions[sid] = Session(sid, config, raw, self._machine.initial)
        s.cwd = params["cwd"]
        s.mcp_servers = params.get("mcpServers")
        result: dict[str, Any] = {"sessionId": sid}
        opts = self._config_options(raw)
        if opts:
            result["configOptions"] = opts
        self._session_opened(s, params, result, ctx)
        return result

    async def _rt_session_set_config_option(self, params: Any, ctx: Any) -> Any:
        s = self._session(params)
        cid = _need(params, "configId", str)
        if "value" not in params:
            raise invalid_params(
                "params.value: field required",
                [{"loc": ["params", "value"], "msg": "field required"}],
            )
        if cid == MODE_OPTION and self._mode_as_option():
            s.mode = self._check_mode(params["value"], ("params", "value"))
            result = {"configOptions": self._config_options(s.config_raw)}
            self._with_modes(s, result, opened=False)
            return result
        opt = next(
            (
                o
                for o in (self._acp_manifest.get("config") or {}).get("options") or ()
                if o["id"] == cid
            ),
            None,
        )
        if opt is None:
            raise invalid_params(
                f"unknown config option {cid!r}",
                [{"loc": ["params", "configId"], "msg": "unknown config option"}],
            )
        value = params["value"]
        if opt.get("type") == "boolean" and value in ("true", "false"):
            value = value == "true"  # served as a select where the revision has no boolean
        if opt.get("values"):
            match = [v for v in opt["values"] if str(v) == str(value)]
            if not match:
                raise invalid_params(
                    f"value not allowed for {cid!r}",
                    [{"loc": ["params", "value"], "msg": "not one of the allowed values"}],
                )
            value = match[0]
        self._transition(s, "client", "set_config")
        raw = {**s.config_raw, cid: value}
        s.config = self._validate_config(raw, ("params", "value"))
        s.config_raw = raw
        result = {"configOptions": self._config_options(raw)}
        self._with_modes(s, result, opened=False)
        return result


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


__all__ = [
    "INVALID_PARAMS",
    "STATE_ERROR",
    "AgentRuntime",
    "InterruptDeclined",
    "ProviderRoute",
    "Session",
    "StateMachine",
    "Turn",
    "_camel",
    "_model_dump",
    "immediate_methods",
    "iter_sessions",
]
