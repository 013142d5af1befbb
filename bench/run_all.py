"""Run every benchmark in `bench/` in turn (`make bench`); each prints its own ratios.

    .venv/bin/python bench/run_all.py            # full loads
    .venv/bin/python bench/run_all.py --quick    # smaller loads where a bench has them

A bench missing from this checkout is reported and skipped; one that fails makes the
run exit non-zero. Figures are never asserted: read them, compare the ratios.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# (script, arguments for --quick): the order runs the cheap ones first.
BENCHES = [
    ("bench_startup.py", []),
    ("bench_validate.py", []),
    ("bench_models.py", []),
    ("bench_stdio.py", ["--quick", "--rounds", "1"]),
    ("bench_store_soak.py", ["--sessions", "8", "--turns", "50"]),
    ("bench_http.py", ["--prompts", "200", "--stream-prompts", "5", "--rounds", "1"]),
    ("bench_servers.py", ["--prompts", "30", "--stream-prompts", "3"]),
]


def main() -> int:
    ap = argparse.ArgumentParser(description="Run every benchmark")
    ap.add_argument("--quick", action="store_true")
    opts = ap.parse_args()
    failed = []
    for script, quick in BENCHES:
        path = HERE / script
        print(f"\n=== {script} ===", flush=True)
        if not path.is_file():
            print("(not in this checkout)")
            continue
        t0 = time.perf_counter()
        code = subprocess.call([sys.executable, str(path), *(quick if opts.quick else [])])
        print(f"--- {script}: exit {code}, {time.perf_counter() - t0:.1f} s", flush=True)
        if code:
            failed.append(script)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
