"""The first hour of a new user (issue 19), on the stand-in pipeline: `check --all` (the
pre-commit hook) and the other command-line behaviour a new user meets first. The same
behaviour from the built wheel is in tests/e2e/test_wheel.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import mypy_support
import pytest
from scaffold_support import (  # noqa: F401 - fixtures
    fake_pipeline,
    store,
    write_fake_schema,
)
from typer.testing import CliRunner

from generator.cli import app
from generator.scaffold.new import run_new

REPO = Path(__file__).resolve().parents[2]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def _manifest(tmp: Path) -> Path:
    path = tmp / "agent.yaml"
    path.write_text("name: research-agent\nversion: 0.2.0\n", encoding="utf-8")
    return path


def _schema(tmp: Path) -> Path:
    return write_fake_schema(
        tmp / "s1.json",
        {
            "initialize": ["InitializeRequest", "InitializeResponse"],
            "session_prompt": ["PromptRequest", "PromptResponse"],
        },
        {"PromptResponse": [["stop_reason", "stopReason"]]},
    )


def test_check_all_passes_where_there_is_no_project(tmp_path: Path) -> None:
    (tmp_path / "agent.yaml").write_text("name: a\nversion: 0.1.0\n", encoding="utf-8")
    code, out = invoke("check", "--all", "--project", str(tmp_path))
    assert code == 0, out
    assert "nothing to check" in out
    code, out = invoke("check", "--project", str(tmp_path))  # one named project: required
    assert code == 2 and "not a project made by `agentgen new`" in out


@pytest.mark.usefixtures("fake_pipeline", "store")
def test_check_all_checks_every_generated_project(tmp_path: Path) -> None:
    manifest, schema = _manifest(tmp_path), str(_schema(tmp_path))
    repo = tmp_path / "repo"
    for where in ("agents/one", "two"):
        assert run_new(repo / where, manifest=manifest, schema=schema) == 0
    # a copy in a virtualenv or build output is not the user's project
    assert run_new(repo / ".venv" / "three", manifest=manifest, schema=schema) == 0
    assert run_new(repo / "build" / "four", manifest=manifest, schema=schema) == 0
    code, out = invoke("check", "--all", "--project", str(repo))
    assert code == 0, out
    assert "agents/one/research_agent/_generated/ is up to date" in out
    assert "two/research_agent/_generated/ is up to date" in out
    assert "three" not in out and "four" not in out

    models = repo / "two" / "research_agent" / "_generated" / "models.py"
    models.write_text(models.read_text() + "# edited\n")
    code, out = invoke("check", "--all", "--project", str(repo))
    assert code == 1, out
    assert "stale: two/research_agent/_generated/models.py: differs" in out
    assert "agents/one/research_agent/_generated/ is up to date" in out


# ---- regen: exit 1 only for what the user must change ---------------------------------


def run_project_tests(project: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(project), "PYTHONDONTWRITEBYTECODE": "1"}
    env["ACP_WIRE_CHECK"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.usefixtures("store")
@pytest.mark.parametrize("revision", ["legacy", "v1", "v2"])
def test_an_untouched_fresh_project_regenerates_to_any_revision(
    tmp_path: Path, shared_acp: Path, revision: str
) -> None:
    """Fields newly required in what only the runtime builds are information, not exit 1;
    the generated tests' messages (each revision's own field names) are not findings."""
    manifest = REPO / "examples" / "echo" / "agent.yaml"
    project = tmp_path / "proj"
    code, out = invoke("new", str(project), "-m", str(manifest), "--no-git")
    assert code == 0, out
    schema = str(shared_acp / revision / "schema.json")
    code, out = invoke("regen", "--project", str(project), "--schema", schema, "--verbose")
    assert code == 0, out
    assert "must change" not in out
    if revision == "v2":
        assert "ContentChunk.messageId (session/update params)" in out
        assert "nothing to do" in out
    done = run_project_tests(project)
    assert done.returncode == 0, done.stdout + done.stderr


# a client that prints the agent's text, run against `python -m my_agent`
_SAY_TEXT = """
import asyncio, os, sys
from my_agent._generated.acp import prompt_turn, spawn_agent
from my_agent._generated.dispatcher import AgentConnection, ClientBase
from my_agent._generated.runtime.client import content
from my_agent._generated.runtime.client.client import negotiate


