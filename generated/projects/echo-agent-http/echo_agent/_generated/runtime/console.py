"""The console client: prompts from stdin, the agent's answer on stdout, one line on
stderr for every error, and the agent's questions asked on the terminal.

`run_console` is what a generated client's console script runs (stdio and HTTP).  Exit
status: 0 when stdin ends; 1 on an agent error (`error 1001 QuotaExceeded (transient):
...`), when the agent exits or the connection drops (`error: the agent exited (exit
status 3)`), when it cannot be reached or started (`error: cannot connect to URL:
connection refused`) or does not answer within the connect timeout; 3 when a turn ended
`cancelled` after the agent asked something nobody could answer here (stdin is not a
terminal); 130 on Ctrl-C (2: a usage error, from the argument parser).  Transient errors
are retried first (`with_retries`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TextIO, TypeVar

from . import content
from .client import (
    CONNECT_TIMEOUT,
    MAX_RETRY_WAIT,
    RETRIES,
    RETRY_DELAY,
    AgentProxy,
    ClientRuntime,
    _one_line,
    describe_error,
    negotiate,
    prompt_turn,
    unless_closed,
    with_retries,
)
from .errors import ConnectionClosed, RpcError
from .jsonrpc import Connection

T = TypeVar("T")


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


def _say(text: str) -> None:
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
        _say(
            f"the agent asks{what}: {_one_line(message)} -- declined: stdin is not a "
            f"terminal, nobody can answer here (answer it with {how})\n"
        )
        return None
    _say(f"\nthe agent asks{what}: {message}\n")
    if payload is not None:
        _say("  " + _one_line(json.dumps(payload, ensure_ascii=False), 2000) + "\n")
    _say("  (an empty answer to a required field, or the end of input, declines)\n")
    props: dict[str, Any] = schema["properties"] if type(schema.get("properties")) is dict else {}
    required = set(schema.get("required") or ())
    content: dict[str, Any] = {}
    for key, prop in props.items():
        if type(prop) is not dict:
            continue
        label = prop.get("title") or key
        optional = "" if key in required else ", optional"
        while True:
            _say(f"  {label} ({_hint(prop)}{optional}): ")
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
            _say(f"  expected {_hint(prop)}\n")
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
    _say(f"\n{question}\n")
    while True:
        _say("  allow? (y/n): ")
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
        _say(
            f"the agent asks permission: {_one_line(title)} -- {allow.get('name') or ''} "
            f"({allow.get('kind')}, --yes)\n"
        )
        return str(allow["optionId"])
    if not terminal.interactive():
        terminal.unanswered += 1
        _say(
            f"the agent asks permission: {_one_line(title)} -- declined: stdin is not a "
            "terminal, nobody can answer here (--yes allows)\n"
        )
        return reject
    _say(f"\nthe agent asks permission: {title}\n")
    for i, o in enumerate(options, 1):
        _say(f"  {i}. {o.get('name') or o.get('optionId')} ({o.get('kind', '')})\n")
    while True:
        _say(f"  choose 1-{len(options)} (empty: decline): ")
        line = await terminal.readline()
        text = line.strip()
        if not text:
            return reject
        if text.isdigit() and 1 <= int(text) <= len(options):
            chosen = options[int(text) - 1].get("optionId")
            return str(chosen) if chosen is not None else reject


async def _next_line(terminal: Terminal, conn: Connection) -> str:
    """The next prompt line, unless the connection ends first (its error is raised)."""
    line = asyncio.ensure_future(terminal.readline())
    try:
        return await unless_closed(line, conn)
    finally:
        line.cancel()


# exit status when a turn ended because this client could not answer the agent's question
UNANSWERED = 3
AUTH_REQUIRED = -32000


async def console(
    client: ClientRuntime,
    open_agent: Callable[[], AbstractAsyncContextManager[AgentProxy]],
    *,
    retries: int = RETRIES,
    retry_delay: float = RETRY_DELAY,
    max_retry_wait: float = MAX_RETRY_WAIT,
    connect_timeout: float = CONNECT_TIMEOUT,
    target: str = "the agent",
    terminal: Terminal | None = None,
    settings: list[tuple[str, str]] | None = None,
    mode: str | None = None,
    input_file: str | None = None,
    auth: str | None = None,
    rerun: Callable[[str], str] | None = None,
) -> int:
    """Open a session, send each line of stdin as a prompt (or the whole `input_file`, `-`
    for stdin, as one); the exit status.  `target` names the agent in messages (its
    command, or its URL); `settings` (config option id, value) and `mode` are applied to
    the session first; `auth` (a method id) authenticates before it."""
    term = terminal or Terminal()
    client.terminal = term
    client.render_updates = True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, connect_timeout)
    init: dict[str, Any] = {}

    async def starting(step: Awaitable[T], what: str) -> T:
        """`step` of the start-up, within what is left of the connect timeout."""
        try:
            return await asyncio.wait_for(step, max(0.0, deadline - loop.time()))
        except TimeoutError:
            raise ConnectionClosed(
                f"{target} did not answer {what} within {connect_timeout:g}s "
                "(raise it with --connect-timeout or ACP_CONNECT_TIMEOUT)"
            ) from None

    def retrying(err: RpcError, attempt: int, wait: float) -> None:
        _say(f"{describe_error(err)} -- retry {attempt} of {retries} in {wait:g}s\n")

    async def one_turn(agent: AgentProxy, sid: str, text: str) -> int:
        asked = term.unanswered
        stop = await with_retries(
            lambda: prompt_turn(agent, client, sid, content.text(text)),
            retries=retries,
            delay=retry_delay,
            max_wait=max_retry_wait,
            on_retry=retrying,
        )
        sys.stdout.write("\n")
        sys.stdout.flush()
        _say(f"[turn: {stop}]\n")
        if stop == "cancelled" and term.unanswered > asked:
            _say(
                "the turn was cancelled: the agent asked something nobody could "
                f"answer here (exit status {UNANSWERED})\n"
            )
            return UNANSWERED
        return 0

    status = 0
    try:
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(client.close_tools)
            agent = await starting(stack.enter_async_context(open_agent()), "the connection")
            init = await starting(negotiate(agent, client), "initialize")
            if auth is not None:
                await _authenticate(agent, client, auth)
            sess = await starting(
                agent.call("session/new", {"cwd": client.root, "mcpServers": []}), "session/new"
            )
            sid = _session_id(sess)
            await _configure(agent, client, sid, sess, settings or [], mode)
            if input_file is not None:
                text = sys.stdin.read() if input_file == "-" else _read_input(input_file)
                return await one_turn(agent, sid, text)
            while (text := await _next_prompt(term, agent)) is not None:
                status = await one_turn(agent, sid, text) or status
            return status
    except RpcError as err:
        _say(describe_error(err) + "\n")
        if err.code == AUTH_REQUIRED:
            _auth_hint(init, client, rerun)
        return 1
    except OSError as err:  # the agent could not be reached, the input file read
        _say(f"error: {_one_line(str(err)) or type(err).__name__}\n")
        return 1


def _session_id(sess: Any) -> str:
    sid = sess.get("sessionId") if type(sess) is dict else None
    if type(sid) is not str:
        raise RpcError(-32603, "the agent's session/new answer has no sessionId")
    return sid


async def _authenticate(agent: AgentProxy, client: ClientRuntime, method_id: str) -> None:
    rev = client.revision
    if rev is None or "authenticate" not in rev.side("agent"):
        raise RpcError(-32601, "this protocol revision has no authenticate method")
    await agent.call("authenticate", {"methodId": method_id})


async def _next_prompt(term: Terminal, agent: AgentProxy) -> str | None:
    """The next prompt from stdin (None at its end): a line, or on a terminal several
    lines joined where each but the last ends with a backslash."""
    line = await _next_line(term, agent.connection)
    if not line:
        return None
    text = line.rstrip("\n")
    while text.endswith("\\") and term.interactive():  # a multi-line prompt
        more = await _next_line(term, agent.connection)
        text = text[:-1] + "\n" + more.rstrip("\n")
        if not more:
            break
    return text


def _read_input(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise OSError(f"cannot read --input {path}: {exc.strerror}") from None


async def _configure(
    agent: AgentProxy,
    client: ClientRuntime,
    sid: str,
    sess: dict[str, Any],
    settings: list[tuple[str, str]],
    mode: str | None,
) -> None:
    """`--set KEY=VALUE` and `--mode ID` on the new session."""
    rev = client.revision
    if rev is None:
        return
    shape = rev.config_option
    options = {str(o.get(shape.id)): o for o in sess.get("configOptions") or () if type(o) is dict}
    for key, value in settings:
        option = options.get(key)
        if option is None:
            have = ", ".join(sorted(options)) or "none"
            raise RpcError(-32602, f"--set {key}: the agent has no such config option ({have})")
        await agent.call("session/set_config_option", _set_value(sid, key, value, option, rev))
    if mode is None:
        return
    if "session/set_mode" in rev.side("agent"):
        await agent.call("session/set_mode", {"sessionId": sid, "modeId": mode})
        return
    moded = [k for k, o in options.items() if o.get("category") == "mode"]
    if not moded:
        raise RpcError(-32602, f"--mode {mode}: the agent has no modes")
    await agent.call(
        "session/set_config_option", _set_value(sid, moded[0], mode, options[moded[0]], rev)
    )


def _set_value(sid: str, key: str, value: str, option: dict[str, Any], rev: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"sessionId": sid, "configId": key}
    if option.get("type") == "boolean" and "boolean" in rev.config_option.kinds:
        params.update(type="boolean", value=value.strip().lower() in ("1", "true", "yes", "on"))
    else:
        params["value"] = value
    return params


def _auth_hint(
    init: dict[str, Any], client: ClientRuntime, rerun: Callable[[str], str] | None
) -> None:
    """The agent's auth methods and the line to run (the agent answered auth-required)."""
    rev = client.revision
    field = rev.init.auth_methods if rev is not None else None
    methods = [m for m in init.get(field or "authMethods") or () if type(m) is dict]
    id_key = rev.auth_method.id if rev is not None else "id"
    ids = [str(m.get(id_key)) for m in methods if m.get(id_key)]
    if not ids:
        return
    _say("the agent asks you to authenticate; its methods:\n")
    for m in methods:
        about = m.get("description") or ""
        _say(f"  {m.get(id_key)}: {m.get('name') or ''}" + (f" ({about})" if about else "") + "\n")
    if rerun is not None:
        _say(f"run: {rerun(ids[0])}\n")


def run_console(
    client: ClientRuntime,
    open_agent: Callable[[], AbstractAsyncContextManager[AgentProxy]],
    **options: Any,
) -> None:
    """`console(client, open_agent, **options)` in a fresh event loop; exits with its
    status (130 on Ctrl-C)."""
    status = 130
    with contextlib.suppress(KeyboardInterrupt):
        status = asyncio.run(console(client, open_agent, **options))
    sys.stdout.flush()
    sys.exit(status)
