"""An agent manifest -> the typed module `manifest_models.py` of its project.

The module holds `Config`, `Input`, `Output` (from the manifest's JSON Schemas), one
`<Interrupt>Payload` / `<Interrupt>Resume` pair per interrupt (`needs-review` ->
`NeedsReviewPayload`), and one exception class per declared error, deriving from
`ManifestError` and carrying `code`, `error_name`, `transient` and typed `data`
(`<Error>Data`).  These are the names the runtime (templates/runtime/agent/agent.py) looks
up; a section the manifest leaves out produces no class.

How: every embedded schema goes under one composed document's `$defs` (their own
`$defs` hoisted beside them, local `$ref`s rewritten), datamodel-code-generator turns it
into pydantic v2 classes in one run, the exception classes are rendered here in plain
Python, and ruff formats the whole.  Same manifest, same bytes.
"""

from __future__ import annotations

import copy
import json
import keyword
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import pysource
from ..errors import AgentgenError
from ..names import camel, pascal
from ..pointer import unescape
from ..schemas import plain_text, walk

__all__ = ["generate_manifest_models", "run_manifest_models"]

BASE_ERROR = "ManifestError"
ERRORS_TABLE = "ERRORS"
# names the rendered exception classes use: an error class must not shadow one
_TEMPLATE_NAMES = frozenset(
    {"Any", "ClassVar", "Exception", "bool", "dict", "int", "str", "super", "type"}
)


def _usable(name: str) -> bool:
    return (
        name.isidentifier()
        and not keyword.iskeyword(name)
        and not keyword.issoftkeyword(name)
        and not name.startswith("_")
    )


def _class_name(raw: str) -> str:
    """Any text -> a CamelCase identifier (`my.def-name` -> `MyDefName`)."""
    return pascal(raw, digit_prefix="M", empty="Model")


class _Names:
    """Hands out class names: the wanted one, else `<wanted><suffix>`, else numbered."""

    def __init__(self, taken: set[str] | None = None) -> None:
        self.taken: set[str] = set(taken or ())

    def claim(self, wanted: str, suffix: str = "Model") -> str:
        candidates = [wanted, wanted + suffix]
        candidates += [f"{wanted}{suffix}{i}" for i in range(2, 1000)]
        for c in candidates:
            if c not in self.taken and _usable(c):
                self.taken.add(c)
                return c
        raise AgentgenError(f"no free class name for {wanted!r}")  # pragma: no cover

    def exact(self, name: str, where: str, source: str) -> str:
        """A name the runtime looks up as is: it must be free and usable."""
        if name in self.taken or not _usable(name):
            raise AgentgenError(
                f"the class name {name!r} is already used or not a Python identifier",
                source=source,
                pointer=where,
                hint="rename the interrupt",
            )
        self.taken.add(name)
        return name


@dataclass(frozen=True)
class _Section:
    cls: str  # class name in the module
    schema: Any  # its JSON Schema
    where: str  # JSON pointer in the manifest


@dataclass(frozen=True)
class _Error:
    code: int
    name: str  # the manifest's name (error_name)
    description: str
    transient: bool
    data_cls: str | None
    where: str


# ---------------------------------------------------------------------------------------
# composing one schema document


def _unescape(token: str) -> str:
    from urllib.parse import unquote

    return unescape(unquote(token))


def _rewrite_refs(node: Any, fix: Any) -> Any:
    """Copy of `node` with every `$ref` string passed through `fix` (data values such
    as `default` or `enum` are left alone: only schema positions are walked)."""
    out = copy.deepcopy(node)
    for _, sub in walk(out):
        if isinstance(sub.get("$ref"), str):
            sub["$ref"] = fix(sub["$ref"])
    return out


def _hoist(
    body: dict[str, Any], names: _Names, cls: str
) -> tuple[dict[str, str], list[tuple[str, Any]]]:
    """Take a section's `$defs`/`definitions` out of `body`: the new top-level name of
    each ("/$defs/X" -> name), and (name, schema) of each in order."""
    hoisted: dict[str, str] = {}  # "/$defs/X" -> new top-level name
    nested: list[tuple[str, Any]] = []
    for container in ("$defs", "definitions"):
        inner = body.pop(container, None)
        if not isinstance(inner, dict):
            continue
        for key in inner:
            new = names.claim(_class_name(key), suffix=cls)
            hoisted[f"/{container}/{key}"] = new
            nested.append((new, inner[key]))
    return hoisted, nested


