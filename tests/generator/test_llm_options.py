"""The config options a manifest's `llm` block makes (generator/manifest/llm.py): the
model picker from `llm.models`, the reasoning level from `llm.reasoning_levels`, part of
the manifest the agent serves (manifest.json) and of its Config model."""

from __future__ import annotations

import copy
from typing import Any

from generator.manifest.llm import with_llm_options
from generator.manifest.models import generate_manifest_models

MANIFEST: dict[str, Any] = {
    "name": "picker",
    "version": "0.1.0",
    "llm": {
        "models": ["openai:gpt-4.1-mini", {"id": "anthropic:claude-sonnet-4-5", "name": "Claude"}],
        "default_model": "anthropic:claude-sonnet-4-5",
        "reasoning_levels": ["low", "high"],
    },
    "config": {"options": [{"id": "tone", "type": "choice", "values": ["plain", "warm"]}]},
}


def test_the_llm_block_makes_the_model_and_thought_level_options() -> None:
    before = copy.deepcopy(MANIFEST)
    served = with_llm_options(MANIFEST)
    assert MANIFEST == before  # the manifest given is left as it is
    tone, model, level = served["config"]["options"]
    assert tone == MANIFEST["config"]["options"][0]
    assert model == {
        "id": "model",
        "name": "Model",
        "type": "choice",
        "category": "model",
        "description": "The model the agent runs",
        "values": ["openai:gpt-4.1-mini", "anthropic:claude-sonnet-4-5"],
        "default": "anthropic:claude-sonnet-4-5",
        "default_env": "ACP_MODEL",
        "value_names": {"anthropic:claude-sonnet-4-5": "Claude"},
    }
    assert level["id"] == "thought_level" and level["category"] == "thought_level"
    assert level["values"] == ["low", "high"] and level["default"] == "low"
    assert with_llm_options(served) == served  # twice: nothing more


def test_without_a_default_the_first_model_is_the_pickers_default() -> None:
    served = with_llm_options({"name": "a", "version": "1", "llm": {"models": ["x:a", "x:b"]}})
    (model,) = served["config"]["options"]
    assert model["default"] == "x:a" and "value_names" not in model
    bare = {"name": "a", "version": "1", "llm": {"default_model": "x:a"}}
    assert with_llm_options(bare) is bare  # no models, no levels: no option


def test_the_config_model_types_the_options_the_block_makes() -> None:
    source = generate_manifest_models(MANIFEST)
    config = source[source.index("class Config(") : source.index("class ManifestError")]
    assert 'model: Literal["openai:gpt-4.1-mini", "anthropic:claude-sonnet-4-5"]' in config
    assert 'thought_level: Literal["low", "high"] | None = "low"' in config
