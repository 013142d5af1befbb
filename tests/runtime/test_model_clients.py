"""A model agent's provider client lives across turns (templates/runtime/model/clients.py):
real agent processes over stdio against a scripted OpenAI Chat Completions endpoint on
127.0.0.1 that keeps connections alive and counts them (tests/keepalive_endpoint.py), and
the cache itself in process.

- two turns on one session reuse one TCP connection (the model read from the environment,
  and through the client's route);
- a changed route (another base URL, another `Authorization`) gets a new client, and the
  old credentials never reach the new endpoint; two routes in one process never see each
  other's key;
- a cut stream, a server that dropped the idle connection, a 401: the next turn works;
- the agent exits without a ResourceWarning or an unclosed client;
- in process: one client a loop, the cache bounded (an evicted client closed once no turn
  uses it), everything closed by `close_all`.
"""

from __future__ import annotations

import asyncio
import gc
import json
import warnings
from pathlib import Path
from typing import Any

import hardening_support as hs
import pytest
from coder_support import Editor
from keepalive_endpoint import keepalive_endpoint

KEY_A = "sk-clients-alpha-1111"
KEY_B = "sk-clients-bravo-2222"
KEY_C = "sk-clients-charlie-3333"

HANDLERS = """
from __future__ import annotations

from typing import Any

from pydantic_ai import Agent as Model

from ._generated.acp import AgentBase, Turn, run_model

MODEL = Model(instructions="Be brief.")


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        await run_model(turn, MODEL, input, provider="main", default_model="openai:gpt-test")
"""

