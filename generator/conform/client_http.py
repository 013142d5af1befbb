"""The kit as a Streamable HTTP agent, for a client that connects by URL (`{url}`,
`--serve http`): the RFD's endpoint written on raw ASGI, served by Hypercorn (HTTP/1.1
and h2c) on 127.0.0.1.

`initialize` (POST, no `Acp-Connection-Id`) is answered 200 with the JSON-RPC response and
the header (and a cookie, which the client must return); every other POST 202, its
message handed to the kit's agent side; GET opens the connection-scoped stream, or a
session's with `Acp-Session-Id`; what the kit sends goes to the session's stream when it
names a session (or answers a session-scoped request), else to the connection's.  Every
request the client makes is recorded for the client's HTTP requirements.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

CONNECTION = "acp-connection-id"
SESSION = "acp-session-id"
COOKIE = "conform-affinity"


@dataclass
class Seen:
    """One HTTP request of the client."""

    method: str
    headers: dict[str, str]
    what: str  # the JSON-RPC method it carried, "stream", or ""


@dataclass
class HttpEndpoint:
    on_frame: Any  # (bytes, channel) -> None: the kit's agent side
    session_scoped: Any  # method name -> bool
    connection: str = field(default_factory=lambda: f"conform-{uuid.uuid4().hex[:12]}")
    requests: list[Seen] = field(default_factory=list)
    streams: dict[str, asyncio.Queue[bytes | None]] = field(default_factory=dict)
    pending_init: asyncio.Future[bytes] | None = None
    asked: dict[Any, str] = field(default_factory=dict)  # the client's request ids -> method
    session_of: dict[Any, str] = field(default_factory=dict)  # request id -> its session

    # ---- what the kit sends (Session.writer) ---------------------------------------------
    def write(self, data: bytes) -> None:
        data = data.rstrip(b"\n")
        msg = orjson.loads(data)
        if self.pending_init is not None and not self.pending_init.done():
            self.pending_init.set_result(data)
            return
        self._queue(self._stream_of(msg)).put_nowait(data)

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        for queue in self.streams.values():
            queue.put_nowait(None)

    def _stream_of(self, msg: Any) -> str:
        if type(msg) is not dict:
            return "conn"
        params = msg.get("params")
        if type(params) is dict and type(params.get("sessionId")) is str:
            return str(params["sessionId"])
        if "method" not in msg:
            method = self.asked.get(msg.get("id"), "")
            return (
                self.session_of.get(msg.get("id"), "conn")
                if self.session_scoped(method)
                else "conn"
            )
        return "conn"

    def _queue(self, key: str) -> asyncio.Queue[bytes | None]:
        queue = self.streams.get(key)
        if queue is None:
            queue = self.streams[key] = asyncio.Queue()
        return queue

    # ---- the ASGI app ----------------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        method = scope["method"]
        if method == "POST":
            await self._post(headers, receive, send)
        elif method == "GET":
            self.requests.append(Seen("GET", headers, "stream"))
            await self._stream(headers, send)
        else:
            self.requests.append(Seen(method, headers, ""))
            await _reply(send, 202, b"")

    async def _post(self, headers: dict[str, str], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            msg = orjson.loads(body)
        except orjson.JSONDecodeError:
            msg = None
        what = str(msg.get("method") or "response") if type(msg) is dict else "raw"
        self.requests.append(Seen("POST", headers, what))
        if type(msg) is dict and "method" in msg and "id" in msg:
            self.asked[msg["id"]] = what
            sid = headers.get(SESSION)
            if sid:
                self.session_of[msg["id"]] = sid
        if what == "initialize" and CONNECTION not in headers:
            self.pending_init = asyncio.get_running_loop().create_future()
            self.on_frame(body, "post")
            answer = await asyncio.wait_for(self.pending_init, 30)
            extra = [
                (b"acp-connection-id", self.connection.encode()),
                (b"set-cookie", f"{COOKIE}=kit; Path=/; HttpOnly".encode()),
            ]
            await _reply(send, 200, answer, extra)
            return
        await _reply(send, 202, b"")
        self.on_frame(body, "post")

    async def _stream(self, headers: dict[str, str], send: Any) -> None:
        key = headers.get(SESSION) or "conn"
        queue = self._queue(key)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        with contextlib.suppress(Exception):
            while True:
                data = await queue.get()
                if data is None:
                    break
                await send(
                    {
                        "type": "http.response.body",
                        "body": b"data: " + data + b"\n\n",
                        "more_body": True,
                    }
                )
        with contextlib.suppress(Exception):
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _reply(
    send: Any, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [(b"content-type", b"application/json")] if body else []
    await send(
        {"type": "http.response.start", "status": status, "headers": headers + (extra or [])}
    )
    await send({"type": "http.response.body", "body": body})


async def serve(endpoint: HttpEndpoint) -> tuple[Any, str, Any]:
    """Hypercorn on 127.0.0.1, a free port: (its task, the URL, the shutdown event)."""
    import socket

    from hypercorn.asyncio import serve as hyper
    from hypercorn.config import Config

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.errorlog = None
    stop = asyncio.Event()
    app: Any = endpoint  # a raw ASGI callable (Hypercorn types the scopes it passes)
    task = asyncio.get_running_loop().create_task(hyper(app, config, shutdown_trigger=stop.wait))
    for _ in range(100):
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            break
        await asyncio.sleep(0.02)
    return task, f"http://127.0.0.1:{port}/acp", stop


def judge_requests(endpoint: HttpEndpoint) -> list[tuple[str, bool, str]]:
    """(id, passed, why) of the client's HTTP requirements, from what it requested."""
    after = [
        r for r in endpoint.requests if not (r.what == "initialize" and CONNECTION not in r.headers)
    ]
    no_conn = [
        r
        for r in after
        if r.headers.get(CONNECTION) != endpoint.connection and r.method != "DELETE"
    ]
    no_session = [
        r
        for r in after
        if r.method == "POST" and endpoint.session_scoped(r.what) and not r.headers.get(SESSION)
    ]
    media = [
        r
        for r in endpoint.requests
        if r.method == "POST"
        and not r.headers.get("content-type", "").startswith("application/json")
    ]
    media += [
        r
        for r in endpoint.requests
        if r.method == "GET"
        and "text/event-stream" not in r.headers.get("accept", "")
        and "*/*" not in r.headers.get("accept", "")
    ]
    cookies = [r for r in after if f"{COOKIE}=kit" not in r.headers.get("cookie", "")]
    return [
        (
            "AGENTGEN-CLIENT-HTTP-001",
            not no_conn,
            f"{no_conn[0].method} {no_conn[0].what} without the Acp-Connection-Id"
            if no_conn
            else "",
        ),
        (
            "AGENTGEN-CLIENT-HTTP-002",
            not no_session,
            f"POST {no_session[0].what} without Acp-Session-Id" if no_session else "",
        ),
        (
            "AGENTGEN-CLIENT-HTTP-003",
            not media,
            f"{media[0].method} {media[0].what}: wrong Content-Type / Accept" if media else "",
        ),
        (
            "AGENTGEN-CLIENT-HTTP-004",
            not cookies,
            f"{cookies[0].method} {cookies[0].what} without the kit's cookie" if cookies else "",
        ),
    ]
