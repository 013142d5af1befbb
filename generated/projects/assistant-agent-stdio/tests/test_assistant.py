"""Tests that pass as generated; add yours beside them.

Besides the handshake and a prompt, they check the manifest's contract on every
protocol revision the project serves, whatever handlers.py does: each interrupt
(approved and declined), each error and each config option (set and refused). A probe agent (this file run as a script: `Agent` from handlers.py with
a prompt that asks the interrupt or raises the error) serves those turns; the payloads
are built from the manifest's schemas.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from assistant._generated import manifest_models
from assistant._generated.acp import RpcError, Turn
from assistant._generated.dispatcher import MANIFEST, REVISIONS, AgentBase

# the client these tests drive the agent with (test code only: not in the agent's wheel)
from assistant._generated.testing import (
    AgentConnection,
    ClientBase,
    prompt_turn,
    spawn_agent,
)
from assistant.handlers import Agent

# The model these tests run: `test`, a scripted model that answers text and calls no tool
# (no network, no key); set ACP_MODEL to try a real one.
os.environ.setdefault("ACP_MODEL", "test")

# The agent over stdio, whatever the project's transport: one dispatcher serves both.
# Its sessions stay in memory here (the installed agent keeps them in SQLite).
SERVE = (
    "import asyncio\n"
    "from assistant.handlers import Agent\n"
    "from assistant._generated.runtime.serve import serve_agent_stdio\n"
    "from assistant._generated.runtime.sessions.store import MemorySessionStore\n"
    "asyncio.run(serve_agent_stdio(Agent(), store=MemorySessionStore()))\n"
)


def test_handlers_subclass_the_generated_base() -> None:
    assert issubclass(Agent, AgentBase)


def test_the_agent_introduces_itself_and_opens_a_session() -> None:
    """For each protocol revision the agent serves: `initialize` in that revision's shape
    (field names from the generated revision description), then `session/new`."""

    async def run(rev: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
        async with spawn_agent(ClientBase(), AgentConnection, sys.executable, "-c", SERVE) as agent:
            init = await agent.call(
                "initialize",
                {
                    "protocolVersion": rev.protocol_version,
                    rev.init.request_capabilities: {},
                    rev.init.request_info: {"name": "test", "version": "0"},
                },
            )
            session = None
            if not MANIFEST.get("auth") and not any(
                p.get("required") for p in MANIFEST.get("providers") or ()
            ):
                session = await agent.call("session/new", {"cwd": os.getcwd(), "mcpServers": []})
            return init, session

    for rev in REVISIONS:
        init, session = asyncio.run(asyncio.wait_for(run(rev), 60))
        assert init["protocolVersion"] == rev.protocol_version
        info = init.get(rev.init.response_info) or {}
        assert info.get("name") == MANIFEST["name"]
        if session is not None:
            assert session["sessionId"]


async def _prompt(rev: Any, text: str, *, cancel: bool = False) -> str:
    """One prompt in revision `rev`, until its turn ends: its stop reason. v1 answers the
    prompt at the end of the turn; v2 on acceptance, and an idle `state_update` ends it."""
    client = ClientBase()
    # the probe below runs handlers.py's prompt, logged in whatever the manifest's auth
    probe = (sys.executable, __file__, "handlers", "", "null")
    async with spawn_agent(client, AgentConnection, *probe) as agent:
        await agent.call(
            "initialize",
            {
                "protocolVersion": rev.protocol_version,
                rev.init.request_capabilities: {},
                rev.init.request_info: {"name": "test", "version": "0"},
            },
        )
        agent.revision = client.revision = rev
        session = await agent.call("session/new", {"cwd": os.getcwd(), "mcpServers": []})
        sid = session["sessionId"]
        ended = client.expect_turn_end(sid) if rev.turn.lifecycle == "v2" else None
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        answer = asyncio.ensure_future(agent.call("session/prompt", prompt))
        if cancel:
            agent.connection.notify("session/cancel", {"sessionId": sid})
        result = await answer
        if ended is None:
            return str(result["stopReason"])
        idle = await ended
        return str(idle.get("stopReason"))


def test_a_prompt_ends_its_turn() -> None:
    """For each revision: a text prompt runs the handler (or, to an agent with an input
    schema the text does not fit, says what input it expects) and the turn ends."""
    for rev in REVISIONS:
        stop = asyncio.run(asyncio.wait_for(_prompt(rev, "hello"), 60))
        assert stop == "end_turn", (rev.protocol_version, stop)


def test_a_cancelled_prompt_ends_its_turn() -> None:
    """`session/cancel` right after the prompt: the turn ends, cancelled or finished."""
    for rev in REVISIONS:
        stop = asyncio.run(asyncio.wait_for(_prompt(rev, "hello", cancel=True), 60))
        assert stop in ("cancelled", "end_turn"), (rev.protocol_version, stop)


# ---- the manifest's contract: interrupts, errors, config options ---------------------------


def _sample(schema: Any, root: Any) -> Any:
    """A value `schema` accepts (JSON Schema; `$ref`s resolved in `root`): the default,
    an example or an enum member where the schema gives one, else the smallest value of
    its type; an object gets its required properties."""
    if not isinstance(schema, dict):
        return {}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        return _sample({**target, **{k: v for k, v in schema.items() if k != "$ref"}}, root)
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    for key in ("enum", "examples"):
        if schema.get(key):
            return schema[key][0]
    for key in ("oneOf", "anyOf"):
        if schema.get(key):
            return _sample(schema[key][0], root)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            value = _sample(part, root)
            if not isinstance(value, dict):
                return value
            merged.update(value)
        return merged
    return _sample_of_type(schema, root)


_FORMATS = {
    "email": "user@example.org",
    "uri": "https://example.org/",
    "url": "https://example.org/",
    "date-time": "2025-01-01T00:00:00Z",
    "date": "2025-01-01",
    "time": "00:00:00Z",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


def _sample_of_type(schema: dict[str, Any], root: Any) -> Any:
    kind = schema.get("type", "object" if "properties" in schema else None)
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _sample(props.get(k, {}), root) for k in schema.get("required") or ()}
    if kind == "array":
        return [_sample(schema.get("items", {}), root)] * max(int(schema.get("minItems", 1)), 1)
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        return int(low) if kind == "integer" else float(low)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    if kind == "string":
        return _FORMATS.get(
            str(schema.get("format")), "x" * max(int(schema.get("minLength", 1)), 1)
        )
    return {}


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.replace("-", "_").split("_") if p)


def _checked(model: str, value: Any) -> Any:
    """`value` as the manifest's model `model` (when generated) accepts it: a sample the
    schema-driven builder got wrong fails here, named, instead of later on the wire."""
    cls = getattr(manifest_models, model, None)
    if cls is None:
        return value
    try:
        return cls.model_validate(value).model_dump(by_alias=True, exclude_none=True, mode="json")
    except ValueError as exc:
        raise AssertionError(f"the sample {model} {value!r} does not validate: {exc}") from None


def _input_text() -> str:
    """A prompt text the handler's input parsing accepts."""
    schema = MANIFEST.get("input")
    if not schema:
        return "hello"
    value = _checked("Input", _sample(schema, schema))
    return value if isinstance(value, str) else json.dumps(value)


