"""HTTP serving at scale, one run: a generated HTTP agent against the official SDK's HTTP
server, HTTP/2 against HTTP/1.1, one replica against three behind HAProxy.

    .venv/bin/python bench/bench_scale.py [--prompts 100] [--clients 8] [--procs 2] [--rounds 1]
    .venv/bin/python bench/bench_scale.py --no-cluster --before REV --only "SQLite store (the
        default), HTTP/1.1" --stream-prompts 0 --rounds 6    # a same-run before/after

Every server runs the same echo behaviour (each text block of a prompt comes back as one
``agent_message_chunk``) on 127.0.0.1 and is driven by bench/loadgen.py (a wire-level
client in ``--procs`` processes, so that the driver is not what limits the rate):

* prompts/s: ``--procs`` x ``--clients`` clients, ``--prompts`` one-block prompts each;
* streamed updates/s: 2 clients x ``--stream-prompts`` prompts of ``--blocks`` blocks;
* server CPU per prompt: the server processes' user+system time over the prompts/s load;
  server CPU per update, the same over the streamed load (one load process: updates/s may
  be the driver's own limit, the CPU column is what the server spends).

Rows: the SDK's server (acp.http.asgi on uvicorn, HTTP/1.1, persists nothing); ours (the
golden echo-agent-http project, Hypercorn) with the in-memory store over HTTP/1.1 and HTTP/2,
and with the SQLite default; then ours with PostgreSQL + Redis behind HAProxy, 1 replica and
3 replicas (needs the Debian packages postgresql, redis-server, haproxy).  Ratios are to the
SDK row of the same run (with ``--rounds N``, the single-server rows run N times, the SDK
first in each round: each figure and each ratio to that round's SDK row is the median of
the rounds; one run moves by up to 30%).  ``--before REV``: each of our rows also for the
agent git revision REV renders (``before: ...``, its runtime and generator; the golden
project around it is this checkout's), the two alternating first round by round;
``--only TEXT`` (repeatable) keeps the single-server rows whose name holds TEXT (and the
SDK's); ``--stream-prompts 0`` skips the streamed load.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# the test support modules imported below turn the strict wire check on for the suite
# (tests/conftest.py): a benchmark measures what a user runs, with it off
os.environ["ACP_WIRE_CHECK"] = "0"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import cluster_support as cs  # noqa: E402
from bench_http import cpu_seconds  # noqa: E402
from cluster import _agent_dir  # noqa: E402
from loadgen import run as load  # noqa: E402


def _sdk_serve(port: int) -> None:
    import uvicorn
    from bench_http import _sdk_app

    uvicorn.run(_sdk_app(), host="127.0.0.1", port=port, log_level="warning")


def _start(cmd: list[str], env: dict[str, str], port: int, what: str) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cs._wait_port(port, p, what)
    return p


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def measure(url: str, pids: list[int], args: argparse.Namespace, http2: bool) -> dict[str, float]:
    # warm-up first: what a server does once (ours imports the revision's models at its
    # first session request, ~0.3 s of CPU; the SDK's at start) is not a per-prompt cost
    load(url, procs=1, clients=2, prompts=10, blocks=1, http2=http2)
    cpu0 = sum(cpu_seconds(p) for p in pids)
    a = load(
        url, procs=args.procs, clients=args.clients, prompts=args.prompts, blocks=1, http2=http2
    )
    cpu1 = sum(cpu_seconds(p) for p in pids)
    if args.stream_prompts:
        b = load(
            url, procs=1, clients=2, prompts=args.stream_prompts, blocks=args.blocks, http2=http2
        )
    else:  # skipped: no updates, no CPU
        b = {"updates": float("nan"), "seconds": 1.0}
    cpu2 = sum(cpu_seconds(p) for p in pids)
    return {
        "prompts/s": a["prompts"] / a["seconds"],
        "updates/s": b["updates"] / b["seconds"],
        "cpu ms/prompt": 1000 * (cpu1 - cpu0) / a["prompts"],
        # the streamed load's server CPU per update (its prompts' own cost included): the
        # load generator is one process here, so updates/s can be the driver's rate
        "cpu us/update": 1e6 * (cpu2 - cpu1) / b["updates"],
    }


def _ours_uvicorn(port: int) -> None:
    """The golden project's app (its session store from ACP_SESSION_STORE) under uvicorn."""
    import uvicorn
    from echo_agent._generated.runtime.http.http_server import app_for  # type: ignore[import-not-found]
    from echo_agent.handlers import Agent  # type: ignore[import-not-found]

    uvicorn.run(app_for(Agent), host="127.0.0.1", port=port, log_level="warning")


def one_round(
    args: argparse.Namespace, base: Path, agents: dict[str, Path], n: int
) -> dict[str, Any]:
    """Every single-server row once, the SDK's first (round ``n``: its own store files);
    ``agents``: the agent of each row prefix ("" ours, "before: " the --before one), their
    order alternating round by round."""
    rows: dict[str, dict[str, float]] = {}
    names = list(agents)
    order = ["SDK", *(names if n % 2 == 0 else names[::-1])]
    for k, prefix in enumerate(order):
        for name, cmd, run_env, http2 in _servers(base, agents.get(prefix, base), f"{n}-{k}"):
            if name.startswith("SDK") != (prefix == "SDK"):
                continue
            if args.only and not name.startswith("SDK") and not any(o in name for o in args.only):
                continue
            row = name if prefix == "SDK" else prefix + name
            port = cs.free_port()
            p = _start([*cmd, str(port)], run_env, port, name)
            try:
                rows[row] = measure(f"http://127.0.0.1:{port}/acp", [p.pid], args, http2)
            finally:
                _stop([p])
            print(row, {k: round(v, 2) for k, v in rows[row].items()}, flush=True)
    return rows


