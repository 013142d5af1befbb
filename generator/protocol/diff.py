"""The revision report: what changed between two protocol schemas, and what breaks.

Three sections, each entry marked breaking or not:

- methods (from the method table, by side and wire name): added, removed, changed
  (kind, params/result type, stability);
- types (definitions): added, removed, renamed (a definition that disappeared while one
  of the same shape appeared, or that a method's params/result moved to);
- fields of the definitions present in both (or renamed), walking inline schemas,
  union variants (keyed by their tag) and enum values: added, removed, retyped,
  made required or optional.

Shapes are compared with every `$ref` resolved (descriptions and titles ignored), so a
definition renamed without changing shape is a rename, not a removal.

Breaking, by rule: a method removed or changed in kind/side; a type removed; a field
removed; a required field added; a field made required; a field retyped unless the new
type only widens the old one; an enum value or union variant removed.  An object that
becomes a union one of whose members has exactly its old shape (`McpServer`, `AuthMethod`)
is one widening, not a removal of every field; when no member has its shape, its fields
are compared with the member that shares most of them. Additions of
optional fields, methods, types, variants and values are not breaking (unknown fields
and variants are tolerated by generated models).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import schemas
from ..errors import AgentgenError
from ..names import words
from .methods import Method, method_table

__all__ = ["Change", "Report", "diff_schemas", "format_json", "format_text", "run_diff"]

_IGNORED_KEYS = frozenset(
    {"description", "title", "examples", "$comment", "markdownDescription", "discriminator"}
)


def _ignored(key: str) -> bool:
    """Annotations: documentation and `x-` extension keys do not change a shape."""
    return key in _IGNORED_KEYS or key.startswith("x-")


def _meaningful(node: dict[str, Any]) -> set[str]:
    return {k for k in node if not _ignored(k)}


_SECTIONS = {"method": 0, "type": 1, "field": 2, "value": 2, "variant": 2}


def _section(c: Change) -> int:
    return _SECTIONS.get(c.kind.split("-")[0], 3)


@dataclass(frozen=True, order=True)
class Change:
    kind: str  # "method-added", "type-renamed", "field-removed", ...
    subject: str  # "session/set_mode", "PromptResponse.stopReason"
    detail: str
    breaking: bool


@dataclass
class Report:
    entries: list[Change] = field(default_factory=list)
    old: str | None = None  # where each revision came from (origin, sha256), when known
    new: str | None = None

    @property
    def breaking(self) -> bool:
        return any(c.breaking for c in self.entries)

    def breaking_entries(self) -> list[Change]:
        return [c for c in self.entries if c.breaking]


# -- shapes --------------------------------------------------------------------------------


_defs = schemas.defs
_ref_name = schemas.ref_name


def _unwrap(node: Any) -> Any:
    """`{"allOf": [X]}` (plus annotations only) is X: ACP wraps refs that way."""
    while isinstance(node, dict):
        all_of = node.get("allOf")
        rest = _meaningful(node) - {"allOf"}
        if isinstance(all_of, list) and len(all_of) == 1 and not rest:
            node = all_of[0]
        else:
            break
    return node


class _Shapes:
    """Canonical form of schemas with refs resolved (cycles cut by name), as JSON text."""

    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs
        self._canon_memo: dict[str, Any] = {}
        self._text_memo: dict[str, str] = {}
        self._active: set[str] = set()

    def of_def(self, name: str) -> str:
        if name not in self._text_memo:
            self._text_memo[name] = json.dumps(self._def_canon(name), sort_keys=True)
        return self._text_memo[name]

    def of(self, node: Any) -> str:
        return json.dumps(self._canon(node), sort_keys=True)

    def _def_canon(self, name: str) -> Any:
        if name in self._canon_memo:
            return self._canon_memo[name]
        if name in self._active or name not in self.defs:
            return {"$cycle": name}
        self._active.add(name)
        try:
            value = self._canon(self.defs[name])
        finally:
            self._active.discard(name)
        self._canon_memo[name] = value
        return value

    def _canon(self, node: Any) -> Any:
        node = _unwrap(node)
        ref = _ref_name(node)
        if ref is not None:
            return self._def_canon(ref)
        if isinstance(node, dict):
            out = {k: self._canon(v) for k, v in node.items() if not _ignored(k)}
            if isinstance(out.get("required"), list):
                out["required"] = sorted(out["required"], key=str)
            # one spelling per meaning: a const implies its type; an enum is a union of
            # consts; oneOf and anyOf are both "one of these variants" here
            if "const" in out:
                out.pop("type", None)
            # a type list is a set (`[integer, null]` is `[null, integer]`), and alone it is
            # the union of its types (`anyOf: [{type: integer}, {type: null}]`)
            types = out.get("type")
            if isinstance(types, list):
                kinds = sorted({str(t) for t in types})
                out["type"] = kinds[0] if len(kinds) == 1 else kinds
                if len(kinds) > 1 and set(out) == {"type"}:
                    out = {"anyOf": [{"type": t} for t in kinds]}
            members = _union(out)
            if members is not None:
                out.pop("oneOf", None)
                if "enum" in out:
                    out.pop("enum")
                    out.pop("type", None)
                # the members are canonical already; their order is no meaning of theirs
                out["anyOf"] = sorted(members, key=lambda m: json.dumps(m, sort_keys=True))
            return out
        if isinstance(node, list):
            return [self._canon(v) for v in node]
        return node


# -- describing a schema -------------------------------------------------------------------


def _type_str(node: Any) -> str:
    node = _unwrap(node)
    ref = _ref_name(node)
    if ref is not None:
        return ref
    if not isinstance(node, dict):
        return "any" if node is True or node is None else "never"
    if "const" in node:
        return json.dumps(node["const"])
    if isinstance(node.get("enum"), list):
        return "enum " + " | ".join(json.dumps(v) for v in node["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            return " | ".join(_type_str(v) for v in _flatten(node[key]))
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "properties" not in node:
        return _type_str(all_of[0])
    t = node.get("type")
    types = t if isinstance(t, list) else [t] if isinstance(t, str) else []
    parts = []
    for one in types:
        if one == "array" and "items" in node:
            parts.append(f"array of {_type_str(node['items'])}")
        else:
            parts.append(str(one))
    if isinstance(node.get("properties"), dict) and (not parts or parts == ["object"]):
        return "object {" + ", ".join(sorted(node["properties"])) + "}"
    return " | ".join(parts) if parts else "any"


def _alternatives(node: Any, shapes: _Shapes) -> set[tuple[str, str | None]]:
    """The shapes a value may take (union members and type-list entries, split), each
    with the definition it names, if it is a reference."""
    node = _top(node)
    if isinstance(node, dict):
        members = _union(node)
        if members is not None and _meaningful(node) <= {"anyOf", "oneOf", "enum", "type"}:
            out: set[tuple[str, str | None]] = set()
            for m in members:
                out |= _alternatives(m, shapes)
            return out
        t = node.get("type")
        if isinstance(t, list) and _meaningful(node) <= {"type"}:
            return {(shapes.of({"type": one}), None) for one in t}
    return {(shapes.of(node), _ref_name(node))}


def _align_refs(a: Any, b: Any) -> tuple[Any, Any]:
    """A bare reference against an extended one (`allOf: [$ref]` + properties): the bare
    one wrapped the same way, so the two compare member by member."""
    if _ref_name(a) is not None and isinstance(b, dict) and isinstance(b.get("allOf"), list):
        a = {"allOf": [a]}
    elif _ref_name(b) is not None and isinstance(a, dict) and isinstance(a.get("allOf"), list):
        b = {"allOf": [b]}
    return a, b


def _union(node: dict[str, Any]) -> list[Any] | None:
    """The variants of a union: anyOf or oneOf members, or an enum's values as consts."""
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            return list(node[key])
    if isinstance(node.get("enum"), list):
        return [{"const": v} for v in node["enum"]]
    return None


