"""`make cluster`: three replicas of a generated HTTP agent behind HAProxy, sessions in
PostgreSQL, cross-replica streams on Redis, all on 127.0.0.1; one replica SIGKILLed mid-turn,
then PostgreSQL stopped (``pg_ctl stop -m immediate``) and started again mid-run.

    .venv/bin/python bench/cluster.py [--sessions 6] [--turns 6] [--prometheus]

Starts private PostgreSQL and Redis servers and HAProxy (Debian packages postgresql,
redis-server, haproxy), and three replicas of the committed golden project
generated/projects/echo-agent-http with its ``_generated/`` rendered for two revisions (v2
primary, v1 beside it) and its handler swapped for one that streams numbered chunks slowly,
so that turns are in flight when the kill comes.  Drives ``--sessions`` sessions at once
through the load balancer with the generated HTTP client (templates/runtime/client/http_client.py),
half of them v1 (a turn is acknowledged by the prompt's ``end_turn`` answer; a lost
connection is followed by ``session/load``), half v2 (acknowledged by the turn's ``idle``
``state_update`` with ``end_turn``; a lost connection is followed by ``session/resume`` with
``replayFrom``).  After the first turns it SIGKILLs the replica holding the most v2 sessions
(by the leases in PostgreSQL); each client that loses its connection connects again through
the balancer, loads or resumes the session (taking its lease over) and goes on.  Then
PostgreSQL is stopped for ``--outage`` seconds and started again: requests meanwhile answer
the transient ``StoreUnavailable`` error, which the clients retry on the same connection
with a new prompt (each attempt has its own tag, so a turn is never counted twice).  At the
end every session is loaded (v1) or resumed with ``replayFrom: start`` (v2) once more on a
fresh connection and its replayed history is checked against every turn the client saw
acknowledged.  Prints one line:

    cluster: replicas=3 sessions=N v2_sessions=N acknowledged_turns=N lost=0 killed=1 ...
    pg_outage=2.0s transient_retries=N ...

and exits 1 when a turn was lost or a session could not be loaded.  With ``--prometheus``
the replicas serve their metrics on ``/metrics`` (``OTEL_METRICS_EXPORTER=prometheus``) and a
private Prometheus (Debian package prometheus) scrapes them every second; at the end it
prints, before that line, what Prometheus read (through its HTTP API)::

    prometheus: prompts=127.0.0.1:PORT:N,... turns=end_turn:N,... lease_moves=... up=...
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
from runtime.client.client import AgentProxy, ClientRuntime  # noqa: E402
from runtime.client.http_client import connect_http  # noqa: E402
from runtime.wire.errors import RpcError  # noqa: E402
from runtime.wire.revision import Method  # noqa: E402

GOLDEN = ROOT / "generated" / "projects" / "echo-agent-http" / "echo_agent"
HANDLERS = """
from __future__ import annotations

import asyncio
from typing import Any

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent.agent import Turn


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
    prometheus: cs.Server | None = None  # scraping every replica's /metrics (--prometheus)


RENDER = """
import json, sys
from pathlib import Path
tree, pkg, schemas, manifest = map(Path, sys.argv[1:5])
sys.path.insert(0, str(tree))
from agentgen.manifest.load import load_manifest
from agentgen.packaged import data_dir
from agentgen.render import render_generated
from agentgen.scaffold.project import write_generated
# the tree's own generator and runtime (bench_before_after.importable), never this checkout's
assert data_dir("templates").resolve() == (tree / "templates").resolve()
v1 = json.loads((schemas / "v1" / "schema.unstable.json").read_text())
v2 = json.loads((schemas / "v2" / "schema.json").read_text())
files = render_generated(
    schema=v2,
    meta=None,
    manifest=load_manifest(manifest).data,
    role="agent",
    transport="http",
    package="echo_agent",
    source_label="v2/schema.json",
    also=((v1, None, "v1/schema.unstable.json"),),
)
write_generated(pkg / "_generated", files)
"""


