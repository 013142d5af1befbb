"""Cross-replica routing for the HTTP transport on Redis (redis-py asyncio):
``ACP_REDIS_URL=redis://127.0.0.1:6379/0`` plus a replica id (``ACP_REPLICA_ID``).

An ACP connection lives on the replica that answered its ``initialize`` (its *owner*): the
runtime core, its sessions' running turns and its SSE buffers are there.  The owner sets the
affinity cookie ``acp-replica=<replica id>`` on that answer, and the load balancer routes on it
(HAProxy: ``cookie acp-replica preserve`` with ``server ... cookie <replica id>``), so the
common path never touches Redis.  When a request for the connection reaches another replica
anyway (the cookie was lost, the balancer rebalanced), that replica relays it:

* a POST or DELETE is sent to the owner on its control channel (pub/sub ``acp:ctl:<owner>``)
  and the owner's HTTP answer comes back on a reply list (``BLPOP``);
* an SSE GET asks the owner to *attach* a remote reader: the owner drains that stream (the
  same buffer, ``Last-Event-ID`` replay included) into a Redis stream ``acp:sse:<reader>``
  (``XADD``) that the relaying replica reads (``XREAD BLOCK``) and writes to its client.

Nothing is lost when affinity is: events wait in the owner's buffer until a reader takes them,
from whichever replica; events written towards a reader that vanished are resent from the
replay window when the client comes back with ``Last-Event-ID``.  Which replica owns which
connection is ``acp:conn:<connection id>``; an owner that died answers no relay within
``RELAY_TIMEOUT`` and the connection is then unknown (404), as after a restart: the client
connects again and loads its sessions from the shared store.

Timeouts: every ordinary command waits at most ``timeout`` (2 s) for Redis; the blocking
reads (``XREAD BLOCK``, ``BLPOP``) use a second client whose socket timeout is longer than
any block they ask for, so a quiet relayed stream is not mistaken for a dead socket.  While
a relayed stream is quiet the relaying replica writes ``: keepalive`` comments to its client
itself.  When Redis is unreachable, routing falls back to the owner-only path: each replica
serves the connections it owns (the common path, cookie honoured), a request for another
replica's connection is answered 404 as if unknown; one log line says so, one more when
Redis is back (the control channel is subscribed again then).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from http import HTTPStatus
from typing import Any

import orjson

from .. import observe
from ..wire.logsafe import register_secrets
from ..wire.masking import url_secrets

log = logging.getLogger("acp.runtime.redis")

RELAY_TIMEOUT = 5.0
STREAM_MAXLEN = 100_000
REDIS_TIMEOUT = 2.0  # an ordinary command's bound (connect and reply)
RESUBSCRIBE_DELAY = 1.0  # seconds between attempts to reach Redis again

# (connection id, session id or None, body) -> (status, body, content type)
PostHandler = Callable[[str, str | None, bytes], Awaitable[tuple[int, bytes, str | None]]]
DeleteHandler = Callable[[str], Awaitable[int]]
# (connection id, session id or None, last event id or None) -> event chunks, or None if unknown
StreamOpener = Callable[[str, str | None, int | None], AsyncIterator[bytes] | None]


class RedisRouter:
    def __init__(
        self, url: str, replica: str, *, keepalive: float = 15.0, timeout: float = REDIS_TIMEOUT
    ) -> None:
        from redis.asyncio import Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        self._url = url  # may hold a password: never shown
        register_secrets(url_secrets(url))  # and redacted from any log line that quotes it
        self.replica = replica
        self.keepalive = keepalive
        self.timeout = timeout
        # no retries inside redis-py: a call fails within ``timeout`` and the router falls
        # back; redis-py's own annotations are loose
        common: dict[str, Any] = {
            "socket_connect_timeout": timeout,
            "retry": Retry(NoBackoff(), 0),
        }
        self.redis: Any = Redis.from_url(url, socket_timeout=timeout, **common)
        # XREAD BLOCK / BLPOP wait up to max(keepalive, RELAY_TIMEOUT) by design: their socket
        # timeout must be longer than that (redis-py's default, 5 s, ended quiet streams)
        longest = max(keepalive, RELAY_TIMEOUT)
        self.blocking: Any = Redis.from_url(url, socket_timeout=longest + timeout, **common)
        self.reachable = True
        self._listener: asyncio.Task[None] | None = None
        self._pumps: dict[str, asyncio.Task[None]] = {}
        self.on_post: PostHandler | None = None
        self.on_delete: DeleteHandler | None = None
        self.open_stream: StreamOpener | None = None

    # ---- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        """Listen on this replica's control channel; Redis being down does not stop the
        start: the listener keeps trying, and routing is owner-only meanwhile."""
        self._listener = asyncio.get_running_loop().create_task(self._listen())

    async def close(self) -> None:
        for t in [*self._pumps.values(), *([self._listener] if self._listener else [])]:
            t.cancel()
        for t in [*self._pumps.values(), *([self._listener] if self._listener else [])]:
            with contextlib.suppress(BaseException):
                await t
        for client in (self.redis, self.blocking):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.aclose(), self.timeout)

    def _down(self, exc: BaseException) -> None:
        if self.reachable:
            self.reachable = False
            log.warning(
                "Redis unreachable (%s): cross-replica relay off, this replica serves only the "
                "connections it owns until Redis is back",
                type(exc).__name__,
            )

    def _up(self) -> None:
        if not self.reachable:
            self.reachable = True
            log.warning("Redis reachable again: cross-replica relay on")

    async def _call(self, what: Awaitable[Any], fallback: Any = None) -> Any:
        """One Redis command; ``fallback`` when Redis is unreachable (never raises, never
        waits longer than the client's timeouts)."""
        from redis.exceptions import RedisError

        try:
            got = await what
        except (RedisError, OSError, TimeoutError) as exc:
            self._down(exc)
            return fallback
        self._up()
        return got

    def status(self) -> str | None:
        """None when Redis answers, else why not (for ``/ready``'s details)."""
        return None if self.reachable else "Redis unreachable: cross-replica relay off"

    # ---- ownership --------------------------------------------------------------------
    async def claim(self, cid: str) -> None:
        if self.reachable:  # else owner-only: nobody else can reach this connection anyway
            await self._call(self.redis.set(f"acp:conn:{cid}", self.replica))

    async def forget(self, cid: str) -> None:
        if self.reachable:
            await self._call(self.redis.delete(f"acp:conn:{cid}"))

    async def owner(self, cid: str) -> str | None:
        if not self.reachable:
            return None  # owner-only path: the listener finds out when Redis is back
        raw = await self._call(self.redis.get(f"acp:conn:{cid}"))
        if raw is None:
            return None
        who = raw.decode()
        return None if who == self.replica else who

    # ---- the relaying side ------------------------------------------------------------
    async def _ask(self, owner: str, op: dict[str, Any]) -> Any:
        reply = f"acp:reply:{uuid.uuid4().hex}"
        op["reply"] = reply
        delivered = await self._call(self.redis.publish(f"acp:ctl:{owner}", orjson.dumps(op)))
        if not delivered:
            return None  # nobody listens there (the owner is gone), or Redis is
        got = await self._call(self.blocking.blpop([reply], timeout=RELAY_TIMEOUT))
        return orjson.loads(got[1]) if got is not None else None

    async def relay_post(
        self,
        owner: str,
        cid: str,
        sid: str | None,
        body: bytes,
        trace: dict[str, str] | None = None,
    ) -> tuple[int, bytes, str | None] | None:
        """The owner's answer to this POST, or None when the owner did not answer.  `trace`:
        the POST's `traceparent` and `tracestate` headers, the parent of what the owner
        serves (observe)."""
        op: dict[str, Any] = {
            "op": "post",
            "cid": cid,
            "sid": sid,
            "body": body.decode("utf-8", "replace"),
        }
        if trace:
            op["trace"] = trace
        ans = await self._ask(owner, op)
        if ans is None:
            await self._drop_owner(cid, owner)
            return None
        return int(ans["status"]), ans["body"].encode(), ans.get("type")

    async def relay_delete(self, owner: str, cid: str) -> int | None:
        ans = await self._ask(owner, {"op": "delete", "cid": cid})
        if ans is None:
            await self._drop_owner(cid, owner)
            return None
        return int(ans["status"])

    async def relay_stream(
        self, owner: str, cid: str, sid: str | None, last: int | None
    ) -> AsyncIterator[bytes] | None:
        """SSE chunks of the owner's stream, or None when the owner does not know it."""
        reader = uuid.uuid4().hex
        key = f"acp:sse:{reader}"
        alive = f"acp:rd:{reader}"
        if not await self._call(self.redis.set(alive, b"1", ex=int(self.keepalive * 3) + 1)):
            return None
        ans = await self._ask(
            owner, {"op": "attach", "cid": cid, "sid": sid, "last": last, "reader": reader}
        )
        if ans is None or ans.get("status") != HTTPStatus.OK:
            await self._call(self.redis.delete(alive))
            if ans is None:
                await self._drop_owner(cid, owner)
            return None
        return self._read_remote(owner, reader, key, alive)

    async def _read_remote(
        self, owner: str, reader: str, key: str, alive: str
    ) -> AsyncIterator[bytes]:
        from redis.exceptions import RedisError

        last_id = "0"
        quiet = 0.0
        try:
            while True:
                try:
                    await self.redis.set(alive, b"1", ex=int(self.keepalive * 3) + 1)
                    got = await self.blocking.xread(
                        {key: last_id}, block=int(self.keepalive * 1000)
                    )
                except (RedisError, OSError, TimeoutError) as exc:
                    self._down(exc)
                    return  # the client reconnects with Last-Event-ID: nothing is lost
                if not got:
                    quiet += self.keepalive
                    if quiet > self.keepalive * 2:
                        return  # the owner sends keepalives: it is gone
                    yield b": keepalive\n\n"  # keep the client's stream (and proxies) open
                    continue
                quiet = 0.0
                for _key, entries in got:
                    for entry_id, fields in entries:
                        last_id = entry_id
                        data = fields.get(b"d")
                        if data == b"":
                            return  # the owner ended the stream
                        if data:
                            yield data
        finally:
            if self.reachable:
                detach = orjson.dumps({"op": "detach", "reader": reader})
                await self._call(self.redis.publish(f"acp:ctl:{owner}", detach))
                await self._call(self.redis.delete(alive, key))

    async def _drop_owner(self, cid: str, owner: str) -> None:
        log.warning("connection %s: replica %s did not answer; connection dropped", cid[:8], owner)
        current = await self._call(self.redis.get(f"acp:conn:{cid}"))
        if current is not None and current.decode() == owner:
            await self._call(self.redis.delete(f"acp:conn:{cid}"))

    # ---- the owning side --------------------------------------------------------------
    async def _listen(self) -> None:
        """Serve the control channel; when Redis goes away, subscribe again once it is back."""
        from redis.exceptions import RedisError

        while True:
            pubsub = self.blocking.pubsub()
            try:
                await asyncio.wait_for(
                    pubsub.subscribe(f"acp:ctl:{self.replica}"), self.timeout * 2
                )
                self._up()
                async for message in pubsub.listen():
                    if message.get("type") != "message":
                        continue
                    try:
                        op = orjson.loads(message["data"])
                    except orjson.JSONDecodeError:
                        continue
                    asyncio.get_running_loop().create_task(self._serve(op))
            except (RedisError, OSError, TimeoutError) as exc:
                self._down(exc)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(pubsub.aclose(), self.timeout)
            await asyncio.sleep(RESUBSCRIBE_DELAY)

    async def _serve(self, op: dict[str, Any]) -> None:
        kind = op.get("op")
        try:
            if kind == "detach":
                pump = self._pumps.pop(str(op.get("reader")), None)
                if pump is not None:
                    pump.cancel()
                return
            if kind == "post" and self.on_post is not None:
                trace = op.get("trace")
                carried = {
                    k: v
                    for k, v in (trace.items() if type(trace) is dict else ())
                    if k in ("traceparent", "tracestate") and type(v) is str
                }
                with observe.parent(carried):  # the relaying replica's POST header
                    status, body, ctype = await self.on_post(
                        op["cid"], op.get("sid"), op["body"].encode()
                    )
                answer: dict[str, Any] = {"status": status, "body": body.decode(), "type": ctype}
            elif kind == "delete" and self.on_delete is not None:
                answer = {"status": await self.on_delete(op["cid"])}
            elif kind == "attach" and self.open_stream is not None:
                chunks = self.open_stream(op["cid"], op.get("sid"), op.get("last"))
                if chunks is None:
                    answer = {"status": 404}
                else:
                    reader = str(op["reader"])
                    self._pumps[reader] = asyncio.get_running_loop().create_task(
                        self._pump(reader, chunks)
                    )
                    answer = {"status": 200}
            else:
                return
        except Exception:
            log.exception("relay %s failed", kind)
            answer = {"status": 500, "body": "", "type": None}
        reply = op.get("reply")
        if type(reply) is str and reply.startswith("acp:reply:"):
            await self._call(self.redis.lpush(reply, orjson.dumps(answer)))
            await self._call(self.redis.expire(reply, int(RELAY_TIMEOUT * 4)))

    async def _pump(self, reader: str, chunks: AsyncIterator[bytes]) -> None:
        from redis.exceptions import RedisError

        key = f"acp:sse:{reader}"
        try:
            async for chunk in chunks:
                await self.redis.xadd(key, {"d": chunk}, maxlen=STREAM_MAXLEN)
                await self.redis.expire(key, int(self.keepalive * 4))
                if chunk.startswith(b": keepalive") and not await self.redis.exists(
                    f"acp:rd:{reader}"
                ):
                    return  # the relaying replica is gone
            await self.redis.xadd(key, {"d": b""})  # the stream ended
        except (RedisError, OSError, TimeoutError) as exc:
            self._down(exc)  # the events stay in the owner's replay window
        finally:
            self._pumps.pop(reader, None)
            closer = getattr(chunks, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()
