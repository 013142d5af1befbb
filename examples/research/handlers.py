"""The research agent's handler: it reads the routing of its LLM provider, streams its
answer step by step, and stops cleanly when the client cancels.

This is `<package>/handlers.py` of the project `agentgen new --manifest
examples/research/agent.yaml` creates.  The manifest declares one required provider
(`main`: openai or anthropic), bearer auth, and the states idle -> running -> idle with
a cancel from running: the runtime enforces them (a second prompt while one is running
is refused) and serves `providers/list|set|disable` from the manifest.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from ._generated.acp import AgentBase, ProviderRoute, Turn, mask_url

# Seconds one research step takes: stands in for the LLM round trip.
STEP_DELAY = float(os.environ.get("RESEARCH_STEP_DELAY", "0.05"))


def llm_request(route: ProviderRoute, question: str) -> dict[str, Any]:
    """The request this agent would send to its provider (headers carry the secrets the
    client set with `providers/set`; they are used, never shown)."""
    if route.api_type == "anthropic":
        return {
            "url": route.base_url.rstrip("/") + "/v1/messages",
            "headers": dict(route.headers),
            "json": {"max_tokens": 1024, "messages": [{"role": "user", "content": question}]},
        }
    return {
        "url": route.base_url.rstrip("/") + "/chat/completions",
        "headers": dict(route.headers),
        "json": {"messages": [{"role": "user", "content": question}]},
    }


def plan(question: str) -> list[str]:
    """The steps of a research run on `question`."""
    return [
        f"Question: {question}\n",
        "Step 1: split the question into sub-questions.\n",
        "Step 2: gather sources for each sub-question.\n",
        "Step 3: compare what the sources say.\n",
        "Step 4: write the answer with citations.\n",
    ]


class Agent(AgentBase):
    """Streams a research run; each step would be one call to the `main` provider."""

    async def prompt(self, turn: Turn, input: list[dict[str, Any]]) -> None:
        question = " ".join(
            b["text"].strip() for b in input if b.get("type") == "text" and b.get("text")
        )
        route = turn.provider("main")
        if route is None:  # `main` is required: the runtime never lets it be disabled
            raise RuntimeError("the main provider is not configured")
        request = llm_request(route, question)
        # what is streamed is stored in the session's history: never a credential in the URL
        await turn.send_text(f"Using {route.api_type} at {mask_url(request['url'])}\n")
        for step in plan(question):
            await asyncio.sleep(STEP_DELAY)  # a cancel lands here and ends the turn
            await turn.send_text(step)