def _agent_dir(base: Path, tree: Path = ROOT) -> Path:
    """The golden project, its ``_generated/`` rendered for v2 (primary) and v1 by the
    generator and runtime in ``tree`` (this checkout, or bench_before_after.checkout's)."""
    # bench/ beside this file: `from bench import cluster` (tests/e2e/test_cluster.py) has
    # only the repository on sys.path, and bench_before_after imports its neighbours by name
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(ROOT))  # conftest imports the checkout's generator/
    from bench_before_after import importable
    from conftest import upstream_schemas

    pkg = base / "agent" / "echo_agent"
    shutil.copytree(GOLDEN, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(pkg / "_generated")
    args = [importable(tree), pkg, upstream_schemas(), GOLDEN.parent / "agent.yaml"]
    subprocess.run([sys.executable, "-c", RENDER, *map(str, args)], check=True)
    (pkg / "handlers.py").write_text(HANDLERS)
    return base / "agent"


@contextmanager
def cluster(n: int = 3, prometheus: bool = False) -> Iterator[Cluster]:
    base = Path(tempfile.mkdtemp(prefix="acp-cluster-"))
    pg = cs.start_postgres()
    redis = cs.start_redis()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    ports: dict[str, int] = {}
    haproxy = None
    prom = None
    # the replicas' metrics on /metrics (the `otel` extra's Prometheus reader)
    metrics = {"OTEL_METRICS_EXPORTER": "prometheus"} if prometheus else {}
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
                    **metrics,
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
        if prometheus:
            prom = cs.start_prometheus([f"127.0.0.1:{port}" for port in ports.values()])
        lb = f"http://127.0.0.1:{lb_port}/acp"
        yield Cluster(lb, procs, ports, [pg, redis], haproxy, prom)
    finally:
        if prom is not None:
            prom.stop()
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
    """The text of each update of ``kind`` (v2 ``user_message``: of its first block)."""
    out = []
    for u in updates:
        if u.get("sessionUpdate") == kind:
            content = u.get("content")
            if isinstance(content, list) and content:
                content = content[0]
            if isinstance(content, dict) and isinstance(content.get("text"), str):
                out.append(content["text"])
    return out


@dataclass
class Stats:
    acknowledged: int = 0
    reconnected: int = 0
    v2_reconnected: int = 0
    lease_waits: int = 0
    failed_turns: int = 0
    transient_retries: int = 0
    lost: int = 0
    unloadable: int = 0
    outage: float = 0.0
    sids: dict[int, str] = field(default_factory=dict)
    acked_by: dict[int, int] = field(default_factory=dict)  # per session
    missing: list[str] = field(default_factory=list)  # the acknowledged turns not replayed


INIT = {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "c", "version": "0"}}
INIT2 = {"protocolVersion": 2, "capabilities": {}, "info": {"name": "c", "version": "0"}}
NEW = {"cwd": "/tmp", "mcpServers": []}
PER_TURN = 15
DELAY = 0.03


def _prompt_text(tag: str) -> str:
    return f"slow {tag} {PER_TURN} {DELAY}"


async def _attach(
    url: str, sid: str, v2: bool, stats: Stats, deadline: float, *, replay: bool = False
) -> tuple[Any, Recorder, Any]:
    """A new connection through the balancer with ``sid`` loaded (v1) or resumed (v2, with
    ``replayFrom: start`` when ``replay``), taking the session's lease over from the dead
    replica's connection; retried until ``deadline``."""
    waited = False
    while True:
        rec = Recorder()
        ctx = connect_http(rec, AgentProxy, url)
        proxy = await ctx.__aenter__()
        try:
            await asyncio.wait_for(proxy.call("initialize", INIT2 if v2 else INIT), 30)
            params: dict[str, Any] = {"sessionId": sid, **NEW}
            if v2 and replay:
                params["replayFrom"] = {"type": "start"}
            method = "session/resume" if v2 else "session/load"
            await asyncio.wait_for(proxy.call(method, params), 30)
            if waited:
                stats.lease_waits += 1
            return ctx, rec, proxy
        except Exception:
            await ctx.__aexit__(None, None, None)
            if time.monotonic() > deadline:
                raise
            waited = True
            await asyncio.sleep(0.5)


def _transient(exc: BaseException) -> bool:
    data = exc.data if isinstance(exc, RpcError) else None
    return isinstance(data, dict) and data.get("transient") is True


