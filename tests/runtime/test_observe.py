"""Observing a deployed agent (issue 39): the runtime's `observe` room turned on with the
OpenTelemetry SDK's in-memory exporters (InMemorySpanExporter, InMemoryMetricReader),
the agents run in this process, every frame schema-checked (ACP_WIRE_CHECK).

- the coder example's prompt turn, v1 and v2, over the connection stdio feeds and over
  the HTTP agent's WebSocket: one trace whose root's parent is the editor's span (its
  `_meta.traceparent`); under the `session/prompt` span the turn, under the turn each
  client call (fs/*, terminal/*, session/request_permission), whose own trace context
  the editor gets in `_meta`; the turn's save as a store span;
- over HTTP POST the `traceparent` header is the parent, and `_meta`'s when it has one;
  over a WebSocket the upgrade request's header is the parent of every request it serves
  (a relayed POST keeps its header: test_redis_router.py);
- the assistant example with a scripted model (FunctionModel) and an MCP server:
  pydantic-ai's own spans under the turn, the MCP tool call under pydantic-ai's tool span;
  without ACP_TRACE_CONTENT they carry no message list, so a turn's spans do not grow with
  the session's history (observe/providers.py's `without_conversation`: were pydantic-ai's
  methods renamed, the override would silently stop applying, and this test would fail);
- no secret (route headers, an API key, MCP header and env values, the prompt, a file's
  content) in any exported span or metric, also in an agent process configured only by
  `OTEL_*` (an OTLP collector on 127.0.0.1: otlp_support.py) where the MCP SDK's own spans
  are exported too; the prompt only with ACP_TRACE_CONTENT=1;
- the metrics: requests by method and outcome, turn duration by stop reason, active
  sessions, store latency by operation, the model's tokens by model, model and MCP
  failures by kind, queued prompts, lease moves;
- without configuration nothing is on and the SDK is never imported; fully on, what is
  the same from request to request is built once (bounded caches);
- across processes: a generated client's request is the parent of a stdio agent's span.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import hardening_support as hs
import httpx
import mcp_support as ms
import otlp_support as otlp
import pytest
import uvicorn
from coder_support import Editor, LinkedEditor, build_coder
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from project_support import import_from, write_project
from wait_support import ListeningServer

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = {"v1": "v1/schema.unstable.json", "v2": "v2/schema.json"}
CAPS = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}
SOURCE = "def greet():\n    return 'hello'  # FILE-CONTENT-5e1d\n"
CLIENT_CALLS = {
    "v1": [
        "fs/read_text_file",
        "session/request_permission",
        "fs/write_text_file",
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/release",
    ],
    "v2": ["session/request_permission"],  # v2 has no fs/* or terminal/* methods
}
W3C = TraceContextTextMapPropagator()


# ---- the exporters ---------------------------------------------------------------------


class Exported:
    """In-memory trace and metric exporters, and the editor's own tracer."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.tracer = self.tracer_provider.get_tracer("the-editor")
        self.rooms: list[Any] = []

    def on(self, package: str) -> None:
        """Telemetry on in `package`'s runtime (each generated package has its own)."""
        room = importlib.import_module(f"{package}._generated.runtime.observe")
        assert room.configure(self.tracer_provider, self.meter_provider)
        self.rooms.append(room)

    def off(self) -> None:
        for room in self.rooms:
            room.stop()

    def root(self) -> tuple[Any, dict[str, str]]:
        """The editor's span (never made current here: only `_meta` or a header can carry
        it to the agent) and its trace context as a carrier."""
        span = self.tracer.start_span("editor", kind=SpanKind.CLIENT)
        carrier: dict[str, str] = {}
        W3C.inject(carrier, context=trace.set_span_in_context(span))
        return span, carrier

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """Each data point of metric `name`: (its attributes, the point)."""
        data = self.reader.get_metrics_data()
        found = []
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        found += [(dict(p.attributes or {}), p) for p in metric.data.data_points]
        return found

    def everything(self) -> str:
        """Every exported span (attributes, events, links, resource) and metric as JSON."""
        data = self.reader.get_metrics_data()
        metrics = data.to_json() if data is not None else ""
        return "\n".join(s.to_json() for s in self.finished()) + metrics


@pytest.fixture
def exported() -> Iterator[Exported]:
    ex = Exported()
    yield ex
    ex.off()


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    by_id = {s.context.span_id: s for s in spans}
    names = []
    while (up := by_id.get(parent_id(span) or 0)) is not None:
        names.append(up.name)
        span = up
    return names


def span_id_of(traceparent: str) -> int:
    return int(traceparent.split("-")[2], 16)


# ---- the agents, in this process ------------------------------------------------------


