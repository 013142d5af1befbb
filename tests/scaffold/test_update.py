"""`agentgen update` anywhere: the project records no machine's path, the old template
revision is rebuilt from the installed agentgen on a machine whose template store has
never seen it, and user-owned files never get conflict markers from a template change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from scaffold_support import (  # noqa: F401 - fixtures
    fake_pipeline,
    git,
    git_commit_all,
    store,
    write_fake_schema,
)
from typer.testing import CliRunner

from generator.cli import app
from generator.scaffold.new import run_new

REPO = Path(__file__).resolve().parents[2]
PKG = "research_agent"


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def _project(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A committed project made from a copy of the shipped templates (which the test
    then changes, as a newer agentgen would)."""
    templates = tmp / "templates"
    shutil.copytree(
        REPO / "templates", templates, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    monkeypatch.setenv("AGENTGEN_TEMPLATES", str(templates))
    manifest = tmp / "agent.yaml"
    manifest.write_text(
        'name: "research-agent"\nversion: 0.2.0\ntitle: "Research"\ndescription: "Finds papers."\n',
        encoding="utf-8",
    )
    schema = write_fake_schema(
        tmp / "s1.json",
        {
            "initialize": ["InitializeRequest", "InitializeResponse"],
            "session_prompt": ["PromptRequest", "PromptResponse"],
        },
        {"PromptResponse": [["stop_reason", "stopReason"]]},
    )
    target = tmp / "proj"
    assert run_new(target, manifest=manifest, schema=str(schema)) == 0
    git(target, "init", "-q")
    git_commit_all(target, "generated")
    return templates, target


def _second_machine(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Another machine: a template store (cache) that has never seen the project."""
    fresh = tmp / "other-machine-store"
    monkeypatch.setenv("AGENTGEN_TEMPLATE_STORE", str(fresh))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp / "other-machine-cache"))
    return fresh


@pytest.mark.usefixtures("fake_pipeline", "store")
def test_the_project_records_no_machine_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, target = _project(tmp_path, monkeypatch)
    answers = (target / ".copier-answers.yml").read_text(encoding="utf-8")
    assert "_src_path: acp-agentgen\n" in answers
    assert str(tmp_path) not in answers and "~/" not in answers and ".cache" not in answers


@pytest.mark.usefixtures("fake_pipeline", "store")
def test_update_on_a_second_machine_merges_a_template_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    templates, target = _project(tmp_path, monkeypatch)
    readme = target / "README.md"
    readme.write_text(readme.read_text() + "\nMy own notes.\n")
    git_commit_all(target, "my notes")
    tpl = templates / "agent/project/README.md.jinja"
    tpl.write_text(tpl.read_text().replace("## Run\n", "## Run it\n"))
    fresh = _second_machine(tmp_path, monkeypatch)

    code, out = invoke("update", "--project", str(target))
    assert code == 0, out
    assert "updated README.md" in out
    merged = readme.read_text()
    assert "## Run it\n" in merged and "## Run\n" not in merged  # the template change
    assert merged.endswith("\nMy own notes.\n")  # the user's change
    assert (fresh / ".git").is_dir()  # the old revision was rebuilt there
    answers = (target / ".copier-answers.yml").read_text(encoding="utf-8")
    assert "_src_path: acp-agentgen\n" in answers
    # a second update finds nothing to do
    git_commit_all(target, "updated")
    code, out = invoke("update", "--project", str(target))
    assert code == 0 and "already matches" in out, out


@pytest.mark.usefixtures("fake_pipeline", "store")
def test_a_template_change_to_the_handlers_never_touches_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    templates, target = _project(tmp_path, monkeypatch)
    handlers = target / PKG / "handlers.py"
    lines = handlers.read_text().splitlines(keepends=True)
    lines[0] = '"""My agent: it reads papers.\n'
    handlers.write_text("".join(lines))
    test_file = target / "tests" / f"test_{PKG}.py"
    test_file.write_text(test_file.read_text() + "\n# my extra check\n")
    git_commit_all(target, "my code")
    mine = {p: p.read_bytes() for p in (handlers, test_file)}

    for rel in (
        "agent/project/{{ package_name }}/handlers.py.jinja",
        "agent/project/tests/test_{{ package_name }}.py.jinja",
    ):
        tpl = templates / rel
        first, rest = tpl.read_text().split("\n", 1)
        tpl.write_text(
            f'"""Version two of the template.\n{rest}'
            if rel.endswith("handlers.py.jinja")
            else f"{first}\n# version two\n{rest}"
        )
    _second_machine(tmp_path, monkeypatch)

    code, out = invoke("update", "--project", str(target))
    assert code == 0, out
    for path, data in mine.items():
        assert path.read_bytes() == data  # byte-identical
        assert b"<<<<<<<" not in path.read_bytes()
        rel = path.relative_to(target).as_posix()
        assert f"template changed {rel}: your file is unchanged" in out
        assert f"the new template text is in {rel}.new" in out
    new_text = (target / PKG / "handlers.py.new").read_text()
    assert new_text.startswith('"""Version two of the template.\n')
    assert "# version two" in (target / "tests" / f"test_{PKG}.py.new").read_text()
    assert "conflict" not in out


@pytest.mark.usefixtures("fake_pipeline", "store")
def test_a_conflict_in_a_template_owned_file_is_marked_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    templates, target = _project(tmp_path, monkeypatch)
    readme = target / "README.md"
    readme.write_text(readme.read_text().replace("## Run\n", "## How I run it\n"))
    git_commit_all(target, "mine")
    tpl = templates / "agent/project/README.md.jinja"
    tpl.write_text(tpl.read_text().replace("## Run\n", "## Run it\n"))
    code, out = invoke("update", "--project", str(target))
    assert code == 1, out
    assert "conflict: README.md" in out
    text = readme.read_text()
    assert "<<<<<<< yours" in text and "## How I run it" in text and "## Run it" in text


@pytest.mark.usefixtures("fake_pipeline", "store")
def test_a_revision_no_agentgen_here_can_rebuild_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, target = _project(tmp_path, monkeypatch)
    answers = target / ".copier-answers.yml"
    text = answers.read_text(encoding="utf-8")
    old = next(line for line in text.splitlines() if line.startswith("_commit:"))
    answers.write_text(text.replace(old, "_commit: 0.0.7+agent.0123456789ab"), encoding="utf-8")
    git_commit_all(target, "made by an older agentgen")
    _second_machine(tmp_path, monkeypatch)
    before = {p: p.read_bytes() for p in target.rglob("*") if p.is_file() and ".git" not in p.parts}
    code, out = invoke("update", "--project", str(target))
    assert code == 2, out
    assert "0.0.7+agent.0123456789ab" in out and "acp-agentgen==0.0.7" in out
    assert "Traceback" not in out
    after = {p: p.read_bytes() for p in target.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert after == before


def test_user_owned_files() -> None:
    from generator.scaffold.update import user_owned

    assert user_owned("research_agent/handlers.py")
    assert user_owned("tests/test_research_agent.py")
    assert not user_owned("README.md")
    assert not user_owned("research_agent/__main__.py")
    assert not user_owned("pyproject.toml")
