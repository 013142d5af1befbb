"""Run every benchmark in `bench/` in turn (`make bench`); each prints its own ratios,
then one same-run summary table (date, commit, load average; the stdio echo agent's
prompts/s as ratios to the SDK and to the ceiling for the default and the memory store,
and its cold start to the initialize answer as a ratio to the SDK's), beside the targets.

    .venv/bin/python bench/run_all.py            # full loads
    .venv/bin/python bench/run_all.py --quick    # smaller loads where a bench has them
    .venv/bin/python bench/run_all.py --only bench_startup.py --only bench_stdio.py

A bench missing from this checkout is reported and skipped; one that fails makes the
run exit non-zero. Figures are never asserted: read them, compare the ratios.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# (script, arguments for --quick): the order runs the cheap ones first.
BENCHES = [
    ("bench_startup.py", []),
    ("bench_validate.py", []),
    ("bench_models.py", []),
    ("bench_stdio.py", ["--quick", "--rounds", "1"]),  # always with --bound (EXTRA)
    ("bench_busy.py", ["--rounds", "1"]),
    ("bench_store_soak.py", ["--sessions", "8", "--turns", "50"]),
    ("bench_http.py", ["--prompts", "200", "--stream-prompts", "5", "--rounds", "1"]),
    ("bench_servers.py", ["--prompts", "30", "--stream-prompts", "3"]),
    ("bench_observe.py", ["--quick", "--rounds", "1"]),
]


# arguments a script always gets: bench_stdio's bound row (the memory store plus one file
# append a turn: about the most a durable store reaches) goes into the summary
EXTRA = {"bench_stdio.py": ["--bound"]}

# the figures the summary reads: (script, its option for them)
SUMMARISED = {"bench_startup.py": "--json", "bench_stdio.py": "--json"}

# the targets for the default store (stdio, ratios to the SDK's prompts/s)
TARGETS = {
    "--prompts 2000": ">= 1.5x",
    "--sessions 8": ">= 2x, >= 0.8 of the ceiling",
    "--blocks 50": ">= 3x",
    "--size 4000000": ">= 1.0x",
}
COLD_TARGET = "<= 0.3x"


def loadavg() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def commit() -> str:
    def git(*args: str) -> str:
        r = subprocess.run(
            ["git", "-C", str(HERE.parent), *args], capture_output=True, text=True, check=False
        )
        return r.stdout.strip()

    dirty = "+changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    return (git("rev-parse", "--short", "HEAD") or "?") + dirty


def read(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def summary(stdio: dict[str, object] | None, startup: dict[str, object] | None) -> list[str]:
    """The summary table's rows (markdown): one a stdio load, then the cold start."""
    head = (
        "| load | target (default /SDK) | default /SDK | default /ceiling | memory /SDK "
        "| memory /ceiling | bound /SDK | ceiling /SDK "
        "| CPU ms a prompt (cold start: wall ms): default | memory | SDK |"
    )
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = stdio.get("rows", []) if stdio else []
    by = {(r["load"], r["store"]): r for r in rows if isinstance(r, dict)}
    for load, target in TARGETS.items():
        d, m = by.get((load, "sqlite")), by.get((load, "memory"))
        if d is None or m is None:
            lines.append(f"| `{load}` | {target} | (not measured) | | | | | | | | |")
            continue
        b = by.get((load, "append"))
        bound = f"{b['sdk']:.2f}x" if b is not None else "-"
        lines.append(
            f"| `{load}` | {target} | {d['sdk']:.2f}x | {d['ceiling']:.2f} | {m['sdk']:.2f}x "
            f"| {m['ceiling']:.2f} | {bound} | {d['sdk'] / d['ceiling']:.2f}x "
            f"| {d['cpu_ms']:.3f} | {m['cpu_ms']:.3f} | {d['sdk_cpu_ms']:.3f} |"
        )
    cold = startup.get("cold_start") if startup else None
    if isinstance(cold, dict):
        d, m = cold["sqlite"], cold["memory"]
        lines.append(
            f"| cold start to the initialize answer | {COLD_TARGET} | {d['sdk']:.2f}x | "
            f"{d['median'] / cold['ceiling']['median']:.1f} | {m['sdk']:.2f}x "
            f"| {m['median'] / cold['ceiling']['median']:.1f} | - "
            f"| {cold['ceiling']['median'] / cold['sdk']['median']:.2f}x "
            f"| {d['median'] * 1e3:.0f} ms | {m['median'] * 1e3:.0f} ms "
            f"| {cold['sdk']['median'] * 1e3:.0f} ms |"
        )
    else:
        lines.append(
            f"| cold start to the initialize answer | {COLD_TARGET} | (not measured) "
            "| | | | | | | | |"
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description="Run every benchmark")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", action="append", default=[], help="a script to run (repeatable)")
    opts = ap.parse_args()
    failed = []
    before = loadavg()
    figures: dict[str, dict[str, object] | None] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for script, quick in BENCHES:
            if opts.only and script not in opts.only:
                continue
            path = HERE / script
            print(f"\n=== {script} ===", flush=True)
            if not path.is_file():
                print("(not in this checkout)")
                continue
            args = [*(quick if opts.quick else []), *EXTRA.get(script, [])]
            out = Path(tmp) / f"{script}.json"
            if script in SUMMARISED:
                args += [SUMMARISED[script], str(out)]
            t0 = time.perf_counter()
            code = subprocess.call([sys.executable, str(path), *args])
            print(f"--- {script}: exit {code}, {time.perf_counter() - t0:.1f} s", flush=True)
            if code:
                failed.append(script)
            if script in SUMMARISED:
                figures[script] = read(out)
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    stdio = figures.get("bench_stdio.py")
    print(
        f"\n=== summary: {date}, commit {commit()}, load average {before} before, "
        f"{loadavg()} after, {os.cpu_count()} CPUs" + (", --quick" if opts.quick else "")
    )
    if stdio:
        print(
            f"stdio: bench_stdio {stdio.get('date')}, load average {stdio.get('load_before')} "
            f"before, {stdio.get('load_after')} after; prompts/s ratios of one run (median of "
            "its rounds); default = SQLite store; bound = the memory store plus one file "
            "append a turn (about the most a durable store reaches); ceiling /SDK = the stdlib "
            "ceiling's own ratio (a target above it cannot be met in that run); cold start: "
            "median wall time, /ceiling = times the stdlib ceiling's\n"
        )
    print("\n".join(summary(stdio, figures.get("bench_startup.py"))))
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
