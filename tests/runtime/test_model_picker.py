"""The model picker and the reasoning level (issue 33): a manifest's `llm.models` is the
session config option `model` (category `model`), its `llm.reasoning_levels` the option
`thought_level` (category `thought_level`); a pick routes the run to that model, a level
reaches the model as pydantic-ai's `thinking` setting.  Real agent processes over stdio on
v1 and v2, every frame schema-checked (conftest's wire check), each advertised option
checked against the revision's own SessionConfigOption schema.

No network, no key: each model id is a FunctionModel (`run_model(..., models=...)`) that
answers with its own name and the `thinking` it was given.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import hardening_support as hs
import pytest
from jsonschema import Draft202012Validator

HANDLERS = """
from __future__ import annotations

from typing import Any

from pydantic_ai import Agent as Model
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.profiles import ModelProfile

from ._generated.acp import AgentBase, Turn, run_model


def answering(name: str) -> FunctionModel:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        yield f"{name} thinking={info.model_request_parameters.thinking!r}"

    return FunctionModel(stream_function=stream, profile=ModelProfile(supports_thinking=True))


MODELS = {"test:alpha": answering("alpha"), "test:beta": answering("beta")}
ASSISTANT: Model[None, str] = Model()


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        await run_model(turn, ASSISTANT, input, models=MODELS)
"""

MANIFEST: dict[str, Any] = {
    "name": "picker-agent",
    "version": "0.1.0",
    "llm": {
        "default_model": "test:beta",
        "models": [{"id": "test:alpha", "name": "Alpha"}, "test:beta"],
        "reasoning_levels": ["off", "low", "high"],
        "default_reasoning_level": "low",
    },
}

REVS = {"v1": ("v1", True), "v2": ("v2", False)}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    tmp = tmp_path_factory.mktemp("picker_agent")
    agents = hs.build_revisions(
        tmp, shared_acp, "picker_agent", manifest=MANIFEST, handlers=HANDLERS, model_env=False
    )
    out = {}
    for rev, (env, package) in agents.items():
        folder, unstable = REVS[rev]
        schema_file = shared_acp / folder / f"schema{'.unstable' if unstable else ''}.json"
        schema = json.loads(schema_file.read_text())
        validator = Draft202012Validator(
            {"$ref": "#/$defs/SessionConfigOption", "$defs": schema["$defs"]}
        )
        out[rev] = (env, package, validator)
    return out


class Peer:
    def __init__(self, peer: hs.StdioPeer, v2: bool) -> None:
        self.peer = peer
        self.v2 = v2
        self.rid = 0
        self.updates: list[dict[str, Any]] = []

    async def call(self, method: str, params: Any) -> dict[str, Any]:
        self.rid += 1
        await self.peer.send({"jsonrpc": "2.0", "id": self.rid, "method": method, "params": params})
        msg, seen = await self.peer.until_id(self.rid, timeout=30)
        self.updates += [m["params"]["update"] for m in seen if m.get("method") == "session/update"]
        assert "result" in msg, msg
        return dict(msg["result"])

    async def turn(self, sid: str, text: str) -> str:
        """One prompt until its turn ends (v1: the answer; v2: the idle state_update);
        the text the agent streamed."""
        start = len(self.updates)
        await self.call("session/prompt", hs.text_prompt(sid, text))
        while self.v2 and not any(
            u.get("sessionUpdate") == "state_update" and u.get("state") == "idle"
            for u in self.updates[start:]
        ):
            msg = await self.peer.recv(timeout=30)
            if msg.get("method") == "session/update":
                self.updates.append(msg["params"]["update"])
        return "".join(
            u["content"]["text"]
            for u in self.updates[start:]
            if u.get("sessionUpdate") == "agent_message_chunk"
        )


def _init(v2: bool) -> dict[str, Any]:
    if v2:
        return {"protocolVersion": 2, "info": {"name": "t", "version": "0"}}
    return {"protocolVersion": 1, "clientCapabilities": {}}


def _by_id(options: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(o.get("configId") or o.get("id")): o for o in options}


async def _session(env: dict[str, str], package: str, v2: bool) -> tuple[Peer, str, Any]:
    p = Peer(await hs.StdioPeer.start(env, package), v2)
    await p.call("initialize", _init(v2))
    new = {"cwd": "/work/proj"} if v2 else {"cwd": "/work/proj", "mcpServers": []}
    opened = await p.call("session/new", new)
    return p, str(opened["sessionId"]), opened["configOptions"]


@pytest.mark.parametrize("rev", list(REVS))
def test_the_picker_and_the_reasoning_level_are_advertised(built: Any, rev: str) -> None:
    env, package, validator = built[rev]

    async def main() -> Any:
        p, _, options = await _session(env, package, rev == "v2")
        await p.peer.close()
        return options

    options = asyncio.run(main())
    for option in options:
        errors = [e.message for e in validator.iter_errors(option)]
        assert not errors, (option, errors)
    by_id = _by_id(options)
    model, level = by_id["model"], by_id["thought_level"]
    assert model["category"] == "model" and model["type"] == "select"
    assert model["currentValue"] == "test:beta"  # llm.default_model, listed
    assert model["options"] == [
        {"value": "test:alpha", "name": "Alpha"},
        {"value": "test:beta", "name": "test:beta"},
    ]
    assert level["category"] == "thought_level" and level["currentValue"] == "low"
    assert [o["value"] for o in level["options"]] == ["off", "low", "high"]


@pytest.mark.parametrize("rev", list(REVS))
def test_a_pick_routes_the_run_and_a_level_reaches_the_model(built: Any, rev: str) -> None:
    env, package, _ = built[rev]

    async def main() -> list[Any]:
        p, sid, _ = await _session(env, package, rev == "v2")

        async def pick(option: str, value: str) -> Any:
            params = {"sessionId": sid, "configId": option, "value": value}
            if rev == "v2":  # v2 tags the value with its kind
                params["type"] = "id"
            return (await p.call("session/set_config_option", params))["configOptions"]

        seen: list[Any] = [await p.turn(sid, "one")]
        seen.append(_by_id(await pick("model", "test:alpha"))["model"]["currentValue"])
        seen.append(await p.turn(sid, "two"))
        await pick("thought_level", "high")
        seen.append(await p.turn(sid, "three"))
        await pick("thought_level", "off")
        seen.append(await p.turn(sid, "four"))
        await p.peer.close()
        return seen

    first, current, second, third, fourth = asyncio.run(main())
    assert first == "beta thinking='low'"  # no pick: the default model and level
    assert current == "test:alpha"
    assert second == "alpha thinking='low'"
    assert third == "alpha thinking='high'"
    assert fourth == "alpha thinking=False"


def test_acp_model_is_the_pickers_default_when_listed(built: Any) -> None:
    env, package, _ = built["v1"]

    async def main(model: str, prompt: bool) -> tuple[str, str]:
        p, sid, options = await _session({**env, "ACP_MODEL": model}, package, False)
        answer = await p.turn(sid, "hi") if prompt else ""
        await p.peer.close()
        return _by_id(options)["model"]["currentValue"], answer

    assert asyncio.run(main("test:alpha", True)) == ("test:alpha", "alpha thinking='low'")
    # not listed: the picker shows the manifest's default (the run takes $ACP_MODEL)
    assert asyncio.run(main("test:gamma", False))[0] == "test:beta"
