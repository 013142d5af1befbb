"""Agent-side protocol plumbing implemented from the manifest.

`AgentRuntime` is the base of the generated `AgentBase`.  It answers every agent
method it can implement from the manifest (initialize, authenticate, `_agent/info`,
providers/*, session/new, session/set_config_option, session/prompt, session/cancel)
on plain wire dicts; a user override of the typed method in `handlers.py` takes over
(its params are validated into the protocol model first).  The user's handler is
`async def prompt(self, turn, input)`.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterable
from typing import Any, ClassVar

import orjson

from .errors import (
    INVALID_PARAMS,
    RpcError,
    from_validation_error,
    invalid_params,
    method_not_found,
)
from .jsonrpc import Connection, RequestContext, log
from .masking import mask_url, register_route_secrets, url_secrets

STATE_ERROR = -32002

_dumps = orjson.dumps


def _need(params: Any, key: str, typ: type | tuple[type, ...], where: str = "params") -> Any:
    if type(params) is not dict:
        raise invalid_params(
            f"{where} must be an object", [{"loc": [where], "msg": "expected an object"}]
        )
    if key not in params:
        raise invalid_params(
            f"{where}.{key}: field required", [{"loc": [where, key], "msg": "field required"}]
        )
    val = params[key]
    if not isinstance(val, typ) or isinstance(val, bool) and typ is int:
        name = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise invalid_params(
            f"{where}.{key}: expected {name}",
            [{"loc": [where, key], "msg": f"expected {name}"}],
        )
    return val


class ProviderRoute:
    """The current routing of one LLM provider (headers never shown in repr)."""

    __slots__ = ("api_type", "base_url", "headers", "provider_id")

    def __init__(self, provider_id: str, api_type: str, base_url: str, headers: dict[str, str]):
        self.provider_id = provider_id
        self.api_type = api_type
        self.base_url = base_url
        self.headers = headers

    def __repr__(self) -> str:
        return (
            f"ProviderRoute({self.provider_id!r}, api_type={self.api_type!r}, "
            f"base_url={mask_url(self.base_url)!r}, headers=<{len(self.headers)} hidden>)"
        )


class InterruptDeclined(Exception):
    """The client declined or cancelled an interrupt; the turn ends as cancelled."""

    def __init__(self, name: str, action: str) -> None:
        super().__init__(f"interrupt {name!r} was answered with {action!r}")
        self.interrupt = name
        self.action = action


class StateMachine:
    """The manifest's conversation states; types it never mentions are unrestricted."""

    def __init__(self, spec: dict[str, Any] | None) -> None:
        spec = spec or {
            "initial": "idle",
            "states": {
                "idle": [{"party": "client", "type": "user_message", "next": "running"}],
                "running": [
                    {"party": "agent", "type": "agent_message", "next": "idle"},
                    {"party": "client", "type": "cancel", "next": "idle"},
                    {"party": "agent", "type": "interrupt", "next": "running"},
                    {"party": "client", "type": "resume", "next": "running"},
                ],
            },
        }
        self.initial: str = spec.get("initial") or "idle"
        self.rules: dict[str, list[dict[str, Any]]] = dict(spec.get("states") or {})
        self.known = {
            (r.get("party"), r.get("type")) for rules in self.rules.values() for r in rules
        }

    def allowed(self, state: str) -> list[str]:
        return [f"{r.get('party')} {r.get('type')}" for r in self.rules.get(state, [])]

    def step(self, state: str, party: str, mtype: str) -> str | None:
        """The next state, or None when the message is not allowed in `state`."""
        for r in self.rules.get(state, ()):
            if r.get("party") == party and r.get("type") == mtype:
                return str(r.get("next") or state)
        if (party, mtype) not in self.known:
            return state
        return None


class Session:
    __slots__ = ("cancel_requested", "config", "config_raw", "id", "state", "task", "turns")

    def __init__(self, sid: str, config: Any, config_raw: dict[str, Any], state: str) -> None:
        self.id = sid
        self.config = config
        self.config_raw = config_raw
        self.state = state
        self.task: asyncio.Task[Any] | None = None
        self.cancel_requested = False
        self.turns = 0


