"""shared_runs: the run of bytes a turn's large messages share (a prompt's text and its
echo), which the SQLite store writes once; each message rebuilt from its place."""

from __future__ import annotations

import os

from runtime.sessions.shared_runs import shared_runs
from test_store_bounds import frame  # a session/update frame of one text block

LEAST = 64 * 1024


def holds(messages: list[bytes], run: bytes, where: dict[int, int]) -> None:
    for k, at in where.items():
        assert messages[k][at : at + len(run)] == run, k


def test_a_prompt_and_its_echo_share_their_whole_text() -> None:
    """Repetitive text (one letter, as a load generator's filler) and random text alike:
    the run found is the whole text, at its place in each message."""
    for text in ("x" * 1_000_000, os.urandom(300_000).hex()):
        messages = [frame("user_message_chunk", text), frame("agent_message_chunk", text)]
        found = shared_runs(messages, LEAST)
        assert found is not None
        run, where = found
        assert text.encode() in run  # with the envelope's bytes around it both share
        assert set(where) == {0, 1}
        holds(messages, run, where)


def test_a_part_shared_at_another_place_is_found() -> None:
    """The echo holds only the prompt's first quarter, behind other text: no probe sits
    where it would if the messages were aligned; the search finds it."""
    text = os.urandom(200_000).hex()
    messages = [
        frame("user_message_chunk", text),
        frame("agent_message_chunk", "a reply first. " * 1000 + text[: len(text) // 4]),
    ]
    found = shared_runs(messages, LEAST)
    assert found is not None
    run, where = found
    assert len(run) >= LEAST
    holds(messages, run, where)


def test_nothing_shared_or_one_large_message_gives_none() -> None:
    a = frame("user_message_chunk", os.urandom(100_000).hex())
    b = frame("agent_message_chunk", os.urandom(100_000).hex())
    assert shared_runs([a, b], LEAST) is None
    assert shared_runs([a, frame("agent_message_chunk", "short")], LEAST) is None


def test_every_later_message_holding_the_run_gets_its_place() -> None:
    text = "y" * 200_000
    messages = [
        frame("user_message_chunk", text),
        frame("agent_message_chunk", "short"),
        frame("agent_message_chunk", text),
        frame("agent_message_chunk", text),
        frame("agent_thought_chunk", text),  # holds the text, not the whole run
    ]
    found = shared_runs(messages, LEAST)
    assert found is not None
    run, where = found
    assert set(where) == {0, 2, 3}
    holds(messages, run, where)
