"""The transport-agnostic JSON-RPC core, in process: ordering, limits, ids, close."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from runtime.wire.errors import RpcError
from runtime.wire.jsonrpc import Connection
from runtime.wire.stdio import PIPE_BYTES, feed_stdin, read_frames, widen_pipe
from wait_support import Arrivals


class Wire:
    def __init__(self) -> None:
        self.out: list[tuple[dict[str, Any], str | None]] = []
        self.arrivals = Arrivals()

    async def sink(self, batch: list[tuple[bytes, str | None]]) -> None:
        for frame, sid in batch:
            self.out.append((json.loads(frame), sid))
        self.arrivals.arrived()

    async def until(self, what: str, pred: Any) -> None:
        await self.arrivals.until(f"{what} (wrote {self.out})", pred)

    def answers(self) -> list[tuple[Any, int | None, Any]]:
        return [(m.get("id"), m.get("error", {}).get("code"), m.get("result")) for m, _ in self.out]


def make(on_request: Any = None, on_notification: Any = None, **kw: Any) -> tuple[Connection, Wire]:
    w = Wire()

    async def req(method: str, params: Any, ctx: Any) -> Any:
        if on_request:
            return await on_request(method, params, ctx)
        return {"echo": params}

    async def note(method: str, params: Any) -> None:
        if on_notification:
            await on_notification(method, params)

    return Connection(w.sink, req, note, **kw), w


def test_notifications_in_order_per_session_and_sessions_concurrent() -> None:
    seen: dict[str, list[int]] = {"a": [], "b": []}
    handled = Arrivals()

    async def note(method: str, params: Any) -> None:
        # later notifications of a session finish faster: order must still hold
        await asyncio.sleep(0.001 * (5 - params["n"] % 5))
        seen[params["sessionId"]].append(params["n"])
        handled.arrived()

    async def main() -> None:
        conn, _ = make(on_notification=note)
        for n in range(30):
            for sid in ("a", "b"):
                conn.feed(
                    json.dumps(
                        {"jsonrpc": "2.0", "method": "x", "params": {"sessionId": sid, "n": n}}
                    )
                )
        await handled.until("60 notifications", lambda: len(seen["a"]) == len(seen["b"]) == 30)
        assert seen == {"a": list(range(30)), "b": list(range(30))}
        await conn.close()

    asyncio.run(main())


def test_updates_written_before_the_answer_and_routed_by_session() -> None:
    async def req(method: str, params: Any, ctx: Any) -> Any:
        for i in range(50):
            ctx.connection.notify("session/update", {"sessionId": params["sessionId"], "i": i})
            if i % 7 == 0:
                await asyncio.sleep(0)
        return {"done": True}

    async def main() -> None:
        conn, w = make(on_request=req)
        for k, sid in enumerate(("s1", "s2", "s3")):
            conn.feed(
                json.dumps({"jsonrpc": "2.0", "id": k, "method": "p", "params": {"sessionId": sid}})
            )
        await w.until("three answers", lambda: sum(1 for m, _ in w.out if "result" in m) == 3)
        for k, sid in enumerate(("s1", "s2", "s3")):
            idx = [i for i, (m, s) in enumerate(w.out) if s == sid]
            msgs = [w.out[i][0] for i in idx]
            assert [m["params"]["i"] for m in msgs[:-1]] == list(range(50))
            assert msgs[-1] == {"jsonrpc": "2.0", "id": k, "result": {"done": True}}
        await conn.close()

    asyncio.run(main())


def test_bad_frames_get_precise_errors() -> None:
    async def main() -> None:
        conn, w = make()
        for frame in [
            b"{",
            b"[]",
            b"3",
            b'{"jsonrpc":"2.0","id":{},"method":"m"}',
            b'{"jsonrpc":"2.0","id":5}',
            b'{"jsonrpc":"2.0","id":6,"method":7}',
            b'{"jsonrpc":"2.0","id":8,"method":"m","params":"s"}',
        ]:
            conn.feed(frame)
        await conn.flush()
        codes = [(m["id"], m["error"]["code"]) for m, _ in w.out]
        assert codes == [
            (None, -32700),
            (None, -32600),
            (None, -32600),
            (None, -32600),
            (5, -32600),
            (6, -32600),
            (8, -32600),
        ]
        # a response to a request never sent is ignored; the connection still answers
        conn.feed(b'{"jsonrpc":"2.0","id":99,"result":{}}')
        conn.feed(b'{"jsonrpc":"2.0","id":9,"method":"m","params":{}}')
        await w.until("the answer to 9", lambda: w.out[-1][0].get("id") == 9)
        assert w.out[-1][0] == {"jsonrpc": "2.0", "id": 9, "result": {"echo": {}}}
        await conn.close()

    asyncio.run(main())


def test_duplicate_id_in_flight_and_cancel_request() -> None:
    gate = asyncio.Event

    async def main() -> None:
        hold = gate()

        async def req(method: str, params: Any, ctx: Any) -> Any:
            await hold.wait()
            return "ok"

        conn, w = make(on_request=req)
        conn.feed(b'{"jsonrpc":"2.0","id":1,"method":"m"}')
        conn.feed(b'{"jsonrpc":"2.0","id":1,"method":"m"}')
        conn.feed(b'{"jsonrpc":"2.0","id":2,"method":"m"}')
        await w.until("the duplicate id refused", lambda: (1, -32600, None) in w.answers())
        conn.feed(b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":2}}')
        await w.until("2 cancelled", lambda: (2, -32800, None) in w.answers())
        hold.set()
        await w.until("1 answered", lambda: (1, None, "ok") in w.answers())
        await conn.flush()
        assert len(w.answers()) == 3  # nothing else: the duplicate ran no second handler
        await conn.close()

    asyncio.run(main())


def test_handler_exception_is_internal_error_without_detail() -> None:
    async def req(method: str, params: Any, ctx: Any) -> Any:
        if method == "rpc":
            raise RpcError(-32602, "invalid params: x", {"errors": [{"loc": ["params", "x"]}]})
        raise RuntimeError("token=hunter2")

    async def main() -> None:
        conn, w = make(on_request=req)
        conn.feed(b'{"jsonrpc":"2.0","id":1,"method":"boom"}')
        conn.feed(b'{"jsonrpc":"2.0","id":2,"method":"rpc"}')
        await w.until("both answers", lambda: len(w.out) == 2)
        await conn.flush()
        by_id = {m["id"]: m for m, _ in w.out}
        assert by_id[1]["error"] == {"code": -32603, "message": "internal error"}
        assert by_id[2]["error"]["data"]["errors"][0]["loc"] == ["params", "x"]
        assert "hunter2" not in json.dumps([m for m, _ in w.out])
        await conn.close()

    asyncio.run(main())


def test_outgoing_request_and_close_fails_pending() -> None:
    async def main() -> None:
        conn, w = make()
        task = asyncio.create_task(conn.request("elicitation/create", {"sessionId": "s"}))
        await w.until("the request", lambda: bool(w.out))
        sent = w.out[-1]
        assert sent[0]["method"] == "elicitation/create" and sent[1] == "s"
        conn.feed(
            json.dumps({"jsonrpc": "2.0", "id": sent[0]["id"], "result": {"action": "accept"}})
        )
        assert await task == {"action": "accept"}
        task = asyncio.create_task(conn.request("x", {}))
        await w.until("the second request", lambda: w.out[-1][0].get("method") == "x")
        await conn.close()
        try:
            await task
        except RpcError as err:
            assert err.code == -32603
        else:
            raise AssertionError("pending request must fail on close")

    asyncio.run(main())


def test_stdio_framing_size_limit_and_split_lines() -> None:
    async def main() -> None:
        conn, w = make(max_message_size=1000)
        reader = asyncio.StreamReader()
        big = json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"p": "x" * 5000}}
        ).encode()
        ok = b'{"jsonrpc":"2.0","id":2,"method":"m","params":{"k":1}}'
        data = big + b"\n" + ok + b"\n" + ok.replace(b'"id":2', b'"id":3')
        for i in range(0, len(data), 333):  # lines split across reads
            reader.feed_data(data[i : i + 333])
        reader.feed_eof()
        await read_frames(reader, conn, 1000)
        await w.until("three answers", lambda: len(w.out) == 3)
        await conn.flush()
        msgs = [m for m, _ in w.out]
        assert msgs[0]["id"] is None and msgs[0]["error"]["code"] == -32600
        assert msgs[0]["error"]["data"]["limit"] == 1000
        assert {m["id"] for m in msgs[1:]} == {2, 3}
        await conn.close()

    asyncio.run(main())


def test_stdin_pipe_is_framed_by_the_read_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The agent's stdin (a pipe) is framed as it is read: a line is handed to the
    connection by the read itself (no reader task woken a pass later); lines split across
    reads, an oversized line (answered, skipped) and a last line without a newline."""
    rfd, wfd = os.pipe()
    monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"buffer": os.fdopen(rfd, "rb")})())
    ok = b'{"jsonrpc":"2.0","id":2,"method":"m","params":{"k":1}}'
    big = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"p": "x" * 5000}})
    data = big.encode() + b"\n" + ok + b"\n" + ok.replace(b'"id":2', b'"id":3')
    fed: list[bytes] = []

    async def main() -> None:
        conn, w = make(max_message_size=1000)
        handed = Arrivals()
        real_feed = conn.feed

        def feed(frame: bytes) -> None:
            fed.append(frame)
            real_feed(frame)
            handed.arrived()

        conn.feed = feed  # type: ignore[method-assign]
        feeding = asyncio.get_running_loop().create_task(feed_stdin(conn, 1000))
        os.write(wfd, ok + b"\n")
        await handed.until("the first line handed over by the read", lambda: fed)
        for i in range(0, len(data), 333):  # lines split across reads
            os.write(wfd, data[i : i + 333])
            await asyncio.sleep(0.001)  # the writer's pace: each piece its own read
        os.close(wfd)
        await asyncio.wait_for(feeding, 10)
        await w.until("four answers", lambda: len(w.out) == 4)
        await conn.flush()
        msgs = [m for m, _ in w.out]
        errors = [m for m in msgs if m["id"] is None]
        assert len(errors) == 1 and errors[0]["error"]["data"]["limit"] == 1000
        assert sorted(m["id"] for m in msgs if m["id"] is not None) == [2, 2, 3]
        assert fed[-1] == ok.replace(b'"id":2', b'"id":3')  # the last line, at EOF
        await conn.close()

    asyncio.run(main())


