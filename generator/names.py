"""Name conversion: the one place text becomes a class name, a python name, words or a
one-line summary.

The generated code and the runtime keep their own tiny copies where they cannot import
agentgen (`_acp_snake` in the models base, `camel` in templates/runtime/wire/fields.py);
`pascal` agrees with the runtime's `camel` on every manifest name the manifest schema allows.
"""

from __future__ import annotations

import keyword
import re
import unicodedata
from typing import Any

__all__ = ["camel", "pascal", "snake", "summary", "word_count", "words"]

_CAMEL_HUMP = re.compile(r"([a-z0-9])([A-Z])")
_NOT_ALNUM = re.compile(r"[^0-9A-Za-z]+")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def pascal(text: str, *, digit_prefix: str = "V", empty: str = "V") -> str:
    """A PascalCase class name from any text: `agent_message_chunk`, `searchAndReplace`,
    `utf-16`, `needs-review` -> `AgentMessageChunk`, `SearchAndReplace`, `Utf16`,
    `NeedsReview`.  Each word keeps its case after the first letter (`HTTPError` stays).
    A name starting with a digit gets `digit_prefix`; text with no letter or digit is
    `empty`."""
    spaced = _CAMEL_HUMP.sub(r"\1 \2", text)
    name = "".join(w[:1].upper() + w[1:] for w in _NOT_ALNUM.split(spaced) if w)
    if not name:
        return empty
    return digit_prefix + name if name[0].isdigit() else name


def snake(text: str, *, prefix: str = "", empty: str = "name") -> str:
    """A snake_case python identifier, never a keyword: `session/prompt` ->
    `session_prompt`, `setSessionMode` -> `set_session_mode`, `HTTPServer` ->
    `http_server`, `2fa` -> `m_2fa`, `class` -> `class_`.  `prefix` goes before the
    words (alone, without its trailing `_`, when there are none); `empty` is the name
    of text with neither prefix nor words."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text)
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", text)
    core = _NOT_ALNUM.sub("_", text).strip("_").lower()
    text = prefix + core if core else (prefix.rstrip("_") or empty)
    if text[0].isdigit():
        text = "m_" + text
    if keyword.iskeyword(text) or keyword.issoftkeyword(text):
        text += "_"
    return text


def words(name: str) -> set[str]:
    """The lowercase words of an identifier (`CancelSessionNotification` -> cancel,
    session, notification; `HTTPServer` -> http, server)."""
    return {w.lower() for w in _WORD.findall(name)}


def word_count(name: str) -> int:
    """How many words a PascalCase name has (`Text` 1, `ToolCall` 2), at least 1."""
    return len(re.findall(r"[A-Z][a-z0-9]*|[0-9]+", name)) or 1


def camel(name: str) -> str:
    """`needs-review` / `needs_review` -> `NeedsReview`: the runtime's own spelling of an
    interrupt's class prefix (templates/runtime/wire/fields.py `camel`), so names agree."""
    return pascal(name, digit_prefix="", empty="")


def summary(text: Any) -> str:
    """The first paragraph of a description on one line, without control characters
    (it lands in TOML and JSON), at most 300 characters; "" for a non-string."""
    if not isinstance(text, str):
        return ""
    first = re.split(r"\n\s*\n", text.strip(), maxsplit=1)[0]
    flat = " ".join(first.split())
    return "".join(ch for ch in flat if unicodedata.category(ch)[0] != "C")[:300]
