"""Peers over the Streamable HTTP and WebSocket transport (docs/rfds/streamable-http-
websocket-transport.mdx): the kit's client side written on raw requests and frames.

HTTP: `initialize` is POSTed without `Acp-Connection-Id` and answered 200 with JSON and
that header; then the connection-scoped SSE stream is opened (GET, the header alone),
every other message is POSTed with it (and `Acp-Session-Id` for a method of a session,
as the revision's method table scopes it), and each session the agent names gets its
session-scoped stream.  HTTP/2 is tried first (h2c prior knowledge over cleartext, ALPN
over TLS), HTTP/1.1 after.  Cookies the agent sets are kept and returned.  Every request
is an `Exchange` (method, status, headers, HTTP version) for the HTTP requirements, and
every body and SSE event a transcript frame.

WebSocket: one upgrade per connection, text frames both ways, the upgrade's headers and
the close recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..protocol import runtime_revision as rv
from .transcript import Frame, Transcript

CONNECTION = "Acp-Connection-Id"
SESSION = "Acp-Session-Id"


@dataclass
class Exchange:
    """One HTTP request the kit made and what came back."""

    method: str  # GET | POST | DELETE | UPGRADE
    what: str  # the JSON-RPC method or response it carried, or the stream
    status: int
    headers: dict[str, str]
    http_version: str
    body: bytes = b""
    sent_headers: dict[str, str] = field(default_factory=dict)


@dataclass
class HttpEnded:
    on_its_own: bool | None = None
    seconds: float = 0.0
    status: int | None = None  # DELETE's


class HttpPeer:
    def __init__(
        self,
        url: str,
        transcript: Transcript,
        revision: rv.Revision,
        *,
        timeout: float = 10.0,
        http2: bool = False,
    ) -> None:
        self.url = url
        self.transcript = transcript
        self.revision = revision
        self.timeout = timeout
        self.http2 = http2
        self.on_frame: Any = lambda frame: None
        self.client: Any = None
        self.connection: str | None = None
        self.exchanges: list[Exchange] = []
        self.streams: dict[str, asyncio.Task[None]] = {}  # "conn" | session id -> reader
        self.readers: list[Any] = []  # the streams' clients
        self.stream_problems: list[str] = []
        self.cookies_set: list[str] = []
        self._agent_requests: dict[Any, str] = {}  # an agent request's id -> its stream
        self._opening: dict[Any, str] = {}  # the kit's load/resume id -> the session
        self.on_reject: Any = lambda rid, frame: None  # a POST refused by the transport
        self._closed = False

    async def start(self) -> None:
        self.client = self._new_client()

    def _new_client(self, cookies: Any = None) -> Any:
        """An HTTP client: h2c prior knowledge over cleartext when HTTP/2 is tried.  Each
        SSE stream reads on a client of its own (one cookie jar for all): over HTTP/2
        httpcore reads a connection behind one lock, which an idle stream's blocking
        read would hold while another stream's frames wait."""
        import httpx

        h2c = self.http2 and self.url.startswith("http://")
        return httpx.AsyncClient(
            http1=not h2c, http2=self.http2, timeout=self.timeout, cookies=cookies
        )

    def alive(self) -> bool:
        return not self._closed

    # ---- sending ------------------------------------------------------------------------------
    def _session_of(self, msg: Any) -> tuple[str | None, str | None]:
        """(the session whose header a message carries, the session it opens): a method
        that uses or closes a session carries `Acp-Session-Id` (prompt, cancel, ...); one
        that opens it (load, resume) carries none and its stream opens after its answer;
        an answer to the agent carries the session of the stream the request came on."""
        if type(msg) is not dict:
            return None, None
        if "method" in msg:
            entry = self.revision.side("agent").get(str(msg["method"]))
            params = msg.get("params")
            sid = params.get("sessionId") if type(params) is dict else None
            if entry is None or entry.scope != "session" or type(sid) is not str:
                return None, None
            if entry.effect == "opens":
                return None, sid
            return (sid, None) if entry.effect in ("uses", "closes") else (None, None)
        stream = self._agent_requests.get(msg.get("id"))
        return (stream if stream not in (None, "conn") else None), None

    async def send(self, data: bytes) -> None:
        self.transcript.add("out", data, "post")
        try:
            msg = orjson.loads(data)
        except orjson.JSONDecodeError:
            msg = None
        what = str(msg.get("method") or "response") if type(msg) is dict else "raw"
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if self.connection is not None:
            headers[CONNECTION] = self.connection
        sid, opens = self._session_of(msg)
        if sid is not None:
            headers[SESSION] = sid
        if opens is not None and type(msg) is dict:
            self._opening[msg.get("id")] = opens
        await self._post(what, data, headers, msg)

    async def _post(self, what: str, data: bytes, headers: dict[str, str], msg: Any) -> None:
        import httpx

        try:
            response = await self.client.post(self.url, content=data, headers=headers)
        except httpx.RemoteProtocolError:
            if self.connection is None and self.http2 and self.url.startswith("http://"):
                # no h2c: HTTP/1.1 from here on
                await self.client.aclose()
                self.http2 = False
                self.client = self._new_client()
                self.transcript.note("h2c refused: HTTP/1.1")
                response = await self.client.post(self.url, content=data, headers=headers)
            else:
                raise
        self._record("POST", what, response, headers)
        body = response.content
        self.transcript.note(f"POST {what} -> {response.status_code} ({response.http_version})")
        if what == "initialize" and self.connection is None and response.status_code == 200:  # noqa: PLR2004
            self.connection = response.headers.get(CONNECTION)
            if self.connection:
                await self.open_stream("conn")
        if not body.strip():
            return
        if response.status_code >= 300 and what != "initialize":  # noqa: PLR2004
            # refused by the transport: the message never reached the agent
            frame = self.transcript.add("in", body.strip(), "post-status")
            self.on_reject(msg.get("id") if type(msg) is dict else None, frame)
            return
        self.on_frame(self.transcript.add("in", body.strip(), "post"))

    def _record(self, method: str, what: str, response: Any, sent: dict[str, str]) -> None:
        headers = {k.lower(): v for k, v in response.headers.items()}
        for value in response.headers.get_list("set-cookie"):
            self.cookies_set.append(value.split(";", 1)[0])
        self.exchanges.append(
            Exchange(
                method,
                what,
                response.status_code,
                headers,
                response.http_version,
                b"" if method == "GET" or what == "raw" else response.content,
                dict(sent),
            )
        )

    # ---- the SSE streams ---------------------------------------------------------------------
    async def open_stream(self, key: str) -> None:
        """Open the connection-scoped stream (`conn`) or a session's, and read it."""
        if key in self.streams or self.connection is None:
            return
        headers = {"Accept": "text/event-stream", CONNECTION: self.connection}
        if key != "conn":
            headers[SESSION] = key
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.streams[key] = asyncio.get_running_loop().create_task(
            self._read_stream(key, headers, opened)
        )
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(opened), self.timeout)

    async def _read_stream(
        self, key: str, headers: dict[str, str], opened: asyncio.Future[None]
    ) -> None:
        channel = f"sse:{key}"
        try:
            async with self.client.stream(
                "GET", self.url, headers=headers, timeout=None
            ) as response:
                self._record("GET", channel, response, headers)
                self.transcript.note(
                    f"GET {channel} -> {response.status_code} ({response.http_version})"
                )
                if not opened.done():
                    opened.set_result(None)
                if response.status_code != 200:  # noqa: PLR2004
                    return
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    self.stream_problems.append(
                        f"{channel}: Content-Type {response.headers.get('content-type')!r}"
                    )
                await self._events(response, channel)
        except Exception as exc:  # noqa: BLE001 - a stream that breaks is recorded, not raised
            if not self._closed:
                self.transcript.note(f"{channel} ended: {type(exc).__name__}: {exc}")
        finally:
            if not opened.done():
                opened.set_result(None)

    async def _events(self, response: Any, channel: str) -> None:
        data: list[str] = []
        async for line in response.aiter_lines():
            if line == "":
                if data:
                    self._event("\n".join(data), channel)
                    data = []
                continue
            field_name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field_name == "data":
                data.append(value)
            elif field_name not in ("", "event", "id", "retry"):
                self.stream_problems.append(f"{channel}: not an SSE field: {line[:80]!r}")

    def _event(self, text: str, channel: str) -> None:
        frame = self.transcript.add("in", text.encode(), channel)
        msg = frame.message()
        if type(msg) is dict and "method" in msg and "id" in msg:
            self._agent_requests[msg["id"]] = channel.removeprefix("sse:")
        self.on_frame(frame)
        if type(msg) is dict and "method" not in msg and channel == "sse:conn":
            result = msg.get("result")
            sid = result.get("sessionId") if type(result) is dict else None
            sid = self._opening.pop(msg.get("id"), None) or sid
            if type(sid) is str and sid not in self.streams and type(result) is dict:
                asyncio.get_running_loop().create_task(self.open_stream(sid))

    # ---- raw requests, for the HTTP checks ---------------------------------------------------------
    async def raw(self, method: str, headers: dict[str, str], body: bytes = b"") -> Exchange:
        import httpx

        # a client of its own, HTTP/1.1: these rules are about status codes, and a
        # stream a GET may open is left at its headers
        jar = self.client.cookies.jar
        async with (
            httpx.AsyncClient(timeout=self.timeout, cookies=jar) as one,
            one.stream(method, self.url, content=body or None, headers=headers) as response,
        ):
            pass
        self._record(method, "raw", response, headers)
        self.transcript.note(f"{method} (raw) {sorted(headers)} -> {response.status_code}")
        return self.exchanges[-1]

    async def http2_version(self) -> str:
        """The HTTP version one request gets when HTTP/2 is offered (h2c prior knowledge
        over cleartext, ALPN over TLS); the error when none answers."""
        import httpx

        h2c = self.url.startswith("http://")
        try:
            async with (
                httpx.AsyncClient(http1=not h2c, http2=True, timeout=self.timeout) as one,
                one.stream("GET", self.url, headers={"Accept": "text/event-stream"}) as r,
            ):
                return str(r.http_version)
        except httpx.HTTPError as exc:
            return f"no HTTP/2 ({type(exc).__name__})"

    async def close(self) -> HttpEnded:
        start = time.monotonic()
        status = None
        if self.connection is not None and self.client is not None:
            with contextlib.suppress(Exception):
                response = await self.client.delete(self.url, headers={CONNECTION: self.connection})
                self._record("DELETE", "connection", response, {CONNECTION: self.connection})
                status = response.status_code
                self.transcript.note(f"DELETE -> {status}")
        self._closed = True
        for task in self.streams.values():
            task.cancel()
        for task in self.streams.values():
            with contextlib.suppress(BaseException):
                await task
        for client in [*self.readers, self.client]:
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.aclose()
        return HttpEnded(None, time.monotonic() - start, status)


