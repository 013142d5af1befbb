"""`make cluster`: three replicas of a generated HTTP agent behind HAProxy, sessions in
PostgreSQL, cross-replica streams on Redis, all on 127.0.0.1; one replica SIGKILLed mid-turn.

    .venv/bin/python bench/cluster.py [--sessions 6] [--turns 6]

Starts private PostgreSQL and Redis servers and HAProxy (Debian packages postgresql,
redis-server, haproxy), and three replicas of the committed golden project
generated/projects/echo-agent-http (its handler swapped for one that streams numbered chunks
slowly, so that turns are in flight when the kill comes).  Drives ``--sessions`` sessions at
once through the load balancer with the generated HTTP client (templates/runtime/
http_client.py); after the first turns it SIGKILLs the replica holding the most sessions.
Each client that loses its connection connects again through the balancer, calls
``session/load`` (which takes the session's lease over) and goes on.  At
the end every session is loaded once more on a fresh connection and its replayed history is
checked against every turn the client saw acknowledged.  Prints one line:

    cluster: replicas=3 sessions=N acknowledged_turns=N lost=0 killed=1 reconnected=N ...

and exits 1 when a turn was lost or a session could not be loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "templates"))

import cluster_support as cs  # noqa: E402
from runtime.client import AgentProxy, ClientRuntime  # noqa: E402
from runtime.http_client import connect_http  # noqa: E402
from runtime.revision import Method  # noqa: E402

GOLDEN = ROOT / "generated" / "projects" / "echo-agent-http" / "echo_agent"
HANDLERS = """
from __future__ import annotations

import asyncio
from typing import Any

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent import Turn


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> Any:
        for block in input:
            text = block.get("text", "")
            if text.startswith("slow "):  # slow <tag> <count> <delay>: numbered chunks
                _, tag, count, delay = text.split()
                for i in range(int(count)):
                    await turn.send_text(f"{tag}:{i}")
                    await asyncio.sleep(float(delay))
            else:
                await turn.send_text(text)
        return None
"""

HAPROXY = """
global
    maxconn 4096
defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    timeout tunnel 1h
    timeout check 3s
    option redispatch
    # SSE: forward each event at once (no waiting for more data to fill a packet)
    option http-no-delay
    retries 2
