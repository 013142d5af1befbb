"""stdio transport: one JSON-RPC message per line on stdin/stdout.

The real stdout file descriptor is kept for the protocol and `sys.stdout` (and fd 1)
point at stderr, so a stray `print()` in user code cannot corrupt the stream.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import Any, Protocol

from .jsonrpc import DEFAULT_MAX_MESSAGE_SIZE

_CHUNK = 1 << 20
_PIPE = 1 << 16  # a Linux pipe's capacity


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


async def read_frames(
    reader: asyncio.StreamReader, conn: FrameReceiver, max_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> None:
    """Feed each line to `conn`; an oversized line is answered and skipped."""
    buf = bytearray()
    skipping = 0  # >0: bytes of an oversized line discarded so far
    while True:
        chunk = await reader.read(_CHUNK)
        if not chunk:
            break
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                rest = len(chunk) - start
                if skipping:
                    skipping += rest
                elif len(buf) + rest > max_size:
                    skipping = len(buf) + rest
                    buf.clear()
                else:
                    buf += chunk[start:]
                break
            if skipping:
                conn.too_large(skipping + nl - start)
                skipping = 0
            elif buf:
                size = len(buf) + nl - start
                if size > max_size:
                    conn.too_large(size)
                else:
                    buf += chunk[start:nl]
                    conn.feed(bytes(buf))
                buf.clear()
            elif nl - start > max_size:
                conn.too_large(nl - start)
            elif nl > start:
                conn.feed(chunk[start:nl])
            start = nl + 1
        await asyncio.sleep(0)
    if skipping:
        conn.too_large(skipping)
    elif buf.strip():
        conn.feed(bytes(buf))


def _lines(batch: list[tuple[bytes, Any]]) -> bytes:
    """The frames of a batch as one write, each ended by a newline (one copy)."""
    return b"\n".join([*(f for f, _ in batch), b""])


async def open_stdio(
    out_fd: int,
) -> tuple[asyncio.StreamReader, Callable[[list[tuple[bytes, Any]]], Any]]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_CHUNK * 2)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    except (ValueError, OSError):  # a regular file or tty: read in a thread
        stdin: Any = sys.stdin.buffer

        def pump() -> None:
            try:
                while data := stdin.read1(_CHUNK):
                    loop.call_soon_threadsafe(reader.feed_data, data)
            finally:
                loop.call_soon_threadsafe(reader.feed_eof)

        loop.run_in_executor(None, pump)

    out = os.fdopen(out_fd, "wb", buffering=0)
    try:
        wtransport, wproto = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, out)
        writer = asyncio.StreamWriter(wtransport, wproto, None, loop)

        async def sink(batch: list[tuple[bytes, Any]]) -> None:
            if len(batch) == 1 and len(batch[0][0]) > _PIPE:
                # a large frame is not copied to add its newline (it fills the pipe, so
                # the newline joins the transport's buffer: no extra write)
                writer.write(batch[0][0])
                writer.write(b"\n")
            else:
                writer.write(_lines(batch))
            await writer.drain()

    except (ValueError, OSError):  # not a pipe: blocking writes in a thread

        async def sink(batch: list[tuple[bytes, Any]]) -> None:
            data = _lines(batch)
            await loop.run_in_executor(None, out.write, data)

    return reader, sink
