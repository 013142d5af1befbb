"""The generated client drives each example agent end to end, interrupts included, on
every transport and revision.

Matrix: agent (examples/echo, examples/mail-composer, examples/research) x revision (the
locked schemas of tests/schemas.lock.json: `legacy`, `v1`, `v1-unstable`, `v2`) x
transport (`stdio`: the client spawns the agent; `http`: the agent runs as its console
script with `--port 0` and the client connects to the URL it prints, Streamable HTTP;
`websocket`: the same HTTP projects, the client on one WebSocket at that URL).  For each cell the
agent AND its client are scaffolded with `agentgen new` (`--role agent|client
--transport T --schema S`), the example's handlers.py copied in, exactly as a user
would; each project is built once per module.  The client is the GENERATED one, used
through its Python API (`spawn_agent` / `connect_http`, the generated `AgentConnection`
with its typed methods, a subclass of the generated `handlers.Client` with the typed
`interrupt_approval` handler), imported in this process; the agents are subprocesses.
Test ids read `test_<what>[<agent>-<revision>-<transport>]`.

What each cell goes through:
- `initialize` through `negotiate` (the client offers its revision, the agent answers in
  it), `session/new`, the session's config options read (mail-composer: `tone` and
  `max_length`; the others have none) and, for mail-composer, `tone` set with
  `session/set_config_option` and seen in the next draft;
- a prompt that streams and ends `end_turn` (v2: the prompt answers on acceptance and the
  turn ends with an idle `state_update`);
- mail-composer: the approval interrupt answered by the typed `interrupt_approval`
  handler, (a) through `elicitation/create` with elicitation declared, (b) through
  `session/request_permission` when the client declares no elicitation, each approved
  (the Output says `approved: true`) and declined (the turn ends `cancelled`);
- research: `providers/list`, and a `session/cancel` mid-stream that ends the turn
  `cancelled`;
- the console client (the client project's console script, `python -m <pkg>_client`)
  once per agent and transport, a plain prompt piped on stdin;
- one agent, several revisions: mail-composer scaffolded with `--schema v1 --schema v2`
  (agent and client, the `v1+v2` cells) serves a v1 client, a v2 client and its own
  v1+v2 client, and the v1+v2 client falls back to v1 against a v1-only agent.

Left out, by what the generated revision description says (cases are parametrized only
over the revisions that have the feature, nothing is skipped at run time):
- (a) interrupt through `elicitation/create` on `legacy`: that revision has no
  `elicitation/create` (`REVISION.elicitation` is False); the client cannot declare it
  there, so the agent asks through `session/request_permission` (case (b) covers legacy).
- the third interrupt path (neither elicitation nor `session/request_permission`: the
  agent ends the turn with a message) has no cell: every locked revision has
  `session/request_permission`.
- research `providers/list` on `legacy`, `v1`, `v2`: only `v1-unstable` has provider
  methods (`REVISION.agent_capabilities.providers`).
- the console client runs on the highest revision (`v2`) only; the other revisions run
  the same console code through the API cases above.
Every frame both sides send is validated against the revision's schema
(ACP_WIRE_CHECK=1, tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import upstream_schemas
from project_support import import_from, models_once
from wait_support import Arrivals

from generator.protocol.revision import describe

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable

pytestmark = pytest.mark.slow  # 52 `agentgen new`, subprocess agents and HTTP servers

REVISIONS = {
    "legacy": "legacy/schema.json",
    "v1": "v1/schema.json",
    "v1-unstable": "v1/schema.unstable.json",
    "v2": "v2/schema.json",
}
AGENTS = ("echo", "mail-composer", "research")
TRANSPORTS = ("stdio", "http", "websocket")  # websocket: the HTTP projects, one WebSocket
PACKAGES = {"echo": "echo_agent", "mail-composer": "mail_composer", "research": "research"}
NAMES = {"echo": "echo-agent", "mail-composer": "mail-composer", "research": "research"}
TOKEN = "e2e-research-token"  # the research agent's bearer token (its manifest's `auth`)
DOC = {"brief": "Lunch on Friday at noon. The usual place.", "recipients": ["jane.doe@example.org"]}
TIMEOUT = 30.0


def _describe(revision: str) -> Any:
    """The revision description `agentgen new` writes for this schema (checked against
    the generated `_generated/revision.py` when the project is built)."""
    schema = json.loads((upstream_schemas() / REVISIONS[revision]).read_text())
    return describe(schema, None)


DESCRIBED = {rev: _describe(rev) for rev in REVISIONS}


def _cells(agents: tuple[str, ...], has: Any = None) -> list[Any]:
    """(agent, revision, transport) for the revisions whose description has `has`."""
    return [
        pytest.param(a, r, t, id=f"{a}-{r}-{t}")
        for a in agents
        for r in REVISIONS
        if has is None or has(DESCRIBED[r])
        for t in TRANSPORTS
    ]


# ---- the projects -----------------------------------------------------------------


@dataclass
class Cell:
    """One (agent, revision, transport): the scaffolded agent and client projects."""

    agent: str
    revision: str
    transport: str
    root: Path
    env: dict[str, str]
    url: str | None = None
    modules: dict[str, Any] = field(default_factory=dict)  # the client package, loaded

    @property
    def agent_pkg(self) -> str:
        return PACKAGES[self.agent]

    @property
    def client_pkg(self) -> str:
        return PACKAGES[self.agent] + "_client"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}"} if self.agent == "research" else {}


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Iterator[Any]:
    """cell(agent, revision, transport) -> Cell, scaffolded on first use (then kept for
    the module); an HTTP agent is started once per cell and stopped at the end.  A
    `websocket` cell is its `http` cell's projects, server and loaded client package."""
    from typer.testing import CliRunner

    from generator.cli import app

    base = tmp_path_factory.mktemp("e2e")
    built: dict[tuple[str, str, str], Cell] = {}
    servers: list[subprocess.Popen[str]] = []
    stack = contextlib.ExitStack()
    stack.enter_context(models_once())

    def make(agent: str, revision: str, transport: str) -> Cell:
        key = (agent, revision, transport)
        if key in built:
            return built[key]
        if transport == "websocket":  # the same HTTP projects and agent, another transport
            http = make(agent, revision, "http")
            built[key] = Cell(agent, revision, transport, http.root, http.env, http.url)
            built[key].modules = http.modules  # one client package in sys.modules for both
            return built[key]
        root = base / f"{agent}-{revision}-{transport}"
        old = os.environ.get("AGENTGEN_TEMPLATE_STORE")
        os.environ["AGENTGEN_TEMPLATE_STORE"] = str(base / "store")
        try:
            # "v1+v2": one project generated with both schemas (`--schema` twice)
            schemas = [str(shared_acp / REVISIONS[r]) for r in revision.split("+")]
            manifest = str(REPO / "examples" / agent / "agent.yaml")
            for role in ("agent", "client"):
                args = ["new", str(root / role), "-m", manifest]
                args += [a for schema in schemas for a in ("--schema", schema)]
                args += ["--role", role, "--transport", transport]
                result = CliRunner().invoke(app, args)
                assert result.exit_code == 0, result.output
        finally:
            if old is None:
                os.environ.pop("AGENTGEN_TEMPLATE_STORE", None)
            else:
                os.environ["AGENTGEN_TEMPLATE_STORE"] = old
        pkg = PACKAGES[agent]
        shutil.copy(REPO / "examples" / agent / "handlers.py", root / "agent" / pkg / "handlers.py")
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(root / "agent"), str(root / "client")]),
            "PYTHONDONTWRITEBYTECODE": "1",
            "ACP_SESSION_DB": str(root / "sessions.db"),
            "RESEARCH_AGENT_TOKEN": TOKEN,
            "RESEARCH_STEP_DELAY": "0.02",
        }
        cell = Cell(agent, revision, transport, root, env)
        if transport != "stdio":
            cell.url = _start_http(cell, servers)
        built[key] = cell
        return cell

    try:
        yield make
    finally:
        stack.close()
        for proc in servers:
            proc.terminate()
        for proc in servers:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        for cell in built.values():
            _unload(cell)


