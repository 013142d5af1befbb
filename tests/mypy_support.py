"""mypy runs of the tests against one cache a run for each kind of check.

mypy's incremental cache keeps a module checked once for as long as its file and the
options it was checked with stay the same: the standard library, pydantic, and a model
project's pydantic-ai, openai and anthropic (about 40 s of CPU cold, 3 s warm) are then
read back for every later project.  A cache is kept per *kind* (one set of options: a
generated project's own `[tool.mypy]`, or `--strict`), because a check with other
options replaces the entries it shares with the others.

Each kind's cache lives in one folder for the whole run (conftest.py makes it), so the
xdist workers share it.  mypy's cache is not for two runs at once: a run holds the kind's
lock, and a worker whose check comes meanwhile waits for it (the other's cold check
would be this one's too: on two cores, one worker waiting is the other's CPU).  Only
what mypy reads back is saved; every check is done as before.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def run(
    cmd: list[str],
    *,
    kind: str,
    cwd: Path | str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """`cmd` (a mypy command line), its output captured, on the run's cache of `kind`:
    `project` (a generated project's own [tool.mypy], strict: `mypy .` in the project,
    or `--config-file` `project_config(...)`), `strict` (`--strict`, no configuration)."""
    shared = Path(os.environ["AGENTGEN_MYPY_RUN_CACHE"])
    with (shared / f"{kind}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return subprocess.run(
            cmd,
            cwd=cwd,
            env={**(os.environ if env is None else env), "MYPY_CACHE_DIR": str(shared / kind)},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def project_config(*, silent: list[str]) -> str:
    """A pyproject.toml holding the [tool.mypy] of a project `agentgen new` makes (the
    golden assistant project's: strict, the overrides of a model project), with the
    modules `silent` followed but not reported: code checked as a generated project
    checks its own (and from the `project` cache)."""
    golden = REPO / "generated" / "projects" / "assistant-agent-stdio" / "pyproject.toml"
    config = tomllib.loads(golden.read_text(encoding="utf-8"))["tool"]["mypy"]
    overrides = [*config.pop("overrides"), {"module": silent, "follow_imports": "silent"}]
    lines = ["[tool.mypy]", *(f"{k} = {_toml(v)}" for k, v in config.items())]
    for override in overrides:
        lines += ["", "[[tool.mypy.overrides]]"]
        lines += [f"{k} = {_toml(v)}" for k, v in override.items()]
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)  # a string: a TOML basic string
