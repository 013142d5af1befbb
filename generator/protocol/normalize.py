"""Named passes over a protocol schema's JSON, applied in the order of `PASSES`.

datamodel-code-generator turns what it is given into classes faithfully; what it is
given decides the names and the shapes.  Each pass below rewrites one pattern of the
ACP schemas into one datamodel-code-generator renders well, and says why.  The passes
read the schema's own structure (tags, titles, `$ref`s, formats): no table of names,
so a revision nobody has seen goes through the same way.

`normalize(schema)` returns a new dict; the input is never modified.

Naming rule for a union member that needs its own class (`variant_name`): the PascalCase
of its tag constant (`"agent_message_chunk"` -> `AgentMessageChunk`), else of its title,
else of the required fields only it has (`result` / `error` of a response, `Text` of an
externally tagged enum), else `Known` for an enum of values beside an open member
(`KnownRole`), else of its type (`integer` -> `IntegerRequestId`); when that is
a single word (`Text`) or already taken (`ToolCall` is a definition), the union's name is
appended (`TextContentBlock`, `ToolCallSessionUpdate`); if that is taken too, it is
prepended (`SessionUpdateToolCall`).  Case folders: tests/cases/naming/.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from typing import Any

from .. import schemas
from ..errors import AgentgenError
from ..names import pascal, word_count

Schema = dict[str, Any]

# The keyword our shared base reads on a catch-all member's tag property: the tag values
# that belong to the known members (upstream writes them as a `not` clause).
REFUSED_TAGS = "x-agentgen-refused-tags"
# Marks a tagged union (set by `open_tagged_unions`): its tag property, the member
# class of each tag value and the catch-all member.  models.py renders these unions
# itself, as pydantic unions that dispatch on the tag.
TAGGED_UNION = "x-agentgen-tagged-union"
# On a union: the title upstream gave each member it wrapped as a plain reference
# (`{"title": "agent", "allOf": [{"$ref": ...AuthMethodAgent}]}`), by member name.  A
# tagged union's default member (no tag property) is titled with the tag value it stands
# for; set by `unwrap_reference_members`, read by `open_tagged_unions`.
MEMBER_TITLES = "x-agentgen-member-titles"
# Extension keywords the generated module needs at run time (kept on the fields).
FIELD_EXTRA_KEYS = (
    "x-deserialize-default-on-error",
    "x-deserialize-skip-invalid-items",
    REFUSED_TAGS,
)

_UNION_KEYS = ("oneOf", "anyOf")
_INT_FORMAT = re.compile(r"^(u?)int(\d+)$")
_SCALAR_TYPES = {"string", "integer", "number", "boolean", "null"}


# --------------------------------------------------------------------------- helpers


def defs_of(schema: Schema) -> dict[str, Any]:
    """The schema's `$defs` (a dict; empty when absent)."""
    defs = schema.get("$defs")
    return defs if isinstance(defs, dict) else {}


def walk(node: Any) -> Iterator[Schema]:
    """Every subschema of the document, parents before children (`schemas.walk`)."""
    for _, sub in schemas.walk(node):
        yield sub


def _ref_name(ref: Any) -> str | None:
    return schemas.ref_name(ref)


def _resolve(defs: dict[str, Any], node: Any) -> Any:
    """Follow a `$ref` (one level) to the definition it names."""
    return schemas.resolve({"$defs": defs}, node)


def union_key(node: Schema) -> str | None:
    for key in _UNION_KEYS:
        if isinstance(node.get(key), list):
            return key
    return None


def tag_of(member: Any) -> tuple[str, str] | None:
    """(property, value) of the one property with a string `const` in `member`."""
    if not isinstance(member, dict):
        return None
    props = member.get("properties")
    if not isinstance(props, dict):
        return None
    tags = [
        (p, s["const"])
        for p, s in props.items()
        if isinstance(s, dict) and isinstance(s.get("const"), str)
    ]
    return tags[0] if len(tags) == 1 else None


