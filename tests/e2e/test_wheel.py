"""agentgen as users install it: build the wheel, install it into a fresh venv with no
checkout on the path (cwd outside the repository), and use it; then run the
pre-commit hooks (.pre-commit-hooks.yaml) from a git clone through real `pre-commit
run`, which installs the hook repository with pip (the wheel path again), with the
README's pre-commit snippet.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

ROLES = [("agent", "stdio"), ("agent", "http"), ("client", "stdio"), ("client", "http")]


def _run(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@localhost",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@localhost",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    done = subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout


def _source_tree(dest: Path) -> Path:
    """The checkout's files as they are now (tracked and new, not ignored), in `dest`."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def _clean_env(tmp: Path, bin_dir: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # pip installs without byte-compiling every module it unpacks (the `installed` venv,
    # the typed venv, pre-commit's hook environment); what runs is compiled as it is
    # imported, once for the module, into one folder outside the trees under test
    env["PIP_COMPILE"] = "false"
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    env["AGENTGEN_TEMPLATE_STORE"] = str(tmp / "store")
    env["PRE_COMMIT_HOME"] = str(tmp / "pre-commit-home")
    if bin_dir is not None:
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("wheel")
    src = _source_tree(tmp / "src")
    env = _clean_env(tmp)
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"), "."],
        cwd=src,
        env=env,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    # no deprecation of pyproject's own (the license as a table was one, on every build)
    assert "project.license" not in built.stderr, built.stderr
    (wheel,) = sorted((tmp / "dist").glob("acp_agentgen-*.whl"))
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp, env=env)
    assert made.returncode == 0, made.stderr
    pip = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], tmp, env)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    work = tmp / "work"
    work.mkdir()
    return {"tmp": tmp, "src": src, "bin": venv / "bin", "work": work, "wheel": wheel}


def _agentgen(inst: dict[str, Any], *args: str, cwd: Path | None = None) -> tuple[int, str]:
    env = _clean_env(inst["tmp"], inst["bin"])
    done = _run([str(inst["bin"] / "agentgen"), *args], cwd or inst["work"], env)
    return done.returncode, done.stdout + done.stderr


def test_the_wheel_carries_templates_runtime_and_schemas(installed: dict[str, Any]) -> None:
    import zipfile

    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    meta = zipfile.ZipFile(installed["wheel"]).read(metadata).decode()
    assert "License-Expression: Apache-2.0" in meta.splitlines()
    assert [n for n in names if n.endswith(".dist-info/licenses/LICENSE")], names
    for rel in (
        "agentgen/_data/templates/agent/copier.yml",
        "agentgen/_data/templates/client/copier.yml",
        "agentgen/_data/templates/runtime/wire/jsonrpc.py",
        "agentgen/_data/schema/manifest.schema.json",
        "agentgen/_data/schema/upstream.lock.json",
        # agentgen inspect's page, package data beside its code
        "agentgen/inspect/static/index.html",
        "agentgen/inspect/static/app.js",
        "agentgen/inspect/static/style.css",
    ):
        assert rel in names, rel
    # the runtime is complete: every module of the checkout's runtime is in the wheel
    runtime = {p.name for p in (REPO / "templates" / "runtime").glob("*.py")}
    assert {n.rsplit("/", 1)[1] for n in names if "/_data/templates/runtime/" in n} >= runtime
    # the generator's typed import of the runtime's revision module (a symlink in the
    # checkout) is a real file in the wheel, the same bytes as the runtime's copy
    wheel = zipfile.ZipFile(installed["wheel"])
    assert wheel.read("agentgen/protocol/runtime_revision.py") == wheel.read(
        "agentgen/_data/templates/runtime/wire/revision.py"
    )
    # the import package is `agentgen`: the repository's generator/ folder installs under
    # that name, and no top-level `generator` (a name that collides easily) is installed
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"agentgen"}, tops
    # the installed package is the one agentgen runs (not a checkout on the path)
    where = _run(
        [str(installed["bin"] / "python"), "-c", "import agentgen; print(agentgen.__file__)"],
        installed["work"],
        _clean_env(installed["tmp"]),
    )
    assert str(installed["tmp"] / "venv") in where.stdout, where.stdout + where.stderr
    assert str(REPO) not in where.stdout
    gone = _run(
        [str(installed["bin"] / "python"), "-c", "import generator"],
        installed["work"],
        _clean_env(installed["tmp"]),
    )
    assert gone.returncode != 0 and "No module named 'generator'" in gone.stderr


