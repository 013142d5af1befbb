"""A generated agent's entry points: `run_agent` (its console script) over stdio or HTTP.

`serve_agent_stdio(agent)` is the stdio transport glue; HTTP lives in the `http` room
and plugs into the same `Connection` (see wire/jsonrpc.py's module docstring).  A
client's console script is `console.main.run_client`.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .agent.agent import AgentRuntime, close_model_clients
from .agent.agent_auth import AuthMethod, login_args, manifest_methods
from .sessions.session_record import callbacks_for
from .sessions.session_store import open_default_store
from .sessions.sessions import SessionCore
from .wire.fields import env_option
from .wire.jsonrpc import DEFAULT_MAX_MESSAGE_SIZE, Connection
from .wire.logsafe import stderr_logging
from .wire.stdio import claim_stdout, feed_stdin, open_stdout_now

if TYPE_CHECKING:
    import argparse

    from .sessions.store import SessionStore

# At stdin's EOF, how long the requests already read may run before they are cancelled
# (and answered -32800): a client that pipes requests and closes gets every answer.
EOF_GRACE = 3.0


def agent_connection(
    agent: AgentRuntime,
    sink: Any,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    store: SessionStore | None = None,
) -> Connection:
    """A connection whose incoming messages go to `agent` (any transport), its sessions
    served by the session core from `store` (in memory when not given)."""
    if store is None:
        from .sessions.store import MemorySessionStore

        store = MemorySessionStore()
    core = SessionCore(
        lambda: agent,
        store,
        max_message_size=max_message_size,
        callbacks=callbacks_for(type(agent)),
    )
    return core(sink)


async def serve_agent_stdio(
    agent: AgentRuntime,
    *,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    store: SessionStore | None = None,
) -> None:
    """Serve `agent` on stdin/stdout; sessions persist in `store` (default: see
    ``session_store.open_default_store``), so a restarted agent loads and resumes them.
    The default SQLite file is opened at the first session request, after ``initialize``
    is answered (``session_store.DeferredSqliteStore``)."""
    if store is None:
        store = open_default_store(str(agent.manifest().get("name") or "agent"), deferred=True)
    out_fd = claim_stdout()
    closers: list[Callable[[], object]] = []
    sink, now = await open_stdout_now(out_fd, closers)
    conn = agent_connection(agent, sink, max_message_size, store)
    conn.sink_now = now
    conn.settle = getattr(store, "settled", None)
    try:
        await feed_stdin(conn, max_message_size)
        await conn.finish_incoming(env_option("ACP_EOF_GRACE", EOF_GRACE, float))
    finally:
        await conn.close()
        await close_model_clients()
        for close in closers:
            close()


def _max_size() -> int:
    return int(env_option("ACP_MAX_MESSAGE_SIZE", DEFAULT_MAX_MESSAGE_SIZE))


def _http_options(ap: argparse.ArgumentParser) -> None:
    """The HTTP transport's limits (README, "Hardening"): flag, else env var, else default."""
    h = _transport_module("http.http_app")  # the app's limits; the server's: http_launch
    launch = _transport_module("http.http_launch")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on")
    ap.add_argument("--port", type=int, default=8000, help="port to listen on (0: any free)")
    ap.add_argument(
        "--certfile",
        default=os.environ.get("ACP_TLS_CERT"),
        help="PEM certificate: serve HTTPS with HTTP/2 by ALPN (env ACP_TLS_CERT)",
    )
    ap.add_argument(
        "--keyfile",
        default=os.environ.get("ACP_TLS_KEY"),
        help="PEM private key (default: in --certfile; env ACP_TLS_KEY)",
    )
    for flag, env, default, kind in (
        ("--header-timeout", "ACP_HEADER_TIMEOUT", launch.DEFAULT_HEADER_TIMEOUT, float),
        ("--keep-alive", "ACP_KEEP_ALIVE", launch.DEFAULT_KEEP_ALIVE, float),
        ("--idle-timeout", "ACP_IDLE_TIMEOUT", h.DEFAULT_IDLE_TIMEOUT, float),
        ("--max-connections", "ACP_MAX_CONNECTIONS", h.DEFAULT_MAX_CONNECTIONS, int),
        ("--max-sessions", "ACP_MAX_SESSIONS", h.DEFAULT_MAX_SESSIONS, int),
        ("--unused-timeout", "ACP_UNUSED_TIMEOUT", h.DEFAULT_UNUSED_TIMEOUT, float),
        (
            "--max-connections-per-address",
            "ACP_MAX_CONNECTIONS_PER_ADDRESS",
            h.DEFAULT_MAX_PER_ADDRESS,
            int,
        ),
        ("--shutdown-grace", "ACP_SHUTDOWN_GRACE", launch.SHUTDOWN_GRACE, float),
    ):
        ap.add_argument(flag, type=kind, default=env_option(env, default, kind), help=f"env {env}")
    ap.add_argument(
        "--allow-missing-auth",
        action="store_true",
        default=os.environ.get("ACP_ALLOW_MISSING_AUTH") == "1",
        help="start even when an auth secret is unset or empty (that scheme refuses everyone)",
    )
    ap.add_argument(
        "--allow-stdio-mcp",
        action="store_true",
        default=os.environ.get("ACP_ALLOW_STDIO_MCP", "").strip() == "1",
        help="run the stdio MCP servers (commands) remote clients pass in session/new: "
        "only for clients you trust with this machine (env ACP_ALLOW_STDIO_MCP=1)",
    )


