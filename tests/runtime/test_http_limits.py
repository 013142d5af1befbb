"""Limits of the HTTP transport.

* Slow and vanished SSE readers: memory stays bounded (backpressure, then the connection
  ends after the stall timeout), and a stream closed mid-way loses nothing: the next GET
  of the same stream (with Last-Event-ID) gets the rest, and the turn still completes.
* The server-level limits (``server_config``: Hypercorn's settings, what ``serve_http`` runs): sockets
  trickling their headers are closed after the header timeout, a flood of connections
  stops at ``max_connections``, sessions per connection at ``max_sessions``, WebSocket
  frames up to the message limit are read (one over it gets an error and the socket
  lives on); a normal client is served within a second meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from runtime.http.http_launch import server_config
from runtime.http.http_server import create_app
from test_http_transport import echo_factory, free_port, running_server


@contextlib.contextmanager
def limited_server(
    app: Any,
    *,
    header_timeout: float = 10.0,
    keep_alive: float = 5.0,
    max_message_size: int = 50 * 1024 * 1024,
) -> Iterator[str]:
    """The app under Hypercorn with the production ``server_config`` (what ``serve_http``
    runs), in a thread of this process."""
    from hypercorn.asyncio import serve

    port = free_port()
    config = server_config(
        "127.0.0.1",
        port,
        header_timeout=header_timeout,
        keep_alive=keep_alive,
        max_message_size=max_message_size,
    )
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(serve(app, config, shutdown_trigger=stop.wait))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)  # a poll: hypercorn's serve() gives no notice that it listens
    try:
        yield f"127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(stop.set)
        t.join(10)


def _init(c: httpx.Client, url: str) -> tuple[str, str]:
    r = c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    cid = r.headers["Acp-Connection-Id"]
    h = {"Acp-Connection-Id": cid}
    assert (
        c.post(
            url, json={"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {}}, headers=h
        ).status_code
        == 202
    )
    with c.stream("GET", url, headers={**h, "Accept": "text/event-stream"}) as s:
        for line in s.iter_lines():
            if line.startswith("data:") and '"sessionId"' in line:
                return cid, line.split('"sessionId":"')[1].split('"')[0]
    raise AssertionError("no session")


def _prompt(c: httpx.Client, url: str, cid: str, sid: str, n: int, rid: int) -> None:
    blocks = [{"type": "text", "text": f"m{i:05d}" + "x" * 200} for i in range(n)]
    r = c.post(
        url,
        json={
            "jsonrpc": "2.0",
            "id": rid,
            "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": blocks},
        },
        headers={"Acp-Connection-Id": cid, "Acp-Session-Id": sid},
    )
    assert r.status_code == 202


def test_unread_stream_is_bounded_then_connection_ends() -> None:
    app = create_app(echo_factory, stream_buffer=8192, stall_timeout=1.0)
    server = app.state.acp
    with running_server(app) as addr, httpx.Client(timeout=10) as c:
        url = f"http://{addr}/acp"
        cid, sid = _init(c, url)
        _prompt(c, url, cid, sid, 2000, 3)  # ~500 KB of updates, nobody reads the session stream
        peak = 0
        deadline = time.monotonic() + 10
        while cid in server.connections and time.monotonic() < deadline:
            stream = server.connections[cid].sessions.get(sid)
            if stream is not None:
                peak = max(peak, stream._bytes)
            time.sleep(0.01)  # sampling the buffer's size while it lives: the measurement
        assert peak > 0 and peak <= 8192 + 512, peak  # never more than the limit plus one frame
        assert cid not in server.connections  # stalled past the timeout: the connection ended
        r = c.post(
            url,
            json={"jsonrpc": "2.0", "id": 9, "method": "session/new", "params": {}},
            headers={"Acp-Connection-Id": cid},
        )
        assert r.status_code == 404 and r.json()["error"]["code"] == -32600


def test_closed_stream_loses_nothing() -> None:
    app = create_app(echo_factory, stream_buffer=16384, stall_timeout=30.0)
    with running_server(app) as addr, httpx.Client(timeout=10) as c:
        url = f"http://{addr}/acp"
        cid, sid = _init(c, url)
        n = 300
        _prompt(c, url, cid, sid, n, 3)
        headers = {"Acp-Connection-Id": cid, "Acp-Session-Id": sid, "Accept": "text/event-stream"}
        seen: list[str] = []
        last_id = ""
        with c.stream("GET", url, headers=headers) as s:  # read a few, then hang up
            for line in s.iter_lines():
                if line.startswith("id:"):
                    last_id = line[3:].strip()
                if line.startswith("data:"):
                    seen.append(line)
                    if len(seen) == 20:
                        break
        answer = None
        again = {**headers, "Last-Event-ID": last_id}
        with c.stream("GET", url, headers=again) as s:  # the same stream again
            for line in s.iter_lines():
                if line.startswith("data:"):
                    if '"result"' in line:
                        answer = line
                        break
                    seen.append(line)
        texts = [ln.split('"text":"')[1][:6] for ln in seen]
        assert texts == [f"m{i:05d}" for i in range(n)]  # all of them, in order, once
        assert answer is not None and '"end_turn"' in answer


def _served_within_a_second(c: httpx.Client, addr: str) -> None:
    """Liveness: a normal request gets its answer within a second (generous on loopback)."""
    started = time.monotonic()
    r = c.get(f"http://{addr}/health", timeout=5)
    assert r.status_code == 200
    assert time.monotonic() - started < 1.0


def _peer_closed(s: socket.socket) -> bool:
    try:
        return s.recv(65536) == b""
    except (BlockingIOError, TimeoutError):
        return False
    except OSError:
        return True


def test_slow_header_sockets_are_closed_while_others_are_served() -> None:
    """40 sockets each send one header line every 0.3 s and never finish: all are closed
    by the server once the 1 s header timeout passes, though they keep sending; a normal
    client is served throughout.  (Without a deadline a server holds them as long as they keep sending.)"""
    app = create_app(echo_factory)
    with limited_server(app, header_timeout=1.0, keep_alive=30.0) as addr, httpx.Client() as c:
        host, port = addr.split(":")
        socks = []
        for _ in range(40):
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(b"POST /acp HTTP/1.1\r\nHost: x\r\n")
            s.setblocking(False)
            socks.append(s)
        open_ = set(range(len(socks)))
        started = time.monotonic()
        line = 0
        while open_ and time.monotonic() - started < 6:
            line += 1
            for i in list(open_):
                if _peer_closed(socks[i]):
                    open_.discard(i)
                    continue
                with contextlib.suppress(OSError):
                    socks[i].sendall(f"X-Slow-{line}: y\r\n".encode())
            _served_within_a_second(c, addr)
            time.sleep(0.3)
        elapsed = time.monotonic() - started
        for s in socks:
            s.close()
        assert not open_, f"{len(open_)} slow sockets still open after {elapsed:.1f} s"
        assert elapsed > 0.9  # not closed before the deadline
        # a request whose headers come in time is unaffected by the deadline
        r = c.post(
            f"http://{addr}/acp",
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        )
        assert r.status_code == 200


def _initialize(c: httpx.Client, url: str) -> httpx.Response:
    return c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})


def test_connection_flood_stops_at_the_cap_and_a_normal_client_is_served() -> None:
    """max_connections=20: a normal client connects first; 60 more initialize calls get
    19 connections and 41 refusals (503, Retry-After, a JSON-RPC error); the process never
    holds more than 20; the normal client's prompt still streams and answers within a
    second; ending one connection makes room for one more."""
    app = create_app(echo_factory, max_connections=20)
    server = app.state.acp
    with limited_server(app) as addr, httpx.Client(timeout=10) as c:
        url = f"http://{addr}/acp"
        cid, sid = _init(c, url)
        codes = [_initialize(c, url) for _ in range(60)]
        assert len(server.connections) == 20
        ok = [r for r in codes if r.status_code == 200]
        refused = [r for r in codes if r.status_code == 503]
        assert len(ok) == 19 and len(refused) == 41
        assert refused[0].headers["retry-after"] == "1"
        assert "too many connections" in refused[0].json()["error"]["message"]
        assert "acp-connection-id" not in refused[0].headers
        started = time.monotonic()
        _prompt(c, url, cid, sid, 1, 7)
        headers = {"Acp-Connection-Id": cid, "Acp-Session-Id": sid, "Accept": "text/event-stream"}
        with c.stream("GET", url, headers=headers) as s:
            for line in s.iter_lines():
                if line.startswith("data:") and '"result"' in line:
                    assert '"end_turn"' in line
                    break
        assert time.monotonic() - started < 1.0
        _served_within_a_second(c, addr)
        gone = ok[0].headers["Acp-Connection-Id"]
        assert c.delete(url, headers={"Acp-Connection-Id": gone}).status_code == 202
        assert _initialize(c, url).status_code == 200
        assert _initialize(c, url).status_code == 503


def test_sessions_per_connection_capped_over_http_and_websocket() -> None:
    """max_sessions=3: the 4th session/new gets an error (HTTP 429 with the JSON-RPC error
    over POST; an error answer with its id over WebSocket) and the connection lives on:
    its first session still takes prompts."""
    import websockets.sync.client as ws_client

    app = create_app(echo_factory, max_sessions=3)
    with limited_server(app) as addr, httpx.Client(timeout=10) as c:
        url = f"http://{addr}/acp"
        cid, sid = _init(c, url)
        h = {"Acp-Connection-Id": cid}
        for rid in (10, 11):
            new = {"jsonrpc": "2.0", "id": rid, "method": "session/new", "params": {}}
            assert c.post(url, json=new, headers=h).status_code == 202
        answered: set[Any] = set()  # the answers to 10 and 11: both sessions opened
        with c.stream("GET", url, headers={**h, "Accept": "text/event-stream"}) as s:
            for line in s.iter_lines():
                if line.startswith("data:"):
                    answered.add(json.loads(line[5:]).get("id"))
                if {10, 11} <= answered:
                    break
        assert app.state.acp.connections[cid].session_count() == 3
        r = c.post(
            url, json={"jsonrpc": "2.0", "id": 12, "method": "session/new", "params": {}}, headers=h
        )
        assert r.status_code == 429
        assert r.json()["id"] == 12 and "too many sessions" in r.json()["error"]["message"]
        _prompt(c, url, cid, sid, 1, 13)
        headers = {**h, "Acp-Session-Id": sid, "Accept": "text/event-stream"}
        with c.stream("GET", url, headers=headers) as s:
            assert any('"end_turn"' in ln for ln in s.iter_lines() if '"result"' in ln)

        with ws_client.connect(f"ws://{addr}/acp", open_timeout=10) as ws:
            msgs = [
                {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                *(
                    {"jsonrpc": "2.0", "id": i, "method": "session/new", "params": {}}
                    for i in range(2, 7)
                ),
                {
                    "jsonrpc": "2.0",
                    "id": 9,
                    "method": "session/prompt",
                    "params": {"sessionId": "s1", "prompt": [{"type": "text", "text": "hi"}]},
                },
            ]
            answers = []
            for m in msgs:
                ws.send(json.dumps(m))
                answers.append(_next_answer(ws))
        assert [("result" in a) for a in answers[1:6]] == [True, True, True, False, False]
        assert answers[4]["id"] == 5 and answers[4]["error"]["code"] == -32600
        assert answers[-1]["result"] == {"stopReason": "end_turn"}


def _next_answer(ws: Any) -> dict[str, Any]:
    while True:
        msg = json.loads(ws.recv(timeout=10))
        if "id" in msg and "method" not in msg:
            return msg


def test_websocket_frames_up_to_the_limit_are_read_and_one_over_gets_an_error() -> None:
    """A 20 MiB frame (under the 24 MiB message limit; Hypercorn's own 16 MiB default would close
    the socket with 1009 at 16 MiB) is read and answered; a 24.5 MiB frame (over the
    limit, under limit + WS_FRAME_MARGIN) gets a -32600 "message too large" error and the
    socket lives on."""
    import websockets.sync.client as ws_client

    limit = 24 * 1024 * 1024

    def factory(sink: Any) -> Any:
        core = echo_factory(sink)
        core.max_message_size = limit  # what agent_factory sets from --max-message-size
        return core

    app = create_app(factory, max_body=limit)
    with (
        limited_server(app, max_message_size=limit) as addr,
        ws_client.connect(f"ws://{addr}/acp", max_size=None, open_timeout=10) as ws,
    ):
        if True:
            pad = "x" * (20 * 1024 * 1024)
            big = {"jsonrpc": "2.0", "id": 1, "method": "nothing/here", "params": {"pad": pad}}
            ws.send(json.dumps(big))
            answer = json.loads(ws.recv(timeout=30))
            assert answer["id"] == 1 and answer["error"]["code"] == -32601
            over = json.dumps(
                {**big, "id": 2, "params": {"pad": pad + "x" * (4 * 1024 * 1024 + 512 * 1024)}}
            )
            ws.send(over)
            answer = json.loads(ws.recv(timeout=30))
            assert answer["error"]["code"] == -32600 and answer["error"]["data"]["limit"] == limit
            ws.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {}}))
            assert json.loads(ws.recv(timeout=10))["result"]["agentInfo"]["name"] == "echo"


def test_idle_websocket_is_closed_but_not_while_a_request_runs() -> None:
    """idle_timeout=0.5: a WebSocket that sends nothing is closed with 1001; one whose
    prompt is still streaming (2 s) is not, and gets its answer."""
    import websockets
    import websockets.sync.client as ws_client

    app = create_app(echo_factory, idle_timeout=0.5)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    with limited_server(app) as addr:
        with ws_client.connect(f"ws://{addr}/acp", open_timeout=10) as ws:
            ws.send(json.dumps(init))
            assert _next_answer(ws)["id"] == 1
            with pytest.raises(websockets.ConnectionClosed) as closed:
                ws.recv(timeout=5)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
        with ws_client.connect(f"ws://{addr}/acp", open_timeout=10) as ws:
            ws.send(json.dumps(init))
            _next_answer(ws)
            ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/new"}))
            sid = _next_answer(ws)["result"]["sessionId"]
            prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "slow"}]}
            ws.send(
                json.dumps(
                    {"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt}
                )
            )
            assert _next_answer(ws)["result"] == {"stopReason": "end_turn"}


def test_stream_taken_over_while_the_old_reader_waits_loses_nothing() -> None:
    """A GET with Last-Event-ID takes a stream over while the old GET's generator still
    waits for data (its client is gone, or it is relayed from another replica): events
    queued from then on are the new reader's.  The old generator used to wake first and
    take them, so the new reader never saw them."""
    from types import SimpleNamespace

    from runtime.http.http_streams import OutStream

    server = create_app(echo_factory).state.acp
    conn = SimpleNamespace(last_seen=0.0)

    async def main() -> None:
        stream = OutStream(1 << 20, 5.0)
        old = object()
        stream.reader = old
        first = server._sse(stream, old, conn)
        await stream.put(b'"one"')
        assert b"id: 1\n" in await first.__anext__()
        waiting = asyncio.ensure_future(first.__anext__())
        await asyncio.sleep(0)  # one pass: the old generator now waits for data
        assert len(stream._waiters) == 1
        new = object()
        stream.reader = new
        await stream.put(b'"two"')
        stream.rewind(1)  # nothing to replay yet: event 2 is still queued
        await asyncio.sleep(0.01)  # the response starts streaming a moment later
        second = server._sse(stream, new, conn)
        await stream.put(b'"three"')
        got = b""
        while b"id: 3\n" not in got:
            got += await asyncio.wait_for(second.__anext__(), 5)
        assert b"id: 2\n" in got and b"id: 3\n" in got, got
        with contextlib.suppress(StopAsyncIteration):
            await asyncio.wait_for(waiting, 5)
        # the window holds each event once: resuming from 0 replays 1, 2, 3 exactly
        stream.rewind(0)
        ids = [item[0] for item in stream.take_all()]
        assert ids == [1, 2, 3], ids

    asyncio.run(main())


def test_production_config_names_no_server_software() -> None:
    """``server_config`` leaves out Hypercorn's ``Server`` header (one header fewer per
    response, and no server version for a scanner); ``Date`` stays."""
    with limited_server(create_app(echo_factory)) as addr, httpx.Client(timeout=10) as c:
        r = c.post(
            f"http://{addr}/acp",
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        )
        assert r.status_code == 200
        assert "server" not in r.headers, r.headers
        assert "date" in r.headers


def test_accepted_post_builds_no_request_or_response_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """POST /acp is served by the app's plain ASGI path: a prompt's 202 builds no
    Starlette Request or Response (the per-prompt CPU), and says the same as one did
    (202, ``content-length: 0``, no body); a method /acp does not serve is still
    Starlette's 405 with ``Allow``."""
    from runtime.http import http_app

    built: list[str] = []

    class CountingResponse(http_app.Response):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built.append("response")
            super().__init__(*args, **kwargs)

    class CountingRequest(http_app.Request):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built.append("request")
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(http_app, "Response", CountingResponse)
    monkeypatch.setattr(http_app, "Request", CountingRequest)
    with running_server(create_app(echo_factory)) as addr, httpx.Client(timeout=10) as c:
        url = f"http://{addr}/acp"
        cid, sid = _init(c, url)
        built.clear()
        r = c.post(
            url,
            json={
                "jsonrpc": "2.0",
                "id": 7,
                "method": "session/prompt",
                "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]},
            },
            headers={"Acp-Connection-Id": cid, "Acp-Session-Id": sid},
        )
        assert (r.status_code, r.content, r.headers["content-length"]) == (202, b"", "0")
        assert "content-type" not in r.headers
        assert built == [], built
        put = c.put(url, content=b"{}", headers={"Content-Type": "application/json"})
        assert put.status_code == 405
        assert set(put.headers["allow"].split(", ")) >= {"GET", "POST", "DELETE"}


