"""Fail-closed auth, credentials in URLs, log redaction and deep messages (issue 11).

* An auth secret that is unset or empty stops the agent at start (one line naming the
  variable, non-zero exit) unless ``--allow-missing-auth``; then it warns and that scheme
  refuses everyone, an empty ``Authorization: Bearer`` included (HTTP and WebSocket).
* Tokens are compared as UTF-8 bytes: a non-ASCII token authenticates.
* A ``baseUrl`` with credentials (userinfo, query values) is never echoed: providers/list
  and a route's repr show it masked, the research example streams it masked, and neither
  the stored history nor the log holds it.
* Logging: the redacting filter keeps uvicorn's access formatter working; a stray response
  per frame logs one warning, not one each; each connection may hold a bounded number of
  secret values (refused beyond, never dropped) and they are forgotten when it ends.
* A prompt nested deeper than the limit answers -32602 over stdio and HTTP, no traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import hardening_support as hs
import httpx
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PKG = "sec11agent"
TOKEN = "tok-issue11-0123456789"
URL_PASSWORD = "urlpw-SECRET-7788"
URL_KEY = "qkey-SECRET-9911"
CRED_URL = f"https://user:{URL_PASSWORD}@llm.example.org/v1?key={URL_KEY}&mode=x"
MANIFEST = {**hs.MANIFEST, "name": "sec11-agent", "auth": [{"type": "bearer", "env": "S11_TOKEN"}]}
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("sec11")
    handlers = hs.HANDLERS.replace(
        '        if word == "route":',
        '        if word == "leakurl":  # an error message holding the provider URL\n'
        '            raise RuntimeError("upstream refused " + turn.provider("main").base_url)\n'
        '        if word == "route":',
    )
    env = hs.build(tmp, shared_acp, PKG, manifest=MANIFEST, handlers=handlers)
    return {"env": {**env, "S11_TOKEN": TOKEN}, "tmp": tmp}


def _stop(proc: subprocess.Popen[bytes]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=15)
    return err.decode(errors="replace")


class WsPeer:
    """A WebSocket client of the agent: send a request, read until its answer."""

    def __init__(self, port: int, token: str = TOKEN) -> None:
        import websockets.sync.client as ws_client

        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(
            ws_client.connect(
                f"ws://127.0.0.1:{port}/acp",
                additional_headers={"Authorization": "Bearer " + token},
                open_timeout=10,
                max_size=None,
            )
        )
        self.frames: list[str] = []

    def call(self, rid: int, method: str, params: Any) -> tuple[dict[str, Any], list[Any]]:
        self.ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}))
        seen: list[Any] = []
        while True:
            raw = self.ws.recv(timeout=10)
            self.frames.append(str(raw))
            msg = json.loads(raw)
            if "method" not in msg and msg.get("id") == rid:
                return msg, seen
            seen.append(msg)

    def close(self) -> None:
        self._stack.close()


# ---- 1. fail closed ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", None], ids=["empty", "unset"])
def test_missing_or_empty_secret_refuses_to_start(
    built: dict[str, Any], value: str | None, tmp_path: Path
) -> None:
    env = {k: v for k, v in built["env"].items() if k != "S11_TOKEN"}
    if value is not None:
        env["S11_TOKEN"] = value
    proc = subprocess.run(
        [sys.executable, "-m", PKG, "--port", str(hs.free_port())],
        env={**env, "ACP_TEST_TRANSPORT": "http", "ACP_SESSION_DB": str(tmp_path / "s.db")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "S11_TOKEN" in lines[0] and ("empty" if value == "" else "not set") in lines[0]
    assert "--allow-missing-auth" in lines[0] and "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir())  # refused before opening the session store


def test_allowed_missing_secret_warns_and_refuses_everyone(
    built: dict[str, Any], tmp_path: Path
) -> None:
    """Started with --allow-missing-auth (here its env form): a warning names the variable;
    `Authorization: Bearer` with nothing after it is refused over HTTP and WebSocket."""
    import websockets
    import websockets.sync.client as ws_client

    port = hs.free_port()
    proc = hs.start_http(
        built["env"],
        PKG,
        port,
        S11_TOKEN="",
        ACP_ALLOW_MISSING_AUTH="1",
        ACP_SESSION_DB=str(tmp_path / "s.db"),
    )
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            body = json.dumps(INIT).encode()
            s.sendall(
                b"POST /acp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Authorization: Bearer\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert s.recv(65536).split(b" ", 2)[1] == b"401"
        for value in ("Bearer", "Bearer  x"):
            r = httpx.post(
                f"http://127.0.0.1:{port}/acp", json=INIT, headers={"Authorization": value}
            )
            assert r.status_code == 401, value
        with pytest.raises(websockets.InvalidStatus) as refused:
            ws_client.connect(
                f"ws://127.0.0.1:{port}/acp", additional_headers={"Authorization": "Bearer"}
            )
        assert refused.value.response.status_code == 401
    finally:
        err = _stop(proc)
    assert "S11_TOKEN is empty; that scheme accepts nothing" in err


def test_empty_credentials_never_match_in_process(built: dict[str, Any]) -> None:
    hs.load(built["tmp"], PKG)
    auth_mod = hs.runtime_of(PKG, "auth")
    with pytest.raises(auth_mod.MissingSecret, match="T is empty"):
        auth_mod.Auth([{"type": "bearer", "env": "T"}], {"T": ""})
    with pytest.raises(auth_mod.MissingSecret, match="B is empty"):
        auth_mod.Auth([{"type": "basic", "env": "B"}], {"B": "user:"})
    auth = auth_mod.Auth(
        [{"type": "bearer", "env": "T"}, {"type": "api_key", "env": "K"}],
        {"T": ""},
        allow_missing=True,
    )
    for headers in ({"authorization": "Bearer"}, {"authorization": "Bearer "}, {"x-api-key": ""}):
        assert not auth.accepts(headers)


# ---- 8. UTF-8 tokens ----------------------------------------------------------------------


def test_non_ascii_token_authenticates_with_its_utf8_bytes(built: dict[str, Any]) -> None:
    hs.load(built["tmp"], PKG)
    http = hs.runtime_of(PKG, "http_server")
    auth_mod = hs.runtime_of(PKG, "auth")
    from test_http_transport import echo_factory, running_server

    token = "jeton-été-🔑-42"
    auth = auth_mod.Auth([{"type": "bearer", "env": "T"}], {"T": token})
    with running_server(http.create_app(echo_factory, auth=auth)) as addr:
        url = f"http://{addr}/acp"
        utf8 = httpx.post(url, json=INIT, headers={"Authorization": b"Bearer " + token.encode()})
        assert utf8.status_code == 200
        latin = "jeton-été-42"  # a Latin-1 token sent as Latin-1 bytes is not its UTF-8 form
        auth2 = auth_mod.Auth([{"type": "bearer", "env": "T"}], {"T": latin})
        assert not auth2.accepts({"authorization": "Bearer " + latin})  # decoded as Latin-1
        assert auth2.accepts({"authorization": ("Bearer " + latin).encode().decode("latin-1")})


# ---- 2. credentials in URLs ---------------------------------------------------------------


def test_mask_url() -> None:
    from runtime.wire.masking import mask_url, url_secrets

    assert mask_url(CRED_URL) == "https://***@llm.example.org/v1?key=***&mode=***"
    assert mask_url("https://api.openai.com/v1") == "https://api.openai.com/v1"
    assert mask_url("http://u@[::1]:8080/p?flag#tok") == "http://***@[::1]:8080/p?flag"
    assert {"user", URL_PASSWORD, URL_KEY} <= set(url_secrets(CRED_URL))
    assert "a b" in url_secrets("https://h/?k=a%20b")


def _set_cred_url(peer: WsPeer, rid: int) -> None:
    r, _ = peer.call(
        rid,
        "providers/set",
        {"providerId": "main", "apiType": "openai", "baseUrl": CRED_URL, "headers": {}},
    )
    assert r["result"] == {}


def test_url_credentials_never_echoed_streamed_stored_or_logged(
    built: dict[str, Any], tmp_path: Path
) -> None:
    """The generic agent: providers/list masks the URL, a route's repr streamed into the
    turn masks it, a handler error holding the URL is redacted in the log; the session
    store file and a session/load replay hold no credential."""
    port = hs.free_port()
    db = tmp_path / "s.db"
    proc = hs.start_http(built["env"], PKG, port, ACP_SESSION_DB=str(db))
    frames: list[str] = []
    try:
        peer = WsPeer(port)
        peer.call(1, "initialize", INIT["params"])
        sid = peer.call(2, "session/new", {"cwd": "/tmp", "mcpServers": []})[0]["result"][
            "sessionId"
        ]
        _set_cred_url(peer, 3)
        listed, _ = peer.call(4, "providers/list", {})
        main = next(p for p in listed["result"]["providers"] if p["providerId"] == "main")
        assert main["current"]["baseUrl"] == "https://***@llm.example.org/v1?key=***&mode=***"
        _, updates = peer.call(5, "session/prompt", hs.text_prompt(sid, "route"))
        assert "base_url='https://***@llm.example.org/v1?key=***&mode=***'" in json.dumps(updates)
        failed, _ = peer.call(6, "session/prompt", hs.text_prompt(sid, "leakurl"))
        assert failed["error"]["code"] == -32603
        peer.close()
        frames += peer.frames
        again = WsPeer(port)
        again.call(1, "initialize", INIT["params"])
        loaded, replay = again.call(
            2, "session/load", {"sessionId": sid, "cwd": "/", "mcpServers": []}
        )
        assert "result" in loaded and replay
        again.close()
        frames += again.frames
    finally:
        err = _stop(proc)
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("s.db*"))
    for secret in (URL_PASSWORD, URL_KEY):
        assert secret not in "".join(frames)
        assert secret.encode() not in stored
        assert secret not in err
    assert "[redacted]" in err  # the handler error holding the route was logged, redacted


RESEARCH_TOKEN = "research-tok-5566778899"


def test_research_example_streams_the_url_masked(shared_acp: Path, tmp_path: Path) -> None:
    """The research example with a credential URL: its stream and its stored history
    show the masked URL only (issue 11: it streamed it verbatim)."""
    manifest = yaml.safe_load((REPO / "examples" / "research" / "agent.yaml").read_text())
    handlers = (REPO / "examples" / "research" / "handlers.py").read_text()
    env = hs.build(tmp_path, shared_acp, "research11", manifest=manifest, handlers=handlers)
    env = {**env, "RESEARCH_AGENT_TOKEN": RESEARCH_TOKEN, "RESEARCH_STEP_DELAY": "0"}
    port = hs.free_port()
    db = tmp_path / "r.db"
    proc = hs.start_http(env, "research11", port, ACP_SESSION_DB=str(db))
    try:
        peer = WsPeer(port, RESEARCH_TOKEN)
        peer.call(1, "initialize", INIT["params"])
        sid = peer.call(2, "session/new", {"cwd": "/tmp", "mcpServers": []})[0]["result"][
            "sessionId"
        ]
        _set_cred_url(peer, 3)
        r, updates = peer.call(4, "session/prompt", hs.text_prompt(sid, "why?"))
        assert r["result"]["stopReason"] == "end_turn"
        texts = "".join(u["params"]["update"]["content"].get("text", "") for u in updates)
        assert "Using openai at https://***@llm.example.org/v1?key=***&mode=***" in texts
        peer.close()
    finally:
        err = _stop(proc)
    with contextlib.closing(sqlite3.connect(db)) as con:
        rows = con.execute("SELECT message FROM history UNION ALL SELECT state FROM sessions")
        dump = "\n".join(bytes(m).decode() for (m,) in rows)
    assert "llm.example.org" in dump  # the turn was stored...
    for secret in (URL_PASSWORD, URL_KEY):  # ...without the credentials
        assert secret not in dump and secret not in "".join(peer.frames) and secret not in err


# ---- 7. logging ---------------------------------------------------------------------------


def test_redacting_filter_keeps_uvicorn_access_log_working(built: dict[str, Any]) -> None:
    """The filter on uvicorn's handlers must leave the record's args a tuple: its access
    formatter unpacks them (issue 11: `record.args = None` made every line a TypeError)."""
    from uvicorn.logging import AccessFormatter

    hs.load(built["tmp"], PKG)
    safe = hs.runtime_of(PKG, "logsafe")
    safe.register_secret("access-SECRET-4242")
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "POST", "/acp?token=access-SECRET-4242", "1.1", 401),
        None,
    )
    assert safe.RedactingFilter().filter(record)
    line = AccessFormatter('%(client_addr)s "%(request_line)s" %(status_code)s').format(record)
    assert "access-SECRET-4242" not in line and "[redacted]" in line and "401" in line


def test_stray_responses_log_one_warning_not_one_each(
    built: dict[str, Any], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    hs.load(built["tmp"], PKG)
    jr = hs.runtime_of(PKG, "jsonrpc")
    # a fresh limiter (another test in this process may have used it this minute), and the
    # runtime's records reach caplog (stderr_logging, if a test ran it, stops propagation)
    limited = hs.runtime_of(PKG, "logsafe").RateLimitedLog(jr.log)
    monkeypatch.setattr(jr, "_limited", limited)
    monkeypatch.setattr(jr.log, "propagate", True)

    async def main() -> None:
        async def sink(batch: Any) -> None:
            return None

        async def on_request(*a: Any) -> None:
            return None

        async def on_notification(*a: Any) -> None:
            return None

        conn = jr.Connection(sink, on_request, on_notification)
        for i in range(500):
            conn.feed(json.dumps({"jsonrpc": "2.0", "id": 10_000 + i, "result": {}}).encode())
        await conn.close()

    # the shared runtime logger's own level too (another test may have raised it)
    caplog.set_level(logging.WARNING, logger=jr.log.name)
    asyncio.run(main())
    stray = [r for r in caplog.records if "unknown request id" in r.getMessage()]
    assert len(stray) == 1


def test_secret_registry_is_per_connection_bounded_and_forgotten(built: dict[str, Any]) -> None:
    """Over stdio, one connection sets providers/set 300 times with new header values:
    past the per-connection cap the call is refused (-32602, the connection lives on);
    the values still in use stay redacted in the log (a handler error holding the current
    route's headers shows [redacted]); in process, a closed connection's values are
    forgotten and another connection's kept."""
    hs.load(built["tmp"], PKG)
    cap = hs.runtime_of(PKG, "logsafe").MAX_SECRETS_PER_OWNER

    async def main() -> tuple[list[dict[str, Any]], bytes]:
        peer = await hs.StdioPeer.start(built["env"], PKG)
        sid = await hs.open_session(peer)
        answers = []
        for i in range(cap + 44):
            answers.append(
                await peer.call(
                    100 + i,
                    "providers/set",
                    {
                        "providerId": "main",
                        "apiType": "openai",
                        "baseUrl": "https://p.example",
                        "headers": {"Authorization": f"Bearer hdr-SECRET-{i:05d}"},
                    },
                )
            )
        await peer.send(
            {
                "jsonrpc": "2.0",
                "id": 9,
                "method": "session/prompt",
                "params": hs.text_prompt(sid, "leak"),
            }
        )
        leaked, _ = await peer.until_id(9)
        assert leaked["error"]["code"] == -32603
        _, err = await peer.close()
        return answers, err

    answers, err = asyncio.run(main())
    assert all("result" in a for a in answers[:cap])
    assert all(a["error"]["code"] == -32602 for a in answers[cap:]), answers[cap]
    assert "too many distinct secret values" in answers[cap]["error"]["message"]
    text = err.decode(errors="replace")
    assert f"hdr-SECRET-{cap - 1:05d}" not in text and "[redacted]" in text

    safe = hs.runtime_of(PKG, "logsafe")
    a, b = object(), object()
    safe.register_secrets(["only-in-A-1234", "shared-1234"], a)
    safe.register_secrets(["shared-1234"], b)
    with pytest.raises(safe.SecretLimit):
        safe.register_secrets([f"v-{i:06d}" for i in range(cap)], a)
    assert safe.redact("only-in-A-1234") == "[redacted]"  # refused batch dropped nothing
    safe.forget_secrets(a)
    assert safe.redact("only-in-A-1234 shared-1234") == "only-in-A-1234 [redacted]"
    safe.forget_secrets(b)
    assert safe.redact("shared-1234") == "shared-1234"


# ---- 6. deep prompt content ---------------------------------------------------------------


def _deep_block(levels: int) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": "deep"}
    for _ in range(levels):
        block = {"type": "text", "text": "x", "_meta": {"nested": block}}
    return block


def test_deep_prompt_answers_invalid_params_over_stdio(built: dict[str, Any]) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any], bytes]:
        peer = await hs.StdioPeer.start(built["env"], PKG)
        sid = await hs.open_session(peer)
        deep = {"sessionId": sid, "prompt": [{"type": "text", "text": "a"}, _deep_block(254)]}
        r = await peer.call(5, "session/prompt", deep)
        ok = await peer.call(6, "session/prompt", hs.text_prompt(sid, "still here"))
        _, err = await peer.close()
        return r, ok, err

    r, ok, err = asyncio.run(main())
    assert r["error"]["code"] == -32602 and "nested deeper" in r["error"]["message"]
    assert r["error"]["data"]["errors"][0]["loc"] == ["params", "prompt", 1]
    assert ok["result"]["stopReason"] == "end_turn"
    assert b"Traceback" not in err