class Printer(ClientBase):
    async def session_update(self, params):
        update = params.model_dump(by_alias=True, mode="json")["update"]
        text = (update.get("content") or {}).get("text")
        if isinstance(text, str):
            sys.stdout.write(text)


async def main():
    client = Printer()
    async with spawn_agent(client, AgentConnection, sys.executable, "-m", "my_agent") as agent:
        await negotiate(agent, client)
        sid = (await agent.call("session/new", {"cwd": os.getcwd(), "mcpServers": []}))["sessionId"]
        await prompt_turn(agent, client, sid, content.text(sys.argv[1]))


asyncio.run(main())
"""


@pytest.mark.usefixtures("store")
def test_the_init_stub_gets_a_text_input_as_str(tmp_path: Path, shared_acp: Path) -> None:
    """Issue 29 item 6: the `init --yes` manifest takes text; `prompt` gets it as `str`
    (`Input` is `str`), so the stub says the text, not a pydantic repr; the stub has no
    content-block branch for a manifest with an input schema."""
    code, out = invoke("init", str(tmp_path), "--yes", "--name", "my-agent")
    assert code == 0, out
    project = tmp_path / "p"
    schema = str(shared_acp / "v1" / "schema.json")
    code, out = invoke(
        "new", str(project), "-m", str(tmp_path / "agent.yaml"), "--no-git", "--schema", schema
    )
    assert code == 0, out
    stub = (project / "my_agent" / "handlers.py").read_text(encoding="utf-8")
    assert "isinstance(input, list)" not in stub and "for block in input" not in stub
    dispatcher = project / "my_agent" / "_generated" / "dispatcher.py"
    assert "    Input: TypeAlias = str\n" in dispatcher.read_text(encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(project), "PYTHONDONTWRITEBYTECODE": "1"}
    env["ACP_SESSION_DB"] = str(tmp_path / "sessions.db")
    done = subprocess.run(
        [sys.executable, "-c", _SAY_TEXT, "hello there world"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "received hello there world", done.stdout + done.stderr


@pytest.mark.usefixtures("store")
def test_regen_names_user_code_building_a_message_that_gained_a_required_field(
    tmp_path: Path, shared_acp: Path
) -> None:
    manifest = REPO / "examples" / "echo" / "agent.yaml"
    project = tmp_path / "proj"
    v1 = str(shared_acp / "v1" / "schema.json")
    code, out = invoke("new", str(project), "-m", str(manifest), "--no-git", "--schema", v1)
    assert code == 0, out
    handlers = project / "echo_agent" / "handlers.py"
    handlers.write_text(
        handlers.read_text()
        + "\n\ndef chunk() -> object:\n"
        + "    from ._generated import models\n\n"
        + "    return models.ContentChunk.model_validate({})\n"
    )
    line = (
        handlers.read_text().splitlines().index("    return models.ContentChunk.model_validate({})")
    )
    v2 = str(shared_acp / "v2" / "schema.json")
    code, out = invoke("regen", "--project", str(project), "--schema", v2, "--dry-run", "-v")
    assert code == 1, out
    assert (
        f"echo_agent/handlers.py:{line + 1}: builds ContentChunk: ContentChunk.messageId is "
        "newly required in what this agent sends (session/update params): send it"
    ) in out
    assert "ContentChunk.messageId (session/update params)" not in out  # not the runtime's


@pytest.mark.usefixtures("store")
def test_regen_with_two_schemas_reports_each_revision(tmp_path: Path, shared_acp: Path) -> None:
    manifest = REPO / "examples" / "echo" / "agent.yaml"
    project = tmp_path / "proj"
    v1, v2 = (str(shared_acp / rev / "schema.json") for rev in ("v1", "v2"))
    code, out = invoke("new", str(project), "-m", str(manifest), "--no-git", "--schema", v1)
    assert code == 0, out
    code, out = invoke("regen", "-p", str(project), "--schema", v2, "--dry-run")
    assert code == 0, out
    assert "no longer served: v1" in out
    assert f"Serve both: agentgen regen --schema {v1} --schema {v2}\n" in out
    code, out = invoke("regen", "-p", str(project), "--schema", v1, "--schema", v2)
    assert code == 0, out
    headers = [ln for ln in out.splitlines() if ln.startswith("protocol schema")]
    assert len(headers) == 1, out  # v1 is unchanged
    assert headers[0].startswith("protocol schema (v2): added ") and headers[0].endswith(v2)
    assert "no longer served" not in out
    code, out = invoke("regen", "-p", str(project), "--schema", v2, "--schema", v1)
    assert code == 0 and "protocol schema" not in out, out  # the same two: nothing new


# ---- validate: what a schema keyword typo or a mis-indented key really is -------------


def _validate(tmp: Path, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp / "agent.yaml"
    path.write_text(text, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "agentgen", "validate", *args, path.name],
        cwd=tmp,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_validate_flags_keywords_no_json_schema_draft_defines(tmp_path: Path) -> None:
    done = _validate(
        tmp_path,
        "name: a\nversion: 0.1.0\ninput:\n  tpye: string\n  x-ui: {widget: text}\n"
        "output:\n  type: object\n  properties:\n    n: {type: string, maxlength: 3}\n"
        "  output_modes:\n    streaming: true\n"
        "config:\n  schema:\n    type: object\n    options: []\n",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        "agent.yaml:4:3: /input/tpye: `tpye` is not a JSON Schema keyword (did you mean `type`?)",
        (
            "agent.yaml:9:23: /output/properties/n/maxlength: `maxlength` is not a JSON Schema "
            "keyword (did you mean `maxLength`?)"
        ),
        (
            "agent.yaml:10:3: /output/output_modes: `output_modes` is a key of the manifest, not a "
            "JSON Schema keyword: move it up one level"
        ),
        (
            "agent.yaml:15:5: /config/schema/options: `options` is a key of `config`, not a JSON "
            "Schema keyword: move it up one level"
        ),
    ], done.stdout


def test_validate_says_yaml_syntax_errors_in_plain_words(tmp_path: Path) -> None:
    done = _validate(tmp_path, "name: a\nversion: 0.1.0\n\tinput: {}\n")
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "agent.yaml:3:1: /: YAML syntax error: tabs are not allowed for indentation: use spaces"
    ]
    done = _validate(tmp_path, "name: a\ninput:\n    type: string\n  maxLength: 3\n")
    assert done.stdout.splitlines() == [
        (
            "agent.yaml:4:3: /: YAML syntax error: this line's indentation does not match the "
            "lines above it"
        )
    ]


def test_validate_quotes_values_as_the_manifest_spells_them(tmp_path: Path) -> None:
    done = _validate(
        tmp_path,
        "name: a\nversion: 0.1.0\ninput:\n  type: strnig\nconfig:\n  options:\n"
        "    - {id: fast, name: Fast, type: string, default: false}\n",
    )
    assert done.returncode == 1
    assert "default false is not a string" in done.stdout
    assert '"strnig" is not one of: "array", "boolean"' in done.stdout
    for python in ("False", "'strnig'", "['array'"):
        assert python not in done.stdout, done.stdout


def test_validate_json_has_notes_with_a_severity(tmp_path: Path) -> None:
    done = _validate(
        tmp_path,
        "name: a\nversion: 0.1.0\nconfig:\n  options:\n    - {id: size, name: Size, type: integer}\n",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (note,) = json.loads(done.stdout)
    assert note["severity"] == "note" and note["pointer"] == "/config/options/0"
    assert (note["line"], note["col"]) == (5, 7) and "neither a select" in note["message"]
    done = _validate(tmp_path, "name: a\n", "--format", "json")
    assert done.returncode == 1
    assert [d["severity"] for d in json.loads(done.stdout)] == ["error"]


# ---- the author's order ---------------------------------------------------------------


def test_manifest_json_keeps_the_authors_key_order(tmp_path: Path, shared_acp: Path) -> None:
    """An interrupt form asks its fields in the order the manifest writes them: the
    generated manifest.json (what MANIFEST reads) does not sort keys."""
    import json as _json

    from generator.manifest.validate import load_valid
    from generator.render import render_generated

    text = (
        "version: 0.1.0\nname: order-agent\n"
        "interrupts:\n  - name: approval\n    description: Approve it?\n"
        "    payload:\n      schema: {type: object}\n"
        "    resume:\n      schema:\n        type: object\n        properties:\n"
        "          zeta: {type: string}\n          alpha: {type: boolean}\n"
        "          mid: {type: integer}\n"
    )
    path = tmp_path / "order-agent.yaml"
    path.write_text(text, encoding="utf-8")
    manifest = load_valid(path).data
    schema = _json.loads((shared_acp / "v1" / "schema.json").read_text(encoding="utf-8"))
    files = render_generated(
        schema=schema, meta=None, manifest=manifest, role="agent", transport="stdio"
    )
    written = _json.loads(files["manifest.json"])
    assert list(written)[:3] == ["version", "name", "interrupts"]
    props = written["interrupts"][0]["resume"]["schema"]["properties"]
    assert list(props) == ["zeta", "alpha", "mid"]


# ---- command-line consistency -----------------------------------------------------------


def _agentgen(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentgen", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_models_prints_a_one_line_result_and_creates_a_missing_folder(tmp_path: Path) -> None:
    manifest = REPO / "examples" / "echo" / "agent.yaml"
    done = _agentgen("models", "-m", str(manifest), "-o", "out/sub/m.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "sub" / "m.py").is_file()
    assert done.stderr.splitlines() == [
        "created the folder out/sub",
        "wrote out/sub/m.py: 1 models from agent.yaml",
    ]


def test_methods_defaults_to_the_locked_schema_like_models(tmp_path: Path) -> None:
    done = _agentgen("methods", "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    names = [m["name"] for m in json.loads(done.stdout)]
    assert "session/prompt" in names


def test_version_names_the_default_schema_revision(tmp_path: Path) -> None:
    lock = json.loads((REPO / "schema" / "upstream.lock.json").read_text(encoding="utf-8"))
    done = _agentgen("--version", cwd=tmp_path)
    assert done.returncode == 0
    spec = f"npm:{lock['package']}@{lock['version']}#{lock['path']}"
    assert done.stdout.startswith("agentgen ") and spec in done.stdout, done.stdout
    assert "default protocol schema: v1" in done.stdout


def test_diff_fail_on_breaking_is_exit_1(tmp_path: Path, shared_acp: Path) -> None:
    v1, v2 = (str(shared_acp / rev / "schema.json") for rev in ("v1", "v2"))
    assert _agentgen("diff", v1, v2, cwd=tmp_path).returncode == 0  # a report, by default
    done = _agentgen("diff", v1, v2, "--fail-on-breaking", cwd=tmp_path)
    assert done.returncode == 1 and "breaking" in done.stderr.splitlines()[-1], done.stderr
    done = _agentgen("diff", v1, v2, "--fail-on-breaking", "--format", "json", cwd=tmp_path)
    assert done.returncode == 1
    done = _agentgen("diff", v1, v1, "--fail-on-breaking", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


# ---- agentgen init ------------------------------------------------------------------------


def _on_a_terminal(args: list[str], answers: str, cwd: Path) -> tuple[int, str]:
    """Run `python -m agentgen ARGS` with a pseudo-terminal as stdin and stdout, the
    answers typed ahead (the terminal holds them until each prompt reads its line)."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentgen", *args],
        cwd=cwd,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "NO_COLOR": "1"},
    )
    os.close(slave)
    os.write(master, answers.encode())
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return proc.wait(timeout=60), out.decode(errors="replace")


