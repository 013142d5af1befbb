"""The generated client against real agent subprocesses: agent errors as one line,
a refused `session/new` ends the client within seconds (even when the agent leaves a
child holding its stdout), transient errors retried, an agent that exits fails every
pending request at once; the capabilities it declares."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from project_support import import_from, write_project

PY = sys.executable

AGENT_HANDLERS = """
from __future__ import annotations

import asyncio
import os
from typing import Any

from ._generated.dispatcher import AgentBase
from ._generated.runtime.agent.agent import Turn
from ._generated.runtime.wire.errors import AgentError, RpcError


class QuotaExceeded(AgentError):
    code = 1001
    name = "QuotaExceeded"
    transient = True


ATTEMPTS = {"n": 0}


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> Any:
        text = "".join(b.get("text", "") for b in input if b.get("type") == "text")
        word, _, rest = text.partition(" ")
        if word == "quota":
            raise QuotaExceeded("the daily quota is used up\\nretry later")
        if word == "plain":
            raise RpcError(-32603, "something broke")
        if word == "flaky":  # fails transiently `rest` times, then answers
            ATTEMPTS["n"] += 1
            if ATTEMPTS["n"] <= int(rest):
                raise QuotaExceeded(f"attempt {ATTEMPTS['n']} failed")
            await turn.send_text(f"ok after {ATTEMPTS['n']}")
            return None
        if word == "die":
            await turn.send_text("dying")
            await asyncio.sleep(0.2)
            os._exit(3)
        await turn.send_text(text)
        return None


async def _refuse(self: Any, params: Any) -> Any:
    raise RpcError(-32000, "Authentication required")


if os.environ.get("AGENT_REFUSE_SESSIONS"):
    Agent.session_new = _refuse  # type: ignore[method-assign]
"""

# a child that inherits the agent's stdout (the protocol pipe) and outlives the agent,
# as `npx some-agent` leaves one: the client must not wait for it
AGENT_MAIN = """
import os
import subprocess
import sys

pidfile = os.environ.get("AGENT_GRANDCHILD_PIDFILE")
if pidfile:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(pidfile, "w") as fh:
        fh.write(str(child.pid))

from ._generated import run_agent
from .handlers import Agent

run_agent(Agent, None)
"""

CLIENT_HANDLERS = """
from __future__ import annotations

import sys
from typing import Any

from ._generated.dispatcher import ClientBase


class Client(ClientBase):
    async def session_update(self, params: Any) -> None:
        update = params.model_dump(by_alias=True, mode="json")["update"]
        content = update.get("content") or {}
        if update.get("sessionUpdate") == "agent_message_chunk" and content.get("type") == "text":
            sys.stdout.write(content["text"])
            sys.stdout.flush()
"""

CLIENT_MAIN = """
from ._generated import run_client
from .handlers import Client

run_client(Client, None)
"""

MANIFEST: dict[str, Any] = {
    "name": "console-agent",
    "version": "0.1.0",
    "interrupts": [
        {
            "name": "approval",
            "description": "approve the action",
            "payload": {"schema": {"type": "object", "properties": {"action": {"type": "string"}}}},
            "resume": {
                "schema": {
                    "type": "object",
                    "required": ["approved"],
                    "properties": {"approved": {"type": "boolean"}},
                }
            },
        }
    ],
}


def _render(
    tmp: Path,
    shared_acp: Path,
    package: str,
    role: str,
    schema_file: str = "v1/schema.unstable.json",
) -> None:
    schema = json.loads((shared_acp / schema_file).read_text())
    handlers, main = (
        (AGENT_HANDLERS, AGENT_MAIN) if role == "agent" else (CLIENT_HANDLERS, CLIENT_MAIN)
    )
    write_project(
        tmp, package, schema=schema, manifest=MANIFEST, role=role, handlers=handlers, main=main
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Path:
    """A generated agent (`cagent`) and a generated client (`cclient`), side by side."""
    root = tmp_path_factory.mktemp("console")
    _render(root, shared_acp, "cagent", "agent")
    _render(root, shared_acp, "cclient", "client")
    return root


def _console(
    root: Path, prompts: str, *options: str, timeout: float = 30, prefix: str = "c", **env: str
) -> tuple[int, str, str, float]:
    """Run the client's console script against the agent; (status, stdout, stderr, s)."""
    start = time.monotonic()
    done = subprocess.run(
        [PY, "-m", f"{prefix}client", *options, "--", PY, "-m", f"{prefix}agent"],
        input=prompts,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "PYTHONPATH": str(root), **env},
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - start


