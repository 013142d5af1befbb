"""`agentgen conform client`: the kit plays the agent, a fresh client process per check.

The client's command holds `{agent}`, replaced by the relay (relay.py) that connects
the client's agent pipe to the kit on 127.0.0.1; the prompt reaches the client on its
stdin (`--prompt-via stdin`, the line then stdin closed) or as the argument `{prompt}`
stands for (`--prompt-via arg`).  Each check is a scenario: what the kit advertises and
what it does in the turn (stream, unknown updates and notifications, a permission
question, a file read where the client declared it, `session/list` a page at a time, a
permission question held open while the client's process group gets SIGINT, a user's
Ctrl-C); every frame both ways is recorded raw, and the client is judged on its bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..protocol import runtime_revision as rv
from .catalogue import Requirement, catalogue
from .schema_link import Judge
from .transcript import Frame, Transcript
from .verdict import Outcome, Result, Run, Status

ALLOW, REJECT = "conform-allow", "conform-reject"
# the requirements judge_session gives outcomes to
JUDGED = tuple(
    f"AGENTGEN-CLIENT-{n:03d}" for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)
) + tuple(f"AGENTGEN-CLIENT-HTTP-{n:03d}" for n in (1, 2, 3, 4))
BASELINE_BLOCKS = ("text", "resource_link")
# the kit's `nextCursor`: opaque, with the characters a client that decodes, re-encodes
# or trims a cursor would change
CURSOR = "eyJwYWdlIjogMn0=+/conform page 2"
HOLD = 0.4  # seconds a permission question stays open before the kit interrupts the client
CANCEL_WAIT = 3.0  # seconds for the client's session/cancel after the interrupt


@dataclass
class ClientOptions:
    command: list[str]  # holds "{agent}" (and "{prompt}" with prompt_via == "arg")
    cwd: str
    prompt_via: str = "stdin"
    prompt: str = "Hello from agentgen conform."
    timeout: float = 15.0  # one scenario's turn
    env: dict[str, str] | None = None
    answer_timeout: float = 5.0  # the client's answer to one of the kit's requests
    serve: str = "ws"  # what `{url}` is: a WebSocket ("ws") or Streamable HTTP ("http")

    @property
    def transport(self) -> str:
        return self.serve if any("{url}" in a for a in self.command) else "stdio"


@dataclass
class Scenario:
    """What the kit, as the agent, says and does in one check."""

    name: str
    ask_permission: bool = True
    unknowns: bool = True  # an unknown update kind, a `_` notification, `$/cancel_request`
    read_file: bool = False  # fs/read_text_file when the client declared it
    # the permission question held open, then SIGINT to the client (a user's Ctrl-C):
    # a client that cancels must answer the question `cancelled`
    cancel: bool = False
    list_sessions: bool = False  # session/list advertised, answered a page at a time


@dataclass
class Session:
    """One client process and the kit's agent side of its connection."""

    judge: Judge
    transcript: Transcript = field(default_factory=Transcript)
    received: list[tuple[Frame, dict[str, Any]]] = field(default_factory=list)
    answers: dict[int, dict[str, Any]] = field(default_factory=dict)  # our requests' ids
    sent_requests: dict[int, str] = field(default_factory=dict)
    init_params: dict[str, Any] = field(default_factory=dict)
    session_id: str = ""
    writer: Any = None  # asyncio.StreamWriter, the WebSocket's _WsWriter, an HttpEndpoint
    http: Any = None  # the HttpEndpoint when the kit serves Streamable HTTP
    turn_done: asyncio.Event = field(default_factory=asyncio.Event)
    waiters: dict[int, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    next_id: int = 100
    file_text: str = ""
    cwd: str = "/"
    scenario: Scenario | None = None
    pid: int | None = None  # the client process, its group's leader (the kit's SIGINT)
    interrupted: bool = False  # the kit sent SIGINT while its question was open
    cancel_seen: asyncio.Event = field(default_factory=asyncio.Event)
    permission_rid: int | None = None  # the question open when the client cancelled
    answered_before_cancel: bool = False

    @property
    def rev(self) -> rv.Revision:
        return self.judge.revision

    async def send(self, msg: dict[str, Any]) -> None:
        data = orjson.dumps(msg)
        self.transcript.add("out", data)
        assert self.writer is not None
        self.writer.write(data + b"\n")
        await self.writer.drain()

    async def call(
        self, method: str, params: dict[str, Any], timeout: float
    ) -> dict[str, Any] | None:
        rid = self.next_id
        self.next_id += 1
        self.sent_requests[rid] = method
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiters[rid] = fut
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None

    def advertised(self) -> dict[str, Any]:
        """The kit's initialize answer: a version, no optional capability at all."""
        init = self.rev.init
        result: dict[str, Any] = {"protocolVersion": self.rev.protocol_version}
        result[init.response_info] = {"name": "agentgen-conform", "version": "1"}
        caps = self.rev.agent_capabilities
        capabilities: dict[str, Any] = {}
        if caps.load_session:
            capabilities[caps.load_session] = False
        if caps.prompt_flags:
            node = capabilities
            for key in caps.prompt[:-1]:
                node = node.setdefault(key, {})
            node[caps.prompt[-1]] = {f: False for f in caps.prompt_flags}
        if self.scenario is not None and self.scenario.list_sessions and self.list_gated():
            node = capabilities
            for key in caps.session:
                node = node.setdefault(key, {})
            node["list"] = {}
        result[init.response_capabilities] = capabilities
        if init.auth_methods:
            result[init.auth_methods] = []
        return result

    def list_gated(self) -> bool:
        """Whether `session/list` needs the agent's `list` session capability."""
        return "list" in self.rev.agent_capabilities.session_fields

    def lists(self) -> bool:
        """Whether the kit, as the agent, serves `session/list` in this scenario."""
        listing = self.scenario is not None and self.scenario.list_sessions
        return "session/list" in self.rev.side("agent") and (listing or not self.list_gated())


def _update(rev: rv.Revision, sid: str, update: dict[str, Any]) -> dict[str, Any]:
    if rev.turn.chunk_message_id_required and update.get("sessionUpdate", "").endswith("_chunk"):
        update = {**update, rev.turn.chunk_message_id or "messageId": str(uuid.uuid4())}
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": sid, "update": update},
    }