def _start_http(cell: Cell, servers: list[subprocess.Popen[str]]) -> str:
    """The agent's console script (`python -m <pkg>`, as `<name>` does) on a free port:
    the URL its first stderr line names."""
    proc = subprocess.Popen(
        [PY, "-m", cell.agent_pkg, "--port", "0"],
        env=cell.env,
        cwd=cell.root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    servers.append(proc)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    m = re.fullmatch(r"listening on (http://127\.0\.0\.1:(\d+)/acp) \(.*\)\n", line)
    assert m and m.group(2) != "0", f"first stderr line of the agent: {line!r}"
    # the rest of its stderr (logs) must not fill the pipe: drain it in the background
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    return m.group(1)


# ---- the generated client package, imported in this process ------------------------
#
# Every client project of one agent has the same package name (`mail_composer_client`...),
# so each cell's modules are swapped into sys.modules while its test runs (the runtime
# imports some modules lazily, by relative name).


def _owned(pkg: str) -> list[str]:
    return [k for k in sys.modules if k == pkg or k.startswith(pkg + ".")]


@contextlib.contextmanager
def _client_package(cell: Cell) -> Iterator[Any]:
    """The cell's client package in sys.modules: yields a namespace with its handlers,
    dispatcher, manifest models and runtime client / http_client modules."""
    pkg = cell.client_pkg
    others = {k: sys.modules.pop(k) for k in _owned(pkg)}
    sys.modules.update(cell.modules)
    where = str(cell.root / "client")
    try:
        ns = SimpleNamespace(
            # a generated project, not on pytest's pythonpath: imported by its package name
            handlers=import_from(where, f"{pkg}.handlers"),
            dispatcher=importlib.import_module(f"{pkg}._generated.dispatcher"),
            revision=importlib.import_module(f"{pkg}._generated.revision"),
            manifest_models=importlib.import_module(f"{pkg}._generated.manifest_models"),
            client=importlib.import_module(f"{pkg}._generated.runtime.client.client"),
            http_client=(
                importlib.import_module(f"{pkg}._generated.runtime.client.http_client")
                if cell.transport != "stdio"
                else None
            ),
        )
        assert ns.handlers.__file__.startswith(where), ns.handlers.__file__
        yield ns
    finally:
        mine = {k: sys.modules.pop(k) for k in _owned(pkg)}
        cell.modules.clear()  # in place: a websocket cell shares its http cell's
        cell.modules.update(mine)
        sys.modules.update(others)


def _unload(cell: Cell) -> None:
    cell.modules.clear()


def _wire(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    return dump(by_alias=True, exclude_unset=True, mode="json") if dump else obj


def _recording_client(ns: Any, answer: bool | None = True) -> Any:
    """An instance of a subclass of the generated `handlers.Client` that records the
    agent's requests and updates; its typed `interrupt_approval` (mail-composer) answers
    `approved=answer` (None: declines)."""
    mm = ns.manifest_models

    class Recording(ns.handlers.Client):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.requests: list[str] = []
            self.updates: list[dict[str, Any]] = []
            self.asked: list[tuple[Any, str]] = []
            self.arrivals = Arrivals()  # wakes on each update

        async def handle_request(self, method: str, params: Any, ctx: Any) -> Any:
            self.requests.append(method)
            return await super().handle_request(method, params, ctx)

        async def session_update(self, params: Any) -> None:
            self.updates.append(_wire(params)["update"])
            self.arrivals.arrived()

    if hasattr(ns.handlers.Client, "interrupt_approval"):

        async def interrupt_approval(self: Any, payload: Any, message: str) -> Any:
            assert isinstance(payload, mm.ApprovalPayload), type(payload)
            self.asked.append((payload, message))
            return None if answer is None else mm.ApprovalResume(approved=answer)

        Recording.interrupt_approval = interrupt_approval  # type: ignore[attr-defined]
    return Recording()


@contextlib.asynccontextmanager
async def _connect(
    cell: Cell, ns: Any, client: Any, agent: Cell | None = None
) -> AsyncIterator[Any]:
    """The generated AgentConnection of `cell`'s client to the agent of `agent` (default:
    `cell`'s own): spawned over stdio, or over HTTP to the running server."""
    proxy_cls = ns.dispatcher.AgentConnection
    target = agent or cell
    if cell.transport == "stdio":
        cm = ns.client.spawn_agent(
            client, proxy_cls, PY, "-m", target.agent_pkg, env=target.env, grace=3.0
        )
    else:
        assert target.url is not None
        cm = ns.http_client.connect_http(
            client,
            proxy_cls,
            target.url,
            headers=target.headers,
            websocket=cell.transport == "websocket",
        )
    async with cm as conn:
        assert isinstance(conn, proxy_cls)
        yield conn


async def _session(agent: Any, client: Any, **negotiate: Any) -> tuple[Any, Any, str]:
    """negotiate + session/new: (initialize result, session/new result, session id)."""
    init = await asyncio.wait_for(agent.negotiate(client, **negotiate), TIMEOUT)
    new = await asyncio.wait_for(agent.session_new({"cwd": "/tmp", "mcpServers": []}), TIMEOUT)
    return init, new, new.session_id.root


async def _turn(agent: Any, client: Any, sid: str, blocks: list[dict[str, Any]]) -> str:
    """One prompt until its turn ends: the stop reason (v1: the prompt's answer; v2: the
    idle `state_update` after the answer on acceptance)."""
    v2 = client.revision.turn.lifecycle == "v2"
    ended = client.expect_turn_end(sid) if v2 else None
    resp = await asyncio.wait_for(
        agent.session_prompt({"sessionId": sid, "prompt": blocks}), TIMEOUT
    )
    if ended is None:
        return str(_wire(resp)["stopReason"])
    assert _wire(resp).get("messageId"), _wire(resp)
    idle = await asyncio.wait_for(ended, TIMEOUT)
    assert client.turn_error(idle) is None, idle
    return str(idle["stopReason"])


def _texts(client: Any) -> list[str]:
    return [
        u["content"]["text"]
        for u in client.updates
        if u.get("sessionUpdate") == "agent_message_chunk" and u["content"]["type"] == "text"
    ]


def _outputs(client: Any) -> list[Any]:
    """The structured Outputs the agent streamed (resource chunks holding JSON)."""
    return [
        json.loads(u["content"]["resource"]["text"])
        for u in client.updates
        if u.get("sessionUpdate") == "agent_message_chunk" and u["content"]["type"] == "resource"
    ]


def _options(result: Any, revision: Any) -> dict[str, dict[str, Any]]:
    """The config options of a session/new or set_config_option result, by id."""
    raw = _wire(result).get("configOptions") or []
    return {o[revision.config_option.id]: o for o in raw}


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 120))


