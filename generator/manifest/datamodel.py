"""Drive datamodel-code-generator (pinned) on one composed JSON Schema document.

One call per module: the caller composes every schema it needs under `$defs` and gets
back the source of a pydantic v2 module, ruff-formatted, deterministic (no timestamp,
no command line, the same options every time).  Both the manifest models of an agent
and agentgen's own manifest-format models (the dogfood) come through here.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..schemas import SCHEMA_LISTS, SCHEMA_MAPS, SCHEMA_ONE, plain_descriptions

# Formats whose default pydantic type needs an optional package (email-validator):
# generated projects must run with pydantic alone, so these stay plain strings.
_PLAIN_STRING_FORMATS = ("email", "idn-email")


_SCHEMA_MAPS = SCHEMA_MAPS
_SCHEMA_LISTS = SCHEMA_LISTS
_SCHEMA_ONE = SCHEMA_ONE
_SHAPE_KEYS = (
    "properties",
    "patternProperties",
    "additionalProperties",
    "unevaluatedProperties",
    "$ref",
    "allOf",
    "anyOf",
    "oneOf",
)


def free_form_objects(schema: Any) -> Any:
    """Pass: an object schema that declares no property at all accepts any member (JSON
    Schema's default), so it becomes `additionalProperties: true`: without this the
    generated model would be an empty class that drops every member it is given."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {k: free_form_objects(v) for k, v in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [free_form_objects(v) for v in value]
        elif key in _SCHEMA_ONE:
            out[key] = free_form_objects(value)
        else:
            out[key] = value
    types = out.get("type")
    is_object = types == "object" or (isinstance(types, list) and types == ["object"])
    if is_object and not any(k in out for k in _SHAPE_KEYS):
        out["additionalProperties"] = True
    return out


@dataclass(frozen=True)
class Generated:
    source: str  # the module
    classes: dict[str, str]  # "#/$defs/Name" (any schema location) -> its class name


def models_from_schema(
    schema: dict[str, Any],
    *,
    header: str,
    root_class: str | None = None,
    extra_imports: tuple[str, ...] = (),
    source: str = "the manifest",
) -> Generated:
    """The module for `schema`: one class per `$defs` entry (and the root when
    `root_class` is given), inline objects named after their parent (`InputAddress`),
    and which class each schema location became."""
    from datamodel_code_generator.enums import NamingStrategy
    from datamodel_code_generator.format import Formatter
    from datamodel_code_generator.parser import LiteralType

    from .. import codegen

    options: dict[str, Any] = {
        "allow_population_by_field_name": True,
        "use_schema_description": True,
        "use_field_description": True,
        "naming_strategy": NamingStrategy.ParentPrefixed,
        "enum_field_as_literal": LiteralType.All,
        "type_mappings": [f"{f}=string" for f in _PLAIN_STRING_FORMATS],
        "formatters": [Formatter.BUILTIN],
        "custom_file_header": header,
        "additional_imports": list(extra_imports) or None,
    }
    if root_class is None:
        options["skip_root_model"] = True
    else:
        options["class_name"] = root_class
    with tempfile.TemporaryDirectory(prefix="agentgen-models-") as tmp:
        out_path, meta_path = Path(tmp) / "models.py", Path(tmp) / "models.json"
        options["output"], options["emit_model_metadata"] = out_path, meta_path
        codegen.run(
            json.dumps(plain_descriptions(free_form_objects(schema)), ensure_ascii=False),
            source=source,
            hint="check the embedded JSON Schemas with `agentgen validate`",
            **options,
        )
        src = out_path.read_text(encoding="utf-8")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    classes = {
        str(m["source_ref"]): str(m["class_name"])
        for m in meta.get("models") or ()
        if m.get("source_ref") and m.get("class_name")
    }
    return Generated(src, classes)