def test_stream_reader_waits_without_a_task_and_every_waiter_wakes() -> None:
    """A stream's reader waits on a plain future with a timer (no ``wait_for`` task per
    wait: it waits twice per prompt); every waiting reader wakes on data or close, and a
    wait with nothing sent ends after its timeout."""
    from runtime.http.http_streams import OutStream

    async def main() -> None:
        stream = OutStream(1 << 20, 5.0)
        assert await stream.wait(0.01) is False  # the keepalive timeout: nothing to send
        before = len(asyncio.all_tasks())
        a = asyncio.ensure_future(stream.wait(30))
        b = asyncio.ensure_future(stream.wait(30))
        await asyncio.sleep(0)  # one pass: both readers run to their wait
        assert len(stream._waiters) == 2
        assert len(asyncio.all_tasks()) == before + 2  # the two readers, nothing more
        await stream.put(b'"x"')
        assert await asyncio.wait_for(asyncio.gather(a, b), 5) == [True, True]
        assert [i for i, _ in stream.take_all()] == [1]
        c = asyncio.ensure_future(stream.wait(30))
        await asyncio.sleep(0)  # one pass: the reader runs to its wait
        assert len(stream._waiters) == 1
        stream.close()
        assert await asyncio.wait_for(c, 5) is True
        assert stream._waiters == []

    asyncio.run(main())