def test_agent_errors_are_one_line_with_code_name_and_transient(built: Path) -> None:
    status, out, err, _ = _console(built, "hello\nquota\nnever sent\n", "--retries", "0")
    assert status == 1, err
    assert out.startswith("hello")
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "error 1001 QuotaExceeded (transient): the daily quota is used up retry later"
    )
    status, _, err, _ = _console(built, "plain\n")
    assert status == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == "error -32603: something broke"


def test_a_refused_session_new_ends_the_client_within_seconds(built: Path, tmp_path: Path) -> None:
    """As codex-acp without credentials: `session/new` answers an auth error. The agent
    also leaves a child holding its stdout (as `npx` does): the client prints one line,
    exits 1 within seconds, and ends that child too."""
    pidfile = tmp_path / "grandchild.pid"
    try:
        status, _, err, took = _console(
            built,
            "hello\n",
            AGENT_REFUSE_SESSIONS="1",
            AGENT_GRANDCHILD_PIDFILE=str(pidfile),
        )
        assert status == 1, err
        assert err.strip().splitlines() == ["error -32000: Authentication required"]
        assert took < 10, took
        pid = int(pidfile.read_text())
        for _ in range(50):
            if not _alive(pid):
                break
            time.sleep(0.1)  # a poll: another process, not our child (no wait() on it)
        assert not _alive(pid), "the agent's child was left running"
    finally:
        if pidfile.exists() and _alive(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its new parent) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_transient_errors_are_retried_then_reported(built: Path) -> None:
    status, out, err, _ = _console(built, "flaky 2\n", "--retry-delay", "0.01")
    assert status == 0, err
    assert out.strip() == "ok after 3"
    retries = [line for line in err.splitlines() if "-- retry" in line]
    assert retries == [
        "error 1001 QuotaExceeded (transient): attempt 1 failed -- retry 1 of 3 in 0.01s",
        "error 1001 QuotaExceeded (transient): attempt 2 failed -- retry 2 of 3 in 0.02s",
    ]
    status, _, err, _ = _console(built, "flaky 9\n", "--retries", "2", "--retry-delay", "0.01")
    assert status == 1
    assert err.strip().splitlines()[-1] == "error 1001 QuotaExceeded (transient): attempt 3 failed"
    # a non-transient error is not retried
    status, _, err, _ = _console(built, "plain\n", "--retry-delay", "0.01")
    assert status == 1 and "-- retry" not in err


def test_an_agent_that_exits_ends_the_client_with_its_status(built: Path) -> None:
    status, out, err, took = _console(built, "die\nnever sent\n")
    assert status == 1, err
    assert out == "dying"
    assert err.strip().splitlines()[-1] == "error: the agent exited (exit status 3)"
    assert took < 10, took


