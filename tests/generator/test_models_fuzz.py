"""Mutated upstream schemas through `agentgen models`: importable models or exit 2.

Hypothesis mutates a slice of the v1 unstable schema (the definitions a session
notification, a prompt, an initialize answer and an elicitation reach: tagged unions,
catch-alls, x-deserialize keywords, integer formats): it drops definitions, renames and
removes tag constants, adds unknown keywords, retypes properties, turns definitions into
non-schemas.  Each mutant goes through the CLI: either exit 0 and a module that imports,
or exit 2 with one located `agentgen: error:` line.  Never a traceback.  Bounded: 25
examples, one module import each.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from generator.cli import app

ROOTS = (
    "SessionNotification",
    "PromptRequest",
    "PromptResponse",
    "InitializeResponse",
    "CreateElicitationRequest",
)


def _closure(defs: dict[str, Any], roots: tuple[str, ...]) -> dict[str, Any]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        text = json.dumps(defs[name])
        todo += [part.split('"', 1)[0] for part in text.split('"#/$defs/')[1:]]
    return {n: defs[n] for n in sorted(seen)}


@pytest.fixture(scope="module")
def base_schema(shared_acp: Path) -> dict[str, Any]:
    full = json.loads((shared_acp / "v1" / "schema.unstable.json").read_text())
    return {"$schema": full["$schema"], "title": "slice", "$defs": _closure(full["$defs"], ROOTS)}


def _tag_sites(schema: dict[str, Any]) -> list[dict[str, Any]]:
    sites = []
    for d in schema["$defs"].values():
        for key in ("oneOf", "anyOf"):
            for member in d.get(key, []) if isinstance(d, dict) else []:
                for sub in (
                    (member.get("properties") or {}).values() if isinstance(member, dict) else []
                ):
                    if isinstance(sub, dict) and "const" in sub:
                        sites.append(sub)
    return sites


MUTATIONS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "drop_def",
                "rename_tag",
                "drop_tag",
                "unknown_keyword",
                "retype",
                "non_schema",
                "swap_union",
            ]
        ),
        st.integers(min_value=0, max_value=10_000),
        st.text(alphabet="abcxyz_-/.~ 9", min_size=0, max_size=12),
    ),
    min_size=1,
    max_size=4,
)


def _mutate(schema: dict[str, Any], ops: list[tuple[str, int, str]]) -> dict[str, Any]:
    out = copy.deepcopy(schema)
    defs = out["$defs"]
    for op, n, text in ops:
        names = sorted(defs)
        if not names:
            break
        name = names[n % len(names)]
        node = defs[name]
        if op == "drop_def":
            del defs[name]
        elif op in ("rename_tag", "drop_tag"):
            sites = _tag_sites(out)
            if sites:
                site = sites[n % len(sites)]
                if op == "rename_tag":
                    site["const"] = text
                else:
                    del site["const"]
        elif op == "unknown_keyword" and isinstance(node, dict):
            node[f"x-{text}"] = {"nested": [text, n]}
            node[text or "frobnicate"] = n
        elif op == "retype" and isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict) and props:
                key = sorted(props)[n % len(props)]
                props[key] = {"type": ["string", "integer", "boolean", "array", "null"][n % 5]}
            else:
                node["type"] = ["object", "string", "number"][n % 3]
        elif op == "non_schema":
            defs[name] = [text, n, None][n % 3]
        elif op == "swap_union" and isinstance(node, dict):
            for key in ("oneOf", "anyOf"):
                if key in node:
                    node["anyOf" if key == "oneOf" else "oneOf"] = node.pop(key)
                    break
    return out


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=MUTATIONS)
def test_mutated_schemas_give_models_or_a_located_error(
    base_schema: dict[str, Any], tmp_path: Path, ops: list[tuple[str, int, str]]
) -> None:
    mutant = _mutate(base_schema, ops)
    case = tmp_path / f"case{abs(hash(json.dumps(ops))) % 10**8}"
    case.mkdir()
    src = case / "schema.json"
    src.write_text(json.dumps(mutant))
    out = case / "models.py"
    result = CliRunner().invoke(app, ["models", str(src), "-o", str(out)])
    text = result.output
    assert "Traceback" not in text, text
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), (
        ops,
        repr(result.exception),
    )
    if result.exit_code == 0:
        name = f"acp_fuzz_{case.name}"
        spec = importlib.util.spec_from_file_location(name, out)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        finally:
            sys.modules.pop(name, None)
        assert hasattr(module, "AcpModel")
    else:
        assert result.exit_code == 2, (ops, text)
        lines = [line for line in text.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("agentgen: error: "), text
        assert str(src) in lines[0], text  # located: names the source
        assert not out.exists()
