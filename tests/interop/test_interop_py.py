"""Interop with the official Python SDK (`agent-client-protocol[http]` 0.12.1, import `acp`)
as the client of our generated example agents (echo, mail-composer, research), protocol v1,
over stdio, HTTP (Streamable HTTP with SSE) and WebSocket; and one agent generated with the
v1 and the v2 schema serving a v1 client (this SDK) and then a v2 client (the official
TypeScript SDK 2.4.0, `experimental/v2`).

Test ids read as the matrix: test_py_client_<feature>[<transport>-<agent>]. Each agent is
generated the way tests/interop/test_interop_ts.py builds them (render_generated from
examples/<agent>/ with the v1 schema of the npm package `@agentclientprotocol/sdk` 2.4.0,
fetched once and cached; research on that package's v1 *unstable* schema, which has the
`providers/*` methods). A stdio agent runs as `python -m <package>` (what its console
script runs), an HTTP agent as `python -m <package> --port 0` (it prints
`listening on http://127.0.0.1:PORT/acp (...)` on stderr first). Every frame our runtime
sends or receives is checked against the revision's schema (tests/conftest.py), and the
SDK parses every frame it receives with its own models.

`$/cancel_request`: SDK 0.12.1 has no API that sends it (cancelling the task awaiting
`conn.prompt(...)` only forgets the request locally; the schema class
`CancelRequestNotification` exists but nothing uses it), so the test sends the raw
notification through the SDK's own JSON-RPC connection (`ClientSideConnection._conn`,
`send_notification`), naming the request id the SDK gave the prompt (seen with the
connection's public `add_observer`); the SDK then hands the -32800 answer to the waiting
`conn.prompt(...)` as a `RequestError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import acp
import pytest
from acp.exceptions import RequestError
from acp.http.client import create_http_stream
from acp.ws.client import create_websocket_stream
from project_support import write_project

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
NPM = "npm:@agentclientprotocol/sdk@2.4.0#schema/{}"

pytestmark = pytest.mark.slow  # interop with the SDK: `make test`, not `make test-fast`

TRANSPORTS = ["stdio", "http", "ws"]
AGENTS = ["echo", "mail-composer", "research"]
# research serves `providers/*`: the unstable v1 schema has them (protocol version 1 too)
SCHEMA_OF = {"echo": "v1/schema.json", "mail-composer": "v1/schema.json"}
SCHEMA_OF["research"] = "v1/schema.unstable.json"
TOKEN = "py-peer-bearer-token-7731"  # research's bearer auth (HTTP): RESEARCH_AGENT_TOKEN
BRIEF = {"brief": "Lunch on Friday at noon. Bring the slides.", "recipients": ["ana@example.com"]}


# What SDK 0.12.1 logs although nothing is wrong on the wire, and why.
SDK_GAPS = {
    # The agent cancels its pending elicitation/create when the client's session/cancel
    # ends the turn (ACP: `$/cancel_request` may be sent by either side; the v1 schema has
    # it with x-side "protocol"). SDK 0.12.1 does not know the method (acp/meta.py has no
    # entry), so its router raises "method not found" for the notification and logs it;
    # it sends nothing back (a notification), which is all ACP asks of it. Whether it is
    # sent depends on whether the client's "cancel" answer to the elicitation reached the
    # agent before the turn's cancellation did: seen in test_py_client_cancel[*-mail-*].
    r"^root: Unhandled error while handling notification method=\$/cancel_request$",
}


@pytest.fixture(autouse=True)
def sdk_refused_nothing(caplog: pytest.LogCaptureFixture) -> Any:
    """What the SDK logs at warning or above (a frame it could not parse or route, a
    handler failure, a transport error) fails the test: the SDK drops such frames quietly
    (except SDK_GAPS, each with its reason)."""
    caplog.set_level(logging.WARNING)
    yield
    logged = [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.get_records("call")
        if r.levelno >= logging.WARNING
    ]
    assert [m for m in logged if not any(re.match(p, m) for p in SDK_GAPS)] == [], logged


def _schema(path: str) -> dict[str, Any]:
    from generator.sources import load_schema

    return dict(load_schema(NPM.format(path)).data)


_BUILT: dict[tuple[str, str], tuple[str, dict[str, str], Path]] = {}


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """build(example, transport) -> (package, env, dir): the example agent, generated for
    stdio or HTTP (HTTP and WebSocket are one HTTP agent)."""
    from generator.manifest.load import load_manifest

    tmp = tmp_path_factory.mktemp("py-peer-agents")

    def make(example: str, transport: str) -> tuple[str, dict[str, str], Path]:
        kind = "stdio" if transport == "stdio" else "http"
        key = (example, kind)
        if key in _BUILT:
            return _BUILT[key]
        package = f"py_{example.replace('-', '_')}_{kind}"
        manifest = load_manifest(REPO / "examples" / example / "agent.yaml").data
        write_project(
            tmp,
            package,
            schema=_schema(SCHEMA_OF[example]),
            manifest=manifest,
            transport=kind,
            source_label=NPM.format(SCHEMA_OF[example]),
            handlers=(REPO / "examples" / example / "handlers.py").read_text(),
            main="import sys\n\nfrom ._generated import run_agent\nfrom .handlers import Agent\n\n"
            f"run_agent(Agent, sys.argv[1:], transport={kind!r})\n",
        )
        env = {
            **os.environ,
            "PYTHONPATH": str(tmp),
            "ACP_SESSION_DB": str(tmp / f"{package}.db"),
            "RESEARCH_AGENT_TOKEN": TOKEN,
        }
        _BUILT[key] = (package, env, tmp)
        return _BUILT[key]

    return make


# ---- the SDK client ------------------------------------------------------------------------


class Peer:
    """The SDK's Client: records updates and the agent's requests, answers interrupts."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, dict[str, Any]]] = []  # (sessionId, update as wire JSON)
        self.requests: list[tuple[str, dict[str, Any]]] = []  # (method, params as seen)
        self.elicitation: dict[str, Any] | None = None  # the answer to elicitation/create
        self.permission: str | None = "accept"  # the optionId chosen; None: cancelled
        self.hold = asyncio.Event()  # set: answer interrupts (clear it to keep them pending)
        self.hold.set()
        self.changed = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        self.updates.append((session_id, update.model_dump(by_alias=True, mode="json")))
        self.changed.set()

    async def create_elicitation(self, message: str, mode: Any, **kw: Any) -> Any:
        self.requests.append(("elicitation/create", {"message": message, "mode": mode, **kw}))
        self.changed.set()
        await self.hold.wait()
        if self.elicitation is None:
            return acp.schema.CancelElicitationResponse(action="cancel")
        return acp.AcceptElicitationResponse(**self.elicitation)

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kw: Any
    ) -> Any:
        self.requests.append(
            (
                "session/request_permission",
                {"sessionId": session_id, "toolCall": tool_call, "options": options},
            )
        )
        self.changed.set()
        await self.hold.wait()
        S = acp.schema
        if self.permission is None:
            return S.RequestPermissionResponse(outcome=S.DeniedOutcome(outcome="cancelled"))
        return S.RequestPermissionResponse(
            outcome=S.AllowedOutcome(outcome="selected", option_id=self.permission)
        )

    def texts(self, sid: str, kind: str = "agent_message_chunk") -> list[str]:
        return [
            u["content"]["text"]
            for s, u in self.updates
            if s == sid and u.get("sessionUpdate") == kind and u["content"].get("type") == "text"
        ]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            self.changed.clear()
            left = deadline - time.monotonic()
            assert left > 0, f"timed out; updates={self.updates} requests={self.requests}"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)