def test_pending_requests_fail_at_once_when_the_agent_exits(built: Path) -> None:
    """Library use: `spawn_agent` fails every request still waiting with `AgentExited`."""
    import_from(built, "cclient")  # a generated project, not on pytest's pythonpath
    from cclient._generated.dispatcher import AgentConnection
    from cclient._generated.runtime.client.client import spawn_agent
    from cclient._generated.runtime.wire.errors import AgentExited
    from cclient.handlers import Client

    async def main() -> None:
        client = Client()
        env = {**os.environ, "PYTHONPATH": str(built)}
        async with spawn_agent(client, AgentConnection, PY, "-m", "cagent", env=env) as agent:
            init = await agent.negotiate(client)
            assert init.protocol_version.root == 1
            new = await agent.session_new({"cwd": "/tmp", "mcpServers": []})
            sid = new.session_id.root

            def prompt(text: str) -> dict[str, Any]:
                return {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}

            slow = asyncio.ensure_future(agent.session_prompt(prompt("x" * 10)))
            dying = asyncio.ensure_future(agent.session_prompt(prompt("die")))
            for fut in (dying,):
                with pytest.raises(AgentExited) as exc:
                    await asyncio.wait_for(fut, 10)
                assert exc.value.status == 3
            await slow  # answered before the agent died
            with pytest.raises(AgentExited):  # and nothing more is sent to it
                await agent.session_prompt(prompt("again"))

    asyncio.run(asyncio.wait_for(main(), 30))


def test_the_client_declares_elicitation_and_answers_interrupts(built: Path) -> None:
    """`negotiate` declares elicitation (form) on a revision that has it; the interrupt
    reaches the typed `interrupt_approval` handler; with none, stdin not being a
    terminal, it is declined with a line on stderr."""
    import_from(built, "cclient")  # a generated project, not on pytest's pythonpath
    from cclient._generated.dispatcher import AgentConnection, ClientBase

    assert AgentConnection.REVISIONS[-1].elicitation
    client = ClientBase()
    caps = client.declared_capabilities(AgentConnection.REVISIONS[-1])
    assert caps == {"elicitation": {"form": {}}}
    assert ClientBase._acp_interrupts == {"approval": "interrupt_approval"}


class _Tty:
    """Typed-in lines, as a terminal would give them."""

    def __init__(self, *lines: str) -> None:
        self.lines = [line + "\n" for line in lines]

    def isatty(self) -> bool:
        return True

    def readline(self) -> str:
        return self.lines.pop(0) if self.lines else ""


