"""Conformance, round 4 (issue 31) and a busy session (issue 32), on every transport.

- a request without `params` is a request with `{}` (JSON-RPC lets a peer omit them):
  answered where every field is optional, -32602 naming the required field otherwise;
- what a `session/load` (v1) / `session/resume` (v2) restores arrives before its answer,
  nothing of it after;
- every request read before stdin's EOF is answered before the agent exits;
- prompts pipelined onto one busy session are answered in the order sent, and past the
  per-session bound at once with a transient error.

The agents are the hardening agent (tests/hardening_support.py) with slash commands, built
from the v1 schema and from one locked v2 schema; the stdio and WebSocket peers read raw
frames, the HTTP peer posts and reads the connection's and the session's SSE streams.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import hardening_support as hs
import orjson
import pytest

LOCK = json.loads((Path(__file__).resolve().parents[1] / "schemas.lock.json").read_text())
V2 = max({rel.split("/")[0] for rel in LOCK if rel.startswith("v2")})
MANIFEST = {
    **hs.MANIFEST,
    "commands": [{"name": "help", "description": "What this agent understands"}],
}
V2_INIT = {"protocolVersion": 2, "info": {"name": "round4", "version": "0"}}


@pytest.fixture(scope="module", params=["v1", V2])
def agent(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, shared_acp: Path
) -> dict[str, Any]:
    rev = request.param
    package = "round4_" + rev.replace("-", "_").replace(".", "_")
    tmp = tmp_path_factory.mktemp(package)
    env = hs.build(tmp, shared_acp, package, rev=rev, unstable=False, manifest=MANIFEST)
    v1 = rev == "v1"
    return {
        "env": env,
        "package": package,
        "v1": v1,
        "init": {"protocolVersion": 1, "clientCapabilities": {}} if v1 else V2_INIT,
        "new": {"cwd": "/tmp", "mcpServers": []} if v1 else {"cwd": "/tmp"},
        "load": "session/load" if v1 else "session/resume",
    }


def _req(rid: Any, method: str, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def _answer(msg: Any, rid: Any) -> bool:
    return type(msg) is dict and msg.get("id") == rid and "method" not in msg


class Raw:
    """A peer sending raw frames and reading every frame the agent writes, in order."""

    async def send(self, obj: Any) -> None:
        raise NotImplementedError

    async def recv(self, timeout: float = 10) -> Any:
        raise NotImplementedError

    async def until(self, rid: Any) -> tuple[Any, list[Any]]:
        """The answer to `rid` and every frame before it."""
        seen: list[Any] = []
        while True:
            msg = await self.recv()
            if _answer(msg, rid):
                return msg, seen
            seen.append(msg)

    async def call(self, rid: Any, method: str, params: Any = None) -> tuple[Any, list[Any]]:
        await self.send(_req(rid, method, params))
        return await self.until(rid)


class StdioRaw(Raw):
    def __init__(self, peer: hs.StdioPeer) -> None:
        self.peer = peer

    async def send(self, obj: Any) -> None:
        await self.peer.send(obj)

    async def recv(self, timeout: float = 10) -> Any:
        return await self.peer.recv(timeout)


class WsRaw(Raw):
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.queue: list[Any] = []

    async def send(self, obj: Any) -> None:
        await self.ws.send(orjson.dumps(obj).decode())

    async def recv(self, timeout: float = 10) -> Any:
        if not self.queue:
            got = orjson.loads(await asyncio.wait_for(self.ws.recv(), timeout))
            self.queue = got if type(got) is list else [got]
        return self.queue.pop(0)


class HttpRaw(Raw):
    """Streamable HTTP: POSTs, and every frame of the connection's and sessions' SSE
    streams in one queue (each stream read by a task of its own)."""

    def __init__(self, port: int) -> None:
        import httpx

        self.url = f"http://127.0.0.1:{port}/acp"
        self.http = httpx.AsyncClient(timeout=30)
        self.conn_id: str | None = None
        self.frames: asyncio.Queue[Any] = asyncio.Queue()
        self.readers: list[asyncio.Task[None]] = []
        self.streams: set[str] = set()

    def _headers(self, sid: str | None = None) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.conn_id:
            h["Acp-Connection-Id"] = self.conn_id
        if sid:
            h["Acp-Session-Id"] = sid
        return h

    async def send(self, obj: Any) -> None:
        sid = (obj.get("params") or {}).get("sessionId") if type(obj) is dict else None
        if obj.get("method") not in SESSION_SCOPED:
            sid = None  # load/resume/list/...: connection-scoped requests
        if sid and sid not in self.streams:
            self._open(sid)
        r = await self.http.post(self.url, content=orjson.dumps(obj), headers=self._headers(sid))
        if r.status_code == 200 and r.content:  # initialize: the answer is the body
            self.conn_id = r.headers["acp-connection-id"]
            self.frames.put_nowait(r.json())
            self._open(None)
        else:
            assert r.status_code == 202, (r.status_code, r.text)

    def open_session(self, sid: str) -> None:
        if sid not in self.streams:
            self._open(sid)

    def _open(self, sid: str | None) -> None:
        self.streams.add(sid or "")
        self.readers.append(asyncio.get_running_loop().create_task(self._read(sid)))

    async def _read(self, sid: str | None) -> None:
        headers = self._headers(sid)
        headers["Accept"] = "text/event-stream"
        async with self.http.stream("GET", self.url, headers=headers) as r:
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    self.frames.put_nowait(orjson.loads(line[5:]))

    async def recv(self, timeout: float = 10) -> Any:
        return await asyncio.wait_for(self.frames.get(), timeout)

    async def close(self) -> None:
        for t in self.readers:
            t.cancel()
        await asyncio.gather(*self.readers, return_exceptions=True)
        await self.http.aclose()


async def _with_peer(agent: dict[str, Any], transport: str, body: Any) -> None:
    """Run `body(peer)` against a fresh agent process on `transport`."""
    if transport == "stdio":
        peer = await hs.StdioPeer.start(agent["env"], agent["package"])
        try:
            await body(StdioRaw(peer))
        finally:
            await peer.close()
        return
    import websockets

    port = hs.free_port()
    proc = await asyncio.to_thread(hs.start_http, agent["env"], agent["package"], port)
    try:
        if transport == "ws":
            async with websockets.connect(f"ws://127.0.0.1:{port}/acp") as ws:
                await body(WsRaw(ws))
        else:
            http = HttpRaw(port)
            try:
                await body(http)
            finally:
                await http.close()
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 10)


TRANSPORTS = ["stdio", "http", "ws"]
SESSION_SCOPED = {"session/prompt", "session/cancel", "session/close"}


# ---- omitted params ----------------------------------------------------------------
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.wire_check_send_only  # a session/new without its required fields, on purpose
def test_a_request_without_params_is_an_empty_object(agent: dict[str, Any], transport: str) -> None:
    async def body(peer: Raw) -> None:
        r, _ = await peer.call(1, "initialize", agent["init"])
        assert "result" in r, r
        r, _ = await peer.call(2, "session/list")  # every field optional: {}
        assert type(r.get("result", {}).get("sessions")) is list, r
        r, _ = await peer.call(3, "session/new")  # a required field: named
        assert r["error"]["code"] == -32602, r
        assert "cwd" in r["error"]["message"], r
        assert "must be an object" not in r["error"]["message"], r

    asyncio.run(_with_peer(agent, transport, body))


@pytest.mark.parametrize("transport", ["stdio", "ws"])  # HTTP refuses batches (501)
def test_a_batch_entry_without_params_is_answered(agent: dict[str, Any], transport: str) -> None:
    async def body(peer: Raw) -> None:
        await peer.call(1, "initialize", agent["init"])
        await peer.send([_req(2, "session/list"), _req("b", "session/list")])
        got = [await peer.recv(), await peer.recv()]
        assert {g["id"] for g in got} == {2, "b"}, got
        assert all("sessions" in g["result"] for g in got), got

    asyncio.run(_with_peer(agent, transport, body))


# ---- a load's updates ----------------------------------------------------------------
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_nothing_of_a_load_arrives_after_its_answer(agent: dict[str, Any], transport: str) -> None:
    """Commands (and the replayed history) come before the load/resume answer; the next
    request's answer follows it with no update of the session in between."""

    async def first(peer: Raw) -> None:
        await peer.call(1, "initialize", agent["init"])
        r, _ = await peer.call(2, "session/new", agent["new"])
        agent["sid"] = r["result"]["sessionId"]
        r, _ = await peer.call(3, "session/prompt", hs.text_prompt(agent["sid"], "hello"))
        assert "result" in r, r

    async def second(peer: Raw) -> None:
        sid = agent["sid"]
        await peer.call(1, "initialize", agent["init"])
        params: dict[str, Any] = {"sessionId": sid, "cwd": "/tmp"}
        if agent["v1"]:
            params["mcpServers"] = []
        r, before = await peer.call(2, agent["load"], params)
        assert "result" in r, r
        if isinstance(peer, HttpRaw):  # the session's own stream, opened after the answer
            peer.open_session(sid)
        r, between = await peer.call(3, "session/list", {})
        assert "result" in r, r
        kinds = [m["params"]["update"]["sessionUpdate"] for m in before + between]
        assert "available_commands_update" in kinds, kinds
        if not isinstance(peer, HttpRaw):  # one ordered channel: nothing after the answer
            assert between == [], between

    asyncio.run(_with_peer(agent, transport, first))
    asyncio.run(_with_peer(agent, transport, second))


