"""The distribution name is ours on PyPI (`acp-agentgen`; PyPI's `agentgen` is another
project), and every install instruction we write or generate uses it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# an install command naming the bare `agentgen` distribution (not acp-agentgen)
FOREIGN = re.compile(r"\b(?:pip|pipx|uv tool|uv pip) install (?:-[-\w]+ )*agentgen\b(?![-\w])")


def test_distribution_name_and_command() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == "acp-agentgen"
    assert project["scripts"] == {"agentgen": "agentgen.entry:main"}
    # the repository's generator/ folder installs as `agentgen`, nothing as `generator`
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"
    ]
    assert setuptools["package-dir"] == {"agentgen": "generator"}
    on_disk = {
        ".".join(("agentgen", *p.parent.relative_to(REPO / "generator").parts))
        for p in (REPO / "generator").rglob("__init__.py")
    }
    assert set(setuptools["packages"]) == on_disk  # every subpackage is installed
    assert all(
        "agentgen[" not in d or d.startswith("acp-agentgen[")
        for d in project["optional-dependencies"]["dev"]
    )


def test_no_instruction_installs_the_foreign_agentgen() -> None:
    roots = [REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "templates", REPO / "generated"]
    offenders: list[str] = []
    for root in roots:
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in paths:
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            for n, line in enumerate(text.splitlines(), 1):
                if FOREIGN.search(line):
                    offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert offenders == []
    # the pattern finds what it is meant to find, and leaves our name alone
    assert FOREIGN.search("(pip install agentgen).")
    assert not FOREIGN.search("pip install acp-agentgen")


def test_generated_precommit_config_names_our_distribution() -> None:
    for role in ("agent", "client"):
        text = (REPO / "templates" / role / "project" / ".pre-commit-config.yaml.jinja").read_text()
        assert "pip install acp-agentgen" in text


def test_one_repository_url_everywhere() -> None:
    """Issue 29 item 9: pyproject names the project's URLs, and the README's pre-commit
    snippet and install line, and `agentgen init`'s `$schema` URL, use its Repository."""
    from ruamel.yaml import YAML

    import generator

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    urls = project["urls"]
    repo = urls["Repository"]
    assert repo == urls["Homepage"] and urls["Issues"] == f"{repo}/issues"
    assert generator.REPOSITORY == repo
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL)
    (snippet,) = [b for b in blocks if "agentgen-check" in b and "rev:" in b]
    (entry,) = YAML(typ="safe").load(snippet)["repos"]
    assert entry["repo"] == repo
    assert f"`pipx install git+{repo}@v{project['version']}`" in readme
    assert "example.invalid" not in readme
    # every mention of a github.com repository in the README is this one
    assert set(re.findall(r"https://github\.com/agentgen/[\w.-]+", readme)) == {repo}


def test_license_is_an_spdx_expression_with_its_file() -> None:
    """Issue 29, item 11: `license = { text = ... }` made setuptools print its
    `project.license` deprecation on every build (`make demo` included). The license is
    an SPDX expression, its text ships as `license-files`, and the build requires a
    setuptools that reads both (77)."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    project = data["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert (REPO / "LICENSE").read_text(encoding="utf-8").lstrip().startswith("Apache License")
    (setuptools,) = [r for r in data["build-system"]["requires"] if r.startswith("setuptools")]
    assert re.fullmatch(r"setuptools>=(\d+)", setuptools)
    assert int(setuptools.split(">=")[1]) >= 77