def test_answer_leaves_through_sink_now_with_what_was_queued_before_it() -> None:
    """A transport's ``sink_now`` gets the answer in the pass of the loop its handler
    returns in, in one batch after the notification queued before it, when no other
    request is in flight; what ``sink_now`` declines (a full pipe) the writer task sends,
    in order."""
    now_batches: list[list[dict[str, Any]]] = []
    accept = [True]
    written = Arrivals()

    def sink_now(batch: list[tuple[bytes, str | None]]) -> bool:
        if accept[0]:
            now_batches.append([json.loads(f) for f, _ in batch])
            written.arrived()
        return accept[0]

    async def main() -> None:
        conn: Connection

        async def req(method: str, params: Any, ctx: Any) -> Any:
            conn.notify("note", {"n": params["n"]})
            return {"n": params["n"]}

        conn, w = make(on_request=req)
        conn.sink_now = sink_now
        conn.feed(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"n":1}}')
        await asyncio.sleep(0)  # the request's task runs: answered in this pass
        assert [[m.get("id") for m in b] for b in now_batches] == [[None, 1]]
        # two requests in flight: the first answer waits for the last one, and all
        # leave in one write
        conn.feed(b'{"jsonrpc":"2.0","id":5,"method":"m","params":{"n":5}}')
        conn.feed(b'{"jsonrpc":"2.0","id":6,"method":"m","params":{"n":6}}')
        await written.until("the answers to 5 and 6", lambda: len(now_batches) >= 2)
        await conn.flush()
        assert [[m.get("id") for m in b] for b in now_batches[1:]] == [[None, 5, None, 6]]
        assert w.out == []
        accept[0] = False
        conn.feed(b'{"jsonrpc":"2.0","id":2,"method":"m","params":{"n":2}}')
        await w.until("the answer to 2", lambda: (2, None, {"n": 2}) in w.answers())
        await conn.flush()
        assert len(now_batches) == 2
        assert [(m.get("method"), m.get("id")) for m, _ in w.out] == [("note", None), (None, 2)]
        await conn.close()

    asyncio.run(main())


