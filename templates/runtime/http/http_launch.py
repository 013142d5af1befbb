"""The HTTP agent's launch: Hypercorn, on uvloop where installed, with every server-level
limit set in one place (:func:`server_config`), and the shutdown on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from ..wire.http_wire import ENDPOINT
from ..wire.jsonrpc import DEFAULT_MAX_MESSAGE_SIZE
from ..wire.logsafe import RedactingFilter

DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_KEEP_ALIVE = 5.0
SHUTDOWN_GRACE = 10.0  # seconds from SIGTERM/SIGINT to exit, whatever the store does
# a WebSocket frame this much over the message limit is still read (and answered with an
# error); a bigger one closes the socket with 1009 (the server will not buffer it)
WS_FRAME_MARGIN = 1024 * 1024


def serve_app(
    app_of: Callable[[dict[str, Any]], Any],
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    message_limit: int,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    keep_alive: float = DEFAULT_KEEP_ALIVE,
    **options: Any,
) -> None:
    """Run the app ``app_of(options)`` builds at ``http://host:port/acp`` (blocks); the
    certificate and the server-level limits are taken out of ``options`` first, the
    shutdown grace is read by both; ``message_limit``: the largest message (bytes)."""
    certfile = options.pop("certfile", None)
    keyfile = options.pop("keyfile", None)
    app = app_of(options)
    run_server(
        app,
        host,
        port,
        header_timeout=header_timeout,
        keep_alive=keep_alive,
        max_message_size=message_limit,
        certfile=certfile,
        keyfile=keyfile,
        shutdown_grace=float(options.get("shutdown_grace", SHUTDOWN_GRACE)),
    )


def server_config(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    keep_alive: float = DEFAULT_KEEP_ALIVE,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    certfile: str | None = None,
    keyfile: str | None = None,
) -> Any:
    """Hypercorn's configuration for a generated agent (chosen by measurement: bench/README.md),
    with every server-level limit mapped onto it in this one place.

    Cleartext: HTTP/1.1, HTTP/2 with prior knowledge (h2c) and the h2c Upgrade; with a
    certificate: TLS with ALPN offering h2 and http/1.1.  WebSocket over HTTP/1.1 (and RFC 8441
    over HTTP/2).

    Limits: Hypercorn runs one timer per connection from the moment it opens (and again
    from each completed response) until a request's headers are complete, and closes the
    connection when it fires; data arriving does not reset it.  That timer is both the
    keep-alive and the header deadline, so it is set to the smaller of the two: a socket
    trickling header lines is closed like a silent one.  ``websocket_max_message_size``
    lets a WebSocket frame a little over the message limit through so the runtime answers
    it with an error.  The error log goes through ``acp.runtime.http.server`` with secrets
    redacted; no access log.  No ``Server`` header (it names the server software and costs a
    header per response); ``Date`` stays (RFC 9110 asks an origin server for it).
    """
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.include_server_header = False
    config.keep_alive_timeout = min(keep_alive, header_timeout)
    config.websocket_max_message_size = max_message_size + WS_FRAME_MARGIN
    server_log = logging.getLogger("acp.runtime.http.server")
    if not any(isinstance(f, RedactingFilter) for f in server_log.filters):
        server_log.addFilter(RedactingFilter())
    config.errorlog = server_log
    if certfile is not None:
        config.certfile = certfile
        config.keyfile = keyfile or certfile
    return config


def run_server(app: Any, host: str = "127.0.0.1", port: int = 8000, **settings: Any) -> None:
    """Serve ``app`` on Hypercorn until SIGINT/SIGTERM; ``settings``: the limits and the
    certificate of ``server_config``.

    The listening socket is bound first so that ``listening on URL`` (printed on stderr once)
    names the real port, also when ``port`` is 0.  After SIGTERM/SIGINT the process exits
    within ``shutdown_grace`` seconds (default 10): requests get a third of it to finish,
    then the connections, the router and the store are closed; past the grace it exits at
    once (status 1, one line on stderr), whatever the store or Redis does.
    """
    import socket

    from hypercorn.asyncio import serve as hypercorn_serve

    grace = float(settings.pop("shutdown_grace", SHUTDOWN_GRACE))
    config = server_config(host, port, **settings)
    config.graceful_timeout = min(config.graceful_timeout, grace / 3)
    certfile = settings.get("certfile")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=config.backlog)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    bound = sock.getsockname()[1]
    config.bind = [f"fd://{sock.detach()}"]  # Hypercorn owns the socket from here
    shown = f"[{host}]" if ":" in host else host
    scheme = "https" if certfile is not None else "http"
    protocols = "HTTP/2 via ALPN, HTTP/1.1" if certfile is not None else "h2c, HTTP/1.1"
    print(
        f"listening on {scheme}://{shown}:{bound}{ENDPOINT} ({protocols})",
        file=sys.stderr,
        flush=True,
    )
    try:
        _run_loop(hypercorn_serve(app, config, shutdown_trigger=_on_signal(grace)))
    except KeyboardInterrupt:
        pass


def _on_signal(grace: float) -> Callable[[], Awaitable[None]]:
    """Hypercorn's shutdown trigger: returns on SIGTERM or SIGINT, and from then on a
    watchdog thread ends the process if the shutdown takes longer than ``grace``."""

    async def trigger() -> None:
        import signal
        import threading

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        watchdog = threading.Timer(grace, _overdue, (grace,))
        watchdog.daemon = True
        watchdog.start()

    return trigger


def _overdue(grace: float) -> None:
    print(f"shutdown took longer than {grace:g} s: exiting now", file=sys.stderr, flush=True)
    os._exit(1)


def _run_loop(main: Any) -> None:
    """uvloop's event loop where it is installed (the project depends on it on Linux and
    macOS: less CPU per request, bench/README.md), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)