@pytest.fixture(scope="module")
def coders(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    """The coder example per revision (an HTTP agent: both transports): its handlers."""
    tmp = tmp_path_factory.mktemp("observe-coder")
    out = {}
    for rev, rel in SCHEMAS.items():
        schema = json.loads((shared_acp / rel).read_text())
        build_coder(tmp, schema, f"obs_coder_{rev}", transport="http")
        out[rev] = hs.load(tmp, f"obs_coder_{rev}")
    return out


def _runtime(package: str, module: str) -> Any:
    return importlib.import_module(f"{package}._generated.runtime.{module}")


@contextlib.asynccontextmanager
async def over_stdio(package: str, agent_cls: Any, root: Path) -> AsyncIterator[LinkedEditor]:
    """The editor on the connection `serve_agent_stdio` feeds (its lines, in process)."""
    store = _runtime(package, "sessions.store").MemorySessionStore()
    frames: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def sink(batch: list[tuple[bytes, Any]]) -> None:
        for frame, _ in batch:
            frames.put_nowait(frame)

    conn = _runtime(package, "serve").agent_connection(agent_cls(), sink, store=store)

    async def send(frame: bytes) -> None:
        conn.feed(frame)

    ed = LinkedEditor(send, frames, root)
    try:
        yield ed
    finally:
        await ed.stop()
        await conn.close()


@contextlib.asynccontextmanager
async def serving(package: str, agent_cls: Any) -> AsyncIterator[int]:
    """The HTTP agent's app on 127.0.0.1 (uvicorn, in this event loop): its port."""
    http_server = _runtime(package, "http.http_server")
    store = _runtime(package, "sessions.store").MemorySessionStore()
    app = http_server.create_app(http_server.agent_factory(agent_cls, store))
    server = ListeningServer(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", ws="websockets-sansio")
    )
    task = asyncio.get_running_loop().create_task(server.serve())
    assert await asyncio.to_thread(server.listening.wait, 15), "the agent did not start"
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


@contextlib.asynccontextmanager
async def over_websocket(
    package: str, agent_cls: Any, root: Path, headers: dict[str, str] | None = None
) -> AsyncIterator[LinkedEditor]:
    """The editor on the HTTP agent's WebSocket (`headers` on its upgrade request)."""
    from websockets.asyncio.client import connect

    async with serving(package, agent_cls) as port:
        frames: asyncio.Queue[bytes | None] = asyncio.Queue()
        url = f"ws://127.0.0.1:{port}/acp"
        async with connect(url, max_size=None, additional_headers=headers) as ws:

            async def pump() -> None:
                with contextlib.suppress(Exception):
                    async for message in ws:
                        frames.put_nowait(message.encode() if isinstance(message, str) else message)
                frames.put_nowait(None)

            reader = asyncio.get_running_loop().create_task(pump())

            async def send(frame: bytes) -> None:
                await ws.send(frame.decode())

            ed = LinkedEditor(send, frames, root)
            try:
                yield ed
            finally:
                await ed.stop()
                reader.cancel()


LINKS = {"stdio": over_stdio, "websocket": over_websocket}


# ---- the coder's turn ---------------------------------------------------------------------


@pytest.mark.parametrize("link", list(LINKS))
@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_a_coder_turn_is_one_trace_under_the_editors_span(
    coders: dict[str, Any], exported: Exported, tmp_path: Path, rev: str, link: str
) -> None:
    handlers = coders[rev]
    package = handlers.__name__.split(".")[0]
    exported.on(package)
    (tmp_path / "app.py").write_text(SOURCE)
    root, carrier = exported.root()
    v2 = rev == "v2"

    async def main() -> tuple[LinkedEditor, str, list[Any]]:
        async with LINKS[link](package, handlers.Agent, tmp_path) as ed:
            ed.meta = carrier
            await ed.initialize(2 if v2 else 1, CAPS)
            sid = str(
                (await ed.call("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
                    "sessionId"
                ]
            )
            assert await ed.prompt(sid, "replace `hello` with `bye` in app.py", v2=v2) == "end_turn"
            active = exported.points("acp.sessions.active")
            return ed, sid, active

    ed, sid, active = asyncio.run(asyncio.wait_for(main(), 60))
    root.end()
    assert (tmp_path / "app.py").read_text() == SOURCE.replace("hello", "bye")
    spans = exported.finished()
    trace_id = root.get_span_context().trace_id
    assert {s.context.trace_id for s in spans} == {trace_id}  # one trace, the editor's

    # each request the editor sent: a SERVER span whose parent is the editor's span
    served = [s for s in spans if s.kind == SpanKind.SERVER]
    assert [s.name for s in served] == ["initialize", "session/new", "session/prompt"]
    for span in served:
        assert parent_id(span) == root.get_span_context().span_id, span.name
        assert span.attributes["acp.transport"] == link
        assert span.attributes["acp.revision"] == (2 if v2 else 1)
        assert span.attributes["acp.replica"]
    prompt = one(spans, "session/prompt")
    assert prompt.attributes["acp.session_id"] == sid

    # the turn under the prompt, with its stop reason; each client call under the turn
    turn = one(spans, "acp.turn")
    assert parent_id(turn) == prompt.context.span_id
    assert turn.attributes["acp.stop_reason"] == "end_turn"
    calls = sorted(
        (s for s in spans if s.kind == SpanKind.CLIENT and s.name in CLIENT_CALLS["v1"]),
        key=lambda s: s.start_time or 0,
    )
    assert [c.name for c in calls] == CLIENT_CALLS[rev]
    assert all(parent_id(c) == turn.context.span_id for c in calls)
    # ... whose trace context the editor got in the request's `_meta`
    sent = {span_id_of(r["params"]["_meta"]["traceparent"]) for r in ed.requests}
    assert sent == {c.context.span_id for c in calls}

    # the turn saved: a store span in the same trace (under the prompt or the turn)
    save = one(spans, "store save_turn")
    assert {"session/prompt"} <= set(ancestors(save, spans))

    # the metrics of that run
    durations = exported.points("acp.request.duration")  # its count: requests by method, outcome
    requests = {(a["method"], a["outcome"]): p.count for a, p in durations}
    assert requests[("session/prompt", "ok")] == 1 and requests[("initialize", "ok")] == 1
    turns = exported.points("acp.turn.duration")
    assert [(a["stop_reason"], p.count) for a, p in turns] == [("end_turn", 1)]
    assert [p.value for _, p in active] == [1]  # the session, while its connection lived
    ops = {a["op"] for a, _ in exported.points("acp.store.duration")}
    assert "save_turn" in ops
    # never a file's content
    assert "FILE-CONTENT-5e1d" not in exported.everything()


# ---- HTTP POST: the traceparent header --------------------------------------------------


async def _finished(exported: Exported, name: str, count: int) -> list[ReadableSpan]:
    """The spans named `name` once `count` of them ended (the agent answers a POST before
    its request's span has ended: 202, the answer on the SSE stream)."""
    async with asyncio.timeout(10):
        while len(found := [s for s in exported.finished() if s.name == name]) < count:
            await asyncio.sleep(0.01)
    return found


def test_over_http_post_the_traceparent_header_is_the_parent_and_meta_wins(
    coders: dict[str, Any], exported: Exported
) -> None:
    handlers = coders["v1"]
    package = handlers.__name__.split(".")[0]
    exported.on(package)
    header_span, header = exported.root()
    meta_span, meta = exported.root()

    async def main() -> None:
        async with serving(package, handlers.Agent) as port, httpx.AsyncClient() as http:
            url = f"http://127.0.0.1:{port}/acp"
            init = {"protocolVersion": 1, "clientCapabilities": {}}
            r = await http.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
                headers=header,
            )
            assert r.status_code == 200, r.text
            cid = {"Acp-Connection-Id": r.headers["Acp-Connection-Id"]}
            new = {"cwd": "/tmp", "mcpServers": []}
            for rid, params in ((2, new), (3, {**new, "_meta": meta})):
                body = {"jsonrpc": "2.0", "id": rid, "method": "session/new", "params": params}
                r = await http.post(url, json=body, headers={**cid, **header})
                assert r.status_code == 202, r.text
            await _finished(exported, "session/new", 2)

    asyncio.run(asyncio.wait_for(main(), 60))
    spans = exported.finished()
    init_span = one(spans, "initialize")
    assert parent_id(init_span) == header_span.get_span_context().span_id
    assert init_span.attributes["acp.transport"] == "http"
    by_header, by_meta = sorted(
        (s for s in spans if s.name == "session/new"), key=lambda s: s.start_time or 0
    )
    assert parent_id(by_header) == header_span.get_span_context().span_id
    assert parent_id(by_meta) == meta_span.get_span_context().span_id
    assert by_meta.context.trace_id == meta_span.get_span_context().trace_id


def test_the_websocket_upgrades_traceparent_is_the_parent_of_its_requests_and_meta_wins(
    coders: dict[str, Any], exported: Exported, tmp_path: Path
) -> None:
    """A `traceparent` header on the WebSocket's upgrade request: the parent of every
    request the connection serves; a request's own `_meta.traceparent` wins.  (Before,
    the upgrade's header was ignored: each request without `_meta` was a root.)"""
    handlers = coders["v1"]
    package = handlers.__name__.split(".")[0]
    exported.on(package)
    header_span, header = exported.root()
    meta_span, meta = exported.root()

    async def main() -> None:
        async with over_websocket(package, handlers.Agent, tmp_path, header) as ed:
            await ed.initialize(1, CAPS)
            new = {"cwd": str(tmp_path), "mcpServers": []}
            await ed.call("session/new", new)
            ed.meta = meta
            await ed.call("session/new", new)
            await _finished(exported, "session/new", 2)

    asyncio.run(asyncio.wait_for(main(), 60))
    spans = exported.finished()
    init_span = one(spans, "initialize")
    assert parent_id(init_span) == header_span.get_span_context().span_id
    assert init_span.context.trace_id == header_span.get_span_context().trace_id
    assert init_span.attributes["acp.transport"] == "websocket"
    by_header, by_meta = sorted(
        (s for s in spans if s.name == "session/new"), key=lambda s: s.start_time or 0
    )
    assert parent_id(by_header) == header_span.get_span_context().span_id
    assert parent_id(by_meta) == meta_span.get_span_context().span_id
    assert by_meta.context.trace_id == meta_span.get_span_context().trace_id


# ---- the assistant: a scripted model, an MCP server, no secret --------------------------

ROUTE_SECRET = "route-9b3f-secret"
API_SECRET = "sk-apikey-51c7-secret"
MCP_HEADER_SECRET = "mcp-hdr-2e8a-secret"
MCP_ENV_SECRET = "mcp-env-77d0-secret"
PROMPT_SECRET = "prompt-c4a1-secret"

SCRIPT = """
from typing import Any

from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from .handlers import ASSISTANT, Agent


async def script(messages: list[ModelMessage], info: AgentInfo) -> Any:
    prompts = [str(p.content) for m in messages for p in m.parts if p.part_kind == "user-prompt"]
    done = [p for p in messages[-1].parts if p.part_kind in ("tool-return", "retry-prompt")]
    if prompts[-1] == "refused":  # the provider says no to the key
        raise ModelHTTPError(401, "scripted", None)
    if prompts[-1] == "oops" and not done:  # a tool that fails
        yield {0: DeltaToolCall(name="tools_oops", json_args="{}", tool_call_id="o1")}
        return
    if prompts[-1] == "oops":
        yield "the tool failed"
        return
    returned = [p for m in messages for p in m.parts if p.part_kind == "tool-return"]
    if not returned:
        yield {0: DeltaToolCall(name="web_mul", json_args='{"a": 6, "b": 7}', tool_call_id="m1")}
        return
    yield f"The product is {returned[-1].content}."


class Scripted(Agent):
    async def prompt(self, turn: Any, input: Any) -> None:
        with ASSISTANT.override(model=FunctionModel(stream_function=script)):
            await super().prompt(turn, input)
"""


@pytest.fixture(scope="module")
def assistants(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    """examples/assistant per revision, with `Scripted`: the example's agent whose model
    is a FunctionModel asking for the MCP tool `web_mul`."""
    from generator.manifest.load import load_manifest

    tmp = tmp_path_factory.mktemp("observe-assistant")
    manifest = load_manifest(REPO / "examples" / "assistant" / "agent.yaml").data
    out = {}
    for rev, rel in SCHEMAS.items():
        package = f"obs_assistant_{rev}"
        write_project(
            tmp,
            package,
            schema=json.loads((shared_acp / rel).read_text()),
            manifest=manifest,
            handlers=(REPO / "examples" / "assistant" / "handlers.py").read_text(),
        )
        (tmp / package / "scripted.py").write_text(SCRIPT)
        out[rev] = import_from(tmp, f"{package}.scripted")
    return out


def _assistant_turn(
    module: Any, exported: Exported, tmp: Path, rev: str, mcp_url: str
) -> list[dict[str, Any]]:
    package = module.__name__.split(".")[0]
    exported.on(package)
    v2 = rev == "v2"
    root, carrier = exported.root()

    async def main() -> list[dict[str, Any]]:
        async with over_stdio(package, module.Scripted, tmp) as ed:
            ed.meta = carrier
            await ed.initialize(2 if v2 else 1, {})
            route = {
                "providerId": "main",
                "apiType": "openai",
                "baseUrl": "http://127.0.0.1:9/v1",  # never called: the model is scripted
                "headers": {"Authorization": f"Bearer {ROUTE_SECRET}"},
            }
            if not v2:  # (v2 has no providers/set)
                await ed.call("providers/set", route)
            servers = [
                ms.http_server(mcp_url, headers={"X-Api-Key": MCP_HEADER_SECRET}),
                ms.stdio_server(tmp, env={"TOKEN": MCP_ENV_SECRET}, v2=v2),
            ]
            new = await ed.call("session/new", {"cwd": str(tmp), "mcpServers": servers})
            sid = str(new["sessionId"])
            text = f"multiply 6 by 7 ({PROMPT_SECRET})"
            assert await ed.prompt(sid, text, v2=v2) == "end_turn"
            return ed.updates

    updates = asyncio.run(asyncio.wait_for(main(), 90))
    root.end()
    return updates


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_an_assistant_turn_nests_the_models_spans_and_the_mcp_call_and_shows_no_secret(
    assistants: dict[str, Any],
    exported: Exported,
    tmp_path: Path,
    rev: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_SECRET)
    with ms.running_http_mcp() as (url, _):
        updates = _assistant_turn(assistants[rev], exported, tmp_path, rev, url)
    said = "".join(
        u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert "The product is" in said and "42" in said
    spans = exported.finished()
    turn = one(spans, "acp.turn")
    assert ancestors(turn, spans) == ["session/prompt", "editor"]
    # pydantic-ai's run is the turn's child; its model requests and tool run below it
    runs = [s for s in spans if parent_id(s) == turn.context.span_id]
    assert len(runs) == 1 and runs[0].name.startswith(("invoke_agent", "agent run")), runs
    below = [s for s in spans if runs[0].name in ancestors(s, spans)]
    assert any(s.name.startswith("chat ") for s in below), [s.name for s in below]
    # the MCP tool call under pydantic-ai's tool span, under the turn
    tool = one(spans, "tools/call mul")
    assert tool.attributes["mcp.server"] == "web"
    chain = ancestors(tool, spans)
    assert chain[-4:] == [runs[0].name, "acp.turn", "session/prompt", "editor"], chain
    assert any("web_mul" in name for name in chain[:-4]), chain
    # the model's tokens in and out, by model (pydantic-ai's own histogram)
    tokens = exported.points("gen_ai.client.token.usage")
    assert {a["gen_ai.token.type"] for a, _ in tokens} == {"input", "output"}, tokens
    assert all(a["gen_ai.request.model"] for a, _ in tokens)
    everything = exported.everything()
    for secret in (ROUTE_SECRET, API_SECRET, MCP_HEADER_SECRET, MCP_ENV_SECRET, PROMPT_SECRET):
        assert secret not in everything, secret


def test_the_prompt_is_traced_only_when_asked(
    assistants: dict[str, Any],
    exported: Exported,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ACP_TRACE_CONTENT=1: the turn's prompt text (and pydantic-ai's messages) in the
    trace; still no key, header or env value."""
    monkeypatch.setenv("OPENAI_API_KEY", API_SECRET)
    monkeypatch.setenv("ACP_TRACE_CONTENT", "1")
    with ms.running_http_mcp() as (url, _):
        _assistant_turn(assistants["v1"], exported, tmp_path, "v1", url)
    spans = exported.finished()
    turn = one(spans, "acp.turn")
    assert PROMPT_SECRET in str(turn.attributes["acp.prompt.text"])
    # pydantic-ai's own record of the conversation, whole, as it makes it
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert chats and all(PROMPT_SECRET in str(s.attributes["gen_ai.input.messages"]) for s in chats)
    everything = exported.everything()
    for secret in (ROUTE_SECRET, API_SECRET, MCP_HEADER_SECRET, MCP_ENV_SECRET):
        assert secret not in everything, secret


def test_a_model_request_does_not_record_the_conversation_again(
    assistants: dict[str, Any], exported: Exported, tmp_path: Path, monkeypatch: Any
) -> None:
    """Without ACP_TRACE_CONTENT, pydantic-ai's spans carry no message list: a turn's
    spans are as big at the fourth turn of a session as at the second, where pydantic-ai
    would serialize the whole history (its shape: roles, part kinds, tool names and ids)
    into each model request's `gen_ai.input.messages` and the run's
    `pydantic_ai.all_messages`, growing with the conversation."""
    monkeypatch.setenv("OPENAI_API_KEY", API_SECRET)
    module = assistants["v1"]
    package = module.__name__.split(".")[0]
    exported.on(package)

    async def main() -> None:
        async with over_stdio(package, module.Scripted, tmp_path) as ed:
            await ed.initialize(1, {})
            servers = [ms.stdio_server(tmp_path)]
            new = await ed.call("session/new", {"cwd": str(tmp_path), "mcpServers": servers})
            sid = str(new["sessionId"])
            for _ in range(4):
                assert await ed.prompt(sid, "multiply 6 by 7", v2=False) == "end_turn"

    asyncio.run(asyncio.wait_for(main(), 90))
    spans = exported.finished()
    turns = sorted((s for s in spans if s.name == "acp.turn"), key=lambda s: s.start_time or 0)
    assert len(turns) == 4

    def size(turn: ReadableSpan, prefix: str) -> int:
        """The attributes' bytes of the turn's pydantic-ai spans named `prefix`..."""
        below = [
            s
            for s in spans
            if s.name.startswith(prefix) and turn.context.span_id in _ancestor_ids(s, spans)
        ]
        assert below, (prefix, [s.name for s in spans])
        return sum(len(json.dumps(dict(s.attributes or {}))) for s in below)

    for prefix in ("chat ", "invoke_agent"):
        # a few bytes apart at most: the token counts' digits (the scripted model counts
        # the history's words as its input tokens)
        assert abs(size(turns[3], prefix) - size(turns[1], prefix)) < 40, prefix
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert chats and not any("gen_ai.input.messages" in (s.attributes or {}) for s in chats)
    # what the semantic conventions ask of a model request is still there
    for key in ("gen_ai.operation.name", "gen_ai.request.model", "gen_ai.usage.input_tokens"):
        assert all(key in (s.attributes or {}) for s in chats), key


def _ancestor_ids(span: ReadableSpan, spans: list[ReadableSpan]) -> set[int]:
    by_id = {s.context.span_id: s for s in spans}
    found = set()
    while (up := by_id.get(parent_id(span) or 0)) is not None:
        found.add(up.context.span_id)
        span = up
    return found


def test_model_and_mcp_failures_are_counted_by_kind(
    assistants: dict[str, Any], exported: Exported, tmp_path: Path, monkeypatch: Any
) -> None:
    """A provider refusing the key: the turn's error classified once (model/adapter.py's
    model_error) and counted as `acp.model.errors{kind}`; an MCP tool whose result is an
    error: `acp.mcp.errors{kind}`; both spans marked failed."""
    monkeypatch.setenv("OPENAI_API_KEY", API_SECRET)  # a key the scripted provider refuses
    module = assistants["v1"]
    package = module.__name__.split(".")[0]
    exported.on(package)

    async def main() -> str:
        async with over_stdio(package, module.Scripted, tmp_path) as ed:
            await ed.initialize(1, {})
            servers = [ms.stdio_server(tmp_path)]
            new = await ed.call("session/new", {"cwd": str(tmp_path), "mcpServers": servers})
            sid = str(new["sessionId"])
            assert await ed.prompt(sid, "oops", v2=False) == "end_turn"
            with pytest.raises(AssertionError, match="credentials") as refused:
                await ed.prompt(sid, "refused", v2=False)
            return str(refused.value)

    asyncio.run(asyncio.wait_for(main(), 90))
    assert [(a["kind"], p.value) for a, p in exported.points("acp.model.errors")] == [
        ("ModelAuthentication", 1)
    ]
    assert [(a["kind"], p.value) for a, p in exported.points("acp.mcp.errors")] == [
        ("ToolError", 1)
    ]
    spans = exported.finished()
    tool = one(spans, "tools/call oops")
    assert tool.status.status_code.name == "ERROR"
    failed = [
        s for s in spans if s.name == "acp.turn" and s.attributes["acp.stop_reason"] == "error"
    ]
    assert len(failed) == 1 and failed[0].attributes["rpc.jsonrpc.error_code"] < 0
    prompts = {
        (a["outcome"], a["code"]): p.count
        for a, p in exported.points("acp.request.duration")
        if a["method"] == "session/prompt"
    }
    assert prompts[("ok", "0")] == 1 and sum(prompts.values()) == 2


@pytest.fixture(scope="module")
def hard(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    """hardening_support's agent (its `slow <seconds>` prompt), v1: its handlers."""
    tmp = tmp_path_factory.mktemp("observe-hard")
    hs.build(tmp, shared_acp, "obs_hard", manifest={"name": "obs-hard", "version": "0.1.0"})
    return hs.load(tmp, "obs_hard")


def test_a_queued_prompt_and_a_lease_that_moves(hard: Any, exported: Exported) -> None:
    """A prompt sent while its session's turn runs waits in line (a span under its
    request, `acp.prompts.queued` back to 0 after); the session loaded on another
    connection of the same store (load takes the lease over): `acp.lease.moves`."""
    exported.on("obs_hard")
    store = _runtime("obs_hard", "sessions.store").MemorySessionStore()
    serve = _runtime("obs_hard", "serve")

    def core(sink: Any) -> Any:
        return serve.agent_connection(hard.Agent(), sink, store=store)

    init = {"protocolVersion": 1, "clientCapabilities": {}}

    async def main() -> None:
        first = hs.Core(core)
        await first.call("initialize", init)
        sid = (await first.call("session/new", {"cwd": "/tmp", "mcpServers": []}))["result"][
            "sessionId"
        ]
        slow = first.send("session/prompt", hs.text_prompt(sid, "slow 0.3"))
        await first.until(lambda: any(t == "started" for t in first.texts(sid)))
        waiting = first.send("session/prompt", hs.text_prompt(sid, "next"))
        for rid in (slow, waiting):
            assert (await first.answer(rid))["result"]["stopReason"] == "end_turn"
        await first.conn.close()
        second = hs.Core(core)
        await second.call("initialize", init)
        loaded = await second.call(
            "session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []}
        )
        assert "result" in loaded, loaded
        await second.conn.close()

    asyncio.run(asyncio.wait_for(main(), 30))
    spans = exported.finished()
    queued = one(spans, "acp.prompt.queued")
    assert ancestors(queued, spans) == ["session/prompt"]
    assert [p.value for _, p in exported.points("acp.prompts.queued")] == [0]
    assert [(a["take_over"], p.value) for a, p in exported.points("acp.lease.moves")] == [
        ("True", 1)
    ]


def test_what_a_request_records_is_made_once_and_every_cache_is_bounded(
    exported: Exported,
) -> None:
    """Fully on, what is the same from request to request is built once per process (the
    cost bench_observe.py measures): a label set, a span's shape (a connection's span
    attributes, the store operation a `durably` lambda names), a session id's attribute;
    a peer sending thousands of method names and session ids grows no cache past
    otel.MAX_CACHED; the spans and points are still right."""
    from runtime import observe
    from runtime.observe import otel
    from runtime.sessions.session_store import durably

    assert observe.configure(exported.tracer_provider, exported.meter_provider)
    exported.rooms.append(observe)
    telemetry = observe._state.on
    assert telemetry is not None

    class Store:
        async def save_turn(self, sid: str) -> None:
            return None

        async def load(self, sid: str) -> None:
            return None

    async def main() -> None:
        for i in range(otel.MAX_CACHED + 100):  # under the SDK's own limit (2000)
            with observe.request(f"x/{i}", {"sessionId": f"s{i}"}, None):
                await asyncio.sleep(0)
        for _ in range(3):
            with observe.request("session/prompt", {"sessionId": "sess_1"}, None):
                await asyncio.sleep(0)
        store = Store()
        for _ in range(2):
            await durably("save", lambda: store.save_turn("s"))  # as the runtime calls it
            await durably("load", lambda: store.load("s"))

    asyncio.run(main())
    assert len(telemetry.tally.labels) <= otel.MAX_CACHED
    assert len(telemetry.served) <= otel.MAX_CACHED
    assert len(telemetry.sessions) <= otel.MAX_CACHED
    assert len(telemetry.stored) == 2  # one shape a `durably` line
    assert [
        p.count
        for a, p in exported.points("acp.request.duration")
        if a["method"] == "session/prompt"
    ] == [3]
    spans = exported.finished()
    prompts = [s for s in spans if s.name == "session/prompt"]
    assert [dict(s.attributes or {}) for s in prompts] == [
        {"rpc.system": "jsonrpc", "rpc.method": "session/prompt", "acp.session_id": "sess_1"}
    ] * 3
    ops = [s.attributes["acp.store.op"] for s in spans if s.name.startswith("store ")]
    assert ops == ["save_turn", "load", "save_turn", "load"]
    assert [(a["op"], p.count) for a, p in exported.points("acp.store.duration")] == [
        ("save_turn", 2),
        ("load", 2),
    ]


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "a"}, False),  # an SDK default alone turns nothing on
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_METRICS_EXPORTER": "prometheus"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}, False),
        (
            {
                "OTEL_TRACES_EXPORTER": "none",
                "OTEL_METRICS_EXPORTER": "none",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
            },
            False,
        ),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_what_the_environment_turns_on(env: dict[str, str], on: bool) -> None:
    from runtime import observe

    assert observe.configured(env) is on


