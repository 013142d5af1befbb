"""The generated client never hangs and says what went wrong in the user's terms
(issue 23): the golden client projects (`generated/projects/echo-client-stdio`,
`echo-client-http`) are installed (`uv pip install`) and their console script
`echo-agent-client` run as a user would, against agents that misbehave: one that never
answers, one that prints to stdout, one that asks to retry later, one that is not there,
one that asks a question nobody can answer.  The misbehaving agents are small scripts
written here (raw JSON-RPC on stdio, or a raw HTTP server); every frame the client reads
or writes is still checked against the revision's schema (ACP_WIRE_CHECK=1)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from queue import Empty, Queue
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "generated" / "projects"
PY = sys.executable
UV = str(Path(PY).parent / "uv")  # the dev extra's

pytestmark = pytest.mark.slow  # installs two projects, runs their console scripts


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    return install_scripts(tmp_path_factory)


_INSTALLED: dict[str, tuple[Path, Path]] = {}


def install_scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """transport -> (the installed console script, its site dir): installed once a test
    process (the session's temporary folder) for the modules that run them, which only
    read the install."""
    if _INSTALLED:
        return dict(_INSTALLED)
    out: dict[str, tuple[Path, Path]] = {}
    for transport in ("stdio", "http"):
        site = tmp_path_factory.mktemp(f"site-{transport}")
        src = tmp_path_factory.mktemp(f"src-{transport}") / "project"
        shutil.copytree(GOLDEN / f"echo-client-{transport}", src)  # the build writes there
        # uv's pip: the same install as pip's (a wheel built in isolation, the console
        # script written for this Python), in a second instead of ten
        install = [UV, "pip", "install", "-q", "--no-deps", "--python", PY]
        pip = subprocess.run(
            [*install, "--target", str(site), str(src)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert pip.returncode == 0, pip.stdout + pip.stderr
        out[transport] = (site / "bin" / "echo-agent-client", site)
    _INSTALLED.update(out)
    return out


def _run(
    scripts: dict[str, tuple[Path, Path]],
    transport: str,
    *args: str,
    prompts: str = "hello\n",
    timeout: float = 60,
    cwd: Path | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    script, site = scripts[transport]
    return subprocess.run(
        [str(script), *args],
        input=prompts,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(site), **env},
    )


# The line-framed JSON-RPC I/O of the raw agents the client tests start (`import json, sys`
# first): `send` a message, `read` the next one (exit at the end of input).
RAW_IO = r"""

def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def read():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)
"""

# A raw ACP v1 agent on stdio whose prompts steer it:
#   `busy KEY WAIT N`: the first N prompts fail (transient, data[KEY] = WAIT), then "ok"
#   `ask`: asks session/request_permission; rejected -> the turn ends cancelled
#   anything else: echoed
RAW_AGENT = (
    r"""
import json, sys

failures = {"n": 0}
next_id = [100]
"""
    + RAW_IO
    + r"""

def say(sid, text):
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid,
          "update": {"sessionUpdate": "agent_message_chunk",
                     "content": {"type": "text", "text": text}}}})


while True:
    msg = read()
    method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 1,
              "agentCapabilities": {}, "authMethods": []}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": "s1"}})
    elif method == "session/prompt":
        sid = params["sessionId"]
        text = "".join(b.get("text", "") for b in params["prompt"])
        words = text.split()
        if words and words[0] == "busy" and failures["n"] < int(words[3]):
            failures["n"] += 1
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": 1001, "message": "busy",
                  "data": {"name": "Busy", words[1]: float(words[2])}}})
            continue
        if words and words[0] == "ask":
            next_id[0] += 1
            send({"jsonrpc": "2.0", "id": next_id[0], "method": "session/request_permission",
                  "params": {"sessionId": sid,
                             "toolCall": {"toolCallId": "t1", "title": "run ls"},
                             "options": [
                                 {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                                 {"optionId": "no", "name": "Reject", "kind": "reject_once"}]}})
            answer = read()
            outcome = answer["result"]["outcome"]
            allowed = outcome.get("optionId") == "yes"
            say(sid, "allowed" if allowed else "rejected")
            send({"jsonrpc": "2.0", "id": rid,
                  "result": {"stopReason": "end_turn" if allowed else "cancelled"}})
            continue
        say(sid, "ok")
        send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})
