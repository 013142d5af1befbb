"""HTTP/2 on a generated HTTP agent run as its console script would (subprocess, port 0):

* it prints ``listening on URL`` with the real port;
* curl gets HTTP/2 by prior knowledge (h2c) and HTTP/1.1 when asked, on the same port; with a
  certificate, HTTP/2 by ALPN over TLS (curl reports the negotiated version);
* the generated HTTP client (templates/runtime/client/http_client.py) speaks HTTP/2 to it (every
  response it got was HTTP/2) and keeps the server's cookies for the connection's life;
* the official SDK's HTTP client (HTTP/1.1) and WebSocket client still work against it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import hardening_support as hs
import httpx
import pytest
from runtime.client import http_client
from runtime.client.client import AgentProxy, ClientRuntime
from runtime.wire.revision import Method

PKG = "h2agent"
CURL = shutil.which("curl")
OPENSSL = shutil.which("openssl")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("h2")
    env = hs.build(tmp, shared_acp, PKG)
    return {"env": env, "tmp": tmp}


@contextlib.contextmanager
def agent(built: dict[str, Any], *args: str) -> Iterator[str]:
    """The agent on 127.0.0.1, any free port; yields the URL it printed."""
    env = {
        **built["env"],
        "ACP_TEST_TRANSPORT": "http",
        "ACP_SESSION_DB": str(built["tmp"] / "s.db"),
    }
    with hs.listening(env, PKG, *args) as running:
        assert running.where.rsplit(":", 1)[1] != "0"
        yield running.url


def curl_version(*args: str) -> str:
    """The HTTP version curl negotiated (``%{http_version}``: 1.1 or 2)."""
    assert CURL, "curl is needed"
    out = subprocess.run(
        [CURL, "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_version}", *args],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    return out.stdout


class Collect(ClientRuntime):
    METHODS: ClassVar[dict[str, Method]] = {
        "session/update": Method(
            "session_update", "notification", None, None, "session/update", "client"
        ),
    }

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    async def session_update(self, params: Any) -> None:
        self.texts.append(params["update"]["content"]["text"])


@pytest.mark.slow
@pytest.mark.skipif(CURL is None, reason="curl is not installed")
def test_h2c_and_http11_on_one_port(built: dict[str, Any]) -> None:
    with agent(built) as url:
        health = url.replace("/acp", "/health")
        assert curl_version("--http2-prior-knowledge", health) == "2"
        assert curl_version("--http1.1", health) == "1.1"
        # an ACP initialize over h2c: 200 with the connection id header
        out = subprocess.run(
            [
                CURL,
                "-sS",
                "--http2-prior-knowledge",
                "-D",
                "-",
                "-H",
                "Content-Type: application/json",
                "--data",
                '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}',
                url,
            ],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
        assert out.startswith("HTTP/2 200"), out[:200]
        assert re.search(r"(?im)^acp-connection-id: [0-9a-f]+\r?$", out), out[:400]
        assert '"protocolVersion":1' in out


@pytest.mark.slow
@pytest.mark.skipif(CURL is None or OPENSSL is None, reason="curl and openssl are needed")
def test_tls_negotiates_h2_by_alpn(built: dict[str, Any], tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            str(OPENSSL),
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    with agent(built, "--certfile", str(cert), "--keyfile", str(key)) as url:
        assert url.startswith("https://")
        health = url.replace("/acp", "/health")
        assert curl_version("--cacert", str(cert), "--http2", health) == "2"
        assert curl_version("--cacert", str(cert), "--http1.1", health) == "1.1"


@pytest.mark.slow
def test_generated_client_speaks_h2_and_keeps_cookies(
    built: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    versions: list[str] = []
    clients: list[httpx.AsyncClient] = []
    make = http_client._http_client

    def recording(http2: bool, *, prior_knowledge: bool, cookies: Any = None) -> httpx.AsyncClient:
        c = make(http2, prior_knowledge=prior_knowledge, cookies=cookies)

        async def hook(r: httpx.Response) -> None:
            versions.append(r.http_version)

        c.event_hooks["response"].append(hook)
        clients.append(c)
        return c

    monkeypatch.setattr(http_client, "_http_client", recording)
    with agent(built) as url:

        async def go() -> None:
            client = Collect()
            async with http_client.connect_http(client, AgentProxy, url) as proxy:
                await asyncio.wait_for(proxy.call("initialize", {"protocolVersion": 1}), 10)
                sess = await asyncio.wait_for(
                    proxy.call("session/new", {"cwd": "/tmp", "mcpServers": []}), 10
                )
                # a cookie the server (or a load balancer) set lives in the connection's jar
                clients[0].cookies.set("lb", "replica-1", domain="127.0.0.1")
                blocks = [{"type": "text", "text": f"b{i}"} for i in range(5)]
                r = await asyncio.wait_for(
                    proxy.call(
                        "session/prompt", {"sessionId": sess["sessionId"], "prompt": blocks}
                    ),
                    10,
                )
                assert r["stopReason"] == "end_turn"
                assert client.texts == [f"b{i}" for i in range(5)]

        asyncio.run(go())
    # POSTs on one HTTP/2 connection, each SSE stream on its own (httpcore's read lock):
    # the connection stream and the session stream; one cookie jar for all of them
    assert len(clients) == 3, clients
    assert len({id(c.cookies.jar) for c in clients}) == 1, "one cookie jar per ACP connection"
    assert versions and set(versions) == {"HTTP/2"}, versions


@pytest.mark.slow
def test_cookies_sent_back_for_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Set-Cookie from the server (affinity) comes back on every later request of the
    connection, over HTTP/2 with prior knowledge (an in-process mock server)."""
    seen: list[str | None] = []
    cancel_posted = asyncio.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("cookie"))
        if b'"session/cancel"' in request.content:
            cancel_posted.set()
        if request.method == "POST" and b'"initialize"' in request.content:
            rid = json.loads(request.content)["id"]
            return httpx.Response(
                200,
                headers={"Acp-Connection-Id": "c1", "Set-Cookie": "acp-replica=r7; Path=/"},
                json={"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 1}},
            )
        if request.method == "GET":
            return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=b"")
        return httpx.Response(202)

    def mocked(http2: bool, *, prior_knowledge: bool) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(handler))

    monkeypatch.setattr(http_client, "_http_client", mocked)

    async def go() -> None:
        async with http_client.connect_http(Collect(), AgentProxy, "http://127.0.0.1:9/acp") as p:
            await asyncio.wait_for(p.call("initialize", {"protocolVersion": 1}), 5)
            await p._notify("session/cancel", {"sessionId": "s"})
            await asyncio.wait_for(cancel_posted.wait(), 5)

    asyncio.run(go())
    assert seen[0] is None
    assert len(seen) >= 3
    assert all(c == "acp-replica=r7" for c in seen[1:]), seen


