"""`agentgen init --model` (issue 37 item 11): the model's instructions say what the
description says, and a model id without pydantic-ai's `provider:` prefix is refused by
`init` and by `validate` with the prefixes it takes."""

from __future__ import annotations

from pathlib import Path

from ruamel.yaml import YAML
from typer.testing import CliRunner

from generator.cli import app


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_init_gives_the_model_the_description(tmp_path: Path) -> None:
    described = "Reviews Python code for bugs and explains each one."
    code, out = invoke(
        *("init", str(tmp_path), "--yes", "--name", "reviewer"),
        *("--description", described, "--model", "openai:gpt-4.1-mini"),
    )
    assert code == 0, out
    data = YAML(typ="safe").load((tmp_path / "agent.yaml").read_text(encoding="utf-8"))
    assert data["llm"]["default_model"] == "openai:gpt-4.1-mini"
    assert data["llm"]["instructions"] == f"You are reviewer. {described}"


def test_init_refuses_a_model_without_a_provider_prefix(tmp_path: Path) -> None:
    code, out = invoke("init", str(tmp_path), "--yes", "--model", "nonsense")
    assert code == 2, out
    assert "'nonsense' is not a pydantic-ai model id" in out
    assert "openai:" in out and "anthropic:" in out
    assert not (tmp_path / "agent.yaml").exists()


def test_validate_refuses_a_model_id_without_a_provider_prefix(tmp_path: Path) -> None:
    manifest = tmp_path / "agent.yaml"
    manifest.write_text(
        "name: m\nversion: 0.1.0\n"
        "llm:\n  default_model: gpt-4.1-mini\n  models: [test, openai:gpt-4.1-mini, {id: nonsense}]\n",
        encoding="utf-8",
    )
    code, out = invoke("validate", str(manifest))
    assert code == 1, out
    assert "/llm/default_model: 'gpt-4.1-mini' is not a pydantic-ai model id" in out
    assert "/llm/models/2/id: 'nonsense' is not a pydantic-ai model id" in out
    assert "/llm/models/0" not in out and "/llm/models/1" not in out  # `test`, provider:model


def test_init_example_writes_the_examples_manifest_and_handlers(tmp_path: Path) -> None:
    """README started a coding agent from `examples/coder`, which an installed agentgen did
    not carry: `init --example NAME` writes the example's two files (from the package data;
    tests/e2e/test_wheel.py does it from the wheel), never over existing ones."""
    repo = Path(__file__).resolve().parents[2]
    code, out = invoke("init", str(tmp_path / "mine"), "--example", "coder")
    assert code == 0, out
    for name in ("agent.yaml", "handlers.py"):
        ours = (repo / "examples" / "coder" / name).read_text(encoding="utf-8")
        written = (tmp_path / "mine" / name).read_text(encoding="utf-8")
        assert written.endswith(ours) and written.splitlines()[0].startswith(
            "# yaml-language-server: $schema=" if name == "agent.yaml" else ours.splitlines()[0]
        )
    assert "agentgen new coder-agent -m" in out and "coder_agent/handlers.py" in out
    code, out = invoke("validate", str(tmp_path / "mine" / "agent.yaml"))
    assert code == 0, out
    code, out = invoke("init", str(tmp_path / "mine"), "--example", "coder")
    assert code == 2 and "refusing to overwrite" in out, out
    code, out = invoke("init", str(tmp_path / "other"), "--example", "nope")
    assert code == 2 and "coder" in out and "assistant" in out, out