# ---- off --------------------------------------------------------------------------------


def test_without_configuration_nothing_is_on_and_the_sdk_is_never_imported(
    coders: dict[str, Any],
) -> None:
    """An agent's runtime imported with no OTEL_* exporter: off, and neither the SDK nor
    the room's own OpenTelemetry module is loaded; with one (and the extra installed): on."""
    package = coders["v1"].__name__.split(".")[0]
    probe = (
        f"import sys; import {package}.handlers\n"
        f"from {package}._generated.runtime import observe\n"
        "print(observe.on(), 'opentelemetry.sdk' in sys.modules,"
        f" '{package}._generated.runtime.observe.otel' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(coders["v1"].__file__).parents[1]), *sys.path])
    run = [sys.executable, "-c", probe]
    off = subprocess.run(run, env=env, capture_output=True, text=True, check=True)
    assert off.stdout.split() == ["False", "False", "False"], off.stderr
    env["OTEL_TRACES_EXPORTER"] = "console"
    on = subprocess.run(run, env=env, capture_output=True, text=True, check=True)
    assert on.stdout.split() == ["True", "True", "True"], on.stderr


# ---- across processes: a generated client and a stdio agent -----------------------------


def console_spans(text: str) -> list[dict[str, Any]]:
    """The spans the SDK's console exporter wrote (one indented JSON object each)."""
    spans, block = [], None
    for line in text.splitlines():
        if line == "{":
            block = [line]
        elif block is not None:
            block.append(line)
            if line == "}":
                spans.append(json.loads("\n".join(block)))
                block = None
    return spans


def test_a_generated_clients_request_is_the_parent_of_a_stdio_agents_span(
    coders: dict[str, Any], exported: Exported, capfd: pytest.CaptureFixture[str]
) -> None:
    """The client (this process, in-memory exporter) spawns the coder over stdio (its
    spans to stderr: `OTEL_TRACES_EXPORTER=console`, stdout stays the protocol); each
    request the client sends carries its span in `_meta`, the agent's span's parent."""
    handlers = coders["v1"]
    package = handlers.__name__.split(".")[0]
    exported.on(package)
    dispatcher = importlib.import_module(f"{package}._generated.dispatcher")
    spawn_agent = _runtime(package, "client.client").spawn_agent
    serve = (
        "import asyncio\n"
        f"from {package}.handlers import Agent\n"
        f"from {package}._generated.runtime.serve import serve_agent_stdio\n"
        f"from {package}._generated.runtime.sessions.store import MemorySessionStore\n"
        "asyncio.run(serve_agent_stdio(Agent(), store=MemorySessionStore()))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(handlers.__file__).parents[1]), *sys.path])
    env.update(OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="coder")

    async def main() -> None:
        client = dispatcher.ClientBase()
        async with spawn_agent(
            client, dispatcher.AgentConnection, sys.executable, "-c", serve, env=env
        ) as agent:
            init = {"protocolVersion": 1, "clientCapabilities": {}}
            assert (await agent.call("initialize", init))["protocolVersion"] == 1
            assert (await agent.call("session/new", {"cwd": "/tmp", "mcpServers": []}))["sessionId"]

    asyncio.run(asyncio.wait_for(main(), 60))
    sent = {s.name: s for s in exported.finished() if s.kind == SpanKind.CLIENT}
    assert set(sent) == {"initialize", "session/new"}
    served = {s["name"]: s for s in console_spans(capfd.readouterr().err)}
    for name, client_span in sent.items():
        agent_span = served[name]
        assert agent_span["kind"] == "SpanKind.SERVER"
        assert agent_span["parent_id"] == f"0x{client_span.context.span_id:016x}"
        assert agent_span["context"]["trace_id"] == f"0x{client_span.context.trace_id:032x}"
        assert agent_span["resource"]["attributes"]["service.name"] == "coder"


def test_an_http_agent_configured_by_the_environment_takes_the_header_as_parent(
    hard: Any,
) -> None:
    """The deployed path: an HTTP agent process with `OTEL_TRACES_EXPORTER=console` (its
    spans on stderr, flushed as it stops on SIGTERM); a POST's `traceparent` header is
    its request span's parent."""
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(hard.__file__).parents[1]), *sys.path])
    env.update(ACP_TEST_TRANSPORT="http", OTEL_TRACES_EXPORTER="console")
    init = {"protocolVersion": 1, "clientCapabilities": {}}
    with hs.listening(env, "obs_hard") as agent:
        r = httpx.post(
            agent.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
            headers={"traceparent": parent},
            timeout=10,
        )
        assert r.status_code == 200, r.text
    assert agent.proc.returncode == 0
    deadline = time.monotonic() + 10
    while not (spans := console_spans("\n".join(line.rstrip("\n") for line in agent.stderr))):
        assert time.monotonic() < deadline, agent.stderr  # the stderr reader's last lines
        time.sleep(0.05)
    served = next(s for s in spans if s["name"] == "initialize")
    assert served["parent_id"] == "0xb7ad6b7169203331"
    assert served["context"]["trace_id"] == "0x0af7651916cd43dd8448eb211c80319c"
    assert served["attributes"]["acp.transport"] == "http"