def test_writer_waits_for_settle_before_it_takes_the_queue() -> None:
    """The writer task awaits the transport's ``settle`` (stdio: the session store's
    pending group commit) before it writes: a notification and the answer that comes a
    pass later leave in one batch."""
    batches: list[list[Any]] = []
    written = Arrivals()

    async def main() -> None:
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def req(method: str, params: Any, ctx: Any) -> Any:
            conn.notify("note", {"n": 1})
            await gate  # (a group commit)
            return {"n": 1}

        async def sink(batch: list[tuple[bytes, str | None]]) -> None:
            batches.append([json.loads(f).get("id") for f, _ in batch])
            written.arrived()

        async def settle() -> None:
            await gate

        conn = Connection(sink, req, lambda m, p: asyncio.sleep(0))
        conn.settle = settle
        conn.feed(b'{"jsonrpc":"2.0","id":1,"method":"m"}')
        for _ in range(5):
            await asyncio.sleep(0)
        assert batches == []  # the note waits
        gate.set_result(None)
        await written.until("the held batch", lambda: batches)
        await conn.flush()
        assert batches == [[None, 1]]
        await conn.close()

    asyncio.run(main())


def test_stdio_pipes_are_widened(tmp_path: Path) -> None:
    """A stdio agent asks Linux for 1 MiB pipe buffers on stdin and stdout (a 4 MB frame
    then crosses in a few writes and reads, not 64 of each); a file is left alone."""
    if not hasattr(fcntl, "F_GETPIPE_SZ"):
        pytest.skip("pipe buffer sizes are Linux's")
    rfd, wfd = os.pipe()
    try:
        before = fcntl.fcntl(wfd, fcntl.F_GETPIPE_SZ)
        widen_pipe(wfd)
        assert before < PIPE_BYTES <= fcntl.fcntl(rfd, fcntl.F_GETPIPE_SZ)
    finally:
        os.close(rfd)
        os.close(wfd)
    with (tmp_path / "f").open("wb") as f:
        widen_pipe(f.fileno())  # not a pipe: nothing happens, nothing raised


def test_validation_messages_carry_no_pydantic_prefix() -> None:
    """Issue 29, item 11: a validator's ValueError reached the peer as "Value error, the
    size must be positive"; the message is the validator's own words."""
    from pydantic import BaseModel, ValidationError, field_validator
    from runtime.wire.errors import from_validation_error

    class Sized(BaseModel):
        size: int

        @field_validator("size")
        @classmethod
        def _positive(cls, v: int) -> int:
            if v <= 0:
                raise ValueError("the size must be positive")
            if v >= 100:  # (not an assert statement: pytest rewrites those of a test file)
                raise AssertionError("the size must be under 100")
            return v

    for size, words in ((0, "the size must be positive"), (100, "the size must be under 100")):
        with pytest.raises(ValidationError) as info:
            Sized.model_validate({"size": size})
        err = from_validation_error(info.value, ("params",), {"size": size})
        assert err.message == f"invalid params: params.size: {words} (at /size)", err.message
        assert err.data["errors"][0]["msg"] == words