def _is_scalar(member: Schema) -> bool:
    t = member.get("type")
    types = t if isinstance(t, list) else [t]
    return "properties" not in member and bool(types) and all(x in _SCALAR_TYPES for x in types)


def variant_name(base: str, parent: str, taken: set[str], *, alone: bool = True) -> str:
    """The naming rule of the module docstring (`alone=False`: the union's name is always
    added, for a base made of field names)."""
    candidates = [base] if alone and word_count(base) > 1 else []
    candidates += [base + parent, parent + base]
    for cand in candidates:
        if cand not in taken:
            return cand
    n = 2
    while f"{base}{parent}Variant{n}" in taken:  # pragma: no cover - needs 3 equal names
        n += 1
    return f"{base}{parent}Variant{n}"


# --------------------------------------------------------------------------- passes


def use_defs_keyword(schema: Schema) -> Schema:
    """Draft-07 `definitions` become 2020-12 `$defs` (and `#/definitions/` refs follow).

    Every later pass, and the generated names, read `$defs`; a revision published
    with the older keyword is the same protocol.
    """
    if "$defs" in schema or not schemas.defs(schema):  # nothing under `definitions`
        return schema
    schema["$defs"] = schema.pop("definitions")
    for node in walk(schema):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            node["$ref"] = "#/$defs/" + ref[len("#/definitions/") :]
    return schema


def keep_definitions_only(schema: Schema) -> Schema:
    """Drop the document-level message union: classes come from `$defs` only.

    The root `anyOf` describes the JSON-RPC envelope (requests, responses, notifications
    of either side) with inline, untitled branches that would become numbered classes;
    the typed dispatcher works per method, on the `$defs` types the method table names.
    """
    out: Schema = {k: v for k, v in schema.items() if k in ("$schema", "$id", "$defs")}
    # the document itself still becomes one (empty) class: give it a name no
    # definition has, or the generator would number the definition
    title = schema.get("title")
    name = pascal(title) if isinstance(title, str) and title.strip() else "Protocol"
    while name in defs_of(schema):
        name += "Document"
    out["title"] = name
    return out


def bound_integer_formats(schema: Schema) -> Schema:
    """`format: uint16/uint32/uint64/int32/int64...` -> `minimum`/`maximum`.

    datamodel-code-generator does not know these (Rust-style) formats and would emit
    a bare `int`; the range is what the format means on the wire (a u16 port, a u64
    counter), so it becomes `Field(ge=..., le=...)`.
    """
    for node in walk(schema):
        fmt = node.get("format")
        if not isinstance(fmt, str):
            continue
        m = _INT_FORMAT.match(fmt)
        if not m or int(m.group(2)) not in (8, 16, 32, 64, 128):
            continue
        if "const" in node or "enum" in node:  # a constant needs no range
            del node["format"]
            continue
        bits = int(m.group(2))
        lo, hi = (0, 2**bits - 1) if m.group(1) else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        cur_lo = node.get("minimum")
        cur_hi = node.get("maximum")
        node["minimum"] = max(lo, cur_lo) if isinstance(cur_lo, int | float) else lo
        node["maximum"] = min(hi, cur_hi) if isinstance(cur_hi, int | float) else hi
        del node["format"]
    return schema


def reference_beside_properties(schema: Schema) -> Schema:
    """`{"$ref": X, "properties": {...}}` becomes `{"allOf": [{"$ref": X}], "properties": ...}`.

    Early revisions extend a definition by writing properties next to its `$ref` (a tag
    added to `ToolCall` in a union member); in 2020-12 both apply, which is what `allOf`
    says.  datamodel-code-generator reads a `$ref` as the whole schema and would drop the
    properties, or number a class for the member; as `allOf` the member is a subclass
    with the extra fields, named by the rule of the module docstring.
    """
    for node in walk(schema):
        if isinstance(node.get("$ref"), str) and ("properties" in node or "required" in node):
            all_of = node.get("allOf")
            bases: list[Any] = all_of if isinstance(all_of, list) else []
            node["allOf"] = [{"$ref": node.pop("$ref")}, *bases]
    return schema