# ---- every agent: initialize, session/new, config options, a streamed prompt ---------


@pytest.mark.parametrize(("agent", "revision", "transport"), _cells(AGENTS))
def test_initialize_session_and_prompt(
    cells: Any, agent: str, revision: str, transport: str
) -> None:
    """negotiate answers in the client's (only) revision with the agent's identity;
    session/new gives a session and its config options; a prompt streams and ends
    end_turn (mail-composer's prompt is its JSON input; its interrupt is answered)."""
    cell = cells(agent, revision, transport)
    with _client_package(cell) as ns:
        described = DESCRIBED[revision]
        generated = ns.revision.REVISION
        assert generated.protocol_version == described.protocol_version
        assert (generated.elicitation, generated.request_permission) == (
            described.elicitation,
            described.request_permission,
        )
        assert generated.agent_capabilities.providers == described.agent_capabilities.providers
        client = _recording_client(ns)

        async def main() -> None:
            async with _connect(cell, ns, client) as conn:
                init, new, sid = await _session(conn, client)
                assert type(init).__name__ == "InitializeResponse"
                assert _wire(init)["protocolVersion"] == generated.protocol_version
                info = _wire(init).get(generated.init.response_info) or {}
                assert info.get("name") == NAMES[agent]
                assert type(new).__name__ == "NewSessionResponse"
                options = _options(new, generated)
                if agent == "mail-composer":
                    # `max_length` is an integer: listed where SessionConfigOption has an
                    # open kind (the v2 lifecycle's revision); v1 and legacy have only select
                    # and boolean, so there it is set but not listed
                    v2 = generated.turn.lifecycle == "v2"
                    assert set(options) == ({"tone", "max_length"} if v2 else {"tone"})
                    assert options["tone"]["currentValue"] == "friendly"
                    prompt = [{"type": "text", "text": json.dumps(DOC)}]
                elif agent == "echo":
                    assert options == {}
                    prompt = [{"type": "text", "text": "hello"}, {"type": "text", "text": "world"}]
                else:
                    assert options == {}
                    prompt = [{"type": "text", "text": "Why is the sky blue?"}]
                stop = await _turn(conn, client, sid, prompt)
                assert stop == "end_turn", client.updates
                texts = _texts(client)
                if agent == "echo":
                    assert texts == ["hello", "world"]
                elif agent == "research":
                    joined = "".join(texts)
                    assert joined.startswith(
                        "Using openai at https://api.openai.com/v1/chat/completions\n"
                    ), joined
                    assert "Question: Why is the sky blue?\n" in joined
                    assert joined.endswith("Step 4: write the answer with citations.\n")
                else:
                    assert texts[0].startswith("Hi Jane Doe,"), texts
                    assert [o["approved"] for o in _outputs(client)] == [True]

        _run(main())


