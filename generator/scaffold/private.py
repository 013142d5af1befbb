"""User code that imports the generated package's private modules.

`_generated/acp.py` is the public face: its names stay put across regen.  The runtime
(`_generated/runtime/`), the dispatcher and the revision description are private: their
layout may change with any agentgen release.  `agentgen regen` warns about each import
of one in the package's own modules (handlers.py and its siblings), with the line to
change; it never fails because of it.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .. import pysource
from .compat import Finding

if TYPE_CHECKING:
    from .project import Project

PRIVATE = ("runtime", "dispatcher", "revision", "testing")  # testing: not in the wheel


def private_imports(proj: Project) -> list[Finding]:
    """Each `from ..._generated.<private> import ...` in the package, outside `_generated/`."""
    pkg = proj.root / proj.package
    found: list[Finding] = []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg)
        if rel.parts[0] == "_generated":
            continue
        try:
            tree = pysource.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # regen's other checks report a file that does not parse
        for node in ast.walk(tree):
            module = _private_module(node, proj.package, len(rel.parts))
            if module is not None:
                names = ", ".join(a.name for a in node.names)  # type: ignore[attr-defined]
                found.append(
                    Finding(
                        str(path.relative_to(proj.root)),
                        node.lineno,  # type: ignore[attr-defined]
                        f"imports {names} from the private module {module}: import "
                        "from ._generated.acp instead (its names stay put across regen)",
                    )
                )
    return found


def _private_module(node: ast.AST, package: str, depth: int) -> str | None:
    """The private `_generated` module `node` imports from, or None."""
    if not isinstance(node, ast.ImportFrom) or node.module is None:
        return None
    parts = node.module.split(".")
    if node.level == 0:  # absolute: <package>._generated.<x>
        if parts[:2] != [package, "_generated"]:
            return None
        rest = parts[2:]
    elif node.level == depth and parts[0] == "_generated":  # relative, from the package's top
        rest = parts[1:]
    else:
        return None
    if rest and rest[0] in PRIVATE:
        return "_generated." + ".".join(rest)
    return None
