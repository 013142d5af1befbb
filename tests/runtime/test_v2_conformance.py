"""v2 conformance (issue 22): what a strict v2 peer checks, one test per rule.

- the wire check is strict on what the runtime sends (a value the models' receive-side
  leniency would default, drop or coerce is a violation);
- capability markers: `{}` = supported, absent = not, on revisions whose schema says so
  (booleans only where the schema types the field boolean);
- JSON-RPC batches over stdio and WebSocket;
- `session/resume` replay primers.

Agents are generated from every locked v2 schema (tests/schemas.lock.json: `v2/...` and
`v2-<npm version>/...`), so a new draft release is one lock entry away.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import hardening_support as hs
import orjson
import pytest
from project_support import import_from, write_project
from wait_support import Arrivals

LOCK = json.loads((Path(__file__).resolve().parents[1] / "schemas.lock.json").read_text())
V2_REVS = sorted({rel.split("/")[0] for rel in LOCK if rel.startswith("v2")})


def _build(tmp: Path, shared_acp: Path, rev: str, package: str) -> dict[str, Any]:
    env = hs.build(tmp, shared_acp, package, rev=rev, unstable=False)
    handlers = hs.load(tmp, package)
    return {
        "env": env,
        "package": package,
        "agent": handlers.Agent,
        "serve": hs.runtime_of(package, "serve"),
        "wirecheck": hs.runtime_of(package, "wirecheck"),
        "models": __import__(f"{package}._generated.models", fromlist=["_"]),
    }


@pytest.fixture(scope="module", params=V2_REVS)
def v2(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, shared_acp: Path):
    rev = request.param
    package = "conf_" + rev.replace("-", "_").replace(".", "_")
    return _build(tmp_path_factory.mktemp(package), shared_acp, rev, package)


@pytest.fixture(scope="module")
def v1(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    return _build(tmp_path_factory.mktemp("conf_v1"), shared_acp, "v1", "conf_v1")


@pytest.fixture
def own_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Violations provoked on purpose go to the test's own file, not the suite's."""
    log = tmp_path / "violations.jsonl"
    monkeypatch.setenv("ACP_WIRE_CHECK", "1")
    monkeypatch.setenv("ACP_WIRE_CHECK_LOG", str(log))
    return log


class InProcess:
    """One agent connection in this process: frames fed in, frames written collected."""

    def __init__(self, fa: dict[str, Any]) -> None:
        self.out: list[Any] = []
        self.arrivals = Arrivals()

        async def sink(batch: list[tuple[bytes, Any]]) -> None:
            self.out.extend(orjson.loads(f) for f, _ in batch)
            self.arrivals.arrived()

        self.conn = fa["serve"].agent_connection(fa["agent"](), sink)

    async def call(self, rid: Any, method: str, params: Any) -> dict[str, Any]:
        self.conn.feed(
            orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        )

        def answer() -> dict[str, Any] | None:
            return next(
                (
                    m
                    for m in self.out
                    if type(m) is dict and m.get("id") == rid and "method" not in m
                ),
                None,
            )

        await self.arrivals.until(f"an answer to {method}", answer)
        m = answer()
        assert m is not None
        return m


V2_INIT = {"protocolVersion": 2, "info": {"name": "conformance", "version": "0"}}


def _booleans(value: Any, path: str = "") -> list[str]:
    if type(value) is bool:
        return [path]
    if type(value) is dict:
        return [p for k, v in value.items() for p in _booleans(v, f"{path}/{k}")]
    if type(value) is list:
        return [p for i, v in enumerate(value) for p in _booleans(v, f"{path}/{i}")]
    return []


def test_strict_send_check_refuses_a_boolean_where_v2_wants_a_marker(
    v2: dict[str, Any], own_log: Path
) -> None:
    """The v2 models accept `true` for a capability marker on receive (the schema's
    `x-deserialize-default-on-error`: it reads as absent); sending it is a violation that
    raises in the sender, located at the field. The same frame with `{}` passes."""
    wc = v2["wirecheck"]
    owner = v2["agent"]()
    check = wc.for_owner(owner)
    assert check is not None

    def frame(marker: Any) -> bytes:
        result = {
            "protocolVersion": 2,
            "info": {"name": "a", "version": "1"},
            "capabilities": {"session": {"prompt": {"embeddedContext": marker}}},
        }
        return orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": result})

    check.sent(frame({}), "initialize")
    with pytest.raises(wc.WireCheckError) as err:
        check.sent(frame(True), "initialize")
    text = str(err.value)
    assert "initialize result (InitializeResponse)" in text
    assert "/capabilities/session/prompt/embeddedContext: true" in text
    assert "a receiver reads null" in text
    assert len(own_log.read_text().splitlines()) == 1  # recorded for the harness too


