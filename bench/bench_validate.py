"""Validating 100 manifests in one `agentgen validate` call (target: under 1 s).

Writes 100 manifests into a temporary directory (copies of the valid corpus cases and the
two real AGNTCY manifests, each renamed so no two are the same file) and times one
`agentgen validate` process over all of them, against two peers measured in the same run:
the process floor (`python -c pass`) and one `agentgen validate` of a single manifest
(start-up + one file), giving the per-manifest cost. Nothing is asserted.

    .venv/bin/python bench/bench_validate.py [--runs 5] [--count 100]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "cases" / "manifests"
AGNTCY = REPO.parent / "shared" / "agntcy"
AGENTGEN = str(Path(sys.executable).parent / "agentgen")


def seeds() -> list[Path]:
    found = sorted(CASES.glob("valid-*/agent.*"))
    found += sorted(AGNTCY.glob("*.json"))
    return [p for p in found if p.suffix in (".yaml", ".json")]


def timed(cmd: list[str], want: int) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, check=False)
    took = time.perf_counter() - t0
    if proc.returncode != want:
        raise SystemExit(f"exit {proc.returncode}: {proc.stdout.decode()[-800:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--count", type=int, default=100)
    opts = ap.parse_args()
    src = seeds()
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i in range(opts.count):
            seed = src[i % len(src)]
            path = Path(tmp) / f"m{i:03d}.agent{seed.suffix}"
            path.write_bytes(seed.read_bytes())
            files.append(str(path))
        runs = {
            "python -c pass (floor)": ([sys.executable, "-c", "pass"], 0),
            "agentgen validate 1 manifest": ([AGENTGEN, "validate", files[0]], 0),
            f"agentgen validate {opts.count} manifests": ([AGENTGEN, "validate", *files], 0),
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        for cmd, want in runs.values():
            timed(cmd, want)  # warm up
        for _ in range(opts.runs):
            for name, (cmd, want) in runs.items():
                times[name].append(timed(cmd, want))
    print(f"{'command':34} {'best s':>8} {'median s':>9}")
    for name, ts in times.items():
        print(f"{name:34} {min(ts):8.3f} {statistics.median(ts):9.3f}")
    many = min(times[f"agentgen validate {opts.count} manifests"])
    one = min(times["agentgen validate 1 manifest"])
    per = (many - one) / max(opts.count - 1, 1)
    print(f"\nper extra manifest: {per * 1000:.1f} ms; start-up + first: {one:.3f} s")
    verdict = "meets" if many < 1.0 else "misses"
    print(f"{opts.count} manifests in one call: best {many:.3f} s ({verdict} the 1 s target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
