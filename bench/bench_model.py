"""A model's turn through each agent: the generated agent (`run_model`) against ACP Kit
(`pydantic-acp` 1.10.0), both serving the same pydantic-ai agent and scripted model
(bench/agents/model_script.py: FunctionModel, no network), over stdio, same run.

Two loads, each a few turns on one session, turns one after another (v1: the answer ends
the turn): `deltas 2000` (2,000 streamed text deltas a turn) and `tools 45` (45 model
tool calls a turn).  Per agent: the agent process's CPU for the turns (user + system from
/proc, after the session is open), per streamed delta and per tool call, and the median
turn latency.  ACP Kit runs in its own venv (`--pacp-python`, default /tmp/pacp/bin/python:
`python -m venv /tmp/pacp && /tmp/pacp/bin/pip install pydantic-acp==1.10.0`).

    .venv/bin/python bench/bench_model.py [--turns 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_stdio import REPO, commit, loadavg

AGENTS = REPO / "bench" / "agents"
HANDLERS = '''"""The scripted model of bench/agents/model_script.py, run as each turn."""

from __future__ import annotations

import sys
from typing import Any

from ._generated.acp import AgentBase, Turn, run_model

sys.path.insert(0, {agents!r})
from model_script import make_agent  # noqa: E402

MODEL = make_agent()


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        await run_model(turn, MODEL, input)
'''
MANIFEST = {"name": "model-bench", "version": "0.1.0", "llm": {"instructions": "Work."}}


def build(dest: Path) -> Path:
    if str(REPO) not in sys.path:  # run as `.venv/bin/python bench/bench_model.py`
        sys.path.insert(0, str(REPO))
    from generator.render import render_generated
    from generator.scaffold.project import write_generated

    schema = json.loads((REPO.parent / "shared" / "acp" / "v1" / "schema.json").read_text())
    files = render_generated(
        schema=schema,
        meta=None,
        manifest=MANIFEST,
        role="agent",
        transport="stdio",
        package="model_bench",
    )
    pkg = dest / "model_bench"
    write_generated(pkg / "_generated", files)
    (pkg / "__init__.py").write_text("")
    (pkg / "handlers.py").write_text(HANDLERS.format(agents=str(AGENTS)))
    (pkg / "__main__.py").write_text(
        "from ._generated import run_agent\nfrom .handlers import Agent\n\nrun_agent(Agent, None)\n"
    )
    return dest


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drive(cmd: list[str], env: dict[str, str], prompt: str, turns: int) -> dict[str, Any]:
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    rid = 0

    def call(method: str, params: Any) -> tuple[dict[str, Any], int]:
        nonlocal rid
        rid += 1
        proc.stdin.write(
            json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode()
            + b"\n"
        )  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        updates = 0
        while True:
            msg = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
            if msg.get("id") == rid and "method" not in msg:
                return msg, updates
            if msg.get("method") == "session/update":
                updates += 1
            elif "method" in msg and "id" in msg:  # a request we do not serve
                proc.stdin.write(
                    json.dumps(
                        {
                            "jsonrpc": "2.0",
                            "id": msg["id"],
                            "error": {"code": -32601, "message": "no"},
                        }
                    ).encode()
                    + b"\n"
                )  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]

    call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    sid = call("session/new", {"cwd": "/tmp", "mcpServers": []})[0]["result"]["sessionId"]
    before = cpu_seconds(proc.pid)
    latencies = []
    total_updates = 0
    for _ in range(turns):
        start = time.perf_counter()
        answer, updates = call(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": prompt}]}
        )
        latencies.append(time.perf_counter() - start)
        assert answer.get("result", {}).get("stopReason") == "end_turn", answer
        total_updates += updates
    cpu = cpu_seconds(proc.pid) - before
    proc.stdin.close()
    proc.wait(30)
    return {"cpu": cpu, "latency": statistics.median(latencies), "updates": total_updates}


def bare(python: str, prompt: str, turns: int) -> dict[str, Any]:
    """The ceiling: pydantic-ai alone runs the same turns (bench/agents/model_bare.py)."""
    out = subprocess.run(
        [python, str(AGENTS / "model_bare.py"), prompt, str(turns)],
        capture_output=True,
        text=True,
        check=True,
    )
    return {"cpu": float(out.stdout.strip()), "latency": float("nan"), "updates": 0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pacp-python", default="/tmp/pacp/bin/python")
    args = ap.parse_args()
    if not Path(args.pacp_python).exists():
        print(f"no {args.pacp_python}: see this script's docstring", file=sys.stderr)
        return 2
    loads = {"deltas": ("deltas 2000", 2000), "tools": ("tools 45", 45)}
    with tempfile.TemporaryDirectory() as tmp:
        root = build(Path(tmp))
        ours = (
            [args.pacp_python, "-m", "model_bench"],
            {**os.environ, "PYTHONPATH": str(root), "ACP_SESSION_DB": str(Path(tmp) / "s.db")},
        )
        kit = ([args.pacp_python, str(AGENTS / "pacp_agent.py")], {**os.environ, "HOME": tmp})
        before = loadavg()
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for _ in range(args.rounds):
            for load, (prompt, _n) in loads.items():
                for label, (cmd, env) in (("pydantic-acp", kit), ("ours", ours)):
                    runs.setdefault((label, load), []).append(drive(cmd, env, prompt, args.turns))
                ceiling = bare(args.pacp_python, prompt, args.turns)
                runs.setdefault(("bare", load), []).append(ceiling)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# A model's turn: {now}, commit {commit()}, load {before} -> {loadavg()}")
    print(
        f"# {args.turns} turns a load, median of {args.rounds} rounds; CPU after the session opened"
    )
    print(
        "| load | pydantic-ai alone (ceiling) | pydantic-acp | ours | ours/pydantic-acp "
        "| above the ceiling, ours/pydantic-acp | latency pydantic-acp | latency ours "
        "| updates/turn (kit, ours) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for load, (_prompt, n) in loads.items():
        per: dict[str, float] = {}
        lat: dict[str, float] = {}
        upd: dict[str, int] = {}
        for label in ("bare", "pydantic-acp", "ours"):
            rs = runs[(label, load)]
            per[label] = statistics.median(r["cpu"] for r in rs) / (args.turns * n)
            lat[label] = statistics.median(r["latency"] for r in rs)
            upd[label] = rs[0]["updates"] // args.turns
        above = (per["ours"] - per["bare"]) / max(per["pydantic-acp"] - per["bare"], 1e-9)
        unit = "delta" if load == "deltas" else "tool call"
        print(
            f"| {n} {load} a turn (per {unit}) | {per['bare'] * 1e6:.0f} us "
            f"| {per['pydantic-acp'] * 1e6:.0f} us | {per['ours'] * 1e6:.0f} us "
            f"| {per['ours'] / per['pydantic-acp']:.2f}x | {above:.2f}x "
            f"| {lat['pydantic-acp'] * 1e3:.0f} ms | {lat['ours'] * 1e3:.0f} ms "
            f"| {upd['pydantic-acp']}, {upd['ours']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