def _published_schema_url() -> str:
    """The manifest schema in the repository pyproject names, at this version's tag: a
    file this checkout has at that path."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    repo = project["urls"]["Repository"]
    assert repo.startswith("https://github.com/"), repo
    raw = repo.replace("https://github.com/", "https://raw.githubusercontent.com/", 1)
    assert (REPO / "schema" / "manifest.schema.json").is_file()
    return f"{raw}/v{project['version']}/schema/manifest.schema.json"


def test_init_asks_on_a_terminal_and_writes_a_valid_commented_manifest(tmp_path: Path) -> None:
    folder = tmp_path / "Paper Scout"
    folder.mkdir()
    # name (re-asked after a bad one), description, input, output, streaming, no model
    code, out = _on_a_terminal(
        ["init"], "Bad_Name\npaper-scout\nFinds papers.\njson\n\nn\n\n", folder
    )
    assert code == 0, out
    assert "Agent name [paper-scout]" in out and "is not a manifest name" in out
    text = (folder / "agent.yaml").read_text(encoding="utf-8")
    first = text.splitlines()[0]
    assert first == f"# yaml-language-server: $schema={_published_schema_url()}"
    # a file meant to be committed names nothing of this machine (issue 29 item 9: it
    # named the schema in this machine's site-packages)
    for local in (str(REPO), sys.prefix, "site-packages", str(tmp_path), str(Path.home())):
        assert local not in text, local
    assert not re.search(r"\$schema=(/|file:)", text)
    from ruamel.yaml import YAML

    data = YAML(typ="safe").load(text)
    assert data["name"] == "paper-scout" and data["description"] == "Finds papers."
    assert data["input"]["type"] == "object" and data["output"] == {"type": "string"}
    assert data["output_modes"] == {"streaming": False}
    assert "llm" not in data and "A model for the agent" in out
    done = _agentgen("validate", "agent.yaml", cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr


def test_init_flags_and_yes_ask_nothing(tmp_path: Path) -> None:
    code, out = _on_a_terminal(["init", "--yes", "--input", "json"], "", tmp_path)
    assert code == 0 and "Agent name" not in out, out
    from ruamel.yaml import YAML

    data = YAML(typ="safe").load((tmp_path / "agent.yaml").read_text(encoding="utf-8"))
    assert data["input"]["type"] == "object" and data["output_modes"] == {"streaming": True}
    again = _agentgen("init", "--yes", cwd=tmp_path)  # never over an existing manifest
    assert again.returncode == 2 and "refusing to overwrite" in again.stderr
    bad = _agentgen("init", "sub", "--name", "Not OK", cwd=tmp_path)
    assert bad.returncode == 2 and '"Not OK" is not a manifest name' in bad.stderr
    assert not (tmp_path / "sub" / "agent.yaml").exists()


def test_the_readme_quick_start_is_two_commands_and_the_user_start_begins_with_init() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    first, _, own = quick.partition("### Your own agent")

    def commands(block: str) -> list[str]:
        return [ln.split("#")[0].strip() for ln in block.splitlines() if ln.startswith("    ")]

    # a fresh clone: one command sets up and runs the main job, one runs the tests
    assert commands(first) == ["make demo", "make test"]
    # a user's own agent starts from `agentgen init`
    assert commands(own)[0].startswith("agentgen init")
    for needed in ("Python 3.11+", "git", "npm", "registries", "make", "make test-fast"):
        assert needed in first, needed
    # how long each command takes on 2 cores
    assert "On 2 cores" in first
    assert re.search(r"`make demo` takes about \d+ s", first)
    assert re.search(r"`make test` about \d+\s+minutes", first)


# ---- the generated tests ------------------------------------------------------------------

BAD_FRAME = """
import asyncio
import sys

