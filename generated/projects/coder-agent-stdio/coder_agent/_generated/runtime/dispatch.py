"""Method routing: the wire name of each request to its handler.

A method the user overrides in `handlers.py` gets a typed caller (params validated
into the protocol model, the result dumped to a wire dict); otherwise the runtime's
own `_rt_<name>` answers it on plain wire dicts; anything else is -32601.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from .errors import invalid_params, method_not_found
from .jsonrpc import Connection, RequestContext
from .revision import Method, Revision
from .routes import Router, runtime_attr

if TYPE_CHECKING:
    from .agent import Session
    from .turns import StateMachine, Turn


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
    if not isinstance(val, typ) or (isinstance(val, bool) and typ is int):
        name = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise invalid_params(
            f"{where}.{key}: expected {name}",
            [{"loc": [where, key], "msg": f"expected {name}"}],
        )
    return val


def _model_dump(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        return dump(by_alias=True, exclude_none=True, mode="json")
    return obj


class RuntimeCore:
    """What every part of AgentRuntime shares: the data the generated dispatcher sets,
    the connection, the sessions, and the generated models."""

    # set by the generated dispatcher: the revisions this agent serves, oldest first
    # (one `Revision` per `--schema`), and the primary revision's agent-side methods
    REVISIONS: ClassVar[tuple[Revision, ...]] = ()
    METHODS: ClassVar[dict[str, Method]] = {}
    _acp_manifest: ClassVar[dict[str, Any]] = {}

    # the revision this connection speaks: the latest until `initialize` negotiates
    revision: Revision
    _methods: dict[str, Method]

    connection: Connection | None
    sessions: dict[str, Session]
    client_capabilities: dict[str, Any]
    turn_timeout: float | None
    _machine: StateMachine
    _mm: Any
    _dispatch_cache: dict[str, Any]

    @classmethod
    def _manifest_models(cls) -> Any:
        return None

    @classmethod
    def _protocol_models(cls) -> Any:
        return None

    @classmethod
    def _protocol_models_of(cls, package: str) -> Any:
        """The protocol models of the revision in `_generated/<package>` ("": the only one)."""
        return cls._protocol_models() if not package else None

    def _revision_models(self) -> Any:
        return self._protocol_models_of(self.revision.package)

    def _use_revision(self, rev: Revision) -> None:
        """Serve this connection with `rev` from now on."""
        self.revision = rev
        self._methods = rev.side("agent")
        self._dispatch_cache = {}

    def _models(self) -> Any:
        if self._mm is None:
            self._mm = self._manifest_models() or False
        return self._mm or None

    def _mclass(self, name: str) -> Any:
        mm = self._models()
        return getattr(mm, name, None) if mm is not None else None

    if TYPE_CHECKING:  # implemented by AgentRuntime and its parts

        async def prompt(self, turn: Turn, input: Any) -> Any: ...

        def _session(self, params: Any) -> Session: ...

        def _transition(self, s: Session, party: str, mtype: str) -> None: ...


class Dispatcher(RuntimeCore):
    """Routes each request and notification of a connection (a part of AgentRuntime)
    through its `Router` (routes.py)."""

    @property
    def router(self) -> Router:
        found: Router | None = self.__dict__.get("_router")
        if found is None:
            found = self.__dict__["_router"] = Router(
                self,
                "agent",
                models=self._revision_models,
                dump=_model_dump,
                default=self._runtime_handler,
            )
            found.use(self._methods)
            self._register_routes(found)
        return found

    def _register_routes(self, router: Router) -> None:
        """Wrap or provide routes of this runtime (AgentRuntime: the login check)."""

    def _use_revision(self, rev: Revision) -> None:
        super()._use_revision(rev)
        self.router.use(self._methods)

    async def handle_request(self, method: str, params: Any, ctx: RequestContext) -> Any:
        return await self.router.request(method, params, ctx)

    async def handle_notification(self, method: str, params: Any) -> None:
        await self.router.notification(method, params)

    def _runtime_handler(self, method: str, entry: Method | None) -> Any:
        """The runtime's own `_rt_<name>` for a method of the table, or an extension."""
        rt = getattr(self, runtime_attr(method), None)
        # an extension name (`_agent/info`) is not an alias of a protocol method (`_initialize`)
        alias = method.startswith("_") and method.lstrip("_") in self._methods
        if rt is not None and (entry is not None or (method.startswith("_") and not alias)):
            return rt
        return None

    async def _default(self, method: str, params: Any) -> Any:
        """What the generated typed methods call: the runtime default on wire dicts."""
        rt = getattr(self, runtime_attr(method), None)
        if rt is None:
            raise method_not_found(method)
        raw = _model_dump(params) if params is not None else None
        result = await rt(raw, None)
        entry = self._methods.get(method)
        pm = self._revision_models()
        rcls = getattr(pm, entry.result, None) if pm and entry and entry.result else None
        if rcls is not None and result is not None:
            return rcls.model_validate(result)
        return result


def immediate_methods() -> frozenset[str]:
    return frozenset({"session/cancel"})
