"""Shared by the conformance kit's tests: the judges of the test schemas (models rendered
once per session into a temporary cache), one kit run in process, and the scriptable
fake agent (tests/peers/conform_agent.py)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from generator.conform import peer_starter
from generator.conform.engine import Options
from generator.conform.runner import run_revision
from generator.conform.schema_link import Judge, load_judge
from generator.conform.verdict import Run, Status

PY = sys.executable
FAKE = Path(__file__).resolve().parent / "peers" / "conform_agent.py"
SCHEMA_OF = {1: "v1/schema.unstable.json", 2: "v2/schema.json"}


def make_judges(shared_acp: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Judge]:
    """The judge of the test schema of each protocol version (for a module fixture)."""
    cache = tmp_path_factory.mktemp("conform-cache")
    return {v: load_judge(str(shared_acp / rel), cache=cache) for v, rel in SCHEMA_OF.items()}


async def judge_agent(
    judge: Judge,
    command: list[str],
    cwd: Path,
    *,
    env: dict[str, str] | None = None,
    quiet: float = 0.2,
    cancel_prompt: str = "hang",
    keyword: str | None = None,
    jobs: int = 3,
    transport: str = "stdio",
) -> Run:
    """One run of the kit against `command` (stdio) or `[URL]` (http, ws)."""
    opts = Options(command=command, cwd=str(cwd), env=env, quiet=quiet, cancel_prompt=cancel_prompt)
    start = peer_starter(judge, opts, transport)
    return await run_revision(
        judge,
        opts,
        start,
        transport=transport,
        target=" ".join(command),
        keyword=keyword,
        jobs=jobs,
    )


def run_agent(judge: Judge, command: list[str], cwd: Path, **kw: Any) -> Run:
    return asyncio.run(judge_agent(judge, command, cwd, **kw))


def fake_env(protocol: int, defect: str = "") -> dict[str, str]:
    return {**os.environ, "FAKE_PROTOCOL": str(protocol), "FAKE_DEFECT": defect}


def failing(run: Run) -> set[str]:
    """Every requirement that FAILed (whatever its tier)."""
    return {r.id for r in run.results if r.status == Status.FAIL}


def explain(run: Run) -> str:
    return "\n".join(
        f"{r.id} {r.status.value}: {r.reason()}" for r in run.results if r.status == Status.FAIL
    )
