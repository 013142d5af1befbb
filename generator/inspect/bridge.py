"""One agent connection behind the page: the inspector's ACP client and what the page sees.

`Bridge` starts the agent given on the command line (stdio) or connects to its URL, runs
`initialize`, and then does what the page asks over its WebSocket: calls an agent method,
sends a notification, answers a question the agent asked (permission, a file write, an
elicitation).  Every frame both ways becomes a `frame` event marked with the wire check's
verdict (templates/runtime/wire/wirecheck.py) at its JSON pointer; the agent's stderr lines,
its exit and terminal output are events too.  Events are kept, so a page that connects
late (or reloads) sees the whole history.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import shlex
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from .. import pointer
from .runtime_link import Runtime

Event = dict[str, Any]
Listener = Callable[[Event], Awaitable[None]]

REFUSED = -32000  # the user said no (as the runtime's client tools answer)
_LOC = re.compile(r"\) (/[^ :]*|<root>)?:?")


def problem_pointer(msg: Any, text: str) -> str:
    """The JSON pointer into the frame of the value a wire check problem names.  The check
    reports pydantic's location, which also names the union branch it tried (the
    `agent_message_chunk` of `/update/agent_message_chunk/content`): a step that is no
    key or index of the frame is such a name, and is left out."""
    if type(msg) is not dict:
        return ""
    part = "params" if "method" in msg else "result" if "result" in msg else None
    match = _LOC.search(text)
    if part is None or match is None:
        return ""  # the frame itself (not JSON-RPC, a method this side may not call)
    if not match.group(1) or match.group(1) == "<root>":
        return "/" + part
    node: Any = msg.get(part)
    steps: list[str | int] = [part]
    for raw in match.group(1).strip("/").split("/"):
        if type(node) is dict and raw in node:
            node = node[raw]
            steps.append(raw)
        elif type(node) is list and raw.isdigit() and int(raw) < len(node):
            node = node[int(raw)]
            steps.append(int(raw))
    return pointer.join(steps)


class WireLog:
    """Pairs responses with their requests and marks each frame valid or not."""

    def __init__(self, check: Any) -> None:
        self.check = check
        self.sent_ids: dict[Any, str] = {}  # our requests: id -> method
        self.received_ids: dict[Any, str] = {}  # the agent's requests: id -> method

    def verdict(self, msg: Any, direction: str) -> tuple[str | None, list[dict[str, str]]]:
        """(method, problems) of one frame; `direction` "out" (we sent it) or "in"."""
        sending = direction == "out"
        method: str | None = None
        if type(msg) is dict and "method" in msg:
            method = str(msg.get("method"))
            rid = msg.get("id")
            if "id" in msg and (rid is None or type(rid) in (int, str)):
                (self.sent_ids if sending else self.received_ids)[rid] = method
            answered = None
        elif type(msg) is dict:
            rid = msg.get("id")
            table = self.received_ids if sending else self.sent_ids
            hashable = rid is None or type(rid) in (int, str)
            answered = table.pop(rid, None) if hashable else None
            method = answered
        else:
            answered = None
        texts = self.check.problems(msg, answered, sending=sending) if self.check else []
        return method, [{"pointer": problem_pointer(msg, t), "message": t} for t in texts]


def _value_tag(models: Any, rev: Any) -> str | None:
    """The `type` a select option's value carries in session/set_config_option (v2: "id"),
    None where the revision's request takes the bare value: asked of its model."""
    entry = rev.side("agent").get("session/set_config_option")
    cls = getattr(models, entry.params, None) if entry is not None and entry.params else None
    if cls is None:
        return None
    bare = {"sessionId": "s", "configId": "c", "value": "v"}
    try:
        cls.model_validate(bare)
    except Exception:  # noqa: BLE001 - pydantic's ValidationError: a tag is required
        return "id"
    return None


