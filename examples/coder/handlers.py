"""The coder agent's handler: one edit per prompt, the way an editor's agent works.

This is `<package>/handlers.py` of the project `agentgen new --manifest
examples/coder/agent.yaml` creates.  A prompt ``replace `OLD` with `NEW` in PATH``:

1. a plan of three entries (read, edit, check) and a thought;
2. PATH read through the client (`fs/read_text_file`) when it declared
   `fs.readTextFile`, else from disk;
3. an `edit` tool call showing the diff, PATH as its location, and
   `session/request_permission` with allow_once / reject_once;
4. allowed: PATH written through the client (`fs.writeTextFile`) or to disk; rejected:
   the tool call fails, the file is untouched;
5. with the client's `terminal`: PATH compiled by `python` in a client terminal (as
   `python -m py_compile` does, but writing no `__pycache__` into the user's folder),
   shown as an `execute` tool call with the terminal embedded;
6. a one-line summary.

`/help` and `/undo` are the manifest's slash commands; in the `ask` mode it shows the
diff and never writes.  Every call works on every protocol revision: what the client or
the revision lacks (v2 has no fs/terminal methods) is checked with `turn.client_can` and
done on disk instead, or skipped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ._generated.acp import (
    AgentBase,
    DiffContent,
    Location,
    PermissionOption,
    PlanEntry,
    RpcError,
    TerminalContent,
    Turn,
)

# `python -m py_compile PATH` without the .pyc it writes into `__pycache__` beside PATH
# (the user's folder): compile() checks the same syntax and writes nothing
COMPILE = "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')"
REQUEST = re.compile(r"replace `(?P<old>[^`]+)` with `(?P<new>[^`]*)` in (?P<path>\S+)")
HELP = (
    "Say: replace `OLD` with `NEW` in PATH (PATH relative to the session's folder). "
    "/undo undoes the last edit; the ask mode shows the diff without writing."
)
OPTIONS = [
    PermissionOption("allow", "Apply the edit", "allow_once"),
    PermissionOption("reject", "Leave the file as it is", "reject_once"),
]


class Edit:
    """One applied edit (what /undo puts back)."""

    def __init__(self, path: str, before: str, after: str) -> None:
        self.path, self.before, self.after = path, before, after


class Agent(AgentBase):
    """Coder: replaces text in one file per prompt."""

    def __init__(self) -> None:
        super().__init__()
        self.last_edit: dict[str, Edit] = {}  # session id -> its last edit

    async def is_authenticated(self) -> bool:
        return True  # local files only: there is no account to log into

    @classmethod
    def login(cls, method_id: str, argv: list[str]) -> int:
        """`coder-agent --login` (the terminal auth method an editor may run)."""
        print("coder-agent edits files in the session's folder and needs no account.")
        return 0

    async def prompt(self, turn: Turn, input: list[dict[str, Any]]) -> None:
        command = turn.command
        if command is not None and command.name == "help":
            await turn.send_text(HELP)
            return
        if command is not None and command.name == "undo":
            await self.undo(turn)
            return
        text = " ".join(b["text"] for b in input if b.get("type") == "text")
        match = REQUEST.search(text)
        if match is None:
            await turn.send_text(HELP)
            return
        await self.replace(turn, match["old"], match["new"], match["path"])

    # ---- files: through the client when it serves them, else on disk -----------------
    def _inside(self, turn: Turn, path: str) -> str | None:
        """The absolute path, when it stays inside the session's folder."""
        full = turn.resolve(path)
        root = Path(turn.cwd).resolve()
        return full if Path(full).resolve().is_relative_to(root) else None

    async def read(self, turn: Turn, path: str) -> str:
        if turn.can_read_files:
            return await turn.read_text_file(path)
        return Path(path).read_text(encoding="utf-8")

    async def write(self, turn: Turn, path: str, text: str) -> None:
        if turn.can_write_files:
            await turn.write_text_file(path, text)
        else:
            Path(path).write_text(text, encoding="utf-8")

    # ---- the edit ------------------------------------------------------------------
    async def replace(self, turn: Turn, old: str, new: str, path: str) -> None:
        full = self._inside(turn, path)
        if full is None:
            await turn.send_text(f"{path} is outside the session's folder: nothing changed.")
            return
        await turn.set_plan(
            [
                PlanEntry(f"Read {path}", "high"),
                PlanEntry(f"Replace {old!r} with {new!r}", "high"),
                PlanEntry(f"Check {path}", "medium"),
            ]
        )
        await turn.send_thought(f"I will look for {old!r} in {path} and replace it with {new!r}.")
        await turn.update_plan_entry(0, status="in_progress")
        try:
            before = await self.read(turn, full)
        except OSError as exc:  # on disk
            await turn.send_text(f"Cannot read {path}: {exc.strerror or exc}.")
            return
        except UnicodeDecodeError:
            await turn.send_text(f"Cannot read {path}: not UTF-8 text.")
            return
        except RpcError as exc:  # the client's answer to fs/read_text_file
            await turn.send_text(f"Cannot read {path}: {exc.message}.")
            return
        await turn.update_plan_entry(0, status="completed")
        if old not in before:
            await turn.send_text(f"`{old}` is not in {path}: nothing to change.")
            return
        after = before.replace(old, new)
        await turn.update_plan_entry(1, status="in_progress")
        edit = await turn.start_tool_call(
            f"Edit {path}",
            kind="edit",
            status="pending",
            content=[DiffContent(full, before, after)],
            locations=[Location(full)],
            raw_input={"path": path, "old": old, "new": new},
        )
        if turn.mode == "ask":
            await edit.complete(raw_output={"applied": False, "mode": "ask"})
            await turn.send_text(f"Ask mode: the diff for {path} is above; nothing written.")
            return
        answer = await turn.request_permission(OPTIONS, tool_call=edit)
        if not answer.allowed:
            await edit.fail(raw_output={"applied": False})
            await turn.send_text(f"Edit of {path} rejected: the file is untouched.")
            return
        await edit.update(status="in_progress")
        try:
            await self.write(turn, full, after)
        except (RpcError, OSError) as exc:  # the client refused the write, or the disk did
            reason = exc.message if isinstance(exc, RpcError) else (exc.strerror or str(exc))
            await edit.fail(raw_output={"applied": False, "error": reason})
            await turn.send_text(f"Edit of {path} not written ({reason}): the file is untouched.")
            return
        await edit.complete(raw_output={"applied": True})
        self.last_edit[turn.session_id] = Edit(full, before, after)
        await turn.update_plan_entry(1, status="completed")
        checked = await self.check(turn, full) if full.endswith(".py") else "not a Python file"
        await turn.update_plan_entry(2, status="completed")
        count = before.count(old)
        await turn.send_text(
            f"Replaced {count} occurrence{'s' if count != 1 else ''} of `{old}` in {path} ({checked})."
        )

    async def check(self, turn: Turn, path: str) -> str:
        """PATH compiled in the client's terminal, when it has one (nothing written)."""
        if not turn.can_use_terminal:
            return "not compiled: the client has no terminal"
        await turn.update_plan_entry(2, status="in_progress")
        term = await turn.create_terminal("python", ["-c", COMPILE, path], cwd=turn.cwd)
        shown = [TerminalContent(term.id)]
        async with (
            term,  # released when the block ends (killed first if it raises or is cancelled)
            turn.tool_call(
                f"python: compile {path}", kind="execute", content=shown, locations=[path]
            ) as call,
        ):
            status = await term.wait_for_exit()
            if status.exit_code != 0:
                await call.fail(raw_output={"exitCode": status.exit_code})
                return f"compile failed with exit code {status.exit_code}"
        return "compiles"

    async def undo(self, turn: Turn) -> None:
        edit = self.last_edit.pop(turn.session_id, None)
        if edit is None:
            await turn.send_text("Nothing to undo in this session.")
            return
        async with turn.tool_call(
            f"Undo the edit of {edit.path}",
            kind="edit",
            content=[DiffContent(edit.path, edit.after, edit.before)],
            locations=[Location(edit.path)],
        ):
            await self.write(turn, edit.path, edit.before)
        await turn.send_text(f"Undid the last edit of {edit.path}.")
