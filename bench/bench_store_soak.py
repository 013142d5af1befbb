"""Soak: disk and memory per session of the session stores, and their bounds holding.

Drives the runtime's stores directly (templates/runtime/sessions/store.py, store_sqlite.py), the way the runtime
does: each turn is one ``save_turn`` of the prompt (a user_message_chunk) and its echo
(an agent_message_chunk).  For the memory store it prints the bytes it holds and the
process RSS; for SQLite the file size (database + WAL) after a checkpoint, per session,
then after deleting every session.  Each store runs in a fresh process.

    .venv/bin/python bench/bench_store_soak.py [--sessions 64] [--turns 400] [--size 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "templates"))


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def frames(sid: str, i: int, size: int) -> list[bytes]:
    import orjson

    text = f"{sid}:{i}:" + os.urandom(size // 2).hex()
    out = []
    for kind in ("user_message_chunk", "agent_message_chunk"):
        update = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
        note = {"sessionId": sid, "update": update}
        out.append(orjson.dumps({"jsonrpc": "2.0", "method": "session/update", "params": note}))
    return out


async def soak(kind: str, sessions: int, turns: int, size: int, tmp: str) -> None:
    from runtime.sessions.store import MemorySessionStore
    from runtime.sessions.store_sqlite import SqliteSessionStore

    base = rss_mb()
    path = Path(tmp) / "s.db"
    store = MemorySessionStore() if kind == "memory" else SqliteSessionStore(path)
    t0 = time.perf_counter()
    sids = [f"s{i}" for i in range(sessions)]
    for sid in sids:
        await store.save(sid, {"turns": 0})
    for i in range(turns):
        await asyncio.gather(
            *(store.save_turn(sid, {"turns": i + 1}, frames(sid, i, size)) for sid in sids)
        )
    wall = time.perf_counter() - t0
    written = sessions * turns * 2 * (size + 150)
    line = f"{kind:<7} {sessions} sessions x {turns} turns x 2 x {size} B ({written / 1e6:.0f} MB written) in {wall:.1f} s: "
    if isinstance(store, MemorySessionStore):
        held = store.bytes_held
        line += (
            f"holds {held / 1e6:.1f} MB (bound {(store.max_bytes or 0) / 1e6:.0f} MB), "
            f"{held / sessions / 1e3:.0f} KB/session kept; RSS +{rss_mb() - base:.0f} MB"
        )
    else:
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        disk = sum(p.stat().st_size for p in Path(tmp).iterdir())
        (kept,) = store._db.execute(  # counted in SQL: history() would load it all
            "SELECT count(DISTINCT turn) FROM history WHERE session_id = ?", (sids[-1],)
        ).fetchone()
        line += (
            f"file {disk / 1e6:.1f} MB, {disk / sessions / 1e6:.2f} MB/session "
            f"({kept} of {turns} turns kept, bound {(store.max_history_bytes or 0) / 1e6:.0f} MB/session); "
            f"RSS +{rss_mb() - base:.0f} MB"
        )
        for sid in sids:
            await store.delete(sid)
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        after = sum(p.stat().st_size for p in Path(tmp).iterdir())
        line += f"; after deleting every session: {after / 1e6:.2f} MB"
        store.close()
    print(line, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--size", type=int, default=20_000, help="bytes of text per prompt")
    ap.add_argument("--store", choices=["memory", "sqlite"])
    opts = ap.parse_args()
    if opts.store is None:  # each store in a fresh process (RSS)
        env = {**os.environ}
        print(
            "bounds: ACP_MEMORY_MAX_BYTES="
            f"{env.get('ACP_MEMORY_MAX_BYTES', 'default')}, ACP_HISTORY_MAX_BYTES="
            f"{env.get('ACP_HISTORY_MAX_BYTES', 'default')}"
        )
        for kind in ("memory", "sqlite"):
            args = ["--sessions", str(opts.sessions), "--turns", str(opts.turns)]
            args += ["--size", str(opts.size), "--store", kind]
            subprocess.run([sys.executable, __file__, *args], check=True, env=env)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(soak(opts.store, opts.sessions, opts.turns, opts.size, tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
