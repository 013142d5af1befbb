"""The method table of a protocol revision (contract 1), read from the schema itself.

Where each fact comes from:

- wire name and handling side: `x-method` / `x-side` on the params and result
  definitions (`x-side: both` gives one entry per side);
- request or notification: the position the definition takes in the message envelopes
  (found by shape: `ClientRequest`, `AgentNotification`, ..., and any a newer revision
  adds, such as `ProxyRequest`): request params, result, or notification params; a
  tagged definition outside every envelope is a request when some definition of the
  same method is a result or is named `...Response`, a notification otherwise;
- sides are what `x-side` says (`both` = agent and client); a side a newer revision
  adds (`proxy`) is kept as it is; without `x-side`, the envelope decides;
- stability: an `UNSTABLE` marker in the description of the params or result
  definition; with a meta table, a schema method the meta table does not list is
  unstable too (meta.json lists the stable methods only);
- python name: the meta table's key when a meta table names the method, else the
  snake_case of the wire name (`session/prompt` -> `session_prompt`, `_agent/info` ->
  `ext_agent_info`, `$/cancel_request` -> `cancel_request`).

A wire name that is both a request and a notification on one side (`mcp/message`)
keeps one entry, the request: the runtime dispatches by wire name, and a request
entry answers when the message has an id and stays silent when it has none.
"""

from __future__ import annotations

import json
import keyword
import re
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from .. import schemas
from ..errors import AgentgenError
from ..names import snake

__all__ = [
    "Method",
    "MethodTable",
    "format_json",
    "format_table",
    "method_table",
    "python_name",
    "run_methods",
    "wire_fields",
]

_SIDE_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
KINDS = ("request", "notification")

# For a tagged definition without `x-side`: the side that handles what each message union
# carries (what the client sends, the agent handles).
_HANDLER = {
    ("ClientRequest", "params"): "agent",
    ("ClientNotification", "params"): "agent",
    ("AgentResponse", "result"): "agent",
    ("AgentRequest", "params"): "client",
    ("AgentNotification", "params"): "client",
    ("ClientResponse", "result"): "client",
}
# meta.json section -> side that handles the method
_META_SECTIONS = {"agentMethods": "agent", "clientMethods": "client", "protocolMethods": "protocol"}
_UNSTABLE = re.compile(r"\bUNSTABLE\b")


@dataclass(frozen=True)
class Method:
    name: str  # wire name: "session/prompt", "_agent/info", "$/cancel_request"
    side: str  # "agent" (the agent handles it) | "client" | "protocol"
    kind: str  # "request" | "notification"
    params: str | None  # model class name of the params, e.g. "PromptRequest"
    result: str | None  # model class name of the result (None for notifications)
    unstable: bool
    attr: str  # python method name: "session_prompt", "providers_list"


@dataclass(frozen=True)
class MethodTable:
    methods: tuple[Method, ...]  # sorted by (side, name)

    def for_side(self, side: str) -> tuple[Method, ...]:
        return tuple(m for m in self.methods if m.side == side)

    def get(self, name: str) -> Method | None:
        for m in self.methods:
            if m.name == name:
                return m
        return None

    def __iter__(self) -> Iterator[Method]:
        return iter(self.methods)

    def __len__(self) -> int:
        return len(self.methods)


def python_name(wire: str) -> str:
    """A python identifier for a wire method name (snake_case, never a keyword)."""
    prefix = "ext_" if wire.startswith("_") else ""
    return snake(wire.removeprefix("$/"), prefix=prefix, empty="method")


_defs = schemas.defs
_refs = schemas.refs


def _envelopes(defs: dict[str, Any]) -> tuple[set[str], set[str], set[str]]:
    """(request params, results, notification params): the definitions each message
    envelope carries, found by shape, so a union no revision had before (`ProxyRequest`)
    counts too. A request envelope has `id`, `method` and `params`; a notification
    envelope `method` and `params`; a response `id` and `result`."""
    params: set[str] = set()
    results: set[str] = set()
    notes: set[str] = set()
    for node in defs.values():
        if not isinstance(node, dict) or "x-method" in node:
            continue
        for branch in [node, *(node.get("anyOf") or []), *(node.get("oneOf") or [])]:
            props = branch.get("properties") if isinstance(branch, dict) else None
            if not isinstance(props, dict):
                continue
            if "method" in props and "params" in props:
                (params if "id" in props else notes).update(_refs(props["params"]))
            elif "id" in props and "result" in props:
                results.update(_refs(props["result"]))
    return params, results, notes