# ---- EOF ----------------------------------------------------------------------------
def test_every_request_read_before_eof_is_answered(agent: dict[str, Any]) -> None:
    """initialize, session/list, a prompt that takes 0.5 s, a hanging prompt and one more
    list are piped, then stdin closes: each gets its answer (the hanging one -32800 once
    the grace has passed) and the agent exits."""

    async def main() -> None:
        env = {**agent["env"], "ACP_EOF_GRACE": "2"}
        peer = await hs.StdioPeer.start(env, agent["package"])
        raw = StdioRaw(peer)
        await raw.call(1, "initialize", agent["init"])
        r, _ = await raw.call(2, "session/new", agent["new"])
        sid = r["result"]["sessionId"]
        r, _ = await raw.call(3, "session/new", agent["new"])
        other = r["result"]["sessionId"]
        frames = [
            _req(4, "session/list", {}),
            _req(5, "session/prompt", hs.text_prompt(sid, "slow 0.5")),
            _req(6, "session/prompt", hs.text_prompt(other, "hang")),
            _req(7, "session/list", {}),
        ]
        await peer.send_bytes(b"".join(orjson.dumps(f) + b"\n" for f in frames))
        peer.proc.stdin.close()  # type: ignore[union-attr]
        answers: dict[Any, Any] = {}
        while len(answers) < len(frames):
            msg = await peer.recv(timeout=10)
            if "method" not in msg:
                answers[msg["id"]] = msg
        assert "sessions" in answers[4]["result"] and "sessions" in answers[7]["result"]
        if agent["v1"]:  # answered at the turn's end: the slow one ends, the hanging one
            assert answers[5]["result"] == {"stopReason": "end_turn"}, answers[5]
            assert answers[6]["error"]["code"] == -32800, answers[6]
        else:  # answered on acceptance
            assert "result" in answers[5] and "result" in answers[6], answers
        await asyncio.wait_for(peer.proc.wait(), 10)

    asyncio.run(main())


