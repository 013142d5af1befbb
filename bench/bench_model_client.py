"""A model turn's cost in the provider's client: the generated stdio agent against a
scripted OpenAI Chat Completions endpoint on 127.0.0.1 over TLS (a self-signed
certificate made here with `openssl`, trusted through `SSL_CERT_FILE` as a bundle of the
system's CAs plus it, so building a client's TLS context costs what it costs against a real
provider), HTTP/1.1 with keep-alive (tests/keepalive_endpoint.py).

Per round, for each kind, interleaved: one agent process, `initialize`, `session/new`, the
route (`providers/set`, apiType `openai`, or the environment: `OPENAI_BASE_URL`), a first
turn (not counted: it imports the model code), a wait until the process is idle (the
warm-up thread done), then `--turns` turns one after another.
Figures, medians of the rounds: the agent's CPU a turn (user + system from /proc, over the
counted turns), a turn's latency (prompt sent -> answer), and the TCP connections the
endpoint accepted a turn.  Kinds: `after` (this checkout's runtime) and, with `--before
REV`, `before` (REV's generator and runtime, rendered from `git archive`).

    .venv/bin/python bench/bench_model_client.py --before main [--rounds 5] [--turns 10]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_stdio import REPO, RawAgent, commit, loadavg

sys.path.insert(0, str(REPO / "tests"))
from keepalive_endpoint import keepalive_endpoint

HANDLERS = """from __future__ import annotations

from typing import Any

from pydantic_ai import Agent as Model

from ._generated.acp import AgentBase, Turn, run_model

MODEL = Model(instructions="Be brief.")


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        await run_model(turn, MODEL, input, provider="main", default_model="openai:gpt-test")
"""
MANIFEST = {
    "name": "model-client",
    "version": "0.1.0",
    "providers": [{"id": "main", "supported": ["openai"], "required": False}],
    "llm": {"provider": "main", "instructions": "Be brief."},
}
MAIN = "from ._generated import run_agent\nfrom .handlers import Agent\n\nrun_agent(Agent, None)\n"
KEY = "sk-bench-client"


def _inputs() -> dict[str, Any]:
    acp = REPO.parent / "shared" / "acp" / "v1"
    return {
        "schema": json.loads((acp / "schema.unstable.json").read_text()),
        "meta": json.loads((acp / "meta.unstable.json").read_text()),
        "manifest": MANIFEST,
    }


def _finish(pkg: Path) -> None:
    (pkg / "__init__.py").write_text("")
    (pkg / "handlers.py").write_text(HANDLERS)
    (pkg / "__main__.py").write_text(MAIN)


def build(dest: Path, package: str) -> None:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from generator.render import render_generated
    from generator.scaffold.project import write_generated

    pkg = dest / package
    write_generated(
        pkg / "_generated",
        render_generated(**_inputs(), role="agent", transport="stdio", package=package),
    )
    _finish(pkg)


def build_before(dest: Path, rev: str, package: str) -> None:
    from bench_before_after import RENDER, checkout

    tree = checkout(rev, dest / "before-tree")
    inputs = dest / "before-inputs.json"
    inputs.write_text(json.dumps(_inputs()))
    pkg = dest / package
    subprocess.run(
        [sys.executable, "-c", RENDER, str(tree), str(pkg), str(inputs)], check=True, cwd=dest
    )
    _finish(pkg)


def certificate(dest: Path) -> tuple[str, str, str]:
    """(cert, key, CA bundle): a self-signed certificate for 127.0.0.1, and the system's
    CAs plus it (what a client's TLS context loads)."""
    cert, key, bundle = dest / "cert.pem", dest / "key.pem", dest / "bundle.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    system = ssl.get_default_verify_paths().openssl_cafile
    cas = Path(system).read_text() if system and Path(system).is_file() else ""
    bundle.write_text(cas + cert.read_text())
    return str(cert), str(key), str(bundle)


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pid: int, quiet: float = 0.3, most: float = 10.0) -> None:
    """Wait until the process has used no CPU for `quiet` s: the warm-up thread (route.py
    `warm`, which for a routed manifest imports Anthropic's client as well) is done, so
    its import is not counted in the turns."""
    end = time.monotonic() + most
    last = cpu_of(pid)
    while time.monotonic() < end:
        time.sleep(quiet)
        now = cpu_of(pid)
        if now == last:
            return
        last = now