def alias_wrapped_definitions(schema: Schema) -> Schema:
    """A definition that is only `allOf: [{$ref: X}]` (plus annotations), X a union, is
    `$ref: X` (an object X stays a subclass: `InitializeProxyRequest(InitializeRequest)`).

    Early revisions name envelope aliases that way (`AgentOutgoingMessage` =
    `JsonRpcMessage`); when X is a union, datamodel-code-generator would build numbered
    classes (`AgentOutgoingMessage1..4`) to combine the wrapper with every member; as a
    reference it is a root model of the union.
    """
    for name, node in defs_of(schema).items():
        if not isinstance(node, dict):
            continue
        bases = node.get("allOf")
        rest = {k for k in node if k != "allOf" and not k.startswith("x-")}
        if (
            isinstance(bases, list)
            and len(bases) == 1
            and isinstance(bases[0], dict)
            and set(bases[0]) == {"$ref"}
            and rest <= {"title", "description", "$comment"}
            and _ref_name(bases[0]["$ref"]) not in (None, name)
            and union_key(_resolve(defs_of(schema), bases[0])) is not None  # of a union only
        ):
            del node["allOf"]
            node["$ref"] = bases[0]["$ref"]
    return schema


def unwrap_reference_members(schema: Schema) -> Schema:
    """A union member that is only `allOf: [{$ref: X}]` (plus a title/description) is `X`.

    Upstream wraps plain references to carry a doc title (`"title": "SessionNotification"`);
    left wrapped, each becomes a pointless subclass with a generated name.
    """
    for node in walk(schema):
        key = union_key(node)
        if key is None:
            continue
        for i, member in enumerate(node[key]):
            if (
                isinstance(member, dict)
                and set(member) <= {"allOf", "title", "description"}
                and isinstance(member.get("allOf"), list)
                and len(member["allOf"]) == 1
                and isinstance(member["allOf"][0], dict)
                and set(member["allOf"][0]) == {"$ref"}
            ):
                ref = member["allOf"][0]["$ref"]
                node[key][i] = {"$ref": ref}
                name = _ref_name(ref)
                if isinstance(member.get("title"), str) and name is not None:
                    node.setdefault(MEMBER_TITLES, {})[name] = member["title"]
    return schema


def merge_untagged_alternatives(schema: Schema) -> Schema:
    """An object with properties plus a union of *untagged* object alternatives
    (e.g. "tied to a session" or "tied to a request") becomes one object carrying all
    their properties; those required by every alternative stay required.

    Nothing on the wire says which alternative a message is, so a generated union of
    them would guess; one object validates every such message and dumps it unchanged.
    """
    defs = defs_of(schema)
    for node in walk(schema):
        key = union_key(node)
        if key is None or not isinstance(node.get("properties"), dict):
            continue
        members = [_resolve(defs, m) for m in node[key]]
        if not members or not all(
            isinstance(m, dict)
            and isinstance(m.get("properties"), dict)
            and union_key(m) is None
            and tag_of(m) is None
            and "allOf" not in m
            for m in members
        ):
            continue
        props = node["properties"]
        required_sets = []
        for m in members:
            for name, sub in m["properties"].items():
                props.setdefault(name, copy.deepcopy(sub))
            required_sets.append(set(m.get("required") or []))
        common = set.intersection(*required_sets) if required_sets else set()
        req = list(node.get("required") or [])
        node["required"] = req + sorted(common - set(req))
        del node[key]
        for extra in ("not", "unevaluatedProperties"):
            node.pop(extra, None)
    return schema


def _required_names(member: Schema) -> list[str]:
    req = member.get("required")
    return [r for r in req if isinstance(r, str)] if isinstance(req, list) else []


