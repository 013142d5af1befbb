"""stdio benchmark: the generated echo agent against the official SDK and a ceiling.

Renders the echo agent's `_generated/` package into a temporary directory (from
examples/echo/agent.yaml when present) and drives, with ../shared/tools/acpbench.py,
for each load and interleaved round by round:

* the generated agent with its default session store (SQLite, a fresh file per run);
* the same agent with the memory store (``ACP_SESSION_STORE=memory:``);
* bench/agents/sdk_echo.py, the same echo on the official SDK;
* bench/agents/ceiling_echo.py, stdlib only, no validation, no store: the ceiling;
* with ``--bound``, one more row, ``append``: the generated agent on the memory store
  plus one ``os.write`` of each finished turn (its session, state and messages) to a
  file before the turn is answered.  A store that answers a turn once the OS holds it
  (what SQLite's WAL with ``synchronous=NORMAL`` gives) does at least the memory
  store's work and such a write (a group of turns may share one), whatever it does
  later: this row is about the most any such durable design reaches.

It prints one table (date, commit, load average before and after; the median
prompts/s of the rounds; ratios to the SDK and to the ceiling), then the import time
of the generated agent vs `import acp`.

    .venv/bin/python bench/bench_stdio.py [--quick] [--rounds 3]
    .venv/bin/python bench/bench_stdio.py --only sqlite --store-py old=/path/store.py

``--store-py LABEL=PATH`` adds a row: the generated agent (default SQLite store) with
its runtime's store.py replaced by PATH (to compare a store change in the same run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
ACPBENCH = SHARED / "tools" / "acpbench.py"
SCHEMA = SHARED / "acp" / "v1" / "schema.json"
META = SHARED / "acp" / "v1" / "meta.json"
PY = sys.executable

HANDLERS = '''"""Echo: each text block streamed back as one agent_message_chunk."""

from __future__ import annotations

from typing import Any

from ._generated import AgentBase, Turn  # (what every agentgen version exports there)


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        for block in input:
            if block.get("type") == "text":
                await turn.send_text(block["text"])
'''

BOUND = '''"""The echo agent on the memory store plus one append of each finished turn
to a file, before the turn is answered (bench_stdio.py --bound)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import orjson

from ._generated.runtime.serve import serve_agent_stdio
from ._generated.runtime.sessions.store import MemorySessionStore
from .handlers import Agent


class AppendStore(MemorySessionStore):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    async def save_turn(
        self, session_id: str, state: dict[str, Any], messages: list[bytes], *, owner: Any = None
    ) -> bool:
        if not await super().save_turn(session_id, state, messages, owner=owner):
            return False
        record = b"\\n".join([session_id.encode(), orjson.dumps(state), *messages])
        os.write(self.fd, len(record).to_bytes(4, "little") + record)
        return True


