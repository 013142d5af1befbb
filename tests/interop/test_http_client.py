"""Our HTTP client (runtime client Connection over http_client.py) drives the official
SDK's HTTP server over SSE and over WebSocket: initialize, session/new, a streamed prompt
whose updates all arrive, in order, before its answer; failures surface as errors."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from typing import Any, ClassVar

import pytest
import uvicorn
from runtime.client.client import AgentProxy, ClientRuntime
from runtime.client.http_client import connect_http
from runtime.wire.errors import RpcError
from runtime.wire.revision import Method
from wait_support import ListeningServer


def sdk_app() -> Any:
    from acp import schema as S
    from acp.helpers import update_agent_message_text
    from acp.http.asgi import create_asgi_app

    class Echo:
        def __init__(self, conn: Any) -> None:
            self.conn = conn
            self.n = 0

        async def initialize(self, protocol_version: int, **kw: Any) -> Any:
            return S.InitializeResponse(protocol_version=protocol_version)

        async def new_session(self, cwd: str, mcp_servers: Any = None, **kw: Any) -> Any:
            self.n += 1
            return S.NewSessionResponse(session_id=f"s{self.n}")

        async def prompt(self, prompt: list[Any], session_id: str, **kw: Any) -> Any:
            for block in prompt:
                await self.conn.session_update(
                    session_id, update_agent_message_text("echo:" + block.text)
                )
            return S.PromptResponse(stop_reason="end_turn")

        def on_connect(self, conn: Any) -> None:
            self.conn = conn

    return create_asgi_app(Echo)


@contextlib.contextmanager
def running(app: Any):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = ListeningServer(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio"
        )
    )
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    assert server.listening.wait(10), "server did not start"
    try:
        yield port
    finally:
        server.should_exit = True
        t.join(10)


class Collect(ClientRuntime):
    METHODS: ClassVar[dict[str, Method]] = {
        "session/update": Method("session_update", "notification", None, None),
    }

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    async def session_update(self, params: Any) -> None:
        self.texts.append(params["update"]["content"]["text"])


@pytest.mark.parametrize("websocket", [False, True], ids=["sse", "websocket"])
def test_our_client_drives_sdk_server(websocket: bool) -> None:
    with running(sdk_app()) as port:

        async def go() -> None:
            client = Collect()
            url = f"http://127.0.0.1:{port}/acp"
            async with connect_http(client, AgentProxy, url, websocket=websocket) as agent:
                init = await asyncio.wait_for(agent.call("initialize", {"protocolVersion": 1}), 10)
                assert init["protocolVersion"] == 1
                sess = await asyncio.wait_for(
                    agent.call("session/new", {"cwd": "/tmp", "mcpServers": []}), 10
                )
                for turn in range(3):
                    blocks = [{"type": "text", "text": f"{turn}-{i}"} for i in range(30)]
                    r = await asyncio.wait_for(
                        agent.call(
                            "session/prompt", {"sessionId": sess["sessionId"], "prompt": blocks}
                        ),
                        10,
                    )
                    assert r["stopReason"] == "end_turn"
                    # the SDK server orders one stream, so all updates precede the answer
                    assert client.texts == [f"echo:{turn}-{i}" for i in range(30)]
                    client.texts.clear()
                if not websocket:  # unknown session: refused by HTTP (404), an error, not a hang
                    with pytest.raises(RpcError) as err:
                        await asyncio.wait_for(
                            agent.call("session/prompt", {"sessionId": "nope", "prompt": []}), 10
                        )
                    assert err.value.data == {"status": 404}

        asyncio.run(go())


def test_refused_initialize_fails_fast() -> None:
    """Nothing listening, and a server that refuses (401): the call fails with an error."""
    from runtime.http.http_server import create_app
    from runtime.wire.auth import Auth

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = int(s.getsockname()[1])
    app = create_app(lambda sink: None, auth=Auth([{"type": "bearer", "env": "T"}], {"T": "tok"}))  # type: ignore[arg-type,return-value]

    async def go(url: str, status: int | None) -> None:
        async with connect_http(Collect(), AgentProxy, url) as agent:
            with pytest.raises(RpcError) as err:
                await asyncio.wait_for(agent.call("initialize", {"protocolVersion": 1}), 10)
            assert err.value.data == ({"status": status} if status else None)

    asyncio.run(go(f"http://127.0.0.1:{dead}/acp", None))
    with running(app) as port:
        asyncio.run(go(f"http://127.0.0.1:{port}/acp", 401))
