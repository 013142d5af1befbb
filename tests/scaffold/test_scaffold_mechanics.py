"""The scaffold's mechanics on a stand-in pipeline: new's refusals and atomicity,
template injection, check catching hand edits, update's conflict detection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scaffold_support import (  # noqa: F401 - fixtures
    fake_pipeline,
    git,
    git_commit_all,
    store,
    tree_bytes,
    write_fake_schema,
)
from typer.testing import CliRunner

from generator.cli import app
from generator.errors import AgentgenError
from generator.scaffold import project
from generator.scaffold.new import run_new

INJECTION = '{{ 7*7 }} {% raw %}x{% endraw %} {%- if true %}IF{% endif %} {# c #} "q" \\ end'


def _manifest(tmp: Path, name: str = "research-agent", description: str = "Finds papers.") -> Path:
    path = tmp / "agent.yaml"
    path.write_text(
        f"name: {json.dumps(name)}\nversion: 0.2.0\ntitle: {json.dumps('T ' + INJECTION)}\n"
        f"description: {json.dumps(description)}\n",
        encoding="utf-8",
    )
    return path


def _schema(tmp: Path, name: str = "s1.json") -> Path:
    return write_fake_schema(
        tmp / name,
        {
            "initialize": ["InitializeRequest", "InitializeResponse"],
            "session_prompt": ["PromptRequest", "PromptResponse"],
        },
        {"PromptResponse": [["stop_reason", "stopReason"]]},
    )


def _new(tmp: Path, target: Path, **kw: object) -> int:
    return run_new(target, manifest=_manifest(tmp, **kw), schema=str(_schema(tmp)))  # type: ignore[arg-type]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.mark.usefixtures("fake_pipeline", "store")
class TestNew:
    def test_layout(self, tmp_path: Path) -> None:
        target = tmp_path / "proj"
        assert _new(tmp_path, target) == 0
        files = set(tree_bytes(target))
        for rel in (
            "pyproject.toml",
            "README.md",
            "agent.yaml",
            ".copier-answers.yml",
            ".pre-commit-config.yaml",
            ".gitignore",
            "research_agent/__init__.py",
            "research_agent/__main__.py",
            "research_agent/handlers.py",
            "research_agent/_generated/SOURCE.json",
            "research_agent/_generated/dispatcher.py",
            "tests/test_research_agent.py",
        ):
            assert rel in files, rel
        source = json.loads((target / "research_agent/_generated/SOURCE.json").read_text())
        assert source["role"] == "agent" and source["transport"] == "stdio"
        assert source["manifest"]["path"] == "agent.yaml"
        assert source["schema"]["origin"] == "../s1.json"  # relative to the project
        assert len(source["schema"]["sha256"]) == 64
        assert (target / "agent.yaml").read_bytes() == (tmp_path / "agent.yaml").read_bytes()
        answers = (target / ".copier-answers.yml").read_text()
        assert "_commit: 0.1.0+agent." in answers or "+agent." in answers
        pyproject = (target / "pyproject.toml").read_text()
        assert "agentgen" not in pyproject.split("[project.scripts]")[0].split("dependencies")[1]

    def test_agent_and_client_projects_get_the_one_test_conftest(self, tmp_path: Path) -> None:
        """The agent and client templates share one tests/conftest.py (the client's is a
        symlink to the agent's); each project gets it as a plain file."""
        templates = Path(project.__file__).resolve().parents[2] / "templates"
        agent = templates / "agent/project/tests/conftest.py"
        client = templates / "client/project/tests/conftest.py"
        assert client.is_symlink() and client.resolve() == agent.resolve()
        for role in ("agent", "client"):
            target = tmp_path / role
            run_new(target, manifest=_manifest(tmp_path), schema=str(_schema(tmp_path)), role=role)
            made = target / "tests/conftest.py"
            assert not made.is_symlink() and made.read_bytes() == agent.read_bytes()

    def test_deterministic(self, tmp_path: Path) -> None:
        a, b = tmp_path / "a", tmp_path / "b"
        assert _new(tmp_path, a) == 0
        assert _new(tmp_path, b) == 0
        assert tree_bytes(a) == tree_bytes(b)

    def test_client_role(self, tmp_path: Path) -> None:
        target = tmp_path / "c"
        code = run_new(
            target,
            manifest=_manifest(tmp_path),
            role="client",
            transport="http",
            schema=str(_schema(tmp_path)),
        )
        assert code == 0
        assert (target / "research_agent_client/handlers.py").read_text().count("ClientBase") >= 2
        assert '"starlette' in (target / "pyproject.toml").read_text()
        assert (
            'research-agent-client = "research_agent_client.__main__:main"'
            in (target / "pyproject.toml").read_text()
        )

    def test_template_injection_is_inert(self, tmp_path: Path) -> None:
        import tomllib

        target = tmp_path / "proj"
        assert _new(tmp_path, target, description=INJECTION + "\n\nmore") == 0
        readme = (target / "README.md").read_text()
        assert "# T " + INJECTION in readme
        assert INJECTION in readme
        assert "49" not in readme and "IF" not in readme.replace(INJECTION, "")
        meta = tomllib.loads((target / "pyproject.toml").read_text())
        assert meta["project"]["description"] == INJECTION
        assert meta["project"]["version"] == "0.2.0"

    def test_refuses_non_empty_directory(self, tmp_path: Path) -> None:
        target = tmp_path / "proj"
        target.mkdir()
        (target / "mine.txt").write_text("keep me")
        with pytest.raises(AgentgenError, match="not empty"):
            _new(tmp_path, target)
        assert (target / "mine.txt").read_text() == "keep me"
        assert sorted(p.name for p in target.iterdir()) == ["mine.txt"]

    def test_accepts_empty_directory(self, tmp_path: Path) -> None:
        target = tmp_path / "proj"
        target.mkdir()
        assert _new(tmp_path, target) == 0
        assert (target / "research_agent/handlers.py").is_file()

    def test_refuses_dotdot(self, tmp_path: Path) -> None:
        with pytest.raises(AgentgenError, match=r"'\.\.'"):
            _new(tmp_path, tmp_path / "x" / ".." / "proj")
        assert not (tmp_path / "proj").exists()

    @pytest.mark.parametrize(
        "name", ["../evil", "a/../../b", "Bad", "9lives", "json", "import", "tests", "x_y", ""]
    )
    def test_refuses_bad_names(self, tmp_path: Path, name: str) -> None:
        with pytest.raises(AgentgenError) as err:
            _new(tmp_path, tmp_path / "proj", name=name)
        assert err.value.pointer == "/name"
        assert not (tmp_path / "proj").exists()
        assert list(tmp_path.glob(".proj.agentgen-*")) == []

    def test_failure_leaves_nothing(self, tmp_path: Path) -> None:
        with pytest.raises(AgentgenError):
            run_new(
                tmp_path / "proj",
                manifest=_manifest(tmp_path),
                schema=str(tmp_path / "missing.json"),
            )
        assert not (tmp_path / "proj").exists()
        assert list(tmp_path.glob(".proj.agentgen-*")) == []

    def test_cli_exit_2_one_line(self, tmp_path: Path) -> None:
        target = tmp_path / "proj"
        target.mkdir()
        (target / "f").write_text("x")
        code, out = invoke("new", str(target), "--manifest", str(_manifest(tmp_path)))
        assert code == 2
        assert "not empty" in out and "Traceback" not in out


@pytest.mark.usefixtures("fake_pipeline", "store")
class TestCheck:
    def test_fresh_project_is_current(self, tmp_path: Path) -> None:
        target = tmp_path / "proj"
        _new(tmp_path, target)
        code, out = invoke("check", "--project", str(target))
        assert code == 0, out

    def test_hand_edit_is_caught(self, tmp_path: Path) -> None:
        target = tmp_path / "proj"
        _new(tmp_path, target)
        disp = target / "research_agent/_generated/dispatcher.py"
        disp.write_text(disp.read_text() + "# my tweak\n")
        (target / "research_agent/_generated/extra.py").write_text("x = 1\n")
        code, out = invoke("check", "--project", str(target))
        assert code == 1
        assert "research_agent/_generated/dispatcher.py" in out
        assert "research_agent/_generated/extra.py" in out
        # check writes nothing
        assert disp.read_text().endswith("# my tweak\n")

    def test_manifest_edit_makes_it_stale_and_regen_fixes_it(self, tmp_path: Path) -> None:
        target = tmp_path / "proj"
        _new(tmp_path, target)
        handlers = target / "research_agent/handlers.py"
        before = handlers.read_bytes()
        with (target / "agent.yaml").open("a") as fh:
            fh.write("authors: [me]\n")
        code, out = invoke("check", "--project", str(target))
        assert code == 1 and "manifest.json" in out and "SOURCE.json" in out
        code, out = invoke("regen", "--project", str(target), "--dry-run")
        assert code == 0 and "would update research_agent/_generated/manifest.json" in out
        assert invoke("check", "--project", str(target))[0] == 1  # dry run wrote nothing
        code, out = invoke("regen", "--project", str(target))
        assert code == 0, out
        assert invoke("check", "--project", str(target))[0] == 0
        assert handlers.read_bytes() == before

    def test_not_a_project(self, tmp_path: Path) -> None:
        code, out = invoke("check", "--project", str(tmp_path))
        assert code == 2 and "not a project" in out


@pytest.mark.usefixtures("fake_pipeline", "store")
class TestUpdate:
    def _project(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
        import shutil

        templates = tmp_path / "templates"
        shutil.copytree(
            project.Path(__file__).resolve().parents[2] / "templates",
            templates,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        monkeypatch.setenv("AGENTGEN_TEMPLATES", str(templates))
        target = tmp_path / "proj"
        _new(tmp_path, target)
        git(target, "init", "-q")
        git_commit_all(target, "generated")
        return templates, target

    def test_clean_update_keeps_user_code(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        templates, target = self._project(tmp_path, monkeypatch)
        handlers = target / "research_agent/handlers.py"
        handlers.write_text(handlers.read_text() + "\n\ndef helper() -> int:\n    return 1\n")
        git_commit_all(target, "user code")
        user = handlers.read_bytes()
        readme_tpl = templates / "agent/project/README.md.jinja"
        readme_tpl.write_text(readme_tpl.read_text() + "\nA new section.\n")
        code, out = invoke("update", "--project", str(target))
        assert code == 0, out
        assert handlers.read_bytes() == user
        assert (target / "README.md").read_text().endswith("A new section.\n")
        assert "_generated" not in out

    def test_dirty_tree_refused(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        _, target = self._project(tmp_path, monkeypatch)
        (target / "README.md").write_text("uncommitted\n")
        code, out = invoke("update", "--project", str(target))
        assert code == 2 and "uncommitted" in out
        assert (target / "README.md").read_text() == "uncommitted\n"

    def test_not_in_git(self, tmp_path: Path) -> None:
        target = tmp_path / "proj"
        _new(tmp_path, target)
        code, out = invoke("update", "--project", str(target))
        assert code == 2 and "git" in out


@pytest.mark.usefixtures("fake_pipeline", "store")
class TestRegen:
    USER = (
        "\n\nclass Extra(Agent):\n"
        "    async def session_prompt(self, params, ctx):\n"
        "        return {'stopReason': 'end_turn'}\n"
    )

    def test_removed_method_named_and_user_code_kept(self, tmp_path: Path) -> None:
        target = tmp_path / "proj"
        _new(tmp_path, target)
        handlers = target / "research_agent/handlers.py"
        handlers.write_text(handlers.read_text() + self.USER)
        before = {k: v for k, v in tree_bytes(target).items() if "_generated" not in k}
        gen_before = {k: v for k, v in tree_bytes(target).items() if "_generated" in k}
        s2 = write_fake_schema(
            tmp_path / "s2.json", {"initialize": ["InitializeRequest", "InitializeResponse"]}
        )

        code, out = invoke(
            "regen", "--project", str(target), "--schema", str(s2), "--dry-run", "-v"
        )
        assert code == 1, out
        assert "removed method session_prompt" in out
        line = (
            handlers.read_text()
            .splitlines()
            .index("    async def session_prompt(self, params, ctx):")
            + 1
        )
        assert (
            f"research_agent/handlers.py:{line}: Extra.session_prompt: AgentBase.session_prompt is gone"
            in out
        )
        assert tree_bytes(target) == {**before, **gen_before}  # dry run: nothing touched

        code, out = invoke("regen", "--project", str(target), "--schema", str(s2))
        assert code == 1
        after = tree_bytes(target)
        assert {k: v for k, v in after.items() if "_generated" not in k} == before
        source = json.loads(after["research_agent/_generated/SOURCE.json"])
        assert source["schema"]["origin"] == "../s2.json"
        assert invoke("check", "--project", str(target))[0] == 0

    def test_regen_without_changes(self, tmp_path: Path) -> None:
        target = tmp_path / "proj"
        _new(tmp_path, target)
        before = tree_bytes(target)
        code, out = invoke("regen", "--project", str(target))
        assert code == 0 and "is up to date" in out
        assert tree_bytes(target) == before


@pytest.mark.usefixtures("fake_pipeline", "store")
def test_update_follows_the_manifest(tmp_path: Path) -> None:
    target = tmp_path / "proj"
    _new(tmp_path, target)
    git(target, "init", "-q")
    git_commit_all(target, "generated")
    manifest = target / "agent.yaml"
    manifest.write_text(manifest.read_text().replace("Finds papers.", "Finds {{ more }} papers."))
    git_commit_all(target, "manifest edit")
    code, out = invoke("update", "--project", str(target))
    assert code == 0, out
    assert "Finds {{ more }} papers." in (target / "README.md").read_text()


def test_new_refuses_an_invalid_manifest_located_in_the_users_file(tmp_path: Path) -> None:
    """`agentgen new` validates first: the error names the user's file, line, column and
    pointer (not the project's copy), and nothing is created."""
    from typer.testing import CliRunner

    from generator.cli import app

    bad = tmp_path / "q.yaml"
    bad.write_text('name: q\nversion: "1"\nconfig:\n  options:\n    - {id: Bad Id, type: string}\n')
    target = tmp_path / "out"
    result = CliRunner().invoke(app, ["new", str(target), "--manifest", str(bad)])
    assert result.exit_code == 1  # a finding in the input
    assert f"{bad}:5:12: /config/options/0/id:" in result.output
    assert "agent.yaml" not in result.output
    assert not target.exists()
