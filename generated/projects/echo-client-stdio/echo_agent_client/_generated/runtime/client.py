"""Client side: dispatch the agent's calls to a `ClientBase`, call the agent.

`ClientRuntime` is the base of the generated `ClientBase`: methods the user does not
override answer -32601 (requests) or are ignored (notifications).  `AgentProxy` is
the base of the generated typed `AgentConnection` (one method per agent method).
`spawn_agent` runs an agent command as a subprocess over stdio.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from .errors import RpcError, from_validation_error, method_not_found
from .jsonrpc import DEFAULT_MAX_MESSAGE_SIZE, Connection, RequestContext
from .revision import Method, Revision, revision_for
from .stdio import read_frames


def _dump(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        return dump(by_alias=True, exclude_unset=True, mode="json")
    return obj


class ClientRuntime:
    METHODS: ClassVar[dict[str, Method]] = {}

    @classmethod
    def _protocol_models(cls) -> Any:
        return None

    @classmethod
    def _protocol_models_of(cls, package: str) -> Any:
        return cls._protocol_models() if not package else None

    def __init__(self) -> None:
        self.connection: Connection | None = None
        self.revision: Revision | None = None  # set by `negotiate`

    def _overridden(self, attr: str) -> bool:
        impl = getattr(type(self), attr, None)
        if impl is None:
            return False
        for klass in type(self).__mro__:
            if "_acp_generated_base" in klass.__dict__:
                return klass.__dict__.get(attr) is not impl
        return True

    async def _call(self, method: str, params: Any) -> Any:
        entry = (self.revision.side("client") if self.revision else self.METHODS).get(method)
        if entry is None or not self._overridden(entry.attr):
            if entry is not None and entry.kind == "notification":
                return None
            raise method_not_found(method)
        pm = self._protocol_models_of(self.revision.package if self.revision else "")
        pcls = getattr(pm, entry.params, None) if pm is not None and entry.params else None
        typed = params
        if pcls is not None:
            try:
                typed = pcls.model_validate(params if params is not None else {})
            except Exception as exc:
                if hasattr(exc, "errors"):
                    raise from_validation_error(exc, ("params",)) from None
                raise
        result = await getattr(self, entry.attr)(typed)
        if entry.kind == "notification":
            return None
        return _dump(result) if result is not None else {}

    async def handle_request(self, method: str, params: Any, ctx: RequestContext) -> Any:
        return await self._call(method, params)

    async def handle_notification(self, method: str, params: Any) -> None:
        await self._call(method, params)


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

    async def _request(self, method: str, params: Any) -> Any:
        raw = await self.connection.request(method, _dump(params))
        entry = (self.revision.side("agent") if self.revision else self.METHODS).get(method)
        pm = self._protocol_models_of(self.revision.package if self.revision else "")
        rcls = (
            getattr(pm, entry.result, None) if pm is not None and entry and entry.result else None
        )
        return rcls.model_validate(raw) if rcls is not None and raw is not None else raw

    async def _notify(self, method: str, params: Any) -> None:
        self.connection.notify(method, _dump(params))

    async def call(self, method: str, params: Any = None) -> Any:
        """Any method by wire name (extensions included), on wire dicts."""
        return await self.connection.request(method, _dump(params))


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
    agent that refuses the offer is asked again with the next older revision."""
    revisions = sorted(agent.REVISIONS, key=lambda r: r.protocol_version, reverse=True)
    if not revisions:
        raise RpcError(-32603, "this client has no protocol revision (REVISIONS is empty)")
    last: RpcError | None = None
    for offer in revisions:
        params = {
            "protocolVersion": offer.protocol_version,
            offer.init.request_capabilities: capabilities or {},
            offer.init.request_info: {"name": name, "version": version},
        }
        try:
            result = await agent.connection.request("initialize", params)
        except RpcError as err:
            last = err
            continue
        answered = result.get("protocolVersion") if type(result) is dict else None
        chosen = revision_for(revisions, answered)
        if chosen is None:
            spoken = ", ".join(str(r.protocol_version) for r in reversed(revisions))
            raise RpcError(
                -32603,
                f"the agent speaks protocol version {answered!r}; this client speaks {spoken}",
            )
        agent.revision = chosen
        if client is not None:
            client.revision = chosen
        return dict(result)
    assert last is not None
    raise last


@contextlib.asynccontextmanager
async def spawn_agent(
    client: ClientRuntime,
    proxy_cls: type[AgentProxy],
    *command: str,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    env: dict[str, str] | None = None,
) -> AsyncIterator[AgentProxy]:
    """Start `command` as an agent subprocess; yield a typed proxy to it."""
    proc = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin = proc.stdin

    async def sink(batch: list[tuple[bytes, Any]]) -> None:
        stdin.write(b"\n".join([f for f, _ in batch]) + b"\n")
        await stdin.drain()

    conn = Connection(
        sink, client.handle_request, client.handle_notification, max_message_size=max_message_size
    )
    client.connection = conn
    reader = asyncio.get_running_loop().create_task(
        read_frames(proc.stdout, conn, max_message_size)
    )
    try:
        yield proxy_cls(conn)
    finally:
        await conn.flush()
        with contextlib.suppress(Exception):
            stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        reader.cancel()
        await conn.close()
