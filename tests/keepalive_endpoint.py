"""A scripted OpenAI Chat Completions endpoint on 127.0.0.1 that keeps connections alive
(HTTP/1.1, chunked streams) and counts them: what a provider (or a gateway) is, as far as
a model client's connection pool can tell.  Optionally over TLS (`tls=(cert, key)`).

An endpoint's `script` plays one entry per request, in order (then `("stream", ["ok"])`):
`("stream", pieces)` a whole stream, `("cut", pieces)` a stream whose connection closes
in the middle of its chunked body (no finish, no terminating chunk), `("status", code,
headers, body)` an error answer (kept alive), `("close", pieces)` a whole stream after
which the server closes the connection without saying so (an idle timeout).

Each request is recorded in `seen` with the peer port of its connection and
its `Authorization` header; `connections` holds each accepted connection's peer
port.  Used by tests/runtime/test_model_clients.py and bench/bench_model_client.py."""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar


class KeepAlive(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script: ClassVar[list[tuple[Any, ...]]] = []
    seen: ClassVar[list[dict[str, Any]]] = []
    connections: ClassVar[list[int]] = []
    lock: ClassVar[threading.Lock] = threading.Lock()
    url: ClassVar[str] = ""

    def log_message(self, *args: Any) -> None:
        return

    def setup(self) -> None:
        super().setup()
        # each SSE event goes out at once, as a provider's server sends it (without this,
        # Nagle holds an event until the client's delayed ACK: ~40 ms a request)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with type(self).lock:
            type(self).connections.append(self.client_address[1])

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        with cls.lock:
            cls.seen.append(
                {
                    "port": self.client_address[1],
                    "path": self.path,
                    "authorization": self.headers.get("Authorization"),
                    "headers": dict(self.headers.items()),
                    "body": body,
                }
            )
            step = cls.script.pop(0) if cls.script else ("stream", ["ok"])
        if step[0] == "status":
            _, code, headers, payload = step
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            return
        kind, pieces = step[0], step[1]
        if not body.get("stream"):  # a request that wants the whole answer at once
            message = {"role": "assistant", "content": "".join(pieces)}
            answer = {
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "gpt-test"),
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
            }
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        base = {"id": "c1", "object": "chat.completion.chunk", "created": 0}
        base["model"] = body.get("model", "gpt-test")
        for piece in pieces:
            delta = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
            self._chunk({**base, "choices": [delta]})
        if kind == "cut":  # the connection ends inside the body
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        end = {"index": 0, "delta": {}, "finish_reason": "stop"}
        usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
        self._chunk({**base, "choices": [end], "usage": usage})
        self._raw(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        if kind == "close":  # the server drops the idle connection without a word
            self.close_connection = True

    def _chunk(self, data: dict[str, Any]) -> None:
        self._raw(b"data: " + json.dumps(data).encode() + b"\n\n")

    def _raw(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


@contextmanager
def keepalive_endpoint(
    *script: tuple[Any, ...], tls: tuple[str, str] | None = None
) -> Iterator[type[KeepAlive]]:
    """Serve `script` (see KeepAlive) on 127.0.0.1; yields the endpoint's own handler
    class: its `url` (`.../v1`), `seen`, `connections`, `script`."""
    handler: type[KeepAlive] = type(
        "Endpoint",
        (KeepAlive,),
        {"script": list(script), "seen": [], "connections": [], "lock": threading.Lock()},
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    scheme = "http"
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        handler.url = f"{scheme}://127.0.0.1:{server.server_address[1]}/v1"
        yield handler
    finally:
        server.shutdown()
        server.server_close()
