"""The manifest checks a JSON Schema cannot express.

`semantic_problems(data)` yields `(pointer, message, at_key)` for: unique error codes
outside JSON-RPC's reserved range, unique names/ids (errors, interrupts, providers,
config options), provider defaults among the supported API types, conversation states
(initial exists, every `next` exists, every state reachable, no ambiguous message), config
defaults valid against the option and the config schema, every `$ref` of an embedded
schema resolving, and embedded schemas being valid JSON Schemas. Each check skips parts
whose shape is wrong: schema validation reports those.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from .. import schemas
from ..names import pascal
from ..pointer import from_fragment, resolve
from ..schemas import walk
from .llm import MODEL_OPTION, THOUGHT_OPTION, model_id_problem
from .positions import child

Problem = tuple[str, str, bool]

RESERVED = (-32768, -32000)


def _items(data: dict[str, Any], key: str, base: str = "") -> list[tuple[str, dict[str, Any]]]:
    """(pointer, item) of the mappings in the list `data[key]`; [] when it is no list."""
    value = data.get(key)
    if not isinstance(value, list):
        return []
    return [(f"{base}/{key}/{i}", v) for i, v in enumerate(value) if isinstance(v, dict)]


def _unique(
    items: list[tuple[str, dict[str, Any]]],
    field: str,
    what: str,
    norm: Callable[[Any], Any] = lambda v: v,
) -> Iterator[Problem]:
    seen: dict[Any, str] = {}
    for pointer, item in items:
        value = item.get(field)
        if not isinstance(value, str | int) or isinstance(value, bool):
            continue
        key = norm(value)
        if key in seen:
            yield child(pointer, field), f"duplicate {what} {value!r} (also at {seen[key]})", False
        else:
            seen[key] = pointer
    return


def _class_name(name: Any) -> str:
    return pascal(str(name), digit_prefix="", empty="")


def errors(data: dict[str, Any]) -> Iterator[Problem]:
    items = _items(data, "errors")
    yield from _unique(items, "code", "error code")
    yield from _unique(items, "name", "error name")
    low, high = RESERVED
    for pointer, item in items:
        code = item.get("code")
        if isinstance(code, int) and not isinstance(code, bool) and low <= code <= high:
            yield (
                child(pointer, "code"),
                f"error code {code} is in JSON-RPC's reserved range {low}..{high}",
                False,
            )


# directories a project keeps beside its package, and the distributions a generated
# project imports: a package of that name would shadow them
RESERVED_PACKAGES = frozenset(
    {"tests", "test", "build", "dist", "docs"}
    | {"pydantic", "pydantic_core", "orjson", "starlette", "uvicorn", "httpx", "websockets"}
    | {"pytest", "typing_extensions", "anyio", "agentgen", "generator"}
)


def package_problem(name: str) -> str | None:
    """Why the project name `name` cannot be a Python package, or None.

    The one rule `validate` and `new` share: `new` makes `name` with `-` as `_` the
    package of the project (and `<package>_client` the client's)."""
    import keyword
    import sys

    pkg = name.replace("-", "_")
    if keyword.iskeyword(pkg) or keyword.issoftkeyword(pkg):
        why = "a Python keyword"
    elif pkg in sys.stdlib_module_names:
        why = "a standard-library module"
    elif pkg in RESERVED_PACKAGES:
        why = "a directory or library a generated project uses"
    elif not pkg.isidentifier() or pkg.startswith("_"):
        why = "not a Python identifier"
    else:
        return None
    return f"the name {name!r} makes the package {pkg!r}, which is {why}; choose another name"


def package_name(data: dict[str, Any]) -> Iterator[Problem]:
    name = data.get("name")
    if isinstance(name, str) and re.fullmatch(r"[a-z][a-z0-9-]*", name):
        problem = package_problem(name)
        if problem:
            yield "/name", problem, False


def names(data: dict[str, Any]) -> Iterator[Problem]:
    yield from _unique(_items(data, "interrupts"), "name", "interrupt name", _class_name)
    providers = _items(data, "providers")
    yield from _unique(providers, "id", "provider id")
    for pointer, item in providers:
        default, supported = item.get("default"), item.get("supported")
        if isinstance(default, dict) and isinstance(supported, list):
            api = default.get("api_type")
            if isinstance(api, str) and api not in supported:
                yield (
                    f"{pointer}/default/api_type",
                    f"default api_type {api!r} is not among the supported: "
                    + ", ".join(map(str, supported)),
                    False,
                )
    config = data.get("config")
    if isinstance(config, dict):
        yield from _unique(_items(config, "options", "/config"), "id", "config option id")


def commands_and_modes(data: dict[str, Any]) -> Iterator[Problem]:
    """Command names and mode ids are unique, one mode at most is the default, and no
    config option is called `mode` when the agent has modes (they are served as that
    option where the revision has no session modes)."""
    yield from _unique(_items(data, "commands"), "name", "command name")
    modes = _items(data, "modes")
    yield from _unique(modes, "id", "mode id")
    defaults = [pointer for pointer, m in modes if m.get("default") is True]
    for pointer in defaults[1:]:
        yield f"{pointer}/default", "only one mode can be the default", False
    config = data.get("config")
    if modes and isinstance(config, dict):
        for pointer, opt in _items(config, "options", "/config"):
            if opt.get("id") == "mode":
                yield (
                    f"{pointer}/id",
                    (
                        "the config option id 'mode' is taken by the agent's modes "
                        "(served as that option where the revision has no session modes)"
                    ),
                    False,
                )


def llm(data: dict[str, Any]) -> Iterator[Problem]:
    """`llm.provider` names a provider of the manifest, one the model can speak to
    (openai, anthropic); `llm.models` lists each model once, `llm.default_model` among
    them, and `llm.default_reasoning_level` is among `llm.reasoning_levels`; a `model`
    config option declared by hand lists `llm.default_model`, and none is declared beside
    the `llm` key that makes it (`models`: the option `model`, `reasoning_levels`:
    `thought_level`); every model id is pydantic-ai's `provider:model` (or `test`)."""
    block = data.get("llm")
    if not isinstance(block, dict):
        return
    yield from _llm_provider(data, block.get("provider"))
    yield from _llm_model_ids(block)
    yield from _llm_models(block)
    yield from _llm_reasoning(block)
    default = block.get("default_model")
    config = data.get("config")
    if not isinstance(config, dict):
        return
    made = {MODEL_OPTION: "models", THOUGHT_OPTION: "reasoning_levels"}
    for pointer, opt in _items(config, "options", "/config"):
        key = made.get(str(opt.get("id")))
        if key is not None and block.get(key):
            message = f"the config option {opt['id']!r} is the one `llm.{key}` makes"
            yield f"{pointer}/id", message + ": declare one or the other", False
            continue
        values = opt.get("values")
        if opt.get("id") != MODEL_OPTION or not isinstance(values, list):
            continue
        if isinstance(default, str) and default not in values:
            yield f"{pointer}/values", f"the model picker does not list {default!r}", False


def _llm_provider(data: dict[str, Any], provider: Any) -> Iterator[Problem]:
    if not isinstance(provider, str):
        return
    providers = {p.get("id"): p for _, p in _items(data, "providers")}
    if provider not in providers:
        have = ", ".join(sorted(str(k) for k in providers)) or "none"
        yield "/llm/provider", f"no provider {provider!r} in `providers` ({have})", False
        return
    spoken = [s for s in providers[provider].get("supported") or () if s in MODEL_APIS]
    if not spoken:
        apis = ", ".join(MODEL_APIS)
        message = f"provider {provider!r} supports none of the API types a model speaks ({apis})"
        yield "/llm/provider", message, False


def _llm_model_ids(block: dict[str, Any]) -> Iterator[Problem]:
    """`llm.default_model` and each of `llm.models` is a pydantic-ai `provider:model` id."""
    found = [("/llm/default_model", block.get("default_model"))]
    for i, item in enumerate(
        block.get("models") or () if isinstance(block.get("models"), list) else ()
    ):
        found.append(
            (
                f"/llm/models/{i}/id" if isinstance(item, dict) else f"/llm/models/{i}",
                item.get("id") if isinstance(item, dict) else item,
            )
        )
    for where, model in found:
        problem = model_id_problem(model) if isinstance(model, str) and model else None
        if problem is not None:
            yield where, problem, False


def _llm_models(block: dict[str, Any]) -> Iterator[Problem]:
    models = block.get("models")
    if not isinstance(models, list):
        return
    seen: dict[str, str] = {}
    for i, item in enumerate(models):
        where = f"/llm/models/{i}"
        model = item.get("id") if isinstance(item, dict) else item
        if isinstance(item, dict):
            where += "/id"
        if not isinstance(model, str):
            continue
        if model in seen:
            yield where, f"duplicate model {model!r} (also at {seen[model]})", False
        else:
            seen[model] = where
    default = block.get("default_model")
    if seen and isinstance(default, str) and default not in seen:
        listed = ", ".join(seen)
        yield (
            "/llm/default_model",
            f"{default!r} is not among `llm.models` ({listed}): add it there or pick one of them",
            False,
        )


def _llm_reasoning(block: dict[str, Any]) -> Iterator[Problem]:
    default = block.get("default_reasoning_level")
    levels = block.get("reasoning_levels")
    if not isinstance(default, str):
        return
    if not isinstance(levels, list):
        yield (
            "/llm/default_reasoning_level",
            "no `llm.reasoning_levels` to pick it from: list the levels a user may pick",
            False,
        )
    elif default not in levels:
        listed = ", ".join(map(str, levels))
        yield (
            "/llm/default_reasoning_level",
            f"{default!r} is not among `llm.reasoning_levels` ({listed})",
            False,
        )


MODEL_APIS = ("openai", "anthropic")


def _state_messages(
    table: dict[str, Any], name: str, messages: list[Any], edges: dict[str, set[str]]
) -> Iterator[Problem]:
    """One state's messages: each `next` names a state (recorded in `edges`), and no
    party/type pair appears twice."""
    seen: dict[tuple[Any, Any], int] = {}
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            continue
        pointer = f"{child('/states/states', name)}/{i}"
        target = msg.get("next", name)
        if isinstance(target, str):
            if target in table:
                edges[name].add(target)
            else:
                yield (
                    f"{pointer}/next",
                    f"next state {target!r} is not one of the states",
                    False,
                )
        kind = (msg.get("party"), msg.get("type"))
        if not all(isinstance(k, str) for k in kind):
            continue  # wrong types: reported by the schema
        if kind in seen:
            yield (
                pointer,
                f"{kind[0]} {kind[1]} appears twice in state {name!r} (first at index {seen[kind]})",
                False,
            )
        seen.setdefault(kind, i)


def _unreachable(
    table: dict[str, Any], edges: dict[str, set[str]], initial: str
) -> Iterator[Problem]:
    """Each state no path of `next`s leads to from the initial state."""
    reached, todo = {initial}, [initial]
    while todo:
        for nxt in edges[todo.pop()] - reached:
            reached.add(nxt)
            todo.append(nxt)
    for name in table:
        if name not in reached:
            yield (
                child("/states/states", name),
                f"state {name!r} is not reachable from the initial state {initial!r}",
                True,
            )


def states(data: dict[str, Any]) -> Iterator[Problem]:
    spec = data.get("states")
    if not isinstance(spec, dict) or not isinstance(spec.get("states"), dict):
        return
    table: dict[str, Any] = spec["states"]
    initial = spec.get("initial")
    if isinstance(initial, str) and initial not in table:
        yield "/states/initial", f"initial state {initial!r} is not one of the states", False
    edges: dict[str, set[str]] = {name: set() for name in table}
    for name, messages in table.items():
        if isinstance(messages, list):
            yield from _state_messages(table, name, messages, edges)
    if isinstance(initial, str) and initial in table:
        yield from _unreachable(table, edges, initial)


# ---- embedded JSON Schemas ----------------------------------------------------------


def embedded_schemas(data: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(pointer, schema) of every user JSON Schema in the manifest."""
    for key in ("input", "output"):
        if key in data:
            yield f"/{key}", data[key]
    config = data.get("config")
    if isinstance(config, dict) and "schema" in config:
        yield "/config/schema", config["schema"]
    for pointer, item in _items(data, "interrupts"):
        for part in ("payload", "resume"):
            holder = item.get(part)
            if isinstance(holder, dict) and "schema" in holder:
                yield f"{pointer}/{part}/schema", holder["schema"]
    for pointer, item in _items(data, "errors"):
        holder = item.get("data")
        if isinstance(holder, dict) and "schema" in holder:
            yield f"{pointer}/data/schema", holder["schema"]


def _meta_validator(schema: dict[str, Any]) -> Any:
    from jsonschema.validators import validator_for

    cls = validator_for(schema, default=_default_cls())
    if cls not in _META:
        meta = cls.META_SCHEMA
        if cls is _default_cls():
            meta = flat_metaschema() or meta
        _META[cls] = cls(meta)
    return _META[cls]


_META: dict[Any, Any] = {}


def _default_cls() -> Any:
    from jsonschema import Draft202012Validator

    return Draft202012Validator


def flat_metaschema() -> dict[str, Any] | None:
    """The 2020-12 metaschema with its vocabularies merged into one schema and each
    `{"$dynamicRef": "#meta"}` replaced by `{"$ref": "#"}`: the same verdicts for a
    schema that defines no `$dynamicAnchor` of its own (a user schema), about six times
    faster to check against. Built from the metaschemas jsonschema ships; None if their
    layout is not the one expected (then the full metaschema is used)."""
    from jsonschema import Draft202012Validator
    from jsonschema_specifications import REGISTRY

    meta = Draft202012Validator.META_SCHEMA
    base = "https://json-schema.org/draft/2020-12/"
    flat: dict[str, Any] = {"type": ["object", "boolean"], "properties": {}, "$defs": {}}
    try:
        for part in meta["allOf"]:
            vocab = REGISTRY.contents(base + part["$ref"])
            for key in ("properties", "$defs"):
                for name, sub in vocab.get(key, {}).items():
                    if name in flat[key]:
                        return None
                    flat[key][name] = sub
        for name, sub in meta.get("properties", {}).items():
            flat["properties"].setdefault(name, sub)
    except (KeyError, TypeError, LookupError):
        return None
    static: dict[str, Any] = _static_refs(flat, base)
    return static


def _static_refs(node: Any, base: str) -> Any:
    if isinstance(node, dict):
        if node == {"$dynamicRef": "#meta"}:
            return {"$ref": "#"}
        out = {k: _static_refs(v, base) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            out["$ref"] = base + ref  # relative to the metaschema's own $id
        return out
    if isinstance(node, list):
        return [_static_refs(v, base) for v in node]
    return node


def schema_validity(data: dict[str, Any]) -> Iterator[Problem]:
    for pointer, schema in embedded_schemas(data):
        if not isinstance(schema, dict):
            continue  # the manifest schema reports the wrong type
        for found in _meta_validator(schema).iter_errors(schema):
            err = found
            if err.context:
                from jsonschema.exceptions import best_match

                err = best_match(err.context)
            where = pointer + "".join(child("", p) for p in err.absolute_path)
            message = _clip(plain_message(err), 120)
            yield where, f"not a valid JSON Schema: {message}", False
        yield from refs(pointer, schema)


# every keyword a JSON Schema draft (4, 6, 7, 2019-09, 2020-12) defines
KEYWORDS = frozenset(
    [
        "$schema",
        "$id",
        "id",
        "$ref",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "$vocabulary",
        "$comment",
        "$defs",
        "definitions",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "dependentSchemas",
        "dependencies",
        "prefixItems",
        "items",
        "additionalItems",
        "contains",
        "properties",
        "patternProperties",
        "additionalProperties",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
        "type",
        "enum",
        "const",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "maxContains",
        "minContains",
        "maxProperties",
        "minProperties",
        "required",
        "dependentRequired",
        "title",
        "description",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
        "examples",
        "format",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
    ]
)
# the keys of the object an embedded schema sits in, by where it sits: such a key found
# inside the schema was indented one level too deep (`output_modes` under `output`)
_HOLDER_KEYS = {
    "/input": "manifest",
    "/output": "manifest",
    "/config/schema": "config",
}


def _holder_keys() -> dict[str, frozenset[str]]:
    from ..schema_files import load_schema

    manifest = load_schema("manifest.schema.json")
    config = manifest.get("$defs", {}).get("Config", {})
    return {
        "manifest": frozenset(manifest.get("properties", {})),
        "config": frozenset(config.get("properties", {})),
    }


def schema_keywords(data: dict[str, Any]) -> Iterator[Problem]:
    """A key no JSON Schema draft defines, in a user schema: a typo (`tpye`) or a manifest
    key indented into the schema, either silently ignored by every validator. Extension
    keys start with `x-`."""
    holders: dict[str, frozenset[str]] | None = None
    for pointer, schema in embedded_schemas(data):
        for at, node in schemas.walk(schema, pointer):
            for key in node:
                if not isinstance(key, str) or key in KEYWORDS or key.startswith("x-"):
                    continue
                where = child(at, key)
                holder = _HOLDER_KEYS.get(at) if at == pointer else None
                if holder is not None:
                    holders = holders or _holder_keys()
                    if key in holders[holder]:
                        above = "the manifest" if holder == "manifest" else f"`{holder}`"
                        yield (
                            where,
                            (
                                f"`{key}` is a key of {above}, not a JSON Schema keyword: "
                                "move it up one level"
                            ),
                            True,
                        )
                        continue
                hint = difflib.get_close_matches(key, sorted(KEYWORDS), n=1)
                tail = (
                    f" (did you mean `{hint[0]}`?)" if hint else " (extension keys start with x-)"
                )
                yield where, f"`{key}` is not a JSON Schema keyword{tail}", True


def _walk_refs(node: Any, pointer: str) -> Iterator[tuple[str, str]]:
    for at, sub in walk(node, pointer):
        if isinstance(sub.get("$ref"), str):
            yield child(at, "$ref"), sub["$ref"]


def _anchors(node: Any, found: set[str]) -> set[str]:
    for _, sub in walk(node):
        if isinstance(sub.get("$anchor"), str):
            found.add(sub["$anchor"])
    return found


def resolve_pointer(root: Any, fragment: str) -> bool:
    target = from_fragment("#" + fragment)
    return target is not None and resolve(root, target)[0]


def refs(pointer: str, schema: dict[str, Any]) -> Iterator[Problem]:
    anchors: set[str] | None = None
    for where, ref in _walk_refs(schema, pointer):
        if not ref.startswith("#"):
            yield where, f"$ref {ref!r} is not local: only '#/...' references are supported", False
            continue
        fragment = ref[1:]
        if fragment == "" or fragment.startswith("/"):
            ok = resolve_pointer(schema, fragment)
        else:
            anchors = anchors if anchors is not None else _anchors(schema, set())
            ok = fragment in anchors
        if not ok:
            yield where, f"$ref {ref!r} does not resolve within {pointer}", False
    from ..protocol.schema import ref_cycle

    cycle = ref_cycle(schema)
    if cycle:
        chain = " -> ".join(pointer + c for c in [*cycle, cycle[0]])
        yield (
            pointer + cycle[0],
            (
                f"$ref cycle {chain}: no value can satisfy it"
                " (make one step optional, or give it an anyOf branch that ends)"
            ),
            False,
        )


# ---- config defaults ----------------------------------------------------------------

_OPTION_TYPES: dict[str, tuple[type, ...]] = {
    "boolean": (bool,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
}


_A = {"boolean": "a boolean", "string": "a string", "integer": "an integer", "number": "a number"}


def _clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(value: Any) -> str:
    """A value as the manifest spells it (JSON: `false`, `null`, `"text"`), not Python's."""
    return _clip(json.dumps(value, ensure_ascii=False, default=str), 60)


_KIND_NAMES = {**_A, "object": "a mapping", "array": "a list", "null": "null"}


def plain_message(err: Any) -> str:
    """A jsonschema error in the manifest's terms: values in JSON (`false`, `"x"`), never
    the Python reprs jsonschema's own messages carry (`False`, `'x'`, `['a', 'b']`)."""
    kind, want, value = err.validator, err.validator_value, err.instance
    if kind == "type":
        wants = want if isinstance(want, list) else [want]
        return f"{_short(value)} is not {' or '.join(_KIND_NAMES.get(w, str(w)) for w in wants)}"
    if kind == "enum" and isinstance(want, list):
        return f"{_short(value)} is not one of: {', '.join(_short(v) for v in want)}"
    if kind == "const":
        return f"{_short(value)} is not {_short(want)}"
    message = str(err.message)
    message = re.sub(r"\bTrue\b", "true", message)
    message = re.sub(r"\bFalse\b", "false", message)
    message = re.sub(r"\bNone\b", "null", message)
    return re.sub(r"'((?:[^'\\]|\\.)*)'", lambda m: json.dumps(m.group(1)), message)


def _fits(kind: Any, value: Any) -> bool:
    want = _OPTION_TYPES.get(kind) if isinstance(kind, str) else None
    if want is None:
        return True
    if isinstance(value, bool) and kind != "boolean":
        return False
    return isinstance(value, want)


def _property_defaults(validator: Any, props: dict[str, Any]) -> Iterator[Problem]:
    """Each config schema property's `default` against the property's own schema."""
    for key, prop in props.items():
        if isinstance(prop, dict) and "default" in prop:
            pointer = child(child("/config/schema/properties", key), "default")
            for message in _misfits(validator, prop, prop["default"]):
                yield pointer, f"default does not fit its schema: {message}", False


def _option_values(pointer: str, kind: Any, values: list[Any]) -> Iterator[Problem]:
    """Each of a non-choice option's values that is not of the option's type."""
    for j, value in enumerate(values):
        if not _fits(kind, value):
            yield (
                f"{pointer}/values/{j}",
                f"value {_short(value)} is not {_A.get(str(kind))}",
                False,
            )


def _option_default(
    pointer: str, opt: dict[str, Any], validator: Any, props: dict[str, Any]
) -> Iterator[Problem]:
    """An option's `default`: of the option's type, among its values, and fitting the
    config schema's property of the same id."""
    kind, oid, values = opt.get("type"), opt.get("id"), opt.get("values")
    default = opt["default"]
    if not _fits(kind, default):
        yield (
            f"{pointer}/default",
            f"default {_short(default)} is not {_A.get(str(kind))}",
            False,
        )
    elif isinstance(values, list) and values and default not in values:
        allowed = ", ".join(map(str, values))
        yield f"{pointer}/default", f"default {_short(default)} is not one of: {allowed}", False
    elif validator is not None and isinstance(oid, str) and isinstance(props.get(oid), dict):
        for message in _misfits(validator, props[oid], default):
            yield (
                f"{pointer}/default",
                f"default does not fit the config schema: {message}",
                False,
            )


def _config_option(
    i: int, opt: dict[str, Any], validator: Any, props: dict[str, Any], closed: bool
) -> Iterator[Problem]:
    """One config option: its values, its id against a closed schema, its default."""
    pointer, kind, oid = f"/config/options/{i}", opt.get("type"), opt.get("id")
    values = opt.get("values")
    if isinstance(values, list) and kind != "choice":
        yield from _option_values(pointer, kind, values)
    if isinstance(oid, str) and closed and oid not in props:
        yield (
            child(pointer, "id"),
            f"option {oid!r} is not a property of the config schema",
            False,
        )
    if "default" in opt:
        yield from _option_default(pointer, opt, validator, props)
    names = opt.get("value_names")
    if isinstance(names, dict):
        listed = [str(v) for v in values] if isinstance(values, list) else []
        for key in names:
            if key not in listed:
                yield (
                    f"{pointer}/value_names/{key}",
                    f"{key!r} names no value of the option ({', '.join(listed) or 'none'})",
                    True,
                )


def config_defaults(data: dict[str, Any]) -> Iterator[Problem]:
    config = data.get("config")
    if not isinstance(config, dict):
        return
    schema = config.get("schema")
    validator = _config_validator(schema)
    props = schema.get("properties") if isinstance(schema, dict) else None
    props = props if isinstance(props, dict) else {}
    closed = isinstance(schema, dict) and schema.get("additionalProperties") is False
    if validator is not None:
        yield from _property_defaults(validator, props)
    options = config.get("options")
    if not isinstance(options, list):
        return
    for i, opt in enumerate(options):
        if isinstance(opt, dict):
            yield from _config_option(i, opt, validator, props, closed)


def _misfits(validator: Any, schema: dict[str, Any], value: Any) -> Iterator[str]:
    from referencing.exceptions import Unresolvable

    try:
        errs = list(validator.evolve(schema=schema).iter_errors(value))
    except Unresolvable:  # reported by the $ref check
        return
    for err in errs:
        yield _clip(plain_message(err), 120)


def _config_validator(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return None
    from jsonschema.validators import validator_for

    if next(_meta_validator(schema).iter_errors(schema), None) is not None:
        return None  # not a valid schema: reported by schema_validity
    return validator_for(schema, default=_default_cls())(schema)


def config_notes(data: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(pointer, note) for each config option ACP's session config options cannot show as
    it is: the options there are a select (a choice among values) or a boolean (v1, v1
    unstable); v2 adds implementation-specific `_<kind>` options. Not an error: the
    option is still set at session/new (`_meta.config`) and by
    session/set_config_option."""
    config = data.get("config")
    if not isinstance(config, dict):
        return
    for pointer, opt in _items(config, "options", "/config"):
        kind = opt.get("type")
        if kind in ("string", "integer", "number") and not opt.get("values"):
            yield (
                pointer,
                (
                    f"config option {opt.get('id')!r} ({kind}, no values) is neither a select nor "
                    "a boolean, the kinds of ACP session config options: v1 clients set it in "
                    "session/new `_meta.config` or with session/set_config_option, v2 clients "
                    f"also see it as a '_{kind}' option; give it `values` to make it a select"
                ),
            )


def semantic_problems(data: dict[str, Any]) -> Iterator[Problem]:
    for check in CHECKS:
        yield from check(data)


# the options the generated console script reads itself: a terminal login's args must
# not be one of them (templates/runtime/serve.py)
_AGENT_OPTIONS = frozenset({"-h", "--help", "--max-message-size", "--host", "--port"})


def auth_methods(data: dict[str, Any]) -> Iterator[Problem]:
    """stdio auth methods (agent / terminal): unique ids, login args the agent does not
    read as its own options."""
    seen: dict[str, str] = {}
    for pointer, item in _items(data, "auth"):
        kind = item.get("type")
        if kind != "terminal" and "args" in item:
            yield child(pointer, "args"), "`args` belongs to a terminal auth method only", True
        if kind not in ("agent", "terminal"):
            continue
        mid = item.get("id", kind)
        if isinstance(mid, str):
            at = child(pointer, "id" if "id" in item else "type")
            if mid in seen:
                yield (
                    at,
                    f"duplicate auth method id {mid!r} (also at {seen[mid]}): give each an id",
                    False,
                )
            else:
                seen[mid] = pointer
        args = item.get("args")
        if kind == "terminal" and isinstance(args, list) and args:
            first = args[0]
            if isinstance(first, str) and first.partition("=")[0] in _AGENT_OPTIONS:
                yield (
                    f"{pointer}/args/0",
                    (
                        f"{first!r} is an option of the agent itself; the login flow needs "
                        "its own (e.g. --login)"
                    ),
                    False,
                )


def registry(data: dict[str, Any]) -> Iterator[Problem]:
    """With a `registry` block: the version is semantic, the license SPDX or proprietary."""
    from ..registry.rules import license_problem, version_problem

    block = data.get("registry")
    if not isinstance(block, dict):
        return
    version = data.get("version")
    if isinstance(version, str) and version:
        problem = version_problem(version)
        if problem:
            yield "/version", problem + ": the ACP registry requires one", False
    lic = block.get("license")
    if isinstance(lic, str) and lic:
        problem = license_problem(lic)
        if problem:
            yield "/registry/license", problem, False


CHECKS: tuple[Callable[[dict[str, Any]], Iterator[Problem]], ...] = (
    package_name,
    errors,
    names,
    commands_and_modes,
    llm,
    states,
    config_defaults,
    schema_validity,
    schema_keywords,
    auth_methods,
    registry,
)
