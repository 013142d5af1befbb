"""The route table: one `Route` per wire method, one `Router` for the agent and the client.

A route's handler is, in order of precedence: the user's override of the typed method in
`handlers.py` (a typed caller: params validated into the protocol model, the result dumped
to a wire dict), a handler a runtime layer `provide`s (the session core's session/load),
or the runtime's own `_rt_<name>` on plain wire dicts; a method none of them answers is
-32601.  Layers `wrap` a route (the session layer's lease around session/prompt) whoever
answers it.  Scope and session effect come from the revision description (read from the
schema by the generator): transports read them instead of lists of method names.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from .errors import from_validation_error, method_not_found
from .revision import Method

Handler = Callable[[Any, Any], Awaitable[Any]]  # (params, RequestContext | None) -> result
Wrapper = Callable[[Handler], Handler]
Dump = Callable[[Any], Any]

_OVERRIDES: dict[tuple[type, str], bool] = {}


class Route(NamedTuple):
    name: str  # wire name: "session/prompt"
    side: str  # who handles it: "agent" | "client"
    kind: str  # "request" | "notification"
    handler: Handler | None  # None: nobody answers it (-32601)
    scope: str = "connection"  # "session": its params name a session
    effect: str = "none"  # on that session: "opens" | "uses" | "closes" | "none"
    served: bool = True  # answered by the runtime (not by a user override in handlers.py)


def runtime_attr(method: str) -> str:
    """The runtime's default implementation of wire method `method` (`_rt_session_new`)."""
    return "_rt_" + method.replace("/", "_").replace("$", "").lstrip("_")


def overridden(obj: Any, attr: str) -> bool:
    """Whether the class of `obj` overrides the generated base's typed method `attr`."""
    cls = type(obj)
    key = (cls, attr)
    found = _OVERRIDES.get(key)
    if found is None:
        found = _overrides(cls, attr)
        _OVERRIDES[key] = found
    return found


def _overrides(cls: type, attr: str) -> bool:
    impl = getattr(cls, attr, None)
    if impl is None:
        return False
    for klass in cls.__mro__:
        if "_acp_generated_base" in klass.__dict__:
            return klass.__dict__.get(attr) is not impl
    return True


