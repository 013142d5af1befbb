"""`agentgen validate`: schema validation plus the checks a schema cannot express.

`validate_file(path)` returns every problem of one manifest as `Diagnostic`s, located at
the offending node (a missing key at its parent object), sorted by position.
`run_validate(files, fmt=...)` prints them as `file:line:col: /json/pointer: message`
(or a JSON array) and returns 0 (valid), 1 (invalid) or 2 (usage error: a file missing or
unreadable). A manifest that is not YAML/JSON is a finding like any other (1).
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import AgentgenError, InvalidInput
from ..schemas import ref_name
from .load import LoadedManifest, load_manifest
from .positions import child
from .semantics import plain_message, semantic_problems

SHOWN = 60  # characters of a value quoted in a message
MESSAGE_MAX = 160  # characters of one diagnostic's message
Problem = tuple[str, str, bool]  # (pointer in contract-3 terms, message, at the key?)


@dataclass(frozen=True, order=True)
class Diagnostic:
    file: str
    line: int | None
    col: int | None
    pointer: str
    message: str

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.file}: {self.message}"
        return f"{self.file}:{self.line}:{self.col}: {self.pointer or '/'}: {self.message}"


# ---- schema validation --------------------------------------------------------------


@functools.cache
def _validator() -> Any:
    from jsonschema import Draft202012Validator

    from ..schema_files import load_schema

    schema = load_schema("manifest.schema.json")
    return Draft202012Validator(inline_local_refs(schema) or schema)


def inline_local_refs(schema: dict[str, Any]) -> dict[str, Any] | None:
    """`schema` with each `{"$ref": "#/$defs/X", ...}` replaced by X (merged with the
    siblings) and `$defs` dropped: the same verdicts, checked about twice as fast (no
    reference lookups). None when a reference is not of that form or is recursive."""
    defs = schema.get("$defs", {})

    def walk(node: Any, stack: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [walk(v, stack) for v in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        out: dict[str, Any] = {}
        if ref is not None:
            name = ref_name(ref) if isinstance(ref, str) and ref.startswith("#/$defs/") else None
            if name is None or name not in defs or name in stack:
                raise LookupError(ref)
            out.update(walk(defs[name], (*stack, name)))
        for key, value in node.items():
            if key not in ("$ref", "$defs"):
                out[key] = walk(value, stack)
        return out

    try:
        return dict(walk(schema, ()))
    except LookupError:
        return None


_KINDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}
_SECRETISH = ("token", "secret", "password", "headers", "api_key", "apikey", "credential")


def kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _secretish(pointer: str) -> bool:
    tokens = pointer.lower().split("/")
    return tokens[1:2] == ["auth"] or any(w in t for t in tokens for w in _SECRETISH)


def show(value: Any, pointer: str = "") -> str:
    """A short rendering of a value for a message; never the value of a secret-ish key."""
    if isinstance(value, str) and _secretish(pointer):
        return "the value"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + '..."'


def _schema_problems(data: dict[str, Any]) -> Iterator[Problem]:
    for err in _validator().iter_errors(data):
        pointer = "".join(child("", p) for p in err.absolute_path)
        yield from _describe(err, pointer)


def _unknown_keys(value: dict[str, Any], schema: dict[str, Any], pointer: str) -> Iterator[Problem]:
    """Each key of a mapping its schema does not know, with the nearest known key."""
    known = list(schema.get("properties", {}))
    for key in sorted(k for k in value if k not in known):
        hint = difflib.get_close_matches(key, known, n=1)
        tail = f" (did you mean {hint[0]!r}?)" if hint else f" (known: {', '.join(known)})"
        yield child(pointer, key), f"unknown key {key!r}{tail}", True


def _type_message(want: Any, value: Any, pointer: str) -> str:
    """A value of the wrong type: the types wanted, the one given, and the value when
    it is short."""
    want_list = [str(w) for w in (want if isinstance(want, list) else [want])]
    wants = " or ".join(_KINDS.get(w, w) for w in want_list)
    got = kind_of(value)
    text = f"must be {wants}, not {_KINDS[got]}"
    if got in ("integer", "number", "boolean", "null", "string"):
        text += f" ({show(value, pointer)})"
    if want == "string" and got in ("integer", "number", "boolean"):
        text += "; quote it in YAML"
    return text


def _other_message(err: Any, pointer: str) -> str:
    """Any other error: jsonschema's message in the manifest's terms, never quoting a
    secret-ish value, clipped."""
    message = plain_message(err)
    if _secretish(pointer):  # jsonschema's messages quote the value
        message = f"the value does not satisfy {err.validator}: {show(err.validator_value)}"
    if len(message) > MESSAGE_MAX:
        message = message[: MESSAGE_MAX - 3] + "..."
    return message


def _describe(err: Any, pointer: str) -> Iterator[Problem]:
    kind, value, schema = err.validator, err.instance, err.schema
    if "propertyNames" in err.schema_path and isinstance(value, str):  # a bad key: point at it
        yield child(pointer, value), f"key {show(value)} does not match {err.validator_value}", True
        return
    if kind == "additionalProperties" and isinstance(value, dict):
        yield from _unknown_keys(value, schema, pointer)
        return
    if kind == "required":
        missing = [k for k in err.validator_value if isinstance(value, dict) and k not in value]
        for key in missing:
            yield pointer, f"missing required key {key!r}", False
        return
    if kind == "type":
        yield pointer, _type_message(err.validator_value, value, pointer), False
        return
    if kind == "enum":
        allowed = ", ".join(str(v) for v in err.validator_value)
        yield pointer, f"{show(value, pointer)} is not one of: {allowed}", False
        return
    if kind == "pattern":
        text = f"{show(value, pointer)} does not match {err.validator_value}"
        about = schema.get("description")
        yield pointer, text + (f" ({about.rstrip('.')})" if isinstance(about, str) else ""), False
        return
    if kind in ("anyOf", "oneOf") and err.context:
        from jsonschema.exceptions import best_match

        yield from _describe(best_match(err.context), pointer)
        return
    yield pointer, _other_message(err, pointer), False


# ---- one file -----------------------------------------------------------------------


def diagnose(loaded: LoadedManifest) -> list[Diagnostic]:
    out = set()
    reverse = {src: dst for dst, src in loaded.origin.items()}
    problems: list[Problem] = []
    for src, message in loaded.problems:  # found while converting, in the file's pointers
        if src in reverse:
            problems.append((reverse[src], message, False))
        else:  # a node the conversion does not carry: located in the file itself
            line, col = _nearest(loaded.source_positions, src)
            out.add(Diagnostic(loaded.source, line, col, src, message))
    problems.extend(_schema_problems(loaded.data))
    problems.extend(semantic_problems(loaded.data))
    for pointer, said, at_key in problems:
        line, col = loaded.position(pointer, key=at_key)
        message = said
        if loaded.origin:  # pointers named in the message, as the file spells them
            message = _POINTER.sub(lambda m: loaded.file_pointer(m.group(0)), said)
        out.add(Diagnostic(loaded.source, line, col, loaded.file_pointer(pointer), message))
    return sorted(out)


_POINTER = re.compile(r"(?<![^\s(])/[^\s)'\"]+")


def _nearest(positions: dict[str, tuple[int, int]], pointer: str) -> tuple[int, int]:
    while pointer not in positions and pointer:
        pointer = pointer.rsplit("/", 1)[0]
    return positions.get(pointer, (1, 1))


def validate_file(path: str | Path) -> list[Diagnostic]:
    """All problems of one manifest. Raises AgentgenError when it cannot be read/parsed."""
    return diagnose(load_manifest(path))


def load_valid(path: str | Path) -> LoadedManifest:
    """The manifest, loaded and checked: the one gate `new`, `regen`, `check` and
    `models --manifest` pass through, with exactly the checks `validate` runs.

    Raises InvalidInput (exit 1) located at the first problem, counting the others."""
    try:
        loaded = load_manifest(path)
        problems = diagnose(loaded)
    except RecursionError:
        raise InvalidInput("nesting too deep", source=str(path)) from None
    if problems:
        first = problems[0]
        more = f"; {len(problems) - 1} more" if len(problems) > 1 else ""
        raise InvalidInput(
            first.message + more,
            source=first.file,
            pointer=first.pointer if first.line is not None else None,
            line=first.line,
            col=first.col,
            hint=f"`agentgen validate {path}` lists every problem",
        )
    return loaded


def _from_error(err: AgentgenError, file: str) -> Diagnostic:
    return Diagnostic(err.source or file, err.line, err.col, err.pointer or "", err.message)


def run_validate(files: Iterable[str | Path], *, fmt: str = "text") -> int:
    if fmt not in ("text", "json"):
        raise AgentgenError(f"unknown format {fmt!r}", hint="use text or json")
    from .. import console
    from .semantics import config_notes

    found: list[Diagnostic] = []
    notes: list[Diagnostic] = []  # not problems: exit 0 with them
    status = 0
    count = bad = 0
    for file in files:
        count += 1
        try:
            loaded = load_manifest(file)
            diags = diagnose(loaded)
        except AgentgenError as err:
            found.append(_from_error(err, str(file)))
            status = max(status, err.exit_code)
            bad += 1
            continue
        except RecursionError:
            found.append(Diagnostic(str(file), None, None, "", "nesting too deep"))
            status = max(status, 1)
            bad += 1
            continue
        if loaded.notes:
            said = f"read as {loaded.shape}: {'; '.join(loaded.notes)}"
            notes.append(Diagnostic(loaded.source, None, None, "", said))
        if not diags:
            for pointer, text in config_notes(loaded.data):
                line, col = loaded.position(pointer)
                notes.append(
                    Diagnostic(loaded.source, line, col, loaded.file_pointer(pointer), text)
                )
        found.extend(diags)
        if diags:
            status = max(status, 1)
            bad += 1
    if fmt == "json":  # each entry with its severity: "error" (exit 1) or "note"
        entries = [{**asdict(d), "severity": "error"} for d in found]
        entries += [{**asdict(d), "severity": "note"} for d in notes]
        sys.stdout.write(json.dumps(entries, indent=2) + "\n")
        return status
    for note in notes:
        console.lines(_note_text(note) + "\n", sys.stderr, marks=("note",))
    console.diagnostics([str(d) for d in found], sys.stdout)
    manifests = f"{count} manifest{'s' if count != 1 else ''}"
    if not found:
        console.summary(f"{manifests} valid")
    else:
        problems = f"{len(found)} problem{'s' if len(found) != 1 else ''}"
        console.summary(f"{problems} in {bad} of {manifests}", ok=False)
    return status


def _note_text(note: Diagnostic) -> str:
    if note.line is None:
        return f"{note.file}: note: {note.message}"
    return f"{note.file}:{note.line}:{note.col}: {note.pointer or '/'}: note: {note.message}"