def test_validate_new_check_regen_update_from_the_wheel(installed: dict[str, Any]) -> None:
    work: Path = installed["work"]
    shutil.copy(REPO / "examples" / "echo" / "agent.yaml", work / "agent.yaml")
    code, out = _agentgen(installed, "validate", "agent.yaml")
    assert code == 0, out
    for role, transport in ROLES:
        proj = work / f"{role}-{transport}"
        code, out = _agentgen(
            installed,
            "new",
            str(proj),
            "--manifest",
            "agent.yaml",
            "--role",
            role,
            "--transport",
            transport,
        )
        assert code == 0, out
        runtime = sorted(p.name for p in proj.rglob("_generated/runtime/*.py"))
        assert runtime, f"{proj}: no runtime copied"
        code, out = _agentgen(installed, "check", "--project", str(proj))
        assert code == 0 and "stale" not in out, out
        code, out = _agentgen(installed, "regen", "--project", str(proj))
        assert code == 0, out
        assert sorted(p.name for p in proj.rglob("_generated/runtime/*.py")) == runtime
        code, out = _agentgen(installed, "check", "--project", str(proj))
        assert code == 0 and "stale" not in out, out
        # the regenerated package still imports (regen deleted nothing it needs)
        pkg = next(p.parent.name for p in proj.glob("*/_generated"))
        imported = _run(
            [sys.executable, "-c", f"import {pkg}._generated.dispatcher"],
            proj,
            {**_clean_env(installed["tmp"]), "PYTHONPATH": str(proj)},
        )
        assert imported.returncode == 0, imported.stderr
    proj = work / "agent-stdio"  # `new` made its first commit: update works at once
    code, out = _agentgen(installed, "update", "--project", str(proj))
    assert code == 0, out


def _readme_precommit_snippet() -> dict[str, Any]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    found = [b for b in blocks if "agentgen-check" in b and "rev:" in b]
    assert len(found) == 1, "the README has one pre-commit snippet"
    data: dict[str, Any] = YAML(typ="safe").load(found[0])
    return data


@pytest.fixture(scope="module")
def hook_repo(installed: dict[str, Any]) -> tuple[str, str]:
    """A git clone of this checkout (its URI and commit) for the README's snippet: one for
    the module, so pre-commit (PRE_COMMIT_HOME is the module's) pip-installs it once, in
    the first test that runs the hooks, and the next reuses that install as a user's
    second repository would."""
    hooks: Path = installed["tmp"] / "hook-repo"
    shutil.copytree(installed["src"], hooks)
    _git(hooks, "init", "-q")
    _git(hooks, "add", "-A")
    _git(hooks, "commit", "-q", "-m", "agentgen")
    return hooks.as_uri(), _git(hooks, "rev-parse", "HEAD").strip()


def test_the_readme_precommit_snippet_runs_the_hooks(
    installed: dict[str, Any], hook_repo: tuple[str, str]
) -> None:
    """The README's snippet, pointed at a local git clone of this checkout, through real
    `pre-commit run`: pre-commit pip-installs the clone (the wheel path) and both hooks
    pass on a fresh project; a hand-edited generated file makes agentgen-check fail."""
    tmp: Path = installed["tmp"]
    snippet = _readme_precommit_snippet()
    (repo_entry,) = snippet["repos"]
    assert [h["id"] for h in repo_entry["hooks"]] == ["agentgen-validate", "agentgen-check"]
    repo_entry["repo"], repo_entry["rev"] = hook_repo

    work: Path = installed["work"]
    proj = work / "hooked"
    shutil.copy(REPO / "examples" / "echo" / "agent.yaml", work / "hook-agent.yaml")
    code, out = _agentgen(installed, "new", str(proj), "--manifest", "hook-agent.yaml")
    assert code == 0, out
    yaml = YAML()
    with (proj / ".pre-commit-config.yaml").open("w", encoding="utf-8") as fh:
        yaml.dump(snippet, fh)
    _git(proj, "init", "-q")
    _git(proj, "add", "-A")
    _git(proj, "commit", "-q", "-m", "new")

    pre_commit = str(Path(sys.executable).parent / "pre-commit")
    env = _clean_env(tmp)  # no agentgen on PATH: pre-commit must install the hook repo
    done = _run([pre_commit, "run", "--all-files"], proj, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"agentgen validate\.+Passed", done.stdout), done.stdout
    assert re.search(r"agentgen check\.+Passed", done.stdout), done.stdout

    models = next(proj.glob("*/_generated/models.py"))
    models.write_text(models.read_text() + "\n# edited by hand\n")
    done = _run([pre_commit, "run", "--all-files"], proj, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"agentgen check\.+Failed", done.stdout), done.stdout


