"""Writing files so that a reader never sees half of one: the one place that does it."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

from .errors import AgentgenError


def _umask() -> int:
    """The process umask (reading it means setting it: put it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode(path: Path) -> int:
    """The mode `path` gets: its current one when it exists (a script stays executable),
    else what `open()` would give a new file (0o666 less the umask: 0644 under 022)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o666 & ~_umask()


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `data` (text as UTF-8, `\\n` line ends kept) to `path` through a temporary
    file in the same directory, then rename it into place. The file gets the mode a
    plain write would give it (mkstemp's 0600 would lock out other users). Raises
    OSError; the temporary file never outlives a failure."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            os.fchmod(fh.fileno(), new_file_mode(path))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_output(path: Path, text: str, what: str) -> None:
    """`write_atomic` for a file the user asked for (`-o OUT`): failures are located. A
    folder that does not exist yet is created, and the user is told (stderr)."""
    parent = Path(path).parent
    missing = not parent.exists()
    try:
        write_atomic(path, text)
        if missing:
            sys.stderr.write(f"created the folder {parent}\n")
    except OSError as exc:
        raise AgentgenError(f"cannot write {what}: {exc.strerror}", source=str(path)) from None
