"""Store growth of one long model session (issue 36, item 1): is the store's size
proportional to what it keeps, not to the number of turns?

Drives the runtime's store directly, as the runtime does for a model agent: each turn is
one ``save_turn`` of the prompt and the answer (a user_message_chunk, an
agent_message_chunk) with the session's state holding the model's history (two
pydantic-ai-like messages a turn, about 500 bytes each, at most 400 kept, as
``ACP_MODEL_HISTORY`` does).  Phase 1: ``--turns`` short turns; it prints the store file
(database, and WAL) against the bytes the store counts (history rows kept plus the state).
Phase 2: one turn with a ``--big`` bytes tool result (in the turn's frames and in the model
history, as an MCP result is), then 10 more short turns: what those 10 add to the file.

    .venv/bin/python bench/bench_store_growth.py                   # this tree's runtime
    .venv/bin/python bench/bench_store_growth.py --runtime /tmp/old/templates   # another's
    .venv/bin/python bench/bench_store_growth.py --postgres        # also PostgreSQL (private)

Each store runs in a fresh process.  Sizes: SQLite's file after the store is closed (its
WAL checkpointed into it) and the WAL's largest size seen; PostgreSQL's
``pg_total_relation_size`` of the store's tables (``acp_sessions``, ``acp_history`` and,
from schema 4, ``acp_model_messages``) after a ``VACUUM`` (autovacuum's work, done at
once), and without it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODEL_KEEP = 400


def frame(sid: str, kind: str, text: str) -> bytes:
    import orjson

    update = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    note = {"sessionId": sid, "update": update}
    return orjson.dumps({"jsonrpc": "2.0", "method": "session/update", "params": note})


def model_message(i: int, role: str, text: str) -> dict[str, Any]:
    """About the shape and size of a pydantic-ai message dumped to JSON."""
    part = "user-prompt" if role == "request" else "text"
    return {
        "kind": role,
        "parts": [{"part_kind": part, "content": text, "timestamp": "2026-12-06T17:00:00Z"}],
        "instructions": None,
        "usage": {"input_tokens": 120 + i, "output_tokens": 40, "details": {}},
        "model_name": "scripted",
        "timestamp": "2026-12-06T17:00:00.000000Z",
        "provider_name": "openai",
        "provider_response_id": f"chatcmpl-{i:08d}",
        "finish_reason": "stop",
    }


class Session:
    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.turns = 0
        self.model: list[dict[str, Any]] = []

    def turn(self, prompt: str, answer: str) -> tuple[dict[str, Any], list[bytes]]:
        self.turns += 1
        self.model += [
            model_message(self.turns, "request", prompt),
            model_message(self.turns, "response", answer),
        ]
        del self.model[:-MODEL_KEEP]
        state = {"turns": self.turns, "mode": "code", "model_history": self.model}
        frames = [
            frame(self.sid, "user_message_chunk", prompt),
            frame(self.sid, "agent_message_chunk", answer),
        ]
        return state, frames


def big_result(size: int) -> str:
    """An MCP tool's result of ``size`` bytes that does not compress (PostgreSQL's TOAST
    compresses a repeated character to nothing): in the turn's frames and the model
    history."""
    return os.urandom(size // 2).hex()


def written() -> int:
    """Bytes this process wrote (``/proc/self/io``'s ``wchar``, every thread's); 0 where
    there is no such file."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def short(i: int) -> tuple[str, str]:
    return f"turn {i}: what is in src/app.py line {i}?", f"Line {i} defines handler_{i}()." * 3


async def run_sqlite(turns: int, big: int) -> dict[str, float]:
    from runtime.sessions.store_sqlite import SqliteSessionStore

    tmp = tempfile.mkdtemp()
    path = Path(tmp) / "s.db"
    wal = Path(str(path) + "-wal")
    store = SqliteSessionStore(path)
    s = Session("s")
    await store.save("s", {"turns": 0, "mode": "code", "model_history": []})
    wal_peak = 0
    cpu, wall, wrote = time.process_time(), time.perf_counter(), written()
    for i in range(turns):
        state, frames = s.turn(*short(i))
        await store.save_turn("s", state, frames)
        wal_peak = max(wal_peak, wal.stat().st_size if wal.exists() else 0)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    wrote = written() - wrote
    counted = sum(map(len, await store.history("s")))
    import orjson

    state_bytes = len(orjson.dumps(state))
    store.close()
    out = {"file": path.stat().st_size, "history": counted, "state": state_bytes}
    out["wal_peak"] = wal_peak
    out["turn_cpu_us"] = cpu / turns * 1e6
    out["turn_wall_us"] = wall / turns * 1e6
    out["turn_written"] = wrote / turns
    store = SqliteSessionStore(path)
    state, frames = s.turn("read the big file", big_result(big))
    await store.save_turn("s", state, frames)
    store.close()
    out["after_big"] = path.stat().st_size
    store = SqliteSessionStore(path)
    wrote = written()
    for i in range(10):
        state, frames = s.turn(*short(turns + i))
        await store.save_turn("s", state, frames)
        wal_peak = max(wal_peak, wal.stat().st_size if wal.exists() else 0)
    store.close()
    out["after_10_written"] = written() - wrote  # the WAL, and the checkpoint at close
    out["after_10"] = path.stat().st_size
    out["wal_peak"] = wal_peak
    return out