def test_strict_send_check_refuses_a_value_the_models_coerce(
    v2: dict[str, Any], own_log: Path
) -> None:
    """A string where the schema wants an integer (pydantic's lax mode coerces "5" to 5 on
    receive): a strict peer refuses it, so sending it is a violation."""
    wc = v2["wirecheck"]
    check = wc.for_owner(v2["agent"]())
    assert check is not None

    def frame(used: Any) -> bytes:
        update = {"sessionUpdate": "usage_update", "used": used, "size": 10}
        params = {"sessionId": "s1", "update": update}
        return orjson.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params})

    check.sent(frame(5), None)
    with pytest.raises(wc.WireCheckError, match=r'/update/used: "5" is not a value'):
        check.sent(frame("5"), None)


def test_v2_initialize_sends_capability_markers_never_booleans(v2: dict[str, Any]) -> None:
    """On v2 every capability the agent advertises is an object marker: embedded context
    (how JSON input travels) is `{}`, image and audio are left out, and no boolean sits
    anywhere in the capabilities (session methods included)."""

    async def main() -> None:
        p = InProcess(v2)
        r = await p.call(1, "initialize", V2_INIT)
        caps = r["result"]["capabilities"]
        assert caps["session"]["prompt"] == {"embeddedContext": {}}
        assert _booleans(caps) == []
        session = caps["session"]
        assert all(v == {} for k, v in session.items() if k not in ("prompt", "mcp")), caps
        assert session["mcp"] == {"http": {}, "stdio": {}}  # the MCP transports it connects
        await p.conn.close()

    asyncio.run(main())


def test_v1_initialize_keeps_boolean_prompt_flags(v1: dict[str, Any]) -> None:
    """v1 types PromptCapabilities' fields boolean: there they stay true/false."""

    async def main() -> None:
        p = InProcess(v1)
        r = await p.call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        prompt = r["result"]["agentCapabilities"]["promptCapabilities"]
        assert prompt == {"image": False, "audio": False, "embeddedContext": True}
        await p.conn.close()

    asyncio.run(main())


def test_revision_description_reads_flags_from_the_schema(
    v1: dict[str, Any], v2: dict[str, Any]
) -> None:
    """Which capability fields are booleans comes from each schema's types."""
    r1 = __import__(f"{v1['package']}._generated.revision", fromlist=["_"]).REVISION
    r2 = __import__(f"{v2['package']}._generated.revision", fromlist=["_"]).REVISION
    assert r1.agent_capabilities.prompt_flags == ("audio", "embeddedContext", "image")
    assert r2.agent_capabilities.prompt_flags == ()
    assert r2.agent_capabilities.session_flags == ()


# ---- JSON-RPC batches --------------------------------------------------------------
ALL_REVS = ["v1", *V2_REVS]


@pytest.fixture(scope="module", params=ALL_REVS)
def any_rev(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, shared_acp: Path
) -> dict[str, Any]:
    rev = request.param
    package = "batch_" + rev.replace("-", "_").replace(".", "_")
    fa = _build(tmp_path_factory.mktemp(package), shared_acp, rev, package)
    fa["rev"] = rev
    fa["init"] = {"protocolVersion": 1, "clientCapabilities": {}} if rev == "v1" else dict(V2_INIT)
    fa["new"] = {"cwd": "/tmp", "mcpServers": []} if rev == "v1" else {"cwd": "/tmp"}
    return fa


class RawInProcess:
    """Frames (objects or arrays) fed to one agent connection; what it writes, parsed."""

    def __init__(self, fa: dict[str, Any]) -> None:
        self.out: asyncio.Queue[Any] = asyncio.Queue()

        async def sink(batch: list[tuple[bytes, Any]]) -> None:
            for frame, _ in batch:
                self.out.put_nowait(orjson.loads(frame))

        self.conn = fa["serve"].agent_connection(fa["agent"](), sink)

    async def send(self, obj: Any) -> None:
        self.conn.feed(orjson.dumps(obj))

    async def recv(self, timeout: float = 10) -> Any:
        return await asyncio.wait_for(self.out.get(), timeout)

    async def close(self) -> None:
        await self.conn.close()


