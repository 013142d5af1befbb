"""What a fresh project's README says passes, its `test` extra installs (issue 37 item 11:
`mypy .` and `ruff check` were said to pass, but neither came with `.[test]`). The
install itself: tests/e2e/test_wheel.py (`pip install -e '.[test]'`, then both)."""

from __future__ import annotations

import re
import tomllib

import pytest
import regen_golden


@pytest.mark.parametrize("case", regen_golden.cases(), ids=lambda c: c.name)
def test_the_test_extra_has_what_the_readme_runs(case: regen_golden.Case) -> None:
    root = regen_golden.GOLDEN / case.name
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extra = {
        re.match(r"[A-Za-z0-9_.-]+", d).group(0) for d in project["optional-dependencies"]["test"]
    }  # type: ignore[union-attr]
    readme = (root / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Test", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].split()[0] for line in block.strip().splitlines()]
    assert commands[0] == "pip" and 'pip install -e ".[test]"' in block
    assert set(commands[1:]) == {"pytest", "mypy", "ruff"}, commands
    assert {"pytest", "mypy", "ruff"} <= extra, extra
