"""A generated project is a real Python project: `pip install` builds it (package data
included), its console script speaks ACP on stdio, and it depends on pydantic and the
runtime's libraries, never on agentgen."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[2] / "generated" / "projects" / "echo-agent-stdio"


@pytest.mark.slow
def test_pip_install_then_the_console_script_runs_the_agent(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(GOLDEN, src)
    site = tmp_path / "site"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr

    meta = next(site.glob("echo_agent-*.dist-info")) / "METADATA"
    requires = [
        line.split(":", 1)[1].strip()
        for line in meta.read_text().splitlines()
        if line.startswith("Requires-Dist:")
    ]
    names = {r.split(";")[0].split("<")[0].split(">")[0].split("=")[0].strip() for r in requires}
    assert {"pydantic", "orjson"} <= names
    assert not {n for n in names if "agentgen" in n.lower()}, requires

    for path in (site / "echo_agent").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            mods = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            assert not [m for m in mods if m.split(".")[0] in ("generator", "agentgen")], path

    assert (site / "echo_agent" / "_generated" / "manifest.json").is_file()
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.Popen(
        [str(site / "bin" / "echo-agent")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None

    def call(rid: int, method: str, params: dict[str, object]) -> list[dict[str, object]]:
        """Send one request; every line up to and including its answer."""
        assert proc.stdin is not None and proc.stdout is not None
        msg = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        proc.stdin.write(json.dumps(msg) + "\n")
        proc.stdin.flush()
        seen = []
        while True:
            line = proc.stdout.readline()
            assert line, "the agent closed stdout"
            seen.append(json.loads(line))
            if seen[-1].get("id") == rid:
                return seen

    try:
        init = call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})[-1]
        assert init["result"]["agentInfo"]["name"] == "echo-agent"  # type: ignore[index]
        sid = call(2, "session/new", {"cwd": "/", "mcpServers": []})[-1]["result"]["sessionId"]  # type: ignore[index]
        text = "installed and echoing"
        seen = call(
            3, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        )
        assert seen[-1]["result"] == {"stopReason": "end_turn"}
        chunks = [m["params"]["update"]["content"]["text"] for m in seen[:-1]]  # type: ignore[index]
        assert chunks == [text]
    finally:
        proc.stdin.close()
        rc = proc.wait(30)
    assert rc == 0, proc.stderr.read() if proc.stderr else ""
