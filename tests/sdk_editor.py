"""An editor made with the official Python SDK (`acp`): its `Client`, serving fs and
terminal requests from a folder (coder_support.FsAndTerminal) and allowing each permission
once; it records the updates, the client methods called and the permissions asked."""

from __future__ import annotations

from typing import Any

from acp import schema as S
from coder_support import FsAndTerminal


class SdkEditor:
    def __init__(self, serves: FsAndTerminal) -> None:
        self.serves = serves
        self.updates: list[dict[str, Any]] = []
        self.calls: list[str] = []  # the fs/terminal methods, in order
        self.options: list[str] = []  # the kinds of the last permission's options
        self.asked: list[str] = []  # the title of each permission's tool call

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        self.updates.append(update.model_dump(by_alias=True, mode="json"))

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kw: Any
    ) -> Any:
        self.options = [o.kind for o in options]
        self.asked.append(str(tool_call.title))
        allow = next(o for o in options if o.kind == "allow_once")
        return S.RequestPermissionResponse(
            outcome=S.AllowedOutcome(outcome="selected", option_id=allow.option_id)
        )

    async def _serve(self, method: str, params: dict[str, Any]) -> Any:
        self.calls.append(method)
        return await self.serves.serve(method, params)

    async def read_text_file(self, session_id: str, path: str, **kw: Any) -> Any:
        r = await self._serve("fs/read_text_file", {"path": path})
        return S.ReadTextFileResponse(content=r["content"])

    async def write_text_file(self, session_id: str, path: str, content: str, **kw: Any) -> Any:
        await self._serve("fs/write_text_file", {"path": path, "content": content})
        return S.WriteTextFileResponse()

    async def create_terminal(
        self, session_id: str, command: str, args: list[str] | None = None, **kw: Any
    ) -> Any:
        params = {"command": command, "args": args or [], "cwd": kw.get("cwd")}
        r = await self._serve("terminal/create", params)
        return S.CreateTerminalResponse(terminal_id=r["terminalId"])

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kw: Any) -> Any:
        r = await self._serve("terminal/wait_for_exit", {"terminalId": terminal_id})
        return S.WaitForTerminalExitResponse(exit_code=r["exitCode"])

    async def terminal_output(self, session_id: str, terminal_id: str, **kw: Any) -> Any:
        r = await self._serve("terminal/output", {"terminalId": terminal_id})
        return S.TerminalOutputResponse(output=r["output"], truncated=r["truncated"])

    async def kill_terminal(self, session_id: str, terminal_id: str, **kw: Any) -> Any:
        await self._serve("terminal/kill", {"terminalId": terminal_id})
        return S.KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str, **kw: Any) -> Any:
        await self._serve("terminal/release", {"terminalId": terminal_id})
        return S.ReleaseTerminalResponse()
