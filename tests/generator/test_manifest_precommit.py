"""The pre-commit hooks file. The hooks run by the real pre-commit (the hook repository
pip-installed into pre-commit's own environment) are in tests/e2e/test_wheel.py: the
README's snippet, and agentgen-validate alone on a good and a bad manifest as
`pre-commit try-repo` configures it, all on the one install of that module."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_hooks_file_offers_both_hooks() -> None:
    from ruamel.yaml import YAML

    hooks = YAML(typ="safe", pure=True).load((REPO / ".pre-commit-hooks.yaml").read_text())
    by_id = {h["id"]: h for h in hooks}
    assert by_id["agentgen-validate"]["entry"] == "agentgen validate"
    assert by_id["agentgen-check"]["entry"] == "agentgen check --all"
    assert by_id["agentgen-check"]["pass_filenames"] is False
    import re

    pattern = re.compile(by_id["agentgen-validate"]["files"])
    for path in ("agent.yaml", "x/agent.yml", "agent.json", "sub/mail.agent.yaml"):
        assert pattern.search(path), path
    for path in ("agent.yaml.bak", "myagent.yaml", "x/agent.toml", "notes.txt"):
        assert not pattern.search(path), path
