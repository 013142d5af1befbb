"""Cross-replica streams (templates/runtime/http/redis_router.py): two replicas of a generated agent
share a Redis server and a session store; a connection initialized on replica A is used
through replica B -- its SSE streams read there, its POSTs and DELETE sent there -- and no
message is lost, in order, also when a stream moves between replicas mid-turn with
``Last-Event-ID``.  The initialize answer carries the affinity cookie naming A."""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster_support as cs
import hardening_support as hs
import httpx
import orjson
import otlp_support as otlp
import pytest
from wait_support import Arrivals

PKG = "redisagent"


@pytest.fixture(scope="module")
def redis() -> Iterator[cs.Server]:
    cs.need("redis-server")
    server = cs.start_redis()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def replicas(
    env: dict[str, str],
    redis_url: str,
    db: Path,
    *names: str,
    procs_out: list[subprocess.Popen[str]] | None = None,
) -> Iterator[list[str]]:
    procs: list[subprocess.Popen[str]] = procs_out if procs_out is not None else []
    urls = []
    try:
        for name in names:
            p = subprocess.Popen(
                [hs.PY, "-m", PKG, "--port", "0"],
                env={
                    **env,
                    "ACP_TEST_TRANSPORT": "http",
                    "ACP_SESSION_STORE": f"sqlite:///{db}",
                    "ACP_REDIS_URL": redis_url,
                    "ACP_REPLICA_ID": name,
                },
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            procs.append(p)
            assert p.stderr is not None
            line = p.stderr.readline()
            m = re.match(r"listening on (\S+) ", line)
            assert m, line
            urls.append(m.group(1))
        yield urls
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)


