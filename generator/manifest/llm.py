"""The session config options a manifest's `llm` block stands for.

`with_llm_options(manifest)` is the manifest as the generated agent serves it: `llm.models`
becomes the config option `model` (category `model`, an editor's model picker: its values
the model ids, their names the ones given, its default `llm.default_model` when listed,
else the first; `$ACP_MODEL` when listed, at the agent's start, through `default_env`),
`llm.reasoning_levels` the option `thought_level` (category `thought_level`; its default
`llm.default_reasoning_level`, else the first).  Both are appended to `config.options`,
so the runtime lists, checks and sets them as any option (session/new,
session/set_config_option, the Config model, every revision's shape).  `validate` refuses
a manifest declaring either option by hand beside the block that makes it (semantics.py),
so an option already there is left as it is: applying this twice changes nothing.
"""

from __future__ import annotations

import re
from typing import Any

MODEL_OPTION = "model"
THOUGHT_OPTION = "thought_level"
MODEL_ENV = "ACP_MODEL"

# pydantic-ai's model id: `provider:model` (a gateway's `gateway/provider:model`), or
# `test` (its test model); the project's `model` extra runs the first two providers and
# the OpenAI-compatible ones
MODEL_PREFIXES = (
    "openai",
    "anthropic",
    "openrouter",
    "deepseek",
    "ollama",
    "azure",
    "gateway/<provider>",
)
_MODEL_ID = re.compile(r"[a-z][a-z0-9-]*(?:/[a-z0-9-]+)*:\S+")


def model_id_problem(model: str) -> str | None:
    """Why `model` is not a pydantic-ai model id (None: it is one)."""
    if model == "test" or _MODEL_ID.fullmatch(model):
        return None
    prefixes = ", ".join(f"{p}:" for p in MODEL_PREFIXES)
    return (
        f"{model!r} is not a pydantic-ai model id: give `provider:model`, e.g. "
        f"openai:gpt-4.1-mini (prefixes: {prefixes}; or `test`, pydantic-ai's test model)"
    )


def model_ids(llm: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(id, name or None) of each model in `llm.models` (entries of a wrong shape skipped)."""
    out: list[tuple[str, str | None]] = []
    for item in llm.get("models") or () if isinstance(llm.get("models"), list) else ():
        if isinstance(item, str):
            out.append((item, None))
        elif isinstance(item, dict) and isinstance(item.get("id"), str):
            name = item.get("name")
            out.append((item["id"], name if isinstance(name, str) else None))
    return out


def with_llm_options(manifest: dict[str, Any]) -> dict[str, Any]:
    """`manifest` with the options its `llm` block makes (a new dict; `manifest` untouched)."""
    llm = manifest.get("llm")
    if not isinstance(llm, dict):
        return manifest
    config = manifest.get("config")
    options = config.get("options") if isinstance(config, dict) else None
    have = {o.get("id") for o in options or () if isinstance(o, dict)}
    extra = [
        opt
        for opt in (_model_option(llm), _thought_option(llm))
        if opt is not None and opt["id"] not in have
    ]
    if not extra:
        return manifest
    new_config = dict(config) if isinstance(config, dict) else {}
    new_config["options"] = [*(options or ()), *extra]
    return {**manifest, "config": new_config}


def _model_option(llm: dict[str, Any]) -> dict[str, Any] | None:
    models = model_ids(llm)
    if not models:
        return None
    ids = [m for m, _ in models]
    default = llm.get("default_model")
    option: dict[str, Any] = {
        "id": MODEL_OPTION,
        "name": "Model",
        "type": "choice",
        "category": "model",
        "description": "The model the agent runs",
        "values": ids,
        "default": default if default in ids else ids[0],
        "default_env": MODEL_ENV,
    }
    names = {m: n for m, n in models if n}
    if names:
        option["value_names"] = names
    return option


def _thought_option(llm: dict[str, Any]) -> dict[str, Any] | None:
    levels = llm.get("reasoning_levels")
    if not isinstance(levels, list) or not levels:
        return None
    default = llm.get("default_reasoning_level")
    return {
        "id": THOUGHT_OPTION,
        "name": "Reasoning",
        "type": "choice",
        "category": "thought_level",
        "description": "How much the model thinks before it answers",
        "values": list(levels),
        "default": default if default in levels else levels[0],
    }


__all__ = ["MODEL_ENV", "MODEL_OPTION", "THOUGHT_OPTION", "model_ids", "with_llm_options"]
