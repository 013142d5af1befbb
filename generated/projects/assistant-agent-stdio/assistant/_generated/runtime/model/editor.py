"""The editor's files and terminal as the model's tools, offered only where the client
declared them (v1 `fs.readTextFile`, `fs.writeTextFile`, `terminal`; v2 has none):

- `read_file(path, line, limit)`: the file as the editor has it (unsaved edits included);
- `write_file(path, content)`: shown as a diff, asked with `session/request_permission`
  (in a session whose mode is `ask`, shown and never written);
- `run_command(command, args)`: asked first, run in the client's terminal in the session's
  folder, its output limited (`ACP_TOOL_OUTPUT_LIMIT` bytes, 64 KiB, the last ones kept)
  and the terminal always released; in mode `ask` shown and never run.

A file read is cut at the same bound, with a note (the model, the client and the history
see the same text).

Where the client serves no files or terminal, the tools may work on disk instead:
`read_file` and `write_file` inside the session's folder only (a path that leaves it,
symbolic links included, is refused), a write still shown as a diff and asked first;
`run_command` asked first, then run by the agent as a process of its own (no shell: the
program and its arguments; its own process group) in the session's folder, with the
agent's environment less the secrets the agent holds (`ACP_*`, `OPENAI_*`,
`ANTHROPIC_*`, `*_API_KEY`), its output (stdout and stderr together) cut like the
terminal's, killed past `ACP_COMMAND_TIMEOUT` seconds (600) or with the turn (a cancel
ends its tool call cancelled), the model told the same as from a terminal.  The
manifest's `llm.on_disk`: `true`, wherever the client serves no files or terminal (v2
has neither; a v1 client may not declare them); unset, where the revision has no such
method (v2) and the client runs on this machine (stdio: over HTTP the folder would be
the server's); `false`, never.

Each shows its own tool call (the adapter does not show these a second time); a refusal,
a cancelled question or a client error is the tool's answer to the model, not the turn's
end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import TYPE_CHECKING, Any

from ..agent.authoring import DiffContent, Location, TerminalContent, TextContent
from ..agent.clientcalls import PermissionOption
from ..wire.errors import RpcError
from ..wire.fields import TOOL_OUTPUT_LIMIT, bounded, env_option, keep_tail, tool_output_limit

if TYPE_CHECKING:
    from ..agent.turns import Turn

OUTPUT_LIMIT = TOOL_OUTPUT_LIMIT  # bytes of a command's output the model gets (default)
COMMAND_TIMEOUT = 600.0  # seconds a command run on disk may take (ACP_COMMAND_TIMEOUT)
HELD_PREFIXES = ("ACP_", "OPENAI_", "ANTHROPIC_")  # the agent's own settings and keys
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
    elif on_disk or (
        on_disk is None and turn.local_client and not turn.revision_has("terminal/create")
    ):
        tools.append(_runner(turn, disk=True))
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


def command_timeout() -> float:
    """``$ACP_COMMAND_TIMEOUT`` seconds (> 0), else ``COMMAND_TIMEOUT``."""
    return float(env_option("ACP_COMMAND_TIMEOUT", COMMAND_TIMEOUT, kind=float, minimum=0.001))


def command_env() -> dict[str, str]:
    """The environment a command run on disk gets: the agent's, less the secrets it holds
    (its own `ACP_*` settings, the model providers' `OPENAI_*`/`ANTHROPIC_*`, any
    `*_API_KEY`)."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith(HELD_PREFIXES) and not k.upper().endswith("_API_KEY")
    }


class _Ran:
    """What a command run on disk did: its exit code (None: ended by a signal), the last
    `limit` bytes of its output, whether more was cut, whether its time ran out."""

    def __init__(self) -> None:
        self.code: int | None = None
        self.out = bytearray()
        self.cut = False
        self.timed_out = False

    def keep(self, chunk: bytes, limit: int) -> None:
        self.cut = keep_tail(self.out, chunk, limit) or self.cut

    @property
    def text(self) -> str:
        return self.out.decode("utf-8", "replace")


async def _run_on_disk(turn: Turn, command: str, argv: list[str]) -> _Ran:
    """Run `command` with `argv` in the session's folder (no shell, its own process
    group), killed past `command_timeout()` or when the turn is cancelled; OSError when
    it cannot start."""
    limit = tool_output_limit()
    proc = await asyncio.create_subprocess_exec(
        command,
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=os.path.realpath(turn.cwd),
        env=command_env(),
        start_new_session=True,
    )
    ran = _Ran()

    async def pump() -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            ran.keep(chunk, limit)

    reader = asyncio.get_running_loop().create_task(pump())
    deadline = asyncio.timeout(command_timeout())
    try:
        async with deadline:
            await proc.wait()
            await asyncio.wait({reader}, timeout=1.0)  # what is left in the pipe
    except TimeoutError:
        if not deadline.expired():  # the turn's own limit: not this command's
            raise
        ran.timed_out = True
    finally:
        if proc.returncode is None:  # timed out, or the turn was cancelled
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 5.0)
        reader.cancel()
    code = proc.returncode
    ran.code = code if code is not None and code >= 0 else None
    return ran


def _runner(turn: Turn, disk: bool = False) -> Any:
    async def run_command(command: str, args: list[str] | None = None) -> str:
        """Run a program in the project folder (the user is asked first); returns its exit
        code and output.

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
        if disk:
            return await _ran_on_disk(turn, call, command, argv)
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


async def _ran_on_disk(turn: Turn, call: Any, command: str, argv: list[str]) -> str:
    """`run_command` on disk once allowed: its tool call shows the output at the end."""
    await call.update(status="in_progress")
    try:
        ran = await _run_on_disk(turn, command, argv)
    except OSError as exc:
        missing = isinstance(exc, FileNotFoundError) and exc.filename in (command, None)
        why = "command not found" if missing else _reason(exc)
        await call.fail(raw_output={"ran": False, "error": why})
        return f"cannot run {command}: {why}"
    result: dict[str, Any] = {"exitCode": ran.code, "truncated": ran.cut}
    cut = " (cut)" if ran.cut else ""
    if ran.timed_out:
        result["timedOut"] = True
        head = f"killed after {command_timeout():g} s (ACP_COMMAND_TIMEOUT){cut}"
    else:
        head = f"exit code {ran.code}{cut}"
    shown = [TextContent(ran.text)] if ran.out else None
    if ran.code == 0:
        await call.complete(raw_output=result, content=shown)
    else:
        await call.fail(raw_output=result, content=shown)
    return f"{head}\n{ran.text}"


__all__ = [
    "COMMAND_TIMEOUT",
    "EDITOR_TOOLS",
    "OUTPUT_LIMIT",
    "command_env",
    "command_timeout",
    "editor_toolset",
    "tool_names",
]