def _flatten(members: list[Any]) -> list[Any]:
    """Union members, with bare nested unions (`anyOf: [{anyOf: [...]}, null]`) spliced in."""
    out: list[Any] = []
    for m in members:
        u = _unwrap(m)
        nested = None
        if isinstance(u, dict):
            for key in ("anyOf", "oneOf"):
                if isinstance(u.get(key), list) and _meaningful(u) <= {key}:
                    nested = u[key]
        out.extend(_flatten(nested) if nested is not None else [m])
    return out


def _variant_key(member: Any, tag: str | None) -> str | None:
    member = _unwrap(member)
    if not isinstance(member, dict):
        return None
    if tag is not None:
        prop = (member.get("properties") or {}).get(tag)
        if isinstance(prop, dict) and "const" in prop:
            return f"{tag}={prop['const']}"
    if "const" in member:
        return json.dumps(member["const"])
    ref = _ref_name(member)
    if ref is not None:
        return ref
    if isinstance(member.get("title"), str):
        return str(member["title"])
    all_of = member.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and _ref_name(all_of[0]):
        return _ref_name(all_of[0])
    if member.get("type") == "null":
        return "null"
    return None


def _union_tag(members: list[Any]) -> str | None:
    """The property most members fix with a `const` (the discriminator), if any."""
    counts: dict[str, int] = {}
    for member in members:
        m = _unwrap(member)
        props = m.get("properties") if isinstance(m, dict) else None
        for k, v in (props or {}).items():
            if isinstance(v, dict) and "const" in v:
                counts[k] = counts.get(k, 0) + 1
    if not counts:
        return None
    best = max(sorted(counts), key=lambda k: counts[k])
    return best if counts[best] >= min(2, len(members)) else None


