"""Expected-output files of the case folders (tests/cases/<kind>/<case>/expected.txt...):
a test compares what it got with `expected(path, got)`, which rewrites the file first
when AGENTGEN_UPDATE_CASES=1 (`make regen-golden` sets it; then read `git diff`)."""

from __future__ import annotations

import os
from pathlib import Path


def updating() -> bool:
    return os.environ.get("AGENTGEN_UPDATE_CASES") == "1"


def expected(path: Path, got: str, *, line: bool = False) -> str:
    """The text `got` must equal: the file's (with `line`, a one-line file read without
    its trailing newline). In update mode the file is rewritten from `got` first."""
    if updating():
        path.write_text(got + "\n" if line else got, encoding="utf-8")
    text = path.read_text(encoding="utf-8")
    return text.strip() if line else text