# ---- mail-composer: config option set, the interrupt on both paths -------------------


@pytest.mark.parametrize(("agent", "revision", "transport"), _cells(("mail-composer",)))
def test_set_config_option_changes_the_next_draft(
    cells: Any, agent: str, revision: str, transport: str
) -> None:
    """session/set_config_option sets `tone` to formal; the result lists it, and the next
    draft greets formally."""
    cell = cells(agent, revision, transport)
    with _client_package(cell) as ns:
        client = _recording_client(ns)
        rev = ns.revision.REVISION

        async def main() -> None:
            async with _connect(cell, ns, client) as conn:
                _, _, sid = await _session(conn, client)
                params: dict[str, Any] = {"sessionId": sid, "configId": "tone", "value": "formal"}
                if rev.protocol_version >= 2:
                    params["type"] = "id"  # v2 tags the value's kind: a select's value id
                changed = await asyncio.wait_for(conn.session_set_config_option(params), TIMEOUT)
                assert type(changed).__name__ == "SetSessionConfigOptionResponse"
                assert _options(changed, rev)["tone"]["currentValue"] == "formal"
                stop = await _turn(conn, client, sid, [{"type": "text", "text": json.dumps(DOC)}])
                assert stop == "end_turn"
                assert _texts(client)[0].startswith("Dear Jane Doe,"), _texts(client)

        _run(main())


