"""Protocol models (contract 2): normalised schema -> datamodel-code-generator -> ruff.

`generate_models(schema)` returns the source of one self-contained module.  The fixing
happens on the schema (`normalize.PASSES`); datamodel-code-generator is driven
through its Python API with options chosen here, and the one thing it cannot be told
(a base class defined in the same module) is done by replacing the import it emits for
a sentinel module with the base's source, found with `ast`.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from .. import pysource
from ..errors import AgentgenError
from ..files import write_atomic
from .normalize import FIELD_EXTRA_KEYS, REFUSED_TAGS, TAGGED_UNION, normalize

STRING_FORMATS = (
    "string+uri=string",
    "string+uri-reference=string",
    "string+iri=string",
    "string+regex=string",
    "string+date-time=string",
    "string+date=string",
    "string+time=string",
    "string+email=string",
    "string+hostname=string",
    "string+ipv4=string",
    "string+ipv6=string",
)
BASE_MODULE = "_agentgen_base_"
BASE_CLASS = "AcpModel"

# The shared base, copied verbatim into every generated module (our own code: it is
# part of agentgen, tested through the generated modules).
BASE_SOURCE = '''
from typing import Annotated as _Annotated
from typing import Any as _Any
from typing import Callable as _Callable
from typing import TypeVar as _TypeVar

from pydantic import BaseModel as _BaseModel
from pydantic import ConfigDict as _ConfigDict
from pydantic import Discriminator as _Discriminator
from pydantic import Field as _Field
from pydantic import GetCoreSchemaHandler as _GetCoreSchemaHandler
from pydantic import RootModel as _RootModel
from pydantic import Tag as _Tag
from pydantic_core import CoreSchema as _CoreSchema
from pydantic_core import core_schema as _cs

_DEFAULT_ON_ERROR = "x-deserialize-default-on-error"
_SKIP_INVALID_ITEMS = "x-deserialize-skip-invalid-items"
_REFUSED_TAGS = "__REFUSED__"


def _acp_model_fields(schema: _Any, cls: type) -> _Any:
    node = schema
    for _ in range(8):
        kind = node.get("type") if isinstance(node, dict) else None
        if kind == "model-fields":
            return node.get("fields")
        if kind == "model" and node.get("cls") is not cls:
            return None
        if kind in ("model", "definitions") or str(kind).startswith("function-"):
            node = node.get("schema")
            continue
        return None
    return None


def _acp_inner(node: _Any, kind: str) -> _Any:
    for _ in range(8):
        if not isinstance(node, dict):
            return None
        if node.get("type") == kind:
            return node
        if node.get("type") not in ("default", "nullable"):
            return None
        node = node.get("schema")
    return None


def _acp_refuse(key: str, tags: frozenset[str]) -> _Callable[[_Any], _Any]:
    def check(value: _Any) -> _Any:
        if value in tags:
            raise ValueError(f"{key} {value!r} names a known variant, not an unknown one")
        return value

    return check


def _acp_apply_rules(cls: type[_BaseModel], fields: dict[str, _Any]) -> None:
    for name, info in cls.__pydantic_fields__.items():
        extra = info.json_schema_extra
        field = fields.get(name)
        if not isinstance(extra, dict) or not isinstance(field, dict):
            continue
        schema = field["schema"]
        if extra.get(_SKIP_INVALID_ITEMS) is True:
            listed = _acp_inner(schema, "list")
            items = listed.get("items_schema") if listed is not None else None
            if isinstance(items, dict) and items.get("type") != "default":
                listed["items_schema"] = _cs.with_default_schema(items, on_error="omit")
        if extra.get(_DEFAULT_ON_ERROR) is True and schema.get("type") == "default":
            schema["on_error"] = "default"
        tags = extra.get(_REFUSED_TAGS)
        if isinstance(tags, list) and schema.get("type") != "function-after":
            refuse = _acp_refuse(info.alias or name, frozenset(str(t) for t in tags))
            field["schema"] = _cs.no_info_after_validator_function(refuse, schema)


class AcpModel(_BaseModel):
    """Base of every protocol object.

    Unknown fields are kept (`extra="allow"`) and fields are accepted by wire name or
    attribute name, so `model_dump(by_alias=True, exclude_unset=True, mode="json")`
    gives back what was parsed.  Upstream's field keywords, read from each field's
    schema extras, are compiled into the model's validator (no Python on the happy
    path): `x-deserialize-default-on-error` (a bad value gives the field's default),
    `x-deserialize-skip-invalid-items` (bad list items are dropped); the catch-all
    member of an open union refuses the tags of the known members.

    A model's validator is built when it is first used (`defer_build`; so is that of a
    root model naming a model defined further down), not when the module is imported:
    a process uses a few dozen of the module's ~400 models, and building all of them
    took half a second at every start.
    """

    model_config = _ConfigDict(populate_by_name=True, extra="allow", defer_build=True)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[_BaseModel], handler: _GetCoreSchemaHandler, /
    ) -> _CoreSchema:
        schema = handler(source)
        fields = _acp_model_fields(schema, cls)
        if fields is not None:
            _acp_apply_rules(cls, fields)
        return schema


_AcpRoot = _TypeVar("_AcpRoot")


class AcpUnion(_RootModel[_AcpRoot]):
    """Base of the tagged unions: built at first use, like `AcpModel`."""

    model_config = _ConfigDict(defer_build=True)


def _acp_snake(name: str) -> str:
    out = [("_" + c.lower()) if c.isupper() else c for c in name]
    return "".join(out).lstrip("_")


def _acp_tag_value(value: _Any, prop: str) -> _Any:
    """The tag of a value that is not a wire dict (a model instance, a snake_case dict)."""
    if isinstance(value, dict):
        return value.get(_acp_snake(prop))
    if isinstance(value, _RootModel):
        return _acp_tag_value(value.root, prop)
    if isinstance(value, _BaseModel):
        for name, info in type(value).model_fields.items():
            if (info.alias or name) == prop:
                return getattr(value, name, None)
        return (value.model_extra or {}).get(prop)
    return None


def _acp_tag(
    prop: str, known: tuple[str, ...], other: str, missing: str | None = None
) -> _Discriminator:
    """Dispatch a tagged union on `prop`: a known value picks its member, any other
    value (a newer variant, an extension) the catch-all member, and a value without the
    tag the default member (`missing`), when the union has one."""
    names = frozenset(known)

    def pick(value: _Any) -> str:
        tag = value.get(prop) if type(value) is dict else None
        if tag is None:
            tag = _acp_tag_value(value, prop)
        if tag is None and missing is not None:
            return missing
        return tag if isinstance(tag, str) and tag in names else other

    return _Discriminator(pick)
'''.replace("__REFUSED__", REFUSED_TAGS)


def _tagged_union_source(name: str, node: dict[str, Any]) -> str:
    """A tagged union marked by `normalize.open_tagged_unions`, as a RootModel whose
    root dispatches on the tag (pydantic `Discriminator` + one `Tag` per member)."""
    spec = node[TAGGED_UNION]
    tags: dict[str, str] = spec["tags"]
    other: str | None = spec.get("other")
    default: str | None = spec.get("default")
    label = "*"
    while label in tags:
        label += "*"
    choices = list(tags.items())  # upstream order
    if other:
        choices.append((label, other))
    # a message without the tag: the default member, under the tag it stands for (or
    # a label of its own)
    missing = next((t for t, cls in tags.items() if cls == default), None)
    if default and missing is None:
        missing = "-"
        while missing in tags:
            missing += "-"
        choices.append((missing, default))
    plain = " | ".join(dict.fromkeys(cls for _, cls in choices))
    tagged = " | ".join(f"_Annotated[{cls}, _Tag({tag!r})]" for tag, cls in choices)
    desc = node.get("description")
    field = f", _Field(description={desc!r})" if isinstance(desc, str) and desc else ""
    known = tuple(sorted(tags))
    args = f"{spec['property']!r}, {known!r}, {label!r}" + (f", {missing!r}" if missing else "")
    return (
        f"\n\nclass {name}(AcpUnion[{plain}]):\n"
        f"    root: _Annotated[{tagged}, _acp_tag({args}){field}]\n"
    )


def _take_over_tagged_unions(normalized: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Hand the generator an import for each tagged union (so references to it stay
    named) and return their source, rendered here."""
    defs = normalized.get("$defs") or {}
    names = sorted(n for n, d in defs.items() if isinstance(d, dict) and TAGGED_UNION in d)
    if not names:
        return normalized, ""
    out = dict(normalized)
    out["$defs"] = dict(defs)
    ordered: list[str] = []

    visiting: set[str] = set()

    def visit(name: str) -> None:  # members first: a union may be a member of another
        if name in ordered or name in visiting:
            return
        visiting.add(name)
        spec = defs[name][TAGGED_UNION]
        members = set(spec["tags"].values()) | {spec.get("other") or "", spec.get("default") or ""}
        for member in sorted(members):
            if member in names:
                visit(member)
        if name not in ordered:
            ordered.append(name)

    for name in names:
        visit(name)
    source = []
    for name in ordered:
        source.append(_tagged_union_source(name, defs[name]))
        out["$defs"][name] = {"x-python-import": {"module": BASE_MODULE, "name": name}}
    return out, "".join(source)


