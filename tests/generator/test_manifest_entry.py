"""The console entry's fast path for `agentgen validate` behaves exactly like the Typer
command: same stdout, stderr and exit code; anything unusual is left to Typer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from generator.entry import validate_args

CASES = Path(__file__).resolve().parents[1] / "cases" / "manifests"
GOOD = str(CASES / "valid-minimal" / "agent.yaml")
BAD = str(CASES / "states-unreachable" / "agent.yaml")
BROKEN = str(CASES / "json-trailing-comma" / "agent.json")


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["a.yaml"], (["a.yaml"], "text")),
        (["a.yaml", "b.json", "--format", "json"], (["a.yaml", "b.json"], "json")),
        (["--format=json", "a.yaml"], (["a.yaml"], "json")),
        (["--", "-odd.yaml"], (["-odd.yaml"], "text")),
        (["--help"], None),
        (["a.yaml", "--verbose"], None),
        (["--format"], None),
        ([], None),
    ],
)
def test_validate_args(argv: list[str], want: tuple[list[str], str] | None) -> None:
    got = validate_args(argv)
    if want is None:
        assert got is None
    else:
        assert got is not None
        assert ([str(p) for p in got[0]], got[1]) == want


TYPER = "import sys; from generator.cli import main; sys.argv[0] = 'agentgen'; main()"


@pytest.mark.parametrize(
    "args",
    [
        [GOOD],
        [GOOD, BAD],
        ["--format", "json", BAD, BROKEN],
        ["--format=json", GOOD],
        [BROKEN, str(CASES / "no-such-case" / "agent.yaml")],
        ["--format", "yaml", GOOD],
    ],
)
def test_fast_path_matches_typer(args: list[str]) -> None:
    fast = subprocess.run(
        [sys.executable, "-m", "agentgen", "validate", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    slow = subprocess.run(
        [sys.executable, "-c", TYPER, "validate", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (fast.returncode, fast.stdout, fast.stderr) == (
        slow.returncode,
        slow.stdout,
        slow.stderr,
    )
    assert "Traceback" not in fast.stderr