# -- the comparison ------------------------------------------------------------------------


class _Diff:
    def __init__(
        self,
        old: dict[str, Any],
        new: dict[str, Any],
        old_meta: dict[str, Any] | None,
        new_meta: dict[str, Any] | None,
    ) -> None:
        self.old_defs, self.new_defs = _defs(old), _defs(new)
        self.old_shapes, self.new_shapes = _Shapes(self.old_defs), _Shapes(self.new_defs)
        self.old_methods = {(m.side, m.name): m for m in method_table(old, old_meta).methods}
        self.new_methods = {(m.side, m.name): m for m in method_table(new, new_meta).methods}
        self.entries: list[Change] = []
        self.renamed: dict[str, str] = {}  # old def name -> new def name
        self.usage = self._usage()

    def add(self, kind: str, subject: str, detail: str, breaking: bool) -> None:
        self.entries.append(Change(kind, subject, detail, breaking))

    # which methods carry each (new, else old) definition, for context in field entries
    def _usage(self) -> dict[str, list[str]]:
        out: dict[str, set[str]] = {}
        for methods, defs in ((self.old_methods, self.old_defs), (self.new_methods, self.new_defs)):
            for m in methods.values():
                for role, root in (("params", m.params), ("result", m.result)):
                    for name in _reachable(defs, root):
                        out.setdefault(name, set()).add(f"{m.name} {role}")
        return {k: sorted(v) for k, v in out.items()}

    def _where(self, *names: str) -> str:
        used: list[str] = []
        for n in names:
            for u in self.usage.get(n, []):
                if u not in used:
                    used.append(u)
        if not used:
            return ""
        few = 3  # the first few names, then a count
        shown = ", ".join(used[:few]) + (f" and {len(used) - few} more" if len(used) > few else "")
        return f" (in {shown})"

    # methods
    def methods(self) -> None:
        old, new = self.old_methods, self.new_methods
        for key in sorted(old.keys() - new.keys()):
            m = old[key]
            moved = [n for (s, w), n in new.items() if w == m.name]
            if moved:
                n = moved[0]
                self.add("method-changed", m.name, f"side {m.side} -> {n.side}", True)
                continue
            self.add("method-removed", m.name, f"{_describe(m)} removed", True)
        for key in sorted(new.keys() - old.keys()):
            n = new[key]
            if any(w == n.name for (_, w) in old):
                continue  # reported as a side change above
            self.add("method-added", n.name, f"{_describe(n)} added", False)
        for key in sorted(old.keys() & new.keys()):
            self._method_changed(old[key], new[key])

    def _method_changed(self, m: Method, n: Method) -> None:
        if m.kind != n.kind:
            self.add("method-changed", m.name, f"{m.side} {m.kind} -> {n.kind}", True)
        for role, a, b in (("params", m.params, n.params), ("result", m.result, n.result)):
            if a == b or a is None or b is None:
                if a != b:
                    self.add("method-changed", m.name, f"{role} {a or '-'} -> {b or '-'}", True)
                continue
            same = self.old_shapes.of_def(a) == self.new_shapes.of_def(b)
            if a not in self.new_defs and b not in self.old_defs:
                self.renamed.setdefault(a, b)
            how = "same shape" if same else "shape differs"
            self.add("method-changed", m.name, f"{role} type {a} -> {b} ({how})", False)
        if m.unstable != n.unstable:
            was, now = ("unstable", "stable") if m.unstable else ("stable", "unstable")
            self.add("method-changed", m.name, f"{was} -> {now}", False)

    # types
    def types(self) -> None:
        removed = sorted(self.old_defs.keys() - self.new_defs.keys())
        added = sorted(self.new_defs.keys() - self.old_defs.keys())
        by_shape: dict[str, list[str]] = {}
        for name in added:
            by_shape.setdefault(self.new_shapes.of_def(name), []).append(name)
        taken = set(self.renamed.values())
        for name in removed:
            if name in self.renamed:
                continue
            candidates = [
                c
                for c in by_shape.get(self.old_shapes.of_def(name), [])
                if c not in taken and _similar_names(name, c)
            ]
            if len(candidates) == 1:
                self.renamed[name] = candidates[0]
                taken.add(candidates[0])
        for name in removed:
            if name in self.renamed:
                new = self.renamed[name]
                same = self.old_shapes.of_def(name) == self.new_shapes.of_def(new)
                how = "same shape" if same else "shape differs"
                self.add("type-renamed", name, f"renamed to {new} ({how})", False)
            else:
                self.add("type-removed", name, f"removed{self._where(name)}", True)
        for name in added:
            if name not in taken:
                self.add("type-added", name, "added", False)

    # fields
    def fields(self) -> None:
        pairs = [(n, n) for n in sorted(self.old_defs.keys() & self.new_defs.keys())]
        pairs += sorted(self.renamed.items())
        for a, b in pairs:
            if self.old_shapes.of_def(a) == self.new_shapes.of_def(b):
                continue
            self._compare(self.old_defs[a], self.new_defs[b], b, self._where(a, b))

    def _same(self, a: Any, b: Any) -> bool:
        ra, rb = _ref_name(_unwrap(a)), _ref_name(_unwrap(b))
        if ra is not None and rb is not None and (ra == rb or self.renamed.get(ra) == rb):
            return True  # compared on its own as a definition
        return self.old_shapes.of(a) == self.new_shapes.of(b)

    def _compare(self, a: Any, b: Any, path: str, where: str) -> None:
        if self._same(a, b):
            return
        a, b = _align_refs(_unwrap(a), _unwrap(b))
        if (
            _ref_name(a) is not None
            or _ref_name(b) is not None
            or not (isinstance(a, dict) and isinstance(b, dict))
        ):
            self._retyped(a, b, path, where)
            return
        ua, ub = _union(a), _union(b)
        if (
            ua is None
            and ub is not None
            and isinstance(a.get("properties"), dict)
            and not isinstance(b.get("properties"), dict)  # a pure union now
        ):
            self._object_to_union(a, b, ub, path, where)
            return
        self._compare_props(a, b, path, where)
        if ua is not None and ub is not None:  # anyOf and oneOf alike
            self._compare_variants(ua, ub, path, where)
        elif (ua is None) != (ub is None):
            self._retyped(a, b, path, where)
            return
        self._compare_children(a, b, path, where)
        for key in ("type", "const", "format"):
            if key in a and key in b and a[key] != b[key]:
                self._retyped(a, b, path, where)  # breaking unless it only widens
                return

    def _compare_children(
        self, a: dict[str, Any], b: dict[str, Any], path: str, where: str
    ) -> None:
        """The schemas within two compared ones: their `items`, and their `allOf` members
        pairwise when both have as many."""
        if "items" in a and "items" in b:
            self._compare(a["items"], b["items"], f"{path}[]", where)
        all_a, all_b = a.get("allOf"), b.get("allOf")
        if isinstance(all_a, list) and isinstance(all_b, list) and len(all_a) == len(all_b):
            for x, y in zip(all_a, all_b, strict=True):
                self._compare(x, y, path, where)

    def _object_to_union(
        self, a: dict[str, Any], b: dict[str, Any], members: list[Any], path: str, where: str
    ) -> None:
        """An object that became a union: one non-breaking entry when a member has exactly
        the old shape (old values still valid); else the old fields compared against the
        member closest to them (most shared property names)."""
        if _widens(a, b, self):
            self._retyped(a, b, path, where)
            return
        old_props = set(a["properties"])

        def overlap(m: Any) -> int:
            target = _unwrap(m)
            name = _ref_name(target)
            if name is not None:
                target = self.new_defs.get(name)
            props = target.get("properties") if isinstance(target, dict) else None
            return len(old_props & set(props)) if isinstance(props, dict) else -1

        best = max(_flatten(members), key=overlap, default=None)
        if best is None or overlap(best) <= 0:
            self._retyped(a, b, path, where)
            return
        name = _ref_name(_unwrap(best))
        self._compare(a, self.new_defs.get(name) if name else best, path, where)

    def _retyped(self, a: Any, b: Any, path: str, where: str) -> None:
        widened = _widens(a, b, self)
        note = "widened, old values still valid" if widened else "old values may not fit"
        was, now = _type_str(a), _type_str(b)
        # the same type spelled twice says nothing: name what differs (its constraints)
        what = f"type {was} -> {now}"
        if was == now:
            changes = _constraint_changes(a, b)
            what = f"type {was}, " + (", ".join(_say(c) for c in changes) or "shape differs")
        self.add("field-retyped", path, f"{what}: {note}{where}", not widened)

    def _compare_props(self, a: dict[str, Any], b: dict[str, Any], path: str, where: str) -> None:
        pa, pb = a.get("properties"), b.get("properties")
        if not isinstance(pa, dict) or not isinstance(pb, dict):
            if isinstance(pa, dict) != isinstance(pb, dict):
                pa, pb = pa if isinstance(pa, dict) else {}, pb if isinstance(pb, dict) else {}
            else:
                return
        ra, rb = set(a.get("required") or []), set(b.get("required") or [])
        for name in sorted(pa.keys() - pb.keys()):
            req = "required" if name in ra else "optional"
            self.add(
                "field-removed",
                f"{path}.{name}",
                f"removed (was {_type_str(pa[name])}, {req}){where}",
                True,
            )
        for name in sorted(pb.keys() - pa.keys()):
            required = name in rb
            req = "required" if required else "optional"
            self.add(
                "field-added",
                f"{path}.{name}",
                f"added {_type_str(pb[name])}, {req}{where}",
                required,
            )
        for name in sorted(pa.keys() & pb.keys()):
            sub = f"{path}.{name}"
            if name not in ra and name in rb:
                self.add("field-required", sub, f"now required{where}", True)
            elif name in ra and name not in rb:
                self.add("field-optional", sub, f"now optional, may be absent{where}", False)
            self._compare(pa[name], pb[name], sub, where)

    def _compare_variants(self, va: list[Any], vb: list[Any], path: str, where: str) -> None:
        va, vb = _flatten(va), _flatten(vb)
        tag = _union_tag(va + vb)  # one discriminator for both revisions
        keyed_a = _keyed(va, tag, self.renamed)
        keyed_b = _keyed(vb, tag, {})
        if keyed_a is not None and keyed_b is not None:
            _match_aliases(keyed_a, keyed_b, self.renamed)
        if (keyed_a is None or keyed_b is None) and len(va) == len(vb):
            for i, (x, y) in enumerate(zip(va, vb, strict=True)):
                self._compare(x, y, f"{path}[{i}]", where)
            return
        if keyed_a is None or keyed_b is None:
            if self.old_shapes.of(va) != self.new_shapes.of(vb):
                self._retyped({"anyOf": va}, {"anyOf": vb}, path, where)
            return
        for k in sorted(keyed_a.keys() - keyed_b.keys()):
            kind, what = _variant_words(keyed_a[k])
            self.add(f"{kind}-removed", path, f"{what} {k} removed{where}", True)
        for k in sorted(keyed_b.keys() - keyed_a.keys()):
            kind, what = _variant_words(keyed_b[k])
            self.add(f"{kind}-added", path, f"{what} {k} added{where}", False)
        for k in sorted(keyed_a.keys() & keyed_b.keys()):
            self._compare(keyed_a[k], keyed_b[k], f"{path}[{k}]", where)