def test_the_validate_hook_fails_on_a_bad_manifest_with_its_location(
    installed: dict[str, Any], hook_repo: tuple[str, str]
) -> None:
    """agentgen-validate alone, configured as `pre-commit try-repo` configures a hook
    repository (its URI, its commit, the hook's id; the configuration outside the
    repository), on a repository holding one good and one bad manifest and a file that is
    no manifest: exit 1, each of the bad manifest's diagnostics located, nothing about
    the good one but notes, no traceback.  (Was test_manifest_precommit's own `try-repo`
    run, which pip-installed agentgen into a store of its own; here the module's store
    holds the one install the README snippet's tests use too.)"""
    cases = REPO / "tests" / "cases" / "manifests"
    work: Path = installed["work"] / "try-hook"
    for name, case in (("good", "valid-full"), ("bad", "states-unreachable")):
        (work / name).mkdir(parents=True)
        shutil.copy(cases / case / "agent.yaml", work / name / "agent.yaml")
    (work / "notes.txt").write_text("not a manifest\n")
    _git(work, "init", "-q")
    _git(work, "add", ".")
    uri, rev = hook_repo
    config = installed["tmp"] / "try-hook-config.yaml"
    with config.open("w", encoding="utf-8") as fh:
        YAML().dump(
            {"repos": [{"repo": uri, "rev": rev, "hooks": [{"id": "agentgen-validate"}]}]}, fh
        )
    pre_commit = str(Path(sys.executable).parent / "pre-commit")
    cmd = [pre_commit, "run", "-c", str(config), "--all-files", "--color", "never"]
    done = _run(cmd, work, _clean_env(installed["tmp"]))
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "agentgen validate" in out and "Failed" in out
    expected = (cases / "states-unreachable" / "expected.txt").read_text().splitlines()
    for line in expected:
        assert "bad/" + line in out, out
    # the good manifest gives no diagnostic (a note about its config options at most)
    assert not [ln for ln in out.splitlines() if "good/agent.yaml" in ln and ": note: " not in ln]
    assert "Traceback" not in out


