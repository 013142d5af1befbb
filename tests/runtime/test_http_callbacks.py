"""Async output with callbacks: retries with backoff, Standard Webhooks signature (checked
with our verify and with the ``standardwebhooks`` package), end to end through the HTTP
agent driven by the official SDK client; the secret never reaches a log line."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import logging
import threading
import time
from typing import Any, ClassVar

import httpx
import pytest
import standardwebhooks
from runtime.http.http_server import app_for
from runtime.sessions.callbacks import CallbackSender, key_from_env, sign, verify
from runtime.sessions.store import MemorySessionStore
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from test_http_sessions import EchoAgent
from test_http_transport import free_port, running_server

SECRET = b"cb-shared-secret-42"


@contextlib.contextmanager
def running(app: Any):
    with running_server(app) as addr:
        yield int(addr.rsplit(":", 1)[1])


def receiver(fail_first: int, status: int = 503):
    got: list[tuple[bytes, dict[str, str]]] = []
    calls = {"n": 0}
    delivered = threading.Event()

    async def hook(request: Request) -> Response:
        calls["n"] += 1
        body = await request.body()
        if calls["n"] <= fail_first:
            return Response(status_code=status)
        got.append((body, dict(request.headers)))
        delivered.set()
        return Response(status_code=204)

    app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    app.state.delivered = delivered  # set on the first delivery
    return app, got, calls


def test_retries_then_delivers_signed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    app, got, calls = receiver(fail_first=2)
    with running(app) as port:
        sender = CallbackSender(SECRET, base_delay=0.01, attempts=4)
        ok = asyncio.run(sender.deliver(f"http://127.0.0.1:{port}/hook?token=q", {"a": 1}))
    assert ok and calls["n"] == 3 and len(got) == 1
    body, headers = got[0]
    assert verify(SECRET, body, headers)
    assert standardwebhooks.Webhook(SECRET).verify(body, headers) == {"a": 1}
    assert not verify(b"other", body, headers)
    assert not verify(SECRET, body + b" ", headers)
    stale = int(time.time()) - 3600
    old = {
        **headers,
        "webhook-timestamp": str(stale),
        "webhook-signature": sign(SECRET, headers["webhook-id"], stale, body),
    }
    assert not verify(SECRET, body, old)
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        standardwebhooks.Webhook(SECRET).verify(body, old)
    assert "cb-shared-secret-42" not in caplog.text and "token=q" not in caplog.text


def test_signature_is_standard_webhooks() -> None:
    """The library signs the same message to the same header (whsec_ keys and plain ones)."""
    key = b"\x01\x02 raw key bytes \xff"
    whsec = "whsec_" + base64.b64encode(key).decode()
    assert key_from_env(whsec) == key and key_from_env("plain-secret") == b"plain-secret"
    assert key_from_env("") is None and key_from_env("whsec_%%%") is None
    body = b'{"sessionId":"s","stopReason":"end_turn","updates":[]}'
    ts = int(time.time())
    lib = standardwebhooks.Webhook(whsec)
    when = datetime.datetime.fromtimestamp(ts, tz=datetime.UTC)
    assert sign(key, "msg_1", ts, body) == lib.sign("msg_1", when, body.decode())
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(ts),
        "webhook-signature": sign(key, "msg_1", ts, body),
    }
    assert lib.verify(body, headers)["stopReason"] == "end_turn"


def test_final_4xx_and_bad_urls_and_no_secret() -> None:
    app, _got, calls = receiver(fail_first=10, status=400)
    with running(app) as port:
        sender = CallbackSender(SECRET, base_delay=0.01, attempts=4)
        assert asyncio.run(sender.deliver(f"http://127.0.0.1:{port}/hook", {})) is False
        assert calls["n"] == 1  # 400 is not retried
        assert asyncio.run(sender.deliver("file:///etc/passwd", {})) is False
        assert (
            asyncio.run(CallbackSender(b"").deliver(f"http://127.0.0.1:{port}/hook", {})) is False
        )
    # a closed port: retried, then gives up without raising
    dead = free_port()
    assert (
        asyncio.run(
            CallbackSender(SECRET, base_delay=0.01, attempts=3).deliver(
                f"http://127.0.0.1:{dead}/", {}
            )
        )
        is False
    )


class AsyncEcho(EchoAgent):
    _acp_manifest: ClassVar[dict[str, Any]] = {
        **EchoAgent._acp_manifest,
        "auth": [],
        "output_modes": {"async": {"callback": True}},
    }


def test_prompt_result_posted_to_callback(monkeypatch: pytest.MonkeyPatch) -> None:
    import acp
    from acp import schema as S
    from acp.http.client import create_http_stream

    monkeypatch.setenv("ACP_CALLBACK_SECRET", SECRET.decode())
    hook_app, got, _ = receiver(fail_first=1)
    with (
        running(hook_app) as hook_port,
        running(app_for(AsyncEcho, store=MemorySessionStore())) as port,
    ):

        async def go() -> None:
            conn = acp.connect_to_agent(
                _Null(),
                create_http_stream(
                    f"http://127.0.0.1:{port}/acp", client=httpx.AsyncClient(timeout=None)
                ),
            )
            await conn.initialize(protocol_version=1)
            sess = await conn.new_session(cwd="/tmp", mcp_servers=[])
            r = await conn.prompt(
                session_id=sess.session_id,
                prompt=[S.TextContentBlock(type="text", text="hi")],
                callbackUrl=f"http://127.0.0.1:{hook_port}/hook",
            )
            assert r.stop_reason == "end_turn"
            delivered = await asyncio.to_thread(hook_app.state.delivered.wait, 10)
            assert delivered, "the callback was not delivered"
            await conn.close()

        asyncio.run(go())
    assert len(got) == 1
    import orjson

    body, headers = got[0]
    assert verify(SECRET, body, headers)
    assert standardwebhooks.Webhook(SECRET).verify(body, headers)["stopReason"] == "end_turn"
    doc = orjson.loads(body)
    assert doc["stopReason"] == "end_turn"
    assert doc["updates"][0]["content"]["text"] == "echo:hi"


class _Null:
    async def session_update(self, *a: Any, **k: Any) -> None:
        return None
