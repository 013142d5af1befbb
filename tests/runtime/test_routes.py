"""The route table (runtime/wire/routes.py): each method's scope and session effect read from
the schema, one router for the agent and the client, a route served on every transport,
and the HTTP transport learning sessions from the routes instead of the bytes."""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

import httpx
import pytest
from conftest import upstream_schemas
from runtime.agent.agent import AgentRuntime
from runtime.agent.dispatch import Dispatcher
from runtime.client.client import ClientRuntime
from runtime.http.http_server import create_app
from runtime.sessions.sessions import SessionCore
from runtime.sessions.store import MemorySessionStore
from runtime.wire import jsonrpc
from runtime.wire.routes import Router, session_scoped
from test_http_transport import running_server
from wait_support import Arrivals

from generator.protocol.revision import describe

SCHEMAS = {"v1": "v1/schema.json", "v2": "v2/schema.json"}


def _described(rev: str) -> Any:
    return describe(json.loads((upstream_schemas() / SCHEMAS[rev]).read_text()), None)


V1 = _described("v1")


def _router(rev: Any, side: str) -> Router:
    router = Router(None, side, models=lambda: None, dump=lambda r: r, default=lambda n, e: None)
    router.use(rev.side(side))
    return router


# (scope, effect) of the session methods, as the protocol means them
EXPECTED = {
    "v1": {
        "initialize": ("connection", "none"),
        "session/new": ("connection", "opens"),
        "session/load": ("session", "opens"),
        "session/resume": ("session", "opens"),
        "session/prompt": ("session", "uses"),
        "session/cancel": ("session", "uses"),
        "session/set_mode": ("session", "uses"),
        "session/set_config_option": ("session", "uses"),
        "session/close": ("session", "closes"),
        "session/delete": ("session", "none"),
        "session/list": ("connection", "none"),
    },
    "v2": {
        "initialize": ("connection", "none"),
        "session/new": ("connection", "opens"),
        "session/resume": ("session", "opens"),
        "session/prompt": ("session", "uses"),
        "session/cancel": ("session", "uses"),
        "session/set_config_option": ("session", "uses"),
        "session/close": ("session", "closes"),
        "session/delete": ("session", "none"),
        "session/list": ("connection", "none"),
    },
}


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_route_table_of_each_locked_revision(rev: str) -> None:
    described = _described(rev)
    table = _router(described, "agent").table()
    found = {name: (r.scope, r.effect) for name, r in table.items() if name in EXPECTED[rev]}
    assert found == EXPECTED[rev]
    assert "session/load" in table if rev == "v1" else "session/load" not in table
    assert table["session/cancel"].kind == "notification"
    # the requests HTTP wants `Acp-Session-Id` for are the ones acting on an open session
    scoped = {n for n, r in table.items() if session_scoped(r) and not r.name.startswith("_")}
    assert EXPECTED[rev].keys() & scoped == {
        n for n, (scope, effect) in EXPECTED[rev].items() if effect in ("uses", "closes")
    }
    client = _router(described, "client").table()
    assert (client["session/update"].scope, client["session/update"].effect) == (
        "session",
        "uses",
    )
    assert client["session/request_permission"].scope == "session"


class _Base(ClientRuntime):
    """What the generated ClientBase is to a user's client."""

    _acp_generated_base = True
    METHODS: ClassVar[dict[str, Any]] = V1.side("client")

    async def session_update(self, params: Any) -> None:
        return None


class _UserClient(_Base):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    async def session_update(self, params: Any) -> None:
        self.seen.append(params)


def test_client_and_agent_use_the_same_router() -> None:
    client = _UserClient()
    agent = AgentRuntime()
    assert type(client.router) is Router and type(agent.router) is Router
    # the client's own copy of the dispatch is gone: one typed caller, one override rule
    assert not hasattr(ClientRuntime, "_call") and not hasattr(Dispatcher, "_typed_caller")
    update = {"sessionId": "s1", "update": {"sessionUpdate": "plan", "entries": []}}
    asyncio.run(client.handle_notification("session/update", update))
    assert client.seen == [update]
    route = client.router.route("session/update")
    assert (route.served, route.scope, route.effect) == (False, "session", "uses")
    with pytest.raises(Exception, match="method not found"):
        asyncio.run(client.handle_request("_nobody/home", {}, None))


