"""The quick start's main job: scaffold the echo agent and drive it with the generated client.

    make demo                    # or: .venv/bin/python examples/demo.py [--schema SPEC]

1. `agentgen validate` the example manifests;
2. `agentgen new` an echo agent and a client from `examples/echo/agent.yaml` on
   agentgen's locked default protocol schema (fetched once with `npm pack`, cached);
3. run the generated client, which starts the generated agent over stdio, opens a
   session and sends each line it reads as a prompt: the agent streams each text back.

Exit 0 when every prompt came back as the agent's message; 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AGENTGEN = [sys.executable, "-m", "agentgen"]
PROMPTS = ["Hello from the generated client!", "Typed models, one dispatcher, any transport."]


def step(title: str, cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    shown = ["agentgen", *cmd[len(AGENTGEN) :]] if cmd[: len(AGENTGEN)] == AGENTGEN else cmd
    print(f"\n$ {' '.join(shown)}   # {title}", flush=True)
    proc = subprocess.run(cmd, check=False, text=True, capture_output=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    out = (proc.stdout + proc.stderr).strip()
    if out:
        print(out)
    if proc.returncode != 0:
        sys.exit(f"demo: `{title}` failed with exit code {proc.returncode}")
    return proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schema", help="protocol schema (default: agentgen's locked upstream)")
    ap.add_argument("--keep", type=Path, help="build the projects here instead of a temp dir")
    args = ap.parse_args()
    schema = ["--schema", args.schema] if args.schema else []
    manifest = REPO / "examples" / "echo" / "agent.yaml"
    work = args.keep or Path(tempfile.mkdtemp(prefix="agentgen-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    agent, client = work / "echo-agent", work / "echo-client"
    for d in (agent, client):
        if d.exists():
            shutil.rmtree(d)
    try:
        step(
            "validate",
            [*AGENTGEN, "validate", *map(str, sorted(REPO.glob("examples/*/agent.yaml")))],
        )
        step("scaffold", [*AGENTGEN, "new", str(agent), "--manifest", str(manifest), *schema])
        step(
            "scaffold",
            [
                *AGENTGEN,
                "new",
                str(client),
                "--manifest",
                str(manifest),
                "--role",
                "client",
                *schema,
            ],
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(agent), str(client)])}
        cmd = [sys.executable, "-m", "echo_agent_client", "--", sys.executable, "-m", "echo_agent"]
        print(
            "\n$ echo-agent-client -- echo-agent   # the generated client drives the generated agent",
            flush=True,
        )
        proc = subprocess.run(
            cmd,
            check=False,
            input="\n".join(PROMPTS) + "\n",
            text=True,
            capture_output=True,
            env=env,
            timeout=120,
        )
        print(proc.stdout.rstrip())
        if proc.stderr.strip():
            print(proc.stderr.rstrip(), file=sys.stderr)
        missing = [p for p in PROMPTS if p not in proc.stdout]
        if proc.returncode != 0 or missing:
            print(f"demo: FAILED (exit {proc.returncode}; not echoed: {missing})", file=sys.stderr)
            return 1
        print(
            f"\ndemo: OK, {len(PROMPTS)} prompts echoed"
            + (f"; projects kept in {work}" if args.keep else "")
        )
        return 0
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