def _union_members(defs: dict[str, Any], unions: tuple[str, ...], prop: str) -> set[str]:
    out: set[str] = set()
    for union in unions:
        node = defs.get(union)
        if isinstance(node, dict):
            # The union's `params`/`result` may sit in its properties or in anyOf branches.
            for branch in [node, *(node.get("anyOf") or []), *(node.get("oneOf") or [])]:
                props = branch.get("properties") if isinstance(branch, dict) else None
                if isinstance(props, dict) and prop in props:
                    out.update(_refs(props[prop]))
    return out


def _is_unstable(defs: dict[str, Any], *names: str | None) -> bool:
    for name in names:
        node = defs.get(name) if name else None
        if isinstance(node, dict) and _UNSTABLE.search(str(node.get("description") or "")):
            return True
    return False


def _meta_entries(meta: dict[str, Any] | None) -> dict[tuple[str, str], str]:
    """(side, wire name) -> python name, from a meta.json-shaped table."""
    out: dict[tuple[str, str], str] = {}
    if not meta:
        return out
    if not isinstance(meta, dict):
        raise AgentgenError("the meta table is not a JSON object", pointer="")
    for section, side in _META_SECTIONS.items():
        table = meta.get(section)
        if table is None:
            continue
        if not isinstance(table, dict):
            raise AgentgenError(
                "expected an object of python name -> wire name", pointer=f"/{section}"
            )
        for attr, wire in sorted(table.items()):
            if not isinstance(wire, str) or not wire:
                raise AgentgenError(
                    "a wire method name must be a string", pointer=f"/{section}/{attr}"
                )
            out[(side, wire)] = (
                attr if attr.isidentifier() and not keyword.iskeyword(attr) else python_name(wire)
            )
    return out


def _sides(defs: dict[str, Any], name: str, side: Any) -> list[str]:
    """The sides handling definition `name`: its `x-side`, else its message unions'."""
    if side == "both":
        return ["agent", "client"]
    if isinstance(side, str) and _SIDE_NAME.match(side):
        return [side]  # agent, client, protocol, or a side a newer revision adds ("proxy")
    where = schemas.def_pointer(name) + "/x-side"
    if side is not None:
        raise AgentgenError(
            f"x-side {side!r} is not a side name",
            pointer=where,
            hint="expected agent, client, protocol, both, or another lowercase name",
        )
    derived = sorted(
        {h for (union, prop), h in _HANDLER.items() if name in _union_members(defs, (union,), prop)}
    )
    if not derived:
        raise AgentgenError(
            "x-method without x-side, and no message union names it",
            pointer=where,
            hint="add x-side: agent | client | protocol | both",
        )
    return derived


def method_table(schema: dict[str, Any], meta: dict[str, Any] | None = None) -> MethodTable:
    """The method table of `schema`, merged with a meta table when given."""
    defs = _defs(schema)
    params_defs, result_defs, note_defs = _envelopes(defs)

    # (side, wire) -> role -> def name; roles: "params", "result", "notification"
    found: dict[tuple[str, str], dict[str, str]] = {}
    tagged: list[tuple[str, str, list[str]]] = []
    for name in sorted(defs):
        node = defs[name]
        if not isinstance(node, dict) or not isinstance(node.get("x-method"), str):
            continue
        tagged.append((name, node["x-method"], _sides(defs, name, node.get("x-side"))))
    result_methods = {w for n, w, _ in tagged if n in result_defs or n.endswith("Response")}
    for name, wire, sides in tagged:
        if name in result_defs or (
            name not in params_defs | note_defs and name.endswith("Response")
        ):
            role = "result"
        elif name in params_defs:
            role = "params"
        elif name in note_defs:
            role = "notification"
        else:
            role = "params" if wire in result_methods else "notification"
        for side in sides:
            found.setdefault((side, wire), {}).setdefault(role, name)

    names = _meta_entries(meta)
    for key in names:
        found.setdefault(key, {})

    methods: list[Method] = []
    used: dict[tuple[str, str], str] = {}
    for side, wire in sorted(found):
        roles = found[(side, wire)]
        is_request = "params" in roles or "result" in roles or "notification" not in roles
        params = roles.get("params") if is_request else roles.get("notification")
        result = roles.get("result") if is_request else None
        unstable = _is_unstable(defs, params, result) or (bool(names) and (side, wire) not in names)
        attr = names.get((side, wire)) or python_name(wire)
        base, n = attr, 2
        while (side, attr) in used:  # two wire names with one python name: keep both
            attr, n = f"{base}_{n}", n + 1
        used[(side, attr)] = wire
        kind = "request" if is_request else "notification"
        methods.append(Method(wire, side, kind, params, result, unstable, attr))
    return MethodTable(tuple(methods))


