"""ACP remote transport, agent side: the generated agent over HTTP (``--transport http``).

Usage from a generated project::

    from .runtime.http_server import serve
    serve(connection_factory, host="127.0.0.1", port=8000,
          auth=Auth.from_manifest(manifest), well_known=agent_document(manifest))

The wire behaviour and the limits: http_app.py (the ASGI app); one connection and its
streams: http_connection.py and http_streams.py; the server and its launch: http_launch.py;
what client and server share: http_wire.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute

from ..agent.agent import AgentRuntime, close_model_clients
from ..agent.mcp_servers import McpPolicy
from ..sessions.session_methods import advertise
from ..sessions.session_record import callbacks_for
from ..sessions.session_store import open_default_store
from ..sessions.sessions import SessionCore
from ..sessions.store import SessionStore
from ..wire.auth import Auth, MissingSecret
from ..wire.http_wire import ENDPOINT
from ..wire.jsonrpc import DEFAULT_MAX_MESSAGE_SIZE
from .http_app import DEFAULT_MAX_BODY, AcpHttpServer
from .http_connection import ConnectionFactory
from .http_launch import serve_app
from .http_requests import AcpApp


def create_app(factory: ConnectionFactory, **options: Any) -> Starlette:
    """The ASGI app; ``options`` are those of :class:`AcpHttpServer`."""
    server = AcpHttpServer(factory, **options)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sweeper = asyncio.get_running_loop().create_task(server.sweep())
        if server.router is not None:
            await server.router.start()
        yield
        sweeper.cancel()
        await server.shutdown()
        await close_model_clients()

    app = AcpApp(  # POST/GET/DELETE /acp go straight to the server, ahead of the routes
        server,
        routes=[
            Route(ENDPOINT, server.endpoint, methods=["GET", "POST", "DELETE"]),
            WebSocketRoute(ENDPOINT, server.websocket),
            Route("/.well-known/agent.json", server.agent_json, methods=["GET"]),
            Route("/health", server.health, methods=["GET"]),
            Route("/metrics", server.metrics, methods=["GET"]),
            Route("/ready", server.ready, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    return app


def serve(
    factory: ConnectionFactory,
    host: str = "127.0.0.1",
    port: int = 8000,
    **options: Any,
) -> None:
    """Run the agent over HTTP/WebSocket at ``http://host:port/acp`` (blocks); ``options``:
    those of :class:`http_app.AcpHttpServer` and :func:`http_launch.serve_app`."""
    limit = int(options.get("max_body", DEFAULT_MAX_BODY))
    serve_app(lambda rest: create_app(factory, **rest), host, port, message_limit=limit, **options)


# ---- the generated agent over HTTP: sessions come from the session core (sessions.py) ----


def agent_factory(
    agent_cls: type[AgentRuntime],
    store: SessionStore,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    replica: str | None = None,
    allow_stdio_mcp: bool | None = None,
) -> ConnectionFactory:
    """The per-connection runtime for ``create_app``: one ``SessionConnection`` per ACP
    connection, sessions persisted in ``store`` (see sessions.py); when the manifest
    declares ``output_modes.async.callback``, a prompt with ``_meta.callbackUrl`` also gets
    its result POSTed there, signed (see ``callbacks.py``).  Its clients are remote: a
    stdio MCP server they pass is refused unless ``allow_stdio_mcp`` (else
    ``ACP_ALLOW_STDIO_MCP=1``; see mcp_servers.py)."""
    policy = McpPolicy.http(allow_stdio_mcp)

    def make_agent() -> AgentRuntime:
        rt = agent_cls()
        rt.mcp_hub.policy = policy
        return rt

    return SessionCore(
        make_agent,
        store,
        max_message_size=max_message_size,
        callbacks=callbacks_for(agent_cls),
        replica=replica,  # lease owners name the replica
    )


def app_for(
    agent_cls: type[AgentRuntime],
    *,
    store: SessionStore | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    allow_missing_auth: bool = False,
    allow_stdio_mcp: bool | None = None,
    **options: Any,
) -> Starlette:
    """The ASGI app of a generated agent: auth and the well-known document from its manifest.

    An auth scheme whose env var is unset or empty raises :class:`MissingSecret` unless
    ``allow_missing_auth`` (then that scheme accepts nothing, with a warning).

    The store: ``$ACP_SESSION_STORE``, else SQLite at ``$ACP_SESSION_DB``, else
    ``<name>-sessions.db`` in the working directory (see ``session_store.open_default_store``).
    Several replicas: ``$ACP_REDIS_URL`` and ``$ACP_REPLICA_ID`` (see redis_router.py).
    """
    manifest = getattr(agent_cls, "_acp_manifest", {}) or {}
    if "auth" not in options:  # first: an agent that refuses to start creates no store
        options["auth"] = Auth.from_manifest(manifest, allow_missing=allow_missing_auth)
    name = str(manifest.get("name", "agent"))
    if store is None:
        store = open_default_store(name, f"{name}-sessions.db")

    async def document() -> dict[str, Any]:
        rt = agent_cls()
        rt.mcp_hub.policy = McpPolicy.http(allow_stdio_mcp)
        info = rt.agent_info()
        info["endpoints"] = {"acp": ENDPOINT, "health": "/health", "websocket": ENDPOINT}
        advertise(rt, info.get("capabilities"))  # the session methods the core serves
        return info

    replica = os.environ.get("ACP_REPLICA_ID") or None
    redis_url = os.environ.get("ACP_REDIS_URL")
    if redis_url and "router" not in options:
        # needs redis (the project's `redis` extra); imported by name: shipped with HTTP only
        router_module = importlib.import_module(".redis_router", __package__)
        options["router"] = router_module.RedisRouter(redis_url, replica or uuid.uuid4().hex[:12])
    options.setdefault("replica", replica)
    options.setdefault("well_known", document)
    options.setdefault("max_body", max_message_size)
    router = options.get("router")
    owner = replica or (router.replica if router is not None else None)
    factory = agent_factory(agent_cls, store, max_message_size, owner, allow_stdio_mcp)
    return create_app(factory, **options)


def serve_http(
    agent_cls: type[AgentRuntime],
    host: str = "127.0.0.1",
    port: int = 8000,
    **options: Any,
) -> None:
    """The generated agent's ``--transport http`` entry point (called by ``serve.run_agent``).

    A missing or empty auth secret stops it here: one line on stderr naming the variable,
    exit status 2 (see auth.py)."""

    def app_of(rest: dict[str, Any]) -> Starlette:
        try:
            return app_for(agent_cls, **rest)
        except MissingSecret as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None

    limit = int(options.get("max_message_size", DEFAULT_MAX_MESSAGE_SIZE))
    serve_app(app_of, host, port, message_limit=limit, **options)
