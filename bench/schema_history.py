"""Measure: which historical ACP schema revisions still give numbered class names.

Reads the git history of an upstream checkout the user gives (nothing is downloaded, and
nothing read is written anywhere but the optional --out report):

    .venv/bin/python bench/schema_history.py /path/to/agent-client-protocol[.git] ...

Every distinct blob of a `schema*.json` file (any folder) in the history of each
repository is generated into models once; the report lists, per revision, the classes
whose name is numbered (`ContentBlock1`) and the tagged unions without a catch-all.
Exit status 1 when any revision has a numbered class name.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentgen.errors import AgentgenError  # noqa: E402
from agentgen.protocol.models import generate_models  # noqa: E402
from agentgen.protocol.normalize import TAGGED_UNION, normalize  # noqa: E402

from tests.numbered import numbered_classes  # noqa: E402

_SCHEMA_FILE = re.compile(r"(^|/)schema(\.[a-z]+)?\.json$")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def revisions(repo: Path) -> list[tuple[str, str, str]]:
    """(blob, commit, path) of every distinct schema blob, oldest first."""
    seen: dict[str, tuple[str, str]] = {}
    log = _git(repo, "log", "--all", "--reverse", "--format=C %H", "--raw", "--no-abbrev")
    commit = ""
    for line in log.splitlines():
        if line.startswith("C "):
            commit = line[2:]
        elif line.startswith(":"):
            meta, _, path = line.partition("\t")
            fields = meta.split()
            blob, status = fields[3], fields[4]
            path = path.split("\t")[-1]
            if status.startswith("D") or not _SCHEMA_FILE.search(path):
                continue
            seen.setdefault(blob, (commit, path))
    return [(b, c, p) for b, (c, p) in seen.items()]


def open_unions(schema: dict) -> list[str]:
    """Definitions that look like tagged unions (members with a string const on one
    property) but got no catch-all from normalize."""
    from agentgen.protocol.normalize import _member_tag, union_key

    norm = normalize(schema)
    defs = norm.get("$defs", {})
    out = []
    for name, node in defs.items():
        if not isinstance(node, dict) or TAGGED_UNION in node:
            continue
        key = union_key(node)
        if key is None:
            continue
        tags = [_member_tag(defs, m) for m in node[key]]
        if sum(t is not None for t in tags) > 1:
            out.append(name)
    return sorted(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repos", nargs="+", type=Path, help="git directories (or work trees)")
    ap.add_argument("--out", type=Path, help="write the JSON report here")
    ap.add_argument("--limit", type=int, default=0, help="only the first N revisions")
    args = ap.parse_args()
    report = []
    seen_blobs: set[str] = set()
    for repo in args.repos:
        git_dir = repo / ".git" if (repo / ".git").exists() else repo
        for blob, commit, path in revisions(git_dir):
            if blob in seen_blobs:
                continue
            seen_blobs.add(blob)
            if args.limit and len(report) >= args.limit:
                break
            text = _git(git_dir, "cat-file", "-p", blob)
            entry: dict = {"repo": str(repo), "commit": commit[:12], "path": path, "blob": blob}
            try:
                schema = json.loads(text)
                code = generate_models(schema, source_label=f"{commit[:12]}:{path}")
                entry["numbered"] = numbered_classes(code, schema)
                entry["open"] = open_unions(schema)
            except (AgentgenError, ValueError) as err:
                entry["error"] = str(err)[:300]
            report.append(entry)
            flag = "ERR" if "error" in entry else len(entry.get("numbered", []))
            print(f"{commit[:12]} {path}: {flag} {entry.get('numbered', '')}", flush=True)
    bad = [e for e in report if e.get("numbered")]
    errors = [e for e in report if "error" in e]
    untagged = [e for e in report if e.get("open")]
    print(
        f"{len(report)} revisions: {len(bad)} with numbered class names, "
        f"{len(untagged)} with a tagged-looking union without a catch-all, {len(errors)} errors"
    )
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
