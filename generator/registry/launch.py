"""`agentgen registry check --launch`: run the entry's agent as an editor would, from its
wheel, and check the `initialize` handshake the registry's CI checks.

The project (two levels above `acp-registry/<id>/`) is built into `dist/` (`pip wheel`),
then started with `uvx --from dist/<wheel> <script> [args]` (the uvx distribution's
package name is the script, as `uvx <package>` runs it) under a temporary HOME, with the
distribution's env. It must answer `initialize` (protocol version 1, fs and terminal
declared, as the registry's CI sends it) listing an auth method of type `agent` or
`terminal`: its `type`, else `_meta` `terminal-auth` / `agent-auth`, else agent.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import AgentgenError
from .entry import load, project_version

HANDSHAKE_TIMEOUT = 180.0  # seconds: uvx may download the wheel's dependencies first

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": 1,
        "clientInfo": {"name": "agentgen registry check", "version": "1.0.0"},
        "clientCapabilities": {
            "fs": {"readTextFile": True, "writeTextFile": True},
            "terminal": True,
            "_meta": {"terminal-auth": True},
        },
    },
}


def method_type(method: dict[str, Any]) -> str:
    """A listed auth method's type, read as the registry reads it."""
    kind = method.get("type")
    if isinstance(kind, str) and kind:
        return kind
    meta = method.get("_meta")
    if isinstance(meta, dict):
        if "terminal-auth" in meta:
            return "terminal"
        if "agent-auth" in meta:
            return "agent"
    return "agent"


def uvx_command() -> str:
    for candidate in (shutil.which("uvx"), str(Path(sys.executable).parent / "uvx")):
        if candidate and Path(candidate).is_file():
            return candidate
    raise AgentgenError("uvx is not installed", hint="pip install uv (it is on PyPI)")


def build_wheel(root: Path) -> Path:
    """`pip wheel` the project into `root/dist/`; the wheel of pyproject's version."""
    dist = root / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise AgentgenError(f"could not build the wheel: {tail}", source=str(root))
    version = project_version(root) or ""
    wheels = sorted(dist.glob("*.whl"), key=lambda p: p.stat().st_mtime)
    for wheel in reversed(wheels):
        parts = wheel.name.split("-")
        if len(parts) > 1 and parts[1] == version.replace("-", "_"):
            return wheel
    if wheels:
        return wheels[-1]
    raise AgentgenError("pip wheel made no wheel", source=str(dist))


def _read_line(proc: subprocess.Popen[bytes], deadline: float) -> bytes | None:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            return buf or None
        buf += chunk
        if b"\n" in buf:
            return buf.split(b"\n", 1)[0]
    return None


def handshake(
    command: list[str], env: dict[str, str], timeout: float = HANDSHAKE_TIMEOUT
) -> tuple[dict[str, Any] | None, str]:
    """Start `command`, send `initialize`, return (its answer, stderr's tail)."""
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdin is not None and proc.stderr is not None
    try:
        proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        proc.stdin.flush()
        line = _read_line(proc, time.monotonic() + timeout)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    err = proc.stderr.read().decode("utf-8", "replace").strip().splitlines()
    proc.stderr.close()
    if proc.stdout is not None:
        proc.stdout.close()
    if line is None:
        return None, err[-1] if err else ""
    try:
        answer = json.loads(line)
    except ValueError:
        return None, "stdout carried something that is not JSON-RPC: " + line[:80].decode(
            "utf-8", "replace"
        )
    return (answer if isinstance(answer, dict) else None), ""


def launch_lines(folder: Path) -> list[str]:
    """Problems found launching the entry in `folder`, one line each."""
    path = folder / "agent.json"
    where = f"{path}: launch"
    root = folder.parent.parent
    if not (root / "pyproject.toml").is_file():
        return [f"{where}: no project (pyproject.toml) two folders up to build the wheel from"]
    data: Any = load(path).value
    uvx = (data.get("distribution") or {}).get("uvx") if isinstance(data, dict) else None
    if not isinstance(uvx, dict) or not isinstance(uvx.get("package"), str):
        return [f"{where}: no uvx distribution to launch"]
    script = re.split(r"[<>=!@\[\s;]", uvx["package"], maxsplit=1)[0]
    args = [str(a) for a in uvx.get("args") or ()]
    wheel = build_wheel(root)
    with tempfile.TemporaryDirectory(prefix="acp-registry-home-") as home:
        env = {**os.environ, "HOME": home, "TERM": "dumb"}
        env.pop("VIRTUAL_ENV", None)
        env.update({str(k): str(v) for k, v in (uvx.get("env") or {}).items()})
        command = [uvx_command(), "--from", str(wheel), script, *args]
        answer, err = handshake(command, env)
    shown = " ".join(["uvx", "--from", os.path.relpath(wheel, root), script, *args])
    if answer is None:
        return [f"{where}: `{shown}` did not answer initialize" + (f" ({err})" if err else "")]
    if "error" in answer:
        return [f"{where}: initialize answered an error: {answer['error']}"]
    result = answer.get("result")
    methods = result.get("authMethods") if isinstance(result, dict) else None
    if not isinstance(methods, list) or not methods:
        why = "the registry needs one of type agent or terminal (the manifest's `auth`)"
        return [f"{where}: initialize lists no auth method: {why}"]
    kinds = [method_type(m) for m in methods if isinstance(m, dict)]
    if not {"agent", "terminal"} & set(kinds):
        return [f"{where}: no auth method of type agent or terminal (found {kinds})"]
    out = []
    for m in methods:
        if isinstance(m, dict) and method_type(m) == "terminal":
            meta = m.get("_meta") if isinstance(m.get("_meta"), dict) else {}
            legacy = meta.get("terminal-auth") if isinstance(meta, dict) else None
            margs = m.get("args") if "args" in m else (legacy or {}).get("args")
            if not margs:
                out.append(f"{where}: terminal method {m.get('id')!r} has no args to start a login")
    return out
