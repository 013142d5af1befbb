"""Shared fixtures. Keep additions small; one fixture per shared input."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = (REPO / ".." / "shared").resolve()

# One schema cache for the whole run (all xdist workers, tests that move HOME): the
# locked default schema is fetched with `npm pack` at most once per checkout.
os.environ.setdefault("AGENTGEN_CACHE_DIR", str(REPO / ".cache" / "agentgen"))
# Agents the tests start keep their sessions in a throwaway file (one per worker), not in
# the user's ~/.local/state; a test that restarts an agent on its own store sets its own.
os.environ.setdefault(
    "ACP_SESSION_DB", str(Path(tempfile.mkdtemp(prefix="agentgen-sessions-")) / "sessions.db")
)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_acp() -> Path:
    """The upstream ACP schemas (read-only, never copied into the repo)."""
    path = SHARED / "acp"
    assert path.is_dir(), f"upstream schemas not found at {path}"
    return path


@pytest.fixture(scope="session")
def shared_agntcy() -> Path:
    """The two real AGNTCY manifests."""
    path = SHARED / "agntcy"
    assert path.is_dir(), f"AGNTCY manifests not found at {path}"
    return path
