"""Same-run before/after of the stdio echo agent: the agent as git revision REV renders it
against the agent this checkout renders, alternating on each load of bench_stdio.py.

Both are rendered from the same inputs as bench_stdio.py (v1 schema, the echo manifest,
its echo handler) into one temporary directory (packages ``echo_base`` and ``echo_bench``)
and driven by ../shared/tools/acpbench.py, ``--rounds`` times each, alternately; prints
the medians of prompts/s and of the agent process's CPU time (user + system, from
bench_stdio's CPU wrapper: far less sensitive to a loaded machine than prompts/s), split into the CPU
per prompt (the difference between a run of N and one of 2N prompts, over N) and the
one-time rest (start-up, imports), each with after/before.

    .venv/bin/python bench/bench_before_after.py main [--rounds 3] [--quick]
    .venv/bin/python bench/bench_before_after.py main --rounds 6 --whole "--prompts 8000"
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
from agentgen.packaged import data_dir
from agentgen.render import render_generated
from agentgen.scaffold.project import write_generated
# the tree's own generator and runtime (see ``importable``), never this checkout's
assert data_dir("templates").resolve() == (Path(sys.argv[1]) / "templates").resolve()
inputs = json.loads(Path(sys.argv[3]).read_text())
pkg = Path(sys.argv[2])
write_generated(pkg / "_generated", render_generated(
    schema=inputs["schema"], meta=inputs["meta"], manifest=inputs["manifest"],
    role="agent", transport="stdio", package=pkg.name))
"""


def importable(tree: Path) -> Path:
    """``tree`` (a checkout, or ``git archive``'s generator/templates/schema) with its
    generator importable as ``agentgen`` from ``sys.path``: the repository's generator/
    folder installs as ``agentgen``, so without this link ``import agentgen`` found the
    editable install, i.e. this checkout, and a "before" was rendered by the "after"."""
    if tree.resolve() != REPO.resolve() and not (tree / "agentgen").exists():
        (tree / "agentgen").symlink_to("generator", target_is_directory=True)
    return tree


def checkout(rev: str, dest: Path) -> Path:
    """The generator, runtime and schemas of git revision ``rev`` under ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "generator", "templates", "schema"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return importable(dest)


def render(tree: Path, dest: Path, package: str, inputs: Path) -> None:
    """``package`` under ``dest``, rendered by the generator in ``tree``, with the handler."""
    importable(tree)
    pkg = dest / package
    subprocess.run([PY, "-c", RENDER, str(tree), str(pkg), str(inputs)], check=True, cwd=dest)
    (pkg / "__init__.py").write_text("")
    (pkg / "handlers.py").write_text(b.HANDLERS)
    (pkg / "__main__.py").write_text(
        "from ._generated import run_agent\nfrom .handlers import Agent\n\nrun_agent(Agent, None)\n"
    )


CHECK = """
import sys, time
pkg = sys.argv[1]
t = time.process_time()
models = __import__(pkg + "._generated.models", fromlist=["x"])
imported = time.process_time() - t
cls = models.PromptRequest
out = [imported]
for blocks in (1, 50):
    p = {"sessionId": "sess_" + "0" * 32, "prompt": [{"type": "text", "text": "hello"}] * blocks}
    cls.model_validate(p)
    n = 20000 // blocks
    t = time.process_time()
    for _ in range(n):
        cls.model_validate(p)
    out.append((time.process_time() - t) / n)
