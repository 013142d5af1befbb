"""The inspector's web server: the page (static files), one WebSocket, and the guard.

Every HTTP request and the WebSocket must carry the token (the `token` query parameter of
the printed URL, or the cookie the first tokened page load sets), a `Host` naming this
server on loopback (127.0.0.1 / localhost / [::1] with this port: a DNS rebinding page
names its own host), and, when an `Origin` is sent, this server's own origin.  Anything
else is refused before it reaches the app.  The page can only call the agent the command
line named; it starts no process.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import orjson

from .bridge import Bridge

STATIC = Path(__file__).resolve().parent / "static"
COOKIE = "agentgen_inspect"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css"}

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class Guard:
    """ASGI middleware: token, Host and Origin checked on every request and WebSocket."""

    def __init__(self, app: App, token: str, port: int) -> None:
        self.app = app
        self.token = token
        self.hosts = {f"{name}:{port}" for name in LOOPBACK_NAMES}
        self.origins = {f"http://{host}" for host in self.hosts}

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            return 421, "this inspector answers on its loopback address only"
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in self.origins:
            return 403, "cross-origin requests are refused"
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = (query.get("token") or [""])[0]
        if not given:
            cookie = SimpleCookie()
            with contextlib.suppress(Exception):
                cookie.load(headers.get("cookie", ""))
            morsel = cookie.get(COOKIE)
            given = morsel.value if morsel is not None else ""
        if not secrets.compare_digest(given.encode(), self.token.encode()):
            return 401, "the token is missing or wrong: open the URL agentgen inspect printed"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refused = self.refusal(scope)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, why = refused
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": why})
            return
        body = (why + "\n").encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def create_app(bridge: Bridge, token: str, port: int) -> App:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect

    security_headers = {
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Content-Security-Policy": "default-src 'self'; img-src 'self' data: blob:; "
        "connect-src 'self'; frame-ancestors 'none'",
    }

    async def page(request: Request) -> Response:
        name = request.path_params.get("name", "index.html")
        path = STATIC / name
        if "/" in name or not path.is_file() or path.suffix not in _TYPES:
            return Response("not found\n", status_code=404, media_type="text/plain")
        resp = Response(path.read_bytes(), media_type=_TYPES[path.suffix], headers=security_headers)
        if "token" in request.query_params:
            resp.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
        return resp

    async def socket_endpoint(ws: WebSocket) -> None:
        await ws.accept()
        lock = asyncio.Lock()

        async def send(event: dict[str, Any]) -> None:
            async with lock:
                await ws.send_text(orjson.dumps(event).decode())

        async with lock:  # the history first; events emitted meanwhile wait for the lock
            backlog = list(bridge.events)
            bridge.listeners.add(send)
            for event in backlog:
                await ws.send_text(orjson.dumps(event).decode())
        try:
            while True:
                text = await ws.receive_text()
                asyncio.get_running_loop().create_task(_op(bridge, send, text))
        except WebSocketDisconnect:
            pass
        finally:
            bridge.listeners.discard(send)

    app = Starlette(
        routes=[
            Route("/", page),
            Route("/static/{name}", page),
            WebSocketRoute("/ws", socket_endpoint),
        ]
    )
    return Guard(app, token, port)


async def _op(bridge: Bridge, send: Callable[[dict[str, Any]], Awaitable[None]], text: str) -> None:
    """One request of the page: call/notify the agent, or answer a question."""
    try:
        op = orjson.loads(text)
    except orjson.JSONDecodeError:
        return
    if type(op) is not dict:
        return
    ref = op.get("ref")
    kind = op.get("op")
    try:
        if kind == "call":
            result = await bridge.call(str(op.get("method")), op.get("params"))
            await send({"kind": "reply", "ref": ref, "result": result})
        elif kind == "notify":
            bridge.notify(str(op.get("method")), op.get("params"))
            await send({"kind": "reply", "ref": ref, "result": None})
        elif kind == "answer":
            ok = bridge.answer(str(op.get("id")), op.get("value"))
            await send({"kind": "reply", "ref": ref, "result": ok})
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the page
        error: dict[str, Any] = {"message": str(exc) or type(exc).__name__}
        code = getattr(exc, "code", None)
        if type(code) is int:
            error["code"] = code
            error["data"] = getattr(exc, "data", None)
        with contextlib.suppress(Exception):
            await send({"kind": "reply", "ref": ref, "error": error})


def bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    sock.set_inheritable(True)
    return sock


async def serve(bridge: Bridge, sock: socket.socket, token: str) -> None:
    """Serve the page until the bridge stops (Ctrl-C, or the agent went away and the
    user closes the inspector)."""
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    port = sock.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 1.0
    app = create_app(bridge, token, port)
    shutdown = asyncio.Event()
    server = asyncio.ensure_future(
        hypercorn_serve(app, config, shutdown_trigger=shutdown.wait)  # type: ignore[arg-type]
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # stop cleanly: the agent is ended too
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, bridge.stopped.set)
    runner = asyncio.ensure_future(bridge.run())
    try:
        # the page stays up after the agent is gone (its history is worth reading) until
        # Ctrl-C / SIGTERM; a stop while the agent still runs ends it
        await bridge.stopped.wait()
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        shutdown.set()
        await asyncio.gather(server, return_exceptions=True)