def _interrupt_case(cell: Cell, *, declare: bool, answer: bool | None) -> tuple[Any, str]:
    """Run the composer once with the typed handler answering `answer`; the client declares
    elicitation (the generated default) or nothing.  (client, stop reason)."""
    with _client_package(cell) as ns:
        client = _recording_client(ns, answer)

        async def main() -> str:
            async with _connect(cell, ns, client) as conn:
                _, _, sid = await _session(
                    conn, client, **({} if declare else {"capabilities": {}})
                )
                return await _turn(conn, client, sid, [{"type": "text", "text": json.dumps(DOC)}])

        stop = _run(main())
        asked = [(type(p).__name__, p.subject, p.body[:12], m) for p, m in client.asked]
        assert asked == [
            (
                "ApprovalPayload",
                "Lunch on Friday at noon",
                "Hi Jane Doe,",
                "Approve the draft before it is final.",
            )
        ], asked
        return client, stop


@pytest.mark.parametrize(
    ("agent", "revision", "transport"), _cells(("mail-composer",), lambda r: r.elicitation)
)
@pytest.mark.parametrize("answer", [True, None], ids=["approved", "declined"])
def test_interrupt_through_elicitation(
    cells: Any, agent: str, revision: str, transport: str, answer: bool | None
) -> None:
    """The client declares form elicitation (as generated): the approval interrupt comes
    as elicitation/create to the typed `interrupt_approval`; approved, the turn ends
    end_turn with an approved Output; declined, it ends cancelled."""
    client, stop = _interrupt_case(cells(agent, revision, transport), declare=True, answer=answer)
    assert client.requests == ["elicitation/create"]
    if answer:
        assert stop == "end_turn"
        assert [o["approved"] for o in _outputs(client)] == [True]
    else:
        assert stop == "cancelled"
        assert _outputs(client) == []


