"""Entry points: run an agent or a client over a transport.

`serve_agent_stdio(agent)` is the stdio transport glue; HTTP lives in `http_*.py`
and plugs into the same `Connection` (see jsonrpc.py's module docstring).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

from .agent import AgentRuntime
from .agent_auth import AuthMethod, login_args, manifest_methods
from .jsonrpc import DEFAULT_MAX_MESSAGE_SIZE, Connection
from .logsafe import stderr_logging
from .session_record import callbacks_for
from .session_store import open_default_store
from .sessions import SessionCore
from .stdio import claim_stdout, feed_stdin, open_stdout_now

if TYPE_CHECKING:
    import argparse

    from .store import SessionStore


def agent_connection(
    agent: AgentRuntime,
    sink: Any,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    store: SessionStore | None = None,
) -> Connection:
    """A connection whose incoming messages go to `agent` (any transport), its sessions
    served by the session core from `store` (in memory when not given)."""
    if store is None:
        from .store import MemorySessionStore

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
    sink, now = await open_stdout_now(out_fd)
    conn = agent_connection(agent, sink, max_message_size, store)
    conn.sink_now = now
    conn.settle = getattr(store, "settled", None)
    try:
        await feed_stdin(conn, max_message_size)
    finally:
        await conn.close()


def _env(name: str, default: Any, kind: type = int) -> Any:
    """An option's default from the environment (``ACP_<OPTION>``), else ``default``."""
    raw = os.environ.get(name)
    try:
        return kind(raw) if raw else default
    except ValueError:
        return default


def _max_size() -> int:
    return int(_env("ACP_MAX_MESSAGE_SIZE", DEFAULT_MAX_MESSAGE_SIZE))


