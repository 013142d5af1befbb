"""stdio transport: one JSON-RPC message per line on stdin/stdout.

The real stdout file descriptor is kept for the protocol and `sys.stdout` (and fd 1)
point at stderr, so a stray `print()` in user code cannot corrupt the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any, Protocol

from .jsonrpc import DEFAULT_MAX_MESSAGE_SIZE

_CHUNK = 1 << 20
_PIPE = 1 << 16  # a Linux pipe's capacity
PIPE_BYTES = 1 << 20
"""The buffer asked of Linux for the stdin and stdout pipes (``F_SETPIPE_SZ``; allowed up
to ``/proc/sys/fs/pipe-max-size``, 1 MiB by default): a 4 MB frame crosses in 4 writes and
16 reads instead of 64 and 64, each a pass of the event loop.  Elsewhere: left as it is."""


def widen_pipe(fd: int) -> None:
    """Ask for a ``PIPE_BYTES`` buffer on ``fd`` if it is a pipe (else nothing happens)."""
    try:
        import fcntl  # POSIX only
    except ImportError:
        return
    setsz = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only
    if setsz is not None:
        with contextlib.suppress(OSError):  # not a pipe, or over the system's limit
            fcntl.fcntl(fd, setsz, PIPE_BYTES)


class FrameReceiver(Protocol):
    """What `read_frames` hands lines to: a `Connection`, or a guard in front of one."""

    def feed(self, frame: bytes) -> None: ...

    def too_large(self, size: int) -> None: ...


def claim_stdout() -> int:
    """Return a private fd for the protocol; fd 1 and sys.stdout now go to stderr."""
    sys.stdout.flush()
    proto = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


class _Lines:
    """Splits what is read into lines and hands each to a receiver; an oversized line is
    answered (``too_large``) and skipped.  A line spread over several reads is joined
    once (its pieces are kept, not appended to a growing buffer)."""

    __slots__ = ("conn", "held", "max_size", "parts", "skipping")

    def __init__(self, conn: FrameReceiver, max_size: int) -> None:
        self.conn = conn
        self.max_size = max_size
        self.parts: list[bytes] = []  # the start of the current line
        self.held = 0  # its bytes
        self.skipping = 0  # >0: bytes of an oversized line discarded so far

    def feed(self, chunk: bytes) -> None:
        conn, max_size = self.conn, self.max_size
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                rest = len(chunk) - start
                if self.skipping:
                    self.skipping += rest
                elif self.held + rest > max_size:
                    self.skipping = self.held + rest
                    self._drop()
                elif rest:
                    self.parts.append(chunk[start:] if start else chunk)
                    self.held += rest
                return
            if self.skipping:
                conn.too_large(self.skipping + nl - start)
                self.skipping = 0
            elif self.parts:
                size = self.held + nl - start
                if size > max_size:
                    conn.too_large(size)
                else:
                    self.parts.append(chunk[start:nl])
                    conn.feed(b"".join(self.parts))
                self._drop()
            elif nl - start > max_size:
                conn.too_large(nl - start)
            elif nl > start:
                conn.feed(chunk[start:nl])
            start = nl + 1

    def _drop(self) -> None:
        self.parts = []
        self.held = 0

    def end(self) -> None:
        if self.skipping:
            self.conn.too_large(self.skipping)
        elif self.parts:
            line = b"".join(self.parts)
            if line.strip():
                self.conn.feed(line)


async def read_frames(
    reader: asyncio.StreamReader, conn: FrameReceiver, max_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> None:
    """Feed each line to `conn`; an oversized line is answered and skipped."""
    lines = _Lines(conn, max_size)
    while True:
        chunk = await reader.read(_CHUNK)
        if not chunk:
            break
        lines.feed(chunk)
        await asyncio.sleep(0)
    lines.end()


class _Feeder(asyncio.Protocol):
    """stdin as a pipe: each read goes to the framing at once (no reader task to wake: a
    message is dispatched in the pass of the event loop that reads it)."""

    def __init__(self, lines: _Lines, done: asyncio.Future[None]) -> None:
        self.lines = lines
        self.done = done

    def data_received(self, data: bytes) -> None:
        try:
            self.lines.feed(data)
        except Exception as exc:  # noqa: BLE001 - a receiver's bug ends serving, as a reader task's would
            if not self.done.done():
                self.done.set_exception(exc)

    def eof_received(self) -> bool:
        self._end()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()

    def _end(self) -> None:
        if not self.done.done():
            self.lines.end()
            self.done.set_result(None)


async def feed_stdin(conn: FrameReceiver, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
    """Feed each line of stdin to `conn` until EOF (an oversized line is answered and
    skipped); a regular file or a tty is read in a thread instead of as a pipe."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    lines = _Lines(conn, max_size)
    with contextlib.suppress(AttributeError, ValueError, OSError):  # no file behind it
        widen_pipe(sys.stdin.buffer.fileno())
    try:
        transport, _ = await loop.connect_read_pipe(lambda: _Feeder(lines, done), sys.stdin.buffer)
    except (ValueError, OSError):
        await read_frames(_threaded_stdin(loop), conn, max_size)
        return
    try:
        await done
    finally:
        transport.close()