def _ref_fixer(base: str, hoisted: dict[str, str], where: str, source: str) -> Any:
    """The rewrite of a section's local `$ref`s: into a hoisted definition, else under
    the section's own `base`; a non-local `$ref` is an error."""

    def fix(ref: str) -> str:
        if not ref.startswith("#"):
            raise AgentgenError(
                f"$ref {ref!r} points outside the manifest",
                source=source,
                pointer=where,
                hint="only local references (#/...) are supported",
            )
        pointer = ref[1:]
        if pointer and not pointer.startswith("/"):
            return ref  # an anchor: global to the document, unchanged
        tokens = pointer.split("/")
        if len(tokens) >= 3:  # noqa: PLR2004 - "", the container, the name
            head = f"/{tokens[1]}/{_unescape(tokens[2])}"
            if head in hoisted:
                rest = "/".join(tokens[3:])
                return f"#/$defs/{hoisted[head]}" + (f"/{rest}" if rest else "")
        return base + pointer

    return fix


def _compose(sections: list[_Section], names: _Names, source: str) -> dict[str, Any]:
    """One document: each section at `$defs/<cls>`, its own `$defs`/`definitions`
    hoisted to top-level names, local `$ref`s rewritten to match."""
    defs: dict[str, Any] = {}
    for sec in sections:
        schema = sec.schema
        if schema is True or schema == {}:
            schema = {}
        if not isinstance(schema, dict):
            raise AgentgenError("expected a JSON Schema object", source=source, pointer=sec.where)
        body = {k: v for k, v in schema.items() if k not in ("$schema", "$id")}
        hoisted, nested = _hoist(body, names, sec.cls)
        fix = _ref_fixer(f"#/$defs/{sec.cls}", hoisted, sec.where, source)
        defs[sec.cls] = _rewrite_refs(body, fix)
        for new, sub in nested:
            defs[new] = _rewrite_refs(sub, fix)
    # Longest names first: an inline object is named after its parent (`Config` +
    # `data` -> `ConfigData`), always longer than the parent, so every definition claims
    # its own name before any inline object could take it.
    ordered = dict(sorted(defs.items(), key=lambda item: -len(item[0])))
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": ordered}


# ---------------------------------------------------------------------------------------
# the manifest's sections

_OPTION_TYPES = {"boolean": "boolean", "string": "string", "integer": "integer", "number": "number"}


def _config_schema(schema: dict[str, Any] | None, options: list[Any]) -> Any:
    """The config schema refined by the config options: both describe the config, and a
    value must satisfy both.  An option the schema has no property for becomes one; a
    property the schema has takes from its option the keys it lacks (`enum` from the
    option's values, `type`, `default`, `description`).  No schema: the options alone,
    other members allowed."""
    if schema is None:
        schema = {"type": "object", "additionalProperties": True}
    props = schema.get("properties", {}) if isinstance(schema, dict) else None
    if not options or not isinstance(props, dict):
        return schema  # nothing to refine, or a broken schema the generator reports
    props = dict(props)
    for opt in options:
        from_option: dict[str, Any] = {}
        if opt.type in _OPTION_TYPES:
            from_option["type"] = _OPTION_TYPES[opt.type]
        if opt.values:
            from_option["enum"] = list(opt.values)
        if "default" in opt.model_fields_set:
            from_option["default"] = opt.default
        if opt.description:
            from_option["description"] = opt.description
        current = props.get(opt.id)
        if not isinstance(current, dict):
            props[opt.id] = from_option
            continue
        if "$ref" in current or any(k in current for k in ("anyOf", "oneOf", "allOf")):
            continue  # the schema says more than an option can: it stands as written
        merged = {**from_option, **current}
        if "const" in current and "enum" not in current:
            merged.pop("enum", None)
        props[opt.id] = merged
    return {**schema, "properties": props}