async def _turn(s: Session, scenario: Scenario, rid: Any, timeout: float) -> None:
    """The kit's prompt turn: text, the unknowns, a file read, a permission question."""
    rev, sid = s.rev, s.session_id
    v2 = rev.turn.lifecycle == "v2"
    if v2:
        await s.send({"jsonrpc": "2.0", "id": rid, "result": {"messageId": str(uuid.uuid4())}})
        await s.send(_update(rev, sid, {"sessionUpdate": "state_update", "state": "running"}))
    text = {"type": "text", "text": "conform says hi"}
    await s.send(_update(rev, sid, {"sessionUpdate": "agent_message_chunk", "content": text}))
    if scenario.unknowns:
        await s.send(_update(rev, sid, {"sessionUpdate": "conform_future_kind", "detail": 1}))
        await s.send({"jsonrpc": "2.0", "method": "_conform/notice", "params": {"n": 1}})
        await s.send(
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 99999}}
        )
    if scenario.read_file:
        await _read_file(s, timeout)
    stop = "end_turn"
    if scenario.cancel and rev.request_permission:
        stop = await _cancelled_question(s, timeout)
    elif scenario.ask_permission and rev.request_permission:
        await s.call("session/request_permission", _question(s), timeout)
    if v2:
        await s.send(
            _update(
                rev,
                sid,
                {"sessionUpdate": "state_update", "state": "idle", "stopReason": stop},
            )
        )
    else:
        await s.send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": stop}})
    s.turn_done.set()


