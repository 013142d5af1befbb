"""The `agentgen` console entry: a fast path for `agentgen validate FILE...`, else Typer.

pre-commit runs `agentgen validate` on every commit. Typer (with the pydantic adapters
it builds for each parameter) costs about 0.15 s of start-up, more than validating a
manifest, so plain `validate` invocations (files and `--format`) are parsed here and
run directly. Anything else (`--help`, unknown options, no files, other verbs) goes to
the Typer app in `generator.cli`, which owns the help and the usage errors.
"""

from __future__ import annotations

import sys
from pathlib import Path


def validate_args(argv: list[str]) -> tuple[list[Path], str] | None:
    """(files, format) for a plain `validate` argument list, or None to defer to Typer."""
    files: list[Path] = []
    fmt = "text"
    args = iter(argv)
    for arg in args:
        if arg == "--":
            files.extend(Path(a) for a in args)
        elif arg == "--format":
            value = next(args, None)
            if value is None:
                return None
            fmt = value
        elif arg.startswith("--format="):
            fmt = arg.split("=", 1)[1]
        elif arg.startswith("-") and arg != "-":
            return None
        else:
            files.append(Path(arg))
    # anything Typer would refuse (no files, an unknown format) gets Typer's usage error
    return (files, fmt) if files and fmt in ("text", "json") else None


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["validate"]:
        parsed = validate_args(argv[1:])
        if parsed is not None:
            sys.exit(_validate(*parsed))
    from .cli import main as typer_main

    typer_main()


def _validate(files: list[Path], fmt: str) -> int:
    from .guard import run_guarded
    from .manifest.validate import run_validate

    return run_guarded(run_validate, files, fmt=fmt)
