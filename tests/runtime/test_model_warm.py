"""The first turn of a model agent does not wait for its provider's model code (issue 36:
the first 429 within 1 s): once `initialize` is answered, model/route.py `warm` imports
it in a background thread, for the provider the first turn will likely use.  (The time
it saves is measured in bench/bench_first_429.py, never asserted here.)"""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
from runtime.model import route

KEYS = ("ACP_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY")


@pytest.mark.parametrize(
    ("env", "llm", "warmed"),
    [
        ({"ACP_MODEL": "openai:gpt-4.1-mini"}, {}, ["openai"]),
        ({"ACP_MODEL": "openai-chat:gpt-x"}, {}, ["openai"]),
        ({}, {"default_model": "anthropic:claude-x"}, ["anthropic"]),
        ({"ACP_MODEL": "anthropic:claude-x"}, {"default_model": "openai:gpt-x"}, ["anthropic"]),
        ({"ACP_MODEL": "test"}, {}, []),  # the scripted model: nothing to load
        ({"ACP_MODEL": "groq:llama"}, {}, []),  # a provider pydantic-ai builds itself
        ({"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}, {}, ["openai"]),
        ({"ANTHROPIC_API_KEY": "k"}, {}, ["anthropic"]),
        ({}, {"provider": "main"}, ["openai", "anthropic"]),  # the editor routes it
        ({}, {}, []),
    ],
)
def test_the_provider_warmed_is_the_one_the_first_turn_uses(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], llm: dict[str, Any], warmed: list[str]
) -> None:
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert route.providers_to_warm(llm) == warmed


def test_warm_imports_the_model_code_in_a_thread_once_a_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(route, "_warmed", threading.Event())
    monkeypatch.setenv("ACP_MODEL", "openai:gpt-x")
    thread = route.warm({})
    assert thread is not None and thread.daemon and thread is not threading.current_thread()
    thread.join(120)
    assert "pydantic_ai.models.openai" in sys.modules and "openai" in sys.modules
    assert route.warm({}) is None  # once a process
