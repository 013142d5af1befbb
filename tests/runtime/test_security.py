"""Security of generated agents and of the generator's inputs.

* Credentials (bearer token, API key, basic password) and provider header values never
  appear in any HTTP answer, SSE event, WebSocket frame, stdout line, stderr/log line or
  ``providers/list`` answer, even when user code puts them in an exception message.
* Auth bypass attempts are refused (401) on every endpoint and on the WebSocket handshake;
  the credential comparison goes through ``hmac.compare_digest`` on every path.
* Generator inputs: names with ``..`` or absolute paths are refused, template and Python
  syntax in manifest strings stays inert text in every generated file, huge values are
  refused quickly with a located message.  (``new`` into a non-empty directory and the
  fake-pipeline injection are covered in test_scaffold_mechanics.py.)
"""

from __future__ import annotations

import ast
import asyncio
import base64
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import hardening_support as hs
import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
PKG = "secagent"
TOKEN = "tok-AbCdEf-0123456789-bearer"
API_KEY = "key-QwErTy-9876543210-apikey"
BASIC_USER, BASIC_PASS = "alice", "pw-ZxCvBn-555-basic"
PROV_AUTH = "Bearer prov-SECRET-header-1111"
PROV_ORG = "org-SECRET-header-2222"
SECRETS = [
    TOKEN,
    API_KEY,
    BASIC_PASS,
    base64.b64encode(f"{BASIC_USER}:{BASIC_PASS}".encode()).decode(),
    PROV_AUTH,
    "prov-SECRET-header-1111",
    PROV_ORG,
]

MANIFEST = {
    **hs.MANIFEST,
    "name": "sec-agent",
    "auth": [
        {"type": "bearer", "env": "SEC_TOKEN"},
        {"type": "api_key", "env": "SEC_KEY", "header": "X-API-Key"},
        {"type": "basic", "env": "SEC_BASIC"},
    ],
}
ENV = {
    "SEC_TOKEN": TOKEN,
    "SEC_KEY": API_KEY,
    "SEC_BASIC": f"{BASIC_USER}:{BASIC_PASS}",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("sec")
    env = hs.build(tmp, shared_acp, PKG, manifest=MANIFEST)
    return {"env": {**env, **ENV}, "tmp": tmp}


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}

# (what, headers): each must be refused with 401
BYPASS: list[tuple[str, dict[str, str]]] = [
    ("missing", {}),
    ("scheme only", {"Authorization": "Bearer"}),
    ("malformed", {"Authorization": TOKEN}),
    ("no space", {"Authorization": "Bearer" + TOKEN}),
    ("wrong scheme", {"Authorization": "Token " + TOKEN}),
    ("token as basic", {"Authorization": "Basic " + TOKEN}),
    ("wrong case token", {"Authorization": "Bearer " + TOKEN.swapcase()}),
    ("prefix", {"Authorization": "Bearer " + TOKEN[:-1]}),
    ("suffix", {"Authorization": "Bearer " + TOKEN + "x"}),
    ("trailing spaces then junk", {"Authorization": "Bearer " + TOKEN + "   x"}),
    ("token twice", {"Authorization": f"Bearer {TOKEN} {TOKEN}"}),
    ("api key as bearer", {"Authorization": "Bearer " + API_KEY}),
    ("bearer token as api key", {"X-API-Key": TOKEN}),
    ("api key wrong case", {"X-API-Key": API_KEY.upper()}),
    ("api key with junk", {"X-API-Key": API_KEY + "  x"}),
    ("empty api key", {"X-API-Key": ""}),
    ("basic wrong password", {"Authorization": _basic(BASIC_USER, "nope")}),
    ("basic wrong user", {"Authorization": _basic("mallory", BASIC_PASS)}),
    (
        "basic password only",
        {"Authorization": "Basic " + base64.b64encode(BASIC_PASS.encode()).decode()},
    ),
    ("basic malformed base64", {"Authorization": "Basic %%%notbase64"}),
    ("basic creds as bearer", {"Authorization": "Bearer " + f"{BASIC_USER}:{BASIC_PASS}"}),
    ("token in query", {}),
]
# accepted: the right credential of each scheme; the auth scheme name is case-insensitive
# (RFC 7235) and whitespace around a header value is not part of it (RFC 9110 OWS)
ACCEPTED: list[tuple[str, dict[str, str]]] = [
    ("bearer", {"Authorization": "Bearer " + TOKEN}),
    ("bearer, scheme in lower case", {"Authorization": "bearer " + TOKEN}),
    ("api key", {"X-API-Key": API_KEY}),
    ("api key, header name case", {"x-api-key": API_KEY}),
    ("basic", {"Authorization": _basic(BASIC_USER, BASIC_PASS)}),
]


