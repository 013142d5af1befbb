"""`agentgen update`: apply template changes to a project with a 3-way merge.

copier renders the project's old template revision (`_commit` in .copier-answers.yml,
with the answers recorded there) and the current one (with answers from the manifest
as it is now) into temporary folders; each file the template changed is merged into
the project with `git merge-file` (base: the old render). The old revision comes from
the template store, rebuilt from the installed agentgen when the store lacks it, so
the project records no machine's path and `update` works on any machine.

User-owned files (`<package>/handlers.py`, everything under `tests/`) are never
written: when the template changed one, the new template text is put beside it
(`handlers.py.new`) and reported. A merge conflict in any other file leaves conflict
markers there and exits 1 naming it. The project must be a clean git work tree, so
the user can review (and undo) what the update did.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AgentgenError
from ..files import write_atomic
from . import inputs, project, template_store
from .new import copier_answers

ANSWERS = ".copier-answers.yml"
MERGE_FILE_MAX_CONFLICTS = 127  # git merge-file exits with the conflict count, capped here
BESIDE = ".new"  # suffix of the new template text put beside a user-owned file


SHOWN = 5  # uncommitted files named in the refusal


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise AgentgenError(
            f"git {args[0]} failed: {done.stderr.strip()}",
            source=str(root),
            hint="agentgen update needs the project in a git work tree",
        )
    return done.stdout


def _status(root: Path) -> list[str]:
    out = _git(root, "status", "--porcelain", "--untracked-files=all", "--", ".")
    # paths relative to the repository top; make them relative to the project
    top = Path(_git(root, "rev-parse", "--show-toplevel").strip()).resolve()
    paths: list[str] = []
    for line in out.splitlines():
        name = line[3:]
        if " -> " in name:
            name = name.split(" -> ", 1)[1]
        name = name.strip('"')
        path = (top / name).resolve()
        try:
            paths.append(path.relative_to(root).as_posix())
        except ValueError:
            continue
    return sorted(set(paths))


def user_owned(rel: str) -> bool:
    """Files agentgen promises never to rewrite: the handlers and the project's tests."""
    parts = rel.split("/")
    return parts[0] == "tests" or parts[-1] == "handlers.py"


def _read_answers(path: Path) -> dict[str, Any]:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    except (OSError, YAMLError) as exc:
        raise AgentgenError(f"cannot read the copier answers: {exc}", source=str(path)) from None
    if not isinstance(data, dict) or not isinstance(data.get("_commit"), str):
        raise AgentgenError(
            "no `_commit`: cannot tell which template revision made this project",
            source=str(path),
            hint="restore .copier-answers.yml from git",
        )
    return data


