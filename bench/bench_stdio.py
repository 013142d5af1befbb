"""stdio benchmark: the generated echo agent against an echo agent on the official SDK.

Renders the echo agent's `_generated/` package into a temporary directory (from
examples/echo/agent.yaml when present), runs ../shared/tools/acpbench.py against both
agents in the same run for each load, and prints prompts/s with the ratio
generated/SDK; then the import time of the generated agent vs `import acp`.

    .venv/bin/python bench/bench_stdio.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
ACPBENCH = SHARED / "tools" / "acpbench.py"
SCHEMA = SHARED / "acp" / "v1" / "schema.json"
META = SHARED / "acp" / "v1" / "meta.json"
PY = sys.executable

HANDLERS = '''"""Echo: each text block streamed back as one agent_message_chunk."""

from __future__ import annotations

from typing import Any

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent import Turn


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        for block in input:
            if block.get("type") == "text":
                await turn.send_text(block["text"])
'''

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
        from generator.manifest.load import load_manifest

        return load_manifest(path).data
    return {"name": "echo", "version": "0.1.0", "title": "Echo"}


def build(dest: Path) -> Path:
    sys.path.insert(0, str(REPO))
    from generator.render import render_generated
    from generator.scaffold.project import write_generated

    files = render_generated(
        schema=json.loads(SCHEMA.read_text()),
        meta=json.loads(META.read_text()),
        manifest=echo_manifest(),
        role="agent",
        transport="stdio",
        package="echo_bench",
    )
    pkg = dest / "echo_bench"
    write_generated(pkg / "_generated", files)
    (pkg / "__init__.py").write_text("")
    (pkg / "handlers.py").write_text(HANDLERS)
    (pkg / "__main__.py").write_text(
        "from ._generated import run_agent\nfrom .handlers import Agent\n\nrun_agent(Agent, None)\n"
    )
    return dest


def acpbench(args: list[str], cmd: list[str], env: dict[str, str]) -> float:
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a tenth of the prompts")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = build(Path(tmp))
        env = {**os.environ, "PYTHONPATH": str(root)}
        ours = [PY, "-m", "echo_bench"]
        sdk = [PY, str(REPO / "bench" / "agents" / "sdk_echo.py")]
        print(f"{'load':<16}{'generated/s':>14}{'sdk/s':>12}{'ratio':>8}")
        for label, load_args in LOADS:
            args = load_args
            if opts.quick:
                args = [
                    str(max(4, int(a) // 10)) if a.isdigit() and prev == "--prompts" else a
                    for prev, a in zip(["", *load_args], load_args, strict=False)
                ]
            a = acpbench(args, ours, env)
            b = acpbench(args, sdk, env)
            print(f"{label:<16}{a:>14.1f}{b:>12.1f}{a / b:>8.2f}x")
        gen = import_time("import echo_bench.handlers", env)
        acp_t = import_time("import acp", env)
        print(
            f"import: generated agent {gen:.3f}s, `import acp` {acp_t:.3f}s, ratio {acp_t / gen:.2f}x faster"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
