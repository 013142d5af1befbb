"""What the JSON-RPC connection (jsonrpc.py) reads off a message before it dispatches it,
and how it encodes one: its nesting depth, the session it names, its JSON bytes."""

from __future__ import annotations

from typing import Any

import orjson

# JSON nesting a message may have: orjson writes at most 254 levels, and every message
# the runtime sends back (a prompt block inside a session/update) adds a few
MAX_DEPTH = 200
_LOC_KEYS = 3  # how much of the path a too-deep error names (params.prompt[i])
COUNT_BYTES = 64 * 1024
"""Up to this size a frame's brackets are counted before its message is walked (a pass
over a small frame costs less than a walk); a larger frame's message is walked at once
(two passes over a 4 MB prompt cost ~2 ms, a walk of its few containers microseconds,
and a walk never costs more than parsing the frame did)."""


def to_json(obj: Any) -> Any:
    """orjson's fallback: typed models (pydantic) nested anywhere in a message."""
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        return dump(by_alias=True, exclude_unset=True, mode="json")
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, default=to_json)


def too_deep(frame: bytes | str, msg: Any) -> list[Any] | None:
    """Where ``msg`` nests more than ``MAX_DEPTH`` levels (the first three keys of the
    path, e.g. ``["params", "prompt", 1]``), or None.  A frame with fewer brackets than
    that cannot: a small frame is walked only when it has many (``COUNT_BYTES``)."""
    if len(frame) <= COUNT_BYTES:
        if isinstance(frame, str):
            brackets = frame.count("[") + frame.count("{")
        else:
            brackets = frame.count(b"[") + frame.count(b"{")
        if brackets <= MAX_DEPTH:
            return None
    level: list[tuple[Any, int, tuple[Any, ...]]] = [(msg, 1, ())]
    while level:
        node, depth, where = level.pop()
        if depth > MAX_DEPTH:
            return list(where)
        items = node.items() if type(node) is dict else enumerate(node)
        for key, value in items:
            if type(value) in (dict, list):
                level.append((value, depth + 1, (*where, key) if len(where) < _LOC_KEYS else where))
    return None


def session_of(params: Any) -> str | None:
    if type(params) is dict:
        sid = params.get("sessionId")
        if type(sid) is str:
            return sid
    return None
