"""Drift alarms on a generated module: classes that carry a number the schema did not
give them (`ContentBlock1`, `SessionUpdate18`, `Role1`), and text a project's ruff refuses."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

_ENDS_IN_DIGIT = re.compile(r"[A-Za-z_]\d+$")


def numbered_classes(code: str, schema: dict[str, Any]) -> list[str]:
    """Top-level classes and aliases of `code` whose name ends in a number the schema did
    not give: a definition's own name (`Utf16`), or a name ending with one
    (`IdJsonRpcMessage2`, a member of the definition `JsonRpcMessage2`), is not numbered."""
    own: set[str] = set()
    for key in ("$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            own |= set(schema[key])
    found = []
    for node in ast.parse(code).body:
        names: list[str] = []
        if isinstance(node, ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        found += [
            n
            for n in names
            if _ENDS_IN_DIGIT.search(n)
            and not any(n.endswith(d) for d in own if d[-1:].isdigit())
            and n not in own
        ]
    return sorted(found)


def ambiguous_unicode(code: str) -> str:
    """What ruff's RUF001-RUF003 find in `code` (as a generated project's `ruff check`)."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    args = ["check", "--no-cache", "--isolated", "--select", "RUF001,RUF002,RUF003"]
    done = subprocess.run(
        [ruff, *args, "--output-format", "concise", "--stdin-filename", "models.py", "-"],
        input=code,
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
    )
    return "" if done.returncode == 0 else done.stdout + done.stderr
