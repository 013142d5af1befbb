"""A peer over stdio: a fresh process per check, its stdout read line by line as bytes.

Every line the process writes is a transcript frame before anything parses it; stderr
is recorded too (`err` frames).  Closing follows the transport's shutdown: stdin closed,
then a grace period for the process to exit on its own, then SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from .transcript import Frame, Transcript

LINE_LIMIT = 64 * 1024 * 1024  # one frame: a large prompt's echo, an embedded image


@dataclass
class Ended:
    """How the process ended when the kit closed it."""

    on_its_own: bool  # exited within the grace period after stdin closed
    returncode: int | None
    seconds: float  # from stdin closed to exit


class StdioPeer:
    def __init__(
        self,
        command: list[str],
        transcript: Transcript,
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        grace: float = 2.0,
    ) -> None:
        self.command = command
        self.transcript = transcript
        self.env = env
        self.cwd = cwd
        self.grace = grace
        self.on_frame: Callable[[Frame], None] = lambda frame: None
        self.proc: asyncio.subprocess.Process | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.closed = asyncio.Event()  # stdout reached its end

    async def start(self) -> None:
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env,
                cwd=self.cwd,
                limit=LINE_LIMIT,
                start_new_session=True,
            )
        except OSError as exc:
            raise PeerError(f"cannot start {self.command[0]!r}: {exc.strerror or exc}") from None
        self.transcript.note(f"started pid {self.proc.pid}: {' '.join(self.command)}")
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._read_stdout()), loop.create_task(self._read_stderr())]

    async def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        stream = self.proc.stdout
        try:
            while True:
                try:
                    line = await stream.readline()
                except ValueError:  # a line over LINE_LIMIT: keep what fits, go on
                    line = await stream.read(LINE_LIMIT)
                if not line:
                    break
                if not line.strip():
                    continue
                self.on_frame(self.transcript.add("in", line.rstrip(b"\r\n")))
        finally:
            self.closed.set()

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while True:
            chunk = await self.proc.stderr.read(65536)
            if not chunk:
                return
            self.transcript.add("err", chunk)

    async def send(self, data: bytes) -> None:
        """One frame: `data` and a newline (the kit's own malformed probes included)."""
        assert self.proc is not None and self.proc.stdin is not None
        self.transcript.add("out", data)
        try:
            self.proc.stdin.write(data + b"\n")
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise PeerError("the agent closed its stdin") from None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def close(self) -> Ended:
        proc = self.proc
        if proc is None:
            return Ended(False, None, 0.0)
        start = time.monotonic()
        self.transcript.note("stdin closed")
        with contextlib.suppress(OSError, AttributeError):
            assert proc.stdin is not None
            proc.stdin.close()
        on_its_own = await _wait(proc, self.grace)
        if not on_its_own:
            for sig in ("terminate", "kill"):
                with contextlib.suppress(ProcessLookupError):
                    if sig == "terminate":
                        _signal_group(proc.pid, 15)
                    else:
                        _signal_group(proc.pid, 9)
                if await _wait(proc, self.grace):
                    break
        seconds = time.monotonic() - start
        for task in self._tasks:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(task, 2.0)
        self.transcript.note(f"exited {proc.returncode} after {seconds:.2f}s")
        return Ended(on_its_own, proc.returncode, seconds)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        raise
    except OSError:
        os.kill(pid, sig)


async def _wait(proc: asyncio.subprocess.Process, seconds: float) -> bool:
    try:
        await asyncio.wait_for(proc.wait(), seconds)
    except TimeoutError:
        return False
    return True


class PeerError(Exception):
    """The peer cannot be reached (not started, its pipe closed)."""