MANIFEST: dict[str, Any] = {
    "name": "clients-agent",
    "version": "0.1.0",
    "providers": [{"id": "main", "supported": ["openai", "anthropic"], "required": False}],
    "llm": {"provider": "main", "instructions": "Be brief."},
}
# every ResourceWarning shown (the default hides them), none turned into an error: an
# unclosed socket or client is reported on stderr, which the tests read
WARN = {"PYTHONWARNINGS": "always::ResourceWarning"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    tmp = tmp_path_factory.mktemp("clients_agent")
    return hs.build_revisions(
        tmp, shared_acp, "clients_agent", manifest=MANIFEST, handlers=HANDLERS, model_env=False
    )


def _env(env: dict[str, str], url: str | None = None, key: str = KEY_A) -> dict[str, str]:
    out = {k: v for k, v in env.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    out.update(WARN)
    if url is not None:  # the model read from the environment: a gateway's base URL
        out.update({"OPENAI_BASE_URL": url, "OPENAI_API_KEY": key})
    return out


async def _session(ed: Editor, root: Path) -> str:
    await ed.initialize(1, {})
    return str((await ed.call("session/new", {"cwd": str(root), "mcpServers": []}))["sessionId"])


async def _route(ed: Editor, url: str, key: str) -> None:
    route = {
        "providerId": "main",
        "apiType": "openai",
        "baseUrl": url,
        "headers": {"Authorization": f"Bearer {key}"},
    }
    await ed.call("providers/set", route)


async def _turn(ed: Editor, sid: str, text: str) -> dict[str, Any]:
    """One prompt: `{"stop": reason}` or `{"error": error}`."""
    ed.next_id += 1
    rid = ed.next_id
    prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
    await ed.send({"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": prompt})
    while True:
        msg = await asyncio.wait_for(ed.inbox.get(), 30)
        if msg.get("id") == rid:
            break
    if "error" in msg:
        return {"error": msg["error"]}
    return {"stop": msg["result"]["stopReason"]}


def _clean(stderr: bytes) -> None:
    text = stderr.decode(errors="replace")
    for bad in ("ResourceWarning", "Unclosed", "unclosed", "Exception ignored", "Traceback"):
        assert bad not in text, text[-3000:]


# ---- keep-alive across turns ------------------------------------------------------------
@pytest.mark.parametrize("via", ["env", "route"])
def test_two_turns_on_one_session_reuse_one_connection(
    built: Any, tmp_path: Path, via: str
) -> None:
    """Fails on the old code: a new client, so a new TCP connection, every turn."""
    env, package = built["v1"]
    with keepalive_endpoint() as ep:

        async def main() -> tuple[list[dict[str, Any]], bytes]:
            ed = await Editor.start(_env(env, ep.url if via == "env" else None), package, tmp_path)
            sid = await _session(ed, tmp_path)
            if via == "route":
                await _route(ed, ep.url, KEY_A)
            turns = [await _turn(ed, sid, f"turn {i}") for i in range(3)]
            return turns, await ed.stop()

        turns, stderr = asyncio.run(main())
    assert turns == [{"stop": "end_turn"}] * 3, turns
    assert len(ep.seen) == 3
    assert len(ep.connections) == 1, ep.connections
    assert {s["port"] for s in ep.seen} == set(ep.connections)
    assert {s["authorization"] for s in ep.seen} == {f"Bearer {KEY_A}"}
    _clean(stderr)


# ---- a changed route --------------------------------------------------------------------
def test_a_changed_route_gets_a_new_client_and_old_credentials_never_reach_the_new_one(
    built: Any, tmp_path: Path
) -> None:
    env, package = built["v1"]
    with keepalive_endpoint() as one, keepalive_endpoint() as two:

        async def main() -> tuple[list[dict[str, Any]], bytes]:
            ed = await Editor.start(_env(env), package, tmp_path)
            sid = await _session(ed, tmp_path)
            out = []
            await _route(ed, one.url, KEY_A)
            out.append(await _turn(ed, sid, "first"))
            await _route(ed, two.url, KEY_B)  # another endpoint, another key
            out.append(await _turn(ed, sid, "second"))
            await _route(ed, two.url, KEY_C)  # the same endpoint, another key
            out.append(await _turn(ed, sid, "third"))
            sid2 = await _session(ed, tmp_path)  # another session on the route now set
            out.append(await _turn(ed, sid2, "fourth"))
            await _route(ed, one.url, KEY_A)  # back to the first: its client again
            out.append(await _turn(ed, sid, "fifth"))
            return out, await ed.stop()

        turns, stderr = asyncio.run(main())
    assert turns == [{"stop": "end_turn"}] * 5, turns
    assert [s["authorization"] for s in one.seen] == [f"Bearer {KEY_A}"] * 2
    assert [s["authorization"] for s in two.seen] == [
        f"Bearer {KEY_B}",
        f"Bearer {KEY_C}",
        f"Bearer {KEY_C}",
    ]
    for seen in two.seen:  # nothing of key A anywhere in what reached the second endpoint
        assert KEY_A not in json.dumps(seen)
    # key B and key C: two clients, two connections; C's second turn on C's connection
    ports = [s["port"] for s in two.seen]
    assert ports[0] != ports[1] and ports[1] == ports[2], ports
    assert len(two.connections) == 2
    assert len(one.connections) == 1  # the first route's client kept (the cache holds it)
    _clean(stderr)


# ---- failures do not poison the pool ----------------------------------------------------
@pytest.mark.parametrize(
    ("first", "name"),
    [
        (("cut", ["Half", " an"]), "ModelUnavailable"),
        (("close", ["dropped"]), None),
        (("status", 401, {}, {"error": {"message": "bad key"}}), "ModelAuthentication"),
        (("status", 429, {"Retry-After": "3"}, {"error": {"message": "slow"}}), "ModelUnavailable"),
    ],
)
def test_after_a_failure_the_next_turn_works(
    built: Any, tmp_path: Path, first: tuple[Any, ...], name: str | None
) -> None:
    """A cut stream (the connection ends inside the body), a server that dropped the idle
    connection without a word, a 401, a 429: the next turn on the same client works."""
    env, package = built["v1"]
    with keepalive_endpoint(first, ("stream", ["whole"]), ("stream", ["again"])) as ep:

        async def main() -> tuple[list[dict[str, Any]], bytes]:
            ed = await Editor.start(_env(env), package, tmp_path)
            sid = await _session(ed, tmp_path)
            await _route(ed, ep.url, KEY_A)
            turns = [await _turn(ed, sid, f"turn {i}") for i in range(3)]
            return turns, await ed.stop()

        turns, stderr = asyncio.run(main())
    if name is None:
        assert turns[0] == {"stop": "end_turn"}, turns
    else:
        assert turns[0]["error"]["data"]["name"] == name, turns
    assert turns[1:] == [{"stop": "end_turn"}] * 2, turns
    assert len(ep.seen) == 3  # no silent retry (max_retries=0)
    if first[0] == "status":  # an error answer leaves the connection alive: one connection
        assert len(ep.connections) == 1, ep.connections
    else:  # a new connection after the one that ended, then kept
        assert len(ep.connections) == 2, ep.connections
        assert ep.seen[1]["port"] == ep.seen[2]["port"]
    _clean(stderr)


# ---- in process: loops, bounds, closing -------------------------------------------------
def _routes(*pairs: tuple[str, str]) -> list[Any]:
    from runtime.agent.providers import ProviderRoute

    return [
        ProviderRoute("main", "openai", url, {"Authorization": f"Bearer {key}"})
        for url, key in pairs
    ]


def test_in_process_one_client_a_loop_and_each_route_its_own() -> None:
    """The same route on two event loops: two clients (a pool belongs to its loop); two
    routes on one loop: two clients, each sending its own key."""
    from pydantic_ai import Agent as Model
    from runtime.model import clients
    from runtime.model.route import routed_model

    with keepalive_endpoint() as ep:
        a, b = _routes((ep.url, KEY_A), (ep.url, KEY_B))

        async def one_loop() -> tuple[Any, Any]:
            first = routed_model(a, "gpt-test")
            assert routed_model(a, "gpt-test") is first  # cached
            other = routed_model(b, "gpt-test")
            assert other is not first
            model = Model(instructions="x")
            for m in (first, other, first):
                async with clients.held(m):
                    assert (await model.run("hi", model=m)).output == "ok"
            await clients.close_all()
            return first, other

        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            one = asyncio.run(one_loop())
            two = asyncio.run(one_loop())
            gc.collect()
    assert one[0] is not two[0]
    keys = [s["authorization"] for s in ep.seen]
    assert keys == [f"Bearer {KEY_A}", f"Bearer {KEY_B}", f"Bearer {KEY_A}"] * 2, keys
    by_port: dict[int, set[str]] = {}
    for s in ep.seen:
        by_port.setdefault(s["port"], set()).add(s["authorization"])
    assert all(len(keys) == 1 for keys in by_port.values()), by_port  # no connection shared
    assert len(ep.connections) == 4  # two routes x two loops


def test_in_process_the_cache_is_bounded_and_an_evicted_client_closes_once_unused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runtime.model import clients
    from runtime.model.route import routed_model

    monkeypatch.setenv("ACP_MODEL_CLIENTS", "2")
    a, b, c = _routes(
        ("http://127.0.0.1:9/v1", KEY_A),
        ("http://127.0.0.1:9/v1", KEY_B),
        ("http://127.0.0.1:9/v1", KEY_C),
    )

    async def main() -> None:
        ma = routed_model(a, "m")
        async with clients.held(ma):  # a turn uses a's client
            routed_model(b, "m")
            routed_model(c, "m")  # a evicted, but in use: still open
            assert not ma.client.is_closed()
            assert clients.size() == 2
        for _ in range(100):  # closed (in a task) once its turn ended
            if ma.client.is_closed():
                break
            await asyncio.sleep(0.01)
        assert ma.client.is_closed()
        mb = routed_model(b, "m")
        await clients.close_all()
        assert mb.client.is_closed() and clients.size() == 0

    asyncio.run(main())


# ---- over WebSocket: two connections, two routes, one agent process ---------------------
def test_two_connections_with_their_own_routes_never_share_a_client(
    built: Any, tmp_path: Path
) -> None:
    """One HTTP agent, two WebSocket connections, each routing `main` to the same endpoint
    with its own key; their prompts at once, twice: each request carries its connection's
    key, no TCP connection to the endpoint ever carries both keys, one a key, kept; the
    agent ends (SIGTERM) without a ResourceWarning or an unclosed client."""
    import websockets
    from coder_support import LinkedEditor

    env, package = built["v1"]
    port = hs.free_port()
    with keepalive_endpoint() as ep:

        async def main() -> list[Any]:
            proc = await asyncio.to_thread(hs.start_http, _env(env), package, port)
            try:
                async with (
                    websockets.connect(f"ws://127.0.0.1:{port}/acp") as one,
                    websockets.connect(f"ws://127.0.0.1:{port}/acp") as two,
                ):
                    eds = []
                    for ws, key in ((one, KEY_A), (two, KEY_B)):
                        frames: asyncio.Queue[bytes | None] = asyncio.Queue()

                        async def pump(ws: Any = ws, frames: Any = frames) -> None:
                            async for frame in ws:
                                await frames.put(
                                    frame if isinstance(frame, bytes) else frame.encode()
                                )
                            await frames.put(None)

                        asyncio.get_running_loop().create_task(pump())
                        ed = LinkedEditor(
                            lambda data, ws=ws: ws.send(data.decode()), frames, tmp_path
                        )
                        sid = await _session(ed, tmp_path)
                        await _route(ed, ep.url, key)
                        eds.append((ed, sid))
                    out = []
                    for i in range(2):  # both connections' prompts at once
                        out += await asyncio.gather(*(_turn(ed, sid, f"t{i}") for ed, sid in eds))
            finally:
                proc.terminate()
                await asyncio.to_thread(proc.wait, 15)
            assert proc.stderr is not None
            out.append(proc.stderr.read())
            return out

        *turns, stderr = asyncio.run(main())
    assert turns == [{"stop": "end_turn"}] * 4, turns
    keys = sorted(s["authorization"] for s in ep.seen)
    assert keys == [f"Bearer {KEY_A}"] * 2 + [f"Bearer {KEY_B}"] * 2, keys
    by_port: dict[int, set[str]] = {}
    for s in ep.seen:
        by_port.setdefault(s["port"], set()).add(s["authorization"])
    assert all(len(k) == 1 for k in by_port.values()), by_port
    assert len(ep.connections) == 2, ep.connections
    _clean(stderr)