def test_the_generated_projects_own_precommit_config(installed: dict[str, Any]) -> None:
    """A generated project's .pre-commit-config.yaml (local hooks calling the installed
    `agentgen`) passes with the wheel's agentgen on PATH."""
    work: Path = installed["work"]
    proj = work / "own-hooks"
    shutil.copy(REPO / "examples" / "echo" / "agent.yaml", work / "own-agent.yaml")
    code, out = _agentgen(installed, "new", str(proj), "--manifest", "own-agent.yaml")
    assert code == 0, out
    config = (proj / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    assert "pip install acp-agentgen" in config and "pip install agentgen" not in config
    pre_commit = str(Path(sys.executable).parent / "pre-commit")
    done = _run([pre_commit, "run", "--all-files"], proj, _clean_env(work, installed["bin"]))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("Passed") == 2, done.stdout


def _agentgen_as(
    inst: dict[str, Any], args: list[str], *, umask: int, home: Path
) -> tuple[int, str]:
    """`agentgen` under a given umask, for a user with no git configuration at all."""
    env = {**_clean_env(inst["tmp"], inst["bin"]), "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
    for key in [k for k in env if k.startswith("GIT_") and k != "GIT_CONFIG_NOSYSTEM"]:
        del env[key]
    home.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [str(inst["bin"] / "agentgen"), *args],
        cwd=inst["work"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        umask=umask,
    )
    return done.returncode, done.stdout + done.stderr


def test_what_new_regen_and_models_write_honours_the_umask(installed: dict[str, Any]) -> None:
    """Not mkstemp's 0600: a container user or a shared checkout can read the project."""
    work: Path = installed["work"]
    shutil.copy(REPO / "examples" / "echo" / "agent.yaml", work / "mode-agent.yaml")
    home = installed["tmp"] / "mode-home"
    proj = work / "modes"
    args = ["new", str(proj), "-m", "mode-agent.yaml", "--transport", "http", "--no-git"]
    code, out = _agentgen_as(installed, args, umask=0o022, home=home)
    assert code == 0, out
    models = next(proj.glob("*/_generated/models.py"))
    models.unlink()  # regen writes it anew
    code, out = _agentgen_as(installed, ["regen", "--project", str(proj)], umask=0o022, home=home)
    assert code == 0, out
    code, out = _agentgen_as(
        installed, ["models", "-m", "mode-agent.yaml", "-o", "m.py"], umask=0o022, home=home
    )
    assert code == 0, out
    files = [p for p in proj.rglob("*") if p.is_file()] + [work / "m.py"]
    modes = {p.relative_to(work).as_posix(): oct(p.stat().st_mode & 0o777) for p in files}
    assert models.exists()
    assert {m for m in modes.values()} == {"0o644"}, modes
    dirs = {oct(p.stat().st_mode & 0o777) for p in [proj, *proj.rglob("*")] if p.is_dir()}
    assert dirs == {"0o755"}, dirs
    code, out = _agentgen_as(
        installed, ["models", "-m", "mode-agent.yaml", "-o", "m2.py"], umask=0o077, home=home
    )
    assert code == 0 and (work / "m2.py").stat().st_mode & 0o777 == 0o600, out


def test_new_makes_the_first_commit_so_update_works_at_once(installed: dict[str, Any]) -> None:
    """A user with no git configuration: `new` commits as agentgen and says so; the
    sessions database, build/ and dist/ are ignored; `--no-git` leaves git alone."""
    work: Path = installed["work"]
    shutil.copy(REPO / "examples" / "echo" / "agent.yaml", work / "git-agent.yaml")
    home = installed["tmp"] / "git-home"
    for role, transport in (("agent", "http"), ("client", "stdio")):
        proj = work / f"git-{role}"
        args = ["new", str(proj), "-m", "git-agent.yaml", "--role", role]
        code, out = _agentgen_as(
            installed, [*args, "--transport", transport], umask=0o022, home=home
        )
        assert code == 0, out
        assert "git: repository made, first commit" in out, out
        assert _git(proj, "status", "--porcelain") == ""
        assert "agentgen new" in _git(proj, "log", "--format=%s")
        for junk in (
            "echo-agent-sessions.db",
            "echo-agent-sessions.db-wal",
            "build/x",
            "dist/y.whl",
        ):
            (proj / junk).parent.mkdir(parents=True, exist_ok=True)
            (proj / junk).write_text("")
        assert _git(proj, "status", "--porcelain") == "", "the .gitignore misses something"
        code, out = _agentgen_as(
            installed, ["update", "--project", str(proj)], umask=0o022, home=home
        )
        assert code == 0, out
    proj = work / "git-none"
    code, out = _agentgen_as(
        installed, ["new", str(proj), "-m", "git-agent.yaml", "--no-git"], umask=0o022, home=home
    )
    assert code == 0 and "git:" not in out, out
    assert not (proj / ".git").exists()


def test_every_fresh_project_passes_mypy_and_ruff_with_its_test_extra_alone(
    installed: dict[str, Any],
) -> None:
    """`pip install -e '.[test]'` and nothing else (no postgres/redis extras), then
    `mypy .` and `ruff check` in each kind of project; a `build/` left by `pip wheel .`
    is not a second copy of the package to mypy."""
    work: Path = installed["work"]
    tmp: Path = installed["tmp"]
    shutil.copy(REPO / "examples" / "echo" / "agent.yaml", work / "typed-agent.yaml")
    venv = tmp / "typed-venv"
    env = _clean_env(tmp)
    made = _run([sys.executable, "-m", "venv", str(venv)], tmp, env)
    assert made.returncode == 0, made.stderr
    py = str(venv / "bin" / "python")
    for role, transport in ROLES:
        proj = work / f"typed-{role}-{transport}"
        code, out = _agentgen(
            installed,
            *("new", str(proj), "-m", "typed-agent.yaml", "--no-git"),
            *("--role", role, "--transport", transport),
        )
        assert code == 0, out
        # --no-compile: the same install without byte-compiling every module of the
        # dependencies up front (mypy and ruff are compiled programs)
        pip = _run([py, "-m", "pip", "install", "-q", "--no-compile", "-e", ".[test]"], proj, env)
        assert pip.returncode == 0, pip.stdout + pip.stderr
        if (role, transport) == ("agent", "http"):
            built = _run(
                [py, "-m", "pip", "wheel", "-q", "--no-deps", "-w", "dist", "."], proj, env
            )
            assert built.returncode == 0 and (proj / "build").is_dir(), built.stderr
        for tool in (["mypy", "."], ["ruff", "check"]):
            done = _run([str(venv / "bin" / tool[0]), *tool[1:]], proj, env)
            assert done.returncode == 0, f"{role}-{transport}: {done.stdout}{done.stderr}"


def _readme_widened_files() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    (block,) = [b for b in blocks if "files:" in b and "agentgen-validate" in b]
    (hook,) = YAML(typ="safe").load(textwrap.dedent(block))
    files: str = hook["files"]
    return files


def test_the_readme_precommit_snippet_in_a_manifest_only_repository(
    installed: dict[str, Any], hook_repo: tuple[str, str]
) -> None:
    """A repository with manifests and no generated project: both hooks pass on valid
    manifests (agentgen-check has nothing to check), a broken one stops the commit with a
    located line, and `files:` widened as the README shows reaches review.yaml."""
    tmp: Path = installed["tmp"]
    snippet = _readme_precommit_snippet()
    (repo_entry,) = snippet["repos"]
    repo_entry["repo"], repo_entry["rev"] = hook_repo

    repo = installed["work"] / "manifests-only"
    (repo / "echo").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "echo" / "agent.yaml", repo / "echo" / "agent.yaml")
    with (repo / ".pre-commit-config.yaml").open("w", encoding="utf-8") as fh:
        YAML().dump(snippet, fh)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    pre_commit = str(Path(sys.executable).parent / "pre-commit")
    env = _clean_env(tmp)
    done = _run([pre_commit, "run", "--all-files", "--color", "never"], repo, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"agentgen validate\.+Passed", done.stdout), done.stdout
    assert re.search(r"agentgen check\.+Passed", done.stdout), done.stdout

    (repo / "review.yaml").write_text("name: review\nversion: 0.1.0\ninput:\n  type: strnig\n")
    _git(repo, "add", "-A")
    done = _run([pre_commit, "run", "--all-files", "--color", "never"], repo, env)
    assert done.returncode == 0, done.stdout + done.stderr  # not a manifest name: skipped
    repo_entry["hooks"][0]["files"] = _readme_widened_files()
    with (repo / ".pre-commit-config.yaml").open("w", encoding="utf-8") as fh:
        YAML().dump(snippet, fh)
    _git(repo, "add", "-A")
    done = _run([pre_commit, "run", "--all-files", "--color", "never"], repo, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"agentgen validate\.+Failed", done.stdout), done.stdout
    assert re.search(r"review\.yaml:4:\d+: /input/type", done.stdout), done.stdout
    assert re.search(r"agentgen check\.+Passed", done.stdout), done.stdout


def test_an_untouched_fresh_project_regenerates_to_v2_with_exit_0(
    installed: dict[str, Any], shared_acp: Path
) -> None:
    """From the wheel: regen to v2 is information only (exit 0) and the project's tests
    pass on v2 with the wire check on; the two-schema form reports each revision."""
    work: Path = installed["work"]
    shutil.copy(REPO / "examples" / "echo" / "agent.yaml", work / "regen-agent.yaml")
    v1, v2 = (str(shared_acp / rev / "schema.json") for rev in ("v1", "v2"))
    for name, schemas in (("regen-v2", [v2]), ("regen-both", [v1, v2])):
        proj = work / name
        code, out = _agentgen(installed, "new", str(proj), "-m", "regen-agent.yaml")
        assert code == 0, out
        args = [a for s in schemas for a in ("--schema", s)]
        code, out = _agentgen(installed, "regen", "--project", str(proj), *args)
        assert code == 0, out
        assert "nothing to do" in out and "must change" not in out, out
        headers = [ln for ln in out.splitlines() if ln.startswith("protocol schema")]
        if len(schemas) == 2:
            assert [h.split(":")[0] for h in headers] == [
                "protocol schema (v1)",
                "protocol schema (v2)",
            ], out
        else:
            assert "no longer served: v1" in out, out
        env = {**_clean_env(installed["tmp"]), "PYTHONPATH": str(proj), "ACP_WIRE_CHECK": "1"}
        done = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], proj, env)
        assert done.returncode == 0, done.stdout + done.stderr


