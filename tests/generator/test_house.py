"""The test house's own rules: `make regen-golden` rewrites every expected file of the
case folders (the helper the case walkers compare through rewrites in update mode only),
a test not marked slow cannot start what makes a test slow (tests/conftest.py), and no
file of the package or the runtime is exempt from the complexity and private-access rules."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from expected_support import expected


def test_expected_compares_and_rewrites_only_in_update_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "expected.txt"
    path.write_text("old\n", encoding="utf-8")
    monkeypatch.delenv("AGENTGEN_UPDATE_CASES", raising=False)
    assert expected(path, "new\n") == "old\n"
    assert expected(path, "old", line=True) == "old"
    assert path.read_text(encoding="utf-8") == "old\n"
    monkeypatch.setenv("AGENTGEN_UPDATE_CASES", "1")
    assert expected(path, "new\n") == "new\n"
    assert expected(path, "one line", line=True) == "one line"
    assert path.read_text(encoding="utf-8") == "one line\n"


@pytest.mark.parametrize(
    "argv",
    [["node", "--version"], [sys.executable, "-m", "pip", "--version"], ["pg_ctl", "--help"]],
    ids=["node", "pip", "postgres"],
)
def test_a_test_not_marked_slow_cannot_start_a_slow_program(argv: list[str]) -> None:
    with pytest.raises(pytest.fail.Exception, match="is not marked slow"):
        subprocess.run(argv, capture_output=True, check=False)


def test_short_lived_tools_need_no_slow_mark() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentgen", "--version"], capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr


RUNTIME = Path(__file__).resolve().parents[2] / "templates" / "runtime"
MAX_RUNTIME_LINES = 600


def test_no_runtime_file_over_600_lines() -> None:
    """Files by concern (issue 21): a runtime module that grows past the bound is split."""
    sizes = {
        str(p.relative_to(RUNTIME)): len(p.read_text(encoding="utf-8").splitlines())
        for p in RUNTIME.rglob("*.py")
    }
    assert len(sizes) > 20  # the folder was found
    over = {name: n for name, n in sizes.items() if n > MAX_RUNTIME_LINES}
    assert not over, f"split these runtime modules by concern: {over}"


def test_no_code_file_is_exempt_from_complexity_or_private_access() -> None:
    """pyproject's per-file-ignores may relax tests and benches, never `generator/` or
    `templates/`: C901 (complexity over 12) and SLF001 (private access) hold for every
    file there (a one-line `noqa` with its reason is the only way around)."""
    root = Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    ignores = config["tool"]["ruff"]["lint"]["per-file-ignores"]
    exempt = {
        pattern: codes
        for pattern, codes in ignores.items()
        if not pattern.startswith(("tests/", "bench/")) and {"C901", "SLF001"} & set(codes)
    }
    assert exempt == {}
