"""The ceiling of bench/bench_model.py: the scripted model run with pydantic-ai alone (no
ACP, no transport), `TURNS` turns of `PROMPT` in one conversation (each turn gets the
messages of the turns before it, as both agents keep a session's history); prints the
CPU seconds they took."""

from __future__ import annotations

import asyncio
import resource
import sys
from pathlib import Path
from typing import Any

from pydantic_ai import AgentRunResultEvent

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from model_script import make_agent  # noqa: E402


async def main(prompt: str, turns: int) -> float:
    agent = make_agent()
    start = resource.getrusage(resource.RUSAGE_SELF)
    history: list[Any] = []
    for _ in range(turns):
        async with agent.run_stream_events(prompt, message_history=history or None) as events:
            async for event in events:
                if isinstance(event, AgentRunResultEvent):
                    history = list(event.result.all_messages())
    end = resource.getrusage(resource.RUSAGE_SELF)
    return (end.ru_utime + end.ru_stime) - (start.ru_utime + start.ru_stime)


if __name__ == "__main__":
    print(asyncio.run(main(sys.argv[1], int(sys.argv[2]))))