def test_deep_prompt_answers_invalid_params_over_http(
    built: dict[str, Any], tmp_path: Path
) -> None:
    port = hs.free_port()
    proc = hs.start_http(built["env"], PKG, port, ACP_SESSION_DB=str(tmp_path / "s.db"))
    try:
        peer = WsPeer(port)
        peer.call(1, "initialize", INIT["params"])
        sid = peer.call(2, "session/new", {"cwd": "/tmp", "mcpServers": []})[0]["result"][
            "sessionId"
        ]
        deep = {"sessionId": sid, "prompt": [{"type": "text", "text": "a"}, _deep_block(254)]}
        r, _ = peer.call(3, "session/prompt", deep)
        assert r["error"]["code"] == -32602
        loaded, _ = peer.call(4, "session/prompt", hs.text_prompt(sid, "after"))
        assert loaded["result"]["stopReason"] == "end_turn"
        peer.close()
        # the same over POST + SSE
        with httpx.Client(timeout=10) as c:
            url = f"http://127.0.0.1:{port}/acp"
            auth = {"Authorization": "Bearer " + TOKEN}
            cid = c.post(url, json=INIT, headers=auth).headers["Acp-Connection-Id"]
            h = {**auth, "Acp-Connection-Id": cid}
            load = {"sessionId": sid, "cwd": "/", "mcpServers": []}
            c.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "session/resume", "params": load},
                headers=h,
            )
            _wait_answer(c, url, h, 1)
            body = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": deep}
            assert c.post(url, json=body, headers={**h, "Acp-Session-Id": sid}).status_code == 202
            answer = _wait_answer(c, url, {**h, "Acp-Session-Id": sid}, 2)
            assert answer["error"]["code"] == -32602
    finally:
        err = _stop(proc)
    assert "Traceback" not in err and "internal error" not in err


def _wait_answer(c: httpx.Client, url: str, headers: dict[str, str], rid: int) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    with c.stream("GET", url, headers={**headers, "Accept": "text/event-stream"}) as s:
        for line in s.iter_lines():
            assert time.monotonic() < deadline
            if line.startswith("data:"):
                msg = json.loads(line[5:])
                if msg.get("id") == rid and "method" not in msg:
                    return dict(msg)
    raise AssertionError("no answer")