def _threaded_stdin(loop: asyncio.AbstractEventLoop) -> asyncio.StreamReader:
    """stdin (a regular file or a tty) read in a thread into a StreamReader."""
    reader = asyncio.StreamReader(limit=_CHUNK * 2)
    stdin: Any = sys.stdin.buffer

    def pump() -> None:
        try:
            while data := stdin.read1(_CHUNK):
                loop.call_soon_threadsafe(reader.feed_data, data)
        finally:
            loop.call_soon_threadsafe(reader.feed_eof)

    loop.run_in_executor(None, pump)
    return reader


def _lines(batch: list[tuple[bytes, Any]]) -> bytes:
    """The frames of a batch as one write, each ended by a newline (one copy)."""
    return b"\n".join([*(f for f, _ in batch), b""])


async def open_stdio(
    out_fd: int,
) -> tuple[asyncio.StreamReader, Callable[[list[tuple[bytes, Any]]], Any]]:
    """stdin as a StreamReader (for `read_frames`) and the sink writing to `out_fd`."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_CHUNK * 2)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    except (ValueError, OSError):  # a regular file or tty: read in a thread
        reader = _threaded_stdin(loop)
    return reader, await open_stdout(out_fd)


SinkNow = Callable[[list[tuple[bytes, Any]]], bool]


async def open_stdout(out_fd: int) -> Callable[[list[tuple[bytes, Any]]], Any]:
    """The sink writing batches of frames to `out_fd`, one line each."""
    sink, _ = await open_stdout_now(out_fd)
    return sink


async def open_stdout_now(
    out_fd: int, closers: list[Callable[[], object]] | None = None
) -> tuple[Callable[[list[tuple[bytes, Any]]], Any], SinkNow | None]:
    """The sink writing batches of frames to `out_fd`, one line each, and (on a pipe) the
    same write done at once when the pipe's buffer is empty (``Connection.sink_now``).
    `closers` gets what closes the pipe's writer once the last frame is written (what it
    holds still goes out first): an agent that ends calls it, and leaves no transport
    for the garbage collector to find open (a ResourceWarning)."""
    loop = asyncio.get_running_loop()
    widen_pipe(out_fd)
    out = os.fdopen(out_fd, "wb", buffering=0)
    try:
        wtransport, wproto = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, out)
        writer = asyncio.StreamWriter(wtransport, wproto, None, loop)
        if closers is not None:
            closers.append(writer.close)

        async def sink(batch: list[tuple[bytes, Any]]) -> None:
            if len(batch) == 1 and len(batch[0][0]) > _PIPE:
                # a large frame is not copied to add its newline (it fills the pipe, so
                # the newline joins the transport's buffer: no extra write)
                writer.write(batch[0][0])
                writer.write(b"\n")
            else:
                writer.write(_lines(batch))
            await writer.drain()

        def now(batch: list[tuple[bytes, Any]]) -> bool:
            if wtransport.get_write_buffer_size() or wtransport.is_closing():
                return False  # the writer task waits for room
            wtransport.write(_lines(batch))
            return True

        return sink, now
    except (ValueError, OSError):  # not a pipe: blocking writes in a thread

        async def sink_file(batch: list[tuple[bytes, Any]]) -> None:
            data = _lines(batch)
            await loop.run_in_executor(None, out.write, data)

        return sink_file, None