def _member_base(member: Schema, members: list[Any]) -> str | None:
    """The name an inline union member goes by, before the union's name is added: its
    tag constant, else its title, else the required fields only it has (`result` /
    `error` of a response; `Text` / `Image` of an externally tagged enum), else all its
    required fields, else its property names."""
    tag = tag_of(member)
    if tag is not None:
        return pascal(tag[1])
    title = member.get("title")
    if isinstance(title, str) and title.strip():
        return pascal(title)
    own = _required_names(member)
    others = [set(_required_names(m)) for m in members if isinstance(m, dict) and m is not member]
    common = set.intersection(*others) if others else set()
    for names in ([r for r in own if r not in common], own):
        if names:
            return "".join(pascal(n) for n in names)
    props = member.get("properties")
    if isinstance(props, dict) and props:
        return "".join(pascal(str(n)) for n in props)
    return None


def name_union_variants(schema: Schema) -> Schema:
    """Inline object members of a definition's union become named definitions.

    Names follow the rule of the module docstring (tag constant, else title, else the
    member's own required fields), so no class is numbered (`SessionUpdate4`).  When the definition also has properties of
    its own (fields shared by every variant, e.g. `SessionConfigOption.id`), each
    variant gets them and the definition becomes the plain union.
    """
    defs = defs_of(schema)
    taken = set(defs)
    for parent in sorted(defs):
        node = defs[parent]
        if not isinstance(node, dict):
            continue
        key = union_key(node)
        if key is None:
            continue
        shared = node.get("properties") if isinstance(node.get("properties"), dict) else None
        new_members: list[Any] = []
        for member in node[key]:
            if not isinstance(member, dict) or "$ref" in member or _is_scalar(member):
                new_members.append(member)
                continue
            if "properties" not in member and "allOf" not in member:
                new_members.append(member)
                continue
            base = _member_base(member, node[key])
            if base is None:
                new_members.append(member)
                continue
            named = tag_of(member) is not None or isinstance(member.get("title"), str)
            name = variant_name(base, parent, taken, alone=named)
            taken.add(name)
            variant = {k: v for k, v in member.items() if k != "title"}
            variant["type"] = "object"
            if shared is not None:
                props = copy.deepcopy(shared)
                props.update(variant.get("properties") or {})
                variant["properties"] = props
                req = list(node.get("required") or [])
                req += [r for r in variant.get("required") or [] if r not in req]
                variant["required"] = req
            variant["title"] = name
            defs[name] = variant
            new_members.append({"$ref": schemas.def_ref(name)})
        node[key] = new_members
        if shared is not None and all(isinstance(m, dict) and "$ref" in m for m in new_members):
            for k in ("properties", "required", "type", "additionalProperties"):
                node.pop(k, None)
    return schema


def name_colliding_inline_objects(schema: Schema) -> Schema:
    """An inline object property whose class name would be taken becomes a definition
    named after its property and its definition (`toolCall` in `ToolCallUpdate` ->
    `ToolCallToolCallUpdate`).

    datamodel-code-generator names an inline object after its property; when a
    definition (or another inline object) already has that name, one of them is
    numbered (`ToolCall1`), and it may be the definition.
    """
    defs = defs_of(schema)
    found: dict[str, list[tuple[str, Schema, str]]] = {}  # class name -> (owner, parent, prop)
    for owner in sorted(defs):
        for _, node in schemas.walk(defs[owner]):
            props = node.get("properties")
            if not isinstance(props, dict):
                continue
            for prop, sub in props.items():
                if (
                    isinstance(sub, dict)
                    and isinstance(sub.get("properties"), dict)
                    and "$ref" not in sub
                    and union_key(sub) is None
                ):
                    found.setdefault(pascal(str(prop)), []).append((owner, node, prop))
    taken = set(defs)
    for cls in sorted(found):
        places = found[cls]
        if cls not in taken and len(places) == 1:
            continue
        for owner, parent, prop in places:
            name = variant_name(pascal(str(prop)), owner, taken)
            taken.add(name)
            defs[name] = parent["properties"][prop] | {"title": name}
            parent["properties"][prop] = {"$ref": schemas.def_ref(name)}
    return schema


def _member_props(defs: dict[str, Any], member: Any) -> dict[str, Any] | None:
    target = _resolve(defs, member)
    if not isinstance(target, dict):
        return None
    props = target.get("properties")
    return props if isinstance(props, dict) else None


