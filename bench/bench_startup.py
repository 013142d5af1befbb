"""Start-up time of `agentgen --help` (pre-commit runs agentgen on every commit), and
an agent's cold start: from its launch to the answer to `initialize` (what an editor
waits for before it can open a session).

Runs each command N times, interleaved, in fresh processes and prints the best and the
median wall time, with ratios to the floor (`python -c pass`) and to a peer measured in
the same run (`python -c "import typer"`: the CLI framework alone). Target: `--help`
under 0.3 s on the 2-core CI machine. Then the cold start of the generated stdio echo
agent (bench_stdio.py's build; default SQLite store and memory store) against the
official SDK's echo agent and the stdlib ceiling, interleaved, with ratios to the SDK
(target: at most 0.3x).  Nothing is asserted.

``--base REV`` adds the agent as git revision REV renders it (default store; a
same-run before/after).  ``--bytecode`` compiles the rendered agents first, as
``pip install`` does: the SDK in site-packages has its bytecode cache, and under
``PYTHONDONTWRITEBYTECODE=1`` (set on the shared bench machine) the warm-up launch
writes none, so without it each launch of the generated agent compiles its sources.

    .venv/bin/python bench/bench_startup.py [--runs 15] [--json PATH] [--only-agents]
        [--base REV] [--bytecode]
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HELP_TARGET = 0.3  # seconds: `agentgen --help` on the 2-core CI machine
BIN = Path(sys.executable).parent
MINIMAL = REPO / "tests" / "cases" / "manifests" / "valid-minimal" / "agent.yaml"

TYPER = "import sys; from generator.cli import main; sys.argv[0] = 'agentgen'; main()"

RICH = (
    "import sys; import generator.cli as c; c.app.rich_markup_mode = 'rich'; "
    "sys.argv[0] = 'agentgen'; c.main()"
)

COMMANDS = {
    "python -c pass (floor)": [sys.executable, "-c", "pass"],
    "python -c 'import typer' (peer)": [sys.executable, "-c", "import typer"],
    "agentgen --help": [str(BIN / "agentgen"), "--help"],
    # the same help rendered by rich, as before generator/cli.py turned it off
    "  same with rich help (before)": [sys.executable, "-c", RICH, "--help"],
    "agentgen validate --help": [str(BIN / "agentgen"), "validate", "--help"],
    "agentgen validate (1 manifest)": [str(BIN / "agentgen"), "validate", str(MINIMAL)],
    # the same through the Typer app, without generator.entry's fast path
    "  same via Typer (no fast path)": [sys.executable, "-c", TYPER, "validate", str(MINIMAL)],
}


def once(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, check=False)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.decode()[-500:]}")
    return took


COLD_TARGET = 0.3  # the generated agent's cold start / the SDK's
INITIALIZE = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n'


def cold_start(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds from launching the agent to the first line it answers `initialize` with."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(INITIALIZE)
    proc.stdin.flush()
    line = proc.stdout.readline()
    took = time.perf_counter() - t0
    proc.stdin.close()
    proc.wait(timeout=30)
    if b'"result"' not in line:
        raise SystemExit(f"{' '.join(cmd)}: no initialize answer: {line[:300]!r}")
    return took


def render_base(root: Path, rev: str) -> None:
    """The echo agent as git revision `rev` renders it, as package ``echo_base``."""
    import bench_before_after as ba

    src = root / "base-src"
    src.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "generator", "templates", "schema"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    inputs = root / "inputs.json"
    manifest = ba.b.echo_manifest()
    schema, meta = json.loads(ba.b.SCHEMA.read_text()), json.loads(ba.b.META.read_text())
    inputs.write_text(json.dumps({"schema": schema, "meta": meta, "manifest": manifest}))
    ba.render(src, root, "echo_base", inputs)


def agents(
    runs: int, base: str | None = None, bytecode: bool = False
) -> dict[str, dict[str, float]]:
    """Cold start of each agent, interleaved: best and median seconds, ratio to the SDK."""
    sys.path.insert(0, str(REPO / "bench"))
    from bench_stdio import build

    with tempfile.TemporaryDirectory() as tmp:
        root = build(Path(tmp))
        if base:
            render_base(root, base)
        if bytecode:
            for pkg in ("echo_bench", "echo_base"):
                if (root / pkg).is_dir():
                    compileall.compile_dir(str(root / pkg), quiet=1)
        env = {**os.environ, "PYTHONPATH": str(root)}
        env.pop("ACP_SESSION_STORE", None)
        py = sys.executable
        rows = {
            "sqlite": ([py, "-m", "echo_bench"], {**env, "ACP_SESSION_DB": f"{tmp}/s.db"}),
            "memory": ([py, "-m", "echo_bench"], {**env, "ACP_SESSION_STORE": "memory:"}),
            "sdk": ([py, str(REPO / "bench" / "agents" / "sdk_echo.py")], env),
            "ceiling": ([py, str(REPO / "bench" / "agents" / "ceiling_echo.py")], env),
        }
        if base:
            rows[f"sqlite {base}"] = (
                [py, "-m", "echo_base"],
                {**env, "ACP_SESSION_DB": f"{tmp}/base.db"},
            )
        times: dict[str, list[float]] = {name: [] for name in rows}
        for cmd, row_env in rows.values():  # warm the file cache (and the bytecode)
            cold_start(cmd, row_env)
        for _ in range(runs):
            for name, (cmd, row_env) in rows.items():
                times[name].append(cold_start(cmd, row_env))
    sdk = statistics.median(times["sdk"])
    return {
        name: {"best": min(ts), "median": statistics.median(ts), "sdk": statistics.median(ts) / sdk}
        for name, ts in times.items()
    }


def print_agents(cold: dict[str, dict[str, float]]) -> None:
    print("\ncold start to the initialize answer (stdio echo agents; /SDK: of the medians)")
    print(f"{'agent':34} {'best s':>8} {'median s':>9} {'/SDK':>7}")
    for name, fig in cold.items():
        print(f"{name:34} {fig['best']:8.3f} {fig['median']:9.3f} {fig['sdk']:6.2f}x")
    ours = cold["sqlite"]["sdk"]
    verdict = "meets" if ours <= COLD_TARGET else "misses"
    print(f"generated agent (default store) / SDK {ours:.2f}x: {verdict} the 0.3x target")
    for name, fig in cold.items():
        if name.startswith("sqlite "):  # --base REV
            now = cold["sqlite"]["median"] / fig["median"]
            print(f"default store, this checkout / {name[len('sqlite ') :]}: {now:.2f}x (medians)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--json", help="also write the agents' cold-start figures here")
    ap.add_argument("--only-agents", action="store_true", help="skip the agentgen commands")
    ap.add_argument("--base", metavar="REV", help="add the agent as git revision REV renders it")
    ap.add_argument("--bytecode", action="store_true", help="compile the agents first (pip's way)")
    opts = ap.parse_args()
    from bench_stdio import commit, loadavg

    before = loadavg()
    if not opts.only_agents:
        commands(opts.runs)
    cold = agents(max(5, opts.runs // 2), opts.base, opts.bytecode)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"\nbench_startup: {stamp}, commit {commit()}, load average {before} before, "
        f"{loadavg()} after, {os.cpu_count()} CPUs, "
        f"bytecode {'compiled first' if opts.bytecode else 'as the environment leaves it'}"
    )
    print_agents(cold)
    if opts.json:
        Path(opts.json).write_text(json.dumps({"cold_start": cold}))
    return 0


def commands(runs: int) -> None:
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for cmd in COMMANDS.values():  # warm the file cache
        once(cmd)
    for _ in range(runs):
        for name, cmd in COMMANDS.items():
            times[name].append(once(cmd))
    floor = min(times["python -c pass (floor)"])
    peer = min(times["python -c 'import typer' (peer)"])
    print(f"{'command':34} {'best s':>8} {'median s':>9} {'/floor':>7} {'/typer':>7}")
    for name, ts in times.items():
        best = min(ts)
        print(
            f"{name:34} {best:8.3f} {statistics.median(ts):9.3f} "
            f"{best / floor:7.2f} {best / peer:7.2f}"
        )
    help_best = min(times["agentgen --help"])
    verdict = "meets" if help_best < HELP_TARGET else "misses"
    print(f"\nagentgen --help best {help_best:.3f} s: {verdict} the 0.3 s target")


if __name__ == "__main__":
    sys.exit(main())