def _similar_names(a: str, b: str) -> bool:
    """Same shape alone is not a rename (many defs are a bare string): the names must
    share at least half of their words (CancelNotification -> CancelSessionNotification)."""
    wa, wb = words(a), words(b)
    return bool(wa and wb) and len(wa & wb) * 2 >= len(wa | wb)


def _variant_words(member: Any) -> tuple[str, str]:
    """("value", "value") for a bare constant (an enum value), else ("variant", "variant")."""
    m = _unwrap(member)
    if isinstance(m, dict) and "const" in m and not isinstance(m.get("properties"), dict):
        return "value", "value"
    return "variant", "variant"


def _keyed(members: list[Any], tag: str | None, renamed: dict[str, str]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    for m in members:
        key = _variant_key(m, tag)
        if key is None or key in out:
            return None
        out[renamed.get(key, key)] = m
    return out


def _alias(member: Any) -> str | None:
    """A variant's second name: the definition it wraps (`allOf: [$ref]`) or its title."""
    member = _unwrap(member)
    if not isinstance(member, dict):
        return None
    all_of = member.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and _ref_name(all_of[0]):
        return _ref_name(all_of[0])
    return _ref_name(member) or (member["title"] if isinstance(member.get("title"), str) else None)


def _match_aliases(a: dict[str, Any], b: dict[str, Any], renamed: dict[str, str]) -> None:
    """Pair variants whose key changed (`AuthMethodAgent` -> `type=agent`) by alias."""
    only_b = {k: _alias(v) for k, v in b.items() if k not in a}
    for key in sorted(a.keys() - b.keys()):
        alias = _alias(a[key])
        alias = renamed.get(alias, alias) if alias else None
        hits = [k for k, al in only_b.items() if alias is not None and al == alias]
        if len(hits) == 1:
            a[hits[0]] = a.pop(key)
            del only_b[hits[0]]


def _widens(a: Any, b: Any, d: _Diff) -> bool:
    """Every value `a` accepts, `b` accepts (judged on union members and type lists, on
    the value constraints beside them, and on definitions by name: a definition's own
    changes are entries of their own)."""
    if not all(_constraint_widens(*c) for c in _constraint_changes(a, b)):
        return False
    old = _alternatives(_unconstrained(a), d.old_shapes)
    new = _alternatives(_unconstrained(b), d.new_shapes)
    new_shapes = {shape for shape, _ in new}
    new_refs = {ref for _, ref in new if ref is not None}
    return all(
        shape in new_shapes or (ref is not None and d.renamed.get(ref, ref) in new_refs)
        for shape, ref in old
    )


# -- value constraints: what narrows or widens the values of one type ---------------------

_CONSTRAINTS = (
    "format",
    "minimum",
    "exclusiveMinimum",
    "minLength",
    "minItems",
    "maximum",
    "exclusiveMaximum",
    "maxLength",
    "maxItems",
    "pattern",
    "multipleOf",
)
_LOWER = frozenset({"minimum", "exclusiveMinimum", "minLength", "minItems"})
_UPPER = frozenset({"maximum", "exclusiveMaximum", "maxLength", "maxItems"})
# an annotation that changes no accepted value (a definition's default)
_VALUE_NEUTRAL = frozenset({"default", "readOnly", "writeOnly", "deprecated"})
_INT_RANGES = {
    f"{sign}int{bits}": ((0, 2**bits - 1) if sign else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1))
    for sign in ("", "u")
    for bits in (8, 16, 32, 64)
}
_ABSENT = object()