def _raw_post_status(port: int, header: str, value: str) -> int:
    body = json.dumps(INIT).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(
            b"POST /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"{header}: {value}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        head = s.recv(65536)
    return int(head.split(b" ", 2)[1])


@pytest.mark.wire_check_send_only  # malformed providers/set params on purpose
@pytest.mark.slow
def test_auth_bypass_refused_and_no_secret_anywhere(built: dict[str, Any], tmp_path: Path) -> None:
    """Every bypass attempt gets 401 on POST, GET (SSE) and DELETE /acp and on the
    WebSocket handshake, the right credentials pass; then an authorized client sets a
    provider with secret headers, lists providers, streams a prompt that shows the route
    and one whose handler raises with the headers in its message.  Everything captured
    (HTTP bodies and headers, SSE events, WebSocket frames, the agent's stdout and stderr)
    holds none of the secrets; stderr shows the handler failure with ``[redacted]``."""
    port = hs.free_port()
    proc = hs.start_http(built["env"], PKG, port, ACP_SESSION_DB=str(tmp_path / "s.db"))
    base = f"http://127.0.0.1:{port}"
    url = base + "/acp"
    captured: list[str] = []

    def keep(r: httpx.Response) -> httpx.Response:
        captured.append(json.dumps(dict(r.headers)) + r.text)
        return r

    try:
        with httpx.Client(timeout=10) as c:
            for what, headers in BYPASS:
                target = url + ("?token=" + TOKEN if what == "token in query" else "")
                r = keep(c.post(target, json=INIT, headers=headers))
                assert r.status_code == 401, (what, r.status_code)
                assert "www-authenticate" in r.headers
                r = keep(
                    c.get(
                        url,
                        headers={
                            **headers,
                            "Accept": "text/event-stream",
                            "Acp-Connection-Id": "x",
                        },
                    )
                )
                assert r.status_code == 401, (what, "GET")
                r = keep(c.delete(url, headers={**headers, "Acp-Connection-Id": "x"}))
                assert r.status_code == 401, (what, "DELETE")
            for what, headers in ACCEPTED:
                r = keep(c.post(url, json=INIT, headers=headers))
                assert r.status_code == 200, (what, r.status_code)
                keep(
                    c.delete(
                        url,
                        headers={**headers, "Acp-Connection-Id": r.headers["Acp-Connection-Id"]},
                    )
                )
            # values an HTTP client library refuses to send: written on a raw socket
            for value in ("Bearer ", "Bearer    ", "Bearer " + TOKEN[:-1] + "   ", "   "):
                assert _raw_post_status(port, "Authorization", value) == 401, repr(value)
            assert _raw_post_status(port, "X-API-Key", "  ") == 401
            # whitespace around a header value is not part of it (RFC 9110): still accepted
            assert _raw_post_status(port, "Authorization", "Bearer " + TOKEN + "   ") == 200
            # never behind auth
            assert keep(c.get(base + "/health")).status_code == 200
            assert keep(c.get(base + "/.well-known/agent.json")).status_code == 200

            async def websocket() -> None:
                import websockets

                for what, headers in [BYPASS[0], BYPASS[7], BYPASS[14], BYPASS[18]]:
                    with pytest.raises(websockets.InvalidStatus) as refused:
                        await websockets.connect(
                            f"ws://127.0.0.1:{port}/acp", additional_headers=headers
                        )
                    assert refused.value.response.status_code == 401, what
                async with websockets.connect(
                    f"ws://127.0.0.1:{port}/acp", additional_headers={"X-API-Key": API_KEY}
                ) as ws:
                    await ws.send(json.dumps(INIT))
                    frame = await asyncio.wait_for(ws.recv(), 10)
                    captured.append(str(frame))
                    assert "result" in json.loads(frame)

            asyncio.run(websocket())

            # an authorized session that handles secrets
            auth = {"Authorization": "Bearer " + TOKEN}
            r = keep(c.post(url, json=INIT, headers=auth))
            h = {**auth, "Acp-Connection-Id": r.headers["Acp-Connection-Id"]}
            calls = [
                ("session/new", {"cwd": "/tmp", "mcpServers": []}),
                (
                    "providers/set",
                    {
                        "providerId": "main",
                        "apiType": "anthropic",
                        "baseUrl": "https://proxy.example",
                        "headers": {"Authorization": PROV_AUTH, "X-Org": PROV_ORG},
                    },
                ),
                ("providers/list", {}),
                (
                    "providers/set",
                    {
                        "providerId": "ghost",
                        "apiType": "openai",
                        "baseUrl": "x",
                        "headers": {"Authorization": PROV_AUTH},
                    },
                ),
                (
                    "providers/set",
                    {
                        "providerId": "aux",
                        "apiType": "anthropic",
                        "baseUrl": "x",
                        "headers": {"X-Org": PROV_ORG},
                    },
                ),
                (
                    "providers/set",
                    {
                        "providerId": "aux",
                        "apiType": "openai",
                        "baseUrl": "x",
                        "headers": {"X-Org": [PROV_ORG]},
                    },
                ),
            ]
            for i, (method, params) in enumerate(calls, start=1):
                r = keep(
                    c.post(
                        url,
                        json={"jsonrpc": "2.0", "id": i, "method": method, "params": params},
                        headers=h,
                    )
                )
                assert r.status_code == 202
            answers: dict[int, Any] = {}
            with c.stream("GET", url, headers={**h, "Accept": "text/event-stream"}) as s:
                for line in s.iter_lines():
                    captured.append(line)
                    if line.startswith("data:"):
                        m = json.loads(line[5:])
                        answers[m["id"]] = m
                        if len(answers) == len(calls):
                            break
            sid = answers[1]["result"]["sessionId"]
            listed = {p["providerId"]: p for p in answers[3]["result"]["providers"]}
            assert listed["main"]["current"] == {
                "apiType": "anthropic",
                "baseUrl": "https://proxy.example",
            }
            assert [answers[k]["error"]["code"] for k in (4, 5, 6)] == [-32602] * 3
            sh = {**h, "Acp-Session-Id": sid}
            for rid, text in ((10, "route"), (11, "leak")):
                r = keep(
                    c.post(
                        url,
                        json={
                            "jsonrpc": "2.0",
                            "id": rid,
                            "method": "session/prompt",
                            "params": hs.text_prompt(sid, text),
                        },
                        headers=sh,
                    )
                )
                assert r.status_code == 202
                with c.stream("GET", url, headers={**sh, "Accept": "text/event-stream"}) as s:
                    for line in s.iter_lines():
                        captured.append(line)
                        if line.startswith("data:") and json.loads(line[5:]).get("id") == rid:
                            break
            route_line = next(x for x in captured if "ProviderRoute(" in x)
            assert "headers=<2 hidden>" in route_line and "proxy.example" in route_line
            assert any('"id":11' in x and "internal error" in x for x in captured)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    everything = "\n".join(captured) + out.decode(errors="replace") + err.decode(errors="replace")
    for secret in SECRETS:
        assert secret not in everything, f"a secret leaked: {secret[:6]}..."
    stderr = err.decode(errors="replace")
    assert "prompt handler failed" in stderr and "[redacted]" in stderr


@pytest.mark.slow
def test_no_secret_over_stdio(built: dict[str, Any]) -> None:
    """Over stdio: provider headers set by the client never show in providers/list, in
    any stdout line or in stderr, even from a handler exception that holds them."""

    async def main() -> tuple[list[Any], bytes]:
        peer = await hs.StdioPeer.start(built["env"], PKG)
        sid = await hs.open_session(peer)
        seen: list[Any] = []
        r = await peer.call(
            3,
            "providers/set",
            {
                "providerId": "main",
                "apiType": "openai",
                "baseUrl": "https://p.example",
                "headers": {"Authorization": PROV_AUTH},
            },
        )
        seen.append(r)
        assert r["result"] == {}
        seen.append(await peer.call(4, "providers/list", {}))
        for rid, text in ((5, "route"), (6, "leak")):
            await peer.send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "method": "session/prompt",
                    "params": hs.text_prompt(sid, text),
                }
            )
            r, updates = await peer.until_id(rid)
            seen += [r, *updates]
        assert seen[-1]["error"] == {"code": -32603, "message": "internal error"}
        assert peer.bad_lines == []
        _, err = await peer.close()
        return seen, err

    seen, err = asyncio.run(main())
    text = json.dumps(seen) + err.decode(errors="replace")
    assert "headers=<1 hidden>" in text
    for secret in SECRETS:
        assert secret not in text
    assert b"[redacted]" in err


