"""A model's failure classified once, by what the user can do (issue 36 item 4,
templates/runtime/model/failures.py), in process: pydantic-ai's own exceptions, as its
model classes raise them, through `adapter.model_error`; the `Retry-After` a provider
sends, clamped; a history bounded without losing the latest turn; a tool's result cut
at its bound."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic_ai.exceptions import (
    ModelConnectionError,
    ModelHTTPError,
    UnexpectedModelBehavior,
    UserError,
)
from runtime.model.adapter import model_error
from runtime.model.failures import MAX_RETRY_AFTER, retry_after_seconds

SECRET = "sk-failure-secret-0042"


def _http(status: int, message: str = "no", **headers: str) -> ModelHTTPError:
    body = {"error": {"message": message, "type": "invalid_request_error"}}
    return ModelHTTPError(status, "gpt-test", body, headers=headers)


@pytest.mark.parametrize(
    ("status", "name", "transient"),
    [
        (401, "ModelAuthentication", False),
        (403, "ModelAuthentication", False),
        (400, "ModelRequestRejected", False),
        (404, "ModelRequestRejected", False),
        (413, "ModelRequestRejected", False),
        (422, "ModelRequestRejected", False),
        (408, "ModelUnavailable", True),
        (429, "ModelUnavailable", True),
        (500, "ModelUnavailable", True),
        (503, "ModelUnavailable", True),
    ],
)
def test_an_http_status_is_classified_by_what_the_user_can_do(
    status: int, name: str, transient: bool
) -> None:
    """Fails on the old code for 400/404/413/422 (all `ModelUnavailable`, transient)."""
    err = model_error(_http(status, "the provider's words"), "main")
    assert err is not None
    assert err.data["name"] == name and err.data["transient"] is transient, err.data
    assert f"HTTP {status}" in err.message and "'main'" in err.message
    if name == "ModelRequestRejected":
        assert "the provider's words" in err.message


def test_a_context_too_long_says_what_to_do_and_shows_no_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    said = f"This model's maximum context length is 8192 tokens (key {SECRET})"
    err = model_error(_http(400, said), "main")
    assert err is not None and err.data["name"] == "ModelContextTooLong"
    assert err.data["transient"] is False
    assert "start a new session" in err.message and "8192 tokens" in err.message
    assert SECRET not in err.message and SECRET not in str(err.to_wire())


@pytest.mark.parametrize(
    ("exc", "name", "transient"),
    [
        (ModelConnectionError("gpt-test", "cut", phase="read"), "ModelUnavailable", True),
        (ModelConnectionError("gpt-test", "refused", phase="connect"), "ModelUnavailable", True),
        (UserError("Set the `OPENAI_API_KEY` environment variable"), "ModelConfiguration", False),
        (UserError("Unknown model: nobody:nothing"), "ModelConfiguration", False),
    ],
)
def test_a_failure_without_a_status_is_classified_too(
    exc: BaseException, name: str, transient: bool
) -> None:
    """Fails on the old code for the configuration errors (None: "internal error")."""
    err = model_error(exc, "main")
    assert err is not None
    assert err.data["name"] == name and err.data["transient"] is transient
    if name == "ModelConfiguration":
        assert str(exc) in err.message


def test_what_is_not_a_model_failure_is_left_alone() -> None:
    assert model_error(ValueError("a handler's bug"), "main") is None
    assert model_error(UnexpectedModelBehavior("odd"), "main") is None


def test_a_retry_after_date_far_ahead_is_clamped() -> None:
    """Fails on the old code: a 2037 date became `retry_after: 343146685`-ish."""
    err = model_error(_http(429, **{"Retry-After": "Thu, 01 Jan 2037 00:00:00 GMT"}), "main")
    assert err is not None and err.data["retry_after"] == MAX_RETRY_AFTER
    err = model_error(_http(429, **{"Retry-After": "7"}), "main")
    assert err is not None and err.data["retry_after"] == 7


def test_retry_after_from_seconds_or_a_date() -> None:
    now = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds("7", now) == 7
    assert retry_after_seconds("1.5", now) == 1.5
    assert retry_after_seconds("Sun, 06 Dec 2026 12:00:30 GMT", now) == 30
    assert retry_after_seconds("Sun, 06 Dec 2026 11:00:00 GMT", now) == 0  # past
    assert retry_after_seconds("Thu, 01 Jan 2037 00:00:00 GMT", now) == MAX_RETRY_AFTER
    assert retry_after_seconds("99999999", now) == MAX_RETRY_AFTER
    assert retry_after_seconds("-3", now) == 0
    assert retry_after_seconds("soon", now) is None
    assert retry_after_seconds(None, now) is None


def test_one_turn_longer_than_the_history_bound_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails on the old code: the whole history was wiped."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from runtime.agent.context import Session
    from runtime.model import history

    s = Session("s1", None, {}, "idle")
    turn: list[Any] = [ModelRequest(parts=[UserPromptPart("old")]), ModelResponse([TextPart("a")])]
    turn.append(ModelRequest(parts=[UserPromptPart("work hard")]))
    for i in range(5):
        turn.append(ModelResponse(parts=[ToolCallPart("noop", {}, tool_call_id=f"t{i}")]))
        turn.append(ModelRequest(parts=[ToolReturnPart("noop", "x", tool_call_id=f"t{i}")]))
    turn.append(ModelResponse(parts=[TextPart("done")]))
    monkeypatch.setenv("ACP_MODEL_HISTORY", "4")
    history.save(s, turn)
    kept = history.load(s)[0]
    assert len(kept) == 12 and kept[0].parts[0].content == "work hard"


def test_a_tools_result_is_cut_at_its_bound() -> None:
    from runtime.model.limits import bound_result

    assert bound_result("short", 1024) == "short"
    cut = bound_result("é" * 2000, 1024)  # cut on a character, not inside one
    assert cut.startswith("é" * 512) and "[output cut: 2976 more bytes" in cut
    assert bound_result({"a": [1, 2]}, 1024) == {"a": [1, 2]}
    assert "[output cut:" in bound_result({"a": "x" * 5000}, 1024)