@pytest.mark.parametrize(
    ("agent", "revision", "transport"),
    _cells(("mail-composer",), lambda r: r.request_permission),
)
@pytest.mark.parametrize("answer", [True, None], ids=["approved", "declined"])
def test_interrupt_through_request_permission(
    cells: Any, agent: str, revision: str, transport: str, answer: bool | None
) -> None:
    """The client declares no elicitation: the agent asks with session/request_permission,
    which the generated client routes to the same typed `interrupt_approval`; its answer
    picks the allow or reject option."""
    client, stop = _interrupt_case(cells(agent, revision, transport), declare=False, answer=answer)
    assert client.requests == ["session/request_permission"]
    if answer:
        assert stop == "end_turn"
        assert [o["approved"] for o in _outputs(client)] == [True]
    else:
        assert stop == "cancelled"
        assert _outputs(client) == []


# ---- research: providers, cancel ---------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "revision", "transport"),
    _cells(("research",), lambda r: r.agent_capabilities.providers is not None),
)
def test_providers_list(cells: Any, agent: str, revision: str, transport: str) -> None:
    """providers/list names the manifest's `main` provider with its default routing."""
    cell = cells(agent, revision, transport)
    with _client_package(cell) as ns:
        client = _recording_client(ns)

        async def main() -> None:
            async with _connect(cell, ns, client) as conn:
                await _session(conn, client)
                listed = await asyncio.wait_for(conn.providers_list({}), TIMEOUT)
                assert type(listed).__name__ == "ListProvidersResponse"
                (main_,) = _wire(listed)["providers"]
                assert main_["providerId"] == "main", main_
                assert main_["required"] is True
                assert sorted(main_["supported"]) == ["anthropic", "openai"]
                assert main_["current"]["apiType"] == "openai"
                assert main_["current"]["baseUrl"] == "https://api.openai.com/v1"

        _run(main())


@pytest.mark.parametrize(("agent", "revision", "transport"), _cells(("research",)))
def test_cancel_mid_stream(cells: Any, agent: str, revision: str, transport: str) -> None:
    """session/cancel after the first chunk ends the research turn `cancelled`, before its
    last step."""
    cell = cells(agent, revision, transport)
    # a spawned agent takes its steps slowly enough that the cancel always lands before the
    # last (the cells' 0.02 s a step: five steps end within the cancel's round trip on a
    # loaded machine); an HTTP cell's server runs as the cells started it
    slow = replace(cell, env={**cell.env, "RESEARCH_STEP_DELAY": "0.5"})
    with _client_package(cell) as ns:
        client = _recording_client(ns)

        async def main() -> str:
            async with _connect(cell, ns, client, slow) as conn:
                _, _, sid = await _session(conn, client)

                async def cancel_after_first_chunk() -> None:
                    await client.arrivals.until("the first chunk", lambda: _texts(client), 60)
                    await conn.session_cancel({"sessionId": sid})

                canceller = asyncio.ensure_future(cancel_after_first_chunk())
                try:
                    return await _turn(conn, client, sid, [{"type": "text", "text": "Why?"}])
                finally:
                    canceller.cancel()

        assert _run(main()) == "cancelled"
        assert not "".join(_texts(client)).endswith("citations.\n")


