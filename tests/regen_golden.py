"""Regenerate the golden projects in `generated/projects/` from our example manifests.

    python tests/regen_golden.py            # rewrite them
    python tests/regen_golden.py --check    # exit 1 if any differs (what the drift test does)

Each case is `agentgen new` on one example manifest with agentgen's default (locked)
schema. The template store is a temporary one reached through a temporary HOME
(`.copier-answers.yml` records `_src_path: acp-agentgen`, never a store's path).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "generated" / "projects"


@dataclass(frozen=True)
class Case:
    example: str  # examples/<example>/agent.yaml
    role: str
    transport: str

    @property
    def name(self) -> str:
        return f"{self.example}-{self.role}-{self.transport}"

    @property
    def manifest(self) -> Path:
        return REPO / "examples" / self.example / "agent.yaml"


def cases() -> list[Case]:
    examples = sorted(p.parent.name for p in (REPO / "examples").glob("*/agent.yaml"))
    out = [Case(e, "agent", "stdio") for e in examples]
    if "echo" in examples:
        out += [
            Case("echo", "agent", "http"),
            Case("echo", "client", "stdio"),
            Case("echo", "client", "http"),
        ]
    return out


@contextlib.contextmanager
def isolated_env(home: Path) -> Iterator[None]:
    saved = dict(os.environ)
    for key in ("XDG_CACHE_HOME", "AGENTGEN_TEMPLATE_STORE", "AGENTGEN_TEMPLATES"):
        os.environ.pop(key, None)
    os.environ["HOME"] = str(home)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def build(case: Case, dest: Path) -> None:
    """`agentgen new` for one case into `dest` (which must not exist)."""
    import io
    from contextlib import redirect_stdout

    from generator.scaffold.new import run_new

    with redirect_stdout(io.StringIO()):
        run_new(dest, manifest=case.manifest, role=case.role, transport=case.transport)


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, isolated_env(Path(tmp) / "home"):
        for case in cases():
            built = Path(tmp) / case.name
            build(case, built)
            golden = GOLDEN / case.name
            if check:
                have = tree(golden) if golden.is_dir() else {}
                want = tree(built)
                diff = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
                stale += [f"{case.name}/{k}" for k in diff]
            else:
                if golden.exists():
                    shutil.rmtree(golden)
                golden.parent.mkdir(parents=True, exist_ok=True)
                shutil.copytree(built, golden)
                print(f"wrote {golden.relative_to(REPO)}")
        if not check:
            known = {c.name for c in cases()}
            for old in sorted(GOLDEN.glob("*")) if GOLDEN.is_dir() else []:
                if old.is_dir() and old.name not in known:
                    shutil.rmtree(old)
                    print(f"removed {old.relative_to(REPO)}")
    for line in stale:
        print(f"stale: generated/projects/{line}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
