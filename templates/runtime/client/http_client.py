"""ACP remote transport, client side: Streamable HTTP (POST + SSE) or WebSocket, on httpx.

Usage from a generated client (``--transport http``)::

    async with connect_http(MyClient(), AgentConnection, "http://127.0.0.1:8000/acp",
                            headers={"Authorization": "Bearer ..."}) as agent:
        await agent.initialize(...)          # typed methods of the generated proxy
    # or websocket=True (ws:// URL derived from the http:// one)

The runtime's client-side ``Connection`` (requests, notifications, ordering) runs over
this transport exactly as over stdio; ``run_http_client(client_cls, proxy_cls, url)``
is the console-script REPL.

Wire behaviour (same as the official SDK's client): ``initialize`` is POSTed first and
must answer 200 with ``Acp-Connection-Id``; its body is the response.  Then the
connection-scoped SSE stream is opened; each ``sessionId`` seen in a message opens that
session's stream.  Every other message is POSTed (202) with ``Acp-Connection-Id``, plus
``Acp-Session-Id`` for session-scoped methods.  A POST the server refuses (non-2xx)
makes its request fail at once with a JSON-RPC error (``data.status`` carries the HTTP
status; on 429/503 ``data.transient`` and ``data.retry_after`` from ``Retry-After``),
instead of hanging.  A failure on this side (connect, DNS, TLS) is no JSON-RPC error:
it ends the connection with ``cannot connect to URL: connection refused``.  ``close``
DELETEs the connection.

Reconnect: an SSE stream that drops is re-opened with exponential backoff, with
``Last-Event-ID`` set to the last event id received on it, so the server resends what
the dropped socket may have swallowed (our server keeps a replay window per stream).  When the server no longer
knows the connection (404, e.g. it restarted), or the retries run out, the connection
ends: pending requests fail with "connection closed".  Connect again and call
``session/load`` (history replayed) or ``session/resume`` to continue the session; the
agent's session store makes that work across restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable
from email.utils import parsedate_to_datetime
from http.cookiejar import CookieJar
from typing import Any

import httpx
import orjson

from ..wire.errors import ConnectionClosed
from ..wire.http_wire import CONNECTION_ID_HEADER, SESSION_ID_HEADER, SESSION_SCOPED
from ..wire.jsonrpc import DEFAULT_MAX_MESSAGE_SIZE, Connection
from ..wire.routes import session_scoped
from .client import ClientRuntime, P

log = logging.getLogger("acp.runtime.http_client")

LOST = "the connection to the agent was lost"
_SID = re.compile(rb'"sessionId"\s*:\s*"((?:[^"\\]|\\.)*)"')


def _http_client(
    http2: bool, *, prior_knowledge: bool, cookies: CookieJar | None = None
) -> httpx.AsyncClient:
    """h2 prior knowledge means no HTTP/1.1 at all on that client (httpx's rule).
    ``cookies``: a jar shared with the connection's other clients (httpx keeps a
    CookieJar it is given as it is, not a copy)."""
    return httpx.AsyncClient(
        http1=not prior_knowledge,
        http2=http2,
        timeout=httpx.Timeout(30.0, read=None),
        cookies=cookies,
    )


class HttpTransport:
    def __init__(
        self,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        http: httpx.AsyncClient | None = None,
        retries: int = 5,
        base_delay: float = 0.2,
        http2: bool = True,
        scoped: Callable[[str], bool] | None = None,
    ) -> None:
        self.url = url
        self.headers = dict(headers or {})
        # which requests carry ``Acp-Session-Id``: the agent's routes in the revision the
        # client speaks (connect_http), else the transport's list
        self.scoped = scoped or SESSION_SCOPED.__contains__
        self._owns = http is None
        # HTTP/2: by ALPN over https; over cleartext with prior knowledge (h2c), falling back
        # to HTTP/1.1 once if the server does not speak it.  One client (cookie jar included:
        # the server's affinity cookie) per ACP connection.
        self._http2 = http is None and http2  # ours to configure, and HTTP/2 asked for
        self._h2c = self._http2 and url.startswith("http://")
        self.http = http or _http_client(http2, prior_knowledge=self._h2c)
        # HTTP/2: each long-lived SSE stream reads on a connection of its own (see
        # ``_reader``), sharing this client's cookie jar
        self._readers: dict[str | None, httpx.AsyncClient] = {}
        self.retries = retries
        self.base_delay = base_delay
        self.connection_id: str | None = None
        self.conn: Connection | None = None
        self._streams: dict[str | None, asyncio.Task[None]] = {}
        self._last_id: dict[str | None, bytes] = {}
        self._closed = False
        self._posting: asyncio.Task[Any] | None = None

    # ---- sending (the Connection's sink) -------------------------------------------
    async def sink(self, batch: list[tuple[bytes, str | None]]) -> None:
        # the task posting: `close` ends it when a server never answers a POST
        self._posting = asyncio.current_task()
        try:
            for frame, sid in batch:
                await self._post(frame, sid)
        finally:
            self._posting = None

    def _fail(
        self, rid: Any, message: str, status: int | None, response: httpx.Response | None = None
    ) -> None:
        if rid is None or self.conn is None:
            return
        err: dict[str, Any] = {"code": -32603, "message": message}
        if status is not None:
            data: dict[str, Any] = {"status": status}
            if status in (429, 503):  # the server asks to come back later
                data["transient"] = True
                wait = _retry_after(response.headers.get("Retry-After") if response else None)
                if wait is not None:
                    data["retry_after"] = wait
            err["data"] = data
        self.conn.feed(orjson.dumps({"jsonrpc": "2.0", "id": rid, "error": err}))

    def _refuse_batch(self, batch: list[Any]) -> None:
        for entry in batch:
            rid = entry.get("id") if type(entry) is dict else None
            self._fail(rid, "JSON-RPC batches are not supported over HTTP (501)", 501)

    def _too_large(self, frame: bytes, rid: Any) -> bool:
        """A message over the size limit is refused here: the agent would answer 413, and
        httpx, which writes the whole body first, might see only a reset."""
        limit = self.conn.max_message_size if self.conn is not None else None
        if limit is None or len(frame) <= limit:
            return False
        if rid is not None and self.conn is not None:
            err = {
                "code": -32600,
                "message": f"message too large ({len(frame)} bytes; the limit is {limit})",
                "data": {"size": len(frame), "limit": limit},
            }
            self.conn.feed(orjson.dumps({"jsonrpc": "2.0", "id": rid, "error": err}))
        return True

    def _unreachable(self, exc: httpx.HTTPError) -> None:
        """A failure on this side of the wire: the connection ends, saying why."""
        if self.conn is not None:
            reason = ConnectionClosed(f"cannot connect to {self.url}: {_why(exc)}")
            asyncio.get_running_loop().create_task(self.conn.close_with(reason))

    async def _post(self, frame: bytes, sid: str | None) -> None:
        msg = orjson.loads(frame)
        if type(msg) is list:  # a JSON-RPC batch: the HTTP transport refuses it (501)
            self._refuse_batch(msg)
            return
        method = msg.get("method")
        rid = msg.get("id") if method is not None else None
        if self._too_large(frame, rid):
            return
        headers = {**self.headers, "Content-Type": "application/json"}
        initialize = method == "initialize" and rid is not None
        if not initialize:
            if self.connection_id is None:
                self._fail(rid, "not connected: send initialize first", None)
                return
            headers[CONNECTION_ID_HEADER] = self.connection_id
            if sid is not None and self.scoped(method):
                headers[SESSION_ID_HEADER] = sid
        try:
            r = await self._send_post(frame, headers, initialize)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol) as exc:
            self._unreachable(exc)
            return
        except httpx.HTTPError as exc:
            self._fail(rid, f"HTTP request failed: {type(exc).__name__}", None)
            return
        if initialize:
            self._initialized(rid, r)
            return
        if r.status_code == httpx.codes.OK and r.content:
            assert self.conn is not None
            self.conn.feed(r.content)
        elif r.status_code not in (200, 202):
            self._fail(
                rid, f"{method or 'message'} refused: HTTP {r.status_code}", r.status_code, r
            )

    async def _send_post(
        self, frame: bytes, headers: dict[str, str], initialize: bool
    ) -> httpx.Response:
        try:
            return await self.http.post(self.url, content=frame, headers=headers)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            if not (initialize and self._h2c):
                raise
        # the server does not speak h2c: the same POST again over HTTP/1.1
        log.info("%s does not speak HTTP/2 in cleartext; using HTTP/1.1", self.url)
        self._h2c = False
        self._http2 = False
        await self.http.aclose()
        self.http = _http_client(False, prior_knowledge=False)
        return await self.http.post(self.url, content=frame, headers=headers)

    def _initialized(self, rid: Any, r: httpx.Response) -> None:
        """initialize's answer: the connection id, its stream opened, the body fed."""
        cid = r.headers.get(CONNECTION_ID_HEADER)
        if r.status_code != httpx.codes.OK or not cid:
            self._fail(rid, f"initialize refused: HTTP {r.status_code}", r.status_code, r)
            return
        self.connection_id = cid
        self._open(None)
        assert self.conn is not None
        self.conn.feed(r.content)

    # ---- receiving -----------------------------------------------------------------
    def _reader(self, sid: str | None) -> httpx.AsyncClient:
        """The client a stream's GET goes on.  Over HTTP/2, httpcore reads a connection
        behind one lock that a reader holds through a blocking network read: an idle
        stream (the connection's stream waits for minutes) would hold it while frames it
        already read for another stream wait, undelivered, for the next frame on the
        wire (seen as 15 s stalls: the server's SSE keepalive).  So each stream of an
        ACP connection gets an HTTP/2 connection of its own, all with one cookie jar."""
        if not self._http2:
            return self.http
        client = self._readers.get(sid)
        if client is None:
            client = self._readers[sid] = _http_client(
                True, prior_knowledge=self._h2c, cookies=self.http.cookies.jar
            )
        return client

    def _open(self, sid: str | None) -> None:
        if self._closed or sid in self._streams:
            return
        self._streams[sid] = asyncio.get_running_loop().create_task(self._stream(sid))

    async def _stream(self, sid: str | None) -> None:
        failures = 0
        while not self._closed and self.connection_id is not None:
            headers = {
                **self.headers,
                "Accept": "text/event-stream",
                CONNECTION_ID_HEADER: self.connection_id,
            }
            if sid is not None:
                headers[SESSION_ID_HEADER] = sid
            last = self._last_id.get(sid)
            if last is not None:
                headers["Last-Event-ID"] = last.decode("ascii", "replace")
            status = None
            try:
                async with self._reader(sid).stream("GET", self.url, headers=headers) as r:
                    status = r.status_code
                    if status == httpx.codes.OK:
                        failures = 0
                        await self._read_sse(r, sid)
            except httpx.HTTPError:
                pass
            if self._closed:
                return
            if status in (401, 403, 404):
                break  # the server does not know (or accept) this connection any more
            failures += 1
            if failures > self.retries:
                break
            await asyncio.sleep(self.base_delay * 2 ** (failures - 1))
        if sid is None and not self._closed and self.conn is not None:
            log.warning("connection-scoped stream lost; the connection ends")
            asyncio.get_running_loop().create_task(self.conn.close_with(ConnectionClosed(LOST)))
        self._streams.pop(sid, None)
        reader = self._readers.pop(sid, None)
        if reader is not None:
            with contextlib.suppress(httpx.HTTPError):
                await reader.aclose()

    async def _read_sse(self, r: httpx.Response, sid: str | None) -> None:
        assert self.conn is not None
        buf = b""
        data: list[bytes] = []
        event_id = b""
        async for chunk in r.aiter_bytes():
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                line = buf[:nl].rstrip(b"\r")
                buf = buf[nl + 1 :]
                if line:
                    if line.startswith(b"data:"):
                        v = line[5:]
                        data.append(v[1:] if v.startswith(b" ") else v)
                    elif line.startswith(b"id:"):
                        event_id = line[3:].strip()
                    continue
                if data:
                    payload = b"\n".join(data)
                    data = []
                    m = _SID.search(payload)
                    if m is not None:
                        found = m.group(1).decode()
                        if found not in self._streams:
                            self._open(found)
                    if event_id:
                        self._last_id[sid] = event_id
                        event_id = b""
                    self.conn.feed(payload)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._posting is not None and self._posting is not asyncio.current_task():
            self._posting.cancel()
        for t in self._streams.values():
            t.cancel()
        for t in list(self._streams.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self.connection_id is not None:
            with contextlib.suppress(httpx.HTTPError):
                await self.http.delete(
                    self.url, headers={**self.headers, CONNECTION_ID_HEADER: self.connection_id}
                )
        if self._owns:
            await self.http.aclose()
        for reader in self._readers.values():
            with contextlib.suppress(httpx.HTTPError):
                await reader.aclose()


def _retry_after(value: str | None) -> float | None:
    """An HTTP `Retry-After` (seconds, or an HTTP date) as seconds from now."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _why(exc: BaseException) -> str:
    """Why a connection could not be made, in a user's words."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return "unknown host"
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"TLS certificate not trusted ({seen.verify_message})"
        if isinstance(seen, ssl.SSLError):
            return f"TLS handshake failed ({seen.reason or seen})"
        if isinstance(seen, (TimeoutError, httpx.TimeoutException)):
            return "timed out"
        seen = seen.__cause__ or seen.__context__
    text = " ".join(str(exc).split())
    low = text.lower()
    if "refused" in low:
        return "connection refused"
    if "name or service not known" in low or "nodename nor servname" in low:
        return "unknown host"
    return text or type(exc).__name__


class WebSocketTransport:
    def __init__(self, url: str, *, headers: dict[str, str] | None = None) -> None:
        if url.startswith("http"):
            url = "ws" + url[4:]
        self.url = url
        self.headers = dict(headers or {})
        self.ws: Any = None
        self.connection_id: str | None = None
        self.conn: Connection | None = None
        self._reader: asyncio.Task[None] | None = None

    async def open(self) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake

        try:
            self.ws = await connect(
                self.url, additional_headers=self.headers or None, max_size=None
            )
        except (OSError, InvalidHandshake) as exc:
            raise ConnectionClosed(f"cannot connect to {self.url}: {_why(exc)}") from None
        self.connection_id = self.ws.response.headers.get(CONNECTION_ID_HEADER)

    async def sink(self, batch: list[tuple[bytes, str | None]]) -> None:
        for frame, _sid in batch:
            await self.ws.send(frame.decode())

    def start(self) -> None:
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        import websockets

        assert self.conn is not None
        try:
            async for message in self.ws:
                if isinstance(message, str):
                    self.conn.feed(message.encode())
        except websockets.ConnectionClosed:
            pass
        asyncio.get_running_loop().create_task(self.conn.close_with(ConnectionClosed(LOST)))

    async def close(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader


@contextlib.asynccontextmanager
async def connect_http(
    client: ClientRuntime,
    proxy_cls: type[P],
    url: str,
    *,
    headers: dict[str, str] | None = None,
    websocket: bool = False,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    http2: bool = True,
) -> AsyncIterator[P]:
    """Connect to an ACP agent at ``url`` (``.../acp``); yield the typed proxy.

    ``http2``: over https, offer HTTP/2 by ALPN; over http, HTTP/2 with prior knowledge (h2c),
    HTTP/1.1 when the server does not speak it.  False: HTTP/1.1 only."""
    transport: HttpTransport | WebSocketTransport
    if websocket:
        transport = WebSocketTransport(url, headers=headers)
        await transport.open()
    else:
        transport = HttpTransport(
            url, headers=headers, http2=http2, scoped=_scoped(client, proxy_cls)
        )
    conn = Connection(
        transport.sink,
        client.handle_request,
        client.handle_notification,
        max_message_size=max_message_size,
    )
    transport.conn = conn
    client.connection = conn
    if isinstance(transport, WebSocketTransport):
        transport.start()
    try:
        yield proxy_cls(conn)
    finally:
        # a POST that never answers (a server that accepts and hangs) holds the writer
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(conn.flush(), 2.0)
        await transport.close()
        await conn.close()


def _scoped(client: ClientRuntime, proxy_cls: type[Any]) -> Callable[[str], bool]:
    """Whether the agent's route of a method acts on an open session (the revision the
    client negotiated, else the first of its revisions that has the method)."""

    def scoped(method: str) -> bool:
        revisions = (client.revision,) if client.revision is not None else proxy_cls.REVISIONS
        for rev in revisions:
            entry = rev.side("agent").get(method)
            if entry is not None:
                return session_scoped(entry)
        return not revisions and method in SESSION_SCOPED

    return scoped


def manifest_headers(client_cls: type[Any]) -> dict[str, str]:
    """The HTTP auth headers the agent's manifest asks for, the credential read from the
    environment variable it names (e.g. `RESEARCH_AGENT_TOKEN`)."""
    from ..wire.auth import client_headers

    return client_headers(list(getattr(client_cls, "_acp_manifest", {}).get("auth") or ()))
