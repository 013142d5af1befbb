"""Method routing: the wire name of each request to its handler.

A method the user overrides in `handlers.py` gets a typed caller (params validated
into the protocol model, the result dumped to a wire dict); otherwise the runtime's
own `_rt_<name>` answers it on plain wire dicts; anything else is -32601.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .errors import from_validation_error, method_not_found
from .jsonrpc import RequestContext
from .revision import Method, Revision
from .wire import model_dump as _model_dump


def runtime_attr(method: str) -> str:
    """The runtime's default implementation of wire method `method` (`_rt_session_new`)."""
    return "_rt_" + method.replace("/", "_").replace("$", "").lstrip("_")


class RuntimeCore:
    """What the dispatcher reads of AgentRuntime: the data the generated dispatcher sets,
    the revision the connection speaks and the generated protocol models.  (The rest the
    runtime shares, its collaborators read from its `AgentContext`, context.py.)"""

    # set by the generated dispatcher: the revisions this agent serves, oldest first
    # (one `Revision` per `--schema`), and the primary revision's agent-side methods
    REVISIONS: ClassVar[tuple[Revision, ...]] = ()
    METHODS: ClassVar[dict[str, Method]] = {}
    _acp_manifest: ClassVar[dict[str, Any]] = {}

    # the revision this connection speaks: the latest until `initialize` negotiates
    revision: Revision
    _methods: dict[str, Method]
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


class Dispatcher(RuntimeCore):
    """Routes each request and notification of a connection (a part of AgentRuntime)."""

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
        entry = self._methods.get(method)
        if entry is not None and self._overridden(entry.attr):
            return self._typed_caller(entry)
        rt = getattr(self, runtime_attr(method), None)
        # an extension name (`_agent/info`) is not an alias of a protocol method (`_initialize`)
        alias = method.startswith("_") and method.lstrip("_") in self._methods
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

    def _typed_caller(self, entry: Method) -> Any:
        bound = getattr(self, entry.attr)
        params_cls_name = entry.params

        async def call(params: Any, ctx: Any) -> Any:
            pm = self._revision_models()
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
            return (
                _model_dump(result)
                if result is not None
                else ({} if entry.kind == "request" else None)
            )

        return call

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