def _top(node: Any) -> Any:
    """`node` without its value-neutral keys, then unwrapped (`allOf: [X]` is X)."""
    if isinstance(node, dict):
        node = {k: v for k, v in node.items() if k not in _VALUE_NEUTRAL}
    return _unwrap(node)


def _unconstrained(node: Any) -> Any:
    node = _top(node)
    if isinstance(node, dict):
        return _unwrap({k: v for k, v in node.items() if k not in _CONSTRAINTS})
    return node


def _constraint_changes(a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    """(keyword, old, new) for each value constraint that differs at the top of a and b
    (`_ABSENT` for a side without it)."""
    a, b = _top(a), _top(b)
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return []
    out = []
    for key in _CONSTRAINTS:
        was, now = a.get(key, _ABSENT), b.get(key, _ABSENT)
        if was != now:
            out.append((key, was, now))
    return out


def _constraint_widens(key: str, was: Any, now: Any) -> bool:
    """Every value the old constraint admits, the new one admits."""
    if now is _ABSENT:
        return True
    if was is _ABSENT:
        return False
    if key == "format" and was in _INT_RANGES and now in _INT_RANGES:
        (lo, hi), (new_lo, new_hi) = _INT_RANGES[was], _INT_RANGES[now]
        return new_lo <= lo and hi <= new_hi
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (was, now))
    if numbers and key in _LOWER:
        return bool(now <= was)
    if numbers and key in _UPPER:
        return bool(now >= was)
    return False


