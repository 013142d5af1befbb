"""The client's questions on the terminal: the stdin ``Terminal`` (read one line at a time by
a daemon thread, shared by the console's prompts and these questions), ``ask_form`` (an
elicitation form, field by field), ``ask_choice`` (a permission request's options) and
``ask_yes_no``; ``say`` writes one line on stderr."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any, TextIO

from .retries import one_line


class Terminal:
    """Lines of stdin, read one at a time by a daemon thread: a line is read only when
    asked for (prompts and answers to the agent's questions share the stream), and a
    read left waiting never holds up the end of the program."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdin
        self._want = threading.Semaphore(0)
        self._lines: asyncio.Queue[str] | None = None
        self._asked = False
        self._eof = False
        # questions from the agent declined because nobody can answer here
        self.unanswered = 0
        # the running turn was cancelled: its questions are answered `cancelled`
        self.questions_cancelled = False
        self._waiting: set[asyncio.Future[str]] = set()

    def cancel_questions(self) -> None:
        """The user cancelled the turn: a question of the agent waiting here, and any it
        asks before the turn ends, is answered `cancelled` (the protocol's rule for the
        pending requests of a cancelled turn), not left waiting for a line."""
        self.questions_cancelled = True
        for waiter in list(self._waiting):
            waiter.cancel()

    async def answer(self) -> str | None:
        """The next line for a question of the agent; None once the turn is cancelled (a
        line typed later stays for the next read)."""
        if self.questions_cancelled:
            return None
        waiter = asyncio.ensure_future(self.readline())
        self._waiting.add(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if waiter.cancelled() and self.questions_cancelled and not (task and task.cancelling()):
                return None
            raise
        finally:
            self._waiting.discard(waiter)

    def interactive(self) -> bool:
        """Whether a person can answer here (stdin is a terminal)."""
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError, OSError):
            return False

    async def readline(self) -> str:
        """The next line ("" at the end of input)."""
        if self._lines is None:
            self._lines = asyncio.Queue()
            loop = asyncio.get_running_loop()
            threading.Thread(target=self._pump, args=(loop,), daemon=True).start()
        if self._lines.empty():
            if self._eof:
                return ""
            if not self._asked:
                self._asked = True
                self._want.release()
        return await self._lines.get()

    def _pump(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            self._want.acquire()
            try:
                line = self.stream.readline()
            except (OSError, ValueError):
                line = ""
            try:
                loop.call_soon_threadsafe(self._got, line)
            except RuntimeError:  # the loop has ended
                return
            if not line:
                return

    def _got(self, line: str) -> None:
        self._asked = False
        self._eof = self._eof or not line
        assert self._lines is not None
        self._lines.put_nowait(line)


def say(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def _hint(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return "one of " + "|".join(str(v) for v in prop["enum"])
    kind = prop.get("type")
    if kind == "boolean":
        return "y/n"
    if kind == "array":
        items: dict[str, Any] = prop["items"] if type(prop.get("items")) is dict else {}
        choices = items.get("enum") or [o.get("const") for o in items.get("anyOf") or ()]
        return "comma-separated" + (" of " + "|".join(map(str, choices)) if choices else "")
    return str(kind or "text")


def _parse(text: str, prop: dict[str, Any]) -> tuple[bool, Any]:
    """`text` as the value `prop` describes: (ok, value)."""
    kind = prop.get("type")
    if "enum" in prop:
        found = [v for v in prop["enum"] if str(v) == text]
        return (True, found[0]) if found else (False, None)
    if kind == "boolean":
        low = text.lower()
        if low in ("y", "yes", "true", "1"):
            return True, True
        if low in ("n", "no", "false", "0"):
            return True, False
        return False, None
    if kind in ("integer", "number"):
        try:
            return True, int(text) if kind == "integer" else float(text)
        except ValueError:
            return False, None
    if kind == "array":
        return True, [part.strip() for part in text.split(",") if part.strip()]
    return True, text


async def ask_form(
    terminal: Terminal,
    message: str,
    schema: dict[str, Any],
    *,
    name: str | None = None,
    payload: Any = None,
) -> dict[str, Any] | None:
    """Ask the terminal for each field of `schema` (an object schema); None when declined:
    stdin is not a terminal (prompts come from stdin: nobody can answer), the input ended,
    or a required field was left empty."""
    what = f" ({name})" if name else ""
    if not terminal.interactive():
        terminal.unanswered += 1
        how = f"`interrupt_{name}` in handlers.py" if name else "a handler in handlers.py"
        say(
            f"the agent asks{what}: {one_line(message)} -- declined: stdin is not a "
            f"terminal, nobody can answer here (answer it with {how})\n"
        )
        return None
    say(f"\nthe agent asks{what}: {message}\n")
    if payload is not None:
        say("  " + one_line(json.dumps(payload, ensure_ascii=False), 2000) + "\n")
    say("  (an empty answer to a required field, or the end of input, declines)\n")
    props: dict[str, Any] = schema["properties"] if type(schema.get("properties")) is dict else {}
    required = set(schema.get("required") or ())
    content: dict[str, Any] = {}
    for key, prop in props.items():
        if type(prop) is not dict:
            continue
        label = prop.get("title") or key
        optional = "" if key in required else ", optional"
        while True:
            say(f"  {label} ({_hint(prop)}{optional}): ")
            line = await terminal.readline()
            if not line:
                return None
            text = line.strip()
            if not text:
                if key in required:
                    return None
                break
            ok, value = _parse(text, prop)
            if ok:
                content[key] = value
                break
            say(f"  expected {_hint(prop)}\n")
    return content


def _first(options: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    return next(
        (
            o
            for o in options
            if str(o.get("kind", "")).startswith(kind) and type(o.get("optionId")) is str
        ),
        None,
    )


async def ask_yes_no(terminal: Terminal, question: str) -> bool:
    """A yes/no question on the terminal (an empty answer or the end of input: no)."""
    say(f"\n{question}\n")
    while True:
        say("  allow? (y/n): ")
        text = (await terminal.readline()).strip().lower()
        if text in ("y", "yes"):
            return True
        if text in ("", "n", "no"):
            return False


async def ask_choice(
    terminal: Terminal, title: str, options: list[dict[str, Any]], *, yes: bool = False
) -> str | None:
    """A permission request: the option picked on the terminal; with `yes` (--yes), the
    first allow option; without a terminal, the first reject option (None: no such option,
    the request is cancelled)."""
    found = _first(options, "reject")
    reject = str(found["optionId"]) if found is not None else None
    allow = _first(options, "allow") if yes else None
    if allow is not None:
        say(
            f"the agent asks permission: {one_line(title)} -- {allow.get('name') or ''} "
            f"({allow.get('kind')}, --yes)\n"
        )
        return str(allow["optionId"])
    if not terminal.interactive():
        terminal.unanswered += 1
        say(
            f"the agent asks permission: {one_line(title)} -- declined: stdin is not a "
            "terminal, nobody can answer here (--yes allows)\n"
        )
        return reject
    say(f"\nthe agent asks permission: {title}\n")
    for i, o in enumerate(options, 1):
        say(f"  {i}. {o.get('name') or o.get('optionId')} ({o.get('kind', '')})\n")
    while True:
        say(f"  choose 1-{len(options)} (empty: decline): ")
        line = await terminal.answer()
        if line is None:
            say("\n  cancelled with the turn\n")
            return None
        text = line.strip()
        if not text:
            return reject
        if text.isdigit() and 1 <= int(text) <= len(options):
            chosen = options[int(text) - 1].get("optionId")
            return str(chosen) if chosen is not None else reject
