"""Protocol revisions on the wire: the typed revision description, the v2 fixes, and one
agent generated with v1 and v2 serving a client of each.

Every frame the agent writes is read raw (JSON lines over stdio) and validated against
the models generated from the revision it speaks; the assertions on field names are
the schema's (`messageId` required on v2 message chunks, `configId`, `info`), checked
against the raw frame as well so a lenient model cannot hide a wrong name.  The schemas
come from the npm package the lock names (`@agentclientprotocol/sdk` 2.4.0), fetched
once into the test cache.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, Self

import mypy_support
import pytest
from project_support import import_from, write_project
from scaffold_support import store  # noqa: F401 - fixture
from wait_support import Arrivals

from generator.errors import AgentgenError
from generator.protocol.revision import describe
from generator.render import render_generated

PY = sys.executable
NPM = "npm:@agentclientprotocol/sdk@2.4.0#schema/{}"

MANIFEST: dict[str, Any] = {
    "name": "rev-agent",
    "version": "0.1.0",
    "title": "Revision Agent",
    "description": "agent for the revision tests",
    "config": {
        "options": [
            {
                "id": "model",
                "name": "Model",
                "type": "choice",
                "default": "small",
                "values": ["small", "large"],
            },
            {"id": "verbose", "name": "Verbose", "type": "boolean", "default": False},
        ],
    },
}

HANDLERS = """
from __future__ import annotations

from typing import Any, Self

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent.agent import Turn


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> Any:
        for block in input:
            if block.get("type") == "text":
                if block["text"] == "boom":
                    raise RuntimeError("handler failed")
                await turn.send_text(block["text"])
        return None
