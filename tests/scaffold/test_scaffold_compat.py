"""`compat.find_breakage`: which user handlers a new dispatcher breaks, with file:line."""

from __future__ import annotations

import textwrap
from pathlib import Path

from generator.scaffold import compat

OLD_DISPATCHER = """
class AgentBase:
    async def session_prompt(self, params: PromptRequest, ctx: Context) -> PromptResponse: ...
    async def session_load(self, params: LoadSessionRequest, ctx: Context) -> LoadSessionResponse: ...
    async def session_set_mode(self, params: SetModeRequest, ctx: Context) -> None: ...
    async def _internal(self) -> None: ...
"""
NEW_DISPATCHER = """
class AgentBase:
    async def session_prompt(self, params: PromptRequest, ctx: Context) -> PromptResponse: ...
    async def session_set_mode(self, params: SetModeParams, ctx: Context) -> None: ...
"""
OLD_MODELS = """
class PromptResponse(Base):
    stop_reason: Annotated[StopReason, Field(alias="stopReason")]
    meta: dict | None = Field(None, alias="_meta")
class PromptRequest(Base):
    session_id: str = Field(..., alias="sessionId")
"""
NEW_MODELS = """
class PromptResponse(Base):
    meta: dict | None = Field(None, alias="_meta")
    user_message_id: str = Field(alias="userMessageId")
class PromptRequest(Base):
    session_id: str = Field(..., alias="sessionId")
"""
USER = """
from ._generated.dispatcher import AgentBase
from ._generated import models as m


class Mine(AgentBase):
    async def session_prompt(self, params, ctx):
        await ctx.send("hi")
        return m.PromptResponse(stop_reason="end_turn")

    async def session_load(self, params, ctx):
        return None

    async def session_set_mode(self, params, ctx):
        return None

    def helper(self):
        return {"stopReason": 1}


class Unrelated:
    async def session_load(self):
        return None
"""


def test_find_breakage(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "_generated").mkdir(parents=True)
    (pkg / "handlers.py").write_text(textwrap.dedent(USER))
    (pkg / "_generated" / "dispatcher.py").write_text("class Whatever: ...\n")
    found = [
        str(f)
        for f in compat.find_breakage(
            package_dir=pkg,
            root=tmp_path,
            old_dispatcher=OLD_DISPATCHER,
            new_dispatcher=NEW_DISPATCHER,
            old_models=OLD_MODELS,
            new_models=NEW_MODELS,
        )
    ]
    assert found == [
        (
            "pkg/handlers.py:7: Mine.session_prompt: PromptResponse has a new required field "
            "'userMessageId'"
        ),
        "pkg/handlers.py:7: Mine.session_prompt: PromptResponse lost field 'stopReason'",
        "pkg/handlers.py:9: Mine.session_prompt: uses PromptResponse.stopReason, which is gone",
        (
            "pkg/handlers.py:11: Mine.session_load: AgentBase.session_load is gone from the new "
            "dispatcher (the protocol revision removed this method)"
        ),
        (
            "pkg/handlers.py:14: Mine.session_set_mode: signature changed from (params: "
            "SetModeRequest, ctx: Context) -> None to (params: SetModeParams, ctx: Context) -> None"
        ),
    ]


def test_no_change_no_findings(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "handlers.py").write_text(textwrap.dedent(USER))
    assert (
        compat.find_breakage(
            package_dir=pkg,
            root=tmp_path,
            old_dispatcher=OLD_DISPATCHER,
            new_dispatcher=OLD_DISPATCHER,
            old_models=OLD_MODELS,
            new_models=OLD_MODELS,
        )
        == []
    )


def test_model_fields_reads_both_field_styles() -> None:
    fields = compat.model_fields(OLD_MODELS)
    assert fields["PromptResponse"]["stopReason"] == compat.Field("stop_reason", "stopReason", True)
    assert fields["PromptResponse"]["_meta"].required is False
    assert fields["PromptRequest"]["sessionId"].required is True


# -- what a project sends; what its tests send ---------------------------------------------


def _schema(init_required: list[str], init_props: list[str]) -> dict[str, object]:
    def obj(props: list[str], required: list[str], **extra: object) -> dict[str, object]:
        return {
            "type": "object",
            "properties": {p: {"type": "string"} for p in props},
            "required": required,
            **extra,
        }

    return {
        "$defs": {
            "InitializeRequest": obj(
                init_props, init_required, **{"x-method": "initialize", "x-side": "agent"}
            ),
            "InitializeResponse": obj(
                ["protocolVersion", *init_props],
                ["protocolVersion", *init_required],
                **{"x-method": "initialize", "x-side": "agent"},
            ),
            "WriteRequest": obj(["path"], ["path"], **{"x-method": "fs/write", "x-side": "client"}),
            "WriteResponse": obj([], [], **{"x-method": "fs/write", "x-side": "client"}),
        }
    }


def test_newly_required_to_send_depends_on_the_role() -> None:
    from generator.protocol.diff import diff_schemas

    old = _schema(["protocolVersion"], ["protocolVersion", "clientInfo"])
    new = _schema(["protocolVersion", "info"], ["protocolVersion", "info"])
    entries = diff_schemas(old, new).entries
    agent = [str(f) for f in compat.newly_required_to_send(entries, new, "agent", "new.json")]
    client = [str(f) for f in compat.newly_required_to_send(entries, new, "client", "new.json")]
    # the agent sends the initialize result; the client sends the initialize params
    assert any(f.startswith("new.json: InitializeResponse.info is newly required") for f in agent)
    assert not any("InitializeRequest" in f for f in agent)
    assert any(f.startswith("new.json: InitializeRequest.info is newly required") for f in client)
    assert not any("InitializeResponse" in f for f in client)
    # nothing new required: nothing to say
    assert compat.newly_required_to_send(diff_schemas(old, old).entries, old, "agent", "x") == []


def test_check_tests_finds_hand_written_messages_the_new_revision_refuses(tmp_path: Path) -> None:
    old = _schema(["protocolVersion"], ["protocolVersion", "clientInfo"])
    new = _schema(["protocolVersion", "info"], ["protocolVersion", "info"])
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_p.py").write_text(
        textwrap.dedent(
            """
            async def go(agent, extra):
                await agent.call("initialize", {"protocolVersion": 1, "clientInfo": {}})
                await agent.call("initialize", {"protocolVersion": 1, "info": {}})
                await agent.call("initialize", {"protocolVersion": 1, **extra})
                await agent.call("fs/write", {"path": "x"})
            """
        )
    )
    found = [str(f) for f in compat.check_tests([tests / "test_p.py"], tmp_path, old, new)]
    assert found == [
        (
            "tests/test_p.py:3: sends initialize with 'clientInfo', which the new revision no "
            "longer has in InitializeRequest: remove or rename it in the test"
        ),
        (
            "tests/test_p.py:3: sends initialize without 'info', which the new revision requires "
            "(InitializeRequest.info): add it to the test's message"
        ),
    ]
    # the same tests against the old revision are fine
    assert compat.check_tests([tests / "test_p.py"], tmp_path, old, old) == []