MAX_TAG_DEPTH = 16  # nested unions followed to find a member's tag


def _member_tag(defs: dict[str, Any], member: Any, depth: int = 0) -> tuple[str, str] | None:
    """The tag of a union member: its own, or the one all members of a nested union share."""
    target = _resolve(defs, member)
    if not isinstance(target, dict) or depth > MAX_TAG_DEPTH:  # a union of itself has no tag
        return None
    tag = tag_of(target)
    if tag is not None:
        return tag
    key = union_key(target)
    if key is None or "properties" in target or not target[key]:
        return None
    tags = {_member_tag(defs, m, depth + 1) for m in target[key]}
    if len(tags) == 1:
        return tags.pop()
    return None


def open_tagged_unions(schema: Schema) -> Schema:
    """Every tagged union accepts a variant it does not know, as a catch-all member.

    A union whose object members carry a constant on one tag property (`sessionUpdate`,
    `type`...) is open by the protocol's extensibility rules: a v1.21 peer must keep
    working when a v1.22 peer sends a new update kind.  Upstream already spells the
    catch-all in newer revisions (the `other` member, whose tag is any string but the
    known ones); older ones get the same member.  The catch-all's tag refuses the known
    values (`x-agentgen-refused-tags`, checked by the generated base class) so a known
    variant with bad fields is an error, not an "unknown" message, and it keeps every
    field (`additionalProperties`), so it dumps back unchanged.

    A member without the tag property at all is the union's *default* (v1 `AuthMethod`:
    "when no `type` is present, the method is treated as `agent`"): a message without
    the tag goes there, and so does the tag value upstream titles it with (`agent`); an
    unknown tag still goes to the catch-all, never to the default.

    The union loses its `discriminator` (pydantic's needs a constant on every member);
    the generated union dispatches on the tag itself (models.py).
    """
    defs = defs_of(schema)
    taken = set(defs)
    for parent in sorted(defs):
        _open_union(defs, taken, parent)
    return schema


def _ref_members(node: Any) -> list[Any] | None:
    """The members of a union definition whose members are all `$ref`s; None for any
    other definition."""
    if not isinstance(node, dict) or "properties" in node:
        return None
    key = union_key(node)
    if key is None:
        return None
    members: list[Any] = node[key]
    if not all(isinstance(m, dict) and "$ref" in m for m in members) or len(members) < 1:
        return None
    return members


def _sort_members(
    defs: dict[str, Any], members: list[Any]
) -> tuple[list[tuple[str, str, str]], list[str], bool]:
    """(property, value, member name) of each tagged member, the names of the untagged
    object members, and whether some member is neither."""
    tagged: list[tuple[str, str, str]] = []  # (property, value, member name)
    untagged_objects: list[str] = []
    untagged = False
    for m in members:
        mname = _ref_name(m["$ref"]) or ""
        tag = _member_tag(defs, m)
        if tag is not None:
            tagged.append((tag[0], tag[1], mname))
        elif _member_props(defs, m) is not None:
            untagged_objects.append(mname)
        else:
            untagged = True
    return tagged, untagged_objects, untagged


def _tag_property(tagged: list[tuple[str, str, str]]) -> str | None:
    """The one tag property all tagged members share, each with its own value; else None."""
    prop = tagged[0][0]
    if any(t[0] != prop for t in tagged):
        return None
    if len({t[1] for t in tagged}) != len(tagged):  # one tag value, several shapes
        return None
    return prop


def _split_untagged(
    defs: dict[str, Any], untagged_objects: list[str], prop: str
) -> tuple[list[str], list[str]] | None:
    """(catch-alls, defaults) among the untagged object members: an untagged member whose
    tag property is a plain string is upstream's catch-all, one without the tag property
    is the default.  None unless there is at most one of each and nothing else."""
    catch_all = [n for n in untagged_objects if _tag_is_open_string(defs[n], prop)]
    defaults = [
        n
        for n in untagged_objects
        if prop not in (_member_props(defs, {"$ref": schemas.def_ref(n)}) or {})
    ]
    if (
        len(catch_all) > 1
        or len(defaults) > 1
        or len(catch_all) + len(defaults) != len(untagged_objects)
    ):
        return None
    return catch_all, defaults


