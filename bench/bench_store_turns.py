"""What keeping a small turn costs, the SQLite store alone (issue 40's profile): CPU µs a
turn of ``save_turn`` at 1 and 8 sessions (8: the turns of all eight end together and
share one group), for this tree's runtime and any others (``--runtime LABEL=TEMPLATES``),
interleaved round by round in fresh processes, medians; then the floor: SQLite's own
statements for the same rows, without the store's Python (``raw``: BEGIN IMMEDIATE,
PRAGMA data_version, the previous state row let go, the INSERT, COMMIT, as the store
does; ``raw, unindexed log``: the same rows appended to a table with no per-session
index, what a design writing the per-session index once per group of many turns would
pay on a turn's path).

    .venv/bin/python bench/bench_store_turns.py --runtime before=/tmp/old/templates [--rounds 7]
    .venv/bin/python bench/bench_store_turns.py --model [--runtime ...]   # a model agent's turns
    .venv/bin/python bench/bench_store_turns.py --postgres [--model] [--runtime ...]

``--model``: a model agent's turns instead of the echo agent's: the state holds the
model's history (two ~500-byte pydantic-ai-shaped messages a turn, the latest 400 kept,
as ``ACP_MODEL_HISTORY`` does), full from the first measured turn; 2000 turns a run.  ``--postgres``: the PostgreSQL store
on a private server (tests/cluster_support.py), a fresh database a run, 1000 turns a run;
its figure is wall µs a turn (the server's work is in another process), no raw rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TURNS = 8000
MODEL_TURNS = 2000
PG_TURNS = 1000


def frame(sid: str, kind: str, text: str) -> bytes:
    import orjson

    update = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    note = {"sessionId": sid, "update": update}
    return orjson.dumps({"jsonrpc": "2.0", "method": "session/update", "params": note})


def state(i: int) -> dict[str, Any]:
    """The echo agent's state (``session_store.stored_state``)."""
    return {
        "config_raw": {},
        "state": None,
        "turns": i,
        "mode": None,
        "cwd": "/",
        "updatedAt": "2026-12-06T17:00:00Z",
    }


MODEL_KEEP = 400


def model_message(i: int, role: str) -> dict[str, Any]:
    """About the shape and size of a pydantic-ai message dumped to JSON (~500 bytes)."""
    part = "user-prompt" if role == "request" else "text"
    return {
        "kind": role,
        "parts": [
            {"part_kind": part, "content": f"turn {i}: " + "words " * 40, "timestamp": "2026"}
        ],
        "usage": {"input_tokens": 120 + i, "output_tokens": 40, "details": {}},
        "model_name": "scripted",
        "timestamp": "2026-12-06T17:00:00.000000Z",
        "provider_response_id": f"chatcmpl-{i:08d}",
    }


def model_state(i: int, model: list[dict[str, Any]]) -> dict[str, Any]:
    """A model agent's state after turn ``i``: ``model`` grown by the turn's two messages
    and cut to the latest ``MODEL_KEEP``."""
    model += [model_message(i, "request"), model_message(i, "response")]
    del model[:-MODEL_KEEP]
    return {**state(i), "model_history": list(model)}


def sids(n: int) -> list[str]:
    return [f"0198f7c2-5d1e-7b3a-9c4d-{i:012d}" for i in range(n)]


