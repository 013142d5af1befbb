"""A busy session: N prompts pipelined onto one session, ours against the SDK, same run.

The client writes `initialize`, `session/new`, then N `session/prompt` requests on one
session without waiting, and reads until every prompt is answered. Per agent and N it
reports the wall time until the last answer, whether the answers came in the order sent
and how many were refused (the generated agent refuses past its per-session bound,
`ACP_MAX_QUEUED_PROMPTS`, default 256, with the transient SessionBusy error).

Rows, for N in 250 / 1,000 / 2,000 / 4,000 (interleaved, median of the rounds):
* sdk: bench/agents/sdk_echo.py (the official SDK);
* ours: the generated echo agent, default store (SQLite), the bound raised above N so
  every prompt waits its turn (what the queue costs);
* ours-default: the same agent as a user gets it (bound 256: the rest refused at once).

    .venv/bin/python bench/bench_busy.py [--rounds 3] [--sizes 250,1000,2000,4000]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stdio import PY, REPO, build, commit, loadavg

FIRST = 10  # the first prompt's request id


def drive(cmd: list[str], env: dict[str, str], n: int) -> tuple[float, bool, int]:
    """(seconds from the first prompt written to the last answer read, in order?, refused)."""
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    init = {"protocolVersion": 1, "clientCapabilities": {}}
    head = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init},
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "session/new",
            "params": {"cwd": "/tmp", "mcpServers": []},
        },
    ]
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in head))
    proc.stdin.flush()
    sid = None
    while sid is None:
        msg = json.loads(proc.stdout.readline())
        if msg.get("id") == 1:
            sid = msg["result"]["sessionId"]
    prompts = b"".join(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": FIRST + i,
                "method": "session/prompt",
                "params": {"sessionId": sid, "prompt": [{"type": "text", "text": f"p{i}"}]},
            }
        ).encode()
        + b"\n"
        for i in range(n)
    )
    start = time.perf_counter()
    proc.stdin.write(prompts)
    proc.stdin.flush()
    served: list[int] = []
    refused = 0
    while len(served) + refused < n:
        msg = json.loads(proc.stdout.readline())
        if "method" in msg or type(msg.get("id")) is not int or msg["id"] < FIRST:
            continue
        if "error" in msg:
            refused += 1
        else:
            served.append(msg["id"])
    took = time.perf_counter() - start
    proc.stdin.close()
    proc.wait(30)
    return took, served == sorted(served), refused


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="250,1000,2000,4000")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        root = build(Path(tmp) / "agent")
        base = {**os.environ, "PYTHONPATH": str(root)}
        ours = [PY, "-m", "echo_bench"]
        sdk = [PY, str(REPO / "bench" / "agents" / "sdk_echo.py")]
        before = loadavg()
        table: dict[tuple[str, int], list[tuple[float, bool, int]]] = {}
        for _ in range(args.rounds):
            for n in sizes:
                for label, cmd, extra in (
                    ("sdk", sdk, {}),
                    ("ours", ours, {"ACP_MAX_QUEUED_PROMPTS": str(n + 1)}),
                    ("ours-default", ours, {}),
                ):
                    env = {**base, **extra, "ACP_SESSION_DB": str(Path(tmp) / f"{label}-{n}.db")}
                    Path(env["ACP_SESSION_DB"]).unlink(missing_ok=True)
                    table.setdefault((label, n), []).append(drive(cmd, env, n))
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# A busy session: {now}, commit {commit()}, load {before} -> {loadavg()}")
    print(
        f"# median of {args.rounds} rounds; s = until the last of N pipelined prompts is answered"
    )
    print("| N | sdk s | ours s | ours/sdk | ours in order | ours-default s | refused (default) |")
    print("|---:|---:|---:|---:|---|---:|---:|")
    for n in sizes:
        sdk_s = statistics.median(r[0] for r in table[("sdk", n)])
        ours_s = statistics.median(r[0] for r in table[("ours", n)])
        ordered = all(r[1] for r in table[("ours", n)])
        dflt = table[("ours-default", n)]
        print(
            f"| {n:,} | {sdk_s:.3f} | {ours_s:.3f} | {ours_s / sdk_s:.2f}x | "
            f"{'yes' if ordered else 'NO'} | {statistics.median(r[0] for r in dflt):.3f} | "
            f"{dflt[0][2]:,} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