def _spec_schema(spec: dict[str, Any], key: str) -> Any:
    return (spec.get(key) or {}).get("schema") or {"type": "object"}


def _yes_no(spec: dict[str, Any]) -> bool:
    """approve/decline answers the interrupt: its resume requires booleans only."""
    schema = _spec_schema(spec, "resume")
    props = schema.get("properties") or {}
    return all(
        isinstance(props.get(k), dict) and props[k].get("type") == "boolean"
        for k in schema.get("required") or ()
    )


class Probe(Agent):
    """The project's agent, logged in, with a prompt that runs handlers.py's, asks one
    interrupt or raises one error (`python tests/<this file> handlers | interrupt NAME
    PAYLOAD | error CODE DATA`)."""

    action: tuple[str, str, Any] = ("", "", None)

    async def is_authenticated(self) -> bool:
        return True  # the login flow is the handlers' business, not these tests'

    async def prompt(self, turn: Turn, input: Any) -> Any:
        kind, name, value = self.action
        if kind == "handlers":
            return await super().prompt(turn, input)
        if kind == "interrupt":
            resume = await turn.interrupt(name, value)
            dump = getattr(resume, "model_dump", None)
            await turn.send_text("resumed " + json.dumps(dump(mode="json") if dump else resume))
            return None
        raise manifest_models.ERRORS[int(name)](data=value)


