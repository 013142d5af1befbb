"""Parse YAML or JSON text into plain data plus the position of every node.

`parse_text(text, source, as_json)` returns a `Parsed`: the value (dicts, lists, str, int,
float, bool, None), and two maps from JSON pointer to `(line, col)` (1-based, columns in
characters): `positions` of each value node and `key_positions` of each mapping key.

JSON is read by a small position-tracking parser (strict JSON: duplicate keys, trailing
commas, NaN are errors); YAML by ruamel.yaml's composer, whose nodes carry their marks.
Every syntax problem is an `InvalidInput` (exit 1) with the file, line and column.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidInput
from ..pointer import child as pointer_child
from ..pointer import escape as pointer_escape

Pos = tuple[int, int]

MAX_DEPTH = 200  # nesting limit for both parsers (a manifest is a few levels deep)
MAX_NODES = 200_000  # YAML alias expansion limit ("billion laughs")
# a number longer than this is no config value (Python refuses ints over 4300 digits)
MAX_DIGITS = 400
_TOO_LONG = "a number of {} characters: write at most 400 digits (quote it to keep it as text)"


@dataclass
class Parsed:
    value: Any
    positions: dict[str, Pos] = field(default_factory=dict)
    key_positions: dict[str, Pos] = field(default_factory=dict)


escape = pointer_escape
child = pointer_child


def parse_text(text: str, *, source: str, as_json: bool) -> Parsed:
    text = text.removeprefix("\ufeff")
    if as_json:
        return _JsonParser(text, source).parse()
    return _parse_yaml(text, source)


# ---- JSON -------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_WS = re.compile(r"[ \t\n\r]*")
_LITERALS = {"true": True, "false": False, "null": None}


class _JsonParser:
    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.out = Parsed(None)

    def pos(self, offset: int) -> Pos:
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    def fail(self, offset: int, message: str, pointer: str | None = None) -> InvalidInput:
        line, col = self.pos(offset)
        return InvalidInput(message, source=self.source, pointer=pointer, line=line, col=col)

    def ws(self, i: int) -> int:
        m = _WS.match(self.text, i)
        return m.end() if m else i

    def parse(self) -> Parsed:
        i = self.ws(0)
        if i >= len(self.text):
            raise self.fail(i, "the file is empty: expected a JSON object")
        self.out.value, i = self.value(i, "", 0)
        i = self.ws(i)
        if i < len(self.text):
            raise self.fail(i, "unexpected text after the JSON document")
        return self.out

    def what(self, i: int) -> str:
        return "end of file" if i >= len(self.text) else repr(self.text[i])

    def value(self, i: int, pointer: str, depth: int) -> tuple[Any, int]:
        if depth > MAX_DEPTH:
            raise self.fail(i, f"nesting deeper than {MAX_DEPTH} levels")
        self.out.positions[pointer] = self.pos(i)
        ch = self.text[i : i + 1]
        if ch == "{":
            return self.obj(i, pointer, depth)
        if ch == "[":
            return self.arr(i, pointer, depth)
        if ch == '"':
            return self.string(i)
        for word, val in _LITERALS.items():
            if self.text.startswith(word, i):
                return val, i + len(word)
        m = _NUMBER.match(self.text, i)
        if m and m.end() > i:
            num = m.group(0)
            if len(num) > MAX_DIGITS:
                raise self.fail(i, _TOO_LONG.format(len(num)), pointer or None)
            return (float(num) if m.group(1) or m.group(2) else int(num)), m.end()
        raise self.fail(i, f"expected a JSON value, found {self.what(i)}", pointer or None)

    def string(self, i: int) -> tuple[str, int]:
        try:
            s, end = json.decoder.scanstring(self.text, i + 1, True)  # type: ignore[attr-defined]
        except json.JSONDecodeError as err:
            raise self.fail(err.pos, f"bad string: {err.msg}") from None
        return s, end

    def obj(self, i: int, pointer: str, depth: int) -> tuple[dict[str, Any], int]:
        result: dict[str, Any] = {}
        i = self.ws(i + 1)
        if self.text[i : i + 1] == "}":
            return result, i + 1
        while True:
            if self.text[i : i + 1] != '"':
                raise self.fail(i, f"expected a string key, found {self.what(i)}", pointer or None)
            key_at = i
            key, i = self.string(i)
            sub = child(pointer, key)
            if key in result:
                first = self.out.key_positions[sub]
                raise self.fail(key_at, f"duplicate key {key!r} (first at line {first[0]})", sub)
            self.out.key_positions[sub] = self.pos(key_at)
            i = self.ws(i)
            if self.text[i : i + 1] != ":":
                raise self.fail(i, f"expected ':' after the key, found {self.what(i)}", sub)
            i = self.ws(i + 1)
            result[key], i = self.value(i, sub, depth + 1)
            i = self.ws(i)
            ch = self.text[i : i + 1]
            if ch == "}":
                return result, i + 1
            if ch != ",":
                raise self.fail(i, f"expected ',' or '}}', found {self.what(i)}", pointer or None)
            i = self.ws(i + 1)
            if self.text[i : i + 1] == "}":
                raise self.fail(i, "trailing comma before '}'", pointer or None)

    def arr(self, i: int, pointer: str, depth: int) -> tuple[list[Any], int]:
        result: list[Any] = []
        i = self.ws(i + 1)
        if self.text[i : i + 1] == "]":
            return result, i + 1
        while True:
            item, i = self.value(i, child(pointer, len(result)), depth + 1)
            result.append(item)
            i = self.ws(i)
            ch = self.text[i : i + 1]
            if ch == "]":
                return result, i + 1
            if ch != ",":
                raise self.fail(i, f"expected ',' or ']', found {self.what(i)}", pointer or None)
            i = self.ws(i + 1)
            if self.text[i : i + 1] == "]":
                raise self.fail(i, "trailing comma before ']'", pointer or None)


# ---- YAML -------------------------------------------------------------------------------

_TAG = "tag:yaml.org,2002:"


# ruamel.yaml's parser vocabulary -> what the author did, in their words (first match wins)
_YAML_PLAIN = (
    ("character '\\t'", "tabs are not allowed for indentation: use spaces"),
    (
        "mapping values are not allowed here",
        (
            "a `key: value` where none can be: indent this line like its neighbours, "
            "or quote a value that contains ': '"
        ),
    ),
    (
        "could not find expected ':'",
        "a line without `key:`: indent it like its neighbours, or quote a text value",
    ),
    (
        "expected <block end>",
        "this line's indentation does not match the lines above it",
    ),
    ("did not find expected key", "this line's indentation does not match the lines above it"),
    (
        "did not find expected '-' indicator",
        "a list item without `- `, or indented unlike the items above it",
    ),
    (
        "found another document",
        "a second document (`---`) in the file: a manifest is one document",
    ),
    ("found undefined alias", "an `*alias` with no `&anchor` of that name before it"),
    ("found unexpected end of stream", "the file ends inside a quoted text: close the quote"),
)


def plain_yaml_error(context: object, problem: object) -> str:
    """A YAML syntax error in plain words (the position is given beside it)."""
    said = " ".join(str(p) for p in (context, problem) if p)
    for found, plain in _YAML_PLAIN:
        if found in said:
            return f"YAML syntax error: {plain}"
    if "flow sequence" in said:
        return "YAML syntax error: a `[` list is not closed by `]` (or misses a `,`)"
    if "flow mapping" in said:
        return "YAML syntax error: a `{` mapping is not closed by `}` (or misses a `,`)"
    said = said.replace("'<stream end>'", "the end of the file").replace("while ", "")
    return f"YAML syntax error: {said}" if said else "YAML syntax error"


def _parse_yaml(text: str, source: str) -> Parsed:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    yaml = YAML(typ="safe", pure=True)
    try:
        node = yaml.compose(text)
    except MarkedYAMLError as err:
        line, col, note = _yaml_error_pos(text, err)
        message = plain_yaml_error(err.context, err.problem) + note
        raise InvalidInput(message, source=source, line=line, col=col) from None
    except RecursionError:
        line, col = _too_deep(text)
        raise InvalidInput(
            f"nesting deeper than {MAX_DEPTH} levels", source=source, line=line, col=col
        ) from None
    except YAMLError as err:
        raise InvalidInput(f"YAML error: {err}", source=source) from None
    if node is None:
        raise InvalidInput("the file is empty: expected a mapping", source=source, line=1, col=1)
    builder = _YamlBuilder(source, yaml.constructor)
    value = builder.build(node, "", 0)
    return Parsed(value, builder.positions, builder.key_positions)


def _yaml_error_pos(text: str, err: Any) -> tuple[int | None, int | None, str]:
    """Where a YAML syntax error is, and a note to add to its message. An unclosed `[`
    or `{` is shown at itself (the parser only notices it lines later, at the end of
    the file perhaps), with where the parser stopped; any other error at its problem
    mark, the end of the file being its last line, not a line past it."""
    mark, context = err.problem_mark, err.context_mark
    lines = text.splitlines() or [""]

    def pos(m: Any) -> tuple[int, int]:
        if m.line >= len(lines):  # the end of a file whose last line ends in a newline
            return len(lines), len(lines[-1]) + 1
        return m.line + 1, m.column + 1

    if context is not None and "flow" in str(err.context or ""):
        note = ""
        if mark is None or mark.index >= len(text.rstrip()):
            note = "; the file ends inside it"
        elif mark.line != context.line:
            note = "; the parser stopped at {}:{}".format(*pos(mark))
        return *pos(context), note
    if mark is None:
        return None, None, ""
    return *pos(mark), ""


def _too_deep(text: str) -> Pos:
    """Where the nesting first exceeds MAX_DEPTH (the event stream has no recursion)."""
    from ruamel.yaml import YAML

    depth = -1  # the root node is at depth 0, as in _YamlBuilder and _JsonParser
    for event in YAML(typ="safe", pure=True).parse(text):
        name = type(event).__name__
        if name in ("MappingStartEvent", "SequenceStartEvent"):
            depth += 1
            if depth > MAX_DEPTH:
                return event.start_mark.line + 1, event.start_mark.column + 1
        elif name in ("MappingEndEvent", "SequenceEndEvent"):
            depth -= 1
    return 1, 1


class _YamlBuilder:
    def __init__(self, source: str, constructor: Any) -> None:
        self.source = source
        self.constructor = constructor
        self.positions: dict[str, Pos] = {}
        self.key_positions: dict[str, Pos] = {}
        self.active: set[int] = set()
        self.count = 0

    def fail(self, node: Any, message: str, pointer: str | None = None) -> InvalidInput:
        mark = node.start_mark
        return InvalidInput(
            message, source=self.source, pointer=pointer, line=mark.line + 1, col=mark.column + 1
        )

    def build(self, node: Any, pointer: str, depth: int) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise self.fail(node, f"more than {MAX_NODES} nodes (alias expansion?)", pointer)
        if depth > MAX_DEPTH:
            raise self.fail(node, f"nesting deeper than {MAX_DEPTH} levels")
        self.positions[pointer] = (node.start_mark.line + 1, node.start_mark.column + 1)
        kind = node.id
        if kind == "scalar":
            return self.scalar(node, pointer)
        if id(node) in self.active:
            raise self.fail(node, "recursive alias", pointer)
        self.active.add(id(node))
        try:
            if kind == "sequence":
                return [
                    self.build(n, child(pointer, i), depth + 1) for i, n in enumerate(node.value)
                ]
            return self.mapping(node, pointer, depth)
        finally:
            self.active.discard(id(node))

    def mapping(self, node: Any, pointer: str, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        pairs = []
        merged: set[str] = set()
        for key_node, value_node in node.value:
            if key_node.tag != _TAG + "merge":
                pairs.append((key_node, value_node))
                continue
            sources = value_node.value if value_node.id == "sequence" else [value_node]
            for src in sources:  # explicit keys override merged ones (YAML merge semantics)
                if src.id != "mapping":
                    raise self.fail(src, "a merge key (<<) needs a mapping", pointer or None)
                for key, value in self.build(src, pointer, depth).items():
                    if key not in result:
                        result[key] = value
                        merged.add(key)
        for key_node, value_node in pairs:
            if key_node.id != "scalar" or key_node.tag != _TAG + "str":
                raise self.fail(key_node, "mapping keys must be strings", pointer or None)
            key = key_node.value
            sub = child(pointer, key)
            if key in result and key not in merged:
                first = self.key_positions[sub]
                raise self.fail(key_node, f"duplicate key {key!r} (first at line {first[0]})", sub)
            merged.discard(key)
            self.key_positions[sub] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            result[key] = self.build(value_node, sub, depth + 1)
        if merged or pairs:
            self.positions[pointer] = (node.start_mark.line + 1, node.start_mark.column + 1)
        return result

    def scalar(self, node: Any, pointer: str) -> Any:
        tag = node.tag
        if tag in (_TAG + "str", _TAG + "timestamp"):
            return str(node.value)  # a date stays the text the user wrote
        if tag in (_TAG + "int", _TAG + "float") and len(str(node.value)) > MAX_DIGITS:
            raise self.fail(node, _TOO_LONG.format(len(str(node.value))), pointer or None)
        if tag in (_TAG + "null", _TAG + "bool", _TAG + "int", _TAG + "float"):
            return self.constructor.construct_object(node, deep=True)
        raise self.fail(node, f"unsupported YAML tag {tag}", pointer or None)