def _union_tags(
    node: dict[str, Any], tagged: list[tuple[str, str, str]], default: str | None
) -> dict[str, str]:
    """Tag value -> member name, with the value the default member is titled with."""
    tags = {value: name for _, value, name in tagged}
    if default is not None:
        title = (node.get(MEMBER_TITLES) or {}).get(default)
        if isinstance(title, str) and title and title not in tags and title == title.strip():
            tags[title] = default  # the tag value the default stands for
    return tags


def _new_catch_all(
    defs: dict[str, Any], taken: set[str], parent: str, prop: str, members: list[Any]
) -> tuple[str, Schema]:
    """A new catch-all member of `parent`: any tag string, every field kept."""
    other_name = variant_name("Other", parent, taken)
    taken.add(other_name)
    other = {
        "title": other_name,
        "description": (
            f"A `{parent}` variant this revision does not know (a newer peer or an "
            "extension): every field is kept as it came."
        ),
        "type": "object",
        "properties": {prop: {"type": "string"}},
        "required": [prop],
        "additionalProperties": True,
    }
    defs[other_name] = other
    members.append({"$ref": schemas.def_ref(other_name)})
    return other_name, other


def _open_union(defs: dict[str, Any], taken: set[str], parent: str) -> None:
    """Open the definition `parent` if it is a tagged union (see open_tagged_unions)."""
    node = defs[parent]
    members = _ref_members(node)
    if members is None:
        return
    tagged, untagged_objects, untagged = _sort_members(defs, members)
    if not tagged or untagged:
        return
    prop = _tag_property(tagged)
    if prop is None:
        return
    split = _split_untagged(defs, untagged_objects, prop)
    if split is None:
        return
    catch_all, defaults = split
    default = defaults[0] if defaults else None
    tags = _union_tags(node, tagged, default)
    known = sorted(tags)
    if catch_all:
        other_name = catch_all[0]
        other = defs[other_name]
    else:
        other_name, other = _new_catch_all(defs, taken, parent, prop, members)
    other["properties"][prop][REFUSED_TAGS] = known
    other["additionalProperties"] = True
    for extra in ("not", "unevaluatedProperties"):
        other.pop(extra, None)
    node.pop("discriminator", None)
    node[TAGGED_UNION] = {
        "property": prop,
        "tags": tags,
        "other": other_name,
        "default": default,
    }


def _tag_is_open_string(member: Any, prop: str) -> bool:
    """Whether `member`'s tag property takes any string (upstream's `other` member)."""
    props = member.get("properties") if isinstance(member, dict) else None
    tag = props.get(prop) if isinstance(props, dict) else None
    return isinstance(tag, dict) and tag.get("type") == "string" and "const" not in tag


def _union_base(defs: dict[str, Any], member: Any) -> tuple[str, Schema, list[Any], Schema] | None:
    """(variant name, variant, its allOf, the one union among its bases) for a tagged
    union member built on a union; None for any other member."""
    vname = _ref_name(member.get("$ref")) if isinstance(member, dict) else None
    variant = defs.get(vname) if vname else None
    if not vname or not isinstance(variant, dict) or tag_of(variant) is None:
        return None
    bases = variant.get("allOf")
    if not isinstance(bases, list):
        return None
    unions = [
        _resolve(defs, b)
        for b in bases
        if isinstance(b, dict)
        and isinstance(_resolve(defs, b), dict)
        and "properties" not in _resolve(defs, b)
        and union_key(_resolve(defs, b)) is not None
    ]
    return (vname, variant, bases, unions[0]) if len(unions) == 1 else None


