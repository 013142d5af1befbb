"""One way to build a test project: the package `agentgen new` writes (its `_generated/`
rendered by the generator), with the test's own handlers and entry point."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

# What the generator renders from the schema alone (the protocol models) or the manifest
# alone (its models), by input: one worker's test projects share one rendering of each.
_RENDERED: dict[str, str] = {}
_active = {"depth": 0}


@contextlib.contextmanager
def models_once() -> Iterator[None]:
    """While open, the protocol models and the manifest models are rendered once per input
    for the whole test process (the same source `agentgen new` writes; only the repeated
    work is saved). The models' own tests (tests/generator/test_models.py,
    test_manifest_models.py, the golden projects' byte check) render them afresh."""
    from generator import render

    if _active["depth"]:
        yield
        return
    protocol, manifest = render._models_source, render._manifest_models_source

    def protocol_once(schema: dict[str, Any], meta: Any, label: str) -> str:
        key = json.dumps(["protocol", schema, meta, label], sort_keys=True)
        if key not in _RENDERED:
            _RENDERED[key] = protocol(schema, meta, label)
        return _RENDERED[key]

    def manifest_once(data: dict[str, Any], label: str) -> str:
        key = json.dumps(["manifest", data, label], sort_keys=True, default=str)
        if key not in _RENDERED:
            _RENDERED[key] = manifest(data, label)
        return _RENDERED[key]

    render._models_source = protocol_once
    render._manifest_models_source = manifest_once
    _active["depth"] += 1
    try:
        yield
    finally:
        _active["depth"] -= 1
        render._models_source, render._manifest_models_source = protocol, manifest


def write_project(
    tmp: Path,
    package: str,
    *,
    schema: dict[str, Any],
    manifest: dict[str, Any],
    role: str = "agent",
    transport: str = "stdio",
    meta: dict[str, Any] | None = None,
    source_label: str | None = None,
    also: tuple[tuple[dict[str, Any], dict[str, Any] | None, str], ...] = (),
    handlers: str | None = None,
    main: str | None = None,
) -> Path:
    """Write `<tmp>/<package>`: `_generated/`, an empty `__init__.py`, and `handlers.py` /
    `__main__.py` when given. Returns the package's folder (`<tmp>` is what goes on
    PYTHONPATH)."""
    from generator.render import render_generated
    from generator.scaffold.project import write_generated

    with models_once():
        files = render_generated(
            schema=schema,
            meta=meta,
            manifest=manifest,
            role=role,
            transport=transport,
            package=package,
            source_label=source_label,
            also=also,
        )
    pkg = tmp / package
    write_generated(pkg / "_generated", files)
    (pkg / "__init__.py").write_text("")
    if handlers is not None:
        (pkg / "handlers.py").write_text(handlers)
    if main is not None:
        (pkg / "__main__.py").write_text(main)
    return pkg


def import_from(root: Path | str, module: str) -> ModuleType:
    """Import `module` of a generated project under `root`, which is not on pytest's
    pythonpath: `root` is on sys.path only while the import runs (monkeypatch's
    `syspath_prepend`, undone after, so nothing leaks into later tests); the package's
    own later imports go through its `__path__`."""
    import importlib

    import pytest

    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(root))
        return importlib.import_module(module)
