"""agentgen's own schemas (`schema/*.json`: the manifest format, the upstream lock).

Read from the installed package (`generator/_data/schema/`) or, in a source checkout,
from the repository's `schema/` folder: see generator/packaged.py.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from .errors import AgentgenError
from .packaged import data_dir


def schema_path(name: str) -> Path:
    """The path of `schema/<name>`, wherever agentgen is installed."""
    path = data_dir("schema") / name
    if not path.is_file():
        raise AgentgenError(
            f"agentgen's own schema {name} is missing",
            source=str(path),
            hint="reinstall acp-agentgen",
        )
    return path


@cache
def load_schema(name: str) -> Any:
    """`schema/<name>` parsed as JSON (cached: the files do not change at run time)."""
    return json.loads(schema_path(name).read_text(encoding="utf-8"))