def test_init_writes_a_manifest_that_validates_and_makes_a_project(
    installed: dict[str, Any],
) -> None:
    """From the wheel: `agentgen init --yes` in a new folder; the schema line names the
    manifest schema's published URL (this version's tag of the repository), nothing of the
    installed package's path; the manifest validates and `new` uses it."""
    folder = installed["work"] / "init-here"
    folder.mkdir()
    code, out = _agentgen(installed, "init", "--yes", "--name", "wheel-agent", cwd=folder)
    assert code == 0, out
    first = (folder / "agent.yaml").read_text(encoding="utf-8").splitlines()[0]
    url = first.removeprefix("# yaml-language-server: $schema=")
    assert re.fullmatch(
        r"https://raw\.githubusercontent\.com/agentgen/agentgen/v[\w.]+/schema/manifest\.schema\.json",
        url,
    ), first
    assert str(installed["tmp"]) not in (folder / "agent.yaml").read_text(encoding="utf-8")
    code, out = _agentgen(installed, "validate", "agent.yaml", cwd=folder)
    assert code == 0, out
    code, out = _agentgen(installed, "new", "proj", "-m", "agent.yaml", "--no-git", cwd=folder)
    assert code == 0, out
    assert (folder / "proj" / "wheel_agent" / "handlers.py").is_file()
    # issue 37 item 11: README's "start from examples/coder" with no checkout
    code, out = _agentgen(installed, "init", "--example", "coder", "coder", cwd=folder)
    assert code == 0, out
    assert (folder / "coder" / "handlers.py").read_bytes() == (
        REPO / "examples" / "coder" / "handlers.py"
    ).read_bytes()
    code, out = _agentgen(installed, "validate", "coder/agent.yaml", cwd=folder)
    assert code == 0, out