def distribute_tags_over_union_bases(schema: Schema) -> Schema:
    """A tagged variant built on a union (`state_update` = tag + one of the
    `StateUpdate` shapes) becomes a union of one tagged variant per shape.

    A class cannot inherit from a union; datamodel-code-generator would number the
    combinations (`StateUpdateSessionUpdate2`).  Each combination is named by the rule
    of the module docstring from the shape's name and the outer union's name
    (`RunningStateUpdateSessionUpdate`), and keeps the tag.
    """
    defs = defs_of(schema)
    taken = set(defs)
    for parent in sorted(defs):
        node = defs[parent]
        if not isinstance(node, dict) or "properties" in node:
            continue
        key = union_key(node)
        if key is None:
            continue
        shared_bases: dict[int, int] = {}  # id(base union) -> variants built on it
        for member in node[key]:
            found = _union_base(defs, member)
            if found is not None:
                shared_bases[id(found[3])] = shared_bases.get(id(found[3]), 0) + 1
        for member in node[key]:
            found = _union_base(defs, member)
            if found is None:
                continue
            vname, variant, bases, base_union = found
            unions = [b for b in bases if _resolve(defs, b) is base_union]
            shapes = base_union[union_key(base_union) or "anyOf"]
            if not all(isinstance(s, dict) and _ref_name(s.get("$ref")) for s in shapes):
                continue
            refs = []
            inner = base_union.get(TAGGED_UNION)
            by_shape: dict[str, str] = {}
            for shape in shapes:
                shape_name = _ref_name(shape["$ref"]) or ""
                # several tagged variants on one base union (`userMessage` and
                # `agentMessage`, each a `ContentBlock`) tell their shapes apart by
                # the variant's own name
                outer = vname if shared_bases.get(id(base_union), 0) > 1 else parent
                name = variant_name(shape_name, outer or parent, taken)
                taken.add(name)
                combo = {k: copy.deepcopy(v) for k, v in variant.items() if k != "allOf"}
                combo["allOf"] = [b for b in bases if b is not unions[0]] + [
                    {"$ref": shape["$ref"]}
                ]
                combo["title"] = name
                shape_def = _resolve(defs, shape)
                if isinstance(shape_def, dict) and isinstance(shape_def.get("description"), str):
                    combo["description"] = shape_def["description"]
                defs[name] = combo
                by_shape[shape_name] = name
                refs.append({"$ref": schemas.def_ref(name)})
            combined: Schema = {k: v for k, v in variant.items() if k in ("description", "title")}
            combined["anyOf"] = refs
            if isinstance(inner, dict):
                combined[TAGGED_UNION] = {
                    "property": inner["property"],
                    "tags": {t: by_shape[n] for t, n in inner["tags"].items() if n in by_shape},
                    "other": by_shape.get(inner["other"]),
                    "default": by_shape.get(inner.get("default") or ""),
                }
            defs[vname or ""] = combined
    return schema


def name_constrained_scalar_members(schema: Schema) -> Schema:
    """A scalar or array union member with constraints (an int64 range, `minItems`) or a
    set of values (`enum`) becomes a named definition, named by its title (`"title":
    "Number"`), else `Known` for an enum (the known values of an open enum: `Role` =
    `KnownRole | str`), else by its type.

    datamodel-code-generator gives a constrained scalar inside a union its own class,
    numbered after the union (`RequestId1`); named by the rule of the module docstring
    it is `NumberRequestId` (titled) or `IntegerRequestId` (untitled).
    """
    defs = defs_of(schema)
    taken = set(defs)
    constraints: tuple[str, ...] = (
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "pattern",
    )
    constraints += ("minLength", "maxLength", "multipleOf", "format")
    constraints += ("minItems", "maxItems", "uniqueItems")
    for parent in sorted(defs):
        node = defs[parent]
        if not isinstance(node, dict):
            continue
        key = union_key(node)
        if key is None:
            continue
        for i, member in enumerate(node[key]):
            if not (
                isinstance(member, dict)
                and (_is_scalar(member) or (member.get("type") == "array" and "$ref" not in member))
            ):
                continue
            enum = isinstance(member.get("enum"), list)
            if not enum and not any(c in member for c in constraints):
                continue
            title = member.get("title")
            if isinstance(title, str) and title.strip():
                base = pascal(title)
            elif enum:  # the known values of an open enum: `KnownRole` beside `str`
                base = "Known"
            else:  # named by its type: `IntegerErrorCode`, `StringRequestId`
                kinds = member.get("type")
                kinds = kinds if isinstance(kinds, list) else [kinds]
                base = "".join(pascal(str(k)) for k in kinds if k != "null") or "Value"
            name = variant_name(base, parent, taken)
            taken.add(name)
            defs[name] = {k: v for k, v in member.items() if k != "title"} | {"title": name}
            node[key][i] = {"$ref": schemas.def_ref(name)}
    return schema