class RoutedAgent(AgentRuntime):
    """One new method is one route registration (`_echo/reverse`)."""

    REVISIONS = (V1,)
    _acp_manifest: ClassVar[dict[str, Any]] = {"name": "routed", "version": "0.1.0"}

    def _register_routes(self, router: Router) -> None:
        super()._register_routes(router)
        router.provide("_echo/reverse", self._reverse)
        router.provide("_echo/whoami", self._whoami)

    async def _reverse(self, params: Any, ctx: Any) -> Any:
        return {"text": str(params.get("text", ""))[::-1]}

    async def _whoami(self, params: Any, ctx: Any) -> Any:
        # names a session in its result without opening one
        return {"sessionId": str(params.get("about")), "note": 'a "result" in a string'}


def _frame(rid: int, method: str, params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode()


def test_a_route_registered_once_is_served_on_stdio() -> None:
    async def run() -> list[Any]:
        out: list[Any] = []
        written = Arrivals()

        async def sink(batch: list[tuple[bytes, str | None]]) -> None:
            out.extend(json.loads(frame) for frame, _ in batch)
            written.arrived()

        conn = SessionCore(RoutedAgent, MemorySessionStore())(sink)  # what stdio serves
        conn.feed(_frame(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
        conn.feed(_frame(2, "_echo/reverse", {"text": "abc"}))
        await written.until("two answers", lambda: len(out) == 2)
        await conn.close()
        return out

    answers = asyncio.run(run())
    assert {"jsonrpc": "2.0", "id": 2, "result": {"text": "cba"}} in answers


def _sse_events(client: httpx.Client, url: str, headers: dict[str, str], n: int) -> list[Any]:
    events: list[Any] = []
    with client.stream("GET", url, headers={**headers, "Accept": "text/event-stream"}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if len(events) == n:
                    break
    return events


def test_http_serves_the_route_and_learns_sessions_from_the_routes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[Any] = []
    real = jsonrpc.orjson.loads

    class Counting:
        JSONDecodeError = jsonrpc.orjson.JSONDecodeError

        @staticmethod
        def loads(data: Any) -> Any:
            parsed.append(data)
            return real(data)

    app = create_app(SessionCore(RoutedAgent, MemorySessionStore()))
    with running_server(app) as addr:
        url = f"http://{addr}/acp"
        with httpx.Client(timeout=10) as client:
            init = {"protocolVersion": 1, "clientCapabilities": {}}
            r = client.post(url, content=_frame(1, "initialize", init), headers=_JSON)
            assert r.status_code == 200, r.text
            cid = {"Acp-Connection-Id": r.headers["Acp-Connection-Id"]}
            monkeypatch.setattr(jsonrpc, "orjson", Counting)
            posts = [
                (2, "_echo/reverse", {"text": "abc"}),
                (3, "_echo/whoami", {"about": "sess_elsewhere"}),
                (4, "session/new", {"cwd": "/tmp", "mcpServers": []}),
            ]
            for rid, method, params in posts:
                r = client.post(url, content=_frame(rid, method, params), headers={**_JSON, **cid})
                assert r.status_code == 202, r.text
            events = _sse_events(client, url, cid, 3)
            by_id = {e["id"]: e for e in events}
            assert by_id[2]["result"] == {"text": "cba"}
            sid = by_id[4]["result"]["sessionId"]
            state = app.state.acp.connections[cid["Acp-Connection-Id"]]
            # session/new's route opens its session; a result that merely names one
            # (whoami) opens nothing: the bytes are not searched for session ids
            assert set(state.sessions) == {sid}
            prompt = {"sessionId": "sess_elsewhere", "prompt": [{"type": "text", "text": "x"}]}
            r = client.post(
                url,
                content=_frame(5, "session/prompt", prompt),
                headers={**_JSON, **cid, "Acp-Session-Id": "sess_elsewhere"},
            )
            assert r.status_code == 404, r.text
            # the session-scoped check reads the route: no header, 400
            prompt["sessionId"] = sid
            r = client.post(url, content=_frame(6, "session/prompt", prompt), headers=_JSON | cid)
            assert r.status_code == 400, r.text
            monkeypatch.undo()
    # every POST body was parsed once, by the HTTP app: the core took the parsed message
    assert parsed == []


_JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_the_http_client_sends_the_session_header_by_the_routes(rev: str) -> None:
    from runtime.client.http_client import _scoped

    class Proxy:
        REVISIONS = (_described(rev),)

    scoped = _scoped(ClientRuntime(), Proxy)
    wanted = {n for n, (_, effect) in EXPECTED[rev].items() if effect in ("uses", "closes")}
    assert {n for n in EXPECTED[rev] if scoped(n)} == wanted