Connect = Callable[[Peer], "contextlib.AbstractAsyncContextManager[acp.ClientSideConnection]"]


@contextlib.asynccontextmanager
async def agent(
    built: tuple[str, dict[str, str], Path], transport: str, **env: str
) -> AsyncIterator[Connect]:
    """The agent for one test; yields connect(peer): one SDK connection (stdio: one agent
    process per connection, sharing its session store; HTTP/WebSocket: one agent process
    for the test, one ACP connection each)."""
    package, base_env, tmp = built
    full_env = {**base_env, **env}
    logs: list[Path] = []

    def log_file() -> Path:
        path = tmp / f"{package}-{os.getpid()}-{time.monotonic_ns()}.log"
        logs.append(path)
        return path

    if transport == "stdio":

        @contextlib.asynccontextmanager
        async def connect_stdio(peer: Peer) -> AsyncIterator[acp.ClientSideConnection]:
            path = log_file()
            with path.open("wb") as err:
                async with acp.spawn_agent_process(
                    cast(Any, peer),  # a duck-typed acp.Client
                    PY,
                    "-m",
                    package,
                    env=full_env,
                    transport_kwargs={"stderr": err.fileno(), "shutdown_timeout": 10.0},
                    use_unstable_protocol=True,
                ) as (conn, proc):
                    yield conn
                # stdin closed: the agent ends on EOF, cleanly
                assert proc.returncode == 0, path.read_text()
            assert "Traceback" not in path.read_text(), path.read_text()

        yield connect_stdio
        return

    path = log_file()
    err = path.open("wb")
    proc = await asyncio.create_subprocess_exec(
        PY,
        "-m",
        package,
        "--port",
        "0",
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            first = path.read_text().partition("\n")
            if first[1]:
                break
            assert proc.returncode is None, path.read_text()
            assert time.monotonic() < deadline, "the HTTP agent did not start"
            await asyncio.sleep(0.05)  # a poll: the file another process writes
        m = re.fullmatch(r"listening on (http://127\.0\.0\.1:(\d+)/acp) \(.*\)", first[0])
        assert m and m.group(2) != "0", first[0]
        url = m.group(1)
        headers = {"Authorization": f"Bearer {TOKEN}"} if package.startswith("py_research") else {}

        @contextlib.asynccontextmanager
        async def connect_http(peer: Peer) -> AsyncIterator[acp.ClientSideConnection]:
            if transport == "http":
                stream = create_http_stream(url, headers=headers)  # the SDK's own httpx client
            else:
                stream = await create_websocket_stream("ws" + url[4:], headers=headers)
            conn = acp.connect_to_agent(cast(Any, peer), stream, use_unstable_protocol=True)
            try:
                yield conn
            finally:
                await conn.close()

        yield connect_http
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        err.close()
    log = path.read_text()
    assert "Traceback" not in log, log


async def _init(conn: acp.ClientSideConnection, elicitation: bool = False) -> dict[str, Any]:
    S = acp.schema
    caps = S.ClientCapabilities()
    if elicitation:  # form elicitation declared: the agent may send elicitation/create
        caps = S.ClientCapabilities(
            elicitation=S.ElicitationCapabilities(form=S.ElicitationFormCapabilities())
        )
    init = await asyncio.wait_for(
        conn.initialize(
            protocol_version=1,
            client_capabilities=caps,
            client_info=S.Implementation(name="py-sdk-peer", version="0.12.1"),
        ),
        20,
    )
    return init.model_dump(by_alias=True, mode="json", exclude_none=True)


def _options(result: Any) -> dict[str, dict[str, Any]]:
    data = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return {o["id"]: o for o in data.get("configOptions") or ()}


async def _within(aw: Awaitable[Any], seconds: float = 20) -> Any:
    return await asyncio.wait_for(aw, seconds)


# ---- every agent, every transport: initialize, session/new, config, prompt, load ----------

AGENT_INFO = {
    "echo": ("echo-agent", "0.1.0"),
    "mail-composer": ("mail-composer", "0.1.0"),
    "research": ("research", "0.1.0"),
}


async def _one_turn(
    example: str, conn: acp.ClientSideConnection, peer: Peer, sid: str
) -> tuple[list[str], list[str]]:
    """One prompt to `example`; (the agent's streamed texts, the prompt's text blocks)."""
    if example == "echo":
        blocks = ["hello", " world", "!"]
        expected = blocks
    elif example == "mail-composer":
        peer.elicitation = {"action": "accept", "content": {"approved": True}}
        blocks = [json.dumps(BRIEF)]
        expected = None
    else:
        blocks = ["why is the sky blue?"]
        expected = None
    answer = await _within(conn.prompt(session_id=sid, prompt=[acp.text_block(t) for t in blocks]))
    assert answer.stop_reason == "end_turn"
    got = peer.texts(sid)  # the SDK waited for every update of the turn before answering
    if expected is not None:
        assert got == expected
    elif example == "mail-composer":
        assert [m for m, _ in peer.requests] == ["elicitation/create"]
        assert got and got[0].startswith("Dear Ana,")  # tone set to formal below
        assert "Bring the slides." in got[0]
    else:
        assert got[0].startswith("Using openai at https://api.openai.com/v1/"), got
        assert got[1:] and got[-1].startswith("Step 4:"), got
    return got, blocks


@pytest.mark.parametrize("example", AGENTS)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_py_client_lifecycle(build: Any, transport: str, example: str) -> None:
    """initialize answers v1 with the agent's identity and its session capabilities;
    session/new lists the manifest's config options (mail-composer: set_config_option
    changes the tone and the answer says so); a prompt streams updates the SDK accepts and
    ends `end_turn` (mail-composer: the approval interrupt arrives as elicitation/create,
    the client having declared form elicitation); on a NEW connection session/load
    replays the history as updates and the loaded session takes the next prompt."""
    built = build(example, transport)

    async def main() -> None:
        async with agent(built, transport) as connect:
            peer = Peer()
            async with connect(peer) as conn:
                init = await _init(conn, elicitation=True)
                assert init["protocolVersion"] == 1
                assert (init["agentInfo"]["name"], init["agentInfo"]["version"]) == (
                    AGENT_INFO[example]
                )
                assert init["agentCapabilities"]["loadSession"] is True, init
                new = await _within(conn.new_session(cwd="/tmp", mcp_servers=[]))
                sid = new.session_id
                options = _options(new)
                if example == "mail-composer":
                    assert options["tone"]["currentValue"] == "friendly"
                    assert [o["value"] for o in options["tone"]["options"]] == [
                        "formal",
                        "friendly",
                        "terse",
                    ]
                    changed = await _within(
                        conn.set_config_option(config_id="tone", session_id=sid, value="formal")
                    )
                    assert _options(changed)["tone"]["currentValue"] == "formal"
                    with pytest.raises(RequestError) as err:  # not one of the values
                        await _within(
                            conn.set_config_option(config_id="tone", session_id=sid, value="loud")
                        )
                    assert err.value.code == -32602
                else:
                    assert options == {}
                said, blocks = await _one_turn(example, conn, peer, sid)

            # a new connection (stdio: a new agent process on the same store)
            peer2 = Peer()
            async with connect(peer2) as conn:
                await _init(conn, elicitation=True)
                await _within(conn.load_session(cwd="/tmp", session_id=sid, mcp_servers=[]))
                # the history came back as updates before session/load answered
                await peer2.wait_for(lambda: peer2.texts(sid) == said)
                assert peer2.texts(sid, "user_message_chunk") == blocks
                if example == "mail-composer":  # the config survives the reload
                    peer2.elicitation = {"action": "accept", "content": {"approved": True}}
                peer2.updates.clear()
                answer = await _within(
                    conn.prompt(session_id=sid, prompt=[acp.text_block(json.dumps(BRIEF))])
                    if example == "mail-composer"
                    else conn.prompt(session_id=sid, prompt=[acp.text_block("again")])
                )
                assert answer.stop_reason == "end_turn"
                if example == "echo":
                    assert peer2.texts(sid) == ["again"]
                if example == "mail-composer":
                    assert peer2.texts(sid)[0].startswith("Dear Ana,")

    asyncio.run(main())


# ---- cancel: session/cancel mid-turn and $/cancel_request ---------------------------------


@pytest.mark.parametrize("example", ["research", "mail-composer"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_py_client_cancel(build: Any, transport: str, example: str) -> None:
    """session/cancel mid-turn ends the turn `cancelled` (research: while it streams its
    steps; mail-composer: while its interrupt waits for the client, which then answers the
    pending request as cancelled, as ACP asks); the session takes the next prompt. (echo
    answers at once: it has no mid-turn to cancel.)"""
    built = build(example, transport)

    async def main() -> None:
        async with agent(built, transport, RESEARCH_STEP_DELAY="0.2") as connect:
            peer = Peer()
            async with connect(peer) as conn:
                await _init(conn, elicitation=True)
                sid = (await _within(conn.new_session(cwd="/tmp", mcp_servers=[]))).session_id
                if example == "research":
                    text = "why is the sky blue?"
                    started = lambda: len(peer.texts(sid)) >= 2  # noqa: E731
                else:
                    text = json.dumps(BRIEF)
                    peer.hold.clear()  # the interrupt stays unanswered
                    started = lambda: bool(peer.requests)  # noqa: E731
                turn = asyncio.ensure_future(
                    conn.prompt(session_id=sid, prompt=[acp.text_block(text)])
                )
                await peer.wait_for(started)
                await conn.cancel(session_id=sid)
                peer.elicitation = None  # pending interrupts are answered "cancel"
                peer.hold.set()
                answer = await _within(turn)
                assert answer.stop_reason == "cancelled"
                if example == "research":
                    assert len(peer.texts(sid)) < 6  # it stopped before the last step
                peer.updates.clear()
                peer.requests.clear()
                peer.elicitation = {"action": "accept", "content": {"approved": True}}
                answer = await _within(conn.prompt(session_id=sid, prompt=[acp.text_block(text)]))
                assert answer.stop_reason == "end_turn"

    asyncio.run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_py_client_research_cancel_request(build: Any, transport: str) -> None:
    """`$/cancel_request` naming the running session/prompt (sent raw through the SDK's
    connection: SDK 0.12.1 has no API for it): the prompt is answered -32800, which the
    SDK hands to the waiting call; the session is free again."""
    built = build("research", transport)

    async def main() -> None:
        async with agent(built, transport, RESEARCH_STEP_DELAY="0.2") as connect:
            peer = Peer()
            async with connect(peer) as conn:
                await _init(conn)
                sid = (await _within(conn.new_session(cwd="/tmp", mcp_servers=[]))).session_id
                prompt_ids: list[Any] = []

                def seen(event: Any) -> None:
                    msg = event.message
                    if msg.get("method") == "session/prompt" and "id" in msg:
                        prompt_ids.append(msg["id"])

                conn._conn.add_observer(seen)
                turn = asyncio.ensure_future(
                    conn.prompt(session_id=sid, prompt=[acp.text_block("a long question")])
                )
                await peer.wait_for(lambda: len(peer.texts(sid)) >= 2)
                (rid,) = prompt_ids
                await conn._conn.send_notification("$/cancel_request", {"requestId": rid})
                with pytest.raises(RequestError) as err:
                    await _within(turn)
                assert err.value.code == -32800
                assert len(peer.texts(sid)) < 6
                peer.updates.clear()
                answer = await _within(conn.prompt(session_id=sid, prompt=[acp.text_block("next")]))
                assert answer.stop_reason == "end_turn"

    asyncio.run(main())


# ---- mail-composer without elicitation; research providers ---------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_py_client_mail_interrupt_without_elicitation(build: Any, transport: str) -> None:
    """A client that did not declare elicitation is never sent elicitation/create: the
    interrupt arrives as session/request_permission (approve / decline) naming the draft;
    approving completes the turn, declining ends it `cancelled`."""
    built = build("mail-composer", transport)

    async def main() -> None:
        async with agent(built, transport) as connect:
            peer = Peer()
            async with connect(peer) as conn:
                await _init(conn, elicitation=False)
                sid = (await _within(conn.new_session(cwd="/tmp", mcp_servers=[]))).session_id
                prompt = [acp.text_block(json.dumps(BRIEF))]
                answer = await _within(conn.prompt(session_id=sid, prompt=prompt))
                assert answer.stop_reason == "end_turn"
                assert [m for m, _ in peer.requests] == ["session/request_permission"]
                asked = peer.requests[0][1]
                assert asked["sessionId"] == sid
                assert asked["toolCall"].title == "Approve the draft before it is final."
                assert asked["toolCall"].raw_input["body"].startswith("Hi Ana,")
                kinds = {o.option_id: o.kind for o in asked["options"]}
                assert kinds == {"accept": "allow_once", "decline": "reject_once"}
                assert peer.texts(sid)[0].startswith("Hi Ana,")

                peer.permission = "decline"
                answer = await _within(conn.prompt(session_id=sid, prompt=prompt))
                assert answer.stop_reason == "cancelled"
                assert [m for m, _ in peer.requests] == ["session/request_permission"] * 2

    asyncio.run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_py_client_research_providers(build: Any, transport: str) -> None:
    """providers/list shows the manifest's provider and never headers; providers/set
    reroutes it (the next run uses it, the secret is never echoed); an unknown id is -32602,
    disabling the required provider is -32602, disabling an unknown id succeeds."""
    built = build("research", transport)
    secret = "sk-py-peer-SECRET-5151"

    async def main() -> None:
        async with agent(built, transport) as connect:
            peer = Peer()
            async with connect(peer) as conn:
                init = await _init(conn)
                assert init["agentCapabilities"].get("providers") is not None, init
                raw = conn._conn  # the SDK has no typed call for the unstable providers/*
                listed = await _within(raw.send_request("providers/list", {}))
                (main_provider,) = listed["providers"]
                assert main_provider["providerId"] == "main"
                assert main_provider["required"] is True
                assert set(main_provider["supported"]) == {"openai", "anthropic"}
                assert main_provider["current"] == {
                    "apiType": "openai",
                    "baseUrl": "https://api.openai.com/v1",
                }
                await _within(
                    raw.send_request(
                        "providers/set",
                        {
                            "providerId": "main",
                            "apiType": "anthropic",
                            "baseUrl": "https://llm-proxy.example",
                            "headers": {"x-api-key": secret},
                        },
                    )
                )
                listed = await _within(raw.send_request("providers/list", {}))
                assert listed["providers"][0]["current"] == {
                    "apiType": "anthropic",
                    "baseUrl": "https://llm-proxy.example",
                }
                assert secret not in json.dumps(listed)
                for params in (
                    {"providerId": "ghost", "apiType": "openai", "baseUrl": "https://x"},
                    {"providerId": "main", "apiType": "gemini", "baseUrl": "https://x"},
                ):
                    with pytest.raises(RequestError) as err:
                        await _within(
                            raw.send_request("providers/set", {**params, "headers": {"k": secret}})
                        )
                    assert err.value.code == -32602
                    assert secret not in str(err.value) + json.dumps(err.value.data)
                with pytest.raises(RequestError) as err:
                    await _within(raw.send_request("providers/disable", {"providerId": "main"}))
                assert err.value.code == -32602
                assert await _within(
                    raw.send_request("providers/disable", {"providerId": "ghost"})
                ) in ({}, None)
                sid = (await _within(conn.new_session(cwd="/tmp", mcp_servers=[]))).session_id
                answer = await _within(conn.prompt(session_id=sid, prompt=[acp.text_block("q")]))
                assert answer.stop_reason == "end_turn"
                assert peer.texts(sid)[0] == (
                    "Using anthropic at https://llm-proxy.example/v1/messages\n"
                )
                assert secret not in json.dumps(peer.updates)

    asyncio.run(main())


# ---- one agent, v1 and v2: the Python SDK (v1), then the TypeScript SDK (v2) ---------------


@pytest.fixture(scope="module")
def both_agent(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, str]]:
    """`agentgen new` with the v1 and the v2 schema of the npm package (the echo example):
    (the agent's command, its environment)."""
    tmp = tmp_path_factory.mktemp("py-peer-both")
    done = subprocess.run(
        [
            str(Path(PY).with_name("agentgen")),
            "new",
            str(tmp / "both-echo"),
            "--manifest",
            str(REPO / "examples" / "echo" / "agent.yaml"),
            "--schema",
            NPM.format("v1/schema.json"),
            "--schema",
            NPM.format("v2/schema.json"),
        ],
        env={**os.environ, "AGENTGEN_TEMPLATE_STORE": str(tmp / "store")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    project = tmp / "both-echo"
    package = project / "echo_agent"
    assert (package / "_generated" / "v1" / "revision.py").is_file()  # both revisions
    (package / "handlers.py").write_text((REPO / "examples" / "echo" / "handlers.py").read_text())
    env = {
        **os.environ,
        "PYTHONPATH": str(project),
        "ACP_SESSION_DB": str(tmp / "sessions.db"),
    }
    return [PY, "-m", "echo_agent"], env


def test_one_agent_serves_a_v1_sdk_client_then_a_v2_ts_client(
    both_agent: tuple[list[str], dict[str, str]],
) -> None:
    """One agent generated with `--schema v1 --schema v2`, started twice with the same
    command: the Python SDK (v1) gets protocol version 1 and v1 shapes (`agentInfo`), its
    session and an echoed prompt ending `end_turn`; then the TypeScript SDK's
    `experimental/v2` client gets version 2 (`info`), its session, and the echo of its
    prompt (v2 lifecycle: accepted with a messageId, the chunks carry theirs, the turn
    ends with an idle state_update). Both SDKs accept every frame."""
    import ts_peer

    command, env = both_agent
    root = ts_peer.install()

    async def main() -> None:
        peer = Peer()
        with (Path(env["ACP_SESSION_DB"]).parent / "v1-agent.log").open("w+b") as err:
            async with acp.spawn_agent_process(
                cast(Any, peer),
                command[0],
                *command[1:],
                env=env,
                transport_kwargs={"stderr": err.fileno(), "shutdown_timeout": 10.0},
            ) as (conn, proc):
                init = await _init(conn)
                assert init["protocolVersion"] == 1
                assert init["agentInfo"]["name"] == "echo-agent" and "info" not in init
                sid = (await _within(conn.new_session(cwd="/tmp", mcp_servers=[]))).session_id
                blocks: list[Any] = [acp.text_block("hello from v1"), acp.text_block("!")]
                answer = await _within(conn.prompt(session_id=sid, prompt=blocks))
                assert answer.stop_reason == "end_turn"
                assert peer.texts(sid) == ["hello from v1", "!"]
            assert proc.returncode == 0
            err.seek(0)
            log = err.read().decode()
            assert "Traceback" not in log, log

        client = await ts_peer.TsClient.start(root, "v2", command, env)
        ok = False
        try:
            init2 = await client.request(
                "initialize",
                {
                    "protocolVersion": 2,
                    "info": {"name": "ts-sdk-peer", "version": "2.4.0"},
                    "capabilities": {},
                },
            )
            assert init2["protocolVersion"] == 2
            assert init2["info"]["name"] == "echo-agent" and "agentInfo" not in init2
            sid2 = (await client.request("session/new", {"cwd": "/tmp"}))["sessionId"]
            accepted = await client.request(
                "session/prompt",
                {"sessionId": sid2, "prompt": [{"type": "text", "text": "hello from v2"}]},
            )
            assert accepted.get("messageId"), accepted

            def idle() -> list[dict[str, Any]]:
                return [
                    p["update"]
                    for p in client.updates
                    if p.get("sessionId") == sid2
                    and p["update"].get("sessionUpdate") == "state_update"
                    and p["update"].get("state") == "idle"
                ]

            await client.wait_for(lambda: bool(idle()))
            assert idle()[-1]["stopReason"] == "end_turn"
            await client.wait_for(lambda: client.texts(sid2) == ["hello from v2"])
            chunks = [
                p["update"]
                for p in client.updates
                if p["update"].get("sessionUpdate") == "agent_message_chunk"
            ]
            assert all(c.get("messageId") for c in chunks), chunks
            ok = True
        finally:
            code, log = await client.close()
        if ok:
            assert code == 0, log
            assert client.sdk_errors == [], client.sdk_errors
            assert "Traceback" not in log, log

    asyncio.run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_py_client_mail_plain_text_prompt(build: Any, transport: str) -> None:
    """ACP: agents MUST accept text. Plain text that is not the input JSON ends the turn
    `end_turn` with a message saying what JSON the agent expects, never a JSON-RPC error,
    and no interrupt is asked."""
    built = build("mail-composer", transport)

    async def main() -> None:
        async with agent(built, transport) as connect:
            peer = Peer()
            async with connect(peer) as conn:
                await _init(conn, elicitation=True)
                sid = (await _within(conn.new_session(cwd="/tmp", mcp_servers=[]))).session_id
                prompt = [acp.text_block("write to ana about lunch")]
                answer = await _within(conn.prompt(session_id=sid, prompt=prompt))
                assert answer.stop_reason == "end_turn"
                said = "".join(peer.texts(sid))
                assert "brief" in said and "recipients" in said, said
                assert peer.requests == []

    asyncio.run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_py_client_echo_session_methods(build: Any, transport: str) -> None:
    """The session methods the agent advertises (sessionCapabilities list / resume / close),
    called through the SDK's typed API and parsed by its models: two sessions prompted
    concurrently each get their own updates, in order; session/list shows both; on a
    new connection session/resume reattaches one without replaying it, and session/close
    ends it."""
    built = build("echo", transport)

    async def main() -> None:
        async with agent(built, transport) as connect:
            peer = Peer()
            async with connect(peer) as conn:
                init = await _init(conn)
                caps = init["agentCapabilities"]["sessionCapabilities"]
                assert {"list", "resume", "close"} <= set(caps), caps
                sids = [
                    (await _within(conn.new_session(cwd="/tmp", mcp_servers=[]))).session_id
                    for _ in range(2)
                ]
                answers = await _within(
                    asyncio.gather(
                        *(
                            conn.prompt(
                                session_id=sid,
                                prompt=[acp.text_block(f"{sid[-4:]}:{i}") for i in range(20)],
                            )
                            for sid in sids
                        )
                    )
                )
                assert [a.stop_reason for a in answers] == ["end_turn", "end_turn"]
                for sid in sids:
                    assert peer.texts(sid) == [f"{sid[-4:]}:{i}" for i in range(20)]
                listed = await _within(conn.list_sessions(cwd="/tmp"))
                assert set(sids) <= {s.session_id for s in listed.sessions}
            peer2 = Peer()
            async with connect(peer2) as conn:
                await _init(conn)
                await _within(conn.resume_session(session_id=sids[0], cwd="/tmp"))
                answer = await _within(
                    conn.prompt(session_id=sids[0], prompt=[acp.text_block("resumed")])
                )
                assert answer.stop_reason == "end_turn"
                assert peer2.texts(sids[0]) == ["resumed"]  # resume replays nothing
                await _within(conn.close_session(session_id=sids[0]))

    asyncio.run(main())