def _header(source_label: str) -> str:
    label = source_label.replace("\\", "/").replace('"""', "'''").replace("\n", " ")
    return (
        f'"""Protocol models generated by agentgen from {label}.\n\n'
        "Do not edit: regenerate with `agentgen models` (or `agentgen regen`).\n"
        '"""\n'
    )


def _codegen(normalized: dict[str, Any], header: str, source_label: str) -> str:
    from .. import codegen

    out = codegen.run(
        normalized,
        source=source_label,
        pointer="/$defs",
        base_class=f"{BASE_MODULE}.{BASE_CLASS}",
        custom_file_header=header,
        use_union_operator=True,
        use_standard_collections=True,
        use_double_quotes=True,
        set_default_enum_member=True,
        # wire strings stay strings: a URL type would normalise them (add a
        # trailing slash...) and the dump would differ from what was parsed
        type_mappings=list(STRING_FORMATS),
        field_extra_keys=set(FIELD_EXTRA_KEYS),
        formatters=[],
        disable_future_imports=True,  # see _inline_base
    )
    if not isinstance(out, str):
        raise AgentgenError(
            "datamodel-code-generator returned several modules for one schema",
            source=source_label,
        )
    return out


def _inline_base(code: str, unions: str, source_label: str) -> str:
    """The base's source at the top (after the docstring), in place of the imports from
    the sentinel module; the tagged unions after their members
    (`_definitions_first`). Annotations are evaluated as the classes are made (no
    `from __future__ import annotations`: pydantic would compile each one from its
    text, a fifth of the import) unless two classes name each other."""
    whole = code + unions
    tree = _parse(whole, source_label)
    ordered, acyclic = _definitions_first(whole, tree)
    # (the imports and the docstring are above the classes: where the parse found them)
    lines = ordered.splitlines(keepends=True)
    for node in reversed(tree.body):
        if isinstance(node, ast.ImportFrom) and node.module == BASE_MODULE:
            lines[node.lineno - 1 : node.end_lineno or node.lineno] = []
    # the base first (after the docstring): the module's own imports may come before
    # the sentinel's, and a `from __future__` import must come before everything
    first = tree.body[1 if ast.get_docstring(tree) is not None else 0].lineno - 1
    base = BASE_SOURCE.lstrip("\n")
    if not acyclic:
        base = "from __future__ import annotations\n\n" + base
    lines[first:first] = [base, "\n"]
    return "".join(lines)


