"""The nesting bound a received frame is held to (runtime/wire/frames.py ``too_deep``): small
frames are counted before they are walked, large ones walked at once; both ways find the
same place."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from runtime.wire.frames import COUNT_BYTES, MAX_DEPTH, too_deep


def nested(levels: int) -> dict[str, Any]:
    """A content block ``2 * levels + 1`` levels deep."""
    block: dict[str, Any] = {"type": "text", "text": "deep"}
    for _ in range(levels):
        block = {"type": "text", "text": "x", "_meta": {"nested": block}}
    return block


def prompt(blocks: list[Any]) -> dict[str, Any]:
    params = {"sessionId": "s", "prompt": blocks}
    return {"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": params}


@pytest.mark.parametrize("padding", [0, 2 * COUNT_BYTES], ids=["small", "large"])
@pytest.mark.parametrize("as_text", [False, True], ids=["bytes", "str"])
def test_too_deep_names_the_block(padding: int, as_text: bool) -> None:
    msg = prompt([{"type": "text", "text": "a" * padding}, nested(MAX_DEPTH // 2)])
    raw = orjson.dumps(msg)
    assert (len(raw) > COUNT_BYTES) == bool(padding)
    frame: bytes | str = raw.decode() if as_text else raw
    assert too_deep(frame, orjson.loads(raw)) == ["params", "prompt", 1]


@pytest.mark.parametrize("padding", [0, 2 * COUNT_BYTES], ids=["small", "large"])
def test_shallow_frames_pass(padding: int) -> None:
    # many brackets inside a string are not nesting: the walk of the message says so
    msg = prompt([{"type": "text", "text": "[{" * (MAX_DEPTH + padding)}, nested(MAX_DEPTH // 4)])
    raw = orjson.dumps(msg)
    assert too_deep(raw, orjson.loads(raw)) is None