def _req(rid: Any, method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def _note(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


async def _ready(peer: Any, fa: dict[str, Any]) -> None:
    await peer.send(_req(0, "initialize", fa["init"]))
    r = await peer.recv()
    assert type(r) is dict and "result" in r, r


async def _usable(peer: Any, fa: dict[str, Any], rid: Any = "after") -> None:
    """The connection still serves a plain request."""
    await peer.send(_req(rid, "session/new", fa["new"]))
    while True:
        r = await peer.recv()
        if type(r) is dict and r.get("id") == rid and "method" not in r:
            break
    assert "sessionId" in r["result"], r


async def rule_requests(peer: Any, fa: dict[str, Any]) -> None:
    """One array with every response, ids echoed exactly (integer and string)."""
    await peer.send(
        [
            _req(7, "session/new", fa["new"]),
            _note("$/cancel_request", {"requestId": 999}),
            _req("s-7", "session/new", fa["new"]),
            _req(8, "no/such_method", {}),
        ]
    )
    got = await peer.recv()
    assert type(got) is list, got
    by_id = {json.dumps(r["id"]): r for r in got}
    assert set(by_id) == {"7", '"s-7"', "8"}, got
    assert "sessionId" in by_id["7"]["result"] and "sessionId" in by_id['"s-7"']["result"]
    assert by_id["8"]["error"]["code"] == -32601
    await _usable(peer, fa)


async def rule_notifications_only(peer: Any, fa: dict[str, Any]) -> None:
    """A batch of notifications gets no reply at all: the next frame is the next answer."""
    await peer.send([_note("$/cancel_request", {"requestId": 1}), _note("_acme/ping", {"n": 1})])
    await _usable(peer, fa, rid="first")
    await peer.send(_req("probe", "session/new", fa["new"]))
    r = await peer.recv()
    assert type(r) is dict and r.get("id") == "probe", r


async def rule_invalid_entries(peer: Any, fa: dict[str, Any]) -> None:
    """Per-entry -32600 with id null; valid siblings still run."""
    await peer.send([17, True, None])
    got = await peer.recv()
    assert type(got) is list and len(got) == 3, got
    assert all(e["id"] is None and e["error"]["code"] == -32600 for e in got), got
    await peer.send([1, _req(5, "session/new", fa["new"]), {"foo": "bar"}])
    got = await peer.recv()
    assert type(got) is list and len(got) == 3, got
    errors = [e for e in got if "error" in e]
    assert len(errors) == 2 and all(e["id"] is None for e in errors), got
    assert all(e["error"]["code"] == -32600 for e in errors), got
    (ok,) = [e for e in got if "result" in e]
    assert ok["id"] == 5 and "sessionId" in ok["result"]
    await _usable(peer, fa)


async def rule_empty(peer: Any, fa: dict[str, Any]) -> None:
    """`[]`: a single -32600 object with id null, never an array."""
    await peer.send([])
    got = await peer.recv()
    assert type(got) is dict, got
    assert got["id"] is None and got["error"]["code"] == -32600
    await _usable(peer, fa)


RULES = {
    "requests": rule_requests,
    "notifications_only": rule_notifications_only,
    "invalid_entries": rule_invalid_entries,
    "empty": rule_empty,
}


def _in_process(fa: dict[str, Any], rule: Any) -> None:
    async def main() -> None:
        peer = RawInProcess(fa)
        await _ready(peer, fa)
        await rule(peer, fa)
        await peer.close()

    asyncio.run(main())


@pytest.mark.wire_check_send_only  # bad entries on purpose
def test_batch_of_requests_gets_one_array_with_every_id_echoed(any_rev: dict[str, Any]) -> None:
    _in_process(any_rev, rule_requests)


@pytest.mark.wire_check_send_only  # bad entries on purpose
def test_batch_of_notifications_only_gets_no_reply(any_rev: dict[str, Any]) -> None:
    _in_process(any_rev, rule_notifications_only)


@pytest.mark.wire_check_send_only  # bad entries on purpose
def test_batch_invalid_entries_get_per_entry_errors_and_siblings_run(
    any_rev: dict[str, Any],
) -> None:
    _in_process(any_rev, rule_invalid_entries)


@pytest.mark.wire_check_send_only  # bad entries on purpose
def test_empty_batch_gets_a_single_error_object(any_rev: dict[str, Any]) -> None:
    _in_process(any_rev, rule_empty)


def test_batch_answers_after_every_request_in_it_is_processed(any_rev: dict[str, Any]) -> None:
    """A prompt turn and a quick request in one batch: the array comes after the turn
    (v1: every update of the turn before it), holding both answers."""

    async def main() -> None:
        peer = RawInProcess(any_rev)
        await _ready(peer, any_rev)
        await peer.send(_req(1, "session/new", any_rev["new"]))
        sid = (await peer.recv())["result"]["sessionId"]
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "seq t 5 0.01"}]}
        await peer.send([_req(2, "session/prompt", prompt), _req(3, "session/new", any_rev["new"])])
        frames = []
        while True:
            f = await peer.recv()
            frames.append(f)
            if type(f) is list:
                break
        assert sorted(r["id"] for r in frames[-1]) == [2, 3]
        texts = [
            m["params"]["update"].get("content", {}).get("text")
            for m in frames[:-1]
            if type(m) is dict and m.get("method") == "session/update"
        ]
        if any_rev["rev"] == "v1":  # the turn ends before its answer
            assert [t for t in texts if t] == [f"t:{i}" for i in range(5)]
        await peer.close()

    asyncio.run(main())