class Recorder(ClientBase):
    """A client that records the agent's text and answers interrupts without a terminal."""

    approve = True

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []
        self.asked: list[tuple[str, Any]] = []

    async def session_update(self, params: Any) -> None:  # any revision's notification
        update = params.model_dump(by_alias=True, exclude_none=True, mode="json")["update"]
        text = (update.get("content") or {}).get("text") if isinstance(update, dict) else None
        if isinstance(text, str):
            self.texts.append(text)

    async def answer(self, name: str, payload: Any) -> Any:
        dump = getattr(payload, "model_dump", None)
        self.asked.append(
            (name, dump(by_alias=True, exclude_none=True, mode="json") if dump else payload)
        )
        if not self.approve:
            return None
        spec = next(i for i in MANIFEST["interrupts"] if i["name"] == name)
        schema = _spec_schema(spec, "resume")
        resume = getattr(manifest_models, _camel(name) + "Resume")
        return resume.model_validate(_sample(schema, schema))


def _answering(approve: bool) -> type[Recorder]:
    """A Recorder whose `interrupt_<name>` handlers approve (sample resume) or decline."""

    def handler(name: str) -> Any:
        async def answer(self: Recorder, payload: Any, message: str) -> Any:
            return await self.answer(name, payload)

        return answer

    attrs: dict[str, Any] = {"approve": approve}
    for name, attr in ClientBase._acp_interrupts.items():
        attrs[attr] = handler(name)
    return type("Answering", (Recorder,), attrs)


def _elicits(client: Recorder, rev: Any) -> bool:
    """The client declares elicitation (forms) and the revision has it."""
    field = rev.client_capabilities.elicitation
    return bool(rev.elicitation and field and client.declared_capabilities(rev).get(field))


async def _probe_session(
    rev: Any, client: Recorder, agent: AgentConnection, meta: dict[str, Any] | None = None
) -> str:
    agent.revision = client.revision = rev
    await agent.call(
        "initialize",
        {
            "protocolVersion": rev.protocol_version,
            rev.init.request_capabilities: client.declared_capabilities(rev),
            rev.init.request_info: {"name": "test", "version": "0"},
        },
    )
    params: dict[str, Any] = {"cwd": os.getcwd(), "mcpServers": []}
    if meta is not None:
        params["_meta"] = meta
    session = await agent.call("session/new", params)
    return str(session["sessionId"])


async def _probe_turn(rev: Any, client: Recorder, *action: str) -> str:
    """One prompt to the probe asked to do `action`: the turn's stop reason."""
    async with spawn_agent(client, AgentConnection, sys.executable, __file__, *action) as agent:
        sid = await _probe_session(rev, client, agent)
        return await prompt_turn(agent, client, sid, _input_text())


def test_each_interrupt_approved_and_declined() -> None:
    """Each manifest interrupt, with a payload built from its schema: approved, the turn
    resumes with the typed answer; declined, it ends cancelled. A client that cannot
    answer it (no elicitation and a resume that is more than yes/no) is not asked: the
    turn ends normally and says why."""
    for rev in REVISIONS:
        for spec in MANIFEST.get("interrupts") or ():
            name = spec["name"]
            schema = _spec_schema(spec, "payload")
            payload = _checked(_camel(name) + "Payload", _sample(schema, schema))
            for approve in (True, False):
                client = _answering(approve)()
                action = ("interrupt", name, json.dumps(payload))
                stop = asyncio.run(asyncio.wait_for(_probe_turn(rev, client, *action), 60))
                where = (rev.protocol_version, name, approve)
                if not _elicits(client, rev) and not _yes_no(spec):
                    assert (stop, client.asked) == ("end_turn", []), where
                    assert "cannot answer" in client.texts[-1], (where, client.texts)
                    continue
                assert client.asked == [(name, payload)], where
                if not approve:
                    assert stop == "cancelled", where
                    assert not any(t.startswith("resumed") for t in client.texts), where
                    continue
                assert stop == "end_turn", where
                resumed = json.loads(client.texts[-1].removeprefix("resumed "))
                _checked(_camel(name) + "Resume", resumed)


