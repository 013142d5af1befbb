"""Interop with the official TypeScript SDK (@agentclientprotocol/sdk 2.4.0 from npm) over
stdio: its `client()` app drives our generated example agents (echo, mail-composer,
research) on v1 stable, v1 unstable and v2, with the schemas shipped in that package.

Test ids read as the matrix: test_ts_client_<feature>[<revision>]; every case builds the
agent `agentgen new` makes from examples/<agent>/ with that revision's schema. Every frame
either side writes is checked against that revision's schema (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import ts_peer
from project_support import import_from, write_project
from ts_peer import PeerError, TsClient
from wait_support import Arrivals

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable

pytestmark = pytest.mark.slow

V1 = ["v1", "v1-unstable"]
ALL = [*V1, "v2"]


@pytest.fixture(scope="session")
def sdk_root() -> Path:
    return ts_peer.install()


_BUILT: dict[tuple[str, str], tuple[str, dict[str, str]]] = {}


@pytest.fixture(scope="session")
def build(sdk_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """build(example, revision) -> (package, env): the example's agent on that revision."""
    from generator.manifest.load import load_manifest

    tmp = tmp_path_factory.mktemp("ts-agents")

    def make(example: str, revision: str) -> tuple[str, dict[str, str]]:
        key = (example, revision)
        if key in _BUILT:
            return _BUILT[key]
        package = f"ts_{example.replace('-', '_')}_{revision.replace('-', '_')}"
        schema = json.loads(ts_peer.schema_file(sdk_root, revision).read_text())
        manifest = load_manifest(REPO / "examples" / example / "agent.yaml").data
        write_project(
            tmp,
            package,
            schema=schema,
            manifest=manifest,
            source_label=f"npm:{ts_peer.SDK}@{ts_peer.SDK_VERSION}#{revision}",
            handlers=(REPO / "examples" / example / "handlers.py").read_text(),
            main="from ._generated import run_agent\nfrom .handlers import Agent\n\nrun_agent(Agent)\n",
        )
        env = {**os.environ, "PYTHONPATH": str(tmp), "ACP_SESSION_DB": str(tmp / f"{package}.db")}
        _BUILT[key] = (package, env)
        return _BUILT[key]

    return make