print(*out)
"""


def check_cost(env: dict[str, str], runs: int = 5) -> None:
    """What the params check itself costs in the agent: importing the revision's models
    (once per process, at its first session request) and validating one prompt, CPU time
    in a fresh interpreter, best of ``runs``."""
    best = [float("inf")] * 3
    for _ in range(runs):
        r = subprocess.run(
            [PY, "-c", CHECK, "echo_bench"], capture_output=True, text=True, env=env, check=True
        )
        best = [min(a, float(b)) for a, b in zip(best, r.stdout.split(), strict=True)]
    print(
        f"params check: models import {best[0] * 1000:.0f} ms CPU once per process; "
        f"a prompt of 1 text block {best[1] * 1e6:.1f} us, of 50 blocks {best[2] * 1e6:.1f} us"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("rev", help="the git revision to compare against (the before)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a tenth of the prompts")
    ap.add_argument("--check-only", action="store_true", help="only the params check's cost")
    ap.add_argument(
        "--whole",
        action="append",
        default=[],
        metavar="LOAD",
        help="instead of the four loads: this acpbench load (repeatable, e.g. "
        "'--prompts 8000 --sessions 8'), the whole run's CPU compared",
    )
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
        render(checkout(opts.rev, root / "baseline-src"), root, "echo_base", inputs)
        render(REPO, root, "echo_bench", inputs)
        env = {**os.environ, "PYTHONPATH": str(root)}
        env.pop("ACP_SESSION_STORE", None)  # the default store (SQLite)
        check_cost(env)
        if opts.check_only:
            return 0
        if opts.whole:
            whole_runs(opts, env, root)
            return 0
        print(
            f"{'load':<16}{'before/s':>10}{'after/s':>10}{'ratio':>7}"
            f"{'before ms CPU':>15}{'after ms CPU':>14}{'ratio':>7}{'one-time s CPU':>22}"
        )
        pkgs = ("echo_base", "echo_bench")
        for label, load_args in b.LOADS:
            args = load_args
            if opts.quick:
                args = [
                    str(max(8, int(a) // 10)) if a.isdigit() and prev == "--prompts" else a
                    for prev, a in zip(["", *load_args], load_args, strict=False)
                ]
            at = args.index("--prompts") + 1
            n = int(args[at])
            double = [*args[:at], str(2 * n), *args[at + 1 :]]
            rate: dict[str, list[float]] = {k: [] for k in pkgs}
            cpu: dict[tuple[str, int], list[float]] = {(k, m): [] for k in pkgs for m in (1, 2)}
            for _ in range(opts.rounds):
                for pkg in pkgs:
                    for m, load in ((1, args), (2, double)):
                        got, used = drive(load, pkg, env, root / f"{pkg}-{m}.db")
                        if m == 1:
                            rate[pkg].append(got)
                        cpu[(pkg, m)].append(used)
            x, y = (statistics.median(rate[k]) for k in pkgs)
            # per prompt: the CPU n more prompts cost; one-time: the rest (start, imports)
            per = {
                k: (statistics.median(cpu[(k, 2)]) - statistics.median(cpu[(k, 1)])) / n
                for k in pkgs
            }
            once = {k: statistics.median(cpu[(k, 1)]) - n * per[k] for k in pkgs}
            cx, cy = (per[k] * 1000 for k in pkgs)
            print(
                f"{label:<16}{x:>10.1f}{y:>10.1f}{y / x:>6.2f}x"
                f"{cx:>15.3f}{cy:>14.3f}{cy / cx:>6.2f}x"
                f"{once['echo_base']:>11.2f} -> {once['echo_bench']:.2f}"
            )
    return 0


def drive(load: list[str], pkg: str, env: dict[str, str], db: Path) -> tuple[float, float]:
    """One acpbench run of ``pkg`` on a fresh SQLite store at ``db``: prompts/s, and the
    agent's CPU seconds (user + system, from bench_stdio's CPU wrapper: steadier than
    prompts/s on a shared machine)."""
    for stale in db.parent.glob(f"{db.name}*"):
        stale.unlink()
    return b.acpbench(load, [PY, "-m", pkg], {**env, "ACP_SESSION_DB": str(db)})


def whole_runs(opts: argparse.Namespace, env: dict[str, str], root: Path) -> None:
    """Each ``--whole`` load run ``--rounds`` times per agent, the order alternating
    round by round; medians of prompts/s and of the whole run's CPU (start-up included:
    with thousands of prompts it is a small share, and one run's figure is steadier
    than the difference of two)."""
    print(f"{'load':<32}{'before/s':>10}{'after/s':>10}{'ratio':>7}{'CPU after/before':>18}")
    pkgs = ("echo_base", "echo_bench")
    for spec in opts.whole:
        load = spec.split()
        rate: dict[str, list[float]] = {k: [] for k in pkgs}
        cpu: dict[str, list[float]] = {k: [] for k in pkgs}
        for r in range(opts.rounds):
            for pkg in pkgs if r % 2 == 0 else pkgs[::-1]:
                got, used = drive(load, pkg, env, root / f"{pkg}-whole.db")
                rate[pkg].append(got)
                cpu[pkg].append(used)
        x, y = (statistics.median(rate[k]) for k in pkgs)
        cx, cy = (statistics.median(cpu[k]) for k in pkgs)
        print(f"{spec:<32}{x:>10.1f}{y:>10.1f}{y / x:>6.2f}x{cy / cx:>17.2f}x")


if __name__ == "__main__":
    sys.exit(main())
