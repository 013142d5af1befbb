"""Which ASGI server runs a generated HTTP agent: the same echo agent app under each server,
driven by the same load generator (bench/loadgen.py, several processes), one run.

    .venv/bin/python bench/bench_servers.py [--prompts 150] [--clients 8] [--procs 2]

Servers (each in its own subprocess on 127.0.0.1, our session store in memory so the disk is
not measured): uvicorn (HTTP/1.1 only), Hypercorn (HTTP/1.1 and h2c), Granian (HTTP/1.1 and
HTTP/2, embedded server).  Prints prompts/s, streamed updates/s and server CPU per prompt for
each, and each figure as a ratio to uvicorn HTTP/1.1 (today's server).  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_http import _ours_app, cpu_seconds, free_port  # noqa: E402
from loadgen import run as load  # noqa: E402

# (name, server, the protocol the load generator speaks)
CASES = [
    ("uvicorn h1", "uvicorn", False),
    ("hypercorn h1", "hypercorn", False),
    ("hypercorn h2c", "hypercorn", True),
    ("granian h1", "granian", False),
    ("granian h2c", "granian", True),
]


def serve(server: str, port: int) -> None:
    app: Any = _ours_app()
    if server == "uvicorn":
        import uvicorn

        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    elif server == "hypercorn":
        from hypercorn.asyncio import serve as hserve
        from hypercorn.config import Config

        cfg = Config()
        cfg.bind = [f"127.0.0.1:{port}"]
        cfg.accesslog = None
        asyncio.run(hserve(app, cfg))
    else:
        from granian.constants import HTTPModes, Interfaces
        from granian.server.embed import Server

        g = Server(app, address="127.0.0.1", port=port, interface=Interfaces.ASGI)
        g.http = HTTPModes.auto
        asyncio.run(g.serve())


def measure(server: str, http2: bool, args: argparse.Namespace) -> dict[str, float]:
    port = free_port()
    env = {**os.environ, "ACP_SESSION_DB": ":memory:"}
    proc = subprocess.Popen([sys.executable, __file__, "--serve", server, str(port)], env=env)
    try:
        url = f"http://127.0.0.1:{port}/acp"
        _wait(port, proc)
        cpu0 = cpu_seconds(proc.pid)
        a = load(
            url,
            procs=args.procs,
            clients=args.clients,
            prompts=args.prompts,
            blocks=1,
            http2=http2,
        )
        cpu1 = cpu_seconds(proc.pid)
        b = load(
            url, procs=1, clients=2, prompts=args.stream_prompts, blocks=args.blocks, http2=http2
        )
        return {
            "prompts/s": a["prompts"] / a["seconds"],
            "updates/s": b["updates"] / b["seconds"],
            "cpu ms/prompt": 1000 * (cpu1 - cpu0) / a["prompts"],
        }
    finally:
        proc.terminate()
        proc.wait(10)


def _wait(port: int, proc: subprocess.Popen[bytes]) -> None:
    import socket

    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("server did not start") from None
            time.sleep(0.05)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=150, help="per client")
    ap.add_argument("--clients", type=int, default=8, help="per load process")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--stream-prompts", type=int, default=10)
    ap.add_argument("--blocks", type=int, default=300)
    ap.add_argument("--only", nargs="*", help="case names to run")
    args = ap.parse_args()
    rows = {}
    for name, server, http2 in CASES:
        if args.only and name not in args.only:
            continue
        rows[name] = measure(server, http2, args)
        print(name, {k: round(v, 2) for k, v in rows[name].items()}, flush=True)
    base = rows.get("uvicorn h1")
    print(f"\n{'server':15} {'prompts/s':>10} {'updates/s':>10} {'CPU ms/prompt':>14}")
    for name, r in rows.items():
        ratio = (
            f"   ({r['prompts/s'] / base['prompts/s']:.2f}x, {r['updates/s'] / base['updates/s']:.2f}x"
            f", {r['cpu ms/prompt'] / base['cpu ms/prompt']:.2f}x CPU vs uvicorn h1)"
            if base
            else ""
        )
        print(
            f"{name:15} {r['prompts/s']:10.1f} {r['updates/s']:10.1f} {r['cpu ms/prompt']:14.2f}"
            + ratio
        )


if __name__ == "__main__":
    main()
