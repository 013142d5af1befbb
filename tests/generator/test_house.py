"""`make regen-golden` rewrites every expected file of the case folders: the helper the
case walkers compare through (tests/expected_support.py) rewrites in update mode only."""

from __future__ import annotations

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
