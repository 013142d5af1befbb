"""The committed golden projects (`generated/projects/`) are exactly what agentgen
generates from our example manifests, and each is ruff-formatted, mypy-clean and
passes its own tests. Regenerate them with `make regen-golden`. The drift check (a
fresh `agentgen new` of each example, compared byte for byte) is in `make test-fast`;
checking each project with its own ruff, mypy and pytest is slow."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import mypy_support
import pytest
import regen_golden

BIN = Path(sys.executable).parent


def test_there_are_golden_cases() -> None:
    assert regen_golden.cases(), "no examples/*/agent.yaml"


def test_golden_projects_match_the_generator(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # rendered afresh, not read back from the run's models cache: a cache of this test's
    # own, empty at first (the projects of one schema share its protocol models)
    monkeypatch.setenv("AGENTGEN_MODELS_CACHE", str(tmp_path / "models"))
    out = io.StringIO()
    with redirect_stdout(out):
        code = regen_golden.main(["--check"])
    assert code == 0, out.getvalue() + "\n(run: python tests/regen_golden.py)"


@pytest.mark.slow
@pytest.mark.parametrize(
    "case", regen_golden.cases() or [None], ids=lambda c: c.name if c else "no-examples"
)
def test_golden_project_is_formatted_typed_and_tested(case: regen_golden.Case | None) -> None:
    assert case is not None, "no examples/*/agent.yaml"
    root = regen_golden.GOLDEN / case.name
    assert root.is_dir(), f"missing {root}"
    pkg = next(p.parent.parent.name for p in root.glob("*/_generated/SOURCE.json"))
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    fmt = subprocess.run(
        [str(BIN / "ruff"), "format", "--check", "--no-cache", pkg, "tests"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    # strict, from the project's own [tool.mypy]
    typed = mypy_support.run([sys.executable, "-m", "mypy", "."], kind="project", cwd=root, env=env)
    assert typed.returncode == 0, typed.stdout + typed.stderr
    # the project's own lint config, as a user runs it (no unused ignores, no stray imports)
    lint = subprocess.run(
        [str(BIN / "ruff"), "check", "--no-cache", "."],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    helped = subprocess.run(
        [sys.executable, "-m", pkg, "--help"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert helped.returncode == 0 and "Agent Client Protocol" in helped.stdout, helped.stderr
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    # issue 19 item 6: an agent's own tests cover the manifest's contract (and HTTP)
    wanted = {"agent": list(_CONTRACT), "client": []}[case.role]
    if case.role == "agent" and case.transport == "http":
        wanted.append("test_initialize_session_and_prompt_over_http")
    passed = {
        line.split("::")[-1] for line in tests.stdout.splitlines() if line.startswith("PASSED")
    }
    assert not [w for w in wanted if w not in passed], tests.stdout


_CONTRACT = (
    "test_each_interrupt_approved_and_declined",
    "test_each_error_reaches_the_client",
    "test_each_config_option_set_and_refused",
)


# what a generated project may import: its dependencies, by import name (pydantic_core
# is part of pydantic: pydantic pins it exactly)
_IMPORTS = {
    "pydantic": {"pydantic", "pydantic_core"},
    "orjson": {"orjson"},
    "starlette": {"starlette"},
    "hypercorn": {"hypercorn"},
    "uvloop": {"uvloop"},
    "httpx": {"httpx"},
    "websockets": {"websockets"},
    # extras of an HTTP agent (several replicas), imported only when configured
    "psycopg": {"psycopg", "psycopg_pool"},
    "redis": {"redis"},
    # the `mcp` extra: the MCP servers a client passes (runtime/agent/mcp_link.py)
    "mcp": {"mcp"},
    # the `model` extra (a manifest with `llm`): pydantic-ai with the OpenAI and Anthropic
    # clients (runtime/model/)
    "pydantic-ai-slim": {"pydantic_ai", "openai", "anthropic"},
    "anyio": {"anyio"},
    # the `otel` extra: traces and metrics, imported only when OTEL_* configures them
    # (runtime/observe/otel.py)
    "opentelemetry-sdk": {"opentelemetry"},
    "prometheus-client": {"prometheus_client"},
}


@pytest.mark.parametrize(
    "case", regen_golden.cases() or [None], ids=lambda c: c.name if c else "no-examples"
)
def test_golden_project_ships_only_what_it_can_import(case: regen_golden.Case | None) -> None:
    """Every module of a project imports only the standard library, its own package and
    the project's declared dependencies: a stdio project ships no HTTP module."""
    import ast
    import re
    import tomllib

    assert case is not None
    root = regen_golden.GOLDEN / case.name
    pyproject = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    extras = pyproject["project"].get("optional-dependencies", {})
    declared = {
        name
        for dep in [*pyproject["project"]["dependencies"], *(d for v in extras.values() for d in v)]
        if (m := re.match(r"[A-Za-z0-9_.-]+", dep)) and m.group(0) in _IMPORTS
        for name in _IMPORTS[m.group(0)]
    }
    (pkg,) = {p.parent.parent.name for p in root.glob("*/_generated/SOURCE.json")}
    allowed = declared | set(sys.stdlib_module_names) | {pkg, "__future__"}
    for path in sorted((root / pkg).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in allowed, f"{path.relative_to(root)} imports {name}"
    runtime = {p.name for p in (root / pkg / "_generated" / "runtime").rglob("*.py")}
    rooms = {p.name for p in (root / pkg / "_generated" / "runtime").iterdir() if p.is_dir()}
    # a stdio agent carries no HTTP server and no console; a client no session store, no
    # agent side (no handler surface, no MCP, no model)
    assert ("http" in rooms) == (case.role == "agent" and case.transport == "http"), rooms
    assert ("console" in rooms) == (case.role == "client"), rooms
    assert ("sessions" in rooms) == (case.role == "agent"), rooms
    assert ("agent" in rooms) == (case.role == "agent"), rooms
    if case.role == "agent":  # its tests' client: beside it, not in its wheel (issue 37)
        found = pyproject["tool"]["setuptools"]["packages"]["find"]
        assert found["exclude"] == [f"{pkg}._generated.testing", f"{pkg}._generated.runtime.client"]
        assert (root / pkg / "_generated" / "testing" / "__init__.py").is_file()
    if case.transport == "stdio":
        # a client speaks both transports (`-- CMD` and `--url`): it ships the HTTP client
        client = case.role == "client"
        assert not runtime & {
            "http_server.py",
            "http_app.py",
            "http_connection.py",
            "http_streams.py",
            "http_launch.py",
            *(() if client else ("http_client.py", "auth.py")),
            "callbacks.py",
            "store_postgres.py",
            "redis_router.py",
        }
        assert client == ("http_client.py" in runtime)