def _question(s: Session) -> dict[str, Any]:
    rev = s.rev
    params: dict[str, Any] = {
        "sessionId": s.session_id,
        "options": [
            {"optionId": ALLOW, "name": "Allow", "kind": "allow_once"},
            {"optionId": REJECT, "name": "Reject", "kind": "reject_once"},
        ],
    }
    if rev.permission.tool_call:
        params[rev.permission.tool_call] = {
            "toolCallId": "conform-call-1",
            "title": "A harmless step",
        }
    if rev.permission.title:
        params[rev.permission.title] = "May agentgen conform go on?"
    return params


async def _cancelled_question(s: Session, timeout: float) -> str:
    """The permission question held open; SIGINT to the client (a user's Ctrl-C) when it
    is still unanswered after HOLD seconds; a client that then cancels (`session/cancel`)
    must answer it `cancelled`.  The turn's stop reason: `cancelled` once it did."""
    rid = s.next_id
    asking = asyncio.ensure_future(s.call("session/request_permission", _question(s), timeout))
    done, _ = await asyncio.wait({asking}, timeout=HOLD)
    if done:
        s.answered_before_cancel = True
        return "end_turn"
    if s.pid is None:
        asking.cancel()
        return "end_turn"
    with contextlib.suppress(ProcessLookupError):  # as a terminal's Ctrl-C: the group
        os.killpg(s.pid, signal.SIGINT)
    s.interrupted = True
    cancelled = asyncio.ensure_future(s.cancel_seen.wait())
    await asyncio.wait({cancelled}, timeout=CANCEL_WAIT)
    if not cancelled.done():  # no cancel: the client ignored the interrupt, or died of it
        cancelled.cancel()
        asking.cancel()
        return "end_turn"
    s.permission_rid = rid
    await asyncio.wait({asking}, timeout=timeout)
    return "cancelled"


async def _read_file(s: Session, timeout: float) -> None:
    shape = s.rev.authoring
    caps = s.init_params.get(s.rev.init.request_capabilities) or {}
    fs = caps.get(shape.fs or "") if type(caps) is dict else None
    if not (shape.fs and type(fs) is dict and fs.get(shape.fs_read or "") is True):
        return
    path = str(Path(s.file_text.split("\0", 1)[0]))
    await s.call("fs/read_text_file", {"sessionId": s.session_id, "path": path}, timeout)


async def _serve(
    s: Session, scenario: Scenario, reader: asyncio.StreamReader, timeout: float
) -> None:
    while True:
        line = await reader.readline()
        if not line:
            # the client closed the agent's stdin: an agent process would exit now
            if s.writer is not None:
                s.writer.close()
            return
        if line.strip():
            _on_frame(s, scenario, line.rstrip(b"\r\n"), timeout)


def _on_frame(
    s: Session, scenario: Scenario, data: bytes, timeout: float, channel: str = "stdio"
) -> None:
    frame = s.transcript.add("in", data, channel)
    msg = frame.message()
    if type(msg) is not dict:
        return
    s.received.append((frame, msg))
    if "method" not in msg:
        rid = msg.get("id")
        fut = s.waiters.pop(rid, None) if type(rid) is int else None
        if fut is not None and not fut.done():
            fut.set_result(msg)
        return
    if "id" in msg:
        asyncio.get_running_loop().create_task(_answer(s, scenario, msg, timeout))
    elif msg.get("method") == "session/cancel":
        s.cancel_seen.set()