async def _turn(proxy: Any, rec: Recorder, sid: str, tag: str, v2: bool) -> bool:
    """One turn; True when it was acknowledged as ended (v1: the answer; v2: the idle
    state_update after the turn's last chunk)."""
    prompt = [{"type": "text", "text": _prompt_text(tag)}]
    r = await asyncio.wait_for(
        proxy.call("session/prompt", {"sessionId": sid, "prompt": prompt}), 60
    )
    if not v2:
        return isinstance(r, dict) and r.get("stopReason") == "end_turn"
    last = f"{tag}:{PER_TURN - 1}"
    deadline = time.monotonic() + 60
    while True:
        seen = False
        for u in rec.updates:
            content = u.get("content")
            if isinstance(content, dict) and content.get("text") == last:
                seen = True
            elif seen and u.get("sessionUpdate") == "state_update" and u.get("state") == "idle":
                err = u.get("error")
                if u.get("stopReason") == "error" and isinstance(err, dict):
                    # ended but not saved (the store was down): retried like an error answer
                    raise RpcError(err.get("code", -32603), err.get("message", ""), err.get("data"))
                return u.get("stopReason") == "end_turn"
        if proxy.connection.closed.is_set():
            raise ConnectionError("the connection ended before the turn's idle update")
        if time.monotonic() > deadline:
            raise TimeoutError("no idle update")
        await asyncio.sleep(0.02)


async def _session(idx: int, url: str, turns: int, stats: Stats, v2: bool) -> tuple[str, list[str]]:
    """One client: its session, its turns; returns (session id, acknowledged turn tags)."""
    deadline = time.monotonic() + 120
    while True:  # a loaded machine may answer slowly: retry the first connect too
        rec = Recorder()
        ctx = connect_http(rec, AgentProxy, url)
        proxy = await ctx.__aenter__()
        try:
            await asyncio.wait_for(proxy.call("initialize", INIT2 if v2 else INIT), 30)
            new = await asyncio.wait_for(proxy.call("session/new", NEW), 30)
            sid = new["sessionId"]
            stats.sids[idx] = sid
            break
        except Exception:
            await ctx.__aexit__(None, None, None)
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
    acked: list[str] = []
    t = attempt = 0
    try:
        while t < turns:
            tag = f"s{idx}t{t}a{attempt}"
            try:
                if await _turn(proxy, rec, sid, tag, v2):
                    acked.append(tag)
                    stats.acknowledged += 1
                    stats.acked_by[idx] = stats.acked_by.get(idx, 0) + 1
                t, attempt = t + 1, 0
            except Exception as exc:  # noqa: BLE001
                if _transient(exc):  # the store is down: the same connection, a new attempt
                    stats.transient_retries += 1
                    attempt += 1
                    await asyncio.sleep(0.3)
                    continue
                # the replica died under this turn: connect again, load / resume, go on
                stats.failed_turns += 1
                await ctx.__aexit__(None, None, None)
                ctx, rec, proxy = await _attach(url, sid, v2, stats, time.monotonic() + 90)
                stats.reconnected += 1
                stats.v2_reconnected += v2
                t, attempt = t + 1, 0  # that turn was never acknowledged: go on with the next
    finally:
        await ctx.__aexit__(None, None, None)
    return sid, acked


async def _verify(url: str, sid: str, acked: list[str], v2: bool, stats: Stats) -> None:
    try:
        ctx, rec, _ = await _attach(url, sid, v2, stats, time.monotonic() + 90, replay=True)
    except Exception:  # noqa: BLE001
        stats.unloadable += 1
        stats.lost += len(acked)
        return
    # the replayed updates may still be on their way (the session's own stream)
    want_last = f"{acked[-1]}:{PER_TURN - 1}" if acked else None
    deadline = time.monotonic() + 10
    while want_last and want_last not in _texts(rec.updates, "agent_message_chunk"):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    prompts = _texts(rec.updates, "user_message" if v2 else "user_message_chunk")
    chunks = _texts(rec.updates, "agent_message_chunk")
    for tag in acked:
        want = [f"{tag}:{i}" for i in range(PER_TURN)]
        got = [c for c in chunks if c.startswith(tag + ":")]
        if _prompt_text(tag) not in prompts or got != want:
            stats.lost += 1
            why = "prompt" if _prompt_text(tag) not in prompts else f"{len(got)} chunks"
            stats.missing.append(f"{tag}{'(v2)' if v2 else ''}:{why}")
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


def _v2_owners(pg_url: str, v2_sids: set[str]) -> dict[str, int]:
    """Per replica, how many of the v2 sessions it holds (the leases in PostgreSQL)."""
    import psycopg

    with psycopg.connect(pg_url, connect_timeout=5) as conn:
        rows = conn.execute("SELECT session_id, owner FROM acp_leases").fetchall()
    out: dict[str, int] = {}
    for sid, owner in rows:
        if sid in v2_sids:
            replica = str(owner).split("/", 1)[0]
            out[replica] = out.get(replica, 0) + 1
    return out


