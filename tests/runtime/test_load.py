"""Load: 100 concurrent sessions stream prompts for a bounded time over loopback stdio and
HTTP (``ACP_LOAD_SECONDS``, default 10 s per transport; set 60 for the full minute).

What must hold: every prompt gets its answer (none lost, none late beyond 30 s); each
turn's numbered chunks arrive complete and in order before its answer, per session; the
agent's resident memory (VmRSS from /proc) stays bounded: its peak after the warm-up
(first third) exceeds the warm-up's peak by less than 40 MiB.  Figures are printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import hardening_support as hs
import httpx
import pytest

pytestmark = pytest.mark.slow  # load / soak: `make test`, not `make test-fast`

PKG = "loadagent"
SESSIONS = 100
CHUNKS = 12  # numbered chunks per turn
DELAY = 0.002  # between chunks: turns overlap, the writer interleaves sessions
SECONDS = float(os.environ.get("ACP_LOAD_SECONDS", "10"))
GROWTH_KIB = 40 * 1024


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("load")
    return {"env": hs.build(tmp, shared_acp, PKG), "tmp": tmp}


class Memory:
    """Samples a process's VmRSS every 0.25 s."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        start = time.monotonic()
        while True:
            self.samples.append((time.monotonic() - start, hs.rss_kib(self.pid)))
            await asyncio.sleep(0.25)

    def verdict(self, duration: float) -> tuple[int, int]:
        self.task.cancel()
        warm = [kib for t, kib in self.samples if t <= duration / 3]
        later = [kib for t, kib in self.samples if t > duration / 3]
        assert warm and later, self.samples
        return max(warm), max(later)


def expected(tag: str) -> list[str]:
    return [f"{tag}:{i}" for i in range(CHUNKS)]


def report(name: str, turns: int, elapsed: float, warm: int, peak: int) -> None:
    print(
        f"\nload {name}: {SESSIONS} sessions, {turns} prompts in {elapsed:.1f} s "
        f"({turns / elapsed:.0f} prompts/s, {turns * CHUNKS / elapsed:.0f} updates/s); "
        f"RSS warm-up peak {warm / 1024:.1f} MiB, later peak {peak / 1024:.1f} MiB"
    )


@pytest.mark.slow
def test_load_stdio(built: dict[str, Any]) -> None:
    """100 sessions on one stdio agent, each prompting in a loop for the bounded time:
    all answered, chunks in order per turn, memory bounded (see module doc)."""

    async def main() -> None:
        peer = await hs.StdioPeer.start(built["env"], PKG)
        await peer.call("init", "initialize", {"protocolVersion": 1})
        sids = []
        for i in range(SESSIONS):
            r = await peer.call(f"new{i}", "session/new", {"cwd": "/tmp", "mcpServers": []})
            sids.append(r["result"]["sessionId"])
        queues: dict[str, asyncio.Queue[dict[str, Any]]] = {s: asyncio.Queue() for s in sids}
        answers: dict[Any, asyncio.Future[dict[str, Any]]] = {}

        async def route() -> None:
            while True:
                m = await peer.msgs.get()
                if m.get("method") == "session/update":
                    queues[m["params"]["sessionId"]].put_nowait(m)
                elif m.get("id") in answers:
                    answers.pop(m["id"]).set_result(m)
                else:
                    raise AssertionError(f"unexpected message {m}")

        router = asyncio.get_running_loop().create_task(route())
        mem = Memory(peer.proc.pid)
        stop_at = time.monotonic() + SECONDS
        started = time.monotonic()
        turns = 0

        async def session_loop(k: int, sid: str) -> None:
            nonlocal turns
            n = 0
            while time.monotonic() < stop_at:
                tag = f"s{k}t{n}"
                rid = f"p{k}-{n}"
                fut = answers[rid] = asyncio.get_running_loop().create_future()
                await peer.send(
                    {
                        "jsonrpc": "2.0",
                        "id": rid,
                        "method": "session/prompt",
                        "params": hs.text_prompt(sid, f"seq {tag} {CHUNKS} {DELAY}"),
                    }
                )
                answer = await asyncio.wait_for(fut, 30)
                assert answer["result"] == {"stopReason": "end_turn"}, answer
                q = queues[sid]
                got = [
                    q.get_nowait()["params"]["update"]["content"]["text"] for _ in range(q.qsize())
                ]
                assert got == expected(tag), (sid, got[:5])  # complete, in order, before the answer
                n += 1
                turns += 1

        await asyncio.gather(*(session_loop(k, s) for k, s in enumerate(sids)))
        elapsed = time.monotonic() - started
        warm, peak = mem.verdict(elapsed)
        router.cancel()
        assert answers == {}
        assert peer.bad_lines == []
        rc, err = await peer.close()
        assert rc == 0 and b"Traceback" not in err
        report("stdio", turns, elapsed, warm, peak)
        assert turns >= SESSIONS
        assert peak - warm < GROWTH_KIB, (warm, peak)

    asyncio.run(main())


