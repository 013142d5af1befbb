"""The console client: prompts from stdin, the agent's answer on stdout, one line on
stderr for every error, and the agent's questions asked on the terminal.

`run_console` is what a generated client's console script runs (stdio and HTTP).  Exit
status: 0 when stdin ends; 1 on an agent error (`error 1001 QuotaExceeded (transient):
...`), when the agent exits or the connection drops (`error: the agent exited (exit
status 3)`), when it cannot be reached or started (`error: cannot connect to URL:
connection refused`) or does not answer within the connect timeout; 3 when a turn ended
`cancelled` after the agent asked something nobody could answer here (stdin is not a
terminal); on a terminal (a banner, then `> ` before each prompt line) a turn's error is
said and the session goes on (exit status 1 at the end), and Ctrl-C cancels the running
turn (a second Ctrl-C quits); 130 on Ctrl-C at the prompt (2: a usage error, from the
argument parser).  Transient errors
are retried first (`with_retries`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from ..client import content
from ..client.client import AgentProxy, ClientRuntime, negotiate, prompt_turn, unless_closed
from ..client.prompts import Terminal, say
from ..client.retries import (
    CONNECT_TIMEOUT,
    MAX_RETRY_WAIT,
    RETRIES,
    RETRY_DELAY,
    describe_error,
    one_line,
    with_retries,
)
from ..wire.errors import AUTH_REQUIRED, ConnectionClosed, RpcError
from ..wire.jsonrpc import Connection

T = TypeVar("T")


async def _next_line(terminal: Terminal, conn: Connection) -> str:
    """The next prompt line, unless the connection ends first (its error is raised)."""
    line = asyncio.ensure_future(terminal.readline())
    try:
        return await unless_closed(line, conn)
    finally:
        line.cancel()


# exit status when a turn ended because this client could not answer the agent's question
UNANSWERED = 3
# exit status on Ctrl-C (a shell's 128 + SIGINT)
INTERRUPTED = 130


class Quit(Exception):
    """A second Ctrl-C while a turn runs: the console ends (exit status 130)."""


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
        say(f"{describe_error(err)} -- retry {attempt} of {retries} in {wait:g}s\n")

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
        say(f"[turn: {stop}]\n")
        if stop == "cancelled" and term.unanswered > asked:
            say(
                "the turn was cancelled: the agent asked something nobody could "
                f"answer here (exit status {UNANSWERED})\n"
            )
            return UNANSWERED
        return 0

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
            _greet(term, _banner(init, client, target, sid))
            return await _each_prompt(term, agent, sid, one_turn)
    except Quit:
        say("^C: quit\n")
        return INTERRUPTED
    except RpcError as err:
        say(describe_error(err) + "\n")
        if err.code == AUTH_REQUIRED:
            _auth_hint(init, client, rerun)
        return 1
    except OSError as err:  # the agent could not be reached, the input file read
        say(f"error: {one_line(str(err)) or type(err).__name__}\n")
        return 1


async def _each_prompt(
    term: Terminal,
    agent: AgentProxy,
    sid: str,
    one_turn: Callable[[AgentProxy, str, str], Coroutine[Any, Any, int]],
) -> int:
    """A turn for each prompt line until the input ends; the worst status."""
    status = 0
    while (text := await _next_prompt(term, agent)) is not None:
        turn = _interruptible(term, agent, sid, one_turn(agent, sid, text))
        status = await _on_terminal(term, turn) or status
    return status


async def _interruptible(
    term: Terminal, agent: AgentProxy, sid: str, turn: Coroutine[Any, Any, int]
) -> int:
    """`turn`; on a terminal a Ctrl-C while it runs cancels it (`session/cancel`: the turn
    ends `cancelled` and the next prompt is read) and a second one quits (exit status
    130). At the prompt, Ctrl-C quits as before."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(turn)
    presses = 0

    def interrupted() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            say("\n^C: cancelling the turn (Ctrl-C again quits)\n")
            agent.connection.notify("session/cancel", {"sessionId": sid})
            term.cancel_questions()
        else:
            task.cancel()

    if not term.interactive():
        return await task
    term.questions_cancelled = False  # a new turn: its questions are answered again
    before = signal.getsignal(signal.SIGINT)
    try:
        loop.add_signal_handler(signal.SIGINT, interrupted)
    except (NotImplementedError, RuntimeError, ValueError):  # no signals here (Windows, a thread)
        return await task
    try:
        return await task
    except asyncio.CancelledError:
        if presses > 1:
            raise Quit from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, before)


async def _on_terminal(term: Terminal, turn: Awaitable[int]) -> int:
    """`turn`'s status; on a terminal the session outlives a turn the agent answered with
    an error: said, and the next prompt is read (status 1).  Piped, or a lost connection:
    raised (the console ends)."""
    try:
        return await turn
    except RpcError as err:
        if isinstance(err, ConnectionClosed) or not term.interactive():
            raise
        say(describe_error(err) + "\n")
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


PROMPT_MARK = "> "  # on a terminal, before each prompt line
MORE_MARK = ". "  # on a terminal, before each line that continues a prompt


def _banner(init: dict[str, Any], client: ClientRuntime, target: str, sid: str) -> str:
    """What a person at a terminal reads once the session is open: the agent (its name
    and version from `initialize`, else `target`), the protocol version, how to type."""
    rev = client.revision
    info = init.get(rev.init.response_info) if rev is not None else None
    who = target
    if type(info) is dict and type(info.get("name")) is str:
        who = f"{info.get('title') or info['name']} {info.get('version') or ''}".strip()
    return (
        f"connected to {who} (ACP protocol {init.get('protocolVersion')}), session {sid}\n"
        "type a prompt and press Enter (end a line with \\ to go on); Ctrl-D quits\n"
    )


def _greet(term: Terminal, banner: str) -> None:
    """The banner, on a terminal only (piped output stays the agent's answer alone)."""
    if term.interactive():
        say(banner)


async def _next_prompt(term: Terminal, agent: AgentProxy) -> str | None:
    """The next prompt from stdin (None at its end): a line, or on a terminal several
    lines joined where each but the last ends with a backslash.  On a terminal each line
    is asked for with a marker on stderr (`PROMPT_MARK`, `MORE_MARK`)."""
    tty = term.interactive()
    if tty:
        say(PROMPT_MARK)
    line = await _next_line(term, agent.connection)
    if not line:
        if tty:
            say("\n")
        return None
    text = line.rstrip("\n")
    while text.endswith("\\") and tty:  # a multi-line prompt
        say(MORE_MARK)
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
    elif "id" in rev.config_option.value_tags:  # v2: a select's value is tagged
        params.update(type="id", value=value)
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
    say("the agent asks you to authenticate; its methods:\n")
    for m in methods:
        about = m.get("description") or ""
        say(f"  {m.get(id_key)}: {m.get('name') or ''}" + (f" ({about})" if about else "") + "\n")
    if rerun is not None:
        say(f"run: {rerun(ids[0])}\n")


def run_console(
    client: ClientRuntime,
    open_agent: Callable[[], AbstractAsyncContextManager[AgentProxy]],
    **options: Any,
) -> None:
    """`console(client, open_agent, **options)` in a fresh event loop; exits with its
    status (130 on Ctrl-C)."""
    status = INTERRUPTED
    with contextlib.suppress(KeyboardInterrupt):
        status = asyncio.run(console(client, open_agent, **options))
    sys.stdout.flush()
    sys.exit(status)
