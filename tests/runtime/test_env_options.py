"""Options read from the environment (runtime/wire/fields.env_option and the limits built
on it): a value that does not parse, is negative (or below the option's minimum) or is
not finite falls back to the default, never into the runtime."""

from __future__ import annotations

import pytest
from runtime.model.history import MAX_MESSAGES, history_limit
from runtime.sessions.turn_slots import MAX_QUEUED_PROMPTS, queue_limit
from runtime.wire.fields import env_option


@pytest.mark.parametrize("raw", ["", "  ", "x", "-1", "-0.5", "nan", "inf", "-inf", "1e400"])
def test_an_unusable_value_gives_the_default(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("ACP_TEST_OPTION", raw)
    assert env_option("ACP_TEST_OPTION", 7) == 7
    assert env_option("ACP_TEST_OPTION", 2.5, float) == 2.5


@pytest.mark.parametrize(("raw", "count", "seconds"), [("0", 0, 0.0), (" 12 ", 12, 12.0)])
def test_a_usable_value_is_taken(
    monkeypatch: pytest.MonkeyPatch, raw: str, count: int, seconds: float
) -> None:
    monkeypatch.setenv("ACP_TEST_OPTION", raw)
    assert env_option("ACP_TEST_OPTION", 7) == count
    assert env_option("ACP_TEST_OPTION", 2.5, float) == seconds


def test_the_prompt_queue_and_model_history_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACP_MAX_QUEUED_PROMPTS", "0")  # no waiting prompt at all
    assert queue_limit() == 0
    monkeypatch.setenv("ACP_MAX_QUEUED_PROMPTS", "-3")
    assert queue_limit() == MAX_QUEUED_PROMPTS
    monkeypatch.setenv("ACP_MODEL_HISTORY", "0")  # a history keeps one message at least
    assert history_limit() == MAX_MESSAGES
    monkeypatch.setenv("ACP_MODEL_HISTORY", "40")
    assert history_limit() == 40