asyncio.run(serve_agent_stdio(Agent(), store=AppendStore(os.environ["ACP_BOUND_FILE"])))
'''

BASE_PROMPTS = 4  # a run this short measures start-up (subtracted from the CPU figures)
LOADS = [
    ("--prompts 2000", ["--prompts", "2000"]),
    ("--sessions 8", ["--prompts", "2000", "--sessions", "8"]),
    ("--blocks 50", ["--prompts", "1000", "--blocks", "50"]),
    ("--size 4000000", ["--prompts", "40", "--size", "4000000"]),
]


def echo_manifest() -> dict:
    path = REPO / "examples" / "echo" / "agent.yaml"
    if path.is_file():
        sys.path.insert(0, str(REPO))
        from agentgen.manifest.load import load_manifest

        return load_manifest(path).data
    return {"name": "echo", "version": "0.1.0", "title": "Echo"}


def build(dest: Path, package: str = "echo_bench", store_py: Path | None = None) -> Path:
    sys.path.insert(0, str(REPO))
    from agentgen.render import render_generated
    from agentgen.scaffold.project import write_generated

    files = render_generated(
        schema=json.loads(SCHEMA.read_text()),
        meta=json.loads(META.read_text()),
        manifest=echo_manifest(),
        role="agent",
        transport="stdio",
        package=package,
    )
    pkg = dest / package
    write_generated(pkg / "_generated", files)
    if store_py is not None:
        shutil.copyfile(store_py, pkg / "_generated" / "runtime" / "sessions" / "store.py")
    (pkg / "__init__.py").write_text("")
    (pkg / "handlers.py").write_text(HANDLERS)
    (pkg / "bound.py").write_text(BOUND)
    (pkg / "__main__.py").write_text(
        "from ._generated import run_agent\nfrom .handlers import Agent\n\nrun_agent(Agent, None)\n"
    )
    return dest


WRAP = REPO / "bench" / "agents" / "cpu_wrap.py"


def acpbench(args: list[str], cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """prompts/s, and the CPU seconds the agent process used (start-up included)."""
    with tempfile.NamedTemporaryFile("r") as cpu:
        rate = _acpbench(args, [PY, str(WRAP), cpu.name, "--", *cmd], env)
        return rate, float(cpu.read() or "nan")


def _acpbench(args: list[str], cmd: list[str], env: dict[str, str]) -> float:
    out = subprocess.run(
        [PY, str(ACPBENCH), "--timeout", "120", *args, "--", *cmd],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    ).stdout
    m = re.search(r"prompts_per_s=([0-9.]+)", out)
    fail = re.search(r"failures=(\d+)", out)
    if not m or not fail or fail.group(1) != "0":
        raise SystemExit(f"acpbench failed for {cmd}:\n{out}")
    return float(m.group(1))


def import_time(stmt: str, env: dict[str, str], runs: int = 7) -> float:
    code = f"import time; t = time.perf_counter(); {stmt}; print(time.perf_counter() - t)"
    best = float("inf")
    for _ in range(runs):
        r = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, check=True)
        best = min(best, float(r.stdout.strip()))
    return best


def commit() -> str:
    def git(*args: str) -> str:
        r = subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False
        )
        return r.stdout.strip()

    dirty = "+changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    return (git("rev-parse", "--short", "HEAD") or "?") + dirty


class RawAgent:
    """A generated stdio agent (``python -m package``) driven one request at a time over
    JSON lines, as an editor would; its stderr dropped."""

    def __init__(self, package: str, env: dict[str, str], cwd: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", package],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
        )
        self._rid = 0

    def call(self, method: str, params: Any) -> dict[str, Any]:
        """The whole answer (``result`` or ``error``); notifications before it skipped."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._rid += 1
        msg = {"jsonrpc": "2.0", "id": self._rid, "method": method, "params": params}
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()
        while True:
            got = json.loads(self.proc.stdout.readline())
            if got.get("id") == self._rid and "method" not in got:
                return dict(got)

    def close(self) -> None:
        """End of input: the agent exits."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def loadavg() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def quick_args(load_args: list[str]) -> list[str]:
    return [
        str(max(2 * BASE_PROMPTS, int(a) // 10)) if a.isdigit() and prev == "--prompts" else a
        for prev, a in zip(["", *load_args], load_args, strict=False)
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of the prompts")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    ap.add_argument("--only", action="append", default=[], help="a row to run (repeatable)")
    ap.add_argument("--load", action="append", default=[], help="a load label to run")
    ap.add_argument("--store-py", action="append", default=[], metavar="LABEL=PATH")
    ap.add_argument("--bound", action="store_true", help="add the append row (see above)")
    ap.add_argument("--json", help="also write the table's figures here (bench/run_all.py)")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = build(Path(tmp))
        env = {**os.environ, "PYTHONPATH": str(root)}
        env.pop("ACP_SESSION_STORE", None)
        db = Path(tmp) / "db"
        rows: dict[str, tuple[list[str], dict[str, str]]] = {
            "sqlite": ([PY, "-m", "echo_bench"], {**env, "ACP_SESSION_DB": str(db / "s.db")}),
            "memory": ([PY, "-m", "echo_bench"], {**env, "ACP_SESSION_STORE": "memory:"}),
        }
        if opts.bound:
            rows["append"] = (
                [PY, "-m", "echo_bench.bound"],
                {**env, "ACP_BOUND_FILE": str(db / "turns.bin")},
            )
        for i, spec in enumerate(opts.store_py):
            label, _, path = spec.partition("=")
            pkg = f"echo_alt{i}"
            build(Path(tmp), pkg, Path(path))
            rows[label] = ([PY, "-m", pkg], {**env, "ACP_SESSION_DB": str(db / "s.db")})
        rows["sdk"] = ([PY, str(REPO / "bench" / "agents" / "sdk_echo.py")], env)
        rows["ceiling"] = ([PY, str(REPO / "bench" / "agents" / "ceiling_echo.py")], env)
        extra = ("sdk", "ceiling", *(spec.partition("=")[0] for spec in opts.store_py))
        wanted = [r for r in rows if not opts.only or r in opts.only or r in extra]
        loads = [(lab, a) for lab, a in LOADS if not opts.load or lab in opts.load]
        before = loadavg()
        figures: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        base_args = ["--prompts", str(BASE_PROMPTS)]
        for _ in range(opts.rounds):
            for label, load_args in [("base", base_args), *loads]:
                args = quick_args(load_args) if opts.quick and label != "base" else load_args
                prompts = int(args[args.index("--prompts") + 1])
                for row in wanted:
                    shutil.rmtree(db, ignore_errors=True)
                    db.mkdir()
                    cmd, row_env = rows[row]
                    rate, seconds = acpbench(args, cmd, row_env)
                    figures.setdefault((label, row), []).append(rate)
                    if label == "base":
                        cpu.setdefault((label, row), []).append(seconds)
                    else:  # CPU per prompt beyond start-up (this round's base run)
                        start = cpu[("base", row)][-1] * (1 - BASE_PROMPTS / prompts)
                        per = (seconds - start) / (prompts - BASE_PROMPTS) * 1e3
                        cpu.setdefault((label, row), []).append(per)
        after = loadavg()
        date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        print(
            f"bench_stdio: {date}, commit {commit()}, load average {before} before, "
            f"{after} after, {os.cpu_count()} CPUs, median of {opts.rounds} interleaved rounds"
            + (", --quick" if opts.quick else "")
        )
        print(
            "prompts/s (higher is better) and the agent process's CPU ms per prompt beyond "
            "start-up (lower is better), each the median of the rounds; ratios of the same "
            "run: /SDK and /ceiling of prompts/s, SDK CPU / ours\n"
        )
        agents = [r for r in wanted if r not in ("sdk", "ceiling")]
        summary: list[dict[str, object]] = []
        print(
            "| load | store | agent/s | SDK/s | ceiling/s | /SDK | /ceiling "
            "| CPU ms | SDK CPU ms | ceiling CPU ms | SDK CPU / ours |"
        )
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for label, _ in loads:
            sdk = statistics.median(figures[(label, "sdk")])
            ceil = statistics.median(figures[(label, "ceiling")])
            sdk_cpu = statistics.median(cpu[(label, "sdk")])
            ceil_cpu = statistics.median(cpu[(label, "ceiling")])
            for row in agents:
                ours = statistics.median(figures[(label, row)])
                ours_cpu = statistics.median(cpu[(label, row)])
                summary.append(
                    {
                        "load": label,
                        "store": row,
                        "rate": ours,
                        "sdk": ours / sdk,
                        "ceiling": ours / ceil,
                        "cpu_ms": ours_cpu,
                        "sdk_cpu_ms": sdk_cpu,
                    }
                )
                print(
                    f"| `{label}` | {row} | {ours:.1f} | {sdk:.1f} | {ceil:.1f} "
                    f"| {ours / sdk:.2f}x | {ours / ceil:.2f} | {ours_cpu:.3f} | {sdk_cpu:.3f} "
                    f"| {ceil_cpu:.3f} | {sdk_cpu / ours_cpu:.2f}x |"
                )
        gen = import_time("import echo_bench.handlers", env)
        acp_t = import_time("import acp", env)
        print(
            f"\nimport: generated agent {gen:.3f}s, `import acp` {acp_t:.3f}s, "
            f"ratio {acp_t / gen:.2f}x faster"
        )
        if opts.json:
            head = {"date": date, "commit": commit(), "load_before": before, "load_after": after}
            Path(opts.json).write_text(json.dumps({**head, "rows": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
