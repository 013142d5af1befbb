"""The committed golden projects (`generated/projects/`) are exactly what agentgen
generates from our example manifests, and each is ruff-formatted, mypy-clean and
passes its own tests. Regenerate them with `python tests/regen_golden.py`."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import regen_golden

pytestmark = pytest.mark.slow  # golden rebuilds: `make test`, not `make test-fast`

BIN = Path(sys.executable).parent


def test_there_are_golden_cases() -> None:
    assert regen_golden.cases(), "no examples/*/agent.yaml"


def test_golden_projects_match_the_generator() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        code = regen_golden.main(["--check"])
    assert code == 0, out.getvalue() + "\n(run: python tests/regen_golden.py)"


@pytest.mark.slow
@pytest.mark.parametrize(
    "case", regen_golden.cases() or [None], ids=lambda c: c.name if c else "no-examples"
)
def test_golden_project_is_formatted_typed_and_tested(case: regen_golden.Case | None) -> None:
    assert case is not None, "no examples/*/agent.yaml"
    root = regen_golden.GOLDEN / case.name
    assert root.is_dir(), f"missing {root}"
    pkg = next(p.parent.parent.name for p in root.glob("*/_generated/SOURCE.json"))
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    fmt = subprocess.run(
        [str(BIN / "ruff"), "format", "--check", "--no-cache", pkg, "tests"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    typed = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", os.devnull, pkg],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert typed.returncode == 0, typed.stdout + typed.stderr
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
