"""A session's configuration: the manifest's `config` options, their defaults, checking
a value (into the manifest's Config model when it has one), and the `configOptions` a
revision lists (each option in the kinds the revision has); `SessionSetup`, what opening or
restoring a session takes of the agent runtime (session/new and the session layer)."""

from __future__ import annotations

from typing import Any

from ..wire.errors import from_validation_error, invalid_params
from ..wire.fields import need
from .commands import MODE_OPTION, SessionExtras
from .context import AgentContext, Session


class SessionConfig:
    """The manifest's config options for the sessions of one connection."""

    __slots__ = ("_ctx", "_extras")

    def __init__(self, ctx: AgentContext, extras: SessionExtras) -> None:
        self._ctx = ctx
        self._extras = extras  # modes are a config option where the revision has no modes

    def validate(self, raw: dict[str, Any], loc: tuple[Any, ...]) -> Any:
        cls = self._ctx.mclass("Config") if self._ctx.manifest.get("config") else None
        if cls is None:
            self.check_options(raw, loc)
            return raw
        try:
            return cls.model_validate(raw)
        except Exception as exc:
            if hasattr(exc, "errors"):
                raise from_validation_error(exc, loc) from None
            raise

    def check_options(self, raw: dict[str, Any], loc: tuple[Any, ...]) -> None:
        """Without a Config model: check option values against the manifest's options."""
        types: dict[str, tuple[type, ...]] = {
            "boolean": (bool,),
            "string": (str,),
            "integer": (int,),
            "number": (int, float),
        }
        errs: list[dict[str, Any]] = []
        for opt in (self._ctx.manifest.get("config") or {}).get("options") or ():
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

    def defaults(self) -> dict[str, Any]:
        cfg = self._ctx.manifest.get("config") or {}
        out: dict[str, Any] = {}
        for opt in cfg.get("options") or ():
            if "default" in opt and opt["default"] is not None:
                out[opt["id"]] = opt["default"]
        return out

    def options(self, raw: dict[str, Any]) -> list[dict[str, Any]]:
        cfg = self._ctx.manifest.get("config") or {}
        v2 = self._ctx.revision.turn.lifecycle == "v2"  # the v2 schema has the open "other" kind
        out = []
        shape = self._ctx.revision.config_option
        for opt in cfg.get("options") or ():
            cur = raw.get(opt["id"], opt.get("default"))
            base: dict[str, Any] = {shape.id: opt["id"], "name": opt.get("name") or opt["id"]}
            if opt.get("description"):
                base["description"] = opt["description"]
            if opt.get("category") and self._ctx.revision.authoring.config_category:
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
                names = opt.get("value_names") or {}
                out.append(
                    {
                        **base,
                        "type": "select",
                        shape.current_value: str(cur) if cur is not None else vals[0],
                        shape.select_options: [
                            {"value": v, "name": str(names.get(v) or v)} for v in vals
                        ],
                    }
                )
        return out

    async def set_option(self, params: Any, request: Any) -> Any:
        """`session/set_config_option`: check the value, set it, list the options again."""
        s = self._ctx.session(params)
        cid = need(params, "configId", str)
        if "value" not in params:
            raise invalid_params(
                "params.value: field required",
                [{"loc": ["params", "value"], "msg": "field required"}],
            )
        if cid == MODE_OPTION and self._extras.mode_as_option():
            s.mode = self._extras.check_mode(params["value"], ("params", "value"))
            result = {"configOptions": self.options(s.config_raw)}
            self._extras.with_modes(s, result, opened=False)
            return result
        opt = next(
            (
                o
                for o in (self._ctx.manifest.get("config") or {}).get("options") or ()
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
        self._ctx.transition(s, "client", "set_config")
        raw = {**s.config_raw, cid: value}
        s.config = self.validate(raw, ("params", "value"))
        s.config_raw = raw
        result = {"configOptions": self.options(raw)}
        self._extras.with_modes(s, result, opened=False)
        return result


class SessionSetup:
    """What the session layer (sessions.py) asks of the agent runtime, through its public
    `session_setup`: a session rebuilt from its stored record, and the answer of a session
    opened (session/new, load, resume)."""

    __slots__ = ("_config", "_ctx", "_extras")

    def __init__(self, ctx: AgentContext, config: SessionConfig, extras: SessionExtras) -> None:
        self._ctx = ctx
        self._config = config
        self._extras = extras

    @property
    def context(self) -> AgentContext:
        """The connection's shared state (what a connection's spans say of it: its
        revision, read as a plain attribute)."""
        return self._ctx

    def refuses_prompt(self, s: Session) -> bool:
        """The manifest declares conversation states and the session's current one
        refuses a client's message: a prompt is answered with that rule rather than
        queued behind the running turn."""
        if not self._ctx.manifest.get("states"):
            return False
        return self._ctx.machine.step(s.state, "client", "user_message") is None

    def restore(self, sid: str, saved: dict[str, Any]) -> Session:
        """The stored session `sid` (session/load, session/resume): its config checked
        against today's manifest (an error names `params.sessionId`), its state, turns and
        mode (the default mode when the manifest dropped the saved one)."""
        raw = saved.get("config_raw") or {}
        config = self._config.validate(raw, ("params", "sessionId"))
        s = Session(sid, config, raw, saved.get("state") or self._ctx.machine.initial)
        s.turns = int(saved.get("turns") or 0)
        s.mode = self._extras.saved_mode(saved.get("mode"))
        history = saved.get("model_history")
        s.model_history = history if type(history) is list else None
        return s

    def opened(
        self, s: Session, params: Any, request: Any, *, loaded: bool = False
    ) -> dict[str, Any]:
        """The answer of a session just opened: its id, config options and modes (its
        commands follow the answer of a new session, precede that of a loaded one;
        `request`: the request's context, or None)."""
        result: dict[str, Any] = {"sessionId": s.id}
        opts = self._config.options(s.config_raw)
        if opts:
            result["configOptions"] = opts
        self._extras.opened(s, params, result, request, loaded=loaded)
        return result