class Reader:
    """One SSE GET; collects (event id, message) pairs."""

    def __init__(self, http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
        self.events: list[tuple[int, dict[str, Any]]] = []
        self.comments = 0  # ": keepalive" lines
        self.arrivals = Arrivals()
        self.task = asyncio.get_running_loop().create_task(self._run(http, url, headers))
        self.task.add_done_callback(lambda _: self.arrivals.arrived())
        self.status: int | None = None

    async def _run(self, http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
        h = {"Accept": "text/event-stream", **headers}
        async with http.stream("GET", url, headers=h) as r:
            self.status = r.status_code
            eid = 0
            async for line in r.aiter_lines():
                if line.startswith("id:"):
                    eid = int(line[3:])
                elif line.startswith("data:"):
                    self.events.append((eid, orjson.loads(line[5:])))
                    self.arrivals.arrived()
                elif line.startswith(":"):
                    self.comments += 1

    async def wait_for(self, pred: Any, timeout: float = 15) -> dict[str, Any]:
        """Wake on each event (and on the stream's end) until one matches `pred`."""

        def found() -> dict[str, Any] | None:
            m = next((m for _, m in self.events if pred(m)), None)
            if m is None and self.task.done():
                self.task.result()
                raise AssertionError("stream ended")
            return m

        await self.arrivals.until("a matching event", found, timeout)
        m = found()
        assert m is not None
        return m

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task


JSON = {"Content-Type": "application/json"}


def rpc(rid: Any, method: str, params: dict[str, Any]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


@pytest.mark.slow
def test_connection_used_through_another_replica(
    redis: cs.Server, tmp_path: Path, shared_acp: Path
) -> None:
    env = hs.build(tmp_path, shared_acp, PKG)
    with replicas(env, redis.url, tmp_path / "s.db", "ra", "rb") as (a, b):

        async def go() -> None:
            async with httpx.AsyncClient(timeout=20) as http:
                json_ = {"Content-Type": "application/json"}
                r = await http.post(
                    a, content=rpc(0, "initialize", {"protocolVersion": 1}), headers=json_
                )
                assert r.status_code == 200
                assert r.cookies.get("acp-replica") == "ra"
                cid = r.headers["Acp-Connection-Id"]
                h = {"Acp-Connection-Id": cid}
                http.cookies.clear()  # affinity lost: everything below goes to B by hand
                main = Reader(http, b, h)
                r = await http.post(
                    b,
                    content=rpc("n", "session/new", {"cwd": "/tmp", "mcpServers": []}),
                    headers={**h, **json_},
                )
                assert r.status_code == 202, r.text
                new = await main.wait_for(lambda m: m.get("id") == "n")
                sid = new["result"]["sessionId"]
                sh = {**h, "Acp-Session-Id": sid}
                first = Reader(http, b, sh)
                r = await http.post(
                    b,
                    content=rpc("p", "session/prompt", hs.text_prompt(sid, "seq t 60 0.02")),
                    headers={**sh, **json_},
                )
                assert r.status_code == 202, r.text
                # mid-turn, the session stream moves from B to A with Last-Event-ID
                await first.wait_for(
                    lambda m: (
                        m.get("params", {}).get("update", {}).get("content", {}).get("text")
                        == "t:10"
                    )
                )
                await first.stop()
                last = first.events[-1][0]
                second = Reader(http, a, {**sh, "Last-Event-ID": str(last)})
                answer = await second.wait_for(lambda m: m.get("id") == "p", 30)
                assert answer["result"]["stopReason"] == "end_turn"
                events = dict(first.events)
                events.update(dict(second.events))  # replayed ones carry the same id
                texts = [
                    m["params"]["update"]["content"]["text"]
                    for _, m in sorted(events.items())
                    if m.get("method") == "session/update"
                    and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
                ]
                assert texts == [f"t:{i}" for i in range(60)]
                await second.stop()
                await main.stop()
                # DELETE through B ends it on A
                r = await http.delete(b, headers=h)
                assert r.status_code == 202
                r = await http.post(
                    a, content=rpc(9, "session/cancel", {"sessionId": sid}), headers={**sh, **json_}
                )
                assert r.status_code == 404
                # a connection nobody owns: 404 on B, for POST, GET and DELETE
                bad = {"Acp-Connection-Id": "f" * 32}
                assert (
                    await http.post(b, content=rpc(1, "x", {}), headers={**bad, **json_})
                ).status_code == 404
                assert (
                    await http.get(b, headers={**bad, "Accept": "text/event-stream"})
                ).status_code == 404
                assert (await http.delete(b, headers=bad)).status_code == 404

        asyncio.run(go())


@pytest.mark.slow
def test_relayed_stream_outlives_silence_longer_than_its_reads(
    redis: cs.Server, tmp_path: Path, shared_acp: Path
) -> None:
    """A session stream read through B (relayed from its owner A by Redis) with nothing to
    say for 35 s (two of its 15 s XREAD BLOCK reads, seven of redis-py's 5 s socket
    timeouts) stays open (keep-alive comments reach the client, one a read) and then
    delivers the next turn.  redis-py's default 5 s socket timeout under the 15 s XREAD
    BLOCK used to end it after 5 s of silence."""
    env = hs.build(tmp_path, shared_acp, PKG)
    with replicas(env, redis.url, tmp_path / "s.db", "ra", "rb") as (a, b):

        async def go() -> None:
            async with httpx.AsyncClient(timeout=httpx.Timeout(20, read=None)) as http:
                json_ = {"Content-Type": "application/json"}
                r = await http.post(
                    a, content=rpc(0, "initialize", {"protocolVersion": 1}), headers=json_
                )
                h = {"Acp-Connection-Id": r.headers["Acp-Connection-Id"]}
                http.cookies.clear()
                main = Reader(http, a, h)
                await http.post(
                    a,
                    content=rpc("n", "session/new", {"cwd": "/tmp", "mcpServers": []}),
                    headers={**h, **json_},
                )
                sid = (await main.wait_for(lambda m: m.get("id") == "n"))["result"]["sessionId"]
                sh = {**h, "Acp-Session-Id": sid}
                relayed = Reader(http, b, sh)
                await asyncio.sleep(35)  # silence on the session stream
                assert not relayed.task.done(), "the relayed stream ended while idle"
                assert relayed.comments >= 2  # kept alive, not just left open
                r = await http.post(
                    a,
                    content=rpc("p", "session/prompt", hs.text_prompt(sid, "seq q 5")),
                    headers={**sh, **json_},
                )
                assert r.status_code == 202, r.text
                answer = await relayed.wait_for(lambda m: m.get("id") == "p", 30)
                assert answer["result"]["stopReason"] == "end_turn"
                texts = [
                    m["params"]["update"]["content"]["text"]
                    for _, m in relayed.events
                    if m.get("method") == "session/update"
                    and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
                ]
                assert texts == [f"q:{i}" for i in range(5)]
                await relayed.stop()
                await main.stop()

        asyncio.run(go())


@pytest.mark.slow
def test_a_relayed_post_keeps_its_trace(redis: cs.Server, tmp_path: Path, shared_acp: Path) -> None:
    """Both replicas send traces to an OTLP collector on 127.0.0.1: a POST through B for a
    connection A owns is served on A under the POST's `traceparent` header (carried in
    the relay; before, A served it as a root), and under its `_meta.traceparent` when it
    has one (that wins, as on one replica)."""
    header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    meta = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    env = {k: v for k, v in hs.build(tmp_path, shared_acp, PKG).items() if "OTEL_" not in k}
    with otlp.collector() as got:
        env.update(otlp.otlp_env(got.url, "relay"))
        with replicas(env, redis.url, tmp_path / "s.db", "ra", "rb") as (a, b):

            async def go() -> None:
                async with httpx.AsyncClient(timeout=20) as http:
                    json_ = {"Content-Type": "application/json"}
                    r = await http.post(
                        a, content=rpc(0, "initialize", {"protocolVersion": 1}), headers=json_
                    )
                    h = {"Acp-Connection-Id": r.headers["Acp-Connection-Id"], **json_}
                    http.cookies.clear()  # everything below through B
                    new = {"cwd": "/tmp", "mcpServers": []}
                    for rid, params in (("h", new), ("m", {**new, "_meta": {"traceparent": meta}})):
                        r = await http.post(
                            b,
                            content=rpc(rid, "session/new", params),
                            headers={**h, "traceparent": header},
                        )
                        assert r.status_code == 202, r.text

            asyncio.run(go())
            got.until("both session/new spans", lambda: len(got.named("session/new")) == 2)
    served = got.named("session/new")
    assert {s.attributes["acp.replica"] for s in served} == {"ra"}  # the owner served both
    by = {s.trace_id: s for s in served}
    assert by["0af7651916cd43dd8448eb211c80319c"].parent_id == "b7ad6b7169203331"
    assert by["4bf92f3577b34da6a3ce929d0e0e4736"].parent_id == "00f067aa0ba902b7"


@pytest.mark.slow
def test_redis_down_falls_back_to_owner_only(tmp_path: Path, shared_acp: Path) -> None:
    """Redis stopped under two replicas: a connection keeps working through the replica
    that owns it (initialize, session/new, a prompt), a request for it through the other
    replica is 404 at once (as for an unknown connection), never a hang; each replica logs
    one line saying so, however many requests; when Redis is back the relay works again."""
    cs.need("redis-server")
    server = cs.start_redis()
    env = hs.build(tmp_path, shared_acp, PKG)
    procs: list[subprocess.Popen[str]] = []
    try:
        with replicas(env, server.url, tmp_path / "s.db", "ra", "rb", procs_out=procs) as (a, b):

            async def connect(http: httpx.AsyncClient) -> dict[str, str]:
                r = await http.post(
                    a, content=rpc(0, "initialize", {"protocolVersion": 1}), headers=JSON
                )
                assert r.status_code == 200, r.text
                http.cookies.clear()
                return {"Acp-Connection-Id": r.headers["Acp-Connection-Id"]}

            async def go() -> None:
                async with httpx.AsyncClient(timeout=20) as http:
                    server.outage()
                    for _ in range(3):
                        h = await connect(http)
                        main = Reader(http, a, h)
                        await http.post(
                            a,
                            content=rpc("n", "session/new", {"cwd": "/tmp", "mcpServers": []}),
                            headers={**h, **JSON},
                        )
                        new = await main.wait_for(lambda m: m.get("id") == "n")
                        sid = new["result"]["sessionId"]
                        sh = {**h, "Acp-Session-Id": sid}
                        r = await http.post(
                            b,
                            content=rpc("x", "session/cancel", {"sessionId": sid}),
                            headers={**sh, **JSON},
                        )
                        assert r.status_code == 404  # B cannot reach A: unknown there
                        stream = Reader(http, a, sh)
                        await http.post(
                            a,
                            content=rpc("p", "session/prompt", hs.text_prompt(sid, "seq d 3")),
                            headers={**sh, **JSON},
                        )
                        answer = await stream.wait_for(lambda m: m.get("id") == "p")
                        assert answer["result"]["stopReason"] == "end_turn"
                        await stream.stop()
                        await main.stop()
                    await asyncio.to_thread(server.restart)
                    deadline = asyncio.get_running_loop().time() + 20
                    while True:  # a new connection on A is reachable through B again
                        h = await connect(http)
                        r = await http.post(
                            b,
                            content=rpc("l", "session/list", {}),
                            headers={**h, **JSON},
                        )
                        if r.status_code == 202:
                            break
                        assert asyncio.get_running_loop().time() < deadline, r.status_code
                        await asyncio.sleep(0.5)  # a poll: Redis is another process, no notice

            asyncio.run(go())
        logs = [p.stderr.read() if p.stderr else "" for p in procs]
        for text in logs:
            assert text.count("Redis unreachable") == 1, text
        assert "Redis reachable again" in logs[0]
    finally:
        server.stop()