def test_inspect_runs_from_a_plain_install_of_the_wheel(installed: dict[str, Any]) -> None:
    """`pip install <wheel>` and nothing else (what `pipx install acp-agentgen` does):
    `agentgen inspect -- CMD` renders its client, serves the page with the token, and the
    install pulled none of the stores' drivers (psycopg, redis) or uvloop."""
    py = str(installed["bin"] / "python")
    for module in ("psycopg", "redis", "uvloop"):
        probe = _run(
            [py, "-c", f"import {module}"], installed["work"], _clean_env(installed["tmp"])
        )
        assert probe.returncode != 0, f"{module} came with the plain install"
    env = {
        **_clean_env(installed["tmp"], installed["bin"]),
        "XDG_CACHE_HOME": str(installed["tmp"] / "cache"),
    }
    proc = subprocess.Popen(
        [str(installed["bin"] / "agentgen"), "inspect", "--no-open", "--port", "0", "--", "true"],
        cwd=installed["work"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.fullmatch(r"agentgen inspect: (http://127\.0\.0\.1:\d+/\?token=\S+)\n", line)
        assert m, line + (proc.stderr.read() if proc.stderr and proc.poll() is not None else "")
        with urllib.request.urlopen(m.group(1), timeout=30) as page:
            assert page.status == 200
            assert "agentgen inspect" in page.read().decode("utf-8")
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_conform_judges_a_stdio_agent_from_a_plain_install(
    installed: dict[str, Any], shared_acp: Path
) -> None:
    """`agentgen conform agent -- CMD` from the wheel with no extra: the kit renders the
    revision's models into its cache and judges the scriptable stdio agent
    (tests/peers/conform_agent.py, stdlib only) CONFORMANT, exit 0; the same agent with
    a planted defect is NOT CONFORMANT, exit 1."""
    env = _clean_env(installed["tmp"], installed["bin"])
    env.update(XDG_CACHE_HOME=str(installed["tmp"] / "conform-cache"), FAKE_PROTOCOL="1")
    agent = [
        str(installed["bin"] / "python"),
        str(installed["src"] / "tests/peers/conform_agent.py"),
    ]
    schema = str(shared_acp / "v1" / "schema.unstable.json")
    args = ["conform", "agent", "--protocol", "1", "--schema", schema, "--quiet", "0.2"]
    args += ["--cancel-prompt", "hang"]
    cmd = [str(installed["bin"] / "agentgen"), *args, "--", *agent]
    done = _run(cmd, installed["work"], {**env, "FAKE_DEFECT": ""}, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "VERDICT: CONFORMANT" in done.stdout
    bad = _run(cmd, installed["work"], {**env, "FAKE_DEFECT": "echo-version"}, timeout=240)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "VERDICT: NOT CONFORMANT (ACP-INIT-003 FAIL)" in bad.stdout
