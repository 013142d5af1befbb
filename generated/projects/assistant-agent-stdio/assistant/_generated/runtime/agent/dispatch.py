"""Method routing: the wire name of each request to its handler.

A method the user overrides in `handlers.py` gets a typed caller (params validated
into the protocol model, the result dumped to a wire dict); otherwise the runtime's
own `_rt_<name>` answers it on plain wire dicts; anything else is -32601.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..wire.errors import method_not_found
from ..wire.fields import model_dump as _model_dump
from ..wire.requests import RequestContext
from ..wire.revision import Method, Revision
from ..wire.routes import Router, runtime_attr


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

    @classmethod
    def manifest(cls) -> dict[str, Any]:
        """The agent's manifest, as the generator embedded it in the dispatcher."""
        return cls._acp_manifest

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

    @classmethod
    def protocol_models_of(cls, package: str) -> Any:
        """The protocol models module of the revision in `_generated/<package>` ("": the
        primary one), None when there is none: what the session layer and the wire check
        validate against."""
        return cls._protocol_models_of(package)

    def _revision_models(self) -> Any:
        return self._protocol_models_of(self.revision.package)

    def _use_revision(self, rev: Revision) -> None:
        """Serve this connection with `rev` from now on."""
        self.revision = rev
        self._methods = rev.side("agent")


class Dispatcher(RuntimeCore):
    """Routes each request and notification of a connection (a part of AgentRuntime)
    through its `Router` (routes.py)."""

    @property
    def router(self) -> Router:
        found, new = Router.of(
            self,
            "agent",
            models=self._revision_models,
            dump=_model_dump,
            default=self._runtime_handler,
        )
        if new:
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
