"""HTTP/SSE and WebSocket transport over real sockets on 127.0.0.1, driven by the official SDK client.

The agent here is a small echo dispatcher written on the runtime core (jsonrpc.Connection);
the generated dispatcher plugs into the same seam.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import socket
import threading
from typing import Any

import acp
import httpx
import pytest
import uvicorn
from acp import schema as S
from acp.http.client import create_http_stream
from acp.ws.client import create_websocket_stream
from runtime.http.http_server import create_app
from runtime.wire.auth import Auth
from runtime.wire.errors import RpcError
from runtime.wire.jsonrpc import Connection
from runtime.wire.routes import Router
from wait_support import ListeningServer, Updates


def _revision() -> Any:
    from generator.protocol.revision import describe
    from generator.sources import load_schema

    return describe(load_schema(None).data)


ROUTED = _revision()


def echo_factory(sink):
    sessions: dict[str, list[Any]] = {}
    running: dict[str, asyncio.Event] = {}
    conn: Connection

    async def on_request(method: str, params: Any, ctx: Any) -> Any:
        if method == "initialize":
            return {
                "protocolVersion": 1,
                "agentCapabilities": {},
                "agentInfo": {"name": "echo", "version": "1"},
            }
        if method == "session/new":
            sid = f"s{len(sessions) + 1}"
            sessions[sid] = []
            return {"sessionId": sid}
        if method == "session/prompt":
            sid = params["sessionId"]
            stop = running[sid] = asyncio.Event()
            for block in params["prompt"]:
                text = block.get("text", "")
                if text == "slow":
                    for i in range(200):
                        if stop.is_set():
                            return {"stopReason": "cancelled"}
                        conn.notify(
                            "session/update",
                            {
                                "sessionId": sid,
                                "update": {
                                    "sessionUpdate": "agent_message_chunk",
                                    "content": {"type": "text", "text": str(i)},
                                },
                            },
                        )
                        await asyncio.sleep(0.01)
                conn.notify(
                    "session/update",
                    {
                        "sessionId": sid,
                        "update": {
                            "sessionUpdate": "agent_message_chunk",
                            "content": {"type": "text", "text": text},
                        },
                    },
                )
            return {"stopReason": "end_turn"}
        raise RpcError(-32601, f"method not found: {method}")

    async def on_notification(method: str, params: Any) -> None:
        if method == "session/cancel":
            ev = running.get(params["sessionId"])
            if ev:
                ev.set()

    # the locked revision's routes: which requests name a session, which open one
    router = Router(
        None,
        "agent",
        models=lambda: None,
        dump=lambda result: result,
        default=lambda name, entry: lambda params, ctx: on_request(name, params, ctx),
    )
    router.use(ROUTED.side("agent"))
    conn = Connection(
        sink, router.request, on_notification, immediate_notifications=frozenset({"session/cancel"})
    )
    conn.routes = router.route
    return conn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(app):
    port = free_port()
    server = ListeningServer(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio"
        )
    )
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    assert server.listening.wait(10), "server did not start"
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        t.join(10)


class Collector(Updates):
    async def request_permission(self, *a: Any, **kw: Any) -> Any:
        raise RuntimeError("unused")


async def drive(transport) -> None:
    client = Collector()
    conn = acp.connect_to_agent(client, transport)
    init = await asyncio.wait_for(conn.initialize(protocol_version=1), 10)
    assert init.agent_info.name == "echo"
    sess = await asyncio.wait_for(conn.new_session(cwd="/tmp", mcp_servers=[]), 10)
    blocks = [S.TextContentBlock(type="text", text=f"b{i}") for i in range(20)]
    res = await asyncio.wait_for(conn.prompt(session_id=sess.session_id, prompt=blocks), 10)
    assert res.stop_reason == "end_turn"
    # every update of the turn arrived before the answer, in order
    assert [u.content.text for u in client.updates] == [f"b{i}" for i in range(20)]
    client.updates.clear()
    task = asyncio.ensure_future(
        conn.prompt(
            session_id=sess.session_id, prompt=[S.TextContentBlock(type="text", text="slow")]
        )
    )
    await client.until("the slow turn streaming", lambda: client.updates)
    await conn.cancel(session_id=sess.session_id)
    res = await asyncio.wait_for(task, 10)
    assert res.stop_reason == "cancelled"
    await conn.close()


def test_sdk_client_over_sse() -> None:
    with running_server(create_app(echo_factory)) as addr:
        asyncio.run(
            drive(create_http_stream(f"http://{addr}/acp", client=httpx.AsyncClient(timeout=None)))
        )


def test_sdk_client_over_websocket() -> None:
    with running_server(create_app(echo_factory)) as addr:

        async def go() -> None:
            await drive(await create_websocket_stream(f"ws://{addr}/acp"))

        asyncio.run(go())


def test_bad_input_and_auth(caplog: pytest.LogCaptureFixture) -> None:
    secret = "s3cr3t-token-value"
    auth = Auth(
        [{"type": "bearer", "env": "T"}, {"type": "basic", "env": "B"}],
        {"T": secret, "B": "u:pw-xyz"},
    )
    caplog.set_level(logging.DEBUG)
    app = create_app(echo_factory, auth=auth, well_known={"name": "echo"}, max_body=1000)
    with running_server(app) as addr:
        url = f"http://{addr}/acp"
        good = {"Authorization": f"Bearer {secret}"}
        with httpx.Client(timeout=10) as c:
            assert c.get(f"http://{addr}/.well-known/agent.json").json() == {"name": "echo"}
            assert c.get(f"http://{addr}/health").status_code == 200
            for bad in (
                {},
                {"Authorization": "Bearer wrong"},
                {"Authorization": f"Basic {secret}"},
                {"Authorization": "Basic !!!"},
                {"Authorization": f"Token {secret}"},
            ):
                r = c.post(
                    url,
                    json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                    headers=bad,
                )
                assert r.status_code == 401 and "WWW-Authenticate" in r.headers
                assert secret not in r.text
            basic = {"Authorization": "Basic " + base64.b64encode(b"u:pw-xyz").decode()}
            r = c.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                headers=basic,
            )
            assert r.status_code == 200
            cid = r.headers["Acp-Connection-Id"]
            r = c.post(
                url,
                content=b"{nope",
                headers={**good, "Content-Type": "application/json", "Acp-Connection-Id": cid},
            )
            assert r.status_code == 400 and r.json()["error"]["code"] == -32700
            r = c.post(
                url, content=b"x" * 2000, headers={**good, "Content-Type": "application/json"}
            )
            assert r.status_code == 413
            r = c.post(
                url,
                json={"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {}},
                headers=good,
            )
            assert r.status_code == 400
            r = c.post(
                url,
                json={"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {}},
                headers={**good, "Acp-Connection-Id": "nope"},
            )
            assert r.status_code == 404 and r.json()["error"]["code"] == -32600
            r = c.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "session/prompt",
                    "params": {"sessionId": "s1"},
                },
                headers={**good, "Acp-Connection-Id": cid},
            )
            assert r.status_code == 400
            r = c.get(
                url,
                headers={
                    **good,
                    "Accept": "text/event-stream",
                    "Acp-Connection-Id": cid,
                    "Acp-Session-Id": "zz",
                },
            )
            assert r.status_code == 404
            assert c.delete(url, headers={**good, "Acp-Connection-Id": cid}).status_code == 202
            assert c.delete(url, headers={**good, "Acp-Connection-Id": cid}).status_code == 404
    assert secret not in caplog.text and "pw-xyz" not in caplog.text