from echo_agent._generated.dispatcher import AgentConnection, ClientBase
from echo_agent._generated.runtime.client.client import spawn_agent
from echo_agent._generated.runtime.wire.errors import RpcError
from echo_agent._generated.runtime.wire.wirecheck import WireCheckError

from test_echo_agent import SERVE


def test_sends_a_session_new_without_cwd() -> None:
    async def run() -> None:
        async with spawn_agent(ClientBase(), AgentConnection, sys.executable, "-c", SERVE) as a:
            await a.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            try:
                await a.call("session/new", {"mcpServers": []})
            except (RpcError, WireCheckError):
                pass  # the test itself expects the refusal: only the wire check fails it

    asyncio.run(run())
"""


@pytest.mark.slow
@pytest.mark.usefixtures("store")
def test_generated_tests_prompt_cancel_and_check_the_wire(tmp_path: Path, shared_acp: Path) -> None:
    """A fresh agent's tests: initialize and a session, a prompt and a cancelled prompt per
    revision, all with the wire check on from the generated conftest (not the caller's
    environment): a test that sends a frame the schema refuses fails."""
    project = tmp_path / "proj"
    v1, v2 = (str(shared_acp / rev / "schema.json") for rev in ("v1", "v2"))
    manifest = str(REPO / "examples" / "echo" / "agent.yaml")
    code, out = invoke(
        "new", str(project), "-m", manifest, "--no-git", "--schema", v1, "--schema", v2
    )
    assert code == 0, out
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_WIRE_CHECK")}
    env.update(PYTHONPATH=str(project), PYTHONDONTWRITEBYTECODE="1")

    def pytest_run(tests: str = "tests") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    done = pytest_run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 passed" in done.stdout, done.stdout  # 4, and the contract tests (issue 19.6)
    tests = (project / "tests" / "test_echo_agent.py").read_text(encoding="utf-8")
    assert "def test_a_prompt_ends_its_turn" in tests
    assert "def test_a_cancelled_prompt_ends_its_turn" in tests
    (project / "tests" / "test_bad_frame.py").write_text(BAD_FRAME, encoding="utf-8")
    done = pytest_run("tests/test_bad_frame.py")  # the others passed above
    assert done.returncode == 1, done.stdout + done.stderr
    assert "frames that do not match the protocol schema" in done.stdout, done.stdout
    assert "session/new params (NewSessionRequest) /cwd" in done.stdout


@pytest.mark.slow  # runs the project's own tests
def test_init_with_a_model_gives_a_project_whose_agent_runs_one(tmp_path: Path) -> None:
    """`agentgen init --model ID`: the manifest's `llm` block and the provider `main`; `new`
    gives a handler on run_model (pydantic-ai) in its dependencies, and tests that run it
    with pydantic-ai's test model: pytest, mypy and ruff pass as generated."""
    runner = CliRunner()
    folder = tmp_path / "bot"
    folder.mkdir()
    done = runner.invoke(app, ["init", str(folder), "--yes", "--model", "openai:gpt-4.1-mini"])
    assert done.exit_code == 0, done.output
    manifest = (folder / "agent.yaml").read_text()
    assert 'default_model: "openai:gpt-4.1-mini"' in manifest and "provider: main" in manifest
    project = tmp_path / "project"
    done = runner.invoke(app, ["new", str(project), "-m", str(folder / "agent.yaml"), "--no-git"])
    assert done.exit_code == 0, done.output
    handlers = (project / "bot" / "handlers.py").read_text()
    assert "await run_model(turn, MODEL, input)" in handlers
    import tomllib

    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    assert "pydantic-ai-slim[openai,anthropic,mcp]>=2.78" in meta["dependencies"]
    env = {**os.environ, "PYTHONPATH": str(project), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("ACP_MODEL", None)
    for cmd in (
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        [sys.executable, "-m", "mypy", "."],
        [sys.executable, "-m", "ruff", "check", "."],
    ):
        if cmd[2] == "mypy":
            run = mypy_support.run(cmd, kind="project", cwd=project, env=env)
        else:
            run = subprocess.run(
                cmd, cwd=project, env=env, capture_output=True, text=True, check=False
            )
        assert run.returncode == 0, (cmd, run.stdout[-2000:], run.stderr[-2000:])


def _path_without_npm(tmp: Path) -> str:
    """One folder holding every command on PATH but npm and Node (a pip or uv user's machine)."""
    bin_dir = tmp / "no-npm-bin"
    bin_dir.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or not Path(folder).is_dir():
            continue
        for entry in Path(folder).iterdir():
            if entry.name in {"npm", "npx", "node", "nodejs", "corepack"}:
                continue
            if not (bin_dir / entry.name).exists() and os.access(entry, os.X_OK):
                (bin_dir / entry.name).symlink_to(entry)
    return str(bin_dir)


@pytest.mark.parametrize("schema", [None, "v2"])
def test_new_needs_no_npm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, schema: str | None
) -> None:
    """With npm absent, `new` with the default schema and with `--schema v2` (a short name for
    the locked package's v2 schema) makes a project (before: `npm is not installed`, and `v2`
    was a missing file)."""
    manifest = tmp_path / "agent.yaml"
    manifest.write_text("name: no-npm-agent\nversion: 0.1.0\n", encoding="utf-8")
    monkeypatch.setenv("PATH", _path_without_npm(tmp_path))
    import shutil

    assert shutil.which("npm") is None
    target = tmp_path / "proj"
    assert run_new(target, manifest=manifest, schema=schema, git=True) == 0
    generated = target / "no_npm_agent" / "_generated"
    assert (generated / "models.py").is_file()
    lock = json.loads((REPO / "schema" / "upstream.lock.json").read_text(encoding="utf-8"))
    recorded = json.loads((generated / "SOURCE.json").read_text(encoding="utf-8"))["schema"]
    wanted = "schema/v2/schema.json" if schema == "v2" else lock["path"]
    assert recorded["origin"] == f"npm:{lock['package']}@{lock['version']}#{wanted}"
    assert recorded["revision"]["lifecycle"] == ("v2" if schema == "v2" else "v1")


