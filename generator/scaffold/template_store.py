"""A git store of copier template snapshots, from which `new` renders and `update`
renders the project's old and new template revisions for its 3-way merge.

copier renders only git-tracked templates at a repository root; an installed agentgen
is no repository at all. So every template that `new` or `update` uses is first
committed to a small local repository, the *store*, as its own root commit:

- the tree holds the template's files (mode 100644, sorted, no caches);
- author, committer and dates are fixed, the message names role and version,
  so the commit id depends only on the template bytes and the agentgen version;
- the tag is `<agentgen version>+<role>.<tree id[:12]>`: copier records it as the
  project's `_commit`.

The store is a cache (`$AGENTGEN_TEMPLATE_STORE`, else `$XDG_CACHE_HOME/agentgen/templates`,
default `~/.cache/...`): a project records no path to it. Its `.copier-answers.yml`
says `_src_path: acp-agentgen` (the distribution whose templates made it) and `_commit`
(the revision); `ensure_revision` rebuilds that revision in a fresh store from the
templates the installed agentgen carries, so `update` works on any machine.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import AgentgenError


def copier_errors() -> tuple[type[BaseException], ...]:
    from copier.errors import CopierError
    from plumbum import ProcessExecutionError

    return (CopierError, ProcessExecutionError, OSError, ValueError)


_SKIP_DIRS = {"__pycache__", ".git", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
_FIXED_ENV = {
    "GIT_AUTHOR_NAME": "agentgen",
    "GIT_AUTHOR_EMAIL": "agentgen@localhost",
    "GIT_COMMITTER_NAME": "agentgen",
    "GIT_COMMITTER_EMAIL": "agentgen@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


RECORDED_SOURCE = "acp-agentgen"  # `_src_path` in .copier-answers.yml: no machine's path


@dataclass(frozen=True)
class Snapshot:
    src_path: str  # what copier gets as src_path and records as `_src_path`
    tag: str  # what copier checks out and records as `_commit`


def templates_root() -> Path:
    """Where the role templates are read from (`$AGENTGEN_TEMPLATES` overrides it)."""
    override = os.environ.get("AGENTGEN_TEMPLATES")
    if override:
        return Path(override).resolve()
    from ..packaged import data_dir

    return data_dir("templates")


def store_path() -> Path:
    override = os.environ.get("AGENTGEN_TEMPLATE_STORE")
    if override:
        return Path(override).expanduser().resolve()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(cache).expanduser() / "agentgen" / "templates").resolve()


def _label(path: Path) -> str:
    home = Path.home().resolve()
    try:
        return "~/" + path.relative_to(home).as_posix()
    except ValueError:
        return path.as_posix()


def _git(
    repo: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> str:
    full_env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", **(env or {})}
    full_env.pop("GIT_DIR", None)
    full_env.pop("GIT_WORK_TREE", None)
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=full_env,
            check=False,
        )
    except OSError as exc:
        raise AgentgenError(f"cannot run git: {exc}", hint="install git") from None
    if done.returncode != 0:
        raise AgentgenError(
            f"git {args[0]} failed in the template store: {done.stderr.strip()}",
            source=str(repo),
        )
    return done.stdout


def _files(template_dir: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirs, names in os.walk(template_dir):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in sorted(names):
            if not name.endswith((".pyc", ".pyo")):
                found.append(Path(root) / name)
    return sorted(found, key=lambda p: p.relative_to(template_dir).as_posix())


def snapshot(role: str, version: str, template_dir: Path | None = None) -> Snapshot:
    """Commit the template for `role` (default: the current one) to the store; return
    where copier finds it."""
    if template_dir is None:
        template_dir = templates_root() / role
    if not (template_dir / "copier.yml").is_file():
        raise AgentgenError(f"no copier template for role {role!r}", source=str(template_dir))
    store = store_path()
    if not (store / ".git").is_dir():
        store.mkdir(parents=True, exist_ok=True)
        _git(store, "init", "-q")
    files = _files(template_dir)
    shas = _git(store, "hash-object", "-w", "--no-filters", "--", *(str(f) for f in files)).split()
    index = store / ".git" / f"agentgen-index-{os.getpid()}"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        info = "".join(
            f"100644 {sha}\t{f.relative_to(template_dir).as_posix()}\n"
            for sha, f in zip(shas, files, strict=True)
        )
        _git(store, "update-index", "--add", "--index-info", stdin=info, env=env)
        tree = _git(store, "write-tree", env=env).strip()
    finally:
        index.unlink(missing_ok=True)
    tag = f"{version}+{role}.{tree[:12]}"
    message = f"agentgen {role} template {version}\n"
    commit = _git(
        store, "commit-tree", "--no-gpg-sign", tree, stdin=message, env=_FIXED_ENV
    ).strip()
    _git(store, "update-ref", f"refs/tags/{tag}", commit)
    return Snapshot(src_path=_label(store), tag=tag)


def _has_tag(store: Path, tag: str) -> bool:
    if not (store / ".git").is_dir():
        return False
    try:
        _git(store, "rev-parse", "-q", "--verify", f"refs/tags/{tag}^{{commit}}")
    except AgentgenError:
        return False
    return True


def ensure_revision(role: str, tag: str, version: str) -> Snapshot:
    """The store's snapshot `tag` (a project's `_commit`), rebuilt from the templates
    this agentgen carries when the store lacks it (a fresh cache, another machine)."""
    store = store_path()
    if _has_tag(store, tag):
        return Snapshot(src_path=_label(store), tag=tag)
    from ..packaged import data_dir

    shipped = snapshot(role, version, data_dir("templates") / role)
    if shipped.tag == tag:
        return shipped
    made_with = tag.split("+", 1)[0]
    raise AgentgenError(
        f"the project was made from template revision {tag!r}, which this agentgen "
        f"({version}) does not carry and this machine's template store does not hold",
        source=str(store),
        hint=f"run `agentgen update` once with acp-agentgen {made_with} (e.g. `uvx --from "
        f"acp-agentgen=={made_with} agentgen update`): it stores that revision here",
    )


def record_source(answers: Path) -> None:
    """Make `.copier-answers.yml` name agentgen, not this machine's store, as `_src_path`."""
    text = answers.read_text(encoding="utf-8")
    lines = [
        f"_src_path: {RECORDED_SOURCE}" if line.startswith("_src_path:") else line
        for line in text.split("\n")
    ]
    fixed = "\n".join(lines)
    if fixed != text:
        answers.write_text(fixed, encoding="utf-8")
