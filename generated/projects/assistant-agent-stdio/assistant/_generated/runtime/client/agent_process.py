"""The agent as a subprocess of the client (``client.spawn_agent``): started in a process
group of its own, its stdout guarded (a line that is not JSON ends the connection, named),
its stderr relayed onto ours (an HTTP server started by mistake is named at once), and
ended (SIGTERM, then SIGKILL, to the whole group)."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import re
import signal
import sys
from typing import Any

from ..wire.errors import ConnectionClosed
from ..wire.jsonrpc import Connection


async def exit_status(proc: asyncio.subprocess.Process, timeout: float | None) -> int | None:
    """The process's exit status once it has exited (None: still running after
    `timeout` seconds).  Polled: `proc.wait()` also waits until every pipe is closed,
    which a child the agent started may hold open for ever."""
    loop = asyncio.get_running_loop()
    end = None if timeout is None else loop.time() + timeout
    while proc.returncode is None:
        if end is not None and loop.time() >= end:
            return None
        await asyncio.sleep(0.05 if end is not None else 0.25)
    return proc.returncode


def signal_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    """`sig` to the agent's process group (the agent and what it started), else the agent."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, sig)
        else:  # pragma: no cover - no process groups
            proc.send_signal(sig)


_JSON_START = (b"{", b"[")
_SHOWN = 80  # characters of a stray stdout line quoted in the error


class StdoutGuard:
    """In front of the connection, on the agent's stdout: a line that is not a JSON
    object or array (a log line, a banner) ends the connection with a line saying so,
    instead of a parse error answered to an agent that is not listening."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.tripped = False
        self.framed = False  # a JSON frame has come: the agent speaks over stdio

    def feed(self, frame: bytes) -> None:
        if self.tripped:
            return
        if frame[:1] in _JSON_START or frame.lstrip()[:1] in _JSON_START or not frame.strip():
            self.framed = self.framed or bool(frame.strip())
            self.conn.feed(frame)
            return
        shown = " ".join(frame.decode("utf-8", "replace").split())
        shown = shown if len(shown) <= _SHOWN else shown[: _SHOWN - 3] + "..."
        self.trip(
            ConnectionClosed(
                f'the agent wrote something that is not ACP on stdout: "{shown}" '
                "(agents must log to stderr)"
            )
        )

    def trip(self, reason: ConnectionClosed) -> None:
        """End the connection with `reason` (once)."""
        if self.tripped:
            return
        self.tripped = True
        asyncio.get_running_loop().create_task(self.conn.close_with(reason))

    def too_large(self, size: int) -> None:
        self.conn.too_large(size)


# what an HTTP agent says on start-up (runtime/serve.py: "listening on URL (...)")
_LISTENING = re.compile(r"listening on (https?://[^\s()]+)")
_KEPT = 4096  # characters of the agent's early stderr searched for it


async def relay_stderr(
    stream: asyncio.StreamReader, guard: StdoutGuard, command: tuple[str, ...]
) -> None:
    """The agent's stderr onto ours as it comes (its logs stay visible).  Before its first
    frame on stdout, a `listening on http://...` line means the command serves HTTP, not
    stdio: the connection ends at once, naming the URL to use, instead of waiting for an
    `initialize` answer that never comes."""
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    early = ""
    while chunk := await stream.read(1 << 16):
        text = decode(chunk)
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(text)
            sys.stderr.flush()
        if guard.framed or guard.tripped:
            continue
        early = (early + text)[-_KEPT:]
        found = _LISTENING.search(early)
        if found:
            url = found.group(1)
            guard.trip(
                ConnectionClosed(
                    f"the agent `{command_line(command)}` serves HTTP, not stdio (it says "
                    f'"listening on {url}"): connect to it with --url {url}'
                )
            )


def command_line(command: tuple[str, ...] | list[str]) -> str:
    """`command` as one shell-quoted line, for messages."""
    import shlex

    return shlex.join(command)


async def start_agent(
    command: tuple[str, ...], env: dict[str, str] | None
) -> asyncio.subprocess.Process:
    """The agent's process, in a process group of its own; a failure to start it is ours
    to name (not an agent error)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=hasattr(os, "killpg"),
        )
    except OSError as exc:  # not found, not executable: our side, not an agent error
        why = (
            "command not found"
            if isinstance(exc, FileNotFoundError)
            else "permission denied"
            if isinstance(exc, PermissionError)
            else (exc.strerror or type(exc).__name__).lower()
        )
        raise ConnectionClosed(f"cannot start the agent `{command_line(command)}`: {why}") from None
    return proc


async def end_agent(
    proc: asyncio.subprocess.Process, reader: asyncio.Task[Any], grace: float
) -> None:
    """SIGTERM, then SIGKILL, for an agent still running `grace` seconds after its stdin
    closed; the same for whatever it started that still holds its stdout."""
    if await exit_status(proc, grace) is None:
        signal_group(proc, signal.SIGTERM)
        if await exit_status(proc, 2.0) is None:
            signal_group(proc, signal.SIGKILL)
            await exit_status(proc, 2.0)
    if not reader.done():  # the agent exited, something it started holds its stdout
        await asyncio.wait({reader}, timeout=0.5)
        if not reader.done():
            signal_group(proc, signal.SIGTERM)
            await asyncio.wait({reader}, timeout=1.0)
            if not reader.done():
                signal_group(proc, signal.SIGKILL)