def _init_params(revision: str, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    caps = capabilities or {}
    if revision.startswith("v2"):
        return {
            "protocolVersion": 2,
            "info": {"name": "ts-peer-test", "version": "1"},
            "capabilities": caps,
        }
    return {
        "protocolVersion": 1,
        "clientInfo": {"name": "ts-peer-test", "version": "1"},
        "clientCapabilities": caps,
    }


@contextlib.asynccontextmanager
async def ts_client(
    sdk_root: Path,
    built: tuple[str, dict[str, str]],
    revision: str,
    capabilities: dict[str, Any] | None = None,
    **env: str,
) -> AsyncIterator[tuple[TsClient, dict[str, Any]]]:
    """The SDK client, connected to the agent and initialized: (client, initialize result)."""
    package, base_env = built
    api = ts_peer.REVISIONS[revision][0]
    client = await TsClient.start(sdk_root, api, [PY, "-m", package], {**base_env, **env})
    ok = False
    try:
        init = await client.request("initialize", _init_params(revision, capabilities))
        yield client, init
        ok = True
    finally:
        code, err = await client.close()
        if ok:
            assert code == 0, err
            assert client.sdk_errors == [], client.sdk_errors  # the SDK refused nothing
            assert "Traceback" not in err, err


async def _new(client: TsClient, revision: str) -> dict[str, Any]:
    params: dict[str, Any] = {"cwd": "/tmp"}
    if not revision.startswith("v2"):
        params["mcpServers"] = []
    result: dict[str, Any] = await client.request("session/new", params)
    return result


def _text(*texts: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": t} for t in texts]


def _turn_end(client: TsClient, sid: str) -> Any:
    """v2: the turn ends with a state_update idle (its stopReason), after the answer."""

    def ended() -> bool:
        return any(
            (p.get("update") or {}).get("sessionUpdate") == "state_update"
            and p["update"].get("state") == "idle"
            and p.get("sessionId") == sid
            for p in client.updates
        )

    return ended


async def _prompt(client: TsClient, revision: str, sid: str, prompt: list[dict[str, Any]]) -> str:
    """Send a prompt; the turn's stop reason (v1: the answer; v2: the idle state update)."""
    result = await client.request("session/prompt", {"sessionId": sid, "prompt": prompt})
    if not revision.startswith("v2"):
        return str(result["stopReason"])
    assert result.get("messageId"), result
    await client.wait_for(_turn_end(client, sid))
    idle = [
        p["update"]
        for p in client.updates
        if (p.get("update") or {}).get("sessionUpdate") == "state_update"
        and p["update"].get("state") == "idle"
    ]
    return str(idle[-1].get("stopReason"))


# ---- echo ---------------------------------------------------------------------------------


@pytest.mark.parametrize("revision", ALL)
def test_ts_client_echo_initialize_and_prompt(sdk_root: Path, build: Any, revision: str) -> None:
    """initialize answers in the client's version with the agent's identity; each text block
    of a prompt comes back as one chunk the SDK accepts; the turn ends with end_turn."""
    built = build("echo", revision)

    async def main() -> None:
        async with ts_client(sdk_root, built, revision) as (client, init):
            assert init["protocolVersion"] == (2 if revision == "v2" else 1)
            info = init["info"] if revision == "v2" else init["agentInfo"]
            assert info["name"] == "echo-agent" and info["version"] == "0.1.0"
            sid = (await _new(client, revision))["sessionId"]
            stop = await _prompt(client, revision, sid, _text("hello", " world", "!"))
            assert stop == "end_turn"
            assert client.texts(sid) == ["hello", " world", "!"]
            # a second turn on the same session
            client.updates.clear()
            assert await _prompt(client, revision, sid, _text("again")) == "end_turn"
            assert client.texts(sid) == ["again"]

    asyncio.run(main())


@pytest.mark.parametrize("revision", V1)
def test_ts_client_echo_active_session(sdk_root: Path, build: Any, revision: str) -> None:
    """The SDK's own session helper (buildSession().start(), prompt, readText) works."""
    built = build("echo", revision)

    async def main() -> None:
        async with ts_client(sdk_root, built, revision) as (client, _init):
            started = await client.call("session", request={"cwd": "/tmp", "mcpServers": []})
            got = await client.call("session_prompt", session=started["sessionId"], text="hi there")
            assert got == {"text": "hi there", "response": {"stopReason": "end_turn"}}

    asyncio.run(main())


@pytest.mark.parametrize("revision", ALL)
def test_ts_client_echo_load_resume_after_restart(
    sdk_root: Path, build: Any, revision: str
) -> None:
    """A stdio agent keeps its sessions (SQLite by default) and advertises it: after a
    restart the SDK client loads (v1: history replayed) or resumes (v2) the session."""
    built = build("echo", revision)

    async def main() -> None:
        async with ts_client(sdk_root, built, revision) as (client, init):
            caps = init.get("agentCapabilities") or init.get("capabilities") or {}
            sid = (await _new(client, revision))["sessionId"]
            assert await _prompt(client, revision, sid, _text("remember me")) == "end_turn"
        async with ts_client(sdk_root, built, revision) as (client, init):
            if revision == "v2":
                await client.request(
                    "session/resume",
                    {"sessionId": sid, "cwd": "/tmp", "replayFrom": {"type": "start"}},
                )
            else:
                assert caps.get("loadSession") is True, caps
                await client.request(
                    "session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []}
                )
            await client.wait_for(lambda: "remember me" in client.texts(sid))
            client.updates.clear()
            assert await _prompt(client, revision, sid, _text("still here")) == "end_turn"
            if revision == "v2":  # v2 updates may arrive after the turn's idle state_update
                await client.wait_for(lambda: client.texts(sid) == ["still here"])
            assert client.texts(sid) == ["still here"]

    asyncio.run(main())


# ---- research: providers, cancel, $/cancel_request ------------------------------------------


@pytest.mark.parametrize("revision", ALL)
def test_ts_client_research_cancel(sdk_root: Path, build: Any, revision: str) -> None:
    """session/cancel while the research run streams: the turn ends `cancelled`, the
    session takes the next prompt."""
    built = build("research", revision)

    async def main() -> None:
        async with ts_client(sdk_root, built, revision, RESEARCH_STEP_DELAY="0.5") as (client, _):
            sid = (await _new(client, revision))["sessionId"]
            turn = asyncio.ensure_future(
                _prompt(client, revision, sid, _text("why is the sky blue?"))
            )
            await client.wait_for(lambda: len(client.texts(sid)) >= 1)
            await client.call("notify", method="session/cancel", params={"sessionId": sid})
            assert await asyncio.wait_for(turn, 20) == "cancelled"
            assert len(client.texts(sid)) < 5  # it stopped before the last step

    asyncio.run(main())


@pytest.mark.parametrize("revision", V1)
def test_ts_client_research_cancel_request(sdk_root: Path, build: Any, revision: str) -> None:
    """The SDK's cancellation signal on a running session/prompt sends `$/cancel_request`:
    the prompt is answered -32800 and the session is free again."""
    built = build("research", revision)

    async def main() -> None:
        async with ts_client(sdk_root, built, revision, RESEARCH_STEP_DELAY="0.5") as (client, _):
            sid = (await _new(client, revision))["sessionId"]
            pending = client.send(
                "request",
                method="session/prompt",
                params={"sessionId": sid, "prompt": _text("a long question")},
            )
            await client.wait_for(lambda: len(client.texts(sid)) >= 1)
            await client.call("cancel", target=pending.command_id)  # type: ignore[attr-defined]
            with pytest.raises(PeerError) as err:
                await asyncio.wait_for(pending, 20)
            assert err.value.code == -32800
            client.updates.clear()
            stop = await _prompt(client, revision, sid, _text("next"))
            assert stop == "end_turn"

    asyncio.run(main())


def test_ts_client_research_providers(sdk_root: Path, build: Any) -> None:
    """v1 unstable (the SDK's /unstable entry): providers/list shows the manifest's provider
    and never headers; providers/set reroutes it; unknown or unsupported is -32602."""
    built = build("research", "v1-unstable")
    secret = "sk-ts-peer-SECRET-4242"

    async def main() -> None:
        async with ts_client(sdk_root, built, "v1-unstable") as (client, init):
            assert init["agentCapabilities"].get("providers") is not None
            listed = await client.request("providers/list", {})
            (main_provider,) = listed["providers"]
            assert main_provider["providerId"] == "main" and main_provider["required"] is True
            await client.request(
                "providers/set",
                {
                    "providerId": "main",
                    "apiType": "anthropic",
                    "baseUrl": "https://llm-proxy.example",
                    "headers": {"x-api-key": secret},
                },
            )
            listed = await client.request("providers/list", {})
            assert listed["providers"][0]["current"] == {
                "apiType": "anthropic",
                "baseUrl": "https://llm-proxy.example",
            }
            assert secret not in json.dumps(listed)
            with pytest.raises(PeerError) as err:
                await client.request(
                    "providers/set",
                    {
                        "providerId": "ghost",
                        "apiType": "openai",
                        "baseUrl": "https://x",
                        "headers": {},
                    },
                )
            assert err.value.code == -32602
            with pytest.raises(PeerError) as err:
                await client.request("providers/disable", {"providerId": "main"})
            assert err.value.code == -32602
            sid = (await _new(client, "v1-unstable"))["sessionId"]
            assert await _prompt(client, "v1-unstable", sid, _text("q")) == "end_turn"
            assert secret not in json.dumps(client.updates)

    asyncio.run(main())


# ---- mail-composer: config options, JSON input, the approval interrupt ----------------------

BRIEF = {"brief": "Lunch on Friday at noon. Bring the slides.", "recipients": ["ana@example.com"]}


def _options(result: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for o in result.get("configOptions") or ():
        out[o.get("configId") or o.get("id")] = o
    return out


@pytest.mark.parametrize(
    "revision",
    [
        *V1,
        "v2",
    ],
)
def test_ts_client_mail_config_and_interrupt_with_elicitation(
    sdk_root: Path, build: Any, revision: str
) -> None:
    """The session's config options reach the SDK; set_config_option changes the tone;
    a JSON prompt runs the composer, whose approval interrupt arrives as elicitation/create
    (the client declared form elicitation) and the answer completes the turn."""
    built = build("mail-composer", revision)
    caps = {"elicitation": {"form": {}}}

    async def main() -> None:
        async with ts_client(sdk_root, built, revision, capabilities=caps) as (client, _):
            new = await _new(client, revision)
            sid = new["sessionId"]
            options = _options(new)
            assert options["tone"]["currentValue"] == "friendly"
            changed = await client.request(
                "session/set_config_option",
                # v2 tags the value's kind (`type`: "id" for a select's value id)
                {
                    "sessionId": sid,
                    "configId": "tone",
                    "value": "formal",
                    **({"type": "id"} if revision == "v2" else {}),
                },
            )
            assert _options(changed)["tone"]["currentValue"] == "formal"
            await client.call(
                "answer",
                method="elicitation/create",
                result={"action": "accept", "content": {"approved": True}},
            )
            stop = await _prompt(client, revision, sid, _text(json.dumps(BRIEF)))
            assert stop == "end_turn"
            (asked,) = [r for r in client.requests if r["method"] == "elicitation/create"]
            assert asked["params"]["sessionId"] == sid
            body = "".join(client.texts(sid))
            assert body.startswith("Dear Ana,")  # the formal tone

    asyncio.run(main())


@pytest.mark.parametrize(
    "revision",
    ALL,
)
def test_ts_client_mail_interrupt_without_elicitation(
    sdk_root: Path, build: Any, revision: str
) -> None:
    """A client that did not declare elicitation is never sent elicitation/create: the
    interrupt becomes session/request_permission (approve/decline)."""
    built = build("mail-composer", revision)

    async def main() -> None:
        async with ts_client(sdk_root, built, revision) as (client, _):
            sid = (await _new(client, revision))["sessionId"]
            await client.call(
                "answer",
                method="elicitation/create",
                result={"error": {"code": -32601, "message": "not declared"}},
            )
            await client.call(
                "answer",
                method="session/request_permission",
                result={"outcome": {"outcome": "selected", "optionId": "accept"}},
            )
            stop = await _prompt(client, revision, sid, _text(json.dumps(BRIEF)))
            assert stop == "end_turn"
            assert [r["method"] for r in client.requests] == ["session/request_permission"]

    asyncio.run(main())


@pytest.mark.parametrize(
    "revision",
    ALL,
)
def test_ts_client_mail_plain_text_prompt(sdk_root: Path, build: Any, revision: str) -> None:
    """ACP: agents MUST accept text. Plain text that is not the input JSON ends the turn
    normally with a message saying what the agent expects, never a JSON-RPC error."""
    built = build("mail-composer", revision)

    async def main() -> None:
        async with ts_client(sdk_root, built, revision) as (client, _):
            sid = (await _new(client, revision))["sessionId"]
            stop = await _prompt(client, revision, sid, _text("write to ana about lunch"))
            assert stop == "end_turn"
            assert "brief" in "".join(client.texts(sid))

    asyncio.run(main())


# ---- our generated client drives the SDK's agent() ----------------------------------------

CLIENT_HANDLERS = """
from __future__ import annotations

from typing import Any

from ._generated.dispatcher import ClientBase


class Client(ClientBase):
    def __init__(self) -> None:
        super().__init__()
        self.updates: list[Any] = []

    async def session_update(self, params: Any) -> None:
        self.updates.append(params)
"""


@pytest.mark.parametrize("revision", ["v1", "v1-unstable", "v2"])
def test_generated_client_drives_ts_echo_agent(
    sdk_root: Path, tmp_path: Path, revision: str
) -> None:
    """The client `agentgen new --role client` makes, on each revision, against the SDK's
    echo agent (tests/peers/ts_echo_agent.mjs): typed initialize / session/new / prompt,
    every update parsed into the revision's models; an agent error arrives typed."""
    import importlib

    package = f"tsclient_{revision.replace('-', '_')}"
    schema = json.loads(ts_peer.schema_file(sdk_root, revision).read_text())
    manifest = {"name": "ts-client", "version": "0.1.0"}
    write_project(
        tmp_path,
        package,
        schema=schema,
        manifest=manifest,
        role="client",
        source_label=f"npm:{ts_peer.SDK}@{ts_peer.SDK_VERSION}#{revision}",
        handlers=CLIENT_HANDLERS,
    )
    # a generated project, not on pytest's pythonpath: imported by its package name
    handlers = import_from(tmp_path, f"{package}.handlers")
    dispatcher = importlib.import_module(f"{package}._generated.dispatcher")
    client_mod = importlib.import_module(f"{package}._generated.runtime.client.client")
    errors = importlib.import_module(f"{package}._generated.runtime.wire.errors")
    models = importlib.import_module(f"{package}._generated.models")
    command = ["node", str(sdk_root / "ts_echo_agent.mjs"), ts_peer.REVISIONS[revision][0]]

    class Recording(handlers.Client):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.arrivals = Arrivals()  # wakes on each update

        async def session_update(self, params: Any) -> None:
            await super().session_update(params)
            self.arrivals.arrived()

    async def main() -> None:
        client = Recording()
        async with client_mod.spawn_agent(client, dispatcher.AgentConnection, *command) as agent:
            init = await agent.initialize(_init_params(revision))
            assert init.protocol_version.root == (2 if revision == "v2" else 1)
            new = await agent.session_new(
                {"cwd": "/tmp"} if revision == "v2" else {"cwd": "/tmp", "mcpServers": []}
            )
            sid = new.session_id.root
            answer = await agent.session_prompt({"sessionId": sid, "prompt": _text("ping", "pong")})

            def updates() -> list[Any]:  # the parsed models, back on the wire
                return [
                    u.model_dump(by_alias=True, exclude_unset=True, mode="json")["update"]
                    for u in client.updates
                ]

            if revision == "v2":
                assert answer.message_id.root
                await client.arrivals.until(
                    "the idle update", lambda: any(u.get("state") == "idle" for u in updates())
                )
            else:
                assert answer.stop_reason.value == "end_turn"
            # each update was parsed into the revision's params class of session/update
            params_cls = getattr(models, dispatcher.CLIENT_METHODS["session/update"][2])
            assert client.updates and all(isinstance(u, params_cls) for u in client.updates)
            chunks = [
                u["content"]["text"]
                for u in updates()
                if u["sessionUpdate"] == "agent_message_chunk"
            ]
            assert chunks == ["ping", "pong"]
            with pytest.raises(errors.RpcError) as err:
                await agent.session_prompt({"sessionId": sid, "prompt": _text("fail")})
            assert err.value.code == 1001 and err.value.data["transient"] is True

    asyncio.run(main())