class StdioRaw:
    """A generated agent over stdio: raw JSON lines (objects and arrays)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, env: dict[str, str], package: str) -> StdioRaw:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            package,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
        )
        return cls(proc)

    async def send(self, obj: Any) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(orjson.dumps(obj) + b"\n")
        await self.proc.stdin.drain()

    async def recv(self, timeout: float = 10) -> Any:
        assert self.proc.stdout
        return orjson.loads(await asyncio.wait_for(self.proc.stdout.readline(), timeout))

    async def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        assert await asyncio.wait_for(self.proc.wait(), 10) == 0


class WsRaw:
    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def send(self, obj: Any) -> None:
        await self.ws.send(orjson.dumps(obj).decode())

    async def recv(self, timeout: float = 10) -> Any:
        return orjson.loads(await asyncio.wait_for(self.ws.recv(), timeout))

    async def close(self) -> None:
        await self.ws.close()


@pytest.mark.slow
@pytest.mark.wire_check_send_only  # bad entries on purpose
def test_batches_over_stdio_follow_every_rule(any_rev: dict[str, Any]) -> None:
    async def main() -> None:
        for rule in RULES.values():
            peer = await StdioRaw.start(any_rev["env"], any_rev["package"])
            await _ready(peer, any_rev)
            await rule(peer, any_rev)
            await peer.close()

    asyncio.run(main())


@pytest.mark.slow
@pytest.mark.wire_check_send_only  # bad entries on purpose
def test_batches_over_websocket_follow_every_rule(any_rev: dict[str, Any]) -> None:
    import websockets

    port = hs.free_port()
    proc = hs.start_http(any_rev["env"], any_rev["package"], port)

    async def main() -> None:
        for rule in RULES.values():
            async with websockets.connect(f"ws://127.0.0.1:{port}/acp") as ws:
                peer = WsRaw(ws)
                await _ready(peer, any_rev)
                await rule(peer, any_rev)

    try:
        asyncio.run(main())
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
@pytest.mark.wire_check_send_only  # bad entries on purpose
def test_batch_post_over_http_is_refused_501(any_rev: dict[str, Any]) -> None:
    """The HTTP transport RFD: a batch POST gets 501 (the connection is untouched)."""
    import httpx

    port = hs.free_port()
    proc = hs.start_http(any_rev["env"], any_rev["package"], port)
    try:
        r = httpx.post(
            f"http://127.0.0.1:{port}/acp",
            content=orjson.dumps([_req(1, "initialize", any_rev["init"])]),
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            },
        )
        assert r.status_code == 501
    finally:
        proc.terminate()
        proc.wait(10)


def _build_client(
    tmp: Path, shared_acp: Path, rev: str, package: str, transport: str = "stdio"
) -> Path:
    schema = json.loads((shared_acp / rev / "schema.json").read_text())
    write_project(
        tmp, package, schema=schema, manifest=hs.MANIFEST, role="client", transport=transport
    )
    return tmp


@pytest.mark.slow
def test_generated_client_sends_a_batch_and_gets_typed_results(
    any_rev: dict[str, Any], tmp_path: Path, shared_acp: Path
) -> None:
    """`AgentConnection.batch(...)`: one array frame on v1 (separate messages on v2, which
    has no batches), each result typed as its method's result model in the order given, a
    failed request's RpcError returned in its place."""
    package = "bclient_" + any_rev["package"]
    root = _build_client(tmp_path, shared_acp, any_rev["rev"], package)
    import_from(root, package)  # a generated project, not on pytest's pythonpath
    dispatcher = __import__(f"{package}._generated.dispatcher", fromlist=["_"])
    client_rt = __import__(f"{package}._generated.runtime.client.client", fromlist=["_"])
    errors = __import__(f"{package}._generated.runtime.wire.errors", fromlist=["_"])
    models = __import__(f"{package}._generated.models", fromlist=["_"])

    async def main() -> None:
        client = dispatcher.ClientBase()
        cm = client_rt.spawn_agent(
            client,
            dispatcher.AgentConnection,
            sys.executable,
            "-m",
            any_rev["package"],
            env=any_rev["env"],
        )
        async with cm as agent:
            await agent.negotiate(client)
            new = any_rev["new"]
            if any_rev["rev"] != "v1":  # v2 removed batches: one message each instead

                async def no_batch(calls: Any) -> Any:
                    raise AssertionError(f"a batch sent on v2: {calls}")

                agent.connection.request_batch = no_batch
            a, bad, b = await agent.batch(
                ("session/new", new), ("_acme/unknown", {}), ("session/new", new)
            )
            assert isinstance(a, models.NewSessionResponse), a
            assert isinstance(b, models.NewSessionResponse), b
            assert a.session_id != b.session_id
            assert isinstance(bad, errors.RpcError) and bad.code == -32601
            # still usable
            assert isinstance(await agent.session_new(new), models.NewSessionResponse)

    asyncio.run(main())


