"""The first turn of a fresh model agent answering a 429 (issue 36: "a 429 with
`Retry-After: 7` answers within 1 s").  A generated stdio agent whose model is
`openai:gpt-test` through `OPENAI_BASE_URL`, a scripted Chat Completions endpoint on
127.0.0.1 answering every request `429 Retry-After: 7`; per round a fresh agent process
of each kind, interleaved: `warm` (the runtime as it is: the model code imported in a
background thread once `initialize` is answered, model/route.py `warm`) and `cold` (the
same agent with `warm` replaced by a no-op: the runtime before, importing it in the
first turn):
`initialize`, `session/new`, then the first `session/prompt`, either at once or after a
pause (`--pause`, an editor's user typing the prompt); the figure is the time from
sending the prompt to its answer (the JSON-RPC error with `retry_after`), and the
`initialize` answer's time from the process start (and the process's CPU time by then,
from /proc: steadier than wall time on a loaded machine).  Medians of the rounds.

    .venv/bin/python bench/bench_first_429.py [--rounds 7] [--pause 0 --pause 1.5]
    .venv/bin/python bench/bench_first_429.py --before main   # + `before`: REV's runtime

`--before REV` adds a third kind, interleaved with the two: the agent as git revision REV
renders it (its generator and runtime, its own warm-up), for a same-run before/after.
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
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench_stdio import REPO, RawAgent, commit, loadavg

HANDLERS = """from __future__ import annotations

from typing import Any

from pydantic_ai import Agent as Model

from ._generated.acp import AgentBase, Turn, run_model

MODEL = Model(instructions="Be brief.")


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        await run_model(turn, MODEL, input, default_model="openai:gpt-test")
"""
RETRY_AFTER = 7  # what the endpoint says
MANIFEST = {"name": "first-429", "version": "0.1.0", "llm": {"instructions": "Be brief."}}


class Limited(BaseHTTPRequestHandler):
    requests = 0

    def log_message(self, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).requests += 1
        body = json.dumps({"error": {"message": "slow down"}}).encode()
        self.send_response(429)
        self.send_header("Retry-After", "7")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def build(dest: Path, package: str = "first_429", cold: bool = False) -> Path:
    if str(REPO) not in sys.path:
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
        package=package,
    )
    pkg = dest / package
    write_generated(pkg / "_generated", files)
    if cold:  # the runtime before: no warm-up, the first turn imports the model code
        route = pkg / "_generated" / "runtime" / "model" / "route.py"
        route.write_text(route.read_text() + "\n\ndef warm(llm: Any) -> None:\n    return None\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "handlers.py").write_text(HANDLERS)
    (pkg / "__main__.py").write_text(
        "from ._generated import run_agent\nfrom .handlers import Agent\n\nrun_agent(Agent, None)\n"
    )
    return dest


def build_before(dest: Path, rev: str, package: str = "first_429_before") -> None:
    """`package` under `dest` as git revision `rev`'s generator and runtime render it."""
    from bench_before_after import RENDER, checkout

    tree = checkout(rev, dest / "before-tree")
    schema = json.loads((REPO.parent / "shared" / "acp" / "v1" / "schema.json").read_text())
    inputs = dest / "before-inputs.json"
    inputs.write_text(json.dumps({"schema": schema, "meta": None, "manifest": MANIFEST}))
    pkg = dest / package
    subprocess.run(
        [sys.executable, "-c", RENDER, str(tree), str(pkg), str(inputs)], check=True, cwd=dest
    )
    (pkg / "__init__.py").write_text("")
    (pkg / "handlers.py").write_text(HANDLERS)
    (pkg / "__main__.py").write_text(
        "from ._generated import run_agent\nfrom .handlers import Agent\n\nrun_agent(Agent, None)\n"
    )


def cpu_of(pid: int) -> float:
    """The process's CPU time so far (user + system, s; Linux's /proc, 10 ms ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one(
    env: dict[str, str], cwd: str, pause: float, package: str
) -> tuple[float, float, float, Any]:
    """(initialize answered after s, the process's CPU s by then, prompt answered after
    s, the answer's error data)."""
    start = time.perf_counter()
    agent = RawAgent(package, env, cwd)
    call, proc = agent.call, agent.proc

    call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    init = time.perf_counter() - start
    init_cpu = cpu_of(proc.pid)
    sid = call("session/new", {"cwd": cwd, "mcpServers": []})["result"]["sessionId"]
    time.sleep(pause)
    sent = time.perf_counter()
    answer = call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]})
    took = time.perf_counter() - sent
    agent.close()
    return init, init_cpu, took, answer.get("error", {}).get("data")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--pause", type=float, action="append")
    ap.add_argument("--before", metavar="REV", help="also REV's runtime, as kind `before`")
    a = ap.parse_args()
    pauses = a.pause or [0.0, 1.5]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Limited)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp))
        build(Path(tmp), "first_429_cold", cold=True)
        kinds = [("cold", "first_429_cold"), ("warm", "first_429")]
        if a.before:
            build_before(Path(tmp), a.before)
            kinds.insert(1, ("before", "first_429_before"))
        env = {
            **os.environ,
            "PYTHONPATH": tmp,
            "OPENAI_BASE_URL": url,
            "OPENAI_API_KEY": "sk-bench",
            "ACP_SESSION_STORE": "memory:",
        }
        env.pop("ACP_MODEL", None)
        print(
            f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}"
            + (f" (before: {a.before})" if a.before else "")
            + f", load {loadavg()}"
        )
        for pause in pauses:
            inits: dict[str, list[float]] = {kind: [] for kind, _ in kinds}
            takes: dict[str, list[float]] = {kind: [] for kind, _ in kinds}
            cpus: dict[str, list[float]] = {kind: [] for kind, _ in kinds}
            Limited.requests = 0
            for _ in range(a.rounds):
                for kind, package in kinds:
                    init, init_cpu, took, data = one(env, tmp, pause, package)
                    assert data and data.get("retry_after") == RETRY_AFTER, data
                    inits[kind].append(init)
                    cpus[kind].append(init_cpu)
                    takes[kind].append(took)
            for kind, _ in kinds:
                print(
                    f"{kind}: prompt {pause:g} s after session/new: the 429 answered in "
                    f"{statistics.median(takes[kind]) * 1000:.0f} ms "
                    f"(min {min(takes[kind]) * 1000:.0f}); initialize answered "
                    f"{statistics.median(inits[kind]) * 1000:.0f} ms after start "
                    f"(its CPU {statistics.median(cpus[kind]) * 1000:.0f} ms)"
                )
            ratio = statistics.median(takes["warm"]) / statistics.median(takes["cold"])
            vs = ""
            if a.before:
                before = statistics.median(takes["before"])
                vs = f", warm/before: {statistics.median(takes['warm']) / before:.2f}"
            print(
                f"  warm/cold: {ratio:.2f}{vs}; requests to the endpoint "
                f"{Limited.requests / (len(kinds) * a.rounds):g} a turn; load {loadavg()}"
            )
    server.shutdown()


if __name__ == "__main__":
    main()