"""
)


@pytest.fixture(scope="module")
def raw_agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("raw") / "raw_agent.py"
    path.write_text(RAW_AGENT)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- 1. a start-up deadline ------------------------------------------------------


def test_an_agent_that_never_answers_initialize_ends_the_client(
    scripts: dict[str, tuple[Path, Path]],
) -> None:
    done = _run(scripts, "stdio", "--connect-timeout", "0.5", "--", "sleep", "100")
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        (
            "error: the agent `sleep 100` did not answer initialize within 0.5s "
            "(raise it with --connect-timeout or ACP_CONNECT_TIMEOUT)"
        )
    ]
    # the environment variable sets it too
    done = _run(scripts, "stdio", "--", "sleep", "100", ACP_CONNECT_TIMEOUT="0.3")
    assert done.returncode == 1
    assert "did not answer initialize within 0.3s" in done.stderr
    # the default is documented
    assert "default 30" in _run(scripts, "stdio", "--help").stdout


def test_a_url_that_accepts_and_never_answers_ends_the_client(
    scripts: dict[str, tuple[Path, Path]],
) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        url = f"http://127.0.0.1:{server.getsockname()[1]}/acp"
        done = _run(scripts, "http", "--url", url, "--connect-timeout", "0.5")
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        (
            f"error: {url} did not answer initialize within 0.5s "
            "(raise it with --connect-timeout or ACP_CONNECT_TIMEOUT)"
        )
    ]


# ---- 2. an agent that prints to stdout ---------------------------------------------


def test_an_agent_printing_non_json_on_stdout_is_named(
    scripts: dict[str, tuple[Path, Path]],
) -> None:
    banner = "Starting my-agent v1.2 " + "x" * 100
    agent = f"print({banner!r}, flush=True); import sys; sys.stdin.read()"
    done = _run(scripts, "stdio", "--", PY, "-c", agent)
    assert done.returncode == 1, done.stderr
    shown = banner[:77] + "..."
    assert done.stderr.splitlines() == [
        (
            f'error: the agent wrote something that is not ACP on stdout: "{shown}" '
            "(agents must log to stderr)"
        )
    ]


# ---- 3. retry_after ----------------------------------------------------------------


@pytest.mark.parametrize("key", ["retry_after", "retryAfter"])
def test_retry_after_in_the_error_data_is_honoured_and_capped(
    scripts: dict[str, tuple[Path, Path]], raw_agent: Path, key: str
) -> None:
    done = _run(scripts, "stdio", "--", PY, str(raw_agent), prompts=f"busy {key} 0.25 2\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert [line for line in done.stderr.splitlines() if "-- retry" in line] == [
        "error 1001 Busy (transient): busy -- retry 1 of 3 in 0.25s",
        "error 1001 Busy (transient): busy -- retry 2 of 3 in 0.25s",
    ]
    # a retry_after beyond --max-retry-wait waits that maximum
    done = _run(
        scripts,
        "stdio",
        "--max-retry-wait",
        "0.05",
        "--",
        PY,
        str(raw_agent),
        prompts=f"busy {key} 3600 1\n",
    )
    assert done.returncode == 0, done.stderr
    assert "error 1001 Busy (transient): busy -- retry 1 of 3 in 0.05s" in done.stderr


class _Server503(ThreadingHTTPServer):
    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.events: Queue[dict[str, Any]] = Queue()


class _Agent503(BaseHTTPRequestHandler):
    """Just enough Streamable HTTP (HTTP/1.1): `initialize` answered in the POST, the
    rest on the connection's SSE stream; the first `session/prompt` gets 503 with
    `Retry-After: 120`.  The SSE events queue is its server's (``_Server503``): a stream
    thread left over from an earlier test's server (it lingers up to 30 s) must not take
    this test's events."""

    protocol_version = "HTTP/1.1"
    server: _Server503
    refused = 0

    @property
    def events(self) -> Queue[dict[str, Any]]:
        return self.server.events

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: bytes = b"", **headers: str) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
            body = json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode()
            self._answer(200, body, Content_Type="application/json", Acp_Connection_Id="c1")
            return
        if method == "session/prompt" and _Agent503.refused == 0:
            _Agent503.refused += 1
            self._answer(503, Retry_After="120")
            return
        self._answer(202)
        if method == "session/new":
            self.events.put({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": "s1"}})
        elif method == "session/prompt":
            chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text"}}
            chunk["content"]["text"] = "ok"  # type: ignore[index]
            self.events.put(
                {
                    "jsonrpc": "2.0",
                    "method": "session/update",
                    "params": {"sessionId": "s1", "update": chunk},
                }
            )
            self.events.put({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if self.headers.get("Acp-Session-Id"):  # the session's stream: nothing on it
            threading.Event().wait(30)
            return
        for _ in range(300):
            try:
                event = self.events.get(timeout=0.1)
            except Empty:
                continue
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            self.wfile.flush()

    def do_DELETE(self) -> None:
        self._answer(202)


@pytest.fixture
def agent_503() -> Iterator[str]:
    with serve_agent_503() as url:
        yield url


@contextlib.contextmanager
def serve_agent_503() -> Iterator[str]:
    """`_Agent503` on a free port: its URL."""
    _Agent503.refused = 0
    server = _Server503(("127.0.0.1", 0), _Agent503)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/acp"
    finally:
        server.shutdown()
        server.server_close()


def test_http_retry_after_on_503_is_honoured_and_capped(
    scripts: dict[str, tuple[Path, Path]], agent_503: str
) -> None:
    done = _run(scripts, "http", "--url", agent_503, "--max-retry-wait", "0.05")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert [line for line in done.stderr.splitlines() if "-- retry" in line] == [
        "error -32603 (transient): session/prompt refused: HTTP 503 -- retry 1 of 3 in 0.05s"
    ]


# ---- 4. failures on our side are not agent errors -----------------------------------


def test_a_refused_connection_is_a_plain_line(scripts: dict[str, tuple[Path, Path]]) -> None:
    url = f"http://127.0.0.1:{_free_port()}/acp"
    done = _run(scripts, "http", "--url", url)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [f"error: cannot connect to {url}: connection refused"]
    done = _run(scripts, "http", "--url", url, "--websocket")
    assert done.returncode == 1, done.stderr
    ws = "ws" + url[4:]
    assert done.stderr.splitlines() == [f"error: cannot connect to {ws}: connection refused"]


def test_a_bad_url_is_a_usage_error(scripts: dict[str, tuple[Path, Path]]) -> None:
    for url in ("127.0.0.1:8000/acp", "http://127.0.0.1:port/acp", "ftp://example.org/acp"):
        done = _run(scripts, "http", "--url", url)
        assert done.returncode == 2, (url, done.stderr)
        assert done.stderr.splitlines()[-1].startswith(f"echo-agent-client: error: --url '{url}'")
        assert "Traceback" not in done.stderr


def test_a_command_that_cannot_start_is_a_plain_line(
    scripts: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    done = _run(scripts, "stdio", "--", "no-such-agent-command", "--flag")
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        "error: cannot start the agent `no-such-agent-command --flag`: command not found"
    ]
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\n")
    done = _run(scripts, "stdio", "--", str(script))
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"error: cannot start the agent `{script}`: permission denied"
    ]


# ---- 5. a question nobody could answer ----------------------------------------------


def test_a_turn_cancelled_for_want_of_an_answer_exits_3(
    scripts: dict[str, tuple[Path, Path]], raw_agent: Path
) -> None:
    done = _run(scripts, "stdio", "--", PY, str(raw_agent), prompts="ask\nhello\n")
    assert done.returncode == 3, done.stderr
    assert done.stdout.split() == ["rejected", "ok"]  # later prompts still run
    lines = done.stderr.splitlines()
    assert "the agent asks permission: run ls -- declined: stdin is not a terminal" in lines[0]
    assert lines[1:3] == [
        "[turn: cancelled]",
        (
            "the turn was cancelled: the agent asked something nobody could answer here "
            "(exit status 3)"
        ),
    ]
    done = _run(scripts, "stdio", "--", PY, str(raw_agent), prompts="hello\n")
    assert done.returncode == 0, done.stderr


def test_dns_and_tls_failures_are_plain_lines(
    scripts: dict[str, tuple[Path, Path]], agent_503: str
) -> None:
    url = "http://no-such-host.invalid/acp"
    done = _run(scripts, "http", "--url", url)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [f"error: cannot connect to {url}: unknown host"]
    # https:// to a server that speaks plain HTTP
    url = "https" + agent_503[4:]
    done = _run(scripts, "http", "--url", url)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: cannot connect to {url}: TLS handshake failed ("), line
