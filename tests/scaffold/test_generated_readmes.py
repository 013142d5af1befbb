"""What the READMEs tell a user (issue 29 items 8 and 9), checked on the README and every
golden project's README (`generated/projects/*/README.md`, what `agentgen new` writes):
code fences close, a venv comes before `pip install -e`, and an agent's README says how
to make its client with a command `agentgen new` runs as written."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
from scaffold_support import (  # noqa: F401 - fixtures
    fake_pipeline,
    store,
    write_fake_schema,
)
from typer.testing import CliRunner

from generator.cli import app

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "generated" / "projects"
READMES = [REPO / "README.md", *sorted(GOLDEN.glob("*/README.md"))]
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
VENV = "python -m venv .venv && . .venv/bin/activate"


def fence_problems(text: str) -> list[str]:
    """CommonMark's fenced code blocks: a fence opens with 3+ backticks (or tildes) and an
    optional info string, and closes with a bare fence of the same character, at least as
    long. A fence with an info string inside a block (```sh where the last block never
    closed), a heading inside a block and a block still open at the end are problems."""
    problems: list[str] = []
    opened: tuple[int, str] | None = None  # (line, fence)
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if opened is None:
            if m:
                opened = (n, m.group(1))
            continue
        fence = opened[1]
        if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
            if m.group(2).strip():
                problems.append(f"{n}: {line!r} opens a block inside the one from line {opened[0]}")
            else:
                opened = None
        elif re.match(r"^#{2,6} ", line):
            problems.append(f"{n}: heading {line!r} inside the block from line {opened[0]}")
    if opened is not None:
        problems.append(f"the block from line {opened[0]} never closes")
    return problems


def test_the_fence_check_finds_what_broke_the_http_readme() -> None:
    # the HTTP agent README before 0944ecd: its run block ran into the next heading
    broken = "## Run\n\n```sh\npip install -e .\necho-agent --port 8000\n## Layout\n\n- x\n"
    assert fence_problems(broken) == [
        "6: heading '## Layout' inside the block from line 3",
        "the block from line 3 never closes",
    ]
    assert fence_problems("```sh\na\n```sh\nb\n```\n")[0].startswith("3: '```sh' opens a block")
    assert fence_problems("```yaml\na: 1\n```\n\n````md\n```\n````\n") == []


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_code_fence_closes(readme: Path) -> None:
    assert fence_problems(readme.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(REPO)))
def test_a_venv_comes_before_pip_install_e(readme: Path) -> None:
    text = readme.read_text(encoding="utf-8")
    first_install = text.find("pip install -e")
    assert first_install != -1, "no install instruction"
    venv = text.replace("\n", " ").find(VENV)
    assert venv != -1 and venv < first_install, f"no `{VENV}` before `pip install -e`"


AGENTS = sorted(p for p in GOLDEN.glob("*-agent-*") if (p / "agent.yaml").is_file())


@pytest.mark.usefixtures("fake_pipeline", "store")
@pytest.mark.parametrize("golden", AGENTS, ids=lambda p: p.name)
def test_an_agent_readme_says_how_to_make_its_client(
    golden: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's `agentgen new ... --role client` line, run as written in a copy of
    the project (the schema swapped for a stand-in), makes the client the README names."""
    text = (golden / "README.md").read_text(encoding="utf-8")
    section = text.split("## A client for it\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)\n```", section, re.DOTALL)
    cd, command = [shlex.split(line, comments=True) for line in block.splitlines()]
    assert cd == ["cd", ".."]
    args = command[1:]
    assert "--role" in args and args[args.index("--role") + 1] == "client"
    transport = "http" if "http" in golden.name else "stdio"
    assert (args[args.index("--transport") + 1] if "--transport" in args else "stdio") == transport
    agent = tomllib.loads((golden / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    work = tmp_path / "work"
    (work / agent["name"]).mkdir(parents=True)  # the project's folder, named as the README says
    (work / agent["name"] / "agent.yaml").write_bytes((golden / "agent.yaml").read_bytes())
    schema = write_fake_schema(tmp_path / "s.json", {"initialize": ["A", "B"]}, {})
    monkeypatch.chdir(work)  # after `cd ..`
    done = CliRunner().invoke(app, [*args, "--no-git", "--schema", str(schema)])
    assert done.exit_code == 0, done.output
    (folder,) = [p for p in work.iterdir() if p.name.endswith("-client")]
    name = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    command_name, package = re.search(
        r"makes the project `[\w-]+` \(command `([\w-]+)`, package\s+`(\w+)`\)", section
    ).groups()  # type: ignore[union-attr]
    assert name["name"] == command_name and command_name in name["scripts"]
    assert (folder / package / "handlers.py").is_file()
    run = f"`{command_name} --url http://127.0.0.1:8000/acp`" if transport == "http" else None
    assert (run or f"`{command_name} -- {agent['name']}`") in section.replace("\n", " ")


# what a model agent reads from its environment (issue 37 item 7)
MODEL_ENV = (
    "ACP_MODEL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ACP_MODEL_HISTORY",
    "ACP_MCP_CONNECT_TIMEOUT",
)


def test_a_model_agent_names_its_variables_in_readme_help_and_next_steps() -> None:
    """The golden model project (`assistant`): its README's table and its `--help` list
    every variable the model reads; `new`'s next steps name the key and the model id; an
    agent without a model lists none of them (before: only the store's variables)."""
    import os
    import subprocess
    import sys

    from generator.scaffold.new import next_steps

    project = GOLDEN / "assistant-agent-stdio"
    readme = (project / "README.md").read_text(encoding="utf-8")
    table = readme.split("## The model", 1)[1].split("\n## ", 1)[0]

    def helped(root: Path, package: str) -> str:
        env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run(
            [sys.executable, "-m", package, "--help"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout

    text = helped(project, "assistant")
    assert "the model (environment):" in text
    assert "(default: openai:gpt-4.1-mini)" in text  # the manifest's llm.default_model
    for name in MODEL_ENV:
        assert f"| `{name}` |" in table, name
        assert f"  {name} " in text, name
    steps = next_steps(Path("p"), "assistant", "agent", "stdio", model=True)
    for name in MODEL_ENV[:4]:
        assert name in steps, name
    assert "assistant --help" in steps
    # an editor starts the agent without the shell's exports: its snippets carry the key
    assert '"OPENAI_API_KEY": "your key"' in steps
    snippets = re.findall(r"```json\n(.*?)```", readme, re.DOTALL)
    assert len(snippets) == 2, snippets  # Zed and JetBrains
    for snippet in snippets:
        server = json.loads(snippet)["agent_servers"]["assistant"]
        assert server["env"] == {"OPENAI_API_KEY": "your key"}, snippet
    plain = helped(GOLDEN / "echo-agent-stdio", "echo_agent")
    assert "ACP_MODEL" not in plain and "ACP_MODEL" not in next_steps(
        Path("p"), "echo-agent", "agent", "stdio"
    )