def _plan(manifest: Any, source: str) -> tuple[list[_Section], list[_Error], _Names]:
    from .format import read_manifest, schema_of

    fmt = read_manifest(manifest, source=source)
    names = _Names({BASE_ERROR, ERRORS_TABLE})
    sections: list[_Section] = []
    if fmt.config is not None and (fmt.config.schema_ is not None or fmt.config.options):
        sections.append(
            _Section(
                names.exact("Config", "/config", source),
                _config_schema(schema_of(fmt.config.schema_), fmt.config.options or []),
                "/config/schema",
            )
        )
    for key, cls in (("input", "Input"), ("output", "Output")):
        value = getattr(fmt, key)
        if value is not None:
            sections.append(
                _Section(names.exact(cls, f"/{key}", source), schema_of(value), f"/{key}")
            )
    for i, intr in enumerate(fmt.interrupts or ()):
        stem = camel(intr.name)
        for part in ("payload", "resume"):
            where = f"/interrupts/{i}/{part}"
            cls = names.exact(stem + part.capitalize(), f"/interrupts/{i}/name", source)
            sections.append(
                _Section(cls, schema_of(getattr(intr, part).schema_), where + "/schema")
            )
    errors: list[_Error] = []
    # error classes are named after the models exist (they must not shadow one); their
    # data classes are models, named now
    error_names = {e.name for e in fmt.errors or ()}
    for i, err in enumerate(fmt.errors or ()):
        data_cls = None
        if err.data is not None:
            names.taken |= error_names - {err.name}
            data_cls = names.claim(err.name + "Data", suffix="Model")
            sections.append(
                _Section(data_cls, schema_of(err.data.schema_), f"/errors/{i}/data/schema")
            )
        errors.append(
            _Error(
                code=err.code,
                name=err.name,
                # in the module's docstrings and strings: ASCII look-alikes (ruff RUF001)
                description=plain_text(err.description or ""),
                transient=bool(err.transient),
                data_cls=data_cls,
                where=f"/errors/{i}",
            )
        )
    names.taken |= error_names
    return sections, errors, names


# ---------------------------------------------------------------------------------------
# rendering


def _header(label: str) -> str:
    safe = re.sub(r"[^\x20-\x7e]", "?", label).replace("\\", "/").replace('"""', "'''")
    return (
        f'"""Typed models of the agent manifest {safe}: generated by agentgen, do not edit.\n\n'
        "`Config`, `Input` and `Output` are what the runtime validates and hands to the\n"
        "handler; each interrupt has a `<Name>Payload` / `<Name>Resume` pair; each declared\n"
        "error is an exception class (raise it in the handler: the client gets its code,\n"
        "message and `data` = {name, transient, details}).\n"
        '"""'
    )


def _doc(text: str) -> str:
    text = "".join(c if c.isprintable() else " " for c in text)
    text = " ".join(text.split()) or "An error the manifest declares."
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"""{text}"""'


def _bound_names(src: str) -> set[str]:
    """Every name the module binds at top level or reads anywhere."""
    import ast

    tree = pysource.parse(src)
    out = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            out.add(node.name)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def _render_errors(errors: list[_Error], names: _Names) -> Iterator[str]:
    yield f'''

class {BASE_ERROR}(Exception):
    """Base of the errors this manifest declares (`except {BASE_ERROR}` catches them all)."""

    code: ClassVar[int]
    error_name: ClassVar[str]
    transient: ClassVar[bool] = False
    description: ClassVar[str] = ""

    def __init__(self, message: str = "", *, data: Any = None) -> None:
        super().__init__(message or self.description or type(self).__name__)
        self.data = data
'''
    table: list[tuple[int, str]] = []
    for err in errors:
        cls = names.claim(err.name, suffix="Error")
        table.append((err.code, cls))
        flags = f"code {err.code}, transient" if err.transient else f"code {err.code}"
        default_msg = json.dumps(err.description or err.name, ensure_ascii=False)
        summary = err.description.strip().rstrip(".") or f"`{err.name}`"
        lines = [
            "",
            "",
            f"class {cls}({BASE_ERROR}):",
            f"    {_doc(f'{summary} ({flags}).')}",
            "",
            f"    code: ClassVar[int] = {err.code}",
            f"    error_name: ClassVar[str] = {json.dumps(err.name)}",
            f"    transient: ClassVar[bool] = {err.transient}",
            f"    description: ClassVar[str] = {json.dumps(err.description, ensure_ascii=False)}",
        ]
        if err.data_cls is not None:
            lines += [
                f"    data: {err.data_cls} | None",
                "",
                "    def __init__(",
                f"        self, message: str = {default_msg}, *, data: {err.data_cls} | None = None",
                "    ) -> None:",
                "        super().__init__(message, data=data)",
            ]
        else:
            lines += [
                "",
                f"    def __init__(self, message: str = {default_msg}, *, data: Any = None) -> None:",
                "        super().__init__(message, data=data)",
            ]
        yield "\n".join(lines) + "\n"
    entries = ", ".join(f"{code}: {cls}" for code, cls in table)
    yield (
        "\n\n# JSON-RPC error code -> the exception class (a client maps errors back with it)\n"
        f"{ERRORS_TABLE}: dict[int, type[{BASE_ERROR}]] = {{{entries}}}\n"
    )


