"""Where agentgen's own schemas (`schema/*.json`) are, in a checkout or an installed copy.

In a source checkout (editable install, tests) they are read from the repository's
`schema/` folder; a non-editable install ships them as data files under
`<prefix>/share/agentgen/schema/` (see `[tool.setuptools.data-files]` in pyproject.toml).
"""

from __future__ import annotations

import json
import site
import sys
import sysconfig
from functools import cache
from pathlib import Path
from typing import Any

from .errors import AgentgenError

_SHARE = Path("share") / "agentgen" / "schema"


def _candidates(name: str) -> list[Path]:
    found = [Path(__file__).resolve().parent.parent / "schema" / name]
    prefixes = [sysconfig.get_path("data"), sys.prefix, sys.exec_prefix]
    user_base = getattr(site, "USER_BASE", None)
    if user_base:
        prefixes.append(user_base)
    for prefix in prefixes:
        if prefix:
            found.append(Path(prefix) / _SHARE / name)
    return found


def schema_path(name: str) -> Path:
    """The path of `schema/<name>`, wherever agentgen is installed."""
    candidates = _candidates(name)
    for path in candidates:
        if path.is_file():
            return path
    raise AgentgenError(
        f"agentgen's own schema {name} is missing",
        hint=f"looked in {', '.join(str(p.parent) for p in candidates)}; reinstall agentgen",
    )


@cache
def load_schema(name: str) -> Any:
    """`schema/<name>` parsed as JSON (cached: the files do not change at run time)."""
    return json.loads(schema_path(name).read_text(encoding="utf-8"))
