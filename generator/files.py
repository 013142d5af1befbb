"""Writing files so that a reader never sees half of one: the one place that does it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import AgentgenError


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `data` (text as UTF-8, `\\n` line ends kept) to `path` through a temporary
    file in the same directory, then rename it into place. Raises OSError; the
    temporary file never outlives a failure."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_output(path: Path, text: str, what: str) -> None:
    """`write_atomic` for a file the user asked for (`-o OUT`): failures are located."""
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise AgentgenError(f"cannot write {what}: {exc.strerror}", source=str(path)) from None
