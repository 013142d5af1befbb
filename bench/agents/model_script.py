"""The scripted model both agents of bench/bench_model.py serve (pydantic-ai FunctionModel,
no network): a prompt `deltas N` streams N text deltas; `tools N` makes N tool calls, one
a model request, then one delta."""

from __future__ import annotations

import json
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel


async def _stream(messages: list[Any], info: AgentInfo) -> Any:
    prompt = ""
    done = 0
    for m in messages:
        for p in m.parts:
            if p.part_kind == "user-prompt":
                prompt, done = str(p.content), 0
            elif p.part_kind == "tool-return":
                done += 1
    what, _, count = prompt.partition(" ")
    n = int(count or 0)
    if what == "tools" and done < n:
        args = json.dumps({"i": done})
        yield {0: DeltaToolCall(name="step", json_args=args, tool_call_id=f"c{done}")}
        return
    for _ in range(n if what == "deltas" else 1):
        yield "x"


def make_agent() -> Agent[None, str]:
    agent: Agent[None, str] = Agent(FunctionModel(stream_function=_stream))

    @agent.tool_plain
    def step(i: int) -> str:
        """One step of the scripted work."""
        return f"step {i} done"

    return agent
