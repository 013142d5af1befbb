"""`generator.files`: the one atomic write every output of agentgen goes through."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.errors import AgentgenError
from generator.files import write_atomic, write_output


def test_write_atomic_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "out.py"
    write_atomic(target, "one\n")
    write_atomic(target, b"two\n")
    assert target.read_bytes() == b"two\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.py"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "out.py"
    target.write_text("old\n")

    with pytest.raises(TypeError):
        write_atomic(target, 42)  # type: ignore[arg-type]
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.py"]


def test_write_output_failure_is_a_located_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(AgentgenError) as info:
        write_output(blocker / "out.py", "x = 1\n", "the models")
    assert str(info.value).startswith(f"{blocker / 'out.py'}: cannot write the models: ")