def _refers_to_definition(node: Schema) -> bool:
    if "$ref" in node:
        return True
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(node.get(key), list) and any(
            isinstance(m, dict) and "$ref" in m for m in node[key]
        ):
            return True
    return False


def describe_model_defaults(schema: Schema) -> Schema:
    """An object `default` on a property typed by a definition moves into its description.

    The generated field would be `caps: AgentCapabilities | None = {"loadSession": False}`:
    a dict where a model is declared, which mypy rejects.  The default stays visible
    (documentation) and the wire is unchanged: absent stays absent.
    """
    import json

    for node in walk(schema):
        props = node.get("properties")
        if not isinstance(props, dict):
            continue
        for sub in props.values():
            if (
                isinstance(sub, dict)
                and isinstance(sub.get("default"), dict)
                and _refers_to_definition(sub)
            ):
                default = json.dumps(sub.pop("default"), sort_keys=True)
                desc = sub.get("description")
                note = f"Default when absent: `{default}`."
                sub["description"] = f"{desc}\n\n{note}" if isinstance(desc, str) else note
    return schema


def drop_validation_only_keywords(schema: Schema) -> Schema:
    """Remove `not` and `unevaluatedProperties` left anywhere.

    They only narrow what validates (the catch-all clauses handled above); the
    generator cannot express them and would otherwise warn or guess.
    """
    for node in walk(schema):
        if isinstance(node.get("not"), dict):
            del node["not"]
        if isinstance(node.get("unevaluatedProperties"), bool):
            del node["unevaluatedProperties"]
    return schema


def ascii_look_alikes_in_text(schema: Schema) -> Schema:
    """Descriptions and titles lose the Unicode look-alikes of ASCII punctuation.

    Upstream prose has typographic marks (`isn\u2019t`: a right single quotation mark, a
    no-break space); they land in the models module's docstrings and `description=`
    strings, where the project's `ruff check` (RUF001, RUF002) fails on a fresh project.
    They become the ASCII mark they stand for; other text (letters, an em dash) is kept,
    and no wire value (`const`, `enum`, `default`) is touched.
    """
    schemas.plain_descriptions(schema)
    return schema


Pass = Callable[[Schema], Schema]

PASSES: list[Pass] = [
    use_defs_keyword,
    keep_definitions_only,
    bound_integer_formats,
    reference_beside_properties,
    alias_wrapped_definitions,
    unwrap_reference_members,
    merge_untagged_alternatives,
    name_union_variants,
    name_constrained_scalar_members,
    name_colliding_inline_objects,
    open_tagged_unions,
    distribute_tags_over_union_bases,
    describe_model_defaults,
    drop_validation_only_keywords,
    ascii_look_alikes_in_text,
]


def normalize(schema: Schema, *, source: str = "the ACP schema") -> Schema:
    """Apply `PASSES` in order to a deep copy of `schema`."""
    if not isinstance(schema, dict) or not any(
        isinstance(schema.get(key), dict) for key in schemas.DEF_KEYS
    ):
        raise AgentgenError(
            "not a protocol schema: no `$defs` object",
            source=source,
            pointer="/$defs",
            hint="give ACP's schema.json",
        )
    out = copy.deepcopy(schema)
    for step in PASSES:
        out = step(out)
    return out
