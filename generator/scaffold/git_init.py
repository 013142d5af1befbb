"""`agentgen new`'s last step: make the project a git work tree with a first commit.

`agentgen update` merges template changes through git and refuses uncommitted work, so
a project that starts committed can be updated at once. Nothing here is fatal: the
project is complete without git, and every outcome is one line for the user.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

# when the user has no git identity: the commit is agentgen's, say so
FALLBACK_IDENTITY = ("-c", "user.name=agentgen", "-c", "user.email=agentgen@localhost")


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120
    )


def _said(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {done.returncode}"


def first_commit(target: Path, message: str) -> str:
    """`git init` + add + commit in `target`; returns the line to print."""
    if shutil.which("git") is None:
        return (
            "git: not found; the project is not under version control (`agentgen update` needs it)"
        )
    inside = _git(target.parent, "rev-parse", "--show-toplevel")
    if inside.returncode == 0:
        top = inside.stdout.strip()
        return f"git: inside the work tree {top}; not making a repository in it (commit it there)"
    made = _git(target, "init", "-q")
    if made.returncode != 0:
        return f"git: init failed: {_said(made)}"
    added = _git(target, "add", "-A")
    if added.returncode != 0:
        return f"git: add failed: {_said(added)}"
    committed = _git(target, "commit", "-q", "-m", message)
    who = ""
    if committed.returncode != 0 and _git(target, "config", "user.email").returncode != 0:
        committed = _git(target, *FALLBACK_IDENTITY, "commit", "-q", "-m", message)
        who = " as agentgen <agentgen@localhost> (no git identity is configured)"
    if committed.returncode != 0:
        return f"git: repository made, files staged; the commit failed: {_said(committed)}"
    head = _git(target, "rev-parse", "--short", "HEAD").stdout.strip()
    return f"git: repository made, first commit {head}{who}"