async def run_postgres(turns: int, big: int) -> dict[str, float]:
    sys.path.insert(0, str(HERE.parent / "tests"))
    import cluster_support as cs
    import psycopg
    from runtime.sessions.store_postgres import PostgresSessionStore

    server = cs.start_postgres()
    try:
        url = cs.fresh_database(server)
        store = PostgresSessionStore(url)
        s = Session("s")
        await store.save("s", {"turns": 0, "mode": "code", "model_history": []})

        async def size(vacuum: bool) -> int:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as c:
                cur = await c.execute(
                    "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname IN "
                    "('acp_sessions', 'acp_history', 'acp_model_messages')"
                )
                tables = [str(r[0]) for r in await cur.fetchall()]
                if vacuum:
                    await c.execute(f"VACUUM {', '.join(tables)}")  # type: ignore[arg-type]
                cur = await c.execute(
                    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                    "WHERE c.relname = ANY(%s)",
                    (tables,),
                )
                row = await cur.fetchone()
                return int(row[0]) if row else 0

        async def lsn() -> int:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as c:
                cur = await c.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
                row = await cur.fetchone()
                return int(row[0]) if row else 0

        wal, wall = await lsn(), time.perf_counter()
        for i in range(turns):
            state, frames = s.turn(*short(i))
            await store.save_turn("s", state, frames)
        wall = time.perf_counter() - wall
        wal = await lsn() - wal
        import orjson

        out: dict[str, float] = {
            "history": sum(map(len, await store.history("s"))),
            "state": len(orjson.dumps(state)),
            "file_novacuum": await size(False),
            "file": await size(True),
            "turn_wall_us": wall / turns * 1e6,
            "turn_wal": wal / turns,  # the server's WAL bytes a turn
        }
        state, frames = s.turn("read the big file", big_result(big))
        await store.save_turn("s", state, frames)
        out["after_big"] = await size(True)
        wal = await lsn()
        for i in range(10):
            state, frames = s.turn(*short(turns + i))
            await store.save_turn("s", state, frames)
        out["after_10_wal"] = await lsn() - wal
        out["after_10_novacuum"] = await size(False)
        out["after_10"] = await size(True)
        await store.aclose()
        return out
    finally:
        server.stop()


def child(kind: str, turns: int, big: int, runtime: str) -> None:
    sys.path.insert(0, runtime)
    run = run_sqlite if kind == "sqlite" else run_postgres
    out = asyncio.run(run(turns, big))
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=230)
    ap.add_argument("--big", type=int, default=5_000_000)
    ap.add_argument("--runtime", default=str(HERE.parent / "templates"))
    ap.add_argument("--postgres", action="store_true")
    ap.add_argument("--child", default="")
    a = ap.parse_args()
    if a.child:
        child(a.child, a.turns, a.big, a.runtime)
        return
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=HERE,
        check=False,
    ).stdout.strip()
    print(
        f"bench_store_growth: commit {commit}, runtime {a.runtime}, {a.turns} turns, "
        f"big {a.big} bytes"
    )
    for kind in ["sqlite", *(["postgres"] if a.postgres else [])]:
        argv = [
            sys.executable,
            __file__,
            "--child",
            kind,
            "--turns",
            str(a.turns),
            "--big",
            str(a.big),
            "--runtime",
            a.runtime,
        ]
        res = subprocess.run(argv, capture_output=True, text=True, env=os.environ, check=False)
        if res.returncode:
            print(kind, "failed:", res.stderr[-2000:])
            continue
        r = json.loads(res.stdout.strip().splitlines()[-1])
        counted = r["history"] + r["state"]
        mb = 1e6
        print(
            f"| {kind} | {r['history'] / 1e3:.0f} KB + {r['state'] / 1e3:.0f} KB "
            f"| {r['file'] / mb:.2f} MB | {r['file'] / counted:.2f}x "
            f"| {(r['after_10'] - r['after_big']) / mb:+.2f} MB | {r['after_10'] / mb:.2f} MB |"
        )
        per_turn = (
            f"a turn of phase 1: {r['turn_wall_us']:.0f} µs wall"
            + (f", {r['turn_cpu_us']:.0f} µs CPU" if "turn_cpu_us" in r else "")
            + (f", {r['turn_written'] / 1e3:.1f} KB written" if "turn_written" in r else "")
            + (f", {r['turn_wal'] / 1e3:.1f} KB of server WAL" if "turn_wal" in r else "")
        )
        after = r.get("after_10_written", r.get("after_10_wal"))
        if after is not None:
            per_turn += f"; the 10 turns after the big one wrote {after / mb:.2f} MB"
        print("  ", per_turn)
        print("  ", {k: v for k, v in r.items()})


if __name__ == "__main__":
    main()
