"""Check that a protocol schema is one: JSON, an object with definitions, every `$ref` local
and resolvable.

`check_schema(data, source)` takes the parsed JSON or its raw bytes/text and returns the
schema object, or raises `AgentgenError` naming the source and the JSON pointer (or
line:col for a JSON syntax error) of the first problem found, in document order.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from typing import Any

from .. import pointer, schemas
from ..errors import AgentgenError

__all__ = ["check_schema", "escape", "parse_json", "ref_cycle", "resolve_pointer"]

_DEF_KEYS = schemas.DEF_KEYS
escape = pointer.escape


def parse_json(raw: bytes | str, source: str) -> Any:
    """Parse JSON text; a syntax error names its line and column."""
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise AgentgenError(
                f"not UTF-8 text (byte {err.start}): not a JSON file", source=source
            ) from None
    else:
        text = raw
    if not text.strip():
        raise AgentgenError("empty file: expected a JSON schema", source=source)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise AgentgenError(
            f"not valid JSON: {err.msg}", source=source, line=err.lineno, col=err.colno
        ) from None
    except RecursionError:
        raise AgentgenError("not valid JSON: nested too deeply", source=source) from None


def resolve_pointer(doc: Any, at: str) -> tuple[bool, Any]:
    """(found, value) for a JSON pointer ("" or "/a/b") inside `doc`."""
    return pointer.resolve(doc, at)


MAX_DEPTH = 256


def _bad(message: str, ptr: str) -> tuple[str, tuple[str, Any]]:
    return ("error", (ptr, message))


def _walk_schema(root: Any, at: str) -> Iterator[tuple[str, tuple[str, Any]]]:
    """Walk the schema positions of `root` (`schemas.children`) in document order.

    Yields ("ref", (pointer of a `$ref`, its value)) for each reference and
    ("error", (pointer, message)) for a keyword holding the wrong kind of value.
    """
    stack: list[tuple[Any, str, int]] = [(root, at, 0)]
    while stack:
        node, ptr, depth = stack.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            yield _bad("a schema must be a JSON object or a boolean", ptr)
            return
        if depth > MAX_DEPTH:
            yield _bad(f"schemas nested deeper than {MAX_DEPTH} levels", ptr)
            return
        if "$ref" in node:
            yield "ref", (f"{ptr}/$ref", node["$ref"])
        problem = _bad_keyword(node)
        if problem is not None:
            yield _bad(problem[1], pointer.child(ptr, problem[0]))
            return
        stack.extend(reversed([(v, p, depth + 1) for p, v in schemas.children(node, ptr)]))


def _bad_keyword(node: dict[str, Any]) -> tuple[str, str] | None:
    """(keyword, message) for the first keyword of `node` holding the wrong kind of value."""
    for key, value in node.items():
        if key in schemas.SCHEMA_MAPS and not isinstance(value, dict):
            return key, f"{key} must be an object of schemas"
        if key in schemas.SCHEMA_LISTS and not isinstance(value, list):
            return key, f"{key} must be an array of schemas"
        if key == "required" and (
            not isinstance(value, list) or not all(isinstance(v, str) for v in value)
        ):
            return key, "required must be an array of property names"
        if key == "type" and not (
            isinstance(value, str)
            or (isinstance(value, list) and all(isinstance(v, str) for v in value))
        ):
            return key, "type must be a type name or an array of them"
        if key == "enum" and not isinstance(value, list):
            return key, "enum must be an array of values"
    return None


def check_schema(data: Any, source: str) -> dict[str, Any]:
    """The schema object, checked; `data` may be raw bytes/text or parsed JSON."""
    if isinstance(data, bytes | str):
        data = parse_json(data, source)
    if not isinstance(data, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(data), "a number"
        )
        raise AgentgenError(
            f"a protocol schema must be a JSON object, got {kind}", source=source, pointer=""
        )
    key = next((k for k in _DEF_KEYS if k in data), None)
    if key is None:
        raise AgentgenError(
            "not a protocol schema: no $defs (or definitions)",
            source=source,
            pointer="",
            hint="this looks like a meta table: pass it with --meta"
            if any(k in data for k in ("agentMethods", "clientMethods"))
            else "expected ACP's schema.json with its definitions under $defs",
        )
    defs = data[key]
    if not isinstance(defs, dict):
        raise AgentgenError(
            f"{key} must be an object of definitions", source=source, pointer=f"/{key}"
        )
    if not defs:
        raise AgentgenError(f"{key} is empty: no definitions", source=source, pointer=f"/{key}")
    for name, node in defs.items():
        if not isinstance(node, dict | bool):
            raise AgentgenError(
                "a definition must be a JSON object (a schema)",
                source=source,
                pointer=f"/{key}/{escape(name)}",
            )
    for what, (where, value) in _walk_schema(data, ""):
        if what == "error":
            raise AgentgenError(str(value), source=source, pointer=where)
        _check_ref(data, where, value, source)
    cycle = ref_cycle(data)
    if cycle:
        raise AgentgenError(
            f"$ref cycle {' -> '.join([*cycle, cycle[0]])}: no value can satisfy it",
            source=source,
            pointer=cycle[0],
            hint="make one step optional, or give it an anyOf branch that ends",
        )
    return data


def _check_ref(doc: dict[str, Any], where: str, ref: Any, source: str) -> None:
    if not isinstance(ref, str):
        raise AgentgenError("$ref must be a string", source=source, pointer=where)
    if not ref.startswith("#"):
        raise AgentgenError(
            f"$ref {ref!r} points outside this file",
            source=source,
            pointer=where,
            hint="only local references (#/$defs/Name) are supported; bundle the schema first",
        )
    target = pointer.from_fragment(ref)
    if target is not None and pointer.resolve(doc, target)[0]:
        return
    for key in _DEF_KEYS:
        prefix = f"/{key}/"
        if target is not None and target.startswith(prefix) and isinstance(doc.get(key), dict):
            name = pointer.unescape(target[len(prefix) :])
            close = difflib.get_close_matches(name, list(doc[key]), n=1)
            raise AgentgenError(
                f"$ref {ref!r} points to a missing definition",
                source=source,
                pointer=where,
                hint=f"did you mean {close[0]!r}?" if close else None,
            )
    raise AgentgenError(f"$ref {ref!r} points to nothing", source=source, pointer=where)


_DATA_KEYS = frozenset({"const", "enum", "default", "examples"})


def ref_cycle(doc: Any) -> list[str] | None:
    """The pointers of the `$ref`s of a reference cycle no value can end, or None.

    A step is forced when every valid value must also satisfy the schema it leads to: a
    `$ref`, an `allOf` member, a required property's schema. A loop of forced steps asks
    for an infinitely deep value (or, of `$ref`s alone, for nothing at all), and the
    generated models then refuse every input or do not import. Recursion through an
    optional property, an array or an `anyOf` is fine. Only local `#/...` references are
    followed (the others are reported by the reference check).
    """
    done: set[str] = set()
    for start in sorted(_ref_holders(doc)):
        if start in done:
            continue
        cycle = _cycle_from(doc, start, done)
        if cycle is not None:
            return cycle
    return None


def _ref_holders(doc: Any) -> list[str]:
    """The pointers of the schema objects holding a `$ref` (data values are skipped)."""
    holders: list[str] = []  # pointers of the schema objects holding a $ref
    todo: list[tuple[Any, str]] = [(doc, "")]
    while todo:
        node, ptr = todo.pop()
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                holders.append(ptr)
            todo += [(v, pointer.child(ptr, k)) for k, v in node.items() if k not in _DATA_KEYS]
        elif isinstance(node, list):
            todo += [(v, pointer.child(ptr, i)) for i, v in enumerate(node)]
    return holders


def _forced_steps(doc: Any, ptr: str) -> list[tuple[str, str | None]]:
    """(next schema pointer, the $ref pointer when the step is a reference)."""
    found, node = resolve_pointer(doc, ptr)
    if not found or not isinstance(node, dict):
        return []
    out: list[tuple[str, str | None]] = []
    ref = node.get("$ref")
    target = pointer.from_fragment(ref) if isinstance(ref, str) else None
    if target is not None and resolve_pointer(doc, target)[0]:
        out.append((target, pointer.child(ptr, "$ref")))
    members = node.get("allOf")
    if isinstance(members, list):
        out += [(pointer.child(ptr, "allOf", i), None) for i in range(len(members))]
    props, required = node.get("properties"), node.get("required")
    if isinstance(props, dict) and isinstance(required, list):
        out += [
            (pointer.child(ptr, "properties", name), None)
            for name in required
            if isinstance(name, str) and name in props
        ]
    return out


def _cycle_from(doc: Any, start: str, done: set[str]) -> list[str] | None:
    """The `$ref` pointers of a forced cycle reached from `start`, or None; every schema
    found to lead to no cycle is added to `done`."""
    # iterative DFS; `path` holds (node, the ref taken to reach it, its pending steps)
    path: list[tuple[str, str | None, list[tuple[str, str | None]]]] = [
        (start, None, _forced_steps(doc, start))
    ]
    on_path = {start}
    while path:
        node, _, pending = path[-1]
        if not pending:
            path.pop()
            on_path.discard(node)
            done.add(node)
            continue
        nxt, via = pending.pop()
        if nxt in on_path:
            at = next(i for i, entry in enumerate(path) if entry[0] == nxt)
            chain = [entry[1] for entry in path[at + 1 :]] + [via]
            return [ref for ref in chain if ref is not None]
        if nxt not in done:
            path.append((nxt, via, _forced_steps(doc, nxt)))
            on_path.add(nxt)
    return None
