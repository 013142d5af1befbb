"""Run one command's implementation so that every failure is one line on stderr.

Used by the Typer app (generator/cli.py) and by the console entry's fast path
(generator/entry.py), which must not import Typer.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .errors import AgentgenError


def run_guarded(fn: Any, *args: Any, **kwargs: Any) -> int:
    """Call a command's implementation; every failure becomes one line on stderr.

    Exit codes: the implementation's (0 clean, 1 findings in the input), AgentgenError's
    own (1 for an invalid input, 2 for usage), 2 for a file-system error (read-only
    directory, full disk) or a bug (AGENTGEN_DEBUG=1 shows its traceback), 130 on ^C."""
    try:
        return int(fn(*args, **kwargs) or 0)
    except AgentgenError as err:
        sys.stderr.write(f"agentgen: error: {err}\n")
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except OSError as err:
        where = f"{err.filename}: " if err.filename else ""
        sys.stderr.write(f"agentgen: error: {where}{err.strerror or err}\n")
        return 2
    except Exception as err:
        if os.environ.get("AGENTGEN_DEBUG"):
            raise
        sys.stderr.write(
            f"agentgen: internal error: {type(err).__name__}: {err} "
            "(run with AGENTGEN_DEBUG=1 for the traceback, and please report it)\n"
        )
        return 2