"""


def _schema(path: str) -> dict[str, Any]:
    from generator.sources import load_schema

    return dict(load_schema(NPM.format(path)).data)


@pytest.fixture(scope="module")
def schemas() -> dict[str, dict[str, Any]]:
    return {"v1": _schema("v1/schema.json"), "v2": _schema("v2/schema.json")}


def _build(tmp: Path, package: str, main: dict[str, Any], *also: dict[str, Any]) -> Path:
    write_project(
        tmp,
        package,
        schema=main,
        manifest=MANIFEST,
        also=tuple((s, None, f"schema {i}") for i, s in enumerate(also)),
        handlers=HANDLERS,
    )
    return tmp


@pytest.fixture(scope="module")
def v2_agent(tmp_path_factory: pytest.TempPathFactory, schemas: dict[str, Any]) -> Path:
    return _build(tmp_path_factory.mktemp("rev2"), "revtwo", schemas["v2"])


@pytest.fixture(scope="module")
def both_agent(tmp_path_factory: pytest.TempPathFactory, schemas: dict[str, Any]) -> Path:
    # given v2 first: the order of --schema does not matter, the highest version is primary
    return _build(tmp_path_factory.mktemp("revboth"), "revboth", schemas["v2"], schemas["v1"])


def _models(root: Path, module: str) -> Any:
    return import_from(root, module)


class Raw:
    """A JSON-RPC peer speaking raw frames to an agent subprocess over stdio."""

    def __init__(self, root: Path, package: str) -> None:
        self.root = root
        self.package = package
        self.notes: list[dict[str, Any]] = []

    async def __aenter__(self) -> Self:
        serve = (
            "import asyncio\n"
            f"from {self.package}.handlers import Agent\n"
            f"from {self.package}._generated.runtime.serve import serve_agent_stdio\n"
            "asyncio.run(serve_agent_stdio(Agent()))\n"
        )
        env = {**os.environ, "PYTHONPATH": str(self.root)}
        self.proc = await asyncio.create_subprocess_exec(
            PY, "-c", serve, stdin=-1, stdout=-1, env=env
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    async def frame(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 30)
        assert line, "the agent closed its output"
        return dict(json.loads(line))

    async def call(self, rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        msg = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        await self.proc.stdin.drain()
        while True:
            f = await self.frame()
            if f.get("id") == rid and "method" not in f:
                return f
            self.notes.append(f)

    async def until_idle(self) -> None:
        """Read session/update notifications until a v2 `state_update` says idle."""
        while not any(
            (n.get("params") or {}).get("update", {}).get("state") == "idle" for n in self.notes
        ):
            self.notes.append(await self.frame())


def _updates(raw: Raw) -> list[dict[str, Any]]:
    return [n["params"] for n in raw.notes if n.get("method") == "session/update"]


V1_INIT = {"clientInfo": {"name": "t", "version": "0"}, "clientCapabilities": {}}
V2_INIT = {"info": {"name": "t", "version": "0"}, "capabilities": {}}


def test_the_revision_description_reads_field_names_from_the_schema(
    schemas: dict[str, Any],
) -> None:
    r1, r2 = describe(schemas["v1"]), describe(schemas["v2"])
    assert (r1.protocol_version, r2.protocol_version) == (1, 2)
    assert (r1.init.request_info, r2.init.request_info) == ("clientInfo", "info")
    assert (r1.init.response_capabilities, r2.init.response_capabilities) == (
        "agentCapabilities",
        "capabilities",
    )
    assert r2.init.request_info_required and not r1.init.request_info_required
    assert (r1.config_option.id, r2.config_option.id) == ("id", "configId")
    assert r2.turn.chunk_message_id == "messageId" and r2.turn.chunk_message_id_required
    assert not r1.turn.chunk_message_id_required
    assert r2.turn.prompt_message_id_required and r2.turn.lifecycle == "v2"
    assert r1.sessions.load and not r2.sessions.load and r2.sessions.resume_replay_from
    # a schema without initialize is refused with a located error
    with pytest.raises(AgentgenError):
        describe({"$defs": {}})


def test_v2_agent_frames_match_the_v2_schema(v2_agent: Path) -> None:
    """initialize, session/new (config options), set_config_option, prompt and its
    updates, each frame validated against the v2 models and its field names checked raw."""
    m = _models(v2_agent, "revtwo._generated.models")

    async def main() -> None:
        async with Raw(v2_agent, "revtwo") as raw:
            init = (await raw.call(1, "initialize", {"protocolVersion": 2, **V2_INIT}))["result"]
            m.InitializeResponse.model_validate(init)
            assert init["protocolVersion"] == 2 and init["info"]["name"] == "rev-agent"
            assert "agentInfo" not in init and "agentCapabilities" not in init
            # v2 capability markers: `{}` supported, absent not (never a boolean)
            assert init["capabilities"]["session"]["prompt"] == {"embeddedContext": {}}
            assert set(init["capabilities"]) <= {"session", "auth", "_meta"}

            new = (await raw.call(2, "session/new", {"cwd": "/tmp"}))["result"]
            m.NewSessionResponse.model_validate(new)
            for opt in new["configOptions"]:
                m.SessionConfigOption.model_validate(opt)
                assert "configId" in opt and "id" not in opt, opt
            assert {o["configId"] for o in new["configOptions"]} == {"model", "verbose"}
            sid = new["sessionId"]

            setp = {"sessionId": sid, "configId": "model", "type": "id", "value": "large"}
            m.SetSessionConfigOptionRequest.model_validate(setp)
            chosen = (await raw.call(3, "session/set_config_option", setp))["result"]
            m.SetSessionConfigOptionResponse.model_validate(chosen)
            model = next(o for o in chosen["configOptions"] if o["configId"] == "model")
            assert model["currentValue"] == "large"

            prompt = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
            accepted = await raw.call(4, "session/prompt", {"sessionId": sid, "prompt": prompt})
            m.PromptResponse.model_validate(accepted["result"])
            await raw.until_idle()
            updates = _updates(raw)
            for u in updates:
                m.UpdateSessionNotification.model_validate(u)
            kinds = [u["update"]["sessionUpdate"] for u in updates]
            assert kinds[0] == "user_message" and kinds[-1] == "state_update"
            user = updates[0]["update"]
            assert user["messageId"] == accepted["result"]["messageId"]
            chunks = [
                u["update"]
                for u in updates
                if u["update"]["sessionUpdate"] == "agent_message_chunk"
            ]
            assert [c["content"]["text"] for c in chunks] == ["one", "two"]
            ids = {c.get("messageId") for c in chunks}
            assert len(ids) == 1 and None not in ids and user["messageId"] not in ids
            assert updates[-1]["update"] == {
                "sessionUpdate": "state_update",
                "state": "idle",
                "stopReason": "end_turn",
            }

            # a failing handler ends the turn with the revision's `error` stop reason
            raw.notes.clear()
            boom = [{"type": "text", "text": "boom"}]
            await raw.call(5, "session/prompt", {"sessionId": sid, "prompt": boom})
            await raw.until_idle()
            idle = _updates(raw)[-1]
            m.UpdateSessionNotification.model_validate(idle)
            assert idle["update"]["stopReason"] == "error"
            assert idle["update"]["error"]["code"] == -32603

    asyncio.run(main())


def test_the_v2_models_reject_the_old_wrong_frames(v2_agent: Path) -> None:
    """The validation above can fail: the frames the runtime used to write are refused."""
    from pydantic import ValidationError

    m = _models(v2_agent, "revtwo._generated.models")
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "a"}}
    with pytest.raises(ValidationError):
        m.UpdateSessionNotification.model_validate({"sessionId": "s", "update": chunk})
    with pytest.raises(ValidationError):
        m.SessionConfigOption.model_validate(
            {"id": "model", "name": "M", "type": "boolean", "currentValue": True}
        )
    with pytest.raises(ValidationError):
        m.InitializeResponse.model_validate(
            {"protocolVersion": 1, "agentInfo": {"name": "a", "version": "1"}}
        )
    with pytest.raises(ValidationError):
        m.PromptResponse.model_validate({})


@pytest.mark.wire_check_send_only  # it also sends a v1 body under version 2 on purpose
def test_a_v1_initialize_to_a_v2_only_agent_negotiates(v2_agent: Path) -> None:
    """ACP's rule: a version the agent does not serve gets the agent's latest, in the
    agent's shape; never -32602 for a version mismatch, never version 1 with a v2 body.
    A client that offered an older version than the agent serves cannot speak the
    answer: its next request is refused with what the agent speaks."""
    m = _models(v2_agent, "revtwo._generated.models")

    async def main() -> None:
        async with Raw(v2_agent, "revtwo") as raw:
            r = await raw.call(1, "initialize", {"protocolVersion": 1, **V1_INIT})
            assert "error" not in r, r
            m.InitializeResponse.model_validate(r["result"])
            assert r["result"]["protocolVersion"] == 2 and "info" in r["result"]
            # a client that offered 1 speaks nothing newer: what it asks next is refused,
            # naming what the agent speaks and what to do (issue 37 item 5; before, the
            # v2 agent served the v1 client, which then failed on every update)
            r = await raw.call(2, "session/new", {"cwd": "/tmp", "mcpServers": []})
            err = r["error"]
            assert err["code"] == -32600, r
            assert err["message"].startswith(
                "this agent speaks ACP protocol version 2; the client's initialize asked for "
                "version 1, which it does not serve: use a client that speaks version 2"
            ), err
            assert "agentgen regen --schema v1 --schema v2" in err["message"]
            assert err["data"]["details"] == {"requested": 1, "supported": [2]}
        async with Raw(v2_agent, "revtwo") as raw:
            # the agent's own version still requires the v2 body
            r = await raw.call(1, "initialize", {"protocolVersion": 2, **V1_INIT})
            assert r["error"]["code"] == -32602, r

    asyncio.run(main())


def test_one_agent_serves_a_v1_client_then_a_v2_client(both_agent: Path) -> None:
    """Generated with a v1 and a v2 schema: each connection speaks what its client asked
    for, every frame valid against that revision's models; the handler is the same."""
    v1 = _models(both_agent, "revboth._generated.v1.models")
    v2 = _models(both_agent, "revboth._generated.models")
    disp = _models(both_agent, "revboth._generated.dispatcher")
    assert [r.protocol_version for r in disp.REVISIONS] == [1, 2]

    async def main() -> None:
        async with Raw(both_agent, "revboth") as raw:
            init = (await raw.call(1, "initialize", {"protocolVersion": 1, **V1_INIT}))["result"]
            v1.InitializeResponse.model_validate(init)
            assert init["protocolVersion"] == 1 and init["agentInfo"]["name"] == "rev-agent"
            assert "info" not in init
            new = (await raw.call(2, "session/new", {"cwd": "/tmp", "mcpServers": []}))["result"]
            v1.NewSessionResponse.model_validate(new)
            assert all("id" in o and "configId" not in o for o in new["configOptions"])
            prompt = [{"type": "text", "text": "hello"}]
            done = await raw.call(
                3, "session/prompt", {"sessionId": new["sessionId"], "prompt": prompt}
            )
            v1.PromptResponse.model_validate(done["result"])
            assert done["result"]["stopReason"] == "end_turn"
            updates = _updates(raw)
            for u in updates:
                v1.SessionNotification.model_validate(u)
            assert [u["update"]["content"]["text"] for u in updates] == ["hello"]

        async with Raw(both_agent, "revboth") as raw:
            init = (await raw.call(1, "initialize", {"protocolVersion": 2, **V2_INIT}))["result"]
            v2.InitializeResponse.model_validate(init)
            assert init["protocolVersion"] == 2 and init["info"]["name"] == "rev-agent"
            new = (await raw.call(2, "session/new", {"cwd": "/tmp"}))["result"]
            assert all("configId" in o for o in new["configOptions"])
            prompt = [{"type": "text", "text": "hello"}]
            acc = await raw.call(
                3, "session/prompt", {"sessionId": new["sessionId"], "prompt": prompt}
            )
            v2.PromptResponse.model_validate(acc["result"])
            await raw.until_idle()
            for u in _updates(raw):
                v2.UpdateSessionNotification.model_validate(u)
            texts = [
                u["update"]["content"]["text"]
                for u in _updates(raw)
                if u["update"]["sessionUpdate"] == "agent_message_chunk"
            ]
            assert texts == ["hello"]

        async with Raw(both_agent, "revboth") as raw:
            # a version it does not serve: its latest
            init = (await raw.call(1, "initialize", {"protocolVersion": 7, **V2_INIT}))["result"]
            assert init["protocolVersion"] == 2

    asyncio.run(main())


