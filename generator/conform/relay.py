"""`python -m agentgen.conform.relay PORT`: the agent command a client under test starts.

`agentgen conform client` replaces `{agent}` in the client's command with this: it
connects to the kit on 127.0.0.1:PORT and copies its stdin to the kit and the kit's
bytes to its stdout, so the client speaks stdio to what it thinks is an agent process.
Standard library only: it starts in a few milliseconds.  It ignores SIGINT: the kit's
interrupt (a user's Ctrl-C, sent to the client's whole process group) is for the client.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        print("usage: python -m agentgen.conform.relay PORT", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.create_connection(("127.0.0.1", int(args[0])))

    def upstream() -> None:
        stdin = sys.stdin.buffer
        while True:
            chunk = stdin.read1(65536)  # type: ignore[union-attr]
            if not chunk:
                break
            sock.sendall(chunk)
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=upstream, daemon=True).start()
    out = sys.stdout.buffer
    while True:
        data = sock.recv(65536)
        if not data:
            return 0
        out.write(data)
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