def one(env: dict[str, str], cwd: str, package: str, url: str, via: str, turns: int) -> Any:
    """(CPU s a turn, [latency s of each turn]) over `turns` turns after the first."""
    agent = RawAgent(package, env, cwd)
    proc = agent.proc

    def call(method: str, params: Any) -> dict[str, Any]:
        got = agent.call(method, params)
        assert "error" not in got, got
        return dict(got["result"])

    call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    sid = call("session/new", {"cwd": cwd, "mcpServers": []})["sessionId"]
    if via == "route":
        headers = {"Authorization": f"Bearer {KEY}"}
        call(
            "providers/set",
            {"providerId": "main", "apiType": "openai", "baseUrl": url, "headers": headers},
        )
    prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}
    call("session/prompt", prompt)  # the first turn: the model code's import
    settle(proc.pid)
    cpu = cpu_of(proc.pid)
    took = []
    for _ in range(turns):
        sent = time.perf_counter()
        assert call("session/prompt", prompt)["stopReason"] == "end_turn"
        took.append(time.perf_counter() - sent)
    cpu = (cpu_of(proc.pid) - cpu) / turns
    agent.close()
    return cpu, took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--via", action="append", choices=["route", "env"])
    ap.add_argument("--before", metavar="REV", help="also REV's runtime, as kind `before`")
    a = ap.parse_args()
    vias = a.via or ["route", "env"]
    with tempfile.TemporaryDirectory() as tmp:
        cert, key, bundle = certificate(Path(tmp))
        build(Path(tmp), "client_after")
        kinds = [("after", "client_after")]
        if a.before:
            build_before(Path(tmp), a.before, "client_before")
            kinds.insert(0, ("before", "client_before"))
        print(
            f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}"
            + (f" (before: {a.before})" if a.before else "")
            + f", load {loadavg()}; {a.rounds} rounds x {a.turns} turns, TLS on 127.0.0.1"
        )
        with keepalive_endpoint(tls=(cert, key)) as ep:
            base = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
            base.update({"PYTHONPATH": tmp, "SSL_CERT_FILE": bundle})
            base.update({"ACP_SESSION_STORE": "memory:"})
            base.pop("ACP_MODEL", None)
            for via in vias:
                env = dict(base)
                if via == "env":
                    env.update({"OPENAI_BASE_URL": ep.url, "OPENAI_API_KEY": KEY})
                cpus: dict[str, list[float]] = {k: [] for k, _ in kinds}
                lats: dict[str, list[float]] = {k: [] for k, _ in kinds}
                conns: dict[str, list[int]] = {k: [] for k, _ in kinds}
                for _ in range(a.rounds):
                    for kind, package in kinds:
                        before = len(ep.connections)
                        cpu, took = one(env, tmp, package, ep.url, via, a.turns)
                        cpus[kind].append(cpu)
                        lats[kind].extend(took)
                        conns[kind].append(len(ep.connections) - before)
                for kind, _ in kinds:
                    print(
                        f"{via:5} {kind:6}: CPU a turn {statistics.median(cpus[kind]) * 1000:.1f} ms"
                        f" (rounds {', '.join(f'{c * 1000:.1f}' for c in cpus[kind])}); latency"
                        f" median {statistics.median(lats[kind]) * 1000:.1f} ms"
                        f" (p90 {statistics.quantiles(lats[kind], n=10)[-1] * 1000:.1f});"
                        f" connections a turn"
                        f" {statistics.mean(conns[kind]) / (a.turns + 1):.2f}"
                    )
                if a.before:
                    cpu = statistics.median(cpus["after"]) / statistics.median(cpus["before"])
                    lat = statistics.median(lats["after"]) / statistics.median(lats["before"])
                    print(f"{via:5} after/before: CPU {cpu:.2f}x, latency {lat:.2f}x")
        print(f"load {loadavg()}")


if __name__ == "__main__":
    main()
