"""Every ACP frame these tests exchange is checked against the protocol schema (the
runtime's test mode, ACP_WIRE_CHECK): a frame that does not match fails the test, agents
started as subprocesses included. `ACP_WIRE_CHECK=0 pytest` turns it off."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("ACP_WIRE_CHECK", "1")


@pytest.fixture(autouse=True)
def wire_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    log = tmp_path / "wire-check.jsonl"
    monkeypatch.setenv("ACP_WIRE_CHECK_LOG", str(log))
    yield
    found = log.read_text(encoding="utf-8").strip() if log.exists() else ""
    if found:
        pytest.fail(f"frames that do not match the protocol schema:\n{found}")