# ---- session/resume replay primers ---------------------------------------------------
def test_v2_resume_replay_primes_each_chunked_message_with_an_empty_whole_message(
    v2: dict[str, Any],
) -> None:
    """In a `session/resume` replay, each `*_chunk` update for a message id comes after
    the whole-message update for that id (`agent_message_chunk` after `agent_message`)
    with `content: []`: a client that patches messages by id starts each one empty."""
    store_mod = hs.runtime_of(v2["package"], "store")
    rev = __import__(f"{v2['package']}._generated.revision", fromlist=["_"]).REVISION
    pairs = dict(rev.sessions.replay_primers)
    assert pairs["agent_message_chunk"] == "agent_message"

    async def main() -> None:
        store = store_mod.MemorySessionStore()

        def connection(sink: Any) -> Any:
            return v2["serve"].agent_connection(v2["agent"](), sink, store=store)

        a = hs.Core(connection)
        await a.call("initialize", V2_INIT)
        sid = (await a.call("session/new", {"cwd": "/w"}))["result"]["sessionId"]
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "seq t 3"}]}
        a.send("session/prompt", prompt)
        await a.until(  # the turn runs on after the answer: wait for its idle
            lambda: any(
                m.get("method") == "session/update" and m["params"]["update"].get("state") == "idle"
                for m in a.msgs
            ),
            what="the turn's idle update",
        )
        await a.conn.close()

        b = hs.Core(connection)
        await b.call("initialize", V2_INIT)
        resume = {"sessionId": sid, "cwd": "/w", "replayFrom": {"type": "start"}}
        await b.call("session/resume", resume)
        await b.conn.close()
        replay = [m["params"]["update"] for m in b.msgs if m.get("method") == "session/update"]
        chunks = [u for u in replay if u["sessionUpdate"] in pairs]
        assert len([u for u in chunks if u["sessionUpdate"] == "agent_message_chunk"]) == 3
        for i, u in enumerate(replay):
            whole = pairs.get(u["sessionUpdate"])
            if whole is None:
                continue
            first = next(
                (
                    (j, w)
                    for j, w in enumerate(replay)
                    if w["sessionUpdate"] == whole and w.get("messageId") == u["messageId"]
                ),
                None,
            )
            assert first is not None and first[0] < i, (u, replay)
            assert first[1]["content"] == [], first

    asyncio.run(main())


