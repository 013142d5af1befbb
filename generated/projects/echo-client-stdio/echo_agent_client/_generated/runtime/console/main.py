"""A generated client's console script: `run_client` (`-- AGENT_COMMAND...` over stdio or
`--url URL` over HTTP/WebSocket, each stdin line a prompt) and `run_http_client`."""

from __future__ import annotations

import sys
from typing import Any

from ..wire.fields import env_option
from ..wire.logsafe import stderr_logging


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

    from ..client.retries import CONNECT_TIMEOUT, MAX_RETRY_WAIT, RETRIES, RETRY_DELAY

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
        default=env_option("ACP_CONNECT_TIMEOUT", CONNECT_TIMEOUT, float),
        metavar="SECONDS",
        help="how long the agent has to start and answer initialize and session/new; "
        "raise it for a first npx/uvx download "
        f"(env ACP_CONNECT_TIMEOUT; default {CONNECT_TIMEOUT:g})",
    )
    ap.add_argument(
        "--retries",
        type=int,
        default=env_option("ACP_RETRIES", RETRIES),
        metavar="N",
        help="retry a prompt the agent answers with a transient error up to N times "
        f"(env ACP_RETRIES; default {RETRIES})",
    )
    ap.add_argument(
        "--retry-delay",
        type=float,
        default=env_option("ACP_RETRY_DELAY", RETRY_DELAY, float),
        metavar="SECONDS",
        help="wait before the first retry, doubled before each next one "
        f"(env ACP_RETRY_DELAY; default {RETRY_DELAY:g}: 1s, 2s, 4s)",
    )
    ap.add_argument(
        "--max-retry-wait",
        type=float,
        default=env_option("ACP_MAX_RETRY_WAIT", MAX_RETRY_WAIT, float),
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
    from ..client.agent_process import command_line
    from ..client.client import spawn_agent
    from .console import run_console

    client = client_cls()
    client.serve_fs = not args.no_fs
    client.serve_terminal = not args.no_terminal
    client.assume_yes = args.yes
    if args.url is not None:
        from ..client import http_client as http

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


def run_http_client(
    client_cls: type[Any],
    proxy_cls: type[Any],
    url: str,
    *,
    websocket: bool = False,
    **options: Any,
) -> None:
    """Console script: connect (Streamable HTTP, or one WebSocket with ``websocket``), open
    a session, send each stdin line as a prompt (console.py; `options`: retries,
    retry_delay, max_retry_wait, connect_timeout).  When the agent's manifest declares
    HTTP auth, the credential is read from the environment variable it names (the one
    the agent reads, e.g. `RESEARCH_AGENT_TOKEN`) and sent with every request."""
    from ..client import http_client as http
    from .console import run_console

    client = client_cls()
    headers = http.manifest_headers(client_cls)
    run_console(
        client,
        lambda: http.connect_http(client, proxy_cls, url, headers=headers, websocket=websocket),
        target=url,
        **options,
    )