def test_questions_are_asked_on_a_terminal(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On a terminal each field of the resume schema is asked and parsed (a wrong value
    is asked again); an empty required answer or the end of input declines; a permission
    request lists its options."""
    import_from(built, "cclient")  # a generated project, not on pytest's pythonpath
    from cclient._generated.runtime.client.prompts import Terminal, ask_choice, ask_form

    schema = {
        "type": "object",
        "required": ["approved"],
        "properties": {
            "approved": {"type": "boolean"},
            "tone": {"enum": ["formal", "terse"]},
            "count": {"type": "integer"},
        },
    }

    async def main() -> None:
        got = await ask_form(Terminal(_Tty("maybe", "y", "loud", "terse", "")), "ok?", schema)  # type: ignore[arg-type]
        assert got == {"approved": True, "tone": "terse"}
        assert await ask_form(Terminal(_Tty("")), "ok?", schema) is None  # type: ignore[arg-type]
        assert await ask_form(Terminal(_Tty()), "ok?", schema) is None  # type: ignore[arg-type]
        options = [
            {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
            {"optionId": "no", "name": "Reject", "kind": "reject_once"},
        ]
        assert await ask_choice(Terminal(_Tty("7", "1")), "run ls", options) == "yes"  # type: ignore[arg-type]
        assert await ask_choice(Terminal(_Tty("")), "run ls", options) == "no"  # type: ignore[arg-type]

    asyncio.run(main())
    err = capsys.readouterr().err
    assert "the agent asks: ok?" in err and "expected y/n" in err and "1. Allow" in err


def test_on_v2_the_console_waits_for_the_turn_and_reports_its_error(
    tmp_path: Path, shared_acp: Path
) -> None:
    """v2: `session/prompt` answers on acceptance; the console waits for the turn's idle
    `state_update` (so the answer is printed before stdin's end closes the agent), and an
    error the turn ended with is the same one line, retried when transient."""
    _render(tmp_path, shared_acp, "v2agent", "agent", "v2/schema.json")
    _render(tmp_path, shared_acp, "v2client", "client", "v2/schema.json")
    status, out, err, _ = _console(
        tmp_path, "hello\nquota\n", "--retries", "1", "--retry-delay", "0.01", prefix="v2"
    )
    assert status == 1, err
    assert out.startswith("hello")
    lines = err.strip().splitlines()
    assert lines[0] == "[turn: end_turn]"
    assert lines[-1] == (
        "error 1001 QuotaExceeded (transient): the daily quota is used up retry later"
    )
    assert sum("-- retry 1 of 1" in line for line in lines) == 1


def test_over_http_errors_are_one_line_and_a_lost_connection_ends_the_client(
    tmp_path: Path, shared_acp: Path
) -> None:
    """The HTTP console client: the agent's error is the same one line; when the agent's
    process dies mid-turn, the pending prompt fails once the stream cannot be re-opened
    and the client says the connection was lost (exit 1), no hang."""
    from hardening_support import build, free_port, start_http

    env = build(tmp_path, shared_acp, "hagent", manifest=MANIFEST, handlers=AGENT_HANDLERS)
    write_project(
        tmp_path,
        "hclient",
        schema=json.loads((shared_acp / "v1" / "schema.unstable.json").read_text()),
        manifest=MANIFEST,
        role="client",
        transport="http",
        handlers=CLIENT_HANDLERS,
        main=CLIENT_MAIN.replace(
            "run_client(Client, None)", 'run_client(Client, None, transport="http")'
        ),
    )
    port = free_port()
    agent = start_http(env, "hagent", port)
    try:

        def client(prompts: str) -> subprocess.CompletedProcess[str]:
            url = f"http://127.0.0.1:{port}/acp"
            return subprocess.run(
                [PY, "-m", "hclient", "--url", url, "--retries", "0"],
                input=prompts,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                env=env,
            )

        done = client("hello\nquota\n")
        assert done.returncode == 1, done.stderr
        assert done.stdout.startswith("hello") and "Traceback" not in done.stderr
        assert done.stderr.strip().splitlines()[-1] == (
            "error 1001 QuotaExceeded (transient): the daily quota is used up retry later"
        )
        start = time.monotonic()
        done = client("die\n")
        assert done.returncode == 1, done.stderr
        assert done.stderr.strip().splitlines()[-1] == "error: the connection to the agent was lost"
        assert time.monotonic() - start < 30
    finally:
        agent.kill()
        agent.wait()


def test_fs_and_terminal_are_declared_only_where_the_revision_has_them(
    tmp_path: Path, shared_acp: Path
) -> None:
    """The console client serves fs and terminals: it declares them on v1 (the names
    `fs.readTextFile`, `fs.writeTextFile`, `terminal`), never on v2 (no such methods), and
    nothing of them when --no-fs / --no-terminal (serve_fs / serve_terminal off)."""
    _render(tmp_path, shared_acp, "capv1", "client")
    _render(tmp_path, shared_acp, "capv2", "client", "v2/schema.json")
    import_from(tmp_path, "capv1")  # generated projects, not on pytest's pythonpath
    import_from(tmp_path, "capv2")
    from capv1._generated.dispatcher import AgentConnection as V1
    from capv1._generated.dispatcher import ClientBase as C1
    from capv2._generated.dispatcher import AgentConnection as V2
    from capv2._generated.dispatcher import ClientBase as C2

    v1, v2 = C1(), C2()
    for client in (v1, v2):
        client.serve_fs = client.serve_terminal = True
    caps = v1.declared_capabilities(V1.REVISIONS[-1])
    assert caps["fs"] == {"readTextFile": True, "writeTextFile": True}
    assert caps["terminal"] is True
    caps = v2.declared_capabilities(V2.REVISIONS[-1])
    assert "fs" not in caps and "terminal" not in caps
    v1.serve_fs = v1.serve_terminal = False
    assert v1.declared_capabilities(V1.REVISIONS[-1]) == {"elicitation": {"form": {}}}


@pytest.mark.parametrize("rev", ["v1", "v2"])
def test_set_sends_the_value_shape_of_the_revision(rev: str, shared_acp: Path) -> None:
    """`--set` / `--mode`: each value as the revision's session/set_config_option request
    takes it (v2 tags a select's value `"type": "id"`; v1 sends it bare), checked against
    the schema itself (the tags come from it: `ConfigOptionShape.value_tags`)."""
    import jsonschema
    from runtime.console.console import _set_value

    from generator.protocol.revision import describe

    schema = json.loads((shared_acp / rev / "schema.json").read_text())
    described = describe(schema)
    request = {**schema["$defs"]["SetSessionConfigOptionRequest"], "$defs": schema["$defs"]}
    select = {"type": "select", "id": "model"}
    boolean = {"type": "boolean", "id": "verbose"}
    for option, value in ((select, "large"), (boolean, "yes")):
        params = _set_value("sess_1", option["id"], value, option, described)
        jsonschema.validate(params, request)  # raises with the schema's reason
    tagged = _set_value("sess_1", "model", "large", select, described)
    assert ("type" in tagged) == (rev == "v2"), tagged


def _console_on(built: Path, monkeypatch: pytest.MonkeyPatch, stream: Any) -> int:
    """The generated client's console on `stream` (a `_Tty` or a pipe) against `cagent`."""
    import_from(built, "cclient")
    from cclient._generated.dispatcher import AgentConnection
    from cclient._generated.runtime.client.client import spawn_agent
    from cclient._generated.runtime.client.prompts import Terminal
    from cclient._generated.runtime.console.console import console
    from cclient.handlers import Client

    monkeypatch.setenv("PYTHONPATH", str(built))
    client = Client()

    async def main() -> int:
        return await console(
            client,
            lambda: spawn_agent(client, AgentConnection, PY, "-m", "cagent", grace=3.0),
            terminal=Terminal(stream),
            retries=0,
        )

    return asyncio.run(main())


def test_on_a_terminal_a_turn_error_is_said_and_the_session_goes_on(
    built: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal the console outlives a prompt the agent answers with an error (said in
    one line; exit status 1 at the end); piped, the first error ends it (the tests above)."""
    status = _console_on(built, monkeypatch, _Tty("plain", "hello again"))
    out, err = capsys.readouterr()
    assert status == 1, err
    assert "something broke" in err
    assert "hello again" in out
    # issue 29 item 7: a banner naming the agent, then a marker before each prompt line
    assert err.startswith("connected to console-agent 0.1.0 (ACP protocol 1), session "), err
    assert "Ctrl-D quits" in err.splitlines()[1]
    assert err.count("> ") == 3, err  # two prompts and the end of input


def test_piped_the_console_prints_no_banner_and_no_marker(
    built: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    assert _console_on(built, monkeypatch, io.StringIO("hello\n")) == 0
    out, err = capsys.readouterr()
    assert out.startswith("hello") and err == "[turn: end_turn]\n", err


def test_a_command_that_serves_http_is_named_at_once(
    built: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29 item 7: `-- COMMAND` that starts an HTTP agent (it says `listening on URL`
    on stderr and never answers on stdout): the client says so and which --url to use
    within seconds, not after the whole connect timeout; the agent's stderr still shows."""
    import io

    import_from(built, "cclient")
    from cclient._generated.dispatcher import AgentConnection
    from cclient._generated.runtime.client.client import spawn_agent
    from cclient._generated.runtime.client.prompts import Terminal
    from cclient._generated.runtime.console.console import console
    from cclient.handlers import Client

    server = (
        "import sys, time\n"
        "sys.stderr.write('starting\\n'); sys.stderr.flush(); time.sleep(0.3)\n"
        "sys.stderr.write('listening on http://127.0.0.1:8123/acp (h2c, HTTP/1.1)\\n')\n"
        "sys.stderr.flush(); time.sleep(60)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(built))
    client = Client()

    async def main() -> int:
        return await console(
            client,
            lambda: spawn_agent(client, AgentConnection, PY, "-c", server, grace=0.5),
            terminal=Terminal(io.StringIO("hello\n")),
            retries=0,
            connect_timeout=30,
        )

    start = time.monotonic()
    assert asyncio.run(main()) == 1
    took = time.monotonic() - start
    err = capsys.readouterr().err
    assert took < 10, took
    assert "starting\n" in err and "listening on http://127.0.0.1:8123/acp" in err
    assert (
        'serves HTTP, not stdio (it says "listening on http://127.0.0.1:8123/acp"): '
        "connect to it with --url http://127.0.0.1:8123/acp"
    ) in err, err


class _Piped:
    """A text stream that is not a terminal (a pipe, a file), collecting what is written."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def text(self) -> str:
        return "".join(self.parts)


def _plan(*statuses: str) -> dict[str, Any]:
    names = ("Read app.py", "Edit app.py", "Check app.py")
    entries = [
        {"content": n, "priority": "medium", "status": s}
        for n, s in zip(names, statuses, strict=True)
    ]
    return {"sessionUpdate": "plan", "entries": entries}


def test_piped_plan_updates_show_what_changed() -> None:
    """Issue 29, item 11: piped, each plan update reprinted the whole checklist (three
    updates of a three-entry plan: twelve lines). The first plan is shown whole; an update
    of the same entries shows the entries whose status changed; a new plan, whole."""
    from runtime.client.client_tools import Renderer

    info = _Piped()
    r = Renderer(out=_Piped(), info=info)
    r.render(_plan("pending", "pending", "pending"))
    r.render(_plan("completed", "in_progress", "pending"))
    r.render(_plan("completed", "completed", "completed"))
    r.render({"sessionUpdate": "plan", "entries": [{"content": "Undo", "status": "pending"}]})
    assert info.text().splitlines() == [
        "plan",
        "  [ ] Read app.py",
        "  [ ] Edit app.py",
        "  [ ] Check app.py",
        "plan 1/3: [x] Read app.py",
        "plan 2/3: [~] Edit app.py",
        "plan 2/3: [x] Edit app.py",
        "plan 3/3: [x] Check app.py",
        "plan",
        "  [ ] Undo",
    ]


def test_an_info_line_after_unfinished_message_text_starts_its_own_line() -> None:
    """Issue 29, item 11: on one screen (stdout and stderr the same terminal or file) the
    session title was glued to the message text (`...pydantic-acptitle: ...`)."""
    from runtime.client.client_tools import Renderer

    screen = _Piped()
    r = Renderer(out=screen, info=screen)
    message = {"type": "text", "text": "built with pydantic-acp"}
    r.render({"sessionUpdate": "agent_message_chunk", "content": message})
    r.render({"sessionUpdate": "session_info_update", "title": "Greeting"})
    assert screen.text() == "built with pydantic-acp\ntitle: Greeting\n"
    # two streams that go to different places: stdout keeps the agent's text as sent
    out, info = _Piped(), _Piped()
    r = Renderer(out=out, info=info)
    r.render({"sessionUpdate": "agent_message_chunk", "content": message})
    r.render({"sessionUpdate": "session_info_update", "title": "Greeting"})
    assert out.text() == "built with pydantic-acp" and info.text() == "title: Greeting\n"


def test_stdout_and_stderr_on_one_file_are_one_stream(tmp_path: Path) -> None:
    """`client > log 2>&1`: the same file behind two descriptors counts as one screen."""
    from runtime.client.client_tools import Renderer

    log = tmp_path / "log"
    with log.open("w") as out, open(os.dup(out.fileno()), "w") as info:
        r = Renderer(out=out, info=info)
        message = {"type": "text", "text": "done"}
        r.render({"sessionUpdate": "agent_message_chunk", "content": message})
        r.render({"sessionUpdate": "session_info_update", "title": "T"})
    assert log.read_text().splitlines() == ["done", "title: T"]
