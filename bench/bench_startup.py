"""Start-up time of `agentgen --help` (pre-commit runs agentgen on every commit).

Runs each command N times, interleaved, in fresh processes and prints the best and the
median wall time, with ratios to the floor (`python -c pass`) and to a peer measured in
the same run (`python -c "import typer"`: the CLI framework alone). Target: `--help`
under 0.3 s on the 2-core CI machine. Nothing is asserted.

    .venv/bin/python bench/bench_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    opts = ap.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for cmd in COMMANDS.values():  # warm the file cache
        once(cmd)
    for _ in range(opts.runs):
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
