"""The editor's files and terminal as the model's tools, offered only where the client
declared them (v1 `fs.readTextFile`, `fs.writeTextFile`, `terminal`; v2 has none):

- `read_file(path, line, limit)`: the file as the editor has it (unsaved edits included);
- `write_file(path, content)`: shown as a diff, asked with `session/request_permission`
  (in a session whose mode is `ask`, shown and never written);
- `run_command(command, args)`: asked first, run in the client's terminal in the session's
  folder, its output limited (`ACP_TOOL_OUTPUT_LIMIT` bytes, 64 KiB) and the terminal
  always released; in mode `ask` shown and never run.

A file read is cut at the same bound, with a note (the model, the client and the history
see the same text).

Where the client serves no files, `read_file` and `write_file` may work on disk instead,
inside the session's folder only (a path that leaves it, symbolic links included, is
refused); a write is still shown as a diff and asked first.  The manifest's
`llm.on_disk`: `true`, wherever the client serves no files (v2 has no `fs`; a v1 client
may not declare it); unset, where the revision has no `fs` (v2) and the client runs on
this machine (stdio: over HTTP the folder would be the server's); `false`, never.

Each shows its own tool call (the adapter does not show these a second time); a refusal,
a cancelled question or a client error is the tool's answer to the model, not the turn's
end.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from ..agent.authoring import DiffContent, Location, TerminalContent
from ..agent.clientcalls import PermissionOption
from ..wire.errors import RpcError
from ..wire.fields import TOOL_OUTPUT_LIMIT, bounded, tool_output_limit

if TYPE_CHECKING:
    from ..agent.turns import Turn

OUTPUT_LIMIT = TOOL_OUTPUT_LIMIT  # bytes of a command's output the model gets (default)
ASK_MODE = "ask"  # a session mode in which writes and commands are shown, never made
EDITOR_TOOLS = frozenset({"read_file", "write_file", "run_command"})
OPTIONS = (
    PermissionOption("allow", "Allow", "allow_once"),
    PermissionOption("reject", "Reject", "reject_once"),
)


def editor_toolset(
    turn: Turn, taken: frozenset[str] = frozenset(), *, on_disk: bool | None = None
) -> Any:
    """A pydantic-ai `FunctionToolset` with the tools this client can serve (None: none);
    a name in `taken` (a tool of the user's own agent) is left to that tool.  `on_disk`
    (the manifest's `llm.on_disk`): the file tools the client does not serve work on disk,
    in the session's folder; None: where the revision has no such method and the client
    is local (the module's docstring)."""
    from pydantic_ai.toolsets import FunctionToolset

    tools: list[Any] = []
    for method, make in (("fs/read_text_file", _reader), ("fs/write_text_file", _writer)):
        served = turn.client_can(method)
        disk = on_disk
        if disk is None:
            disk = turn.local_client and not turn.revision_has(method)
        if served or disk:
            tools.append(make(turn, disk=not served))
    if turn.client_can("terminal/create"):
        tools.append(_runner(turn))
    tools = [t for t in tools if t.__name__ not in taken]
    return FunctionToolset(tools, max_retries=1, id="acp-editor") if tools else None


def tool_names(agent: Any) -> frozenset[str]:
    """The names of the function tools a pydantic-ai agent has of its own."""
    names: set[str] = set()
    for toolset in getattr(agent, "toolsets", ()) or ():
        tools = getattr(toolset, "tools", None)
        if isinstance(tools, dict):
            names.update(str(n) for n in tools)
    return frozenset(names)


class OutsideFolder(Exception):
    """A path on disk that is not inside the session's folder."""


def _inside(turn: Turn, path: str) -> str:
    """`path` (relative to the session's folder, or absolute) on disk, once it is known to
    stay inside that folder (symbolic links followed); else `OutsideFolder`."""
    root = os.path.realpath(turn.cwd)
    full = os.path.realpath(turn.resolve(path))
    if os.path.commonpath([root, full]) != root or root == os.path.sep:
        raise OutsideFolder(f"{path} is outside the session's folder")
    return full


def _read_disk(full: str, line: int | None = None, limit: int | None = None) -> str:
    with open(full, encoding="utf-8", errors="replace") as f:
        text = f.read()
    if line is None and limit is None:
        return text
    lines = text.splitlines(keepends=True)
    first = max((line or 1) - 1, 0)
    return "".join(lines[first : first + limit if limit is not None else None])


def _write_disk(full: str, content: str) -> None:
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as f:
        f.write(content)


def _reader(turn: Turn, disk: bool = False) -> Any:
    async def read_file(path: str, line: int | None = None, limit: int | None = None) -> str:
        """Read a text file of the project, as the editor has it.

        Args:
            path: the file, relative to the project folder or absolute.
            line: the first line to read (1-based), to read part of a long file.
            limit: how many lines to read from `line`.
        """
        full = turn.resolve(path)
        async with turn.tool_call(
            f"Read {path}", kind="read", locations=[Location(full, line)], raw_input={"path": path}
        ) as call:
            try:
                if disk:
                    full = _inside(turn, path)
                    text = await asyncio.to_thread(_read_disk, full, line, limit)
                else:
                    text = await turn.read_text_file(full, line=line, limit=limit)
            except (RpcError, OSError, OutsideFolder) as exc:
                reason = _reason(exc)
                await call.fail(raw_output={"error": reason})
                return _failed("read", path, reason)
            text = bounded(text)
            await call.complete(raw_output={"lines": len(text.splitlines())})
        return text

    return read_file


def _failed(verb: str, what: str, reason: str) -> str:
    """What the model is told of a failed read, write or run: the reason, once (a client's
    message that already says `cannot <verb> ...`, as the generated client's does, is
    not prefixed a second time)."""
    if reason.startswith(f"cannot {verb} "):
        return reason
    return f"cannot {verb} {what}: {reason}"


def _reason(exc: Exception) -> str:
    """What a failed read or write tells the model: the client's error message, the OS's
    reason, or why the path was refused."""
    if isinstance(exc, RpcError):
        return exc.message
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc)


def _writer(turn: Turn, disk: bool = False) -> Any:
    async def write_file(path: str, content: str) -> str:
        """Write a text file of the project (the whole new content). The user sees the
        diff and is asked first.

        Args:
            path: the file, relative to the project folder or absolute.
            content: the file's complete new text.
        """
        full = turn.resolve(path)
        before: str | None = None
        if disk:
            try:
                full = _inside(turn, path)
            except OutsideFolder as exc:
                return f"cannot write {path}: {exc}"
            if os.path.isfile(full):
                try:
                    before = await asyncio.to_thread(_read_disk, full)
                except OSError:
                    before = None
        elif turn.client_can("fs/read_text_file"):
            try:
                before = await turn.read_text_file(full)
            except RpcError:
                before = None  # a new file
        call = await turn.start_tool_call(
            f"Write {path}",
            kind="edit",
            status="pending",
            content=[DiffContent(full, before, content)],
            locations=[Location(full)],
            raw_input={"path": path},
        )
        if turn.mode == ASK_MODE:
            await call.complete(raw_output={"applied": False, "mode": ASK_MODE})
            return f"not written: the session is in {ASK_MODE} mode (the user saw the diff)"
        answer = await turn.request_permission(OPTIONS, tool_call=call)
        if not answer.allowed:
            await call.fail(raw_output={"applied": False})
            return f"the user did not allow writing {path}: it is unchanged"
        await call.update(status="in_progress")
        try:
            if disk:
                await asyncio.to_thread(_write_disk, full, content)
            else:
                await turn.write_text_file(full, content)
        except (RpcError, OSError) as exc:
            reason = _reason(exc)
            await call.fail(raw_output={"applied": False, "error": reason})
            return _failed("write", path, reason)
        await call.complete(raw_output={"applied": True})
        return f"wrote {path}"

    return write_file


def _runner(turn: Turn) -> Any:
    async def run_command(command: str, args: list[str] | None = None) -> str:
        """Run a program in the project folder, in the editor's terminal (the user is asked
        first); returns its exit code and output.

        Args:
            command: the program, e.g. `pytest` or `python`.
            args: its arguments.
        """
        argv = [str(a) for a in args or ()]
        shown = " ".join([command, *argv])
        call = await turn.start_tool_call(
            shown, kind="execute", status="pending", raw_input={"command": command, "args": argv}
        )
        if turn.mode == ASK_MODE:
            await call.complete(raw_output={"ran": False, "mode": ASK_MODE})
            return f"not run: the session is in {ASK_MODE} mode (the user saw the command)"
        answer = await turn.request_permission(OPTIONS, tool_call=call)
        if not answer.allowed:
            await call.fail(raw_output={"ran": False})
            return f"the user did not allow running `{shown}`"
        try:
            term = await turn.create_terminal(
                command, argv, cwd=turn.cwd, output_byte_limit=tool_output_limit()
            )
        except RpcError as exc:
            await call.fail(raw_output={"ran": False, "error": exc.message})
            return _failed("run", f"`{shown}`", exc.message)
        async with term:  # released at the end, killed first if the turn is cancelled
            await call.update(status="in_progress", content=[TerminalContent(term.id)])
            status = await term.wait_for_exit()
            out = await term.output()
        ok = status.exit_code == 0
        result = {"exitCode": status.exit_code, "truncated": out.truncated}
        await (call.complete(raw_output=result) if ok else call.fail(raw_output=result))
        cut = " (cut)" if out.truncated else ""
        return f"exit code {status.exit_code}{cut}\n{out.output}"

    return run_command


__all__ = ["EDITOR_TOOLS", "OUTPUT_LIMIT", "editor_toolset", "tool_names"]
