"""Protocol models (contract 2): normalised schema -> datamodel-code-generator -> ruff.

`generate_models(schema)` returns the source of one self-contained module.  The fixing
happens on the schema (`normalize.PASSES`); datamodel-code-generator is driven
through its Python API with options chosen here, and the one thing it cannot be told
(a base class defined in the same module) is done by replacing the import it emits for
a sentinel module with the base's source, found with `ast`.
"""

from __future__ import annotations

import ast
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from ..errors import AgentgenError
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
from typing import ClassVar as _ClassVar

from pydantic import BaseModel as _BaseModel
from pydantic import ConfigDict as _ConfigDict
from pydantic import Discriminator as _Discriminator
from pydantic import Field as _Field
from pydantic import ModelWrapValidatorHandler as _Handler
from pydantic import RootModel as _RootModel
from pydantic import Tag as _Tag
from pydantic import ValidationError as _ValidationError
from pydantic import model_validator as _model_validator

_DEFAULT_ON_ERROR = "x-deserialize-default-on-error"
_SKIP_INVALID_ITEMS = "x-deserialize-skip-invalid-items"
_REFUSED_TAGS = "__REFUSED__"
# (lenient fields: key -> (default on error, skip invalid items, all keys); refused tags)
_Rules = tuple[
    dict[str, tuple[bool, bool, tuple[str, ...]]],
    tuple[tuple[tuple[str, ...], frozenset[str]], ...],
]


class AcpModel(_BaseModel):
    """Base of every protocol object.

    Unknown fields are kept (`extra="allow"`) and fields are accepted by wire name or
    attribute name, so `model_dump(by_alias=True, exclude_unset=True, mode="json")`
    gives back what was parsed.  Upstream's field keywords are honoured here, read
    from each field's schema extras: `x-deserialize-default-on-error` (a bad value
    falls back to the field's default), `x-deserialize-skip-invalid-items` (bad list
    items are dropped), and the catch-all member of an open union refuses the tags of
    the known members (so a known variant with bad fields is an error).
    """

    model_config = _ConfigDict(populate_by_name=True, extra="allow")

    @classmethod
    def _acp_rules(cls) -> _Rules:
        """The field rules of this class, read once its fields are complete."""
        rules: _Rules | None = cls.__dict__.get("__acp_rules__")
        if rules is not None:
            return rules
        lenient: dict[str, tuple[bool, bool, tuple[str, ...]]] = {}
        refused: list[tuple[tuple[str, ...], frozenset[str]]] = []
        for name, info in cls.model_fields.items():
            extra = info.json_schema_extra
            if not isinstance(extra, dict):
                continue
            keys = (info.alias, name) if info.alias and info.alias != name else (name,)
            default = extra.get(_DEFAULT_ON_ERROR) is True
            skip = extra.get(_SKIP_INVALID_ITEMS) is True
            if default or skip:
                for key in keys:
                    lenient[key] = (default, skip, keys)
            tags = extra.get(_REFUSED_TAGS)
            if isinstance(tags, list):
                refused.append((keys, frozenset(str(t) for t in tags)))
        rules = (lenient, tuple(refused))
        type.__setattr__(cls, "__acp_rules__", rules)
        return rules

    @_model_validator(mode="wrap")
    @classmethod
    def _acp_wire_rules(cls, data: _Any, handler: _Handler[_Any]) -> _Any:
        if not isinstance(data, dict):
            return handler(data)
        lenient, refused = cls._acp_rules()
        for keys, tags in refused:
            for key in keys:
                value = data.get(key)
                if isinstance(value, str) and value in tags:
                    raise ValueError(f"{key} {value!r} is a known variant: it does not match it")
        if not lenient:
            return handler(data)
        try:
            return handler(data)
        except _ValidationError as exc:
            repaired = _acp_repair(data, exc, lenient)
            if repaired is None:
                raise
            return handler(repaired)


def _acp_repair(
    data: dict[str, _Any],
    exc: _ValidationError,
    lenient: dict[str, tuple[bool, bool, tuple[str, ...]]],
) -> dict[str, _Any] | None:
    """`data` without what the lenient fields may drop, or None if an error is elsewhere."""
    drop: set[str] = set()
    drop_items: dict[str, set[int]] = {}
    for err in exc.errors():
        loc = err["loc"]
        head = loc[0] if loc else None
        if not isinstance(head, str) or head not in lenient:
            return None
        default, skip, keys = lenient[head]
        present = [k for k in keys if k in data]
        if skip and len(loc) > 1 and isinstance(loc[1], int) and present:
            if isinstance(data[present[0]], list):
                drop_items.setdefault(present[0], set()).add(loc[1])
                continue
        if not default:
            return None
        drop.update(keys)
    out = {k: v for k, v in data.items() if k not in drop}
    for key, bad in drop_items.items():
        if key in out:
            out[key] = [v for i, v in enumerate(out[key]) if i not in bad]
    return out


def _acp_complete(namespace: dict[str, _Any]) -> None:
    """Finish every model of the module (forward references are all defined now)."""
    for value in list(namespace.values()):
        if (
            isinstance(value, type)
            and issubclass(value, _BaseModel)
            and value.__module__ == namespace.get("__name__")
            and not value.__pydantic_complete__
        ):
            value.model_rebuild()


def _acp_snake(name: str) -> str:
    out = [("_" + c.lower()) if c.isupper() else c for c in name]
    return "".join(out).lstrip("_")


