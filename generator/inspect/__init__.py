"""`agentgen inspect`: a local web page that starts (stdio) or connects to (HTTP, WebSocket)
one ACP agent, drives it like an editor would and shows every frame, schema-checked.

runtime_link.py  the one module that imports the runtime (a client rendered for --schema)
bridge.py        the agent connection: the inspector's client, frames as page events
server.py        the Starlette app (page, WebSocket) behind the token/Host/Origin guard
static/          the page: plain HTML, CSS and JavaScript (no build step)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sys
from pathlib import Path

from ..errors import AgentgenError


def run_inspect(
    command: list[str] | None,
    *,
    url: str | None = None,
    websocket: bool = False,
    schema: str | None = None,
    cwd: Path | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    open_browser: bool = True,
    auto_approve: bool = False,
) -> int:
    """Serve the inspector for the agent `command` (stdio) or at `url`; runs until Ctrl-C."""
    if bool(command) == bool(url):
        raise AgentgenError(
            "give the agent's command after -- or its --url (one of them)",
            hint="agentgen inspect -- python -m my_agent   |   agentgen inspect --url http://127.0.0.1:8000/acp",
        )
    folder = (cwd or Path.cwd()).resolve()
    if not folder.is_dir():
        raise AgentgenError("not a directory", source=str(folder))
    from .bridge import Bridge
    from .runtime_link import load_runtime
    from .server import bind, serve

    rt = load_runtime(schema)
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise AgentgenError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    token = secrets.token_urlsafe(24)
    page = f"http://{host}:{sock.getsockname()[1]}/?token={token}"
    print(f"agentgen inspect: {page}", flush=True)
    print(f"  agent: {url or ' '.join(command or [])}; files and terminals in {folder}", flush=True)

    async def main() -> None:
        bridge = Bridge(
            rt,
            command=command,
            url=url,
            websocket=websocket,
            cwd=str(folder),
            auto_approve=auto_approve,
            env=dict(os.environ),
        )
        if open_browser:
            loop = asyncio.get_running_loop()
            loop.call_later(0.3, loop.run_in_executor, None, _open, page)
        await serve(bridge, sock, token)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    with contextlib.suppress(OSError):  # Hypercorn closed the listening socket already
        sock.close()
    return 0


def _open(page: str) -> None:
    import webbrowser

    try:
        webbrowser.open(page)
    except Exception as exc:  # noqa: BLE001 - no browser: the printed URL is enough
        print(
            f"agentgen inspect: cannot open a browser ({exc}); open the URL above", file=sys.stderr
        )
