"""`generator.files`: the one atomic write every output of agentgen goes through."""

from __future__ import annotations

import os
import stat
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


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_a_new_file_gets_the_mode_the_umask_gives(tmp_path: Path, umask: int, mode: int) -> None:
    """Not mkstemp's 0600: another user (a container, a shared checkout) reads the files."""
    old = os.umask(umask)
    try:
        write_atomic(tmp_path / "out.py", "x = 1\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.py").stat().st_mode) == mode


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "run.sh"
    target.write_text("old\n")
    target.chmod(0o751)
    write_atomic(target, "new\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
