"""One revision's run: the catalogue, the selected checks one after the other (each on a
fresh peer), the observers over each transcript, and the results by requirement."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from . import agent_checks, http_checks  # noqa: F401 - register the checks
from .catalogue import Requirement, catalogue
from .engine import CHECKS, Check, CheckRun, Options, Shared, run_check, selected
from .observers import OBSERVED, observe
from .schema_link import Judge
from .transcript import Transcript
from .verdict import Result, Run

StartPeer = Callable[[Transcript], Awaitable[Any]]


def rows_for(judge: Judge, *, role: str, transport: str) -> dict[str, Requirement]:
    return {
        r.id: r
        for r in catalogue(judge.revision, role=role, transport=transport, batches=judge.batches)
    }


async def run_revision(
    judge: Judge,
    opts: Options,
    start_peer: StartPeer,
    *,
    role: str = "agent",
    transport: str = "stdio",
    target: str = "",
    keyword: str | None = None,
    jobs: int = 2,
) -> Run:
    started = time.monotonic()
    rows = rows_for(judge, role=role, transport=transport)
    checks = selected([c for c in CHECKS if c.role == role], rows, keyword)
    if keyword:
        # -k: the requirements of the checks chosen (observers ride along on each)
        chosen = {i for c in checks for i in c.ids} | set(OBSERVED)
        rows = {k: v for k, v in rows.items() if k in chosen}
    results = {
        rid: Result(rid, r.tier, r.capability, r.text, r.citation, judge.revision.protocol_version)
        for rid, r in rows.items()
    }
    shared = Shared()
    blocked: list[str] = []
    gate = asyncio.Semaphore(max(1, jobs))

    async def one(chk: Check) -> CheckRun:
        async with gate:
            return await run_check(chk, judge, rows, opts, shared, start_peer)

    # the first check (initialize) alone: what it learns, the others compare with
    done_all = [await one(checks[0])] if checks else []
    done_all += await asyncio.gather(*(one(c) for c in checks[1:]))
    for done in done_all:
        if done.blocked and done.blocked not in blocked:
            blocked.append(done.blocked)
        for outcome in [*done.outcomes, *observe(done, rows)]:
            if outcome.status.value == "FAIL":
                outcome.stderr = _stderr(done.transcript)
            results[outcome.requirement].outcomes.append(outcome)
    return Run(
        protocol=judge.revision.protocol_version,
        role=role,
        target=target,
        transport=transport,
        schema=judge.origin,
        results=list(results.values()),
        blocked=blocked,
        peer=shared.peer,
        seconds=time.monotonic() - started,
    )


def _stderr(transcript: Transcript, limit: int = 20_000) -> str:
    data = b"".join(f.data for f in transcript.frames if f.direction == "err")
    return data[-limit:].decode("utf-8", "replace")
