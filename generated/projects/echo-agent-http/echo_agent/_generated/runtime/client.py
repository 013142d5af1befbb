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

from .errors import from_validation_error, method_not_found
from .jsonrpc import DEFAULT_MAX_MESSAGE_SIZE, Connection, RequestContext
from .stdio import read_frames


def _dump(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        return dump(by_alias=True, exclude_unset=True, mode="json")
    return obj


class ClientRuntime:
    METHODS: ClassVar[dict[str, tuple[str, str, str | None, str | None]]] = {}

    @classmethod
    def _protocol_models(cls) -> Any:
        return None

    def __init__(self) -> None:
        self.connection: Connection | None = None

    def _overridden(self, attr: str) -> bool:
        impl = getattr(type(self), attr, None)
        if impl is None:
            return False
        for klass in type(self).__mro__:
            if "_acp_generated_base" in klass.__dict__:
                return klass.__dict__.get(attr) is not impl
        return True

    async def _call(self, method: str, params: Any) -> Any:
        entry = self.METHODS.get(method)
        if entry is None or not self._overridden(entry[0]):
            if entry is not None and entry[1] == "notification":
                return None
            raise method_not_found(method)
        pm = self._protocol_models()
        pcls = getattr(pm, entry[2], None) if pm is not None and entry[2] else None
        typed = params
        if pcls is not None:
            try:
                typed = pcls.model_validate(params if params is not None else {})
            except Exception as exc:
                if hasattr(exc, "errors"):
                    raise from_validation_error(exc, ("params",)) from None
                raise
        result = await getattr(self, entry[0])(typed)
        if entry[1] == "notification":
            return None
        return _dump(result) if result is not None else {}

    async def handle_request(self, method: str, params: Any, ctx: RequestContext) -> Any:
        return await self._call(method, params)

    async def handle_notification(self, method: str, params: Any) -> None:
        await self._call(method, params)


class AgentProxy:
    """Typed calls to the agent; generated subclasses add one method per agent method."""

    METHODS: ClassVar[dict[str, tuple[str, str, str | None, str | None]]] = {}

    @classmethod
    def _protocol_models(cls) -> Any:
        return None

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    async def _request(self, method: str, params: Any) -> Any:
        raw = await self.connection.request(method, _dump(params))
        entry = self.METHODS.get(method)
        pm = self._protocol_models()
        rcls = getattr(pm, entry[3], None) if pm is not None and entry and entry[3] else None
        return rcls.model_validate(raw) if rcls is not None and raw is not None else raw

    async def _notify(self, method: str, params: Any) -> None:
        self.connection.notify(method, _dump(params))

    async def call(self, method: str, params: Any = None) -> Any:
        """Any method by wire name (extensions included), on wire dicts."""
        return await self.connection.request(method, _dump(params))


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
