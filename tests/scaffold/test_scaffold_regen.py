"""Issue 6, end to end on the real pipeline: scaffold on the legacy ACP schema, add
user code and a user test, regenerate on v1 (user code byte-identical, the project's
tests pass), then on v2 (the report names the real breaking changes, the affected
handlers are listed as file:line, exit non-zero, nothing of the user's lost)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scaffold_support import store, tree_bytes  # noqa: F401 - fixture
from typer.testing import CliRunner

from generator.cli import app

MANIFEST = """\
name: paper-scout
version: 0.1.0
title: Paper Scout
description: Finds papers. {{ not_a_template }}
"""

USER_HANDLERS = '''

def summarize(text: str) -> str:
    """User code: the first sentence."""
    return text.split(". ")[0].rstrip(".") + "."


class ScoutAgent(Agent):
    async def session_prompt(self, *args: object, **kwargs: object) -> object:
        from ._generated import models

        return models.PromptResponse(stop_reason="end_turn")

    async def session_set_mode(self, *args: object, **kwargs: object) -> None:
        return None

    async def authenticate(self, *args: object, **kwargs: object) -> object:
        return None
'''

USER_TEST = """
from paper_scout.handlers import summarize


def test_summarize() -> None:
    assert summarize("One. Two.") == "One."
