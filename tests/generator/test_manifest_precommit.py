"""The pre-commit hooks, run by the real `pre-commit try-repo` against a temporary git
repository holding one good and one bad manifest. One try-repo run per session: it
installs agentgen from this repository into pre-commit's own environment (pip)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests" / "cases" / "manifests"
PRE_COMMIT = Path(sys.executable).parent / "pre-commit"


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def try_repo(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    work = tmp_path_factory.mktemp("hooked")
    (work / "good").mkdir()
    (work / "bad").mkdir()
    (work / "good" / "agent.yaml").write_text((CASES / "valid-full" / "agent.yaml").read_text())
    (work / "bad" / "agent.yaml").write_text(
        (CASES / "states-unreachable" / "agent.yaml").read_text()
    )
    (work / "notes.txt").write_text("not a manifest\n")
    _git(work, "init", "-q")
    _git(work, "add", ".")
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(tmp_path_factory.mktemp("pre-commit-home")),
        # the hook's environment installed without byte-compiling every module of
        # agentgen's dependencies up front (pip --no-compile: PIP_NO_COMPILE=1 would mean
        # the opposite); the hook compiles what it imports
        "PIP_COMPILE": "0",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    return subprocess.run(
        [
            str(PRE_COMMIT),
            "try-repo",
            str(REPO),
            "agentgen-validate",
            "--all-files",
            "--color",
            "never",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.mark.slow
def test_hook_fails_on_the_bad_manifest_with_its_location(
    try_repo: subprocess.CompletedProcess[str],
) -> None:
    out = try_repo.stdout + try_repo.stderr
    assert try_repo.returncode == 1, out
    assert "agentgen validate" in out and "Failed" in out
    expected = (CASES / "states-unreachable" / "expected.txt").read_text().splitlines()
    for line in expected:
        assert "bad/" + line in out, out
    # the good manifest gives no diagnostic (a note about its config options at most)
    assert not [ln for ln in out.splitlines() if "good/agent.yaml" in ln and ": note: " not in ln]
    assert "Traceback" not in out


def test_hooks_file_offers_both_hooks() -> None:
    from ruamel.yaml import YAML

    hooks = YAML(typ="safe", pure=True).load((REPO / ".pre-commit-hooks.yaml").read_text())
    by_id = {h["id"]: h for h in hooks}
    assert by_id["agentgen-validate"]["entry"] == "agentgen validate"
    assert by_id["agentgen-check"]["entry"] == "agentgen check --all"
    assert by_id["agentgen-check"]["pass_filenames"] is False
    import re

    pattern = re.compile(by_id["agentgen-validate"]["files"])
    for path in ("agent.yaml", "x/agent.yml", "agent.json", "sub/mail.agent.yaml"):
        assert pattern.search(path), path
    for path in ("agent.yaml.bak", "myagent.yaml", "x/agent.toml", "notes.txt"):
        assert not pattern.search(path), path