def _say(change: tuple[str, Any, Any]) -> str:
    key, was, now = change
    if was is _ABSENT:
        return f"{key} {json.dumps(now)} added"
    if now is _ABSENT:
        return f"{key} {json.dumps(was)} removed"
    return f"{key} {json.dumps(was)} -> {json.dumps(now)}"


def _reachable(defs: dict[str, Any], root: str | None) -> Iterator[str]:
    if root is None:
        return
    seen: set[str] = set()
    stack = [root]
    while stack:
        name = stack.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        yield name
        stack.extend(schemas.refs(defs[name]))


def _describe(m: Method) -> str:
    handled = "protocol" if m.side == "protocol" else f"{m.side}-side"
    return f"{handled} {m.kind}" + (" (unstable)" if m.unstable else "")


def diff_schemas(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    old_meta: dict[str, Any] | None = None,
    new_meta: dict[str, Any] | None = None,
) -> Report:
    """The revision report from `old` to `new`."""
    d = _Diff(old, new, old_meta, new_meta)
    d.methods()
    d.types()
    d.fields()
    unique = sorted(set(d.entries), key=lambda c: (_section(c), c.subject, c.kind, c.detail))
    return Report(unique)


# -- output --------------------------------------------------------------------------------

_TITLES = {
    "method": "Methods",
    "type": "Types",
    "field": "Fields",
    "value": "Fields",
    "variant": "Fields",
}