def test_credential_checks_are_constant_time(built: dict[str, Any]) -> None:
    """The auth code compares credentials only through hmac.compare_digest (no ==, !=,
    in, startswith on a secret), calls it on every path whatever the length of the given
    value, and evaluates every configured scheme (no early exit that times the match)."""
    src = (REPO / "templates" / "runtime" / "wire" / "auth.py").read_text()
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and not all(
            isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops
        ):
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
                n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
            }
            assert not any("secret" in n for n in names), ast.unparse(node)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith", "find", "index", "count")
        ):
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            assert not any("secret" in n for n in names), ast.unparse(node)

    from starlette.datastructures import Headers

    hs.load(built["tmp"], PKG)
    auth_mod = hs.runtime_of(PKG, "auth")
    calls: list[tuple[bytes, bytes]] = []
    real = auth_mod.hmac.compare_digest

    class Recorder:
        @staticmethod
        def compare_digest(a: bytes, b: bytes) -> bool:
            calls.append((a, b))
            return bool(real(a, b))

    auth = auth_mod.Auth.from_manifest(MANIFEST, ENV)
    original = auth_mod.hmac
    auth_mod.hmac = Recorder
    try:
        for headers in (
            {"Authorization": "Bearer x"},
            {"Authorization": "Bearer " + "x" * 500},
            {"Authorization": "Basic " + base64.b64encode(b"u:p").decode()},
            {"X-API-Key": "k"},
            {"Authorization": "Bearer " + TOKEN},
        ):
            calls.clear()
            accepted = auth.accepts(Headers(headers=headers))  # case-insensitive, as served
            assert calls, headers  # the compare ran, whatever the length
            assert accepted == (headers.get("Authorization") == "Bearer " + TOKEN)
        calls.clear()
        auth.accepts(Headers(headers={"Authorization": "Bearer x", "X-API-Key": "y"}))
        assert len(calls) == 2  # bearer and api_key both compared; basic skipped on scheme
    finally:
        auth_mod.hmac = original