def test_frames_reach_their_stream_in_the_pass_they_are_sent_and_a_full_one_keeps_order() -> None:
    """Nothing queued before it and room in its stream: a frame is an SSE event at once,
    in the pass that sent it, with no writer task (the per-prompt CPU: bench/README.md);
    a stream without room holds what follows back (the writer task waits for room) and
    every event still comes out once, in the order sent."""
    from runtime.http.http_connection import HttpConnection

    class Host:
        factory = staticmethod(echo_factory)
        stream_buffer = 300
        stall_timeout = 5.0
        replay_window = 1 << 20
        max_sessions = 10

        async def remove(self, cid: str) -> None:
            raise AssertionError("no stream stalls here")

    def update(n: int, pad: int = 0) -> bytes:
        params = {"sessionId": "s1", "update": {"n": n, "pad": "x" * pad}}
        return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params}).encode()

    async def main() -> None:
        conn = HttpConnection(Host())
        stream = conn.session_stream("s1")
        tasks = len(asyncio.all_tasks())
        conn.core.send_raw(update(1), "s1")
        conn.core.send_raw(update(2), "s1")
        assert [i for i, _ in stream._frames] == [1, 2]  # no loop pass in between
        assert len(asyncio.all_tasks()) == tasks  # no writer task
        conn.core.send_raw(update(3, pad=400), "s1")  # over the room left: the writer's
        conn.core.send_raw(update(4), "s1")  # queued behind it, not ahead
        assert [i for i, _ in stream._frames] == [1, 2]
        got: list[int] = []
        for _ in range(50):
            await asyncio.sleep(0.01)
            got += [event_n(e) for _, e in stream.take_all()]
            if len(got) == 4:
                break
        assert got == [1, 2, 3, 4]
        await conn.close()

    def event_n(event: bytes) -> int:
        data = event.split(b"data: ", 1)[1]
        return int(json.loads(data)["params"]["update"]["n"])

    asyncio.run(main())