def format_text(report: Report) -> str:
    n_break = len(report.breaking_entries())
    lines = [
        f"Protocol revision report: {len(report.entries)} changes, {n_break} breaking",
    ]
    if report.old or report.new:
        lines += [f"  old: {report.old or '-'}", f"  new: {report.new or '-'}"]
    if not report.entries:
        lines.append("No differences.")
    section = None
    for c in report.entries:
        title = _TITLES.get(c.kind.split("-")[0], "Other")
        if title != section:
            lines += ["", title]
            section = title
        mark = "BREAKING" if c.breaking else "        "
        lines.append(f"  {mark}  {c.kind:<16} {c.subject}: {c.detail}")
    return "\n".join(lines) + "\n"


def format_json(report: Report) -> str:
    body: dict[str, Any] = (
        {"old": report.old, "new": report.new} if report.old or report.new else {}
    )
    body |= {
        "breaking": report.breaking,
        "counts": {"changes": len(report.entries), "breaking": len(report.breaking_entries())},
        "entries": [asdict(c) for c in report.entries],
    }
    return json.dumps(body, indent=2) + "\n"


def run_diff(
    old_spec: str, new_spec: str, *, fmt: str = "text", fail_on_breaking: bool = False
) -> int:
    """`agentgen diff OLD NEW`: print the report; exit 0 (the report is the output), or 1
    with `fail_on_breaking` when anything is breaking (CI)."""
    if fmt not in ("text", "json"):
        raise AgentgenError(f"unknown format {fmt!r}", hint="use --format text or --format json")
    from .. import sources

    old = sources.load_schema(old_spec)
    new = sources.load_schema(new_spec)
    try:
        method_table(old.data)
    except AgentgenError as err:
        err.source = err.source or old.origin
        raise
    try:
        report = diff_schemas(old.data, new.data)
    except AgentgenError as err:
        err.source = err.source or new.origin
        raise
    report.old = f"{old.origin} (sha256 {old.sha256[:12]})"
    report.new = f"{new.origin} (sha256 {new.sha256[:12]})"
    failed = fail_on_breaking and report.breaking
    if fmt == "json":
        sys.stdout.write(format_json(report))
        return 1 if failed else 0
    from .. import console

    console.lines(format_text(report), sys.stdout, marks=("BREAKING",))
    n = len(report.breaking_entries())
    console.summary(
        f"{len(report.entries)} change(s), {n} breaking" if report.entries else "no changes",
        ok=not failed,
    )
    return 1 if failed else 0
