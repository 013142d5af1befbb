"""Case folders for the protocol side of the generator; one test walks them all.

- tests/cases/naming/<case>/: `schema.json` (a small schema we wrote), `classes.txt` (every
  class the models module defines, sorted, one a line; none numbered), and optionally
  `messages.json`: `[{"type": Def, "message": {...}, "parses_as": Class}]` (the member
  class a union picks, after `.root`), each dumping back unchanged. Every case's module
  passes ruff's ambiguous-Unicode rules (RUF001-RUF003: a generated project lints with RUF).
- tests/cases/diff/<case>/: `old.json`, `new.json` and `expected.txt`, the text report.

Adding a case needs no new test code.  Regenerate an expected file after a deliberate
change with AGENTGEN_UPDATE_CASES=1 (then read the diff before committing it).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from expected_support import expected
from numbered import ambiguous_unicode, numbered_classes
from pydantic import RootModel

from generator.protocol.diff import diff_schemas, format_text
from generator.protocol.models import generate_models

CASES = Path(__file__).resolve().parents[1] / "cases"


def _folders(kind: str) -> list[Path]:
    return sorted(p for p in (CASES / kind).iterdir() if p.is_dir())


def _all_cases() -> list[tuple[str, Path]]:
    return [(kind, p) for kind in ("naming", "diff") for p in _folders(kind)]


def _expect(path: Path, got: str) -> None:
    assert got == expected(path, got)


def _classes(code: str) -> list[str]:
    return sorted(n.name for n in ast.parse(code).body if isinstance(n, ast.ClassDef))


def _import(code: str, name: str, tmp: Path) -> Any:
    path = tmp / f"{name}.py"
    path.write_text(code, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _naming(case: Path, tmp: Path) -> None:
    schema = json.loads((case / "schema.json").read_text(encoding="utf-8"))
    code = generate_models(schema, source_label=f"cases/naming/{case.name}")
    assert numbered_classes(code, schema) == []
    assert ambiguous_unicode(code) == ""
    _expect(case / "classes.txt", "".join(f"{c}\n" for c in _classes(code)))
    messages = case / "messages.json"
    if not messages.exists():
        return
    module = _import(code, "naming_case_" + case.name, tmp)
    for item in json.loads(messages.read_text(encoding="utf-8")):
        obj = getattr(module, item["type"]).model_validate(item["message"])
        member: Any = obj
        while isinstance(member, RootModel):
            member = member.root
        assert type(member).__name__ == item["parses_as"], item
        dumped = obj.model_dump(by_alias=True, exclude_unset=True, mode="json")
        assert dumped == item["message"]


def _diff(case: Path) -> None:
    old = json.loads((case / "old.json").read_text(encoding="utf-8"))
    new = json.loads((case / "new.json").read_text(encoding="utf-8"))
    _expect(case / "expected.txt", format_text(diff_schemas(old, new)))


def test_there_are_cases_of_each_kind() -> None:
    assert len(_folders("naming")) >= 5
    assert len(_folders("diff")) >= 2


@pytest.mark.parametrize(("kind", "case"), _all_cases(), ids=lambda v: getattr(v, "name", v))
def test_case(kind: str, case: Path, tmp_path: Path) -> None:
    if kind == "naming":
        _naming(case, tmp_path)
    else:
        _diff(case)