"""


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def run_project_tests(project: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(project), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def user_files(project: Path) -> dict[str, bytes]:
    return {k: v for k, v in tree_bytes(project).items() if "/_generated/" not in k}


@pytest.mark.slow
@pytest.mark.usefixtures("store")
def test_regen_across_revisions(tmp_path: Path, shared_acp: Path) -> None:
    manifest = tmp_path / "agent.yaml"
    manifest.write_text(MANIFEST)
    project = tmp_path / "scout"
    code, out = invoke(
        "new",
        str(project),
        "--manifest",
        str(manifest),
        "--schema",
        str(shared_acp / "legacy/schema.json"),
    )
    assert code == 0, out
    first = run_project_tests(project)
    assert first.returncode == 0, first.stdout + first.stderr

    handlers = project / "paper_scout/handlers.py"
    handlers.write_text(handlers.read_text() + USER_HANDLERS)
    (project / "tests/test_user.py").write_text(USER_TEST)
    mine = user_files(project)

    # legacy -> v1 (with its unstable part, which legacy's single file also had):
    # compatible for this user code
    code, out = invoke(
        "regen",
        "--project",
        str(project),
        "--schema",
        str(shared_acp / "v1/schema.unstable.json"),
    )
    assert code == 0, out
    assert user_files(project) == mine
    done = run_project_tests(project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout or "passed" in done.stdout
    assert invoke("check", "--project", str(project))[0] == 0

    # v1 -> v2: breaking
    v1_generated = {k: v for k, v in tree_bytes(project).items() if "/_generated/" in k}
    code, out = invoke(
        "regen",
        "--project",
        str(project),
        "--schema",
        str(shared_acp / "v2/schema.json"),
        "--dry-run",
    )
    assert code == 1, out
    assert {k: v for k, v in tree_bytes(project).items() if "/_generated/" in k} == v1_generated

    code, out = invoke(
        "regen", "--project", str(project), "--schema", str(shared_acp / "v2/schema.json"), "-v"
    )
    assert code == 1, out
    # the revision report names what really changed between v1 and v2
    assert "session/set_mode" in out
    assert "authenticate" in out
    assert "stopReason" in out
    # and the user's handlers it breaks, with file:line
    lines = handlers.read_text().splitlines()

    def line_of(text: str) -> int:
        return lines.index(text) + 1

    prompt = line_of(
        "    async def session_prompt(self, *args: object, **kwargs: object) -> object:"
    )
    set_mode = line_of(
        "    async def session_set_mode(self, *args: object, **kwargs: object) -> None:"
    )
    auth = line_of("    async def authenticate(self, *args: object, **kwargs: object) -> object:")
    use = line_of('        return models.PromptResponse(stop_reason="end_turn")')
    assert f"paper_scout/handlers.py:{set_mode}: ScoutAgent.session_set_mode" in out
    assert f"paper_scout/handlers.py:{auth}: ScoutAgent.authenticate" in out
    assert (
        f"paper_scout/handlers.py:{prompt}: ScoutAgent.session_prompt: PromptResponse lost field 'stopReason'"
        in out
    )
    assert (
        f"paper_scout/handlers.py:{use}: ScoutAgent.session_prompt: uses PromptResponse.stopReason"
        in out
    )
    # a field v2 newly requires in what only the runtime builds is information
    assert "all in messages the runtime builds (nothing to do):" in out
    assert "  InitializeResponse.info (initialize result)" in out
    # the generated test builds initialize with each revision's own field names: no finding
    test_file = f"tests/test_{'paper_scout'}.py"
    assert not [ln for ln in out.splitlines() if ln.startswith(test_file + ":")], out
    # nothing of the user's lost; _generated/ is the v2 one and consistent
    assert user_files(project) == mine
    assert invoke("check", "--project", str(project))[0] == 0


def test_regen_names_a_dependency_the_new_runtime_needs(tmp_path: Path, shared_acp: Path) -> None:
    """The manifest gains async output to a callback URL: regen ships runtime/sessions/callbacks.py,
    which imports httpx, which a stdio project does not declare.  regen says what to add
    to pyproject.toml (the user's file, not edited) and exits 1; once it is added, 0."""
    manifest = tmp_path / "agent.yaml"
    manifest.write_text(MANIFEST)
    project = tmp_path / "scout"
    schema = str(shared_acp / "v1/schema.json")
    code, out = invoke("new", str(project), "--manifest", str(manifest), "--schema", schema)
    assert code == 0, out
    recorded = project / "agent.yaml"
    recorded = recorded if recorded.exists() else manifest
    recorded.write_text(recorded.read_text() + "output_modes:\n  async:\n    callback: true\n")
    code, out = invoke("regen", "--project", str(project))
    assert code == 1, out
    assert "callbacks.py" in out and '"httpx>=0.27"' in out and "pyproject.toml" in out, out
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text()
    assert "httpx" not in text
    pyproject.write_text(text.replace('"orjson>=3.10",', '"orjson>=3.10",\n  "httpx>=0.27",'))
    code, out = invoke("regen", "--project", str(project))
    assert code == 0, out
    assert "missing from your pyproject.toml" not in out


def test_regen_warns_about_an_import_of_a_private_module(tmp_path: Path) -> None:
    """handlers.py importing the runtime (or the dispatcher) directly: regen names each
    such line and says to import from `_generated.acp`; the public import is not named,
    and the warning alone does not fail regen."""
    manifest = tmp_path / "agent.yaml"
    manifest.write_text(MANIFEST)
    project = tmp_path / "scout"
    code, out = invoke("new", str(project), "--manifest", str(manifest), "--no-git")
    assert code == 0, out
    handlers = project / "paper_scout/handlers.py"
    text = handlers.read_text()
    assert "from ._generated.acp import" in text  # the stub uses the public face only
    code, out = invoke("regen", "-p", str(project))
    assert code == 0, out
    assert "private module" not in out
    handlers.write_text(
        text
        + "\nfrom ._generated.runtime.agent.authoring import PlanEntry  # noqa: E402\n"
        + "from paper_scout._generated.dispatcher import AgentBase as Base  # noqa: E402\n"
        + "from ._generated.acp import Turn as T  # noqa: E402\n"
    )
    lines = handlers.read_text().splitlines()
    code, out = invoke("regen", "-p", str(project))
    assert code == 0, out
    first = lines.index("from ._generated.runtime.agent.authoring import PlanEntry  # noqa: E402")
    assert (
        f"paper_scout/handlers.py:{first + 1}: imports PlanEntry from the private module "
        "_generated.runtime.agent.authoring: import from ._generated.acp instead" in out
    ), out
    assert (
        f"paper_scout/handlers.py:{first + 2}: imports AgentBase from the private module _generated.dispatcher"
        in out
    ), out
    assert "Turn" not in out.split("private module of the generated package")[1]


ECHO = Path(__file__).resolve().parents[2] / "examples" / "echo" / "agent.yaml"


def _last_line(out: str) -> str:
    return out.rstrip("\n").splitlines()[-1]


@pytest.mark.usefixtures("store")
def test_regen_leads_with_what_to_change_and_ends_in_one_line(
    tmp_path: Path, shared_acp: Path
) -> None:
    """Issue 29, item 10: v1 -> v2 printed the whole revision report (hundreds of lines)
    with the one line to act on near the end and no result line. Now: the user's lines
    to change first, one line per revision, the one-line result last; the full report
    only with --verbose or in the --report file."""
    project = tmp_path / "proj"
    v1, v2 = (str(shared_acp / rev / "schema.json") for rev in ("v1", "v2"))
    code, out = invoke("new", str(project), "-m", str(ECHO), "--no-git", "--schema", v1)
    assert code == 0, out
    handlers = project / "echo_agent" / "handlers.py"
    handlers.write_text(
        handlers.read_text()
        + "\n\nclass Extra(Agent):\n"
        + "    async def session_set_mode(self, *args: object, **kwargs: object) -> None:\n"
        + "        return None\n"
    )
    line = handlers.read_text().splitlines().index("class Extra(Agent):") + 2

    code, out = invoke("regen", "-p", str(project), "--schema", v2, "--dry-run")
    assert code == 1, out
    lines = out.strip("\n").splitlines()
    assert len(lines) <= 15, out
    assert "BREAKING" not in out  # the per-type report is not printed by default
    first = next(ln for ln in lines if ln.strip())
    assert first.endswith("must change for the new dispatcher:"), out
    assert lines[lines.index(first) + 1].startswith(f"echo_agent/handlers.py:{line}: "), out
    header = next(ln for ln in lines if ln.startswith("protocol schema"))
    assert lines.index(header) > lines.index(first) + 1
    assert re.fullmatch(r"protocol schema: .* -> .*: \d+ changes, \d+ breaking", header), header
    assert "--verbose, or --report FILE" in out
    assert re.fullmatch(
        r"regen \(dry run\): v1 -> v2: \d+ breaking, \d+ added, \d+ changed; "
        r"no longer served: v1; 1 line of your code to change",
        _last_line(out),
    ), out

    code, verbose = invoke("regen", "-p", str(project), "--schema", v2, "--dry-run", "-v")
    assert code == 1
    assert "BREAKING  method-removed   session/set_mode" in verbose
    assert "  ContentChunk.messageId (session/update params)" in verbose
    assert _last_line(verbose) == _last_line(out)

    report = tmp_path / "report.txt"
    code, out = invoke("regen", "-p", str(project), "--schema", v2, "--report", str(report))
    assert code == 1
    assert f"the full revision report: {report}" in out and "BREAKING" not in out
    text = report.read_text()
    assert text.startswith("protocol schema: ") and "BREAKING  method-removed" in text

    handlers.write_text(handlers.read_text().split("\n\nclass Extra(")[0] + "\n")
    code, out = invoke("regen", "-p", str(project))
    assert code == 0, out
    assert (
        _last_line(out) == "regen: echo_agent/_generated/ is up to date; nothing of yours to change"
    )


@pytest.mark.usefixtures("store")
def test_a_revision_added_beside_the_recorded_one_is_no_diff(
    tmp_path: Path, shared_acp: Path
) -> None:
    """Issue 29, item 10: adding v1 back to a v2 project read "v2 -> v1 unstable, 147
    breaking" (a diff from the recorded v2 to the added v1). An added revision is said
    to be added."""
    project = tmp_path / "proj"
    v1, v2 = (str(shared_acp / rev / "schema.json") for rev in ("v1", "v2"))
    code, out = invoke("new", str(project), "-m", str(ECHO), "--no-git", "--schema", v2)
    assert code == 0, out
    code, out = invoke("regen", "-p", str(project), "--schema", v2, "--schema", v1)
    assert code == 0, out
    assert "BREAKING" not in out and "breaking" not in out, out
    assert f"protocol schema (v1): added {v1}" in out
    assert _last_line(out) == "regen: v1 added; nothing of yours to change", out


# ---- a model project (issue 37 item 2) ------------------------------------------------

_IN = "in [project] dependencies: "
_G = "p/_generated/runtime"
_MODEL_IMPORTS = {
    "runtime/model/adapter.py": "from pydantic_ai.messages import TextPart\n",
    "runtime/model/route.py": "from openai import AsyncOpenAI\nimport anthropic\n",
    "runtime/agent/mcp_toolset.py": "import mcp\nimport anyio\n",
    # telemetry's imports: the runtime turns it off without them (the `otel` extra), so a
    # project made before the extra existed is not missing a dependency
    "runtime/observe/otel.py": "from opentelemetry import trace\nimport prometheus_client\n",
}


@pytest.mark.parametrize(
    ("requirements", "wanted"),
    [
        # the template's declaration: the extras install openai, anthropic and mcp
        (['"pydantic-ai-slim[openai,anthropic,mcp]>=2.78"', '"anyio>=4"'], []),
        (['"pydantic-ai[mcp]"', '"anyio"'], []),  # the whole pydantic-ai has every client
        (['"openai"', '"anthropic"', '"mcp"', '"pydantic_ai_slim"', '"anyio"'], []),
        (
            ['"Pydantic_AI-Slim[OpenAI]>=2.0"', '"anyio>=4"'],
            [
                (
                    f'add the extra "anthropic" to "pydantic-ai-slim" {_IN}{_G}/model/route.py '
                    "imports anthropic"
                ),
                (
                    f'add the extra "mcp" to "pydantic-ai-slim" {_IN}{_G}/agent/mcp_toolset.py '
                    "imports mcp"
                ),
            ],
        ),
        (
            ['"anyio>=4"'],
            [
                (
                    f'add "pydantic-ai-slim[openai,anthropic,mcp]>=2.78" to [project] dependencies: '
                    f"{_G}/model/route.py imports anthropic, {_G}/model/route.py imports openai, "
                    f"{_G}/model/adapter.py imports pydantic_ai"
                ),
                f'add "mcp>=2.0" to [project] dependencies: {_G}/agent/mcp_toolset.py imports mcp',
            ],
        ),
    ],
)
def test_the_dependency_check_reads_extras_and_names_the_distribution(
    tmp_path: Path, requirements: list[str], wanted: list[str]
) -> None:
    """Before: `pydantic-ai-slim[openai,anthropic,mcp]` counted as declaring none of
    pydantic_ai, openai or anthropic, and regen advised `add "pydantic_ai"` (an import
    name, not the distribution)."""
    from generator.scaffold.compat import missing_dependencies

    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "p"\nversion = "0"\n'
        f"dependencies = [{', '.join(requirements)}]\n"
        "[project.optional-dependencies]\ntest = []\n"
    )
    found = missing_dependencies(pyproject, _MODEL_IMPORTS, "p", "p/_generated/")
    assert [f.message for f in found] == wanted
    assert all(f.path == "pyproject.toml" for f in found)