def test_the_generated_client_offers_its_highest_revision_and_falls_back(
    both_agent: Path, v2_agent: Path, tmp_path: Path, schemas: dict[str, Any]
) -> None:
    """`negotiate`: a v1+v2 client gets v2 from a v1+v2 agent and v1 from a v1-only agent,
    and then reads that agent's updates with the matching models."""
    v1_only = _build(tmp_path, "revone", schemas["v1"])
    disp = _models(both_agent, "revboth._generated.dispatcher")
    client_mod = _models(both_agent, "revboth._generated.runtime.client.client")

    class Collect(disp.ClientBase):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.texts: list[str] = []
            self.arrivals = Arrivals()

        async def session_update(self, params: Any) -> None:
            update = params.update.root
            content = getattr(update, "content", None)
            text = getattr(getattr(content, "root", content), "text", None)
            if text is not None:
                self.texts.append(text)
                self.arrivals.arrived()

    async def run(root: Path, package: str) -> tuple[int, list[str]]:
        serve = (
            "import asyncio\n"
            f"from {package}.handlers import Agent\n"
            f"from {package}._generated.runtime.serve import serve_agent_stdio\n"
            "asyncio.run(serve_agent_stdio(Agent()))\n"
        )
        env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{both_agent}"}
        client = Collect()
        async with client_mod.spawn_agent(
            client, disp.AgentConnection, PY, "-c", serve, env=env
        ) as agent:
            init = await client_mod.negotiate(agent, client)
            new = await agent.call("session/new", {"cwd": "/tmp", "mcpServers": []})
            await agent.call(
                "session/prompt",
                {"sessionId": new["sessionId"], "prompt": [{"type": "text", "text": "hi"}]},
            )
            await client.arrivals.until("the turn's text", lambda: client.texts)
            assert agent.revision.protocol_version == init["protocolVersion"]
            return int(init["protocolVersion"]), client.texts

    assert asyncio.run(run(both_agent, "revboth")) == (2, ["hi"])
    assert asyncio.run(run(v1_only, "revone")) == (1, ["hi"])


