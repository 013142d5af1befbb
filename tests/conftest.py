"""Shared fixtures. Keep additions small; one fixture per shared input."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = (REPO / ".." / "shared").resolve()
SCHEMAS_LOCK = REPO / "tests" / "schemas.lock.json"

# One schema cache for the whole run (all xdist workers, tests that move HOME): every
# locked schema is fetched with `npm pack` at most once per checkout.
os.environ.setdefault("AGENTGEN_CACHE_DIR", str(REPO / ".cache" / "agentgen"))
# Agents the tests start keep their sessions in a throwaway file (one per worker), not in
# the user's ~/.local/state; a test that restarts an agent on its own store sets its own.
os.environ.setdefault(
    "ACP_SESSION_DB", str(Path(tempfile.mkdtemp(prefix="agentgen-sessions-")) / "sessions.db")
)


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def upstream_schemas() -> Path:
    """The upstream ACP schemas the tests use, laid out as `<rev>/schema[.unstable].json`.

    Each file is the one `tests/schemas.lock.json` pins (npm package, version, path,
    sha256), fetched through agentgen's own npm source and cached; `../shared/acp/<rel>`
    is read instead only when present with the locked sha256. Upstream publishes no
    meta.json on npm: tests read method names from the schema's x-method/x-side.
    """
    from generator import sources
    from generator.files import write_atomic

    root = Path(sources.cache_dir()) / "test-schemas"
    lock = sources.read_lock_file(SCHEMAS_LOCK)
    for rel, raw_entry in sorted(lock.items()):
        entry = sources.check_lock_entry(raw_entry, str(SCHEMAS_LOCK), f"/{rel}")
        dest = root / rel
        if _sha256(dest) == entry["sha256"]:
            continue
        shortcut = SHARED / "acp" / rel
        if _sha256(shortcut) == entry["sha256"]:
            raw = shortcut.read_bytes()
        else:
            raw = sources.fetch_locked(entry, str(SCHEMAS_LOCK))
        write_atomic(dest, raw)
    return root


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_acp() -> Path:
    """The upstream ACP schemas (read-only, never copied into the repo)."""
    return upstream_schemas()


@pytest.fixture(scope="session")
def shared_agntcy() -> Path:
    """The two real AGNTCY manifests (published in AGNTCY's git repositories, not in any
    package registry: read from ../shared/agntcy when present, else the test is skipped
    with the reason shown)."""
    path = SHARED / "agntcy"
    if not path.is_dir():
        pytest.skip(f"AGNTCY example manifests not found at {path} (not in any registry)")
    return path


@pytest.fixture(scope="session")
def acpbench() -> Path:
    """The lab's stdio load driver (../shared/tools/acpbench.py), when present."""
    path = SHARED / "tools" / "acpbench.py"
    if not path.is_file():
        pytest.skip(f"the acpbench load driver is not at {path}")
    return path
