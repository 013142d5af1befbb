"""The provider clients a model agent keeps across turns.

A provider SDK client (`AsyncOpenAI`, `AsyncAnthropic`) owns an HTTP connection pool: built
for every turn, each turn paid for a new TLS context (~28 ms of CPU) and a new TCP + TLS
connection to the provider (a handshake's round trips before the first token).  Here one
client is kept for everything that makes it different, and reused by the turns that agree:

- the credentials and endpoint: the API, the base URL, the headers of the client's route
  (`providers/set`), or, for a model read from the environment, the provider's variables
  (`OPENAI_*`, `ANTHROPIC_*`); only a digest of the secrets is kept in the key.  A changed
  route is another key, so another client: one route's credentials never travel on
  another's client;
- the running event loop: a connection pool belongs to the loop that opened it.

The model objects built on a client are kept with it, by model id.  The cache is small
(`ACP_MODEL_CLIENTS`, default 8 clients, least recently used first out); a client pushed
out is closed, at once when no turn is using it (`held`), else when its last turn ends.
`close_all` closes the running loop's clients (the agent's shutdown: serve.py, the HTTP
server's lifespan).  A provider failure leaves nothing broken behind: a connection that
ended (a cut stream, a server that closed it) is dropped by the pool, which opens a new
one for the next request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable
from typing import Any

from ..wire.fields import env_option

DEFAULT_SIZE = 8  # clients kept (ACP_MODEL_CLIENTS)
MODELS_A_CLIENT = 16  # model objects kept a client


class _Entry:
    __slots__ = ("client", "evicted", "loop", "models", "users")

    def __init__(self, client: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.client = client  # the provider SDK client (its `close()` closes the pool)
        self.loop = loop
        self.models: dict[Hashable, Any] = {}
        self.users = 0  # turns running on it now
        self.evicted = False

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.close()


_entries: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
_of_model: dict[int, _Entry] = {}  # id(model object) -> its client's entry


def size() -> int:
    """How many clients are kept."""
    return len(_entries)


def _bound() -> int:
    """How many clients to keep: `ACP_MODEL_CLIENTS` (at least 1), else DEFAULT_SIZE."""
    return int(env_option("ACP_MODEL_CLIENTS", DEFAULT_SIZE, minimum=1))


def digest(*parts: Any) -> str:
    """A digest of `parts` (credentials among them) for a key: the secrets themselves are
    not kept by the cache."""
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode())
        h.update(b"\0")
    return h.hexdigest()


def model(
    key: tuple[Any, ...],
    model_key: Hashable,
    make_client: Callable[[], Any],
    make_model: Callable[[Any], Any],
) -> Any:
    """The model for `model_key` on the client of `key` (made by `make_client` the first
    time on this event loop, kept; the model made by `make_model(client)`).  Outside a
    running loop nothing is kept."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return make_model(make_client())
    full = (loop, *key)
    entry = _entries.get(full)
    if entry is None:
        _forget_closed_loops()
        entry = _Entry(make_client(), loop)
        _entries[full] = entry
        _trim()
    else:
        _entries.move_to_end(full)
    found = entry.models.get(model_key)
    if found is None:
        if len(entry.models) >= MODELS_A_CLIENT:
            for old in entry.models.values():
                _of_model.pop(id(old), None)
            entry.models.clear()
        found = entry.models[model_key] = make_model(entry.client)
        _of_model[id(found)] = entry
    return found


@contextlib.asynccontextmanager
async def held(model_object: Any) -> AsyncIterator[None]:
    """A turn using `model_object`: its client is not closed under it (an eviction meanwhile
    closes it when the turn ends).  A model not from the cache: nothing to do."""
    entry = _of_model.get(id(model_object))
    if entry is None:
        yield
        return
    entry.users += 1
    try:
        yield
    finally:
        entry.users -= 1
        if entry.evicted and entry.users == 0:
            _close_soon(entry)


async def close_all() -> None:
    """Close every client of the running loop (the agent is shutting down)."""
    loop = asyncio.get_running_loop()
    for full, entry in list(_entries.items()):
        if entry.loop is loop:
            del _entries[full]
            await _close(entry)
    pending = [t for t in _closing if t.get_loop() is loop]
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


_closing: set[asyncio.Task[None]] = set()


def _trim() -> None:
    """Push the least recently used clients out above the bound; one no turn uses is
    closed now (a task on its loop), the others when their last turn ends."""
    bound = _bound()
    while len(_entries) > bound:
        _, entry = _entries.popitem(last=False)
        entry.evicted = True
        if entry.users == 0:
            _close_soon(entry)


def _close_soon(entry: _Entry) -> None:
    """Close `entry`'s client in a task of its own loop (a turn being cancelled does not
    stop it; `close_all` waits for it); from another loop's thread, through
    `call_soon_threadsafe`.  A client whose loop has closed is only forgotten."""
    if entry.loop.is_closed():
        _drop(entry)
        return
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is entry.loop:
        _start_close(entry)
    else:
        with contextlib.suppress(RuntimeError):  # closed meanwhile
            entry.loop.call_soon_threadsafe(_start_close, entry)


def _start_close(entry: _Entry) -> None:
    task = entry.loop.create_task(_close(entry))
    _closing.add(task)
    task.add_done_callback(_closing.discard)


async def _close(entry: _Entry) -> None:
    _drop(entry)
    await entry.close()


def _drop(entry: _Entry) -> None:
    for m in entry.models.values():
        _of_model.pop(id(m), None)
    entry.models.clear()


def _forget_closed_loops() -> None:
    """Clients of a loop that has closed cannot be used or closed (their connections went
    with it): forgotten."""
    for full, entry in list(_entries.items()):
        if entry.loop.is_closed():
            del _entries[full]
            _drop(entry)


__all__ = ["DEFAULT_SIZE", "close_all", "digest", "held", "model", "size"]