def _http_options(ap: argparse.ArgumentParser) -> None:
    """The HTTP transport's limits (README, "Hardening"): flag, else env var, else default."""
    h = _transport_module("http_app")  # the app's limits; the server's: http_launch
    launch = _transport_module("http_launch")
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
        ap.add_argument(flag, type=kind, default=_env(env, default, kind), help=f"env {env}")
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
    """An optional transport module of this package (http_server, http_client): shipped
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
        _transport_module("http_server").serve_http(
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
    ap = argparse.ArgumentParser(
        prog=name,
        description=f"{about.strip()}\n\n{how}".strip(),
        epilog="interactive login:\n  " + "\n  ".join(logins) if logins else None,
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


def run_client(
    client_cls: type[Any],
    proxy_cls: type[Any],
    argv: list[str] | None = None,
    *,
    transport: str = "stdio",
) -> None:
    """The client's console script: `-- AGENT_COMMAND...` (stdio) or `--url URL` (HTTP),
    whichever transport the project was made with; each stdin line is a prompt."""
    import argparse

    from .retries import CONNECT_TIMEOUT, MAX_RETRY_WAIT, RETRIES, RETRY_DELAY

    ap = argparse.ArgumentParser(
        description="An Agent Client Protocol client: starts the agent (-- AGENT_COMMAND...) "
        "or connects to it (--url), opens a session and sends each line of stdin as a prompt "
        "(a line ending with \\ continues on a terminal); the agent's answer streams to "
        "stdout, its typed output as one JSON line; thoughts, tool calls, plans and "
        "terminal output go to stderr. It serves the agent's file reads and writes inside "
        "the current folder and runs its terminal commands there. Exit status: 0 when "
        "stdin ends; 1 on an agent error, when the agent exits, cannot be reached or "
        "started, or does not answer in time; 2 on a usage error; 3 when a turn was "
        "cancelled because the agent asked something nobody could answer here (stdin is "
        "not a terminal).",
        epilog="example: echo hello | %(prog)s -- my-agent"
        if transport != "http"
        else "example: echo hello | %(prog)s --url http://127.0.0.1:8000/acp",
    )
    ap.add_argument(
        "--url",
        help="the agent's ACP endpoint (…/acp), over HTTP, instead of an agent command",
    )
    ap.add_argument(
        "--websocket",
        action="store_true",
        help="with --url: one WebSocket at the same URL (ws://…/acp) instead of HTTP POST + SSE",
    )
    ap.add_argument(
        "--yes",
        action="store_true",
        help="allow the agent's file writes and permission requests without asking "
        "(otherwise asked on a terminal; refused when stdin is not one)",
    )
    ap.add_argument(
        "--no-fs", action="store_true", help="do not offer the agent file reads and writes"
    )
    ap.add_argument("--no-terminal", action="store_true", help="do not offer the agent terminals")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a session config option before the first prompt (repeatable)",
    )
    ap.add_argument("--mode", metavar="ID", help="switch the session to this mode first")
    ap.add_argument(
        "--input",
        metavar="FILE",
        help="send the content of FILE as one prompt (- for all of stdin), then exit",
    )
    ap.add_argument(
        "--auth", metavar="METHOD_ID", help="authenticate with this method before the session"
    )
    ap.add_argument(
        "--connect-timeout",
        type=float,
        default=_env("ACP_CONNECT_TIMEOUT", CONNECT_TIMEOUT, float),
        metavar="SECONDS",
        help="how long the agent has to start and answer initialize and session/new; "
        "raise it for a first npx/uvx download "
        f"(env ACP_CONNECT_TIMEOUT; default {CONNECT_TIMEOUT:g})",
    )
    ap.add_argument(
        "--retries",
        type=int,
        default=_env("ACP_RETRIES", RETRIES),
        metavar="N",
        help="retry a prompt the agent answers with a transient error up to N times "
        f"(env ACP_RETRIES; default {RETRIES})",
    )
    ap.add_argument(
        "--retry-delay",
        type=float,
        default=_env("ACP_RETRY_DELAY", RETRY_DELAY, float),
        metavar="SECONDS",
        help="wait before the first retry, doubled before each next one "
        f"(env ACP_RETRY_DELAY; default {RETRY_DELAY:g}: 1s, 2s, 4s)",
    )
    ap.add_argument(
        "--max-retry-wait",
        type=float,
        default=_env("ACP_MAX_RETRY_WAIT", MAX_RETRY_WAIT, float),
        metavar="SECONDS",
        help="the longest wait before a retry: an error's retry_after (HTTP Retry-After on "
        f"429/503) is honoured up to this (env ACP_MAX_RETRY_WAIT; default {MAX_RETRY_WAIT:g})",
    )
    ap.add_argument(
        "command",
        nargs="*",
        metavar="AGENT_COMMAND",
        help="the command that starts the agent (after --)",
    )
    args = ap.parse_args(argv)
    stderr_logging()
    settings: list[tuple[str, str]] = []
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq or not key:
            ap.error(f"--set {item!r}: expected KEY=VALUE")
        settings.append((key, value))
    if args.url is not None and args.command:
        ap.error("give either --url or an agent command after --, not both")
    if args.url is None and not args.command:
        ap.error(
            "give the agent's URL with --url"
            if transport == "http"
            else "give the agent command after --"
        )
    if args.url is not None:
        problem = _bad_url(args.url)
        if problem:
            ap.error(f"--url {args.url!r}: {problem}")
    options: dict[str, Any] = {
        "retries": max(0, args.retries),
        "retry_delay": max(0.0, args.retry_delay),
        "max_retry_wait": max(0.0, args.max_retry_wait),
        "connect_timeout": max(0.0, args.connect_timeout),
        "settings": settings,
        "mode": args.mode,
        "input_file": args.input,
        "auth": args.auth,
        "rerun": _rerun(ap.prog, argv if argv is not None else sys.argv[1:]),
    }
    from .agent_process import command_line
    from .client import spawn_agent
    from .console import run_console

    client = client_cls()
    client.serve_fs = not args.no_fs
    client.serve_terminal = not args.no_terminal
    client.assume_yes = args.yes
    if args.url is not None:
        http = _transport_module("http_client")
        headers = http.manifest_headers(client_cls)
        run_console(
            client,
            lambda: http.connect_http(
                client, proxy_cls, args.url, headers=headers, websocket=args.websocket
            ),
            target=args.url,
            **options,
        )
        return
    run_console(
        client,
        lambda: spawn_agent(client, proxy_cls, *args.command, grace=3.0),
        target=f"the agent `{command_line(args.command)}`",
        **options,
    )


def _rerun(prog: str, argv: list[str]) -> Any:
    """The command line to run again with `--auth METHOD_ID` (for the auth-required hint)."""
    import shlex

    def line(method_id: str) -> str:
        return shlex.join([prog, "--auth", method_id, *argv])

    return line


def _bad_url(url: str) -> str | None:
    """What is wrong with an agent URL (None: nothing)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("http", "https", "ws", "wss"):
        return "expected an http:// or https:// URL, e.g. http://127.0.0.1:8000/acp"
    if not parts.hostname:
        return "no host in the URL"
    return None