class Turn:
    """One prompt turn: what the handler uses to stream, interrupt and read config."""

    __slots__ = (
        "_conn",
        "_prefix",
        "_rt",
        "message_id",
        "session",
        "started",
        "stop_reason",
        "usage",
    )

    def __init__(self, rt: AgentRuntime, conn: Connection, session: Session) -> None:
        self._rt = rt
        self._conn = conn
        self.session = session
        self._prefix = (
            b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":'
            + _dumps(session.id)
            + b',"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":'
        )
        self.stop_reason = "end_turn"
        self.started = False  # (v2) the background turn task began
        self.message_id: str | None = None
        self.usage: dict[str, Any] | None = None

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def config(self) -> Any:
        return self.session.config

    @property
    def cancelled(self) -> bool:
        return self.session.cancel_requested

    def provider(self, provider_id: str) -> ProviderRoute | None:
        return self._rt._provider_route(provider_id)

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
        data = self._rt._dump_output(output)
        await self.send_update(
            {
                "sessionUpdate": "agent_message_chunk",
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
        """Pause for the client (`elicitation/create`); returns the typed resume."""
        return await self._rt._interrupt(self, name, payload)


def _model_dump(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        return dump(by_alias=True, exclude_none=True, mode="json")
    return obj


class AgentRuntime:
    """Runtime defaults for every agent method the manifest describes."""

    # set by the generated dispatcher
    METHODS: ClassVar[dict[str, tuple[str, str, str | None, str | None]]] = {}
    PROFILE: ClassVar[dict[str, Any]] = {}
    _acp_manifest: ClassVar[dict[str, Any]] = {}

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
        self._providers: dict[str, dict[str, Any]] = {}
        self._routes: dict[str, ProviderRoute | None] = {}
        for p in m.get("providers") or ():
            self._providers[p["id"]] = p
            d = p.get("default")
            self._routes[p["id"]] = (
                ProviderRoute(p["id"], d["api_type"], d["base_url"], {}) if d else None
            )
        self._mm: Any = None
        self._dispatch_cache: dict[str, Any] = {}

    # ---- the user's API ----------------------------------------------------------
    async def prompt(self, turn: Turn, input: Any) -> Any:
        """Handle one prompt. Override in handlers.py."""
        raise RpcError(-32603, "the agent has no prompt handler (override `prompt` in handlers.py)")

    # ---- generated-code hooks ----------------------------------------------------
    @classmethod
    def _manifest_models(cls) -> Any:
        return None

    @classmethod
    def _protocol_models(cls) -> Any:
        return None

    def _models(self) -> Any:
        if self._mm is None:
            self._mm = self._manifest_models() or False
        return self._mm or None

    def _mclass(self, name: str) -> Any:
        mm = self._models()
        return getattr(mm, name, None) if mm is not None else None

    # ---- connection plumbing -----------------------------------------------------
    def attach(self, conn: Connection) -> None:
        self.connection = conn

    async def handle_request(self, method: str, params: Any, ctx: RequestContext) -> Any:
        fn = self._dispatch_cache.get(method)
        if fn is None:
            fn = self._resolve(method)
            self._dispatch_cache[method] = fn
        return await fn(params, ctx)

    async def handle_notification(self, method: str, params: Any) -> None:
        fn = self._dispatch_cache.get(method)
        if fn is None:
            fn = self._resolve(method)
            self._dispatch_cache[method] = fn
        await fn(params, None)

    def _resolve(self, method: str) -> Any:
        entry = self.METHODS.get(method)
        attr = entry[0] if entry else None
        if entry is not None and attr is not None and self._overridden(attr):
            return self._typed_caller(method, attr, entry)
        rt = getattr(self, "_rt_" + method.replace("/", "_").replace("$", "").lstrip("_"), None)
        # an extension name (`_agent/info`) is not an alias of a protocol method (`_initialize`)
        alias = method.startswith("_") and method.lstrip("_") in self.METHODS
        if rt is not None and (entry is not None or (method.startswith("_") and not alias)):
            return rt

        async def missing(params: Any, ctx: Any) -> Any:
            raise method_not_found(method)

        return missing

    def _overridden(self, attr: str) -> bool:
        impl = getattr(type(self), attr, None)
        if impl is None:
            return False
        for klass in type(self).__mro__:
            if "_acp_generated_base" in klass.__dict__:
                return klass.__dict__.get(attr) is not impl
        return True

    def _typed_caller(self, method: str, attr: str, entry: tuple[Any, ...]) -> Any:
        bound = getattr(self, attr)
        params_cls_name = entry[2]

        async def call(params: Any, ctx: Any) -> Any:
            pm = self._protocol_models()
            pcls = getattr(pm, params_cls_name, None) if pm and params_cls_name else None
            if pcls is not None:
                try:
                    typed = pcls.model_validate(params if params is not None else {})
                except Exception as exc:
                    if hasattr(exc, "errors"):
                        raise from_validation_error(exc, ("params",)) from None
                    raise
            else:
                typed = params
            result = await bound(typed)
            return (
                _model_dump(result)
                if result is not None
                else ({} if entry[1] == "request" else None)
            )

        return call

    async def _default(self, method: str, params: Any) -> Any:
        """What the generated typed methods call: the runtime default on wire dicts."""
        rt = getattr(self, "_rt_" + method.replace("/", "_").replace("$", "").lstrip("_"), None)
        if rt is None:
            raise method_not_found(method)
        raw = _model_dump(params) if params is not None else None
        result = await rt(raw, None)
        entry = self.METHODS.get(method)
        pm = self._protocol_models()
        rcls = getattr(pm, entry[3], None) if pm and entry and entry[3] else None
        if rcls is not None and result is not None:
            return rcls.model_validate(result)
        return result

    # ---- initialize / auth / info ----------------------------------------------------
    def _info(self) -> dict[str, Any]:
        m = self._acp_manifest
        out = {"name": m.get("name", "agent"), "version": str(m.get("version", "0"))}
        if m.get("title"):
            out["title"] = m["title"]
        return out

    def _capabilities(self) -> dict[str, Any]:
        caps: dict[str, Any] = {
            "loadSession": False,
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
        }
        if self.PROFILE.get("init_shape") == "v2":
            caps = {"promptCapabilities": caps["promptCapabilities"]}
        if self._providers and self.PROFILE.get("providers"):
            caps["providers"] = self.PROFILE.get("providers_capability", {})
        return caps

    def _auth_methods(self) -> list[dict[str, Any]]:
        out = []
        for a in self._acp_manifest.get("auth") or ():
            if a.get("type") in (None, "none"):
                continue
            entry = {"id": a["type"], "name": a["type"]}
            if a.get("env"):
                entry["description"] = f"credential from ${a['env']}"
            out.append(entry)
        return out

    async def _rt_initialize(self, params: Any, ctx: Any) -> Any:
        version = _need(params, "protocolVersion", int)
        if self.PROFILE.get("init_shape") == "v2":
            _need(params, "info", dict)
            self.client_capabilities = params.get("capabilities") or {}
        else:
            self.client_capabilities = params.get("clientCapabilities") or {}
        ours = int(self.PROFILE.get("protocol_version", 1))
        result: dict[str, Any] = {"protocolVersion": min(version, ours) if version > 0 else ours}
        if self.PROFILE.get("init_shape") == "v2":
            result["info"] = self._info()
            result["capabilities"] = self._capabilities()
        else:
            result["agentInfo"] = self._info()
            result["agentCapabilities"] = self._capabilities()
        result["authMethods"] = self._auth_methods()
        return result

    async def _rt_authenticate(self, params: Any, ctx: Any) -> Any:
        mid = _need(params, "methodId", str)
        if mid not in {a["id"] for a in self._auth_methods()}:
            raise invalid_params(
                "unknown auth method",
                [{"loc": ["params", "methodId"], "msg": "unknown auth method"}],
            )
        return {}

    async def _rt_auth_login(self, params: Any, ctx: Any) -> Any:
        return await self._rt_authenticate(params, ctx)

    async def _rt_agent_info(self, params: Any, ctx: Any) -> Any:
        """`_agent/info`: identity, links, capabilities and the manifest's schemas."""
        m = self._acp_manifest
        info: dict[str, Any] = {
            **self._info(),
            "description": m.get("description"),
            "links": m.get("links") or {},
            "protocolVersion": self.PROFILE.get("protocol_version", 1),
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

    # ---- providers --------------------------------------------------------------
    def _provider_route(self, pid: str) -> ProviderRoute | None:
        return self._routes.get(pid)

    async def _rt_providers_list(self, params: Any, ctx: Any) -> Any:
        out = []
        for pid, p in self._providers.items():
            route = self._routes.get(pid)
            out.append(
                {
                    "providerId": pid,
                    "supported": list(p.get("supported") or ()),
                    "required": bool(p.get("required")),
                    "current": {"apiType": route.api_type, "baseUrl": mask_url(route.base_url)}
                    if route
                    else None,
                }
            )
        return {"providers": out}

    async def _rt_providers_set(self, params: Any, ctx: Any) -> Any:
        pid = _need(params, "providerId", str)
        api = _need(params, "apiType", str)
        base = _need(params, "baseUrl", str)
        headers = params.get("headers") or {}
        if type(headers) is not dict or any(
            type(k) is not str or type(v) is not str for k, v in headers.items()
        ):
            raise invalid_params(
                "params.headers: expected an object of strings",
                [{"loc": ["params", "headers"], "msg": "expected an object of strings"}],
            )
        p = self._providers.get(pid)
        if p is None:
            raise invalid_params(
                f"unknown provider {pid!r}",
                [{"loc": ["params", "providerId"], "msg": "unknown provider"}],
            )
        if api not in (p.get("supported") or ()):
            raise invalid_params(
                f"provider {pid!r} does not support apiType {api!r}",
                [
                    {
                        "loc": ["params", "apiType"],
                        "msg": "unsupported apiType",
                        "supported": list(p["supported"]),
                    }
                ],
            )
        register_route_secrets(ctx, [*headers.values(), *url_secrets(base)])
        self._routes[pid] = ProviderRoute(pid, api, base, dict(headers))
        return {}

    async def _rt_providers_disable(self, params: Any, ctx: Any) -> Any:
        pid = _need(params, "providerId", str)
        p = self._providers.get(pid)
        if p is None:
            return {}
        if p.get("required"):
            raise invalid_params(
                f"provider {pid!r} is required and cannot be disabled",
                [{"loc": ["params", "providerId"], "msg": "required provider"}],
            )
        self._routes[pid] = None
        return {}

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
        out = []
        for opt in cfg.get("options") or ():
            cur = raw.get(opt["id"], opt.get("default"))
            base: dict[str, Any] = {"id": opt["id"], "name": opt.get("name") or opt["id"]}
            if opt.get("description"):
                base["description"] = opt["description"]
            if opt.get("type") == "boolean":
                out.append({**base, "type": "boolean", "currentValue": bool(cur)})
            elif opt.get("values"):
                vals = [str(v) for v in opt["values"]]
                out.append(
                    {
                        **base,
                        "type": "select",
                        "currentValue": str(cur) if cur is not None else vals[0],
                        "options": [{"value": v, "name": v} for v in vals],
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
        self.sessions[sid] = Session(sid, config, raw, self._machine.initial)
        result: dict[str, Any] = {"sessionId": sid}
        opts = self._config_options(raw)
        if opts:
            result["configOptions"] = opts
        return result

    async def _rt_session_set_config_option(self, params: Any, ctx: Any) -> Any:
        s = self._session(params)
        cid = _need(params, "configId", str)
        if "value" not in params:
            raise invalid_params(
                "params.value: field required",
                [{"loc": ["params", "value"], "msg": "field required"}],
            )
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
        return {"configOptions": self._config_options(raw)}

    def _transition(self, s: Session, party: str, mtype: str) -> None:
        nxt = self._machine.step(s.state, party, mtype)
        if nxt is None:
            if party == "client":
                allowed = self._machine.allowed(s.state)
                raise RpcError(
                    STATE_ERROR,
                    f"{party} {mtype} is not allowed in state {s.state!r}; allowed: {', '.join(allowed) or 'nothing'}",
                    {"state": s.state, "message": f"{party} {mtype}", "allowed": allowed},
                )
            log.warning(
                "agent %s in state %s does not follow the manifest's states", mtype, s.state
            )
            return
        s.state = nxt

    # ---- prompt ---------------------------------------------------------------------
    def _parse_input(self, prompt: list[Any]) -> Any:
        for i, b in enumerate(prompt):
            if type(b) is not dict or type(b.get("type")) is not str:
                raise invalid_params(
                    f"params.prompt[{i}]: expected a content block",
                    [
                        {
                            "loc": ["params", "prompt", i],
                            "msg": "expected a content block with a type",
                        }
                    ],
                )
        if not self._acp_manifest.get("input"):
            return prompt
        doc: Any = None
        found = False
        for b in prompt:
            if b["type"] == "resource":
                res = b.get("resource") or {}
                if res.get("mimeType") == "application/json" and type(res.get("text")) is str:
                    doc, found = res["text"], True
                    break
        if not found:
            texts = [
                b.get("text") for b in prompt if b["type"] == "text" and type(b.get("text")) is str
            ]
            doc = "".join(texts)
        try:
            data = orjson.loads(doc) if doc else None
        except orjson.JSONDecodeError:
            raise invalid_params(
                "the prompt must carry the input as JSON",
                [{"loc": ["params", "prompt"], "msg": "input is not valid JSON"}],
            ) from None
        if data is None:
            raise invalid_params(
                "the prompt carries no input",
                [{"loc": ["params", "prompt"], "msg": "no JSON input found"}],
            )
        cls = self._mclass("Input")
        if cls is None:
            return data
        try:
            return cls.model_validate(data)
        except Exception as exc:
            if hasattr(exc, "errors"):
                raise from_validation_error(exc, ("input",)) from None
            raise

    def _dump_output(self, output: Any) -> Any:
        cls = self._mclass("Output") if self._acp_manifest.get("output") else None
        if cls is None:
            return _model_dump(output)
        try:
            obj = output if isinstance(output, cls) else cls.model_validate(_model_dump(output))
            return obj.model_dump(by_alias=True, exclude_none=True, mode="json")
        except Exception as exc:
            if hasattr(exc, "errors"):
                err = from_validation_error(exc, ("output",))
                raise RpcError(
                    -32603, "the agent's output does not match its output schema", err.data
                ) from None
            raise

    def _agent_error(self, exc: BaseException) -> RpcError | None:
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
                    "details": _model_dump(
                        getattr(exc, "details", None) or getattr(exc, "data", None)
                    ),
                },
            )
        return None

    async def _run_turn(self, s: Session, turn: Turn, input: Any) -> str:
        """Run the handler; returns the stop reason (raises RpcError on failure)."""
        limit = asyncio.timeout(self.turn_timeout)
        ended = False
        try:
            async with limit:
                out = await self.prompt(turn, input)
                if out is not None:
                    await turn.send_output(out)
            self._transition(s, "agent", "agent_message")
            ended = True
            return turn.stop_reason
        except TimeoutError as exc:
            if not limit.expired():  # the handler's own timeout: an error like any other
                log.error("prompt handler failed: %s", type(exc).__name__, exc_info=exc)
                raise RpcError(-32603, "internal error") from None
            log.warning("turn of session %s timed out after %s s", s.id, self.turn_timeout)
            s.state = self._machine.initial  # the session is free for the next prompt
            raise RpcError(
                -32603,
                f"the turn timed out after {self.turn_timeout:g} s",
                {
                    "name": "TurnTimeout",
                    "transient": True,
                    "details": {"timeout": self.turn_timeout},
                },
            ) from None
        except asyncio.CancelledError:
            if s.cancel_requested:
                return "cancelled"
            raise
        except InterruptDeclined:
            return "cancelled"
        except Exception as exc:  # noqa: BLE001 - user code: mapped to a JSON-RPC error below
            err = self._agent_error(exc)
            if err is None:
                log.error("prompt handler failed: %s", type(exc).__name__, exc_info=exc)
                err = RpcError(-32603, "internal error")
            raise err from None
        finally:
            # A turn that did not end with the agent's message (cancelled, declined
            # interrupt, error) leaves the session ready for the next prompt.
            if not ended and s.state != self._machine.initial:
                s.state = self._machine.initial
            s.task = None

    async def _rt_session_prompt(self, params: Any, ctx: Any) -> Any:
        s = self._session(params)
        prompt = _need(params, "prompt", list)
        input = self._parse_input(prompt)
        self._transition(s, "client", "user_message")
        s.cancel_requested = False
        s.turns += 1
        conn = self.connection
        assert conn is not None
        turn = Turn(self, conn, s)
        if self.PROFILE.get("lifecycle") == "v2":
            turn.message_id = (
                params.get("messageId") if type(params.get("messageId")) is str else None
            ) or str(uuid.uuid4())
            task = asyncio.get_running_loop().create_task(self._v2_turn(s, turn, input, prompt))
            task.add_done_callback(lambda t: self._v2_never_ran(s, turn, prompt))
            s.task = task
            return {}
        s.task = asyncio.current_task()
        try:
            reason = await self._run_turn(s, turn, input)
        except (RpcError, asyncio.CancelledError):  # failed, or `$/cancel_request`
            self._reset_state(s)
            raise
        result: dict[str, Any] = {"stopReason": reason}
        if turn.usage:
            result["usage"] = turn.usage
        return result

    def _reset_state(self, s: Session) -> None:
        s.state = self._machine.initial

    def _v2_update(self, s: Session, update: dict[str, Any]) -> None:
        conn = self.connection
        assert conn is not None
        conn.notify("session/update", {"sessionId": s.id, "update": update})

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

    async def _v2_turn(self, s: Session, turn: Turn, input: Any, prompt: list[Any]) -> None:
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
            idle["stopReason"] = await self._run_turn(s, turn, input)
            if turn.usage:
                idle["usage"] = turn.usage
        except RpcError as err:
            self._reset_state(s)
            idle["stopReason"] = "end_turn"
            idle["_meta"] = {"error": err.to_wire()}
        except asyncio.CancelledError:
            idle["stopReason"] = "cancelled"
        self._v2_update(s, idle)

    async def _rt_session_cancel(self, params: Any, ctx: Any) -> None:
        if type(params) is not dict or type(params.get("sessionId")) is not str:
            return
        s = self.sessions.get(params["sessionId"])
        if s is None or s.task is None:
            return
        nxt = self._machine.step(s.state, "client", "cancel")
        if nxt is None:
            log.warning("cancel not allowed in state %s; ignored", s.state)
            return
        s.state = nxt
        s.cancel_requested = True
        s.task.cancel()

    # ---- interrupts ------------------------------------------------------------------
    async def _interrupt(self, turn: Turn, name: str, payload: Any) -> Any:
        spec = next(
            (i for i in self._acp_manifest.get("interrupts") or () if i["name"] == name), None
        )
        if spec is None:
            raise ValueError(f"the manifest declares no interrupt named {name!r}")
        conn = self.connection
        assert conn is not None
        s = turn.session
        self._transition(s, "agent", "interrupt")
        resume_schema = (spec.get("resume") or {}).get("schema") or {
            "type": "object",
            "properties": {},
        }
        if self.PROFILE.get("elicitation", True):
            req = {
                "sessionId": s.id,
                "mode": "form",
                "message": spec.get("description") or name,
                "requestedSchema": resume_schema,
                "_meta": {"interrupt": name, "payload": _model_dump(payload)},
            }
            answer = await conn.request("elicitation/create", req)
            action = answer.get("action") if type(answer) is dict else None
            content = (answer.get("content") if type(answer) is dict else None) or {}
        else:
            action, content = await self._permission_interrupt(turn, name, spec, payload)
        if action != "accept":
            raise InterruptDeclined(name, str(action))
        self._transition(s, "client", "resume")
        cls = self._mclass(_camel(name) + "Resume")
        if cls is None:
            return content
        try:
            return cls.model_validate(content)
        except Exception as exc:
            if hasattr(exc, "errors"):
                raise from_validation_error(exc, ("resume", name)) from None
            raise

    async def _permission_interrupt(
        self, turn: Turn, name: str, spec: dict[str, Any], payload: Any
    ) -> tuple[str, dict[str, Any]]:
        """An interrupt on a revision without `elicitation/create`: its equivalent is
        `session/request_permission` (approve / decline). The answer is one bit, so
        approving sets the resume schema's required boolean fields to true; a resume
        schema that needs more than that is answered by the resume model's validation
        error (declare such interrupts on a revision with elicitation)."""
        conn = self.connection
        assert conn is not None
        req = {
            "sessionId": turn.session.id,
            "toolCall": {
                "toolCallId": f"interrupt-{name}-{uuid.uuid4().hex[:12]}",
                "title": spec.get("description") or name,
                "rawInput": _model_dump(payload),
            },
            "options": [
                {"optionId": "accept", "name": "Approve", "kind": "allow_once"},
                {"optionId": "decline", "name": "Decline", "kind": "reject_once"},
            ],
            "_meta": {"interrupt": name},
        }
        answer = await conn.request("session/request_permission", req)
        outcome = answer.get("outcome") if type(answer) is dict else None
        chosen = outcome.get("optionId") if type(outcome) is dict else None
        if chosen != "accept":
            return str(chosen or "cancel"), {}
        schema = (spec.get("resume") or {}).get("schema") or {}
        props = schema.get("properties") or {}
        content = {
            key: True
            for key in schema.get("required") or ()
            if type(props.get(key)) is dict and props[key].get("type") == "boolean"
        }
        return "accept", content


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


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.replace("-", "_").split("_") if p)


def immediate_methods() -> frozenset[str]:
    return frozenset({"session/cancel"})


def iter_sessions(rt: AgentRuntime) -> Iterable[Session]:
    return rt.sessions.values()


__all__ = [
    "INVALID_PARAMS",
    "AgentRuntime",
    "InterruptDeclined",
    "ProviderRoute",
    "Session",
    "StateMachine",
    "Turn",
]