# ---- the console client ------------------------------------------------------------


CONSOLE_PROMPT = {"echo": "hello there", "mail-composer": "hello there", "research": "Why?"}


@pytest.mark.parametrize(
    ("agent", "revision", "transport"),
    [pytest.param(a, "v2", t, id=f"{a}-v2-{t}") for a in AGENTS for t in TRANSPORTS],
)
def test_console_client(cells: Any, agent: str, revision: str, transport: str) -> None:
    """The client project's console script, a plain prompt piped on stdin: the answer on
    stdout, `[turn: end_turn]` on stderr, exit status 0.  mail-composer takes JSON: plain
    text ends the turn normally with a message saying what it expects."""
    cell = cells(agent, revision, transport)
    cmd = [PY, "-m", cell.client_pkg]
    if transport == "stdio":
        cmd += ["--", PY, "-m", cell.agent_pkg]
    else:
        cmd += ["--url", cell.url or "", *(["--websocket"] if transport == "websocket" else [])]
    done = subprocess.run(
        cmd,
        input=CONSOLE_PROMPT[agent] + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=cell.env,
        cwd=cell.root,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines() == ["[turn: end_turn]"], done.stderr
    if agent == "echo":
        assert done.stdout == "hello there\n"
    elif agent == "research":
        assert done.stdout.startswith(
            "Using openai at https://api.openai.com/v1/chat/completions\n"
        )
        assert done.stdout.endswith("Step 4: write the answer with citations.\n\n")
    else:
        assert done.stdout.startswith("This agent takes JSON input (the prompt is not JSON)")
        assert '"required":["brief","recipients"]' in done.stdout, done.stdout


# ---- one agent, several revisions ----------------------------------------------------

ELICIT, PERMISSION = "elicitation/create", "session/request_permission"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("client_rev", "agent_rev", "spoken", "asked_by"),
    [
        ("v1", "v1+v2", 1, ELICIT),  # the agent answers a v1 client in v1
        ("v2", "v1+v2", 2, ELICIT),
        ("v1+v2", "v1+v2", 2, ELICIT),  # the client offers its highest revision
        # a v1 agent answers the v2 offer with its own latest, v1, and the client follows;
        # the v2 body also declared the capabilities under v1's name, so the v1 agent
        # knows the client answers elicitation/create
        ("v1+v2", "v1", 1, ELICIT),
    ],
    ids=["v1-client", "v2-client", "v1+v2-client", "v1+v2-client-v1-agent"],
)
def test_several_revisions(
    cells: Any, client_rev: str, agent_rev: str, spoken: int, asked_by: str, transport: str
) -> None:
    """mail-composer scaffolded with `--schema v1 --schema v2` (agent and client): each
    client speaks the revision negotiated at initialize, with the same handler code; the
    composer's config options use that revision's wire names and its interrupt is
    answered through elicitation/create by the typed handler."""
    client_cell = cells("mail-composer", client_rev, transport)
    agent_cell = cells("mail-composer", agent_rev, transport)
    with _client_package(client_cell) as ns:
        client = _recording_client(ns)

        async def main() -> str:
            async with _connect(client_cell, ns, client, agent_cell) as conn:
                init, new, sid = await _session(conn, client)
                assert _wire(init)["protocolVersion"] == spoken
                assert client.revision.protocol_version == spoken
                assert conn.revision is client.revision
                assert _options(new, client.revision)["tone"]["currentValue"] == "friendly"
                return await _turn(conn, client, sid, [{"type": "text", "text": json.dumps(DOC)}])

        assert _run(main()) == "end_turn"
        assert client.requests == [asked_by]
        assert [o["approved"] for o in _outputs(client)] == [True]
