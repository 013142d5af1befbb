"""JSON Schema documents: the one place that knows which keywords hold subschemas, where
definitions live and what a `$ref` names.

`walk` visits schema positions only: names under `properties`/`$defs` and literal data
(`const`, `enum`, `default`, `examples`, extension keys) are never taken for keywords.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import pointer as ptr

__all__ = [
    "DEF_KEYS",
    "SCHEMA_LISTS",
    "SCHEMA_MAPS",
    "SCHEMA_ONE",
    "children",
    "def_pointer",
    "def_ref",
    "defs",
    "ref_name",
    "refs",
    "resolve",
    "walk",
]

# where definitions live: 2020-12 first, then draft-07
DEF_KEYS = ("$defs", "definitions")
# keyword -> what it holds, for the keywords whose values are (or contain) schemas
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")  # and `items` in its array form
SCHEMA_ONE = (
    "items",
    "additionalItems",
    "additionalProperties",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
)


def defs(schema: Any) -> dict[str, Any]:
    """The document's definitions (`$defs`, else draft-07 `definitions`; {} when none)."""
    if isinstance(schema, dict):
        for key in DEF_KEYS:
            found = schema.get(key)
            if isinstance(found, dict):
                return found
    return {}


def ref_name(ref: Any) -> str | None:
    """The definition a local `$ref` names (`#/$defs/X` or `#/definitions/X`); `ref` may be
    the string or a `{"$ref": ...}` node.  None for anything else (a deeper pointer, another
    file, not a reference)."""
    if isinstance(ref, dict):
        ref = ref.get("$ref")
    if not isinstance(ref, str):
        return None
    target = ptr.from_fragment(ref)
    if target is None:
        return None
    parts = ptr.tokens(target)
    if len(parts) == 2 and parts[0] in DEF_KEYS:  # noqa: PLR2004 - ["$defs", name]
        return parts[1]
    return None


def def_pointer(name: str, key: str = "$defs") -> str:
    """The pointer of definition `name`: "/$defs/<name, escaped>"."""
    return ptr.child("", key, name)


def def_ref(name: str) -> str:
    """The `$ref` string naming definition `name`: "#/$defs/<name, escaped>"."""
    return "#" + def_pointer(name)


def resolve(schema: Any, node: Any) -> Any:
    """`node`, or the definition it names when it is a `{"$ref": ...}` (one level)."""
    name = ref_name(node)
    if name is not None:
        target = defs(schema).get(name)
        if isinstance(target, dict):
            return target
    return node


def children(node: dict[str, Any], pointer: str = "") -> Iterator[tuple[str, Any]]:
    """(pointer, value) of every subschema position directly under `node`, in document
    order.  Values are yielded as found (a checker decides whether each is a schema);
    a keyword holding the wrong container (`properties: []`) yields nothing."""
    for key, value in node.items():
        at = ptr.child(pointer, key)
        if key in SCHEMA_MAPS:
            if isinstance(value, dict):
                for name, sub in value.items():
                    yield ptr.child(at, name), sub
        elif key in SCHEMA_LISTS or (key == "items" and isinstance(value, list)):
            if isinstance(value, list):
                for i, sub in enumerate(value):
                    yield ptr.child(at, i), sub
        elif key in SCHEMA_ONE:
            yield at, value


def walk(node: Any, pointer: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(pointer, subschema) for `node` and every object subschema under it, parents before
    children, in document order.  A node's children are read when the walk moves past
    it, so a caller may rewrite the node it was just given."""
    stack: list[tuple[str, Any]] = [(pointer, node)]
    while stack:
        at, cur = stack.pop()
        if not isinstance(cur, dict):
            continue
        yield at, cur
        stack.extend(reversed(list(children(cur, at))))


def refs(node: Any) -> Iterator[str]:
    """The definition names referenced (by `#/$defs/X` or `#/definitions/X`) at schema
    positions under `node`."""
    for _, sub in walk(node):
        name = ref_name(sub)
        if name is not None:
            yield name


# Typographic punctuation and spaces that ruff's RUF001/RUF002 (ambiguous Unicode in a
# string, a docstring) take for an ASCII character, and that ASCII character.
_LOOK_ALIKES = str.maketrans(
    {
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u00b4\u02bc\u02bb", "'"),
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2212", "-"),
        "\u00d7": "x",
        "\u2039": "<",
        "\u203a": ">",
        "\uff0c": ",",
        "\u037e": ";",
        "\u2044": "/",
        "\u2215": "/",
    }
)


def plain_text(text: str) -> str:
    """`text` with `_LOOK_ALIKES` and every non-ASCII space (Unicode's Zs) made ASCII."""
    import unicodedata

    text = text.translate(_LOOK_ALIKES)
    if text.isascii():
        return text
    return "".join(" " if ch != " " and unicodedata.category(ch) == "Zs" else ch for ch in text)


def plain_descriptions(node: Any) -> Any:
    """`node` (a JSON Schema document, changed in place) with `plain_text` descriptions
    and titles at every schema position: what a generated module's docstrings and
    `description=` strings carry, which a project's `ruff check` (RUF001/RUF002) reads."""
    for _, sub in walk(node):
        for key in ("description", "title"):
            text = sub.get(key)
            if isinstance(text, str) and not text.isascii():
                sub[key] = plain_text(text)
    return node
