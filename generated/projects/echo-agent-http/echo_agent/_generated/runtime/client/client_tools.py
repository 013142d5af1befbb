"""What the generated client serves and shows, besides prompts: every session update
rendered (`Renderer`), the agent's file reads and writes inside the session folder
(`Files`), and the commands it runs in client terminals (`Terminals`).

Field names are the ACP schema's (v1: `fs/*`, `terminal/*`, `tool_call`, `plan`; v2:
`tool_call_update`, `plan_update`, `terminal_output_chunk`, ...); both revisions'
update shapes are rendered, unknown kinds are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

from ..wire.errors import RpcError, invalid_params
from ..wire.fields import keep_tail

RESOURCE_NOT_FOUND = -32002
# the user (or this client's rules) said no: an application code, outside JSON-RPC's
# reserved -32768..-32000 (ACP's -32000 is auth_required), which the agent handles
REFUSED = -31000
OUTPUT_LIMIT = 1 << 20  # a terminal's output kept when the agent gives no outputByteLimit
_RELEASED_KEPT = 16  # released terminals whose output is kept for display
_STATUS_MARK = {"completed": "x", "in_progress": "~", "pending": " ", "failed": "!"}


def _obj(value: Any) -> dict[str, Any]:
    return value if type(value) is dict else {}


class Style:
    """ANSI styles when `stream` is a terminal (and NO_COLOR is not set), else none."""

    def __init__(self, stream: TextIO) -> None:
        try:
            tty = bool(stream.isatty())
        except (AttributeError, ValueError, OSError):
            tty = False
        self.on = tty and not os.environ.get("NO_COLOR")

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.on else text

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def green(self, text: str) -> str:
        return self._wrap("32", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def cyan(self, text: str) -> str:
        return self._wrap("36", text)


class Renderer:
    """Session updates for a person: the agent's message text and its typed output (JSON,
    one line) on `out`; thoughts (dimmed), tool calls (status, locations, diffs, content),
    plans (a checklist), terminal output and session info on `info`.  Styled where the
    stream is a terminal, plain lines when piped."""

    def __init__(
        self,
        out: TextIO | None = None,
        info: TextIO | None = None,
        terminal_output: Callable[[str], str | None] | None = None,
    ) -> None:
        self.out = out if out is not None else sys.stdout
        self.info = info if info is not None else sys.stderr
        self.style = Style(self.info)
        self._terminal_output = terminal_output
        self._tools: dict[str, dict[str, Any]] = {}
        self._thinking = False
        self._mid_line = False  # the message text on `out` has not ended its line
        self._shared = _same_stream(self.out, self.info)  # one screen (or file) for both
        self._plan_shown: list[tuple[str, str]] | None = None  # (content, status) shown

    def _line(self, text: str) -> None:
        if self._thinking:  # end the thought's line first
            self._thinking = False
            self.info.write("\n")
        if self._mid_line and self._shared:  # not glued to the message text: its own line
            self._mid_line = False
            self.out.write("\n")
            self.out.flush()
        self.info.write(text + "\n")
        self.info.flush()

    def tool_title(self, tool_call_id: Any) -> str | None:
        """The title of a tool call seen so far (a permission request names only its id)."""
        title = self._tools.get(str(tool_call_id), {}).get("title")
        return str(title) if title is not None else None

    def render(self, update: dict[str, Any]) -> None:
        kind = str(update.get("sessionUpdate", ""))
        handler = getattr(self, "_" + kind, None)
        if handler is not None:
            handler(update)

    # ---- messages ----------------------------------------------------------------
    def _agent_message_chunk(self, update: dict[str, Any]) -> None:
        content = update.get("content")
        for block in content if type(content) is list else [content]:
            self._message_block(_obj(block))

    _agent_message = _agent_message_chunk

    def _message_block(self, block: dict[str, Any]) -> None:
        kind = block.get("type")
        if kind == "text":
            text = str(block.get("text", ""))
            if text:
                self.out.write(text)
                self.out.flush()
                self._mid_line = not text.endswith("\n")
            return
        res = _obj(block.get("resource"))
        if kind == "resource" and res.get("mimeType") == "application/json":
            try:
                doc = json.loads(str(res.get("text")))
            except ValueError:
                doc = None
            if doc is not None:  # the agent's typed output: one JSON line on stdout
                start = "\n" if self._mid_line else ""
                self._mid_line = False
                self.out.write(start + json.dumps(doc, ensure_ascii=False) + "\n")
                self.out.flush()
                return
        self._line(self.style.dim(f"[{_describe_block(block)}]"))

    def _agent_thought_chunk(self, update: dict[str, Any]) -> None:
        content = update.get("content")
        text = "".join(
            str(_obj(b).get("text", ""))
            for b in (content if type(content) is list else [content])
            if _obj(b).get("type") == "text"
        )
        if not text:
            return
        if not self._thinking:
            self.info.write(self.style.dim("thinking: "))
            self._thinking = True
        self.info.write(self.style.dim(text))
        self.info.flush()

    _agent_thought = _agent_thought_chunk

    # ---- tool calls --------------------------------------------------------------
    def _tool_call(self, update: dict[str, Any]) -> None:
        tid = str(update.get("toolCallId", ""))
        state = self._tools.setdefault(tid, {})
        for key, value in update.items():
            if key != "sessionUpdate" and value is not None:
                state[key] = value
        status = str(state.get("status") or "pending")
        mark = {"completed": self.style.green("done"), "failed": self.style.red("failed")}.get(
            status, status
        )
        title = state.get("title") or tid
        kind = f" ({state['kind']})" if state.get("kind") else ""
        where = ", ".join(
            f"{_obj(loc).get('path')}" + (f":{_obj(loc)['line']}" if _obj(loc).get("line") else "")
            for loc in state.get("locations") or ()
        )
        self._line(
            f"{self.style.cyan('tool')} {self.style.bold(str(title))}{kind} [{mark}]"
            + (f" {where}" if where else "")
        )
        if "content" in update:
            for item in update.get("content") or ():
                self._tool_content(_obj(item))
        if status in ("completed", "failed"):
            for item in state.get("content") or ():
                tid_ = _obj(item).get("terminalId")
                if _obj(item).get("type") == "terminal" and type(tid_) is str:
                    self._terminal(tid_)

    _tool_call_update = _tool_call

    def _tool_call_content_chunk(self, update: dict[str, Any]) -> None:
        self._tool_content(_obj(update.get("content")))

    def _tool_content(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        if kind == "diff":
            self._diff(item)
        elif kind == "content":
            block = _obj(item.get("content")) or item
            text = block.get("text") if block.get("type") == "text" else None
            shown = str(text) if text is not None else f"[{_describe_block(block)}]"
            for line in shown.splitlines() or [""]:
                self._line("  " + line)

    def _diff(self, item: dict[str, Any]) -> None:
        patch = item.get("patch")
        if "changes" in item:  # v2: patch {format, text} (optional), changes authoritative
            text = _obj(patch).get("text")
            lines = text.splitlines() if type(text) is str else []
            if not lines:  # no renderable patch: what changed, one line a file
                lines = [
                    f"{_obj(c).get('operation', 'change')} {_obj(c).get('path', '')}"
                    for c in item.get("changes") or ()
                ]
        else:  # v1: path, oldText (absent: a new file), newText
            path = str(item.get("path", ""))
            old = str(item.get("oldText") or "").splitlines()
            new = str(item.get("newText") or "").splitlines()
            lines = list(difflib.unified_diff(old, new, path, path, lineterm=""))
        for line in lines:
            shown = line
            if line.startswith("+") and not line.startswith("+++"):
                shown = self.style.green(line)
            elif line.startswith("-") and not line.startswith("---"):
                shown = self.style.red(line)
            self._line("  " + shown)

    def _terminal(self, terminal_id: str) -> None:
        output = self._terminal_output(terminal_id) if self._terminal_output else None
        for line in (output or "").splitlines():
            self._line(self.style.dim("  | ") + line)

    # ---- plans, terminals, session info --------------------------------------------
    def _plan(self, update: dict[str, Any]) -> None:
        """The plan as a checklist. Piped, an update of the same entries shows only the
        entries whose status changed (a log, not a screen to redraw)."""
        entries = update.get("entries")
        if entries is None:  # v2: plan_update carries `plan`
            entries = _obj(update.get("plan")).get("entries")
        plan = [
            (str(_obj(e).get("content", "")), str(_obj(e).get("status")))
            for e in (entries if type(entries) is list else ())
        ]
        before, self._plan_shown = self._plan_shown, plan
        if not self.style.on and before is not None and len(before) == len(plan):
            changed = [(i, e) for i, e in enumerate(plan) if e != before[i]]
            if all(e[0] == before[i][0] for i, e in changed) and len(changed) < len(plan):
                for i, (content, status) in changed:  # (all changed: a new plan, below)
                    mark = _STATUS_MARK.get(status, " ")
                    self._line(f"plan {i + 1}/{len(plan)}: [{mark}] {content}")
                return
        self._line(self.style.cyan("plan"))
        for content, status in plan:
            mark = _STATUS_MARK.get(status, " ")
            text = f"  [{mark}] {content}"
            self._line(self.style.dim(text) if mark == "x" else text)

    _plan_update = _plan

    def _terminal_output_chunk(self, update: dict[str, Any]) -> None:
        for line in str(update.get("data", "")).splitlines():
            self._line(self.style.dim("  | ") + line)

    def _terminal_update(self, update: dict[str, Any]) -> None:
        if update.get("command"):
            self._line(f"{self.style.cyan('terminal')} $ {update['command']}")
        exit_status = _obj(update.get("exitStatus"))
        if exit_status:
            self._line(self.style.dim(f"  exited {exit_status.get('exitCode')}"))

    def _current_mode_update(self, update: dict[str, Any]) -> None:
        self._line(self.style.dim(f"mode: {update.get('currentModeId') or update.get('modeId')}"))

    def _available_commands_update(self, update: dict[str, Any]) -> None:
        names = ["/" + str(_obj(c).get("name")) for c in update.get("availableCommands") or () if c]
        if names:
            self._line(self.style.dim("commands: " + " ".join(names)))

    def _session_info_update(self, update: dict[str, Any]) -> None:
        if update.get("title"):
            self._line(self.style.dim(f"title: {update['title']}"))


def _same_stream(a: TextIO, b: TextIO) -> bool:
    """Whether two streams end up in one place (a terminal, a file, a pipe): what one
    leaves mid-line, the other continues."""
    if a is b:
        return True
    try:
        return os.path.samestat(os.fstat(a.fileno()), os.fstat(b.fileno()))
    except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is an OSError
        return False


def _describe_block(block: dict[str, Any]) -> str:
    kind = str(block.get("type", "content"))
    if kind == "resource_link":
        return f"link {block.get('name') or ''} {block.get('uri', '')}".strip()
    if kind == "resource":
        return f"resource {_obj(block.get('resource')).get('uri', '')}".strip()
    return f"{kind} {block.get('mimeType', '')}".strip()


# ---- files ------------------------------------------------------------------------


class Files:
    """`fs/read_text_file` and `fs/write_text_file`, inside `root` only.  A write is
    confirmed by `confirm(path, content)` (asks on a terminal, or --yes)."""

    def __init__(self, root: str, confirm: Callable[[str, str], Awaitable[bool]]) -> None:
        self.root = os.path.realpath(root)
        self.confirm = confirm

    def inside(self, path: Any) -> str:
        """`path` resolved (symlinks followed); refused unless inside the session folder."""
        if type(path) is not str or not os.path.isabs(path):
            raise invalid_params(f"path must be an absolute path, got {path!r}")
        real = os.path.realpath(path)
        if real != self.root and not real.startswith(self.root + os.sep):
            raise RpcError(REFUSED, f"refused: {path} is outside the session folder {self.root}")
        return real

    async def read(self, params: dict[str, Any]) -> dict[str, Any]:
        real = self.inside(params.get("path"))
        try:
            text = Path(real).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise RpcError(RESOURCE_NOT_FOUND, f"no such file: {params.get('path')}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise RpcError(-32603, f"cannot read {params.get('path')}: {exc}") from None
        line, limit = params.get("line"), params.get("limit")
        if type(line) is int or type(limit) is int:
            lines = text.splitlines(keepends=True)
            start = max(0, (line if type(line) is int else 1) - 1)
            end = start + limit if type(limit) is int and limit >= 0 else None
            text = "".join(lines[start:end])
        return {"content": text}

    async def write(self, params: dict[str, Any]) -> dict[str, Any]:
        real = self.inside(params.get("path"))
        content = params.get("content")
        if type(content) is not str:
            raise invalid_params("content must be a string")
        if not await self.confirm(str(params.get("path")), content):
            raise RpcError(REFUSED, f"refused: the user did not allow writing {params['path']}")
        try:
            os.makedirs(os.path.dirname(real), exist_ok=True)
            Path(real).write_text(content, encoding="utf-8")
        except OSError as exc:
            raise RpcError(-32603, f"cannot write {params['path']}: {exc.strerror}") from None
        return {}


# ---- terminals --------------------------------------------------------------------


class _Term:
    def __init__(self, proc: asyncio.subprocess.Process, limit: int) -> None:
        self.proc = proc
        self.limit = limit
        self.buf = bytearray()
        self.truncated = False
        self.reader: asyncio.Task[None] | None = None

    async def pump(self) -> None:
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(65536):
            # the end kept, as the protocol asks
            self.truncated = keep_tail(self.buf, chunk, self.limit) or self.truncated

    def exit_status(self) -> dict[str, Any] | None:
        code = self.proc.returncode
        if code is None:
            return None
        if code < 0:
            with contextlib.suppress(ValueError):
                return {"exitCode": None, "signal": signal.Signals(-code).name}
            return {"exitCode": None, "signal": str(-code)}
        return {"exitCode": code, "signal": None}


class Terminals:
    """`terminal/*`: each command runs as a process (its own process group) in the
    session folder, stdout and stderr together, the last `outputByteLimit` bytes kept;
    killed on `terminal/kill` and `terminal/release`, and every one by `close()`."""

    def __init__(self, root: str, files: Files | None = None) -> None:
        self.root = os.path.realpath(root)
        self._files = files
        self._terms: dict[str, _Term] = {}
        self._released: dict[str, str] = {}  # the last output of released terminals
        self._next = 0

    def _get(self, params: dict[str, Any]) -> _Term:
        term = self._terms.get(str(params.get("terminalId")))
        if term is None:
            raise invalid_params(f"unknown terminal {params.get('terminalId')!r}")
        return term

    def output_text(self, terminal_id: str) -> str | None:
        term = self._terms.get(terminal_id)
        if term is None:
            return self._released.get(terminal_id)
        return term.buf.decode("utf-8", "replace")

    async def create(self, params: dict[str, Any]) -> dict[str, Any]:
        command = params.get("command")
        if type(command) is not str or not command:
            raise invalid_params("command must be a non-empty string")
        args = [str(a) for a in params.get("args") or ()]
        env = dict(os.environ)
        for item in params.get("env") or ():
            if type(item) is dict and type(item.get("name")) is str:
                env[item["name"]] = str(item.get("value", ""))
        cwd = params.get("cwd") or self.root
        files = self._files or Files(self.root, _never)
        cwd = files.inside(cwd)
        limit = params.get("outputByteLimit")
        limit = limit if type(limit) is int and limit >= 0 else OUTPUT_LIMIT
        try:
            proc = await asyncio.create_subprocess_exec(
                command,
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=hasattr(os, "killpg"),
            )
        except OSError as exc:
            why = "command not found" if isinstance(exc, FileNotFoundError) else exc.strerror
            raise RpcError(-32603, f"cannot run {command}: {why}") from None
        self._next += 1
        tid = f"term-{self._next}"
        term = self._terms[tid] = _Term(proc, limit)
        term.reader = asyncio.get_running_loop().create_task(term.pump())
        return {"terminalId": tid}

    async def output(self, params: dict[str, Any]) -> dict[str, Any]:
        term = self._get(params)
        result: dict[str, Any] = {
            "output": term.buf.decode("utf-8", "replace"),
            "truncated": term.truncated,
        }
        status = term.exit_status()
        if status is not None:
            result["exitStatus"] = status
        return result

    async def wait_for_exit(self, params: dict[str, Any]) -> dict[str, Any]:
        term = self._get(params)
        await term.proc.wait()
        if term.reader is not None:
            await asyncio.wait({term.reader}, timeout=1.0)
        return term.exit_status() or {}

    async def kill(self, params: dict[str, Any]) -> dict[str, Any]:
        await self._kill(self._get(params))
        return {}

    async def release(self, params: dict[str, Any]) -> dict[str, Any]:
        term = self._get(params)
        await self._kill(term)
        tid = str(params.get("terminalId"))
        self._terms.pop(tid, None)
        # shown when the tool call that embeds it completes (often after the release)
        self._released[tid] = term.buf.decode("utf-8", "replace")
        if len(self._released) > _RELEASED_KEPT:
            self._released.pop(next(iter(self._released)))
        return {}

    async def _kill(self, term: _Term) -> None:
        if term.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if hasattr(os, "killpg"):
                    os.killpg(term.proc.pid, signal.SIGKILL)
                else:  # pragma: no cover - no process groups
                    term.proc.kill()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(term.proc.wait(), 5.0)
        if term.reader is not None:
            await asyncio.wait({term.reader}, timeout=1.0)
            term.reader.cancel()

    async def close(self) -> None:
        """Kill every terminal still running (the client is exiting)."""
        for term in list(self._terms.values()):
            await self._kill(term)
        self._terms.clear()


async def _never(path: str, content: str) -> bool:
    return False