def _acp_tag_value(value: _Any, prop: str) -> _Any:
    if isinstance(value, dict):
        return value.get(prop, value.get(_acp_snake(prop)))
    if isinstance(value, _RootModel):
        return _acp_tag_value(value.root, prop)
    if isinstance(value, _BaseModel):
        for name, info in type(value).model_fields.items():
            if (info.alias or name) == prop:
                return getattr(value, name, None)
        return (value.model_extra or {}).get(prop)
    return None


def _acp_tag(prop: str, known: tuple[str, ...], other: str) -> _Discriminator:
    """Dispatch a tagged union on `prop`: a known value picks its member, any other
    value (a newer variant, an extension) the catch-all member."""
    names = frozenset(known)

    def pick(value: _Any) -> str:
        tag = _acp_tag_value(value, prop)
        return tag if isinstance(tag, str) and tag in names else other

    return _Discriminator(pick)
'''.replace("__REFUSED__", REFUSED_TAGS)


def _tagged_union_source(name: str, node: dict[str, Any]) -> str:
    """A tagged union marked by `normalize.open_tagged_unions`, as a RootModel whose
    root dispatches on the tag (pydantic `Discriminator` + one `Tag` per member)."""
    spec = node[TAGGED_UNION]
    tags: dict[str, str] = spec["tags"]
    other: str | None = spec.get("other")
    label = "*"
    while label in tags:
        label += "*"
    choices = list(tags.items())  # upstream order
    if other:
        choices.append((label, other))
    plain = " | ".join(dict.fromkeys(cls for _, cls in choices))
    tagged = " | ".join(f"_Annotated[{cls}, _Tag({tag!r})]" for tag, cls in choices)
    desc = node.get("description")
    field = f", _Field(description={desc!r})" if isinstance(desc, str) and desc else ""
    known = tuple(sorted(tags))
    return (
        f"\n\nclass {name}(_RootModel[{plain}]):\n"
        f"    root: _Annotated[{tagged}, _acp_tag({spec['property']!r}, {known!r}, {label!r}){field}]\n"
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
        for member in sorted(set(spec["tags"].values()) | {spec.get("other") or ""}):
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
    from datamodel_code_generator import (
        DataModelType,
        InputFileType,
        PythonVersion,
        generate,
    )

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = generate(
                normalized,
                input_file_type=InputFileType.JsonSchema,
                output_model_type=DataModelType.PydanticV2BaseModel,
                target_python_version=PythonVersion.PY_311,
                base_class=f"{BASE_MODULE}.{BASE_CLASS}",
                custom_file_header=header,
                disable_timestamp=True,
                snake_case_field=True,
                use_annotated=True,
                field_constraints=True,
                use_union_operator=True,
                use_standard_collections=True,
                use_double_quotes=True,
                set_default_enum_member=True,
                # wire strings stay strings: a URL type would normalise them (add a
                # trailing slash...) and the dump would differ from what was parsed
                type_mappings=list(STRING_FORMATS),
                field_extra_keys=set(FIELD_EXTRA_KEYS),
                formatters=[],
            )
    except AgentgenError:
        raise
    except Exception as exc:  # noqa: BLE001 - the generator's own errors: one located line
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AgentgenError(
            f"datamodel-code-generator could not turn the schema into models: {detail[:300]}",
            source=source_label,
            pointer="/$defs",
        ) from None
    if not isinstance(out, str):
        raise AgentgenError(
            "datamodel-code-generator returned several modules for one schema",
            source=source_label,
        )
    return out


def _inline_base(code: str, unions: str, source_label: str) -> str:
    """Replace the imports from the sentinel module with the base's source (first one)
    and nothing (the others); the tagged unions go at the end, after their members."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:  # pragma: no cover - the generator's output is Python
        raise AgentgenError(
            f"generated models do not parse: {exc.msg}", source=source_label
        ) from None
    lines = code.splitlines(keepends=True)
    spans = [
        (node.lineno - 1, node.end_lineno or node.lineno)
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == BASE_MODULE
    ]
    if not spans:  # no object model at all: the base is still defined
        return code + "\n" + BASE_SOURCE + unions + "\n\n_acp_complete(globals())\n"
    for i, (start, end) in reversed(list(enumerate(spans))):
        lines[start:end] = [BASE_SOURCE.lstrip("\n")] if i == 0 else []
    return "".join(lines) + unions + "\n\n_acp_complete(globals())\n"


def generate_models(
    schema: dict[str, Any],
    *,
    meta: dict[str, Any] | None = None,
    source_label: str = "the ACP schema",
) -> str:
    """The protocol models module for `schema` (contract 2), ruff-formatted."""
    from ..render import ruff_format

    from .schema import check_schema

    del meta  # the method table is read elsewhere; the models come from the schema alone
    schema = check_schema(schema, source_label)  # shapes and `$ref`s, located errors
    normalized = normalize(schema, source=source_label)
    for_codegen, unions = _take_over_tagged_unions(normalized)
    code = _codegen(for_codegen, _header(source_label), source_label)
    return ruff_format(_inline_base(code, unions, source_label), "models.py")


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` via a temporary file in the same directory."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise AgentgenError(f"cannot write here: {exc.strerror}", source=str(path)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise AgentgenError(f"cannot write the models: {exc.strerror}", source=str(path)) from None


def run_models(schema_spec: str | None, *, meta: str | None = None, out: Path) -> int:
    """`agentgen models SCHEMA [--meta M] -o OUT.py`."""
    from ..sources import load_meta, load_schema

    source = load_schema(schema_spec)
    meta_data = load_meta(meta).data if meta else None
    text = generate_models(source.data, meta=meta_data, source_label=source.origin)
    write_atomic(out, text)
    return 0