def _transport_module(name: str) -> Any:
    """An optional transport module of this package (`http.http_server`, ...): shipped
    only in projects that use it, so it is imported by name, not statically."""
    return importlib.import_module(f".{name}", __package__)


def run_agent(
    agent_cls: type[AgentRuntime], argv: list[str] | None = None, *, transport: str = "stdio"
) -> None:
    """The generated project's console script."""
    manifest = agent_cls.manifest()
    given = list(sys.argv[1:] if argv is None else argv)
    methods = manifest_methods(manifest)
    login = login_args(methods, given)
    if login is not None:  # a client started the terminal login (agent_auth.py)
        sys.exit(agent_cls.login(login.id, given[: len(given) - len(login.args)]))
    if transport != "http" and not given:
        # how an editor starts it: nothing to parse, so no parser is built (argparse's
        # import and set-up are a few ms of the start-up before `initialize` is answered)
        max_size = _max_size()
    else:
        args = _agent_parser(manifest, methods, transport).parse_args(argv)
        max_size = args.max_message_size
    stderr_logging()
    if transport == "http":
        _transport_module("http.http_server").serve_http(
            agent_cls,
            host=args.host,
            port=args.port,
            max_message_size=max_size,
            certfile=args.certfile,
            keyfile=args.keyfile,
            header_timeout=args.header_timeout,
            keep_alive=args.keep_alive,
            idle_timeout=args.idle_timeout,
            max_connections=args.max_connections,
            max_sessions=args.max_sessions,
            unused_timeout=args.unused_timeout,
            max_per_address=args.max_connections_per_address,
            shutdown_grace=args.shutdown_grace,
            allow_missing_auth=args.allow_missing_auth,
            allow_stdio_mcp=args.allow_stdio_mcp,
        )
        return
    try:
        asyncio.run(serve_agent_stdio(agent_cls(), max_message_size=max_size))
    except KeyboardInterrupt:
        pass
    sys.exit(0)