# ---- tracking the draft ----------------------------------------------------------------
def test_revision_report_says_what_moved_between_locked_v2_drafts(shared_acp: Path) -> None:
    """Both locked v2 drafts (npm 2.0.0, 2.4.0) are tested; the revision report between
    them names what moved, so a new release is one lock entry and one report away."""
    from generator.protocol.diff import diff_schemas

    assert {"v2", "v2-2.4.0"} <= set(V2_REVS)
    old = json.loads((shared_acp / "v2" / "schema.json").read_text())
    new = json.loads((shared_acp / "v2-2.4.0" / "schema.json").read_text())
    report = diff_schemas(old, new)
    added = {c.subject for c in report.entries if c.kind == "method-added"}
    assert {"terminal/cancel", "tool_call/cancel"} <= added, added
    required = [c for c in report.entries if c.subject == "AvailableCommand.type"]
    assert required and all(c.breaking for c in required), required


def test_v2_client_declares_capability_markers_at_initialize(
    v2: dict[str, Any], tmp_path: Path, shared_acp: Path, own_log: Path
) -> None:
    """What the generated client sends at `initialize` on v2: markers (`{}`), no boolean
    anywhere, and the frame passes the strict send check of the client side."""
    rev = "v2-2.4.0" if "2_4_0" in v2["package"] else "v2"
    package = "iclient_" + v2["package"]
    root = _build_client(tmp_path, shared_acp, rev, package)
    import_from(root, package)  # a generated project, not on pytest's pythonpath
    dispatcher = __import__(f"{package}._generated.dispatcher", fromlist=["_"])
    client_rt = __import__(f"{package}._generated.runtime.client.client", fromlist=["_"])
    wc = __import__(f"{package}._generated.runtime.wire.wirecheck", fromlist=["_"])
    sent: list[dict[str, Any]] = []

    class Recorder:
        async def request(self, method: str, params: Any) -> Any:
            sent.append(params)
            return {"protocolVersion": 2, "info": {"name": "a", "version": "1"}}

    client = dispatcher.ClientBase()
    proxy = dispatcher.AgentConnection(Recorder())
    asyncio.run(client_rt.negotiate(proxy, client))
    (params,) = sent
    assert params["capabilities"] == {"elicitation": {"form": {}}}
    assert _booleans(params) == []
    check = wc.for_owner(client)
    assert check is not None
    check.sent(
        orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}), None
    )
    assert not own_log.exists()


@pytest.mark.slow
def test_generated_v2_client_batch_is_separate_messages_over_http_and_websocket(
    v2: dict[str, Any], tmp_path: Path, shared_acp: Path
) -> None:
    """v2 has no batches: the generated client's `batch()` sends each request as a
    message of its own, so over HTTP (which refuses a batch POST, 501) and over the
    WebSocket of the same agent it gets its typed results."""
    rev = "v2-2.4.0" if "2_4_0" in v2["package"] else "v2"
    package = "hclient_" + v2["package"]
    root = _build_client(tmp_path, shared_acp, rev, package, transport="http")
    import_from(root, package)  # a generated project, not on pytest's pythonpath
    dispatcher = __import__(f"{package}._generated.dispatcher", fromlist=["_"])
    http_client = __import__(f"{package}._generated.runtime.client.http_client", fromlist=["_"])
    errors = __import__(f"{package}._generated.runtime.wire.errors", fromlist=["_"])
    models = __import__(f"{package}._generated.models", fromlist=["_"])
    port = hs.free_port()
    proc = hs.start_http(v2["env"], v2["package"], port)

    async def main() -> None:
        client = dispatcher.ClientBase()
        url = f"http://127.0.0.1:{port}/acp"
        async with http_client.connect_http(client, dispatcher.AgentConnection, url) as agent:
            await agent.negotiate(client)
            got = await asyncio.wait_for(
                agent.batch(("session/new", {"cwd": "/w"}), ("_acme/unknown", {})), 10
            )
            assert isinstance(got[0], models.NewSessionResponse), got
            assert isinstance(got[1], errors.RpcError) and got[1].code == -32601, got
            new = await agent.session_new({"cwd": "/w"})
            assert isinstance(new, models.NewSessionResponse)
        # the same client over the agent's WebSocket: batches work there
        async with http_client.connect_http(
            client, dispatcher.AgentConnection, url, websocket=True
        ) as agent:
            await agent.negotiate(client)
            a, b = await asyncio.wait_for(
                agent.batch(("session/new", {"cwd": "/w"}), ("session/new", {"cwd": "/w"})), 10
            )
            assert isinstance(a, models.NewSessionResponse), a
            assert isinstance(b, models.NewSessionResponse), b

    try:
        asyncio.run(main())
    finally:
        proc.terminate()
        proc.wait(10)