@pytest.mark.slow
def test_regen_keeps_a_fresh_project_green(tmp_path: Path) -> None:
    """A fresh project regenerated to v2, then to v1 + v2, still passes its own pytest,
    `mypy .` and `ruff check .` (before: the generated test named v1's
    `models.SessionNotification`, which v2 calls `UpdateSessionNotification`, and the ruff
    ignores covered `_generated/models.py` only, not `_generated/v1/models.py`)."""
    manifest = tmp_path / "agent.yaml"
    manifest.write_text("name: my-agent\nversion: 0.1.0\n", encoding="utf-8")
    target = tmp_path / "proj"
    assert run_new(target, manifest=manifest) == 0
    tools = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(target)}
    for schemas in (["v2"], ["v1", "v2"]):
        args = [a for s in schemas for a in ("--schema", s)]
        code, out = invoke("regen", *args, "--project", str(target))
        assert code == 0, out
        for cmd in (
            [str(tools / "mypy"), "."],
            [str(tools / "ruff"), "check", "."],
            [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"],
        ):
            if cmd[0].endswith("mypy"):
                done = mypy_support.run(cmd, kind="project", cwd=target, env=env)
            else:
                done = subprocess.run(
                    cmd, cwd=target, env=env, capture_output=True, text=True, check=False
                )
            assert done.returncode == 0, f"{schemas} {cmd[-1]}: {done.stdout}{done.stderr}"


@pytest.mark.slow  # makes a virtualenv and pip-installs the project
@pytest.mark.usefixtures("store")
def test_a_model_project_installed_as_its_readme_says_answers_a_prompt(tmp_path: Path) -> None:
    """Issue 37 item 1: `init --model`, `new`, then the README's `pip install .` alone (no
    extra) into a fresh virtualenv: the installed command starts, initializes and answers
    a prompt with the scripted model (`ACP_MODEL=test`), every frame schema-checked by the
    agent (before: pydantic-ai was only in the `model` and `test` extras, so the command
    died with `No module named 'pydantic_ai'`). The README and `--help` name the model's
    variables (item 7)."""
    import asyncio

    from coder_support import Editor

    folder = tmp_path / "bot"
    code, out = invoke("init", str(folder), "--yes", "--model", "openai:gpt-4.1-mini")
    assert code == 0, out
    project = tmp_path / "project"
    code, out = invoke("new", str(project), "-m", str(folder / "agent.yaml"), "--no-git")
    assert code == 0, out
    for name in MODEL_VARIABLES:
        assert name in out, name  # new's next steps
    readme = (project / "README.md").read_text(encoding="utf-8")
    assert "pip install -e .\n" in readme
    for name in MODEL_VARIABLES:
        assert f"`{name}`" in readme, name
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    # --no-compile: the same install without byte-compiling every module of pydantic-ai,
    # openai and anthropic up front (half of pip's time here); what the command imports
    # is compiled when it is imported
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", "."],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    command = str(venv / "bin" / "bot")
    helped = subprocess.run(
        [command, "--help"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert helped.returncode == 0, helped.stderr
    for name in (*MODEL_VARIABLES, "ACP_MODEL_HISTORY", "ACP_MCP_CONNECT_TIMEOUT"):
        assert name in helped.stdout, name
    work = tmp_path / "work"
    work.mkdir()
    wire_log = tmp_path / "wire.log"
    env.update(
        ACP_MODEL="test",
        ACP_WIRE_CHECK="1",
        ACP_WIRE_CHECK_LOG=str(wire_log),
        ACP_SESSION_DB=str(tmp_path / "sessions.db"),
    )

    async def main() -> tuple[Editor, bytes]:
        proc = await asyncio.create_subprocess_exec(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=work,
        )
        ed = Editor(proc, work)
        init = await ed.initialize(1, {"fs": {"readTextFile": True}})
        assert init["protocolVersion"] == 1
        sid = str((await ed.call("session/new", {"cwd": str(work), "mcpServers": []}))["sessionId"])
        assert await ed.prompt(sid, "hello", v2=False) == "end_turn"
        return ed, await ed.stop()

    ed, stderr = asyncio.run(main())
    assert "".join(ed.texts()), stderr.decode()
    assert not wire_log.exists() or not wire_log.read_text().strip(), wire_log.read_text()


# what a model agent reads from its environment: README, --help and new's next steps name them
MODEL_VARIABLES = ("ACP_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY")