def revision_facts(rev: Any, models: Any = None) -> dict[str, Any]:
    """What the page needs to know of the negotiated revision's wire names."""
    return {
        "configValueType": _value_tag(models, rev),
        "protocolVersion": rev.protocol_version,
        "agentMethods": sorted(rev.side("agent")),
        "clientMethods": sorted(rev.side("client")),
        "lifecycle": rev.turn.lifecycle,
        "responseInfo": rev.init.response_info,
        "responseCapabilities": rev.init.response_capabilities,
        "authMethods": rev.init.auth_methods,
        "authMethodId": rev.auth_method.id,
        "configId": rev.config_option.id,
        "configCurrent": rev.config_option.current_value,
        "configOptions": rev.config_option.select_options,
        "modes": rev.authoring.modes,
        "load": rev.sessions.load,
        "resume": rev.sessions.resume,
        "list": rev.sessions.list,
        "close": rev.sessions.close,
        "delete": rev.sessions.delete,
    }


class Bridge:
    def __init__(
        self,
        rt: Runtime,
        *,
        command: list[str] | None = None,
        url: str | None = None,
        websocket: bool = False,
        cwd: str,
        auto_approve: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        self.rt = rt
        self.command = list(command or [])
        self.url = url
        self.websocket = websocket
        self.cwd = str(Path(cwd).resolve())
        self.auto_approve = auto_approve
        self.env = env
        self.events: list[Event] = []
        self.listeners: set[Listener] = set()
        self.questions: dict[str, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._t0 = time.time()
        self.client = self._make_client()
        self.agent: Any = None
        self.wire = WireLog(None)
        self.stopped = asyncio.Event()
        self._terminals_seen: dict[str, str] = {}

    # ---- events ------------------------------------------------------------------------
    def emit(self, kind: str, **data: Any) -> None:
        event: Event = {"kind": kind, "seq": len(self.events) + 1, "t": time.time(), **data}
        self.events.append(event)
        for listener in list(self.listeners):
            asyncio.get_running_loop().create_task(self._deliver(listener, event))

    async def _deliver(self, listener: Listener, event: Event) -> None:
        try:
            await listener(event)
        except Exception:  # noqa: BLE001 - a page that went away: forget it
            self.listeners.discard(listener)

    def frame(self, raw: bytes | str, direction: str) -> None:
        data = raw.encode() if isinstance(raw, str) else bytes(raw)
        if not data.strip():
            return
        try:
            msg = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.emit(
                "frame",
                dir=direction,
                size=len(data),
                method=None,
                text=data.decode("utf-8", "replace"),
                problems=[{"pointer": "", "message": "not JSON"}],
            )
            return
        entries = msg if type(msg) is list else [msg]
        for entry in entries:
            method, problems = self.wire.verdict(entry, direction)
            result = entry.get("result") if type(entry) is dict else None
            if direction == "out" and method == "terminal/create" and type(result) is dict:
                self._terminals_seen.setdefault(str(result.get("terminalId")), "")
            self.emit(
                "frame", dir=direction, size=len(data), method=method, msg=entry, problems=problems
            )
        self._terminal_output()

    def _terminal_output(self) -> None:
        """Output of the terminals this client runs for the agent, when it changed."""
        if not self._terminals_seen:
            return
        terminals = self.client.tools()[1]
        for tid, seen in list(self._terminals_seen.items()):
            text = terminals.output_text(tid)
            if text is not None and text != seen:
                self._terminals_seen[tid] = text
                self.emit("terminal", terminalId=tid, output=text)

    async def _poll_terminals(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            self._terminal_output()

    # ---- the client the agent talks to -------------------------------------------------
    def _make_client(self) -> Any:
        bridge = self
        base = self.rt.client_base

        class InspectClient(base):  # type: ignore[misc,valid-type]
            async def _rt_session_request_permission(self, params: dict[str, Any]) -> Any:
                return await bridge.ask_permission(params)

            async def _rt_elicitation_create(self, params: dict[str, Any]) -> Any:
                return await bridge.ask("elicitation", params=params)

            async def _rt_session_update(self, params: dict[str, Any]) -> None:
                return None  # the page renders the frames themselves

            async def _confirm_write(self, path: str, content: str) -> bool:
                return await bridge.confirm_write(path, content)

            async def _rt_terminal_create(self, params: dict[str, Any]) -> Any:
                if not await bridge.confirm_command(params):
                    raise bridge.rt.errors.RpcError(
                        REFUSED, "refused: the user did not allow running this command"
                    )
                return await super()._rt_terminal_create(params)

        client = InspectClient()
        client.serve_fs = True
        client.serve_terminal = True
        client.root = self.cwd
        return client

    async def ask(self, kind: str, **data: Any) -> Any:
        """Ask the page; wait for its answer (`answer` op with this question's id)."""
        qid = f"q{next(self._ids)}"
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.questions[qid] = fut
        self.emit("question", id=qid, question=kind, **data)
        try:
            return await fut
        finally:
            self.questions.pop(qid, None)
            self.emit("answered", id=qid)

    async def ask_permission(self, params: dict[str, Any]) -> Any:
        answer = await self.ask("permission", params=params)
        if type(answer) is dict and type(answer.get("optionId")) is str:
            return {"outcome": {"outcome": "selected", "optionId": answer["optionId"]}}
        return {"outcome": {"outcome": "cancelled"}}

    async def confirm_write(self, path: str, content: str) -> bool:
        files = self.client.tools()[0]
        real = files.inside(path)
        try:
            before = Path(real).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            before = ""
        if self.auto_approve:
            self.emit("write", path=path, old=before, new=content, allowed=True, auto=True)
            return True
        answer = await self.ask("write", path=path, old=before, new=content)
        allowed = type(answer) is dict and answer.get("allow") is True
        self.emit("write", path=path, old=before, new=content, allowed=allowed, auto=False)
        return allowed

    async def confirm_command(self, params: dict[str, Any]) -> bool:
        """A `terminal/create` the agent asks for: run only when the page allows it (or
        `--auto-approve`): nothing runs that nobody approved."""
        argv = [str(params.get("command", ""))] + [str(a) for a in params.get("args") or ()]
        shown = {"argv": argv, "cwd": params.get("cwd") or self.cwd}
        if self.auto_approve:
            self.emit("command", **shown, allowed=True, auto=True)
            return True
        answer = await self.ask("command", **shown)
        allowed = type(answer) is dict and answer.get("allow") is True
        self.emit("command", **shown, allowed=allowed, auto=False)
        return allowed

    def answer(self, qid: str, value: Any) -> bool:
        fut = self.questions.get(qid)
        if fut is None or fut.done():
            return False
        fut.set_result(value)
        return True

    # ---- what the page asks ------------------------------------------------------------
    async def call(self, method: str, params: Any) -> Any:
        if self.agent is None:
            raise RuntimeError("not connected to the agent")
        return await self.agent.call(method, params)

    def notify(self, method: str, params: Any) -> None:
        if self.agent is None:
            raise RuntimeError("not connected to the agent")
        self.agent.connection.notify(method, params)

    # ---- the connection ----------------------------------------------------------------
    def _connection_class(self) -> Any:
        bridge = self

        class TappedConnection(self.rt.jsonrpc.Connection):  # type: ignore[misc,name-defined]
            def feed(self, frame: bytes | str) -> None:
                bridge.frame(frame, "in")
                super().feed(frame)

        return TappedConnection

    def _sink(self, sink: Callable[[list[Any]], Awaitable[None]]) -> Any:
        async def tapped(batch: list[Any]) -> None:
            for frame, _sid in batch:
                self.frame(frame, "out")
            await sink(batch)

        return tapped

    @contextlib.asynccontextmanager
    async def _stdio(self) -> AsyncIterator[Any]:
        ap = self.rt.agent_process
        proc = await asyncio.create_subprocess_exec(
            *self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr

        async def sink(batch: list[Any]) -> None:
            stdin.write(b"\n".join([f for f, _ in batch]) + b"\n")
            await stdin.drain()

        conn = self._connection_class()(
            self._sink(sink), self.client.handle_request, self.client.handle_notification
        )
        self.client.connection = conn
        loop = asyncio.get_running_loop()
        reader = loop.create_task(self.rt.stdio.read_frames(stdout, ap.StdoutGuard(conn)))
        errs = loop.create_task(self._stderr(stderr))

        async def watch() -> None:
            status = None
            exited = loop.create_task(ap.exit_status(proc, None))
            try:
                await asyncio.wait({reader, exited}, return_when=asyncio.FIRST_COMPLETED)
                status = await ap.exit_status(proc, 2.0)
            finally:
                exited.cancel()
            self.emit("exited", status=status)
            await conn.close_with(self.rt.errors.AgentExited(status))

        watcher = loop.create_task(watch())
        try:
            yield self.rt.proxy_class(conn)
        finally:
            with contextlib.suppress(Exception):
                stdin.close()
            await ap.end_agent(proc, reader, 2.0)
            for task in (reader, watcher, errs):
                task.cancel()
            await asyncio.gather(reader, watcher, errs, return_exceptions=True)
            await conn.close()

    async def _stderr(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.emit("stderr", line=line.decode("utf-8", "replace").rstrip("\n"))

    @contextlib.asynccontextmanager
    async def _remote(self) -> AsyncIterator[Any]:
        hc = self.rt.http_client
        assert self.url is not None
        transport: Any
        if self.websocket:
            transport = hc.WebSocketTransport(self.url)
            await transport.open()
        else:
            transport = hc.HttpTransport(self.url, scoped=self.rt.session_scoped(self.client))
        conn = self._connection_class()(
            self._sink(transport.sink), self.client.handle_request, self.client.handle_notification
        )
        transport.conn = conn
        self.client.connection = conn
        if self.websocket:
            transport.start()
        try:
            yield self.rt.proxy_class(conn)
        finally:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(conn.flush(), 2.0)
            await transport.close()
            await conn.close()

    async def run(self) -> None:
        """Connect, initialize, and serve until the agent goes away (or this is cancelled:
        the agent is ended then)."""
        target = self.url or " ".join(self.command)
        self.emit(
            "connecting",
            target=target,
            transport="stdio" if self.command else "websocket" if self.websocket else "http",
            cwd=self.cwd,
        )
        try:
            async with contextlib.AsyncExitStack() as stack:
                stack.push_async_callback(self.client.close_tools)
                poller = asyncio.ensure_future(self._poll_terminals())
                stack.callback(poller.cancel)
                opener = self._stdio() if self.command else self._remote()
                self.agent = await stack.enter_async_context(opener)
                highest = max(self.rt.revisions, key=lambda r: r.protocol_version)
                self.wire.check = self.rt.wire_check(self.client, highest)
                init = await self.rt.client.negotiate(
                    self.agent, self.client, name="agentgen-inspect", version=_version()
                )
                rev = self.client.revision
                self.wire.check = self.rt.wire_check(self.client, rev)
                facts = revision_facts(rev, self.rt.models_of(rev.package))
                self.emit("initialized", result=init, facts=facts)
                await self.agent.connection.closed.wait()
                reason = self.agent.connection.close_reason
                if reason is not None:
                    self.emit("closed", reason=str(reason))
                    print(f"agentgen inspect: {reason}", file=sys.stderr, flush=True)
        except Exception as exc:  # noqa: BLE001 - shown on the page and the terminal
            reason = str(exc) or type(exc).__name__
            again = self._other_version(exc)
            if again:
                reason = again
            elif isinstance(exc, OSError) and self.command:
                reason = f"cannot start the agent `{' '.join(self.command)}`: {exc.strerror or exc}"
            self.emit("closed", reason=reason)
            print(f"agentgen inspect: {reason}", file=sys.stderr, flush=True)
        finally:
            for fut in self.questions.values():
                if not fut.done():
                    fut.set_result(None)
            self.agent = None

    def _other_version(self, exc: BaseException) -> str | None:
        """For an agent that answered a protocol version this inspector's schema does not
        speak (the runtime client's `unspoken_version`): the command that speaks it."""
        data = getattr(exc, "data", None)
        if type(data) is not dict or data.get("name") != "UnsupportedProtocolVersion":
            return None
        details = data.get("details") or {}
        answered, spoken = details.get("answered"), details.get("supported") or []
        if type(answered) is not int:
            return None
        if self.url:
            target = f"--url {self.url}" + (" --websocket" if self.websocket else "")
        else:
            target = "-- " + shlex.join(self.command)
        said = " and ".join(map(str, spoken))
        return (
            f"the agent speaks ACP protocol version {answered}; this inspector was started "
            f"for version {said} (its --schema, else the locked default): run "
            f"`agentgen inspect --schema v{answered} {target}`"
        )


def _version() -> str:
    from ..scaffold.project import agentgen_version

    return agentgen_version()
