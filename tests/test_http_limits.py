"""Slow and vanished SSE readers: memory stays bounded (backpressure, then the connection
ends after the stall timeout), and a stream closed mid-way loses nothing: the next GET
of the same stream (with Last-Event-ID) gets the rest, and the turn still completes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "templates"))

from runtime.http_server import create_app
from test_http_transport import echo_factory, running_server


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
            time.sleep(0.01)
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