def _parse(code: str, source_label: str) -> ast.Module:
    try:
        return pysource.parse(code)
    except SyntaxError as exc:  # pragma: no cover - the generator's output is Python
        raise AgentgenError(
            f"generated models do not parse: {exc.msg}", source=source_label
        ) from None


def _definitions_first(code: str, tree: ast.Module) -> tuple[str, bool]:
    """The classes after the module's last import, each after the classes it names
    (upstream order otherwise): a model is then complete when its class statement ends
    (its fields, aliases included, read from resolved annotations) though its validator
    is built only at first use (`AcpModel`); the tagged unions, rendered apart, land
    after their members and before their users. Classes that name each other (or
    themselves) keep their order; False then: the module needs postponed annotations.
    `tree`: the parse of `code`; only the classes move."""
    imports = [
        i for i, node in enumerate(tree.body) if isinstance(node, ast.Import | ast.ImportFrom)
    ]
    first = imports[-1] + 1 if imports else 0
    region = tree.body[first:]
    if not region or not all(isinstance(node, ast.ClassDef) for node in region):
        return code, False
    lines = code.splitlines(keepends=True)
    head_end = (tree.body[first - 1].end_lineno or 0) if first else 0
    texts: dict[str, str] = {}
    named: dict[str, list[str]] = {}
    start = head_end
    for node in region:
        assert isinstance(node, ast.ClassDef)
        end = node.end_lineno or node.lineno
        texts[node.name] = "".join(lines[start:end])
        start = end
        named[node.name] = [n.id for n in ast.walk(node) if type(n) is ast.Name]
    ordered: list[str] = []
    state: dict[str, bool] = {}  # False: being placed, True: placed
    acyclic = True

    def place(name: str) -> None:
        nonlocal acyclic
        state[name] = False
        for dep in named[name]:
            if dep not in texts:
                continue
            if dep not in state:
                place(dep)
            elif not state[dep]:  # itself, or a class on the way here: a cycle
                acyclic = False
        state[name] = True
        ordered.append(name)

    for name in texts:
        if name not in state:
            place(name)
    body = "".join(texts[n] for n in ordered)
    return "".join(lines[:head_end]) + body + "".join(lines[start:]), acyclic


