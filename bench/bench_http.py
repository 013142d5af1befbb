"""HTTP transport benchmark: our HTTP agent vs the official SDK's HTTP server, one run.

Both servers run the same echo behaviour (each text block of a prompt comes back as one
``agent_message_chunk``) under uvicorn in their own subprocess on 127.0.0.1; the same
driver -- the official SDK's Streamable HTTP client -- gives both the same load:

* prompts/s: ``--prompts`` prompts of one block each, ``--sessions`` sessions in parallel;
* streamed updates/s: ``--stream-prompts`` prompts of ``--blocks`` blocks each.

Prints the figures and our/SDK ratios (targets: >= 1.0 prompts/s, >= 1.5 updates/s).
No figure is asserted anywhere; run: ``.venv/bin/python bench/bench_http.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]


def _ours_app() -> Any:
    sys.path.insert(0, str(ROOT / "templates"))
    from runtime.agent.agent import AgentRuntime
    from runtime.http.http_server import app_for

    sys.path.insert(0, str(ROOT))
    from agentgen.protocol.revision import describe
    from agentgen.sources import load_schema

    revision = describe(load_schema(None).data)

    class Echo(AgentRuntime):
        REVISIONS = (revision,)
        _acp_manifest = {"name": "bench-echo", "version": "0"}  # noqa: RUF012

        async def prompt(self, turn: Any, input: Any) -> Any:
            for block in input:
                await turn.send_text(block.get("text", ""))

    return app_for(Echo)


def _sdk_app() -> Any:
    from acp import schema as S
    from acp.helpers import update_agent_message_text
    from acp.http.asgi import create_asgi_app

    class Echo:
        def __init__(self, conn: Any) -> None:
            self.conn = conn
            self.n = 0

        async def initialize(self, protocol_version: int, **kw: Any) -> Any:
            return S.InitializeResponse(protocol_version=protocol_version)

        async def new_session(self, cwd: str, mcp_servers: Any = None, **kw: Any) -> Any:
            self.n += 1
            return S.NewSessionResponse(session_id=f"s{self.n}")

        async def prompt(self, prompt: list[Any], session_id: str, **kw: Any) -> Any:
            for block in prompt:
                await self.conn.session_update(session_id, update_agent_message_text(block.text))
            return S.PromptResponse(stop_reason="end_turn")

        async def cancel(self, session_id: str, **kw: Any) -> None:
            return None

        def on_connect(self, conn: Any) -> None:
            self.conn = conn

    return create_asgi_app(Echo)


def serve(which: str, port: int) -> None:
    import uvicorn

    app = _ours_app() if which == "ours" else _sdk_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Counter:
    def __init__(self) -> None:
        self.updates = 0

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        self.updates += 1


async def drive(
    url: str, prompts: int, sessions: int, stream_prompts: int, blocks: int
) -> tuple[float, float]:
    import acp
    from acp import schema as S
    from acp.http.client import create_http_stream

    async def one_session(n_prompts: int, n_blocks: int) -> tuple[int, float]:
        c = Counter()
        transport = create_http_stream(url, client=httpx.AsyncClient(timeout=None))
        conn = acp.connect_to_agent(c, transport)
        await conn.initialize(protocol_version=1)
        sess = await conn.new_session(cwd="/tmp", mcp_servers=[])
        prompt = [
            S.TextContentBlock(type="text", text=f"block {i} " + "x" * 40) for i in range(n_blocks)
        ]
        t0 = time.perf_counter()
        for _ in range(n_prompts):
            await conn.prompt(session_id=sess.session_id, prompt=prompt)
        dt = time.perf_counter() - t0
        await conn.close()
        return c.updates, dt

    t0 = time.perf_counter()
    await asyncio.gather(*(one_session(prompts // sessions, 1) for _ in range(sessions)))
    prompts_per_s = prompts // sessions * sessions / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    updates, _ = await one_session(stream_prompts, blocks)
    updates_per_s = updates / (time.perf_counter() - t0)
    assert updates == stream_prompts * blocks, (updates, stream_prompts * blocks)
    return prompts_per_s, updates_per_s


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(which: str, args: argparse.Namespace) -> tuple[float, float, float]:
    port = free_port()
    db = args.session_db or str(Path(tempfile.mkdtemp()) / "bench.db")
    env = {**os.environ, "ACP_SESSION_DB": db}
    proc = subprocess.Popen([sys.executable, __file__, "--serve", which, str(port)], env=env)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"{which} server did not start") from None
                time.sleep(0.05)
        url = f"http://127.0.0.1:{port}/acp"
        cpu0 = cpu_seconds(proc.pid)
        rates = asyncio.run(
            drive(url, args.prompts, args.sessions, args.stream_prompts, args.blocks)
        )
        return (*rates, cpu_seconds(proc.pid) - cpu0)
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=1000)
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--stream-prompts", type=int, default=20)
    ap.add_argument("--blocks", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--session-db",
        help="our session store (default: a SQLite file, every turn saved; ':memory:' "
        "measures the transport without the disk: the SDK server persists nothing)",
    )
    args = ap.parse_args()
    results: dict[str, list[tuple[float, float, float]]] = {"ours": [], "sdk": []}
    for _ in range(args.rounds):  # interleaved so both see the same machine load
        for which in ("sdk", "ours"):
            results[which].append(run(which, args))
    best = {
        k: (max(r[0] for r in v), max(r[1] for r in v), min(r[2] for r in v))
        for k, v in results.items()
    }
    print(
        f"load: {args.prompts} prompts over {args.sessions} sessions; "
        f"{args.stream_prompts} prompts x {args.blocks} blocks streamed; best of {args.rounds}"
    )
    for k in ("ours", "sdk"):
        print(
            f"{k:5} prompts/s {best[k][0]:9.1f}   streamed updates/s {best[k][1]:10.1f}"
            f"   server CPU for the whole load {best[k][2]:6.2f} s"
        )
    print(
        f"ratio prompts/s {best['ours'][0] / best['sdk'][0]:.2f}x (target >= 1.0)   "
        f"streamed updates/s {best['ours'][1] / best['sdk'][1]:.2f}x (target >= 1.5)   "
        f"server CPU {best['sdk'][2] / best['ours'][2]:.2f}x less"
    )
    print(
        "(prompts/s is bounded by the shared SDK client driving both servers: the server "
        "CPU time is what each server spent on the same load)"
    )


if __name__ == "__main__":
    main()
