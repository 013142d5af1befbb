"""Terminal output: colour, tables and progress only where a person is watching.

Plain text whenever the stream is not a terminal (pipes, pre-commit, CI logs) or
`NO_COLOR` is set (https://no-color.org); `FORCE_COLOR` turns styling on anyway.
rich is imported only when it will draw something, so scripted runs pay nothing for it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import IO, Any


def styled(stream: IO[str]) -> bool:
    """Whether to style what goes to `stream`."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"


def _console(stream: IO[str]) -> Any:
    from rich.console import Console

    return Console(
        file=stream,
        highlight=False,
        force_terminal=True,
        no_color=bool(os.environ.get("NO_COLOR")),
        soft_wrap=False,
    )


def table(head: Sequence[str], rows: Sequence[Sequence[str]], plain: str, stream: IO[str]) -> None:
    """A table fitted to the terminal's width (cells wrap), or `plain` when not styled."""
    if not styled(stream):
        stream.write(plain)
        return
    from rich.table import Table

    grid = Table(header_style="bold", box=None, pad_edge=False, expand=False)
    for name in head:
        grid.add_column(name, overflow="fold")  # a long name wraps, never loses characters
    for row in rows:
        grid.add_row(*row)
    _console(stream).print(grid)


_MARKS = {
    "BREAKING": "bold red",
    "error": "bold red",
    "stale": "bold yellow",
    "note": "cyan",
    "warning": "yellow",
}


def lines(text: str, stream: IO[str], *, marks: Sequence[str] = ()) -> None:
    """Write `text`; when styled, each word of `marks` (e.g. BREAKING) stands out."""
    if not styled(stream) or not marks:
        stream.write(text)
        return
    from rich.text import Text

    out = Text(text.rstrip("\n"))
    for word in marks:
        out.highlight_words([word], _MARKS.get(word, "bold"), case_sensitive=True)
    _console(stream).print(out, soft_wrap=True)


def diagnostics(text_lines: Sequence[str], stream: IO[str]) -> None:
    """`file:line:col: /pointer: message` lines; the location bold when styled."""
    if not styled(stream):
        stream.writelines(line + "\n" for line in text_lines)
        return
    from rich.text import Text

    console = _console(stream)
    for line in text_lines:
        head, sep, rest = line.partition(": ")
        out = Text(head + sep, style="bold")
        out.append(rest)
        console.print(out, soft_wrap=True)


@contextlib.contextmanager
def status(message: str, stream: IO[str] | None = None) -> Iterator[None]:
    """A spinner with `message` on stderr while the block runs (a terminal only)."""
    stream = stream if stream is not None else sys.stderr
    if not styled(stream):
        yield
        return
    with _console(stream).status(message, spinner="dots"):
        yield


def summary(text: str, stream: IO[str] | None = None, *, ok: bool = True) -> None:
    """The one-line result of a command, on stderr (stdout keeps the command's output)."""
    stream = stream if stream is not None else sys.stderr
    if not styled(stream):
        stream.write(text + "\n")
        return
    _console(stream).print(text, style="bold green" if ok else "bold red", markup=False)