async def scenario(c: Cluster, sessions: int, turns: int, outage: float = 2.0) -> tuple[Stats, str]:
    stats = Stats()
    pg = c.servers[0]
    v2_of = [i % 2 == 1 for i in range(sessions)]
    tasks = [
        asyncio.create_task(_session(i, c.lb_url, turns, stats, v2_of[i])) for i in range(sessions)
    ]
    # kill when every session has had a turn acknowledged and turns are in flight (on a
    # loaded machine one session may start late: wait for it, not for a total)
    while len(stats.acked_by) < sessions and not all(t.done() for t in tasks):
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    v2_sids = {sid for i, sid in stats.sids.items() if v2_of[i]}
    counts = await asyncio.to_thread(_count_sessions, c)
    held = await asyncio.to_thread(_v2_owners, pg.url, v2_sids)
    alive = [name for name in counts if name in held] or list(counts)
    victim = max(alive, key=lambda k: (held.get(k, 0), counts.get(k, 0)))
    c.replicas[victim].send_signal(signal.SIGKILL)
    # once the clients are going again, stop PostgreSQL under them and start it again
    target = stats.acknowledged + 2
    while (stats.acknowledged < target or not stats.reconnected) and not all(
        t.done() for t in tasks
    ):
        await asyncio.sleep(0.05)
    t0 = time.monotonic()
    await asyncio.to_thread(pg.outage)
    await asyncio.sleep(outage)
    await asyncio.to_thread(pg.restart)
    stats.outage = time.monotonic() - t0
    results = await asyncio.gather(*tasks)
    await asyncio.gather(
        *(_verify(c.lb_url, sid, acked, v2_of[i], stats) for i, (sid, acked) in enumerate(results))
    )
    return stats, victim


def run(
    sessions: int, turns: int, outage: float = 2.0, prometheus: bool = False
) -> tuple[Stats, str, float]:
    t0 = time.perf_counter()
    with cluster(3, prometheus) as c:
        stats, victim = asyncio.run(scenario(c, sessions, turns, outage))
        if c.prometheus is not None:
            print(scraped(c.prometheus.url))
    return stats, victim, time.perf_counter() - t0


def scraped(prometheus: str) -> str:
    """What Prometheus read from the replicas (after one more scrape): prompts answered and
    turns ended per replica, lease moves, which replicas it still reaches."""
    import httpx

    time.sleep(2.5)  # the scrape interval is 1 s: let it read what the last turns did

    def query(expr: str, label: str) -> str:
        r = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=5)
        found = r.json()["data"]["result"]
        return ",".join(
            f"{x['metric'].get(label, '?')}:{float(x['value'][1]):g}"
            for x in sorted(found, key=lambda x: str(x["metric"].get(label)))
        )

    prompts = 'sum by (instance) (acp_request_duration_seconds_count{method="session/prompt"})'
    return (
        f"prometheus: prompts={query(prompts, 'instance')} "
        f"turns={query('sum by (stop_reason) (acp_turn_duration_seconds_count)', 'stop_reason')} "
        f"lease_moves={query('sum by (instance) (acp_lease_moves_total)', 'instance')} "
        f"up={query('up', 'instance')}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--outage", type=float, default=2.0, help="seconds PostgreSQL is down")
    ap.add_argument(
        "--prometheus",
        action="store_true",
        help="a Prometheus (Debian's prometheus) scraping the replicas' /metrics",
    )
    a = ap.parse_args()
    gone = [p for p in cs.missing() if p != "prometheus" or a.prometheus]
    if gone:
        print(f"cluster: needs the OS packages {' '.join(gone)} (apt-get install {' '.join(gone)})")
        return 2
    stats, victim, seconds = run(a.sessions, a.turns, a.outage, a.prometheus)
    v2 = a.sessions // 2
    print(
        f"cluster: replicas=3 sessions={a.sessions} v1_sessions={a.sessions - v2} "
        f"v2_sessions={v2} acknowledged_turns={stats.acknowledged} lost={stats.lost} "
        f"killed=1 victim={victim} failed_turns={stats.failed_turns} "
        f"reconnected={stats.reconnected} v2_resumed={stats.v2_reconnected} "
        f"load_retries={stats.lease_waits} pg_outage={stats.outage:.1f}s "
        f"transient_retries={stats.transient_retries} unloadable={stats.unloadable} "
        f"lb=haproxy store=postgresql streams=redis seconds={seconds:.1f}"
    )
    if stats.missing:
        print(f"cluster: not replayed: {' '.join(stats.missing)}")
    return 1 if stats.lost or stats.unloadable else 0


if __name__ == "__main__":
    sys.exit(main())