def _agent_parser(
    manifest: dict[str, Any], methods: tuple[AuthMethod, ...], transport: str
) -> argparse.ArgumentParser:
    """The agent's command line: its help, `--max-message-size`, HTTP's options."""
    import argparse

    class Help(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
        """Keep the description's paragraphs; show each option's default."""

    name = manifest.get("name", "agent")
    logins = [
        f"{name} {' '.join(m.args)}: {m.name} (the '{m.id}' terminal auth method)"
        for m in methods
        if m.type == "terminal"
    ]
    how = (
        "Serves the Agent Client Protocol over HTTP at /acp (SSE and WebSocket)."
        if transport == "http"
        else "Speaks the Agent Client Protocol on stdin/stdout (JSON-RPC, one message a "
        "line); an ACP client such as an editor starts it. Logs go to stderr."
    )
    about = manifest.get("description") or manifest.get("title") or ""
    epilog = _environment(name, transport)
    if manifest.get("llm"):
        epilog = _model_environment(manifest["llm"]) + "\n\n" + epilog
    if logins:
        epilog = "interactive login:\n  " + "\n  ".join(logins) + "\n\n" + epilog
    ap = argparse.ArgumentParser(
        prog=name,
        description=f"{about.strip()}\n\n{how}".strip(),
        epilog=epilog,
        formatter_class=Help,
    )
    ap.add_argument(
        "--max-message-size",
        type=int,
        default=_max_size(),
        metavar="BYTES",
        help="largest JSON-RPC message accepted (env ACP_MAX_MESSAGE_SIZE)",
    )
    if transport == "http":
        _http_options(ap)
    return ap


def _environment(name: str, transport: str) -> str:
    """The help's environment section: where sessions are kept (session_store.py's
    ``open_default_store``; PostgreSQL ships with HTTP agents only) and, over HTTP, what
    joins replicas (http_server.py's ``app_for``)."""
    if transport == "http":
        urls = "sqlite:///path.db, memory: or postgresql://user@host/db (extra: postgres)"
        default = f"{name}-sessions.db in the working directory"
    else:
        urls = "sqlite:///path.db or memory:"
        default = f"~/.local/state/{name}/sessions.db, under $XDG_STATE_HOME when set"
    lines = [
        "session store (environment):",
        f"  ACP_SESSION_STORE  {urls}",
        "  ACP_SESSION_DB     the SQLite file when ACP_SESSION_STORE is unset",
        f"                     (default: {default})",
    ]
    if transport == "http":
        lines += [
            "",
            "several replicas (environment; extra: redis):",
            "  ACP_REDIS_URL      redis://host:6379/0: replicas relay each other's connections",
            "  ACP_REPLICA_ID     this replica's id, the value of the acp-replica affinity cookie",
        ]
    metrics = ", prometheus (GET /metrics)" if transport == "http" else ""
    lines += [
        "",
        "traces and metrics (environment; extra: otel; off when none is set):",
        "  OTEL_EXPORTER_OTLP_ENDPOINT  http://collector:4318: both over OTLP/HTTP",
        "  OTEL_TRACES_EXPORTER         otlp, console (stderr), none",
        f"  OTEL_METRICS_EXPORTER        otlp{metrics}, console, none",
    ]
    return "\n".join(lines)


def _model_environment(llm: dict[str, Any]) -> str:
    """The help's model section (a manifest with `llm`): what model/route.py,
    model/history.py and agent/mcp_servers.py read."""
    from .agent.mcp_servers import CONNECT_TIMEOUT

    # the model room ships with model projects only: imported by name
    max_messages = _transport_module("model.history").MAX_MESSAGES
    models = llm.get("models") or ()
    first = models[0] if models else None
    default = llm.get("default_model") or (first.get("id") if type(first) is dict else first)
    return "\n".join(
        [
            "the model (environment):",
            "  ACP_MODEL                the model id, pydantic-ai's provider:model"
            + (f" (default: {default})" if default else ""),
            "                           test: a scripted model, text only (no key, no network)",
            "  OPENAI_API_KEY           the key of an openai: model",
            "  OPENAI_BASE_URL          an OpenAI-compatible endpoint (openai: ids then speak",
            "                           Chat Completions to it)",
            "  ANTHROPIC_API_KEY        the key of an anthropic: model",
            f"  ACP_MODEL_HISTORY        messages kept per session (default: {max_messages})",
            f"  ACP_MCP_CONNECT_TIMEOUT  seconds an MCP server may take (default: {CONNECT_TIMEOUT:g})",
            "  an editor's model pick and its providers/set route win over the environment",
        ]
    )