# ---- a busy session ------------------------------------------------------------------
async def _pipelined(peer: Raw, agent: dict[str, Any], count: int, base: int = 100) -> list[Any]:
    """`count` prompts sent at once onto one session; their answers in arrival order."""
    await peer.call(1, "initialize", agent["init"])
    r, _ = await peer.call(2, "session/new", agent["new"])
    sid = r["result"]["sessionId"]
    await peer.send(_req(base - 1, "session/prompt", hs.text_prompt(sid, "slow 0.3")))
    for i in range(count):
        await peer.send(_req(base + i, "session/prompt", hs.text_prompt(sid, f"p{i}")))
    out: list[Any] = []
    while len(out) < count:
        msg = await peer.recv()
        if "method" not in msg and type(msg.get("id")) is int and msg["id"] >= base:
            out.append(msg)
    return out


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_prompts_queued_behind_a_turn_are_answered_in_order(
    agent: dict[str, Any], transport: str
) -> None:
    """A slow turn runs; 40 prompts sent meanwhile each wait their turn (none refused),
    and their answers come in the order they were sent."""

    async def body(peer: Raw) -> None:
        got = await _pipelined(peer, agent, 40)
        assert all("result" in m for m in got), [m for m in got if "result" not in m][:3]
        ids = [m["id"] for m in got]
        assert ids == sorted(ids), ids

    asyncio.run(_with_peer(agent, transport, body))


def test_past_the_bound_a_prompt_is_refused_at_once_with_a_retry_hint(
    agent: dict[str, Any],
) -> None:
    """ACP_MAX_QUEUED_PROMPTS=5: behind a running turn, the first 5 wait and are
    served; the others are answered at once with the transient SessionBusy error."""

    async def main() -> None:
        env = {**agent["env"], "ACP_MAX_QUEUED_PROMPTS": "5"}
        peer = await hs.StdioPeer.start(env, agent["package"])
        try:
            started = time.monotonic()
            got = await _pipelined(StdioRaw(peer), agent, 12)
        finally:
            await peer.close()
        refused = [m for m in got if "error" in m]
        served = [m for m in got if "result" in m]
        assert [m["id"] for m in served] == list(range(100, 105)), got
        assert len(refused) == 7, got
        err = refused[0]["error"]
        assert err["code"] == -32003 and err["data"]["name"] == "SessionBusy", err
        assert err["data"]["transient"] is True and err["data"]["retry_after"] > 0, err
        assert got.index(refused[-1]) < got.index(served[0])  # refused at once
        assert time.monotonic() - started < 30

    asyncio.run(main())


def test_a_waiting_prompt_cancelled_leaves_the_line(agent: dict[str, Any]) -> None:
    """`$/cancel_request` on a queued prompt answers it -32800; the others keep their
    places and are served."""

    async def main() -> None:
        peer = await hs.StdioPeer.start(agent["env"], agent["package"])
        raw = StdioRaw(peer)
        try:
            await raw.call(1, "initialize", agent["init"])
            r, _ = await raw.call(2, "session/new", agent["new"])
            sid = r["result"]["sessionId"]
            await raw.send(_req(10, "session/prompt", hs.text_prompt(sid, "slow 0.5")))
            for rid in (11, 12, 13):
                await raw.send(_req(rid, "session/prompt", hs.text_prompt(sid, f"q{rid}")))
            await raw.send(
                {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 12}}
            )
            order = []
            while len(order) < 4:
                msg = await raw.recv()
                if "method" not in msg:
                    order.append((msg["id"], "error" in msg and msg["error"]["code"]))
            assert (12, -32800) in order, order
            served = [rid for rid, err in order if err is False]
            assert served == [10, 11, 13], order  # v1: at the turn's end; v2: on acceptance
            assert order.index((12, -32800)) < order.index((11, False)), order
        finally:
            await peer.close()

    asyncio.run(main())