frontend acp
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
    # passive: the replica sets acp-replica=<its id>, the same value as its `cookie` below
    cookie acp-replica
    option httpchk GET /health
{servers}
"""


@dataclass
class Cluster:
    lb_url: str
    replicas: dict[str, subprocess.Popen[bytes]]
    ports: dict[str, int]
    servers: list[cs.Server] = field(default_factory=list)
    haproxy: subprocess.Popen[bytes] | None = None


def _agent_dir(base: Path) -> Path:
    pkg = base / "agent" / "echo_agent"
    shutil.copytree(GOLDEN, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "handlers.py").write_text(HANDLERS)
    return base / "agent"


@contextmanager
def cluster(n: int = 3) -> Iterator[Cluster]:
    base = Path(tempfile.mkdtemp(prefix="acp-cluster-"))
    pg = cs.start_postgres()
    redis = cs.start_redis()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    ports: dict[str, int] = {}
    haproxy = None
    try:
        pythonpath = _agent_dir(base)
        for i in range(1, n + 1):
            name = f"r{i}"
            ports[name] = cs.free_port()
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "echo_agent", "--port", str(ports[name])],
                env={
                    **os.environ,
                    "PYTHONPATH": str(pythonpath),
                    "ACP_SESSION_STORE": pg.url,
                    "ACP_REDIS_URL": redis.url,
                    "ACP_REPLICA_ID": name,
                },
                stdout=subprocess.DEVNULL,
                stderr=open(base / f"{name}.log", "wb"),  # noqa: SIM115 - the process keeps it
            )
        for name, port in ports.items():
            try:
                cs._wait_port(port, procs[name], f"replica {name}")
            except RuntimeError as exc:
                log = (base / f"{name}.log").read_text()[-2000:]
                raise RuntimeError(f"{exc}: {log}") from None
        lb_port = cs.free_port()
        servers = "\n".join(
            f"    server {name} 127.0.0.1:{port} cookie {name} check inter 500 fall 3 rise 2"
            for name, port in ports.items()
        )
        cfg = base / "haproxy.cfg"
        cfg.write_text(HAPROXY.format(port=lb_port, servers=servers))
        haproxy = subprocess.Popen(
            [str(shutil.which("haproxy")), "-db", "-f", str(cfg)],
            stdout=subprocess.DEVNULL,
            stderr=open(base / "haproxy.log", "wb"),  # noqa: SIM115
        )
        try:
            cs._wait_port(lb_port, haproxy, "HAProxy")
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {(base / 'haproxy.log').read_text()[-2000:]}") from None
        yield Cluster(f"http://127.0.0.1:{lb_port}/acp", procs, ports, [pg, redis], haproxy)
    finally:
        for p in [*procs.values(), *([haproxy] if haproxy else [])]:
            if p.poll() is None:
                p.terminate()
        for p in [*procs.values(), *([haproxy] if haproxy else [])]:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        redis.stop()
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)


class Recorder(ClientRuntime):
    METHODS: ClassVar[dict[str, Method]] = {
        "session/update": Method(
            "session_update", "notification", None, None, "session/update", "client"
        ),
    }

    def __init__(self) -> None:
        super().__init__()
        self.updates: list[dict[str, Any]] = []

    async def session_update(self, params: Any) -> None:
        self.updates.append(params["update"])


def _texts(updates: list[dict[str, Any]], kind: str) -> list[str]:
    out = []
    for u in updates:
        if u.get("sessionUpdate") == kind:
            content = u.get("content")
            if isinstance(content, dict) and isinstance(content.get("text"), str):
                out.append(content["text"])
    return out


@dataclass
class Stats:
    acknowledged: int = 0
    reconnected: int = 0
    lease_waits: int = 0
    failed_turns: int = 0
    lost: int = 0
    unloadable: int = 0
    owners: dict[int, str] = field(default_factory=dict)


INIT = {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "c", "version": "0"}}


async def _load(url: str, sid: str, stats: Stats, deadline: float) -> tuple[Any, Recorder, Any]:
    """A new connection through the balancer with ``sid`` loaded (taking the session's lease
    over from the dead replica's connection); retried until ``deadline``."""
    waited = False
    while True:
        rec = Recorder()
        ctx = connect_http(rec, AgentProxy, url)
        proxy = await ctx.__aenter__()
        try:
            await asyncio.wait_for(proxy.call("initialize", INIT), 30)
            await asyncio.wait_for(
                proxy.call("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []}),
                30,
            )
            if waited:
                stats.lease_waits += 1
            return ctx, rec, proxy
        except Exception:
            await ctx.__aexit__(None, None, None)
            if time.monotonic() > deadline:
                raise
            waited = True
            await asyncio.sleep(0.5)


async def _session(
    idx: int, url: str, turns: int, stats: Stats, killed: asyncio.Event, per_turn: int
) -> tuple[str, list[int]]:
    """One client: its session, its turns; returns (session id, acknowledged turn numbers)."""
    deadline = time.monotonic() + 120
    while True:  # a loaded machine may answer slowly: retry the first connect too
        rec = Recorder()
        ctx = connect_http(rec, AgentProxy, url)
        proxy = await ctx.__aenter__()
        try:
            await asyncio.wait_for(proxy.call("initialize", INIT), 30)
            new = await asyncio.wait_for(
                proxy.call("session/new", {"cwd": "/tmp", "mcpServers": []}), 30
            )
            sid = new["sessionId"]
            break
        except Exception:
            await ctx.__aexit__(None, None, None)
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
    acked: list[int] = []
    t = 0
    try:
        while t < turns:
            prompt = [{"type": "text", "text": f"slow s{idx}t{t} {per_turn} 0.03"}]
            try:
                r = await asyncio.wait_for(
                    proxy.call("session/prompt", {"sessionId": sid, "prompt": prompt}), 60
                )
                if isinstance(r, dict) and r.get("stopReason") == "end_turn":
                    acked.append(t)
                    stats.acknowledged += 1
                t += 1
            except Exception:  # noqa: BLE001 - the replica died under this turn
                stats.failed_turns += 1
                await ctx.__aexit__(None, None, None)
                ctx, rec, proxy = await _load(url, sid, stats, time.monotonic() + 90)
                stats.reconnected += 1
                t += 1  # that turn was never acknowledged: go on with the next
    finally:
        await ctx.__aexit__(None, None, None)
    return sid, acked


async def _verify(
    url: str, sid: str, acked: list[int], idx: int, per_turn: int, stats: Stats
) -> None:
    try:
        ctx, rec, _ = await _load(url, sid, stats, time.monotonic() + 90)
    except Exception:  # noqa: BLE001
        stats.unloadable += 1
        stats.lost += len(acked)
        return
    await asyncio.sleep(0.3)  # the replayed updates precede the answer; let the stream drain
    prompts = _texts(rec.updates, "user_message_chunk")
    chunks = _texts(rec.updates, "agent_message_chunk")
    for t in acked:
        tag = f"s{idx}t{t}"
        want = [f"{tag}:{i}" for i in range(per_turn)]
        got = [c for c in chunks if c.startswith(tag + ":")]
        if f"slow {tag} {per_turn} 0.03" not in prompts or got != want:
            stats.lost += 1
    await ctx.__aexit__(None, None, None)


def _count_sessions(c: Cluster) -> dict[str, int]:
    import httpx

    out = {}
    for name, port in c.ports.items():
        if c.replicas[name].poll() is None:
            try:
                out[name] = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()[
                    "connections"
                ]
            except httpx.HTTPError:
                out[name] = 0
    return out


async def scenario(c: Cluster, sessions: int, turns: int, per_turn: int = 15) -> tuple[Stats, str]:
    stats = Stats()
    killed = asyncio.Event()
    tasks = [
        asyncio.create_task(_session(i, c.lb_url, turns, stats, killed, per_turn))
        for i in range(sessions)
    ]
    # kill when every session has had a turn acknowledged and turns are in flight
    while stats.acknowledged < sessions and not all(t.done() for t in tasks):
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    counts = await asyncio.to_thread(_count_sessions, c)
    victim = max(counts, key=lambda k: counts[k])
    c.replicas[victim].send_signal(signal.SIGKILL)
    killed.set()
    results = await asyncio.gather(*tasks)
    await asyncio.gather(
        *(
            _verify(c.lb_url, sid, acked, i, per_turn, stats)
            for i, (sid, acked) in enumerate(results)
        )
    )
    return stats, victim


def run(sessions: int, turns: int) -> tuple[Stats, str, float]:
    t0 = time.perf_counter()
    with cluster(3) as c:
        stats, victim = asyncio.run(scenario(c, sessions, turns))
    return stats, victim, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--turns", type=int, default=6)
    a = ap.parse_args()
    gone = cs.missing()
    if gone:
        print(f"cluster: needs the OS packages {' '.join(gone)} (apt-get install {' '.join(gone)})")
        return 2
    stats, victim, seconds = run(a.sessions, a.turns)
    print(
        f"cluster: replicas=3 sessions={a.sessions} acknowledged_turns={stats.acknowledged} "
        f"lost={stats.lost} killed=1 victim={victim} failed_turns={stats.failed_turns} "
        f"reconnected={stats.reconnected} load_retries={stats.lease_waits} "
        f"unloadable={stats.unloadable} lb=haproxy store=postgresql streams=redis "
        f"seconds={seconds:.1f}"
    )
    return 1 if stats.lost or stats.unloadable else 0


if __name__ == "__main__":
    sys.exit(main())
