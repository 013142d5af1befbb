"""Same-run before/after of the stdio echo agent: the agent as git revision REV renders it
against the agent this checkout renders, alternating on each load of bench_stdio.py.

Both are rendered from the same inputs as bench_stdio.py (v1 schema, the echo manifest,
its echo handler) into one temporary directory (packages ``echo_base`` and ``echo_bench``)
and driven by ../shared/tools/acpbench.py, ``--rounds`` times each, alternately; prints
the medians of prompts/s and of the agent process's CPU time per prompt (user + system,
from /usr/bin/time: far less sensitive to a loaded machine than prompts/s), and
after/before.

    .venv/bin/python bench/bench_before_after.py main [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import bench_stdio as b

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable

RENDER = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from generator.render import render_generated
from generator.scaffold.project import write_generated
inputs = json.loads(Path(sys.argv[3]).read_text())
pkg = Path(sys.argv[2])
write_generated(pkg / "_generated", render_generated(
    schema=inputs["schema"], meta=inputs["meta"], manifest=inputs["manifest"],
    role="agent", transport="stdio", package=pkg.name))
"""


def render(tree: Path, dest: Path, package: str, inputs: Path) -> None:
    """``package`` under ``dest``, rendered by the generator in ``tree``, with the handler."""
    pkg = dest / package
    subprocess.run([PY, "-c", RENDER, str(tree), str(pkg), str(inputs)], check=True, cwd=dest)
    (pkg / "__init__.py").write_text("")
    (pkg / "handlers.py").write_text(b.HANDLERS)
    (pkg / "__main__.py").write_text(
        "from ._generated import run_agent\nfrom .handlers import Agent\n\nrun_agent(Agent, None)\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("rev", help="the git revision to compare against (the before)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a tenth of the prompts")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        inputs = root / "inputs.json"
        inputs.write_text(
            json.dumps(
                {
                    "schema": json.loads(b.SCHEMA.read_text()),
                    "meta": json.loads(b.META.read_text()),
                    "manifest": b.echo_manifest(),
                }
            )
        )
        old = root / "baseline-src"
        old.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", opts.rev, "generator", "templates", "schema"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        render(old, root, "echo_base", inputs)
        render(REPO, root, "echo_bench", inputs)
        env = {**os.environ, "PYTHONPATH": str(root)}
        print(
            f"{'load':<16}{'before/s':>10}{'after/s':>10}{'ratio':>7}"
            f"{'before ms CPU':>15}{'after ms CPU':>14}{'ratio':>7}"
        )
        for label, load_args in b.LOADS:
            args = load_args
            if opts.quick:
                args = [
                    str(max(4, int(a) // 10)) if a.isdigit() and prev == "--prompts" else a
                    for prev, a in zip(["", *load_args], load_args, strict=False)
                ]
            prompts = int(args[args.index("--prompts") + 1])
            rate: dict[str, list[float]] = {"echo_base": [], "echo_bench": []}
            cpu: dict[str, list[float]] = {"echo_base": [], "echo_bench": []}
            for _ in range(opts.rounds):
                for pkg in ("echo_base", "echo_bench"):
                    # the agent's own CPU (user + system): steadier than prompts/s on a
                    # shared machine
                    cmd = ["/usr/bin/time", "-f", "%U %S", "-o", str(root / "cpu"), PY, "-m", pkg]
                    rate[pkg].append(b.acpbench(args, cmd, env))
                    used = sum(map(float, (root / "cpu").read_text().split()[-2:]))
                    cpu[pkg].append(used * 1000 / prompts)
            x, y = (statistics.median(rate[k]) for k in rate)
            cx, cy = (statistics.median(cpu[k]) for k in cpu)
            print(
                f"{label:<16}{x:>10.1f}{y:>10.1f}{y / x:>6.2f}x"
                f"{cx:>15.3f}{cy:>14.3f}{cy / cx:>6.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
