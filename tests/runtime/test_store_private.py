"""The SQLite session store is its owner's alone (issue 37 item 9): it holds the
conversation and the contents of the files the agent read, and was 0644 in a 0755 folder.
Created 0600 in 0700 folders whatever the umask, the -wal and -shm files alike; what
exists already keeps its mode."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime.sessions.session_store import open_default_store


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o000, 0o277], ids=["umask022", "umask000", "umask277"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _write_one(store: object) -> None:
    async def go() -> None:
        await store.save("s", {"turns": 1})  # type: ignore[attr-defined]
        await store.append_history("s", [b'{"a": 1}'])  # type: ignore[attr-defined]

    asyncio.run(go())


@pytest.mark.parametrize("deferred", [False, True])
def test_the_default_store_is_made_private_whatever_the_umask(
    umask: int, deferred: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ACP_SESSION_STORE", "ACP_SESSION_DB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    store = open_default_store("my-agent", deferred=deferred)
    _write_one(store)
    folder = tmp_path / "state" / "my-agent"
    db = folder / "sessions.db"
    try:
        files = [db, *(Path(f"{db}{end}") for end in ("-wal", "-shm"))]
        assert all(f.exists() for f in files), sorted(os.listdir(folder))
        assert {f.name: _mode(f) for f in files} == {f.name: 0o600 for f in files}
        assert _mode(folder) == 0o700 and _mode(tmp_path / "state") == 0o700
    finally:
        store.close()  # type: ignore[attr-defined]


def test_an_existing_store_and_folder_keep_their_modes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o750)
    db = folder / "team.db"
    db.touch()
    db.chmod(0o640)
    monkeypatch.setenv("ACP_SESSION_DB", str(db))
    monkeypatch.delenv("ACP_SESSION_STORE", raising=False)
    store = open_default_store("my-agent")
    _write_one(store)
    try:
        assert _mode(folder) == 0o750 and _mode(db) == 0o640
    finally:
        store.close()  # type: ignore[attr-defined]