# ---- generator inputs -------------------------------------------------------------------

SENTINEL = '{{ "zq" ~ "jx" }} {% if true %}Q{{ "KW" }}X{% endif %} {# c #} {%- raw %}'
PY_BREAK = "\"\"\"; __import__('os').system('touch {flag}') #'''\\"


def _agentgen(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentgen", *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO), "AGENTGEN_TEMPLATE_STORE": str(cwd / "store")},
    )


@pytest.mark.slow
def test_manifest_strings_are_inert_in_every_generated_file(tmp_path: Path) -> None:
    """Jinja syntax and Python-breaking quotes in every manifest string of a real
    `agentgen new` (title, description, config schema and option texts, interrupt and
    error descriptions, choice values) stay text: no file holds a rendered expression,
    every generated .py compiles, importing the project runs nothing (no flag file), and
    the agent serves the strings back verbatim in `_agent/info`."""
    flags = [tmp_path / f"PWNED{i}" for i in range(6)]

    def s(i: int) -> str:
        return f"{SENTINEL} {PY_BREAK.format(flag=flags[i])}"

    manifest = {
        "name": "inert-agent",
        "version": "0.1.0",
        "title": s(0),
        "description": s(1),
        "config": {
            "schema": {
                "type": "object",
                "description": s(2),
                "properties": {"model": {"type": "string", "description": s(2)}},
            },
            "options": [
                {
                    "id": "model",
                    "name": s(3),
                    "type": "choice",
                    "default": "small",
                    "values": ["small", SENTINEL],
                    "description": s(3),
                }
            ],
        },
        "interrupts": [
            {
                "name": "approval",
                "description": s(4),
                "payload": {"schema": {"type": "object"}},
                "resume": {"schema": {"type": "object"}},
            }
        ],
        "errors": [{"code": 1001, "name": "QuotaExceeded", "description": s(5), "transient": True}],
    }
    (tmp_path / "agent.json").write_text(json.dumps(manifest))
    r = _agentgen("new", "proj", "-m", "agent.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr + r.stdout
    proj = tmp_path / "proj"
    files = [p for p in proj.rglob("*") if p.is_file()]
    assert len(files) > 10
    for p in files:
        text = p.read_text(encoding="utf-8", errors="replace")
        assert "zqjx" not in text and "QKWX" not in text, p
        if p.suffix == ".py":
            compile(text, str(p), "exec")
    probe = (
        "import asyncio, json\n"
        "from inert_agent.handlers import *\n"
        "from inert_agent._generated import dispatcher, manifest_models\n"
        "info = asyncio.run(dispatcher.AgentBase()._rt_agent_info(None, None))\n"
        "print(json.dumps(info))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe],
        check=False,
        cwd=proj,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(proj)},
    )
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout.strip().splitlines()[-1])
    assert info["description"] == s(1) and info["title"] == s(0)
    assert info["schemas"]["errors"][0]["description"] == s(5)
    assert not any(f.exists() for f in flags)