def test_each_error_reaches_the_client() -> None:
    """Each manifest error raised by the handler (with data built from its schema):
    the client gets its code, name, transient flag and the data as details."""
    for rev in REVISIONS:
        for spec in MANIFEST.get("errors") or ():
            data_schema = (spec.get("data") or {}).get("schema")
            data = _sample(data_schema, data_schema) if data_schema else None
            if data is not None:
                data = _checked(spec["name"] + "Data", data)
            client = Recorder()
            action = ("error", str(spec["code"]), json.dumps(data))
            try:
                asyncio.run(asyncio.wait_for(_probe_turn(rev, client, *action), 60))
            except RpcError as err:
                where = (rev.protocol_version, spec["name"])
                assert err.code == spec["code"], where
                assert err.data["name"] == spec["name"], (where, err.data)
                assert err.data["transient"] is bool(spec.get("transient")), (where, err.data)
                assert err.data["details"] == data, (where, err.data)
            else:
                raise AssertionError(f"error {spec['name']} did not reach the client")


def _option_values(opt: dict[str, Any]) -> Any:
    """A value the option accepts (another than its default where it can)."""
    if opt.get("values"):
        others = [v for v in opt["values"] if v != opt.get("default")]
        return (others or opt["values"])[0]
    if opt.get("type") == "boolean":
        return not opt.get("default")
    schema = ((MANIFEST.get("config") or {}).get("schema") or {}).get("properties") or {}
    if opt["id"] in schema:
        return _sample(schema[opt["id"]], MANIFEST["config"]["schema"])
    return {"integer": 1, "number": 1.0}.get(str(opt.get("type")), "x")


async def _config_session(rev: Any, config: dict[str, Any]) -> tuple[str, str]:
    """A session opened with `_meta.config` = `config`: ("ok", current options) or
    ("refused", the error's message) when the agent refuses it with -32602."""
    client = Recorder()
    args = ("config", "", "null")
    async with spawn_agent(client, AgentConnection, sys.executable, __file__, *args) as agent:
        try:
            await _probe_session(rev, client, agent, {"config": config})
        except RpcError as err:
            assert err.code == -32602, (err.code, err.message)
            return "refused", err.message
        return "ok", ""


def test_each_config_option_set_and_refused() -> None:
    """Each manifest config option: a session opened with a value it accepts; one with
    a value it does not (a list, which no option takes) is refused (-32602) naming it."""
    for rev in REVISIONS:
        for opt in (MANIFEST.get("config") or {}).get("options") or ():
            value = _option_values(opt)
            ok = asyncio.run(asyncio.wait_for(_config_session(rev, {opt["id"]: value}), 60))
            assert ok == ("ok", ""), (rev.protocol_version, opt["id"], value, ok)
            bad = {opt["id"]: ["not", "a", "value"]}
            kind, message = asyncio.run(asyncio.wait_for(_config_session(rev, bad), 60))
            assert kind == "refused" and opt["id"] in message, (rev.protocol_version, message)


def _probe_main(argv: list[str]) -> None:
    from assistant._generated.runtime.serve import serve_agent_stdio
    from assistant._generated.runtime.sessions.store import MemorySessionStore

    kind, name, value = argv[0], argv[1], json.loads(argv[2])
    Probe.action = (kind, name, value)
    asyncio.run(serve_agent_stdio(Probe(), store=MemorySessionStore()))


if __name__ == "__main__":
    _probe_main(sys.argv[1:])