def _servers(
    base: Path, agent: Path, n: str
) -> tuple[tuple[str, list[str], dict[str, str], bool], ...]:
    ours = [sys.executable, "-m", "echo_agent", "--port"]
    env = {**os.environ, "PYTHONPATH": str(agent)}

    def store(url: str) -> dict[str, str]:
        return {**env, "ACP_SESSION_STORE": url}

    return (  # (row, command but its port, environment, HTTP/2)
        ("SDK server, HTTP/1.1", [sys.executable, __file__, "--sdk"], dict(os.environ), False),
        ("ours, memory store, HTTP/1.1", ours, store("memory:"), False),
        ("ours, memory store, HTTP/2", ours, store("memory:"), True),
        (
            "ours, SQLite store (the default), HTTP/1.1",
            ours,
            store(f"sqlite:///{base}/s1-{n}.db"),
            False,
        ),
        (
            "ours, SQLite store (the default), HTTP/2",
            ours,
            store(f"sqlite:///{base}/s2-{n}.db"),
            True,
        ),
        (
            "ours, SQLite store, under uvicorn, HTTP/1.1",
            [sys.executable, __file__, "--ours-uvicorn"],
            store(f"sqlite:///{base}/u-{n}.db"),
            False,
        ),
    )


RATIOS = (  # (label, figure)
    ("prompts/s", "prompts/s"),
    ("updates/s", "updates/s"),
    ("CPU a prompt", "cpu ms/prompt"),
    ("CPU an update", "cpu us/update"),
)


def main() -> None:
    if sys.argv[1:2] == ["--sdk"]:
        _sdk_serve(int(sys.argv[2]))
        return
    if sys.argv[1:2] == ["--ours-uvicorn"]:
        _ours_uvicorn(int(sys.argv[2]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=100, help="per client")
    ap.add_argument("--clients", type=int, default=8, help="per load process")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--stream-prompts", type=int, default=10)
    ap.add_argument("--blocks", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=1, help="single-server rounds (medians)")
    ap.add_argument("--no-cluster", action="store_true", help="skip the HAProxy rows")
    ap.add_argument("--before", metavar="REV", help="our rows also as git revision REV renders")
    ap.add_argument("--only", action="append", default=[], metavar="TEXT", help="rows holding it")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="acp-bench-"))
    agents = {"": _agent_dir(base)}
    if args.before:
        from bench_before_after import checkout

        agents["before: "] = _agent_dir(base / "before", checkout(args.before, base / "before-src"))
    print(
        f"bench_scale: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit "
        f"{_commit()}{f' against {args.before}' if args.before else ''}, load average "
        f"{_load()} before",
        flush=True,
    )
    rounds: list[dict[str, Any]] = []
    try:
        for n in range(args.rounds):
            rounds.append(one_round(args, base, agents, n))
        if not args.no_cluster and not cs.missing():
            cluster_rows = _cluster_rows(args)
            for r in rounds:  # each round's SDK row is the peer of these too
                r.update(cluster_rows)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    med = statistics.median
    what = f"median of {args.rounds} rounds, " if args.rounds > 1 else ""
    print(
        f"\n({what}ratios to the SDK row of the same round; load average {_load()} after)\n"
        f"{'server':44} {'prompts/s':>10} {'updates/s':>10} {'CPU ms/prompt':>14} "
        f"{'CPU us/update':>14}"
    )
    for name in rounds[0]:
        r = {k: med(x[name][k] for x in rounds) for k in rounds[0][name]}
        ratio = {
            label: med(x[name][k] / x["SDK server, HTTP/1.1"][k] for x in rounds)
            for label, k in RATIOS
        }
        print(
            f"{name:44} {r['prompts/s']:10.1f} {r['updates/s']:10.1f} {r['cpu ms/prompt']:14.3f}"
            f" {r['cpu us/update']:14.1f}"
            f"   ({ratio['prompts/s']:.2f}x, {ratio['updates/s']:.2f}x, "
            f"CPU/SDK {ratio['CPU a prompt']:.2f}x a prompt, "
            f"{ratio['CPU an update']:.2f}x an update)"
        )
    for name in rounds[0]:
        if "before: " + name not in rounds[0]:
            continue
        cpu = [x[name]["cpu ms/prompt"] / x["before: " + name]["cpu ms/prompt"] for x in rounds]
        print(
            f"after/before, {name}: CPU a prompt {med(cpu):.3f}x (rounds: "
            f"{', '.join(f'{c:.2f}' for c in cpu)})"
        )


def _commit() -> str:
    r = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, check=False
    )
    dirty = subprocess.run(["git", "-C", str(HERE), "diff", "--quiet", "HEAD"], check=False)
    dirty = dirty.returncode
    return r.stdout.decode().strip() + ("+changes" if dirty else "")


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def _cluster_rows(args: argparse.Namespace) -> dict[str, Any]:
    from cluster import cluster

    out = {}
    for n in (1, 3):
        with cluster(n) as c:
            pids = [p.pid for p in c.replicas.values()]
            name = (
                f"ours, {n} replica{'s' if n > 1 else ''} via HAProxy, PostgreSQL+Redis, HTTP/1.1"
            )
            out[name] = measure(c.lb_url, pids, args, False)
            print(name, {k: round(v, 2) for k, v in out[name].items()}, flush=True)
    return out


if __name__ == "__main__":
    main()