async def store_run(n: int, model: bool = False) -> float:
    pg = os.environ.get("BENCH_PG_URL")
    if pg:
        from runtime.sessions.store_postgres import PostgresSessionStore

        st: Any = PostgresSessionStore(pg)
    else:
        from runtime.sessions.store_sqlite import SqliteSessionStore

        st = SqliteSessionStore(Path(tempfile.mkdtemp()) / "s.db")
    ids = sids(n)
    models: dict[str, list[dict[str, Any]]] = {s: [] for s in ids}
    for s in ids:
        await st.save(s, state(0))
    text = "a prompt of a few words"
    frames = {
        s: [frame(s, "user_message_chunk", text), frame(s, "agent_message_chunk", text)]
        for s in ids
    }
    turns = MODEL_TURNS if model else TURNS
    if pg:
        turns = PG_TURNS
    if model:  # the model's histories full before the measured turns
        for i in range(MODEL_KEEP // 2):
            for s in ids:
                await st.save_turn(s, model_state(i, models[s]), frames[s])
    states = [
        {s: model_state(i, models[s]) if model else state(i + 1) for s in ids}
        for i in range(turns // n)
    ]  # built before the clock starts: the store's work alone is measured
    clock = time.perf_counter if pg else time.process_time
    t0 = clock()
    for i in range(turns // n):
        if n == 1:
            await st.save_turn(ids[0], states[i][ids[0]], frames[ids[0]])
        else:
            await asyncio.gather(*(st.save_turn(s, states[i][s], frames[s]) for s in ids))
    spent = clock() - t0
    if pg:
        await st.aclose()
    else:
        st.close()
    return spent / turns * 1e6


def raw_run(n: int, indexed: bool) -> float:
    import sqlite3

    import orjson

    db = sqlite3.connect(Path(tempfile.mkdtemp()) / "s.db", isolation_level=None, timeout=0)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(
        "CREATE TABLE history (session_id TEXT NOT NULL, seq INTEGER PRIMARY KEY, "
        "message BLOB NOT NULL, turn INTEGER, size INTEGER, state BLOB, total INTEGER, "
        "parts INTEGER)"
    )
    if indexed:
        db.execute("CREATE INDEX history_by_session ON history (session_id, seq)")
    ids = sids(n)
    text = "a prompt of a few words"
    rows = {
        s: b"\n".join([frame(s, "user_message_chunk", text), frame(s, "agent_message_chunk", text)])
        for s in ids
    }
    prev = dict.fromkeys(ids, 0)
    t0 = time.process_time()
    for i in range(TURNS // n):
        db.execute("BEGIN IMMEDIATE")
        db.execute("PRAGMA data_version").fetchone()
        for s in ids:
            if indexed and prev[s]:
                db.execute("UPDATE history SET state = NULL WHERE seq = ?", (prev[s],))
            cur = db.execute(
                "INSERT INTO history (session_id, message, turn, size, state, total, parts) "
                "VALUES (?, ?, ?, ?, ?, ?, 2)",
                (s, rows[s], i, len(rows[s]), orjson.dumps(state(i)), i),
            )
            prev[s] = int(cur.lastrowid or 0)
        db.execute("COMMIT")
    return (time.process_time() - t0) / TURNS * 1e6


def child(kind: str, n: int, runtime: str) -> None:
    if kind in ("store", "model"):
        sys.path.insert(0, runtime)
        print(json.dumps(asyncio.run(store_run(n, kind == "model"))))
    else:
        print(json.dumps(raw_run(n, kind == "raw")))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", action="append", default=[], metavar="LABEL=TEMPLATES")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--model", action="store_true", help="a model agent's turns")
    ap.add_argument("--postgres", action="store_true", help="the PostgreSQL store")
    ap.add_argument("--child", nargs=3, metavar=("KIND", "N", "RUNTIME"))
    a = ap.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]), a.child[2])
        return
    kind = "model" if a.model else "store"
    rows = [(label, kind, path) for label, path in (r.split("=", 1) for r in a.runtime)]
    rows.append(("this tree", kind, str(HERE.parent / "templates")))
    if not a.model and not a.postgres:
        rows += [("raw", "raw", ""), ("raw, unindexed log", "log", "")]
    server = None
    if a.postgres:
        sys.path.insert(0, str(HERE.parent / "tests"))
        import cluster_support as cs

        server = cs.start_postgres()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=HERE,
        check=False,
    ).stdout.strip()
    print(
        f"bench_store_turns{' --postgres' if a.postgres else ''}{' --model' if a.model else ''}: "
        f"commit {commit}, "
        f"{PG_TURNS if a.postgres else MODEL_TURNS if a.model else TURNS} turns a run, "
        f"{a.rounds} interleaved "
        f"rounds, load average {os.getloadavg()[0]:.1f} before"
    )
    got: dict[tuple[str, int], list[float]] = {}
    try:
        for _ in range(a.rounds):
            for n in (1, 8):
                for label, kind, path in rows:
                    env = dict(os.environ)
                    if server is not None:
                        env["BENCH_PG_URL"] = cs.fresh_database(server)
                    argv = [sys.executable, __file__, "--child", kind, str(n), path or "-"]
                    out = subprocess.run(
                        argv, capture_output=True, text=True, check=True, env=env
                    ).stdout
                    got.setdefault((label, n), []).append(json.loads(out.strip().splitlines()[-1]))
    finally:
        if server is not None:
            server.stop()
    what = "wall" if a.postgres else "CPU"
    print(f"load average {os.getloadavg()[0]:.1f} after; {what} µs a turn, median (min-max)\n")
    print("| row | 1 session | 8 sessions |\n|---|---:|---:|")
    for label, _, _ in rows:
        cells = [
            f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"
            for v in (got[(label, 1)], got[(label, 8)])
        ]
        print(f"| {label} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