def test_two_schemas_of_one_version_are_refused(schemas: dict[str, Any]) -> None:
    with pytest.raises(AgentgenError, match="protocol version 2"):
        render_generated(
            schema=schemas["v2"],
            meta=None,
            manifest=MANIFEST,
            role="agent",
            transport="stdio",
            also=((schemas["v2"], None, "again"),),
        )


@pytest.mark.slow
@pytest.mark.usefixtures("store")
def test_new_with_two_schemas_makes_a_project_that_passes_its_own_tests(
    tmp_path: Path,
) -> None:
    """`agentgen new --schema v1 --schema v2`: the second revision in `_generated/v1/`,
    both recorded, `check` clean, and the project's generated test (which initializes
    once per revision, in that revision's shape) passes."""
    import subprocess

    from typer.testing import CliRunner

    from generator.cli import app

    manifest = tmp_path / "agent.yaml"
    manifest.write_text("name: dual\nversion: 0.1.0\ntitle: Dual\ndescription: Two revisions.\n")
    project = tmp_path / "dual"
    result = CliRunner().invoke(
        app,
        [
            "new",
            str(project),
            "--manifest",
            str(manifest),
            "--schema",
            NPM.format("v1/schema.json"),
            "--schema",
            NPM.format("v2/schema.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    gen = project / "dual" / "_generated"
    assert (gen / "v1" / "models.py").is_file() and (gen / "v1" / "revision.py").is_file()
    record = json.loads((gen / "SOURCE.json").read_text())
    assert record["schema"]["origin"].endswith("v1/schema.json")
    assert [s["origin"] for s in record["more_schemas"]] == [NPM.format("v2/schema.json")]
    check = CliRunner().invoke(app, ["check", "--project", str(project)])
    assert check.exit_code == 0, check.output
    env = {**os.environ, "PYTHONPATH": str(project), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    typed = mypy_support.run(
        [sys.executable, "-m", "mypy", "dual"], kind="project", cwd=project, env=env
    )
    assert typed.returncode == 0, typed.stdout + typed.stderr


def test_a_v1_client_facing_a_v2_agent_says_how_to_speak_it(
    v2_agent: Path, tmp_path: Path, schemas: dict[str, Any]
) -> None:
    """Issue 37 item 5: the generated v1-only client, answered version 2, fails with what
    the agent speaks and the regen that makes it speak that too (before: only "the agent
    speaks protocol version 2; this client speaks 1")."""
    v1_only = _build(tmp_path, "revone", schemas["v1"])
    disp = _models(v1_only, "revone._generated.dispatcher")
    client_mod = _models(v1_only, "revone._generated.runtime.client.client")
    errors = _models(v1_only, "revone._generated.runtime.wire.errors")
    serve = (
        "import asyncio\n"
        "from revtwo.handlers import Agent\n"
        "from revtwo._generated.runtime.serve import serve_agent_stdio\n"
        "asyncio.run(serve_agent_stdio(Agent()))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{v2_agent}{os.pathsep}{v1_only}"}

    async def main() -> Any:
        async with client_mod.spawn_agent(
            disp.ClientBase(), disp.AgentConnection, PY, "-c", serve, env=env
        ) as agent:
            with pytest.raises(errors.RpcError) as raised:
                await client_mod.negotiate(agent, disp.ClientBase())
            return raised.value

    err = asyncio.run(main())
    assert str(err.message) == (
        "the agent speaks ACP protocol version 2; this client speaks 1: regenerate the client "
        "for version 2 (in its project: agentgen regen --schema v2, or --schema v1 --schema "
        "v2 to speak both)"
    )
    assert err.data == {
        "name": "UnsupportedProtocolVersion",
        "details": {"answered": 2, "supported": [1]},
    }