class WsPeer:
    """One WebSocket connection: text frames both ways."""

    def __init__(self, url: str, transcript: Transcript, *, timeout: float = 10.0) -> None:
        self.url = url
        self.transcript = transcript
        self.timeout = timeout
        self.on_frame: Any = lambda frame: None
        self.ws: Any = None
        self.upgrade: Exchange | None = None
        self.binary: list[bytes] = []
        self.close_code: int | None = None
        self._reader: asyncio.Task[None] | None = None
        self._closed = False

    async def start(self) -> None:
        from websockets.asyncio.client import connect

        self.ws = await connect(
            self.url, open_timeout=self.timeout, max_size=None, ping_interval=None
        )
        response = self.ws.response
        headers = {k.lower(): v for k, v in response.headers.raw_items()}
        self.upgrade = Exchange("UPGRADE", "ws", response.status_code, headers, "1.1")
        self.transcript.note(f"UPGRADE -> {response.status_code}")
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                if isinstance(message, bytes):
                    self.binary.append(message)
                    frame: Frame = self.transcript.add("in", message, "ws-binary")
                else:
                    frame = self.transcript.add("in", message.encode(), "ws")
                self.on_frame(frame)
        except Exception as exc:  # noqa: BLE001 - recorded
            self.transcript.note(f"ws ended: {type(exc).__name__}")
        finally:
            self._closed = True

    def alive(self) -> bool:
        return not self._closed

    async def send(self, data: bytes) -> None:
        self.transcript.add("out", data, "ws")
        await self.ws.send(data.decode("utf-8", "replace"))

    async def ping(self) -> float | None:
        """Seconds to the pong, None when none came."""
        start = time.monotonic()
        try:
            waiter = await self.ws.ping()
            await asyncio.wait_for(waiter, self.timeout)
        except Exception:  # noqa: BLE001
            return None
        return time.monotonic() - start

    async def close(self) -> HttpEnded:
        start = time.monotonic()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), self.timeout)
        self.close_code = getattr(self.ws, "close_code", None)
        self.transcript.note(f"close -> {self.close_code}")
        self._closed = True
        if self._reader is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._reader, 2.0)
        return HttpEnded(None, time.monotonic() - start, self.close_code)
