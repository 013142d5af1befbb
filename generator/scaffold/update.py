"""`agentgen update`: apply template changes with copier's 3-way merge.

copier exits 0 even when it leaves conflict markers (or `.rej` files), so every file
the update touched is scanned; any conflict exits 1 naming the files. The project
must be a clean git work tree: copier needs git to merge, and the user needs git to
see (and undo) what the update did.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..errors import AgentgenError
from . import inputs, project, template_store
from .new import copier_answers

_MARKERS = (b"<<<<<<< ", b">>>>>>> ")


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


def conflicted_files(root: Path, candidates: list[str]) -> list[str]:
    """Files holding conflict markers or `.rej` leftovers, and unmerged index entries."""
    found: set[str] = set()
    for rel in candidates:
        path = root / rel
        if rel.endswith(".rej"):
            found.add(rel)
            continue
        if not path.is_file():
            continue
        with path.open("rb") as fh:
            if any(line.startswith(_MARKERS) for line in fh):
                found.add(rel)
    unmerged = _git(root, "diff", "--name-only", "--diff-filter=U", "--relative", "--", ".")
    found |= {line for line in unmerged.splitlines() if line}
    return sorted(found)


def _recorded_src(answers: Path) -> str | None:
    for line in answers.read_text(encoding="utf-8").splitlines():
        if line.startswith("_src_path:"):
            value = line.split(":", 1)[1].strip()
            return value.strip("'\"")
    return None


def run_update(project_dir: Path) -> int:
    import copier

    proj = project.find_project(project_dir)
    root = proj.root
    answers = root / ".copier-answers.yml"
    if not answers.is_file():
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
    # The answers follow the manifest as it is now (title, summary, version).
    data = copier_answers(
        inputs.load_manifest(proj.manifest_path),
        role=proj.source["role"],
        package=proj.package,
        transport=proj.source["transport"],
        manifest_file=proj.source["manifest"]["path"],
    )
    snap = template_store.snapshot(proj.source["role"], project.agentgen_version())
    recorded = _recorded_src(answers)
    if recorded != snap.src_path:
        raise AgentgenError(
            f"the project was made from the template store {recorded!r}, "
            f"agentgen now uses {snap.src_path!r}",
            source=str(answers),
            hint="set AGENTGEN_TEMPLATE_STORE to the recorded store",
        )
    try:
        copier.run_update(
            root,
            data=data,
            vcs_ref=snap.tag,
            defaults=True,
            overwrite=True,
            quiet=True,
            unsafe=False,
            skip_tasks=True,
            conflict="inline",
        )
    except template_store.copier_errors() as exc:  # one clear line, no traceback
        raise AgentgenError(
            f"copier update failed: {exc}",
            source=str(root),
            hint="the template revision recorded in .copier-answers.yml must be in the "
            f"template store ({template_store.store_path()})",
        ) from None
    changed = _status(root)
    conflicts = conflicted_files(root, changed)
    for rel in changed:
        print(f"updated {rel}")
    if conflicts:
        print(f"\n{len(conflicts)} file(s) need your hand (conflict markers or rejected hunks):")
        for rel in conflicts:
            print(f"conflict: {rel}")
        return 1
    if not changed:
        print("the project already matches the template")
    return 0