def generate_manifest_models(
    manifest: dict[str, Any], *, source_label: str = "agent.yaml", source: str | None = None
) -> str:
    """The source of `manifest_models.py` for `manifest` (contract 3's dict).

    `source_label` names the manifest in the module's docstring; `source` (default: the
    label) locates errors.  The options the `llm` block makes (llm.py) are part of
    `Config`, as the agent serves them."""
    from .llm import with_llm_options

    where = source or source_label
    if isinstance(manifest, dict):
        manifest = with_llm_options(manifest)
    try:
        return _generate(manifest, source_label, where)
    except RecursionError:
        raise AgentgenError(
            "the manifest nests too deeply to generate models", source=where
        ) from None


def _generate(manifest: Any, source_label: str, where: str) -> str:
    from ..codegen import ruff_format
    from .datamodel import models_from_schema

    sections, errors, names = _plan(manifest, where)
    header = _header(source_label)
    classes: dict[str, str] = {}
    if sections:
        document = _compose(sections, names, where)
        generated = models_from_schema(
            document, header=header, extra_imports=("typing.Any", "typing.ClassVar"), source=where
        )
        body, classes = generated.source, generated.classes
    else:
        body = (
            f"{header}\n\nfrom __future__ import annotations\n\nfrom typing import Any, ClassVar\n"
        )
    for sec in sections:
        got = classes.get(f"#/$defs/{sec.cls}")
        if got != sec.cls:
            raise AgentgenError(
                f"the model {sec.cls} could not be generated under its own name (got {got})",
                source=where,
                pointer=sec.where,
                hint="a nested definition or inline object takes the same name: rename it",
            )
    defined = _bound_names(body)
    # error classes may now take their own names, unless the models use them
    names.taken = (
        (names.taken - {e.name for e in errors})
        | defined
        | _TEMPLATE_NAMES
        | {BASE_ERROR, ERRORS_TABLE}
    )
    src = body.rstrip("\n") + "\n" + "".join(_render_errors(errors, names))
    return ruff_format(src, "manifest_models.py")


def run_manifest_models(manifest_path: Path, *, out: Path) -> int:
    """`agentgen models --manifest agent.yaml -o OUT.py` (AGNTCY manifests too)."""
    from ..files import write_output
    from .validate import load_valid

    loaded = load_valid(manifest_path)  # the checks `validate` runs, located in the file
    src = generate_manifest_models(
        loaded.data, source_label=Path(manifest_path).name, source=loaded.source
    )
    write_output(out, src, "the models")
    from .. import console

    count = src.count(chr(10) + "class ")
    console.summary(f"wrote {out}: {count} models from {Path(manifest_path).name}")
    return 0


def dogfood_outputs(repo: Path) -> dict[Path, str]:
    """Every module agentgen generates from its own inputs, keyed by where it is
    committed: the manifest-format models (inside the package, and their copy in
    generated/manifest/) and each example's manifest models in generated/examples/."""
    from .format import format_models_source

    fmt = format_models_source()
    out = {
        repo / "generator" / "manifest" / "format_models.py": fmt,
        repo / "generated" / "manifest" / "format_models.py": fmt,
    }
    for manifest in sorted((repo / "examples").glob("*/agent.yaml")):
        from .load import load_manifest

        loaded = load_manifest(manifest)
        out[repo / "generated" / "examples" / manifest.parent.name / "manifest_models.py"] = (
            generate_manifest_models(loaded.data, source_label=manifest.name)
        )
    return out