def _render(snap: template_store.Snapshot, data: dict[str, Any], dst: Path) -> dict[str, bytes]:
    """The project copier renders from one template revision, as {path: bytes}."""
    import copier

    try:
        copier.run_copy(
            snap.src_path,
            dst,
            data=data,
            vcs_ref=snap.tag,
            defaults=True,
            overwrite=True,
            quiet=True,
            unsafe=False,
            skip_tasks=True,
        )
    except template_store.copier_errors() as exc:  # one clear line, no traceback
        raise AgentgenError(
            f"copier could not render template revision {snap.tag}: {exc}",
            source=str(template_store.store_path()),
        ) from None
    template_store.record_source(dst / ANSWERS)
    return {
        p.relative_to(dst).as_posix(): p.read_bytes()
        for p in sorted(dst.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(dst).parts
    }


def _merge(ours: bytes, base: bytes, theirs: bytes, tmp: Path) -> tuple[bytes, bool]:
    """3-way merge with `git merge-file`: (merged bytes, clean?)."""
    paths = []
    for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
        path = tmp / name
        path.write_bytes(data)
        paths.append(str(path))
    labels = ["-L", "yours", "-L", "old template", "-L", "new template"]
    done = subprocess.run(
        ["git", "merge-file", "-p", *labels, *paths], capture_output=True, check=False
    )
    if done.returncode < 0 or done.returncode > MERGE_FILE_MAX_CONFLICTS:
        raise AgentgenError(f"git merge-file failed: {done.stderr.decode(errors='replace')}")
    return done.stdout, done.returncode == 0


@dataclass
class _Outcome:
    """What an update did, file by file (paths relative to the project)."""

    changed: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    beside: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def _check_updatable(root: Path) -> Path:
    """The project's copier answers file; refuse a project without one, outside git, or
    with uncommitted changes."""
    answers_file = root / ANSWERS
    if not answers_file.is_file():
        raise AgentgenError(
            "no .copier-answers.yml: cannot tell which template made this project", source=str(root)
        )
    _git(root, "rev-parse", "--show-toplevel")
    dirty = _status(root)
    if dirty:
        raise AgentgenError(
            f"the project has uncommitted changes ({', '.join(dirty[:SHOWN])}"
            f"{', ...' if len(dirty) > SHOWN else ''})",
            source=str(root),
            hint="commit or stash them first, so the update can be reviewed and undone",
        )
    return answers_file


def run_update(project_dir: Path) -> int:
    proj = project.find_project(project_dir)
    root = proj.root
    answers_file = _check_updatable(root)
    recorded = _read_answers(answers_file)
    role = proj.source["role"]
    version = project.agentgen_version()
    old_snap = template_store.ensure_revision(role, recorded["_commit"], version)
    new_snap = template_store.snapshot(role, version)
    old_data = {k: v for k, v in recorded.items() if not str(k).startswith("_")}
    # The new answers follow the manifest as it is now (title, summary, version).
    new_data = copier_answers(
        inputs.load_manifest(proj.manifest_path),
        role=role,
        package=proj.package,
        transport=proj.source["transport"],
        manifest_file=proj.source["manifest"]["path"],
    )
    outcome = _Outcome()
    with tempfile.TemporaryDirectory(prefix="agentgen-update-") as tmp_dir:
        tmp = Path(tmp_dir)
        old = _render(old_snap, old_data, tmp / "old")
        new = _render(new_snap, new_data, tmp / "new")
        for rel in sorted(set(old) | set(new)):
            base, theirs = old.get(rel), new.get(rel)
            if base == theirs:
                continue  # the template (and its answers) did not change this file
            _apply(root, rel, base, theirs, tmp, outcome)
    return _report(outcome)


def _apply(
    root: Path, rel: str, base: bytes | None, theirs: bytes | None, tmp: Path, outcome: _Outcome
) -> None:
    """Bring one file the template changed (old render `base`, new `theirs`) into the
    project, recording what was done in `outcome`."""
    path = root / rel
    ours = path.read_bytes() if path.is_file() else None
    if rel == ANSWERS:  # copier's bookkeeping ("do not edit"): the new one
        if theirs is not None and ours != theirs:
            write_atomic(path, theirs)
            outcome.changed.append(rel)
        return
    if user_owned(rel):
        if theirs is not None and ours != theirs:
            write_atomic(path.with_name(path.name + BESIDE), theirs)
            outcome.beside.append(rel)
        return
    if theirs is None:  # the template dropped the file
        _apply_dropped(path, rel, ours, base, outcome)
        return
    if ours is None:
        if base is None:  # a file the template added
            write_atomic(path, theirs)
            outcome.changed.append(rel)
        return  # the user deleted it: stays deleted
    _apply_merge(path, rel, ours, base, theirs, tmp, outcome)


def _apply_dropped(
    path: Path, rel: str, ours: bytes | None, base: bytes | None, outcome: _Outcome
) -> None:
    """A file the template no longer has: removed if the user did not change it, else kept."""
    if ours is not None and ours == base:
        path.unlink()
        outcome.changed.append(rel)
    elif ours is not None:
        outcome.kept.append(rel)


def _apply_merge(
    path: Path,
    rel: str,
    ours: bytes,
    base: bytes | None,
    theirs: bytes,
    tmp: Path,
    outcome: _Outcome,
) -> None:
    """The new template text, merged with the user's changes since the old one."""
    if ours == theirs:
        return
    if base is None or ours == base:
        merged, clean = theirs, True
    else:
        merged, clean = _merge(ours, base, theirs, tmp)
    write_atomic(path, merged)
    outcome.changed.append(rel)
    if not clean:
        outcome.conflicts.append(rel)


def _report(outcome: _Outcome) -> int:
    """Print what the update did; exit code 1 when a file has conflict markers."""
    for rel in outcome.changed:
        print(f"updated {rel}")
    for rel in outcome.kept:
        print(f"kept {rel}: the template no longer has it, and you changed it")
    for rel in outcome.beside:
        print(
            f"template changed {rel}: your file is unchanged (agentgen never rewrites it); "
            f"the new template text is in {rel}{BESIDE}"
        )
    if outcome.conflicts:
        print(f"\n{len(outcome.conflicts)} file(s) need your hand (conflict markers):")
        for rel in outcome.conflicts:
            print(f"conflict: {rel}")
        return 1
    if not (outcome.changed or outcome.beside or outcome.kept):
        print("the project already matches the template")
    return 0