@pytest.mark.slow
def test_sdk_clients_still_work(built: dict[str, Any]) -> None:
    import acp
    from acp import schema as S
    from acp.http.client import create_http_stream
    from acp.ws.client import create_websocket_stream

    class Collector:
        def __init__(self) -> None:
            self.updates: list[Any] = []

        async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
            self.updates.append(update)

    async def drive(transport: Any) -> None:
        c = Collector()
        conn = acp.connect_to_agent(c, transport)
        await asyncio.wait_for(conn.initialize(protocol_version=1), 10)
        sess = await asyncio.wait_for(conn.new_session(cwd="/tmp", mcp_servers=[]), 10)
        blocks = [S.TextContentBlock(type="text", text=f"b{i}") for i in range(10)]
        res = await asyncio.wait_for(conn.prompt(session_id=sess.session_id, prompt=blocks), 10)
        assert res.stop_reason == "end_turn"
        assert [u.content.text for u in c.updates] == [f"b{i}" for i in range(10)]
        await conn.close()

    with agent(built) as url:

        async def go() -> None:
            await drive(create_http_stream(url, client=httpx.AsyncClient(timeout=None)))
            await drive(await create_websocket_stream("ws" + url[4:]))

        asyncio.run(go())


@pytest.mark.slow
def test_refusal_before_reading_the_body_closes_http11_only(built: dict[str, Any]) -> None:
    """A 413 sent before the body was read: over HTTP/1.1 it says ``Connection: close`` (the
    server closes; a client reusing the connection would lose its next request), and the
    next request on a new connection works; over HTTP/2 only the stream ends."""
    with agent(built, "--max-message-size", "4096") as url:
        big = (
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"x":"' + b"x" * 9000 + b'"}}'
        )
        with httpx.Client(timeout=10) as c:
            for _ in range(3):
                r = c.post(url, content=big, headers={"Content-Type": "application/json"})
                assert r.status_code == 413 and r.headers.get("connection") == "close"
                assert c.get(url.replace("/acp", "/health")).status_code == 200

        async def h2() -> None:
            async with httpx.AsyncClient(http1=False, http2=True, timeout=10) as c:
                for _ in range(3):
                    r = await c.post(url, content=big, headers={"Content-Type": "application/json"})
                    assert r.http_version == "HTTP/2" and r.status_code == 413
                    assert "connection" not in r.headers
                    assert (await c.get(url.replace("/acp", "/health"))).status_code == 200

        asyncio.run(h2())
