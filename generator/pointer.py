"""JSON pointers (RFC 6901): the one place their tokens are escaped, split and followed.

A pointer is "" (the whole document) or "/a/b~1c" (tokens `a`, `b/c`).  `$ref`
fragments (`#/$defs/A%20B`) are URI-encoded pointers: `from_fragment` decodes them.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

__all__ = ["child", "escape", "from_fragment", "join", "resolve", "tokens", "unescape"]


def escape(token: str | int) -> str:
    """One reference token: `~` -> `~0`, `/` -> `~1`."""
    return str(token).replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    """The inverse of `escape` (`~1` first, so `~01` stays `~1`)."""
    return token.replace("~1", "/").replace("~0", "~")


def child(pointer: str, *tokens: str | int) -> str:
    """`pointer` extended by `tokens` (each escaped): child("/a", "b/c") -> "/a/b~1c"."""
    return pointer + "".join("/" + escape(t) for t in tokens)


def join(tokens: Any) -> str:
    """The pointer of a path of keys and indexes: ("a", 0) -> "/a/0"."""
    return child("", *tokens)


def tokens(pointer: str) -> list[str]:
    """The unescaped tokens of a pointer ("" -> [], "/a~1b/0" -> ["a/b", "0"])."""
    if pointer == "":
        return []
    return [unescape(t) for t in pointer.split("/")[1:]]


def from_fragment(ref: str) -> str | None:
    """The pointer a local `$ref` names ("#/$defs/A%20B" -> "/$defs/A B"); None when the
    reference is not a pointer into this document (another file, an anchor)."""
    if not ref.startswith("#"):
        return None
    fragment = unquote(ref[1:])
    return fragment if fragment == "" or fragment.startswith("/") else None


def resolve(doc: Any, pointer: str) -> tuple[bool, Any]:
    """(found, value) for `pointer` inside `doc`."""
    if pointer != "" and not pointer.startswith("/"):
        return False, None
    node = doc
    for token in tokens(pointer):
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return False, None
    return True, node
