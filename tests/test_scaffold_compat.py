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
