"""Slash commands and modes from the manifest.

Commands (`commands: [{name, description, input_hint}]`) are advertised with
`available_commands_update` once a session is created or loaded; a prompt whose text
starts with `/name` reaches the handler with `turn.command` set (name + argument text).
Modes (`modes: [{id, name, description, default}]`) are served as the revision offers
them: v1 `modes` in the session/new answer, `session/set_mode` and `current_mode_update`;
where the revision has no modes (v2), as a session config option of category `mode`.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any, NamedTuple

from ..wire.errors import invalid_params
from ..wire.fields import need
from .context import AgentContext, Session

if TYPE_CHECKING:
    from ..wire.revision import AuthoringShape

MODE_OPTION = "mode"  # the config option id modes are served as, where the revision has no modes


class SlashCommand(NamedTuple):
    """A prompt `/name args`: the command's name and the rest of the text."""

    name: str
    args: str


_COMMAND = re.compile(r"/(\S+)(?:\s+(.*))?", re.DOTALL)


def parse_command(prompt: list[Any], declared: Any) -> SlashCommand | None:
    """The declared command a prompt starts with (its first text block), if any."""
    if not declared:
        return None
    names = {str(c.get("name")) for c in declared or () if type(c) is dict}
    for block in prompt:
        if type(block) is not dict or block.get("type") != "text":
            continue
        match = _COMMAND.fullmatch(str(block.get("text") or "").strip())
        if match is None or match.group(1) not in names:
            return None
        return SlashCommand(match.group(1), (match.group(2) or "").strip())
    return None


def available_commands(manifest: dict[str, Any], shape: AuthoringShape) -> list[dict[str, Any]]:
    """The `availableCommands` of the manifest's commands (tagged where the revision's
    AvailableCommand and its input are unions)."""
    out = []
    for c in manifest.get("commands") or ():
        cmd: dict[str, Any] = {"name": c["name"], "description": c.get("description") or c["name"]}
        if shape.command_tag:
            cmd = {"type": shape.command_tag, **cmd}
        if c.get("input_hint") and shape.command_hint:
            hint: dict[str, Any] = {shape.command_hint: c["input_hint"]}
            if shape.command_input_tag:
                hint = {"type": shape.command_input_tag, **hint}
            cmd["input"] = hint
        out.append(cmd)
    return out


def default_mode(manifest: dict[str, Any]) -> str | None:
    modes = manifest.get("modes") or []
    for m in modes:
        if m.get("default"):
            return str(m["id"])
    return str(modes[0]["id"]) if modes else None


def mode_state(manifest: dict[str, Any], current: str | None) -> dict[str, Any]:
    """v1 `SessionModeState`: the current mode and the modes available."""
    modes = []
    for m in manifest.get("modes") or ():
        mode: dict[str, Any] = {"id": m["id"], "name": m.get("name") or m["id"]}
        if m.get("description"):
            mode["description"] = m["description"]
        modes.append(mode)
    return {"currentModeId": current or default_mode(manifest), "availableModes": modes}


class SessionExtras:
    """Commands and modes of the sessions of one connection."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: AgentContext) -> None:
        self._ctx = ctx

    def opened(
        self, s: Session, params: Any, result: dict[str, Any], request: Any, *, loaded: bool
    ) -> None:
        """A session was created or loaded: its modes go into the answer. A new session's
        commands are advertised right after the answer (the client knows the session by
        then); a loaded (resumed) one's before it, with the rest of what the load restores
        (ACP: no update of a load arrives after its answer)."""
        m = self._ctx.manifest
        if type(params) is dict and "mcpServers" in params:
            s.mcp_servers = params["mcpServers"]
        if m.get("modes"):
            if s.mode is None:
                s.mode = default_mode(m)
            self.with_modes(s, result, opened=True)
        shape = self._ctx.revision.authoring
        cmds = available_commands(m, shape)
        if not cmds or "available_commands_update" not in shape.updates:
            return
        conn = self._ctx.conn()
        update = {"sessionUpdate": "available_commands_update", "availableCommands": cmds}

        def advertise() -> None:
            conn.notify("session/update", {"sessionId": s.id, "update": update})

        if loaded:
            advertise()
        elif request is not None and hasattr(request, "after"):
            request.after.append(advertise)
        else:  # a typed override called the runtime default: the answer is on its way
            asyncio.get_running_loop().call_soon(advertise)

    def with_modes(self, s: Session, result: dict[str, Any], *, opened: bool) -> None:
        """The session's modes in an answer: v1 `modes` in session/new|load|resume; a
        revision without modes lists a config option of category mode instead."""
        m = self._ctx.manifest
        if not m.get("modes"):
            return
        field = self._ctx.revision.authoring.modes
        if field:
            if opened:
                result[field] = mode_state(m, s.mode)
            return
        key = self._ctx.revision.config_option.id
        opts = [o for o in result.get("configOptions") or () if o.get(key) != MODE_OPTION]
        result["configOptions"] = [self.mode_option(s), *opts]

    def mode_as_option(self) -> bool:
        """Modes are served as the `mode` config option (the revision has no session modes)."""
        return bool(self._ctx.manifest.get("modes")) and not self._ctx.revision.authoring.modes

    def mode_option(self, s: Session) -> dict[str, Any]:
        m = self._ctx.manifest
        shape = self._ctx.revision.config_option
        return {
            shape.id: MODE_OPTION,
            "name": "Mode",
            "category": "mode",
            "type": "select",
            shape.current_value: s.mode or default_mode(m),
            shape.select_options: [
                {"value": md["id"], "name": md.get("name") or md["id"]}
                | ({"description": md["description"]} if md.get("description") else {})
                for md in m.get("modes") or ()
            ],
        }

    def saved_mode(self, saved: Any) -> str | None:
        """The mode a stored session was in (session/load, session/resume): kept while the
        manifest still declares it, else the default mode."""
        ids = [str(md["id"]) for md in self._ctx.manifest.get("modes") or ()]
        return saved if type(saved) is str and saved in ids else default_mode(self._ctx.manifest)

    def check_mode(self, mode: Any, loc: tuple[str, ...]) -> str:
        ids = [str(md["id"]) for md in self._ctx.manifest.get("modes") or ()]
        if mode not in ids:
            raise invalid_params(
                f"unknown mode {mode!r}; modes: {', '.join(ids) or 'none'}",
                [{"loc": list(loc), "msg": "not one of the agent's modes"}],
            )
        return str(mode)

    async def set_mode(self, params: Any, request: Any) -> Any:
        """`session/set_mode` (v1)."""
        s = self._ctx.session(params)
        s.mode = self.check_mode(need(params, "modeId", str), ("params", "modeId"))
        return {}


__all__ = [
    "MODE_OPTION",
    "SessionExtras",
    "SlashCommand",
    "available_commands",
    "default_mode",
    "mode_state",
    "parse_command",
]