class Router:
    """One connection's routes on one side: wire name -> `Route`, resolved on first use
    and kept until the connection's revision changes (`use`)."""

    def __init__(
        self,
        owner: Any,
        side: str,
        *,
        models: Callable[[], Any],
        dump: Dump,
        default: Callable[[str, Method | None], Handler | None],
    ) -> None:
        self.owner = owner  # whose typed methods (overrides) and `_rt_` defaults answer
        self.side = side
        self.methods: dict[str, Method] = {}
        self._models = models  # the connection's revision's protocol models module
        self._dump = dump
        self._default = default  # the runtime's own handler of a method, if any
        self._provided: dict[str, Handler] = {}
        self._wrappers: dict[str, list[Wrapper]] = {}
        self._gates: dict[str, list[Wrapper]] = {}  # outside every wrapper (a login)
        self._cache: dict[str, Route] = {}
        # checked before every request's handler runs (the session layer: session ids,
        # and the params of what the runtime serves against the revision's model)
        self.guard: Callable[[Route, Any], None] | None = None

    @classmethod
    def of(
        cls,
        owner: Any,
        side: str,
        *,
        models: Callable[[], Any],
        dump: Dump,
        default: Callable[[str, Method | None], Handler | None],
    ) -> tuple[Router, bool]:
        """`owner`'s router, made on first use and kept on it; True when just made."""
        found: Router | None = owner.__dict__.get("_router")
        if found is not None:
            return found, False
        found = owner.__dict__["_router"] = cls(
            owner, side, models=models, dump=dump, default=default
        )
        return found, True

    # ---- registration ---------------------------------------------------------------
    def use(self, methods: dict[str, Method]) -> None:
        """Serve the method table of a (newly negotiated) revision from now on."""
        self.methods = methods
        self._cache = {}

    def provide(self, name: str, handler: Handler) -> None:
        """`handler` answers `name` (a method of the revision, or an extension: `_x/y`)
        unless handlers.py overrides it: one line serves a new method."""
        self._provided[name] = handler
        self._cache.pop(name, None)

    def wrap(self, name: str, wrapper: Wrapper, *, gate: bool = False) -> None:
        """Put `wrapper` around whatever answers `name` (the latest wrapper outermost);
        a `gate` goes outside every wrapper (nothing of the request runs before it)."""
        (self._gates if gate else self._wrappers).setdefault(name, []).append(wrapper)
        self._cache.pop(name, None)

    # ---- lookup ---------------------------------------------------------------------
    def route(self, name: str) -> Route:
        found = self._cache.get(name)
        if found is None:
            found = self._cache[name] = self._resolve(name)
        return found

    def table(self) -> dict[str, Route]:
        """Every route of the revision's method table on this side."""
        return {name: self.route(name) for name in self.methods}

    def _resolve(self, name: str) -> Route:
        entry = self.methods.get(name)
        handler: Handler | None
        served = True
        if entry is not None and overridden(self.owner, entry.attr):
            handler = self._typed_caller(entry)
            served = False
        else:
            # a runtime layer serves a method of the revision's table, or an extension
            listed = entry is not None or name.startswith("_")
            provided = self._provided.get(name) if listed else None
            handler = provided or self._default(name, entry)
        if handler is not None:
            for wrapper in (*self._wrappers.get(name, ()), *self._gates.get(name, ())):
                handler = wrapper(handler)
        if entry is None:
            kind = "request"
            return Route(name, self.side, kind, handler, served=served)
        return Route(name, self.side, entry.kind, handler, entry.scope, entry.effect, served)

    def _typed_caller(self, entry: Method) -> Handler:
        bound = getattr(self.owner, entry.attr)
        params_cls_name = entry.params
        models = self._models
        dump = self._dump
        notification = entry.kind == "notification"

        async def call(params: Any, ctx: Any) -> Any:
            pm = models()
            pcls = getattr(pm, params_cls_name, None) if pm and params_cls_name else None
            if pcls is not None:
                try:
                    typed = pcls.model_validate(params if params is not None else {})
                except Exception as exc:
                    if hasattr(exc, "errors"):
                        raise from_validation_error(exc, ("params",), params) from None
                    raise
            else:
                typed = params
            result = await bound(typed)
            if notification:
                return None
            return dump(result) if result is not None else {}

        return call

    # ---- dispatch -------------------------------------------------------------------
    async def request(self, method: str, params: Any, ctx: Any) -> Any:
        route = self.route(method)
        if route.effect in ("opens", "closes") and ctx is not None:
            # the transport learns from the answer what it did (nothing, when it fails)
            ctx.effect = (route.effect, None)
        if self.guard is not None:
            self.guard(route, params)
        if route.handler is None:
            raise method_not_found(method)
        result = await route.handler(params, ctx)
        if ctx is not None and ctx.effect is not None:
            ctx.effect = (route.effect, _session_of(result, params))
        return result

    async def notification(self, method: str, params: Any) -> None:
        route = self.route(method)
        if route.handler is None:
            if route.kind == "notification" and method in self.methods:
                return  # a notification nobody takes is dropped
            raise method_not_found(method)
        await route.handler(params, None)


def _session_of(result: Any, params: Any) -> str | None:
    """The session a request opened or closed: its result's (session/new), else the one
    it names (load, resume, close)."""
    for doc in (result, params):
        sid = doc.get("sessionId") if type(doc) is dict else None
        if type(sid) is str:
            return sid
    return None


def session_scoped(route: Route | Method) -> bool:
    """A request that acts on a session open on the connection (HTTP: `Acp-Session-Id`)."""
    return route.scope == "session" and route.effect in ("uses", "closes")


__all__ = [
    "Handler",
    "Route",
    "Router",
    "Wrapper",
    "overridden",
    "runtime_attr",
    "session_scoped",
]