def wire_fields(schema: dict[str, Any], name: str | None) -> list[str]:
    """The top-level wire field names of definition `name` (following `allOf` references),
    sorted; `required` ones are not distinguished here."""
    defs = _defs(schema)
    out: set[str] = set()
    seen: set[str] = set()
    stack = [name] if name else []
    while stack:
        cur = stack.pop()
        node = defs.get(cur)
        if cur in seen or not isinstance(node, dict):
            continue
        seen.add(cur)
        props = node.get("properties")
        if isinstance(props, dict):
            out.update(str(k) for k in props)
        for part in node.get("allOf") or []:
            stack.extend(_refs(part))
    return sorted(out)


def format_table(table: MethodTable, schema: dict[str, Any] | None = None) -> str:
    """One row per method; with the schema, the last column lists the result's wire fields."""
    head, rows = table_rows(table, schema)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [head, *rows]
    ]
    return "\n".join(lines) + "\n"


def table_rows(
    table: MethodTable, schema: dict[str, Any] | None = None
) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """(header, rows) of the method table."""
    head: tuple[str, ...] = ("method", "side", "kind", "params", "result", "stability", "python")
    if schema is not None:
        head += ("result fields",)
    rows: list[tuple[str, ...]] = []
    for m in table.methods:
        row: tuple[str, ...] = (
            m.name,
            m.side,
            m.kind,
            m.params or "-",
            m.result or "-",
            "unstable" if m.unstable else "stable",
            m.attr,
        )
        if schema is not None:
            row += (", ".join(wire_fields(schema, m.result)) or "-",)
        rows.append(row)
    return head, rows


def format_json(table: MethodTable, schema: dict[str, Any] | None = None) -> str:
    """The contract's fields per method; with the schema, `params_fields`/`result_fields` too."""
    rows: list[dict[str, Any]] = []
    for m in table.methods:
        row = asdict(m)
        if schema is not None:
            row["params_fields"] = wire_fields(schema, m.params)
            row["result_fields"] = wire_fields(schema, m.result) if m.result else None
        rows.append(row)
    return json.dumps(rows, indent=2) + "\n"


def run_methods(schema_spec: str | None, *, meta: str | None = None, fmt: str = "table") -> int:
    """`agentgen methods`: print the method table of a schema."""
    if fmt not in ("table", "json"):
        raise AgentgenError(f"unknown format {fmt!r}", hint="use --format table or --format json")
    from .. import sources

    schema = sources.load_schema(schema_spec)
    meta_src = sources.load_meta(meta) if meta else None
    try:
        table = method_table(schema.data, meta_src.data if meta_src else None)
    except AgentgenError as err:  # name the file the pointer is in
        if err.source is None:
            meta_ptr = err.pointer is not None and not err.pointer.startswith("/$defs")
            err.source = meta_src.origin if meta_src and meta_ptr else schema.origin
        raise
    if fmt == "json":
        sys.stdout.write(format_json(table, schema.data))
        return 0
    from .. import console

    head, rows = table_rows(table, schema.data)  # fitted to the terminal when it is one
    console.table(head, rows, format_table(table, schema.data), sys.stdout)
    return 0