@pytest.mark.usefixtures("store")
def test_regen_on_the_golden_model_project_exits_0_on_every_revision(
    tmp_path: Path, shared_acp: Path
) -> None:
    """The golden `assistant` (a model project), untouched: regen as it is, to v1, to v2,
    then to v1 + v2 and again (nothing changed), all exit 0 with nothing of the
    user's to change (before: exit 1, "3 dependency(ies) missing")."""
    import shutil

    from regen_golden import GOLDEN

    project = tmp_path / "assistant"
    shutil.copytree(GOLDEN / "assistant-agent-stdio", project)
    v1, v2 = (str(shared_acp / rev / "schema.json") for rev in ("v1", "v2"))
    for schemas in ([], [v1], [v2], [v1, v2], [v1, v2]):
        args = [a for s in schemas for a in ("--schema", s)]
        code, out = invoke("regen", "--project", str(project), *args)
        assert code == 0, (schemas, out)
        assert "missing from your pyproject.toml" not in out and "nothing of yours" in out, out


@pytest.mark.usefixtures("store")
def test_regen_says_first_what_a_revision_takes_from_a_model_project(
    tmp_path: Path, shared_acp: Path
) -> None:
    """Issue 37 item 3: the golden `assistant` (made on the default v1-unstable, with a
    `providers:` block and a model) regenerated to v2: regen's first lines say the
    providers and the editor's files and terminal go, with the regen that keeps them
    (v1-unstable, the schema the project was made on, not stable v1), and so does the
    closing line; to stable v1 + v2 the providers still go. Before: "nothing of yours to
    change" and "Serve both: repeat --schema, one per revision"."""
    import shutil

    from regen_golden import GOLDEN

    project = tmp_path / "assistant"
    shutil.copytree(GOLDEN / "assistant-agent-stdio", project)
    v1, v2 = (str(shared_acp / rev / "schema.json") for rev in ("v1", "v2"))
    keep = f"agentgen regen --schema v1-unstable --schema {v2}"
    code, out = invoke("regen", "--project", str(project), "--schema", v2, "--dry-run")
    assert code == 0, out
    lines = out.strip().splitlines()
    assert lines[:3] == [
        "warning: 2 capability(ies) of your project no longer served:",
        (
            "agent.yaml: providers: the manifest's providers (main) are served by v1-unstable "
            f"(providers/list, providers/set, providers/disable) and by none of {v2}: an editor "
            f"can no longer route them (providers/* answer -32601). Keep them: {keep}"
        ),
        (
            "agent.yaml: the model's editor tools: v1-unstable serves the client's files and "
            f"terminal (fs/*, terminal/*), {v2} does not: read_file, write_file and run_command "
            "work on disk instead, in the session's folder (files as saved, commands run by the "
            f"agent, not in the editor's terminal). Keep them for v1 clients: {keep}"
        ),
    ], out
    assert f"its peers are refused. Serve both: {keep}\n" in out
    assert lines[-1].endswith(
        "2 capability(ies) lost (the warning above); nothing of yours to change"
    )
    code, out = invoke("regen", "-p", str(project), "--schema", v1, "--schema", v2, "--dry-run")
    assert code == 0, out
    lines = out.strip().splitlines()
    assert lines[0] == "warning: 1 capability(ies) of your project no longer served:", out
    assert lines[1].startswith("agent.yaml: providers: ") and lines[1].endswith(keep), out
    assert "editor tools" not in out  # v1 clients keep them