def generate_models(
    schema: dict[str, Any],
    *,
    meta: dict[str, Any] | None = None,
    source_label: str = "the ACP schema",
) -> str:
    """The protocol models module for `schema` (contract 2), ruff-formatted.

    The same schema and label give the same module: it is kept in the models cache
    (`models_cache_dir`) and read back from there by the next `new`, `regen`, `check` or
    `models` on that input (a second or so of datamodel-code-generator and ruff saved
    each time: `check` and `regen` render the recorded revision and the new one)."""
    from ..codegen import ruff_format
    from .schema import check_schema

    del meta  # the method table is read elsewhere; the models come from the schema alone
    cached = _cache_path(schema, source_label)
    if cached is not None:
        try:
            text = cached.read_text(encoding="utf-8")
            os.utime(cached)  # the newest used are the ones kept (`_prune`)
            return text
        except (OSError, UnicodeDecodeError):
            pass  # not there yet (or unreadable): rendered below
    schema = check_schema(schema, source_label)  # shapes and `$ref`s, located errors
    normalized = normalize(schema, source=source_label)
    for_codegen, unions = _take_over_tagged_unions(normalized)
    code = _codegen(for_codegen, _header(source_label), source_label)
    text = ruff_format(_inline_base(code, unions, source_label), "models.py")
    if cached is not None:
        try:
            write_atomic(cached, text)
            _prune(cached.parent)
        except OSError:
            pass  # a read-only or full cache: the models are still returned
    return text


MODELS_KEPT = 64  # files in the models cache (~250 KB each), the most recently used


def _prune(root: Path) -> None:
    """Keep the `MODELS_KEPT` most recently used files of the models cache: a checkout
    whose code changes (each edit is another producer) or many schemas never fill the
    disk."""
    found = []
    for path in root.glob("*.py"):
        try:
            found.append((path.stat().st_mtime_ns, path))
        except OSError:
            continue  # removed meanwhile (another agentgen pruning)
    found.sort(reverse=True)
    for _, stale in found[MODELS_KEPT:]:
        stale.unlink(missing_ok=True)


def models_cache_dir() -> Path | None:
    """Where generated models are kept: `$AGENTGEN_MODELS_CACHE` (`off`: nowhere), else
    `models/` in agentgen's cache (`sources.cache_dir`)."""
    from ..sources import cache_dir

    env = os.environ.get("AGENTGEN_MODELS_CACHE")
    if env == "off":
        return None
    return Path(env) if env else cache_dir() / "models"


def _cache_path(schema: dict[str, Any], source_label: str) -> Path | None:
    """The cache file of these models: named by the schema (canonical JSON), the label
    (the module's header names it) and everything else the output depends on
    (`_producer`)."""
    root = models_cache_dir()
    if root is None:
        return None
    try:
        canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return None  # not JSON: check_schema says what is wrong with it
    digest = hashlib.sha256(_producer().encode())
    digest.update(b"\0" + source_label.encode("utf-8", "surrogatepass") + b"\0")
    digest.update(canonical.encode("utf-8", "surrogatepass"))
    return root / f"{digest.hexdigest()}.py"


@functools.cache
def _producer() -> str:
    """What makes the models besides their input: this agentgen's own code (the bytes of
    every module of the package, so an edited checkout never reads an older output), the
    datamodel-code-generator and ruff it runs, and the Python it runs on."""
    from importlib.metadata import PackageNotFoundError, version

    from ..codegen import ruff_version

    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" not in path.parts:
            digest.update(path.relative_to(package).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    try:
        dcg = version("datamodel-code-generator")
    except PackageNotFoundError:  # pragma: no cover - a dependency of agentgen
        dcg = "?"
    return f"{digest.hexdigest()} dcg {dcg} {ruff_version()} {sys.version}"


def run_models(schema_spec: str | None, *, meta: str | None = None, out: Path) -> int:
    """`agentgen models SCHEMA [--meta M] -o OUT.py`."""
    from ..files import write_output
    from ..sources import load_meta, load_schema

    source = load_schema(schema_spec)
    meta_data = load_meta(meta).data if meta else None
    text = generate_models(source.data, meta=meta_data, source_label=source.origin)
    write_output(out, text, "the models")
    from .. import console

    console.summary(f"wrote {out}: {text.count(chr(10) + 'class ')} models from {source.origin}")
    return 0
