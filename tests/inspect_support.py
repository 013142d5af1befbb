"""`agentgen inspect` as a user runs it: the command in a subprocess, the URL read from its
first stdout line, an agent built from an example (stdio or HTTP) or the broken test
agent below; and the system's headless Chromium driven by Playwright (nothing downloaded)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hardening_support as hs
from project_support import write_project

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def build_example(
    tmp: Path, schema: dict[str, Any], example: str, package: str, transport: str = "stdio"
) -> dict[str, str]:
    """The project `agentgen new` makes from examples/<example>, with its handlers; the
    environment that runs it (`python -m <package>`, over HTTP with `--port`)."""
    from generator.manifest.load import load_manifest

    write_project(
        tmp,
        package,
        schema=schema,
        manifest=load_manifest(REPO / "examples" / example / "agent.yaml").data,
        transport=transport,
        handlers=(REPO / "examples" / example / "handlers.py").read_text(),
        main="from ._generated import run_agent\nfrom .handlers import Agent\n\n"
        f"run_agent(Agent, None, transport={transport!r})\n",
    )
    return {**os.environ, "PYTHONPATH": str(tmp), "ACP_SESSION_DB": str(tmp / f"{package}.db")}


@contextlib.contextmanager
def http_agent(env: dict[str, str], package: str, cwd: Path) -> Iterator[str]:
    """A generated HTTP agent on a free port; yields its /acp URL."""
    with hs.listening(env, package, cwd=cwd) as agent:
        yield agent.url


class Inspector:
    """A running `agentgen inspect`: its URL (with the token), port and token."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url
        m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/\?token=(\S+)", url)
        assert m, url
        self.port = int(m.group(1))
        self.token = m.group(2)
        self.base = f"http://127.0.0.1:{self.port}"
        self.stderr: list[str] = []  # its lines, as they come

    def read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def wait_stderr(self, text: str, timeout: float = 20) -> str:
        """The first stderr line holding `text` (a poll: another process writes it)."""
        deadline = time.monotonic() + timeout
        while True:
            for line in list(self.stderr):
                if text in line:
                    return line
            assert time.monotonic() < deadline, f"no {text!r} on stderr: {self.stderr}"
            time.sleep(0.05)


@contextlib.contextmanager
def inspector(
    *args: str,
    cwd: Path,
    cache: Path,
    env: dict[str, str] | None = None,
    open_browser: bool = False,
) -> Iterator[Inspector]:
    """`agentgen inspect [--no-open] --port 0 --cwd CWD ARGS...` until the block ends (the
    browser `BROWSER` names is opened with `open_browser`)."""
    full = {"BROWSER": "true", **(env or os.environ), "XDG_CACHE_HOME": str(cache)}
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), full.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "agentgen",
            "inspect",
            *([] if open_browser else ["--no-open"]),
            *("--port", "0", "--cwd", str(cwd), *args),
        ],
        env=full,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.fullmatch(r"agentgen inspect: (http://\S+)\n", line)
        if m is None:
            err = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
            raise AssertionError(f"first stdout line of agentgen inspect: {line!r} {err}")
        found = Inspector(proc, m.group(1))
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        threading.Thread(target=found.read_stderr, daemon=True).start()
        yield found
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


# A deliberately broken agent: valid initialize (one auth method), authenticate and
# session/new, then one session/update whose text block carries a number where the schema
# wants a string; a prompt "wait" is answered (cancelled) only once the client cancels it.
BROKEN_AGENT = r"""
import json, sys

def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()

print("broken agent: up", file=sys.stderr, flush=True)
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 1,
              "agentCapabilities": {},
              "authMethods": [{"id": "login", "name": "Log in", "description": "a test"}],
              "agentInfo": {"name": "broken", "version": "0.0.1"}}})
    elif method == "authenticate":
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": "s1"}})
    elif method == "session/prompt" and msg["params"]["prompt"][0].get("text") == "wait":
        waiting = rid  # answered when the client cancels the turn
    elif method == "session/cancel":
        send({"jsonrpc": "2.0", "id": waiting, "result": {"stopReason": "cancelled"}})
    elif method == "session/prompt":
        send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1",
              "update": {"sessionUpdate": "agent_message_chunk",
                         "content": {"type": "text", "text": 42}}}})
        send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})
    elif rid is not None:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}})
"""


def write_broken_agent(tmp: Path) -> Path:
    path = tmp / "broken_agent.py"
    path.write_text(BROKEN_AGENT)
    return path


def schema_path(shared_acp: Path, rev: str = "v1") -> Path:
    return shared_acp / rev / "schema.json"


def load_schema_file(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))