class _WsWriter:
    """The kit's frames to a client over a WebSocket, as `Session.send` writes them."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.pending.append(data.rstrip(b"\n"))

    async def drain(self) -> None:
        while self.pending:
            await self.ws.send(self.pending.pop(0).decode())

    def close(self) -> None:
        asyncio.get_running_loop().create_task(self.ws.close())


async def _ws_server(s: Session, scenario: Scenario, timeout: float) -> tuple[Any, str]:
    """A WebSocket endpoint for a client that connects by URL (`{url}`): the upgrade
    answers with an `Acp-Connection-Id`, then text frames both ways."""
    from websockets.asyncio.server import serve

    async def handler(ws: Any) -> None:
        if s.writer is not None:
            await ws.close()
            return
        s.writer = _WsWriter(ws)
        async for message in ws:
            data = message if isinstance(message, bytes) else message.encode()
            _on_frame(s, scenario, data, timeout, "ws")

    def upgraded(connection: Any, request: Any, response: Any) -> Any:
        response.headers["Acp-Connection-Id"] = f"conform-{uuid.uuid4().hex[:12]}"
        return response

    server = await serve(handler, "127.0.0.1", 0, process_response=upgraded, max_size=None)
    port = next(iter(server.sockets)).getsockname()[1]
    return server, f"ws://127.0.0.1:{port}/acp"


async def _answer(s: Session, scenario: Scenario, msg: dict[str, Any], timeout: float) -> None:
    method, rid = msg["method"], msg["id"]
    params = msg.get("params") if type(msg.get("params")) is dict else {}
    if method == "initialize":
        s.init_params = params or {}
        await s.send({"jsonrpc": "2.0", "id": rid, "result": s.advertised()})
    elif method == "session/new":
        s.session_id = f"sess_conform_{uuid.uuid4().hex[:12]}"
        await s.send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": s.session_id}})
    elif method == "session/prompt":
        await _turn(s, scenario, rid, timeout)
    elif method == "session/list" and s.lists():
        cursor = (params or {}).get("cursor")
        result: dict[str, Any] = {"sessions": []}
        if cursor is None:
            sid = s.session_id or f"sess_conform_{uuid.uuid4().hex[:12]}"
            result = {"sessions": [{"sessionId": sid, "cwd": s.cwd}], "nextCursor": CURSOR}
        await s.send({"jsonrpc": "2.0", "id": rid, "result": result})
    else:
        error = {"code": -32601, "message": "Method not found"}
        await s.send({"jsonrpc": "2.0", "id": rid, "error": error})


def _command(opts: ClientOptions, port: int, url: str = "") -> list[str]:
    relay = [sys.executable, "-m", "agentgen.conform.relay", str(port)]
    out: list[str] = []
    for arg in opts.command:
        if "{url}" in arg:
            out.append(arg.replace("{url}", url))
        elif arg == "{agent}":
            out.extend(relay)
        elif "{agent}" in arg:
            out.append(arg.replace("{agent}", " ".join(relay)))
        elif arg == "{prompt}":
            out.append(opts.prompt)
        else:
            out.append(arg)
    return out


async def run_session(
    judge: Judge, scenario: Scenario, opts: ClientOptions
) -> tuple[Session, int | None]:
    s = Session(judge, scenario=scenario, cwd=opts.cwd)
    note = Path(opts.cwd) / "conform-note.txt"
    note.write_text("a line the client reads for the kit\n", encoding="utf-8")
    s.file_text = str(note)
    served: list[asyncio.Task[None]] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if s.writer is not None:
            writer.close()
            return
        s.writer = writer
        served.append(asyncio.current_task())  # type: ignore[arg-type]
        await _serve(s, scenario, reader, opts.answer_timeout)

    stop: Any = None
    if opts.transport == "http":
        from .client_http import HttpEndpoint, serve

        def scoped(method: str) -> bool:
            entry = s.rev.side("agent").get(method)
            return (
                entry is not None
                and entry.scope == "session"
                and entry.effect in ("uses", "closes")
            )

        def feed(data: bytes, channel: str) -> None:
            _on_frame(s, scenario, data, opts.answer_timeout, channel)

        s.http = s.writer = HttpEndpoint(feed, scoped)
        server, url, stop = await serve(s.http)
        argv = _command(opts, 0, url)
    elif opts.transport == "ws":
        server, url = await _ws_server(s, scenario, opts.answer_timeout)
        argv = _command(opts, 0, url)
    else:
        server = await asyncio.start_server(accept, "127.0.0.1", 0)
        argv = _command(opts, server.sockets[0].getsockname()[1])
    s.transcript.note(f"client: {' '.join(argv)}")
    env = {**(opts.env or os.environ)}
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=opts.cwd,
        env=env,
        start_new_session=True,
    )
    s.pid = proc.pid
    assert proc.stdin is not None
    if opts.prompt_via == "stdin":
        proc.stdin.write(opts.prompt.encode() + b"\n")
        await proc.stdin.drain()
    done = asyncio.ensure_future(s.turn_done.wait())
    exited = asyncio.ensure_future(proc.wait())
    await asyncio.wait({done, exited}, timeout=opts.timeout, return_when=asyncio.FIRST_COMPLETED)
    done.cancel()
    await asyncio.sleep(0.3)  # the client's answers to the turn's last frames
    with contextlib.suppress(OSError):
        proc.stdin.close()
    code: int | None = None
    try:
        code = await asyncio.wait_for(exited, opts.timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        await proc.wait()
    err = await proc.stderr.read() if proc.stderr is not None else b""
    if err:
        s.transcript.add("err", err)
    s.transcript.note(f"client exited {proc.returncode}")
    if stop is not None:  # Hypercorn: its shutdown trigger, then its task
        s.http.close()
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server, 5)
    else:
        server.close()
        if s.writer is not None:
            s.writer.close()
    return s, code


# ---- judging -------------------------------------------------------------------------------


Finding = tuple[str, Status, str]


def judge_session(s: Session, code: int | None, scenario: Scenario) -> list[Finding]:
    rev = s.rev
    out: list[Finding] = []
    calls = [m for _, m in s.received if "method" in m]
    if not calls:
        return [("AGENTGEN-CLIENT-001", Status.FAIL, "the client sent nothing")]
    first = calls[0].get("method")
    out.append(
        _verdict("AGENTGEN-CLIENT-001", first == "initialize", f"the first message was {first!r}")
    )
    version = s.init_params.get("protocolVersion")
    out.append(
        _verdict("AGENTGEN-CLIENT-002", type(version) is int, f"protocolVersion {version!r}")
    )
    agent_side = rev.side("agent")
    baseline = {"initialize", "session/new", "session/prompt", "session/cancel"}
    if s.lists():
        baseline.add("session/list")
    used = [str(m.get("method")) for m in calls]
    unadvertised = sorted({m for m in used if m in agent_side and m not in baseline})
    unknown = sorted({m for m in used if m not in agent_side and not m.startswith(("_", "$/"))})
    out.append(
        _verdict(
            "AGENTGEN-CLIENT-003",
            not unadvertised and not unknown,
            f"called {', '.join(unadvertised + unknown)} (not advertised)",
        )
    )
    blocks = [
        b.get("type")
        for m in calls
        if m.get("method") == "session/prompt" and type(m.get("params")) is dict
        for b in m["params"].get("prompt") or []
        if type(b) is dict
    ]
    beyond = sorted({str(b) for b in blocks if b not in BASELINE_BLOCKS})
    out.extend(_discipline(s))
    if s.lists():
        out.append(_cursors(s, calls))
    if scenario.cancel:
        if "session/prompt" in used:
            out.append(_cancel(s))
        return out  # the interrupt: what else the turn shows is judged in the others
    if "session/prompt" not in used:
        return out  # no turn: what a turn would show stays NOT_TESTED
    why = f"prompt blocks {beyond} beyond what was advertised"
    out.append(_verdict("AGENTGEN-CLIENT-004", not beyond, why))
    out.extend(_answers(s, code))
    return out


def _cursors(s: Session, calls: list[dict[str, Any]]) -> Finding:
    lists = [m for m in calls if m.get("method") == "session/list"]
    if not lists:
        return ("AGENTGEN-CLIENT-013", Status.SKIPPED, "the client did not list sessions")
    params = [_obj(m.get("params")) for m in lists]
    cursors = [p["cursor"] for p in params if "cursor" in p]
    if not cursors:
        why = "the client listed sessions and asked for no next page"
        return ("AGENTGEN-CLIENT-013", Status.SKIPPED, why)
    wrong = [c for c in cursors if c != CURSOR]
    if not wrong:
        return ("AGENTGEN-CLIENT-013", Status.PASS, "")
    why = f"session/list sent cursor {wrong[0]!r} back; the kit's nextCursor was {CURSOR!r}"
    return ("AGENTGEN-CLIENT-013", Status.FAIL, why)


def _cancel(s: Session) -> Finding:
    rid = "AGENTGEN-CLIENT-006"
    if not s.interrupted:
        why = (
            "the client answered the permission question at once: nothing pending to cancel"
            if s.answered_before_cancel
            else "no permission question was open"
        )
        return (rid, Status.SKIPPED, why)
    if not s.cancel_seen.is_set():
        why = "the client sent no session/cancel on SIGINT: the kit cannot make it cancel"
        return (rid, Status.SKIPPED, why)
    order = [
        ("cancel" if m.get("method") == "session/cancel" else "answer", m)
        for _, m in s.received
        if m.get("method") == "session/cancel"
        or ("method" not in m and m.get("id") == s.permission_rid)
    ]
    answer = next((m for kind, m in order if kind == "answer"), None)
    if answer is None:
        why = "the permission question was still unanswered after the client's session/cancel"
        return (rid, Status.FAIL, why)
    outcome = _obj(_obj(answer.get("result")).get("outcome"))
    if outcome.get("outcome") == "cancelled":
        return (rid, Status.PASS, "")
    if order[0][0] == "answer":
        return (rid, Status.SKIPPED, "the client answered the question before it cancelled")
    shown = answer.get("error") or outcome
    return (rid, Status.FAIL, f"after its session/cancel the client answered {shown!r}")


def _answers(s: Session, code: int | None) -> list[Finding]:
    out: list[Finding] = []
    by_method = {s.sent_requests[i]: a for i, a in s.answers.items() if i in s.sent_requests}
    for _frame, msg in s.received:
        rid = msg.get("id")
        if "method" not in msg and type(rid) is int and rid in s.sent_requests:
            s.answers[rid] = msg
            by_method[s.sent_requests[rid]] = msg
    answer = by_method.get("session/request_permission")
    if answer is None:
        out.append(
            (
                "AGENTGEN-CLIENT-005",
                Status.FAIL
                if "session/request_permission" in s.sent_requests.values()
                else Status.SKIPPED,
                "no answer to the permission question",
            )
        )
    else:
        outcome = (
            (answer.get("result") or {}).get("outcome")
            if type(answer.get("result")) is dict
            else None
        )
        chosen = outcome.get("optionId") if type(outcome) is dict else None
        kind = outcome.get("outcome") if type(outcome) is dict else None
        ok = (
            "error" in answer
            or kind == "cancelled"
            or (kind == "selected" and chosen in (ALLOW, REJECT))
        )
        out.append(
            _verdict("AGENTGEN-CLIENT-005", ok, f"answered {outcome!r}: not an offered option")
        )
    tolerated = s.turn_done.is_set() and (
        code in (0, None) or "session/request_permission" in by_method
    )
    errors_to_notes = [m for _, m in s.received if "method" not in m and m.get("id") is None]
    out.append(
        _verdict(
            "AGENTGEN-CLIENT-007",
            tolerated
            and not errors_to_notes
            and (
                answer is not None or "session/request_permission" not in s.sent_requests.values()
            ),
            f"after an unknown update kind, a `_` notification and $/cancel_request the client {'answered a notification' if errors_to_notes else 'stopped (exit ' + str(code) + ')'}",
        )
    )
    read = by_method.get("fs/read_text_file")
    if read is None:
        out.append(("AGENTGEN-CLIENT-008", Status.SKIPPED, "the client declared no file reading"))
    else:
        content = (
            (read.get("result") or {}).get("content") if type(read.get("result")) is dict else None
        )
        out.append(
            _verdict(
                "AGENTGEN-CLIENT-008",
                content == "a line the client reads for the kit\n",
                f"fs/read_text_file answered {read.get('error') or content!r}",
            )
        )
    return out


def _discipline(s: Session) -> list[Finding]:
    wrong, shape, schema, strict = [], [], [], []
    seen: set[Any] = set()
    for _frame, msg in s.received:
        if "method" not in msg:
            rid = msg.get("id")
            if type(rid) is not int or rid not in s.sent_requests or rid in seen:
                wrong.append(
                    f"a response with id {rid!r} answers no request of the kit (or answers twice)"
                )
            seen.add(rid)
            if ("result" in msg) == ("error" in msg):
                shape.append("a response with both or neither of result and error")
            answers = s.sent_requests.get(rid) if type(rid) is int else None
        else:
            answers = None
            if msg.get("method") not in s.rev.side("agent"):
                continue
        found = s.judge.problems(msg, answers, sender="client", strict=False)
        if found:
            schema.append(found[0])
        else:
            strict.extend(s.judge.problems(msg, answers, sender="client", strict=True)[:1])
    return [
        _ok("AGENTGEN-CLIENT-009", wrong),
        _ok("AGENTGEN-CLIENT-010", shape),
        _ok("AGENTGEN-CLIENT-011", schema),
        _ok("AGENTGEN-CLIENT-012", strict),
    ]


def _obj(value: Any) -> dict[str, Any]:
    return value if type(value) is dict else {}


def _verdict(rid: str, ok: bool, why: str) -> Finding:
    return (rid, Status.PASS, "") if ok else (rid, Status.FAIL, why)


def _ok(rid: str, problems: list[str]) -> Finding:
    return (rid, Status.FAIL, problems[0]) if problems else (rid, Status.PASS, "")


SCENARIOS = (
    Scenario("turn"),
    Scenario("files", ask_permission=False, unknowns=False, read_file=True, list_sessions=True),
    Scenario("cancel", unknowns=False, cancel=True),
)


async def run_client_revision(
    judge: Judge,
    opts: ClientOptions,
    *,
    on_session: Callable[[Session], Awaitable[None]] | None = None,
) -> Run:
    started = time.monotonic()
    rows: dict[str, Requirement] = {
        r.id: r
        for r in catalogue(
            judge.revision, role="client", transport=opts.transport, batches=judge.batches
        )
    }
    results = {
        rid: Result(rid, r.tier, r.capability, r.text, r.citation, judge.revision.protocol_version)
        for rid, r in rows.items()
    }
    for scenario in SCENARIOS:
        t0 = time.monotonic()
        s, code = await run_session(judge, scenario, opts)
        if on_session is not None:
            await on_session(s)
        found = judge_session(s, code, scenario)
        if s.http is not None:
            from .client_http import judge_requests

            found += [
                (i, Status.PASS if ok else Status.FAIL, why)
                for i, ok, why in judge_requests(s.http)
            ]
        for rid, status, message in found:
            if rid in results and not (
                scenario.name == "files"
                and rid not in ("AGENTGEN-CLIENT-008", "AGENTGEN-CLIENT-013")
                and status == Status.SKIPPED
            ):
                results[rid].outcomes.append(
                    Outcome(
                        rid, status, scenario.name, message, s.transcript, time.monotonic() - t0
                    )
                )
    return Run(
        protocol=judge.revision.protocol_version,
        role="client",
        target=" ".join(opts.command),
        transport=opts.transport,
        schema=judge.origin,
        results=list(results.values()),
        seconds=time.monotonic() - started,
    )