@pytest.mark.parametrize("name", ["/tmp/evil", "../evil", "..", "a/b", "C:\\evil", "~root"])
def test_names_with_paths_refused(tmp_path: Path, name: str) -> None:
    """A manifest name that is a path (absolute, `..`, separators) is refused with exit 1
    (a finding in the input) and a message located at /name; nothing is created anywhere."""
    (tmp_path / "agent.json").write_text(json.dumps({"name": name, "version": "0.1.0"}))
    r = _agentgen("new", "proj", "-m", "agent.json", cwd=tmp_path, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "/name" in r.stderr + r.stdout and "Traceback" not in r.stderr
    assert not (tmp_path / "proj").exists()


@pytest.mark.parametrize(
    "field",
    [
        {
            "interrupts": [
                {
                    "name": "x\"); __import__('os').system('touch FLAG') #",
                    "payload": {"schema": {"type": "object"}},
                    "resume": {"schema": {"type": "object"}},
                }
            ]
        },
        {
            "errors": [
                {
                    "code": 1002,
                    "name": "Bad\"); __import__('os').system('touch FLAG') #",
                    "description": "d",
                }
            ]
        },
        {
            "config": {
                "options": [
                    {
                        "id": "m\"]; __import__('os').system('touch FLAG') #",
                        "name": "x",
                        "type": "string",
                    }
                ]
            }
        },
    ],
    ids=["interrupt", "error", "option"],
)
def test_identifier_fields_with_code_refused(tmp_path: Path, field: dict[str, Any]) -> None:
    """Manifest names that become Python identifiers (interrupt, error, option id) and hold
    code are refused with exit 1 and a located message, before anything is written."""
    (tmp_path / "agent.json").write_text(
        json.dumps({"name": "code-agent", "version": "0.1.0", **field})
    )
    r = _agentgen("new", "proj", "-m", "agent.json", cwd=tmp_path, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and ": /" in r.stderr
    assert not (tmp_path / "proj").exists() and not (tmp_path / "FLAG").exists()


def test_huge_values_refused_quickly(tmp_path: Path) -> None:
    """A manifest over 10 MiB (a huge description) and a schema nested 5000 levels deep are
    refused with exit 1 (findings in the input) and one located line in seconds, without a
    traceback (validate adds its one-line summary)."""
    (tmp_path / "huge.json").write_text(
        json.dumps(
            {"name": "huge-agent", "version": "0.1.0", "description": "x" * (10 * 1024 * 1024)}
        )
    )
    depth = 5000
    (tmp_path / "deep.json").write_text(
        '{"name":"deep-agent","version":"0.1.0","config":{"schema":'
        + '{"type":"object","properties":{"a":' * depth
        + '{"type":"object"}'
        + "}}" * depth
        + "}}"
    )
    for name, want in (("huge.json", "larger than"), ("deep.json", "nesting deeper")):
        for verb in (["new", "proj"], ["validate"]):
            r = (
                _agentgen(*verb[:2], "-m", name, cwd=tmp_path, timeout=60)
                if verb[0] == "new"
                else _agentgen("validate", name, cwd=tmp_path, timeout=60)
            )
            assert r.returncode == 1, (name, verb, r.returncode, r.stderr[-500:])
            said = (r.stdout + r.stderr).strip()
            assert want in said and name in said and "Traceback" not in said, said[-500:]
            assert len([ln for ln in said.splitlines() if name in ln]) == 1, said[-500:]