def test_an_otlp_endpoint_alone_sends_traces_and_metrics_to_the_collector(hard: Any) -> None:
    """`OTEL_EXPORTER_OTLP_ENDPOINT` (and a service name) is all a deployment sets: the
    HTTP agent process sends its spans and its metrics over OTLP/HTTP."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(hard.__file__).parents[1]), *sys.path])
    init = {"protocolVersion": 1, "clientCapabilities": {}}
    with otlp.collector() as got:
        env.update(
            ACP_TEST_TRANSPORT="http",
            OTEL_EXPORTER_OTLP_ENDPOINT=got.url,
            OTEL_SERVICE_NAME="obs-hard",
        )
        with hs.listening(env, "obs_hard") as agent:
            body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
            assert httpx.post(agent.url, json=body, timeout=10).status_code == 200
        assert agent.proc.returncode == 0  # SIGTERM: both providers flushed at exit
    assert ("obs-hard", "initialize") in {(s.service, s.name) for s in got.spans}
    assert ("obs-hard", "acp.request.duration") in {(p[0], p[1]) for p in got.points}


def test_configured_by_the_environment_no_secret_reaches_the_collector_nor_the_mcp_sdks_spans(
    assistants: dict[str, Any], tmp_path: Path
) -> None:
    """The assistant as a deployment runs it: its own process over stdio, configured only
    by `OTEL_*` (traces and metrics over OTLP/HTTP to a collector on 127.0.0.1 written
    here), so the SDK's providers are the process's global ones and the MCP SDK's own
    spans (`mcp-python-sdk`: each MCP request it sends) are exported beside the runtime's
    and pydantic-ai's; a route with a key in its headers, an API key, an MCP server over
    HTTP with a header secret and one over stdio with an env secret, a prompt with a
    secret: none of them in any span, attribute, event or metric point received (the
    decoded requests and their raw bytes)."""
    module = assistants["v1"]
    package = module.__name__.split(".")[0]
    serve = (
        "import asyncio\n"
        f"from {package}.scripted import Scripted\n"
        f"from {package}._generated.runtime.serve import serve_agent_stdio\n"
        f"from {package}._generated.runtime.sessions.store import MemorySessionStore\n"
        "asyncio.run(serve_agent_stdio(Scripted(), store=MemorySessionStore()))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(module.__file__).parents[1]), *sys.path])
    env["OPENAI_API_KEY"] = API_SECRET
    secrets = (ROUTE_SECRET, API_SECRET, MCP_HEADER_SECRET, MCP_ENV_SECRET, PROMPT_SECRET)

    async def main(collector_url: str, mcp_url: str) -> str:
        env.update(otlp.otlp_env(collector_url, "assistant"))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            serve,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        ed = Editor(proc, tmp_path)
        try:
            await ed.initialize(1, {})
            route = {
                "providerId": "main",
                "apiType": "openai",
                "baseUrl": "http://127.0.0.1:9/v1",  # never called: the model is scripted
                "headers": {"Authorization": f"Bearer {ROUTE_SECRET}"},
            }
            await ed.call("providers/set", route)
            servers = [
                ms.http_server(mcp_url, headers={"X-Api-Key": MCP_HEADER_SECRET}),
                ms.stdio_server(tmp_path, env={"TOKEN": MCP_ENV_SECRET}),
            ]
            new = await ed.call("session/new", {"cwd": str(tmp_path), "mcpServers": servers})
            sid = str(new["sessionId"])
            text = f"multiply 6 by 7 ({PROMPT_SECRET})"
            assert await ed.prompt(sid, text, v2=False) == "end_turn"
            return "".join(ed.texts())
        finally:
            stderr = (await ed.stop()).decode(errors="replace")
            for secret in secrets:
                assert secret not in stderr, secret

    with otlp.collector() as got, ms.running_http_mcp() as (mcp_url, _):
        said = asyncio.run(asyncio.wait_for(main(got.url, mcp_url), 90))
        assert "42" in said
        got.until(
            "the turn's spans, the MCP SDK's and the metrics",
            lambda: (
                got.named("acp.turn")
                and any(s.scope == "mcp-python-sdk" for s in got.spans)
                and any(p[1] == "gen_ai.client.token.usage" for p in got.points)
            ),
        )
    names = {(s.scope, s.name) for s in got.spans}
    assert ("acp.runtime", "tools/call mul") in names, names
    mcp_sent = {name for scope, name in names if scope == "mcp-python-sdk"}
    assert any("tools/call" in name for name in mcp_sent), mcp_sent
    assert {p[1] for p in got.points} >= {"acp.request.duration", "acp.turn.duration"}
    everything = got.everything()
    for secret in secrets:
        assert secret not in everything, secret