@pytest.mark.slow
def test_load_http(built: dict[str, Any], tmp_path: Path) -> None:
    """100 sessions over HTTP (10 connections x 10 sessions, one SSE stream per session),
    each prompting in a loop for the bounded time: all answered, chunks in order per turn,
    memory bounded (see module doc); the server's stderr has no traceback."""
    port = hs.free_port()
    proc = hs.start_http(built["env"], PKG, port, ACP_SESSION_DB=str(tmp_path / "s.db"))
    url = f"http://127.0.0.1:{port}/acp"

    async def main() -> tuple[int, float, int, int]:
        limits = httpx.Limits(max_connections=400, max_keepalive_connections=400)
        async with httpx.AsyncClient(timeout=httpx.Timeout(30), limits=limits) as c:
            mem = Memory(proc.pid)
            tasks: list[asyncio.Task[Any]] = []

            async def read_stream(headers: dict[str, str], q: asyncio.Queue[Any]) -> None:
                async with c.stream(
                    "GET", url, headers={**headers, "Accept": "text/event-stream"}
                ) as s:
                    async for line in s.aiter_lines():
                        if line.startswith("data:"):
                            q.put_nowait(json.loads(line[5:]))

            async def open_connection(k: int) -> list[tuple[dict[str, str], asyncio.Queue[Any]]]:
                r = await c.post(
                    url,
                    json={
                        "jsonrpc": "2.0",
                        "id": 0,
                        "method": "initialize",
                        "params": {"protocolVersion": 1},
                    },
                )
                h = {"Acp-Connection-Id": r.headers["Acp-Connection-Id"]}
                main_q: asyncio.Queue[Any] = asyncio.Queue()
                tasks.append(asyncio.get_running_loop().create_task(read_stream(h, main_q)))
                out = []
                for j in range(SESSIONS // 10):
                    r = await c.post(
                        url,
                        json={
                            "jsonrpc": "2.0",
                            "id": j + 1,
                            "method": "session/new",
                            "params": {"cwd": "/tmp", "mcpServers": []},
                        },
                        headers=h,
                    )
                    assert r.status_code == 202
                    m = await asyncio.wait_for(main_q.get(), 30)
                    assert m["id"] == j + 1, m
                    sh = {**h, "Acp-Session-Id": m["result"]["sessionId"]}
                    q: asyncio.Queue[Any] = asyncio.Queue()
                    tasks.append(asyncio.get_running_loop().create_task(read_stream(sh, q)))
                    out.append((sh, q))
                return out

            groups = await asyncio.gather(*(open_connection(k) for k in range(10)))
            sessions = [s for g in groups for s in g]
            assert len(sessions) == SESSIONS
            stop_at = time.monotonic() + SECONDS
            started = time.monotonic()
            turns = 0

            async def session_loop(k: int, sh: dict[str, str], q: asyncio.Queue[Any]) -> None:
                nonlocal turns
                n = 0
                sid = sh["Acp-Session-Id"]
                while time.monotonic() < stop_at:
                    tag = f"s{k}t{n}"
                    rid = f"p{k}-{n}"  # ids are per connection: unique across its sessions
                    r = await c.post(
                        url,
                        json={
                            "jsonrpc": "2.0",
                            "id": rid,
                            "method": "session/prompt",
                            "params": hs.text_prompt(sid, f"seq {tag} {CHUNKS} {DELAY}"),
                        },
                        headers=sh,
                    )
                    assert r.status_code == 202
                    got = []
                    while True:
                        m = await asyncio.wait_for(q.get(), 30)
                        if "method" in m:
                            got.append(m["params"]["update"]["content"]["text"])
                            continue
                        assert m["id"] == rid and m["result"] == {"stopReason": "end_turn"}, m
                        break
                    assert got == expected(tag), (sid, got[:5])
                    n += 1
                    turns += 1

            await asyncio.gather(*(session_loop(k, sh, q) for k, (sh, q) in enumerate(sessions)))
            elapsed = time.monotonic() - started
            warm, peak = mem.verdict(elapsed)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return turns, elapsed, warm, peak

    try:
        turns, elapsed, warm, peak = asyncio.run(main())
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert b"Traceback" not in err, err.decode()[-3000:]
    report("http", turns, elapsed, warm, peak)
    assert turns >= SESSIONS
    assert peak - warm < GROWTH_KIB, (warm, peak)


def test_replay_window_bounds_stream_memory(built: dict[str, Any]) -> None:
    """What an SSE stream keeps after sending is bounded by ``replay_window`` (plus the
    last write): 150 streamed turns on one session leave at most that many bytes."""
    from test_http_transport import running_server

    agent_cls = hs.load(built["tmp"], PKG).Agent
    http = hs.runtime_of(PKG, "http_server")
    store = hs.runtime_of(PKG, "store").MemorySessionStore()
    window = 16 * 1024
    app = http.app_for(agent_cls, store=store, replay_window=window)
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    with running_server(app) as addr, httpx.Client(timeout=10) as c:
        url = f"http://{addr}/acp"
        cid = c.post(url, json=init).headers["Acp-Connection-Id"]
        h = {"Acp-Connection-Id": cid}
        new = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "session/new",
            "params": {"cwd": "/", "mcpServers": []},
        }
        c.post(url, json=new, headers=h)
        with c.stream("GET", url, headers={**h, "Accept": "text/event-stream"}) as s:
            for line in s.iter_lines():
                if line.startswith("data:") and '"sessionId"' in line:
                    sid = json.loads(line[5:])["result"]["sessionId"]
                    break
        sh = {**h, "Acp-Session-Id": sid, "Accept": "text/event-stream"}
        with c.stream("GET", url, headers=sh) as s:
            lines = s.iter_lines()
            for n in range(150):
                body = {
                    "jsonrpc": "2.0",
                    "id": 10 + n,
                    "method": "session/prompt",
                    "params": hs.text_prompt(sid, f"seq t{n} {CHUNKS}"),
                }
                assert (
                    c.post(url, json=body, headers=h | {"Acp-Session-Id": sid}).status_code == 202
                )
                for line in lines:
                    if line.startswith("data:") and f'"id":{10 + n}' in line:
                        break
        stream = app.state.acp.connections[cid].sessions[sid]
        sent = stream._sent_bytes
        assert 0 < sent <= window + 8 * 1024, sent  # window + at most one recent write
