"""`agentgen conform`: judge an ACP agent (or client) against the protocol's requirements.

catalogue.py     the requirements as data (id, tier, capability gate computed from the
                 revision description, text, citation); `agentgen conform list`
verdict.py       tiers, statuses, outcomes, the verdict rule (the official kit's)
transcript.py    the one raw transcript type: every frame as bytes, direction, time
schema_link.py   the one door to what the kit shares with the runtime: the revision
                 description and the wire check (wirecheck.py over the revision's models)
stdio_peer.py    a peer over stdio (a fresh process per check)
conversation.py  the kit's side of a connection, on raw frames (ids, answers, waiting)
engine.py        checks as code (`@check(name, *ids)`), the per-check runner
agent_checks.py  the agent checks;  observers.py  what every transcript is judged on
http_peer.py     peers over Streamable HTTP and WebSocket;  http_checks.py  their rules
client_checks.py the kit as the agent (scenarios, a fresh client each); relay.py the
                 `{agent}` command; client_http.py the kit's Streamable HTTP endpoint
runner.py        one revision's run;  report.py  terminal table, JSON, JUnit XML
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import AgentgenError

PROTOCOLS = ("1", "2", "both")
DEFAULT_SCHEMAS: dict[int, str | None] = {1: None, 2: "v2"}  # None: the locked default (v1)


def load_judges(protocol: str, schemas: list[str] | None) -> list[Any]:
    """The judges of the revisions to run: `--schema` each (filtered by `--protocol`),
    else the locked schema of each protocol version asked for."""
    from .schema_link import load_judge

    if protocol not in PROTOCOLS:
        raise AgentgenError(f"--protocol must be 1, 2 or both, not {protocol!r}")
    wanted = {1, 2} if protocol == "both" else {int(protocol)}
    if schemas:
        judges = [load_judge(spec) for spec in schemas]
        chosen = [j for j in judges if j.revision.protocol_version in wanted]
        missing = wanted - {j.revision.protocol_version for j in chosen}
        if missing and protocol != "both":
            raise AgentgenError(
                f"no --schema given describes protocol version {min(missing)}",
                hint="give that revision's schema, or --protocol for the ones given",
            )
        return sorted(chosen, key=lambda j: j.revision.protocol_version)
    return [load_judge(DEFAULT_SCHEMAS[v]) for v in sorted(wanted)]


def _transport_of(target: list[str]) -> str:
    """`stdio` for a command; `http` or `ws` for a single URL."""
    if len(target) == 1 and target[0].startswith(("http://", "https://")):
        return "http"
    if len(target) == 1 and target[0].startswith(("ws://", "wss://")):
        return "ws"
    return "stdio"


def run_conform_agent(
    target: list[str],
    *,
    protocol: str = "both",
    schemas: list[str] | None = None,
    json_out: bool = False,
    junit: Path | None = None,
    keyword: str | None = None,
    cwd: Path | None = None,
    timeout: float = 10.0,
    quiet: float = 0.5,
    cancel_prompt: str | None = None,
    auth_method: str | None = None,
    jobs: int = 2,
    launch: str | None = None,
    ready_url: str | None = None,
) -> int:
    """Judge the agent `target` (its command after --, or its URL); 0 CONFORMANT, 1 not."""
    if not target:
        raise AgentgenError(
            "give the agent's command after --, or its URL",
            hint="agentgen conform agent -- python -m my_agent   |   agentgen conform agent http://127.0.0.1:8000/acp",
        )
    transport = _transport_of(target)
    if launch and transport == "stdio":
        raise AgentgenError("--launch starts a server: give the agent's URL with it")
    if transport != "stdio":
        _need_network_extra()
    from .engine import Options
    from .verdict import conformant

    judges = load_judges(protocol, schemas)
    with tempfile.TemporaryDirectory(prefix="agentgen-conform-") as scratch:
        folder = str((cwd or Path(scratch)).resolve())
        opts = Options(
            command=list(target), cwd=folder, timeout=timeout, quiet=quiet, auth_method=auth_method
        )
        if cancel_prompt:
            opts.cancel_prompt = cancel_prompt
        with _launched(launch, ready_url or (target[0] if transport != "stdio" else None), timeout):
            runs = asyncio.run(_run_all(judges, opts, transport, keyword, jobs))
    _write_reports(runs, json_out=json_out, junit=junit)
    return 0 if conformant(runs) else 1


async def _run_all(
    judges: list[Any], opts: Any, transport: str, keyword: str | None, jobs: int
) -> list[Any]:
    from .runner import run_revision

    runs = []
    for judge in judges:
        start = peer_starter(judge, opts, transport)
        runs.append(
            await run_revision(
                judge,
                opts,
                start,
                transport=transport,
                target=" ".join(opts.command),
                keyword=keyword,
                jobs=jobs,
            )
        )
    return runs


def peer_starter(judge: Any, opts: Any, transport: str) -> Any:
    if transport == "stdio":
        from .stdio_peer import StdioPeer

        async def stdio(transcript: Any) -> Any:
            peer = StdioPeer(opts.command, transcript, env=opts.env, grace=opts.grace)
            await peer.start()
            return peer

        return stdio
    from .http_peer import HttpPeer, WsPeer

    url = opts.command[0]

    async def http(transcript: Any) -> Any:
        peer: Any = (
            HttpPeer(url, transcript, judge.revision, timeout=opts.timeout)
            if transport == "http"
            else WsPeer(url, transcript, timeout=opts.timeout)
        )
        await peer.start()
        return peer

    return http


def _need_network_extra() -> None:
    import importlib.util

    missing = [
        n for n in ("httpx", "h2", "websockets", "hypercorn") if importlib.util.find_spec(n) is None
    ]
    if missing:
        raise AgentgenError(
            f"agentgen conform over HTTP and WebSocket needs {', '.join(missing)} (the runtime extra)",
            hint='pip install "acp-agentgen[runtime]"',
        )


@contextlib.contextmanager
def _launched(command: str | None, ready_url: str | None, timeout: float) -> Iterator[None]:
    """`--launch CMD`: start the server, wait for `ready_url` to answer (any status
    below 500), and stop it (SIGTERM, then SIGKILL) when the run ends."""
    if not command:
        yield
        return
    import shlex
    import subprocess
    import time
    import urllib.error
    import urllib.request

    proc = subprocess.Popen(shlex.split(command), stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + max(timeout, 30.0)
        probe = (ready_url or "").replace("ws://", "http://").replace("wss://", "https://")
        while True:
            if proc.poll() is not None:
                raise AgentgenError(
                    f"--launch: the server exited ({proc.returncode}) before it was ready"
                )
            try:
                with urllib.request.urlopen(probe, timeout=2):
                    break
            except urllib.error.HTTPError as exc:
                if exc.code < 500:  # noqa: PLR2004
                    break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise AgentgenError(f"--launch: {probe} did not answer within {deadline:g}s")
            time.sleep(0.1)  # a poll: the server is another process
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def run_conform_client(
    command: list[str],
    *,
    protocol: str = "both",
    schemas: list[str] | None = None,
    json_out: bool = False,
    junit: Path | None = None,
    prompt_via: str = "stdin",
    timeout: float = 15.0,
    serve: str = "ws",
) -> int:
    """Judge the client `command` (holding `{agent}`); 0 CONFORMANT, 1 not."""
    if not command or not any("{agent}" in a or "{url}" in a for a in command):
        raise AgentgenError(
            "give the client's command after --, with {agent} where the agent command goes "
            "(stdio) or {url} where the agent's URL goes (WebSocket)",
            hint="agentgen conform client -- python -m my_client -- {agent}",
        )
    if any("{url}" in a for a in command):
        _need_network_extra()
    if prompt_via not in ("stdin", "arg"):
        raise AgentgenError(f"--prompt-via must be stdin or arg, not {prompt_via!r}")
    if prompt_via == "arg" and "{prompt}" not in command:
        raise AgentgenError("--prompt-via arg: put {prompt} where the prompt goes")
    from .client_checks import ClientOptions, run_client_revision
    from .verdict import conformant

    judges = load_judges(protocol, schemas)
    with tempfile.TemporaryDirectory(prefix="agentgen-conform-") as scratch:
        if serve not in ("ws", "http"):
            raise AgentgenError(f"--serve must be ws or http, not {serve!r}")
        folder = str(Path(scratch).resolve())
        opts = ClientOptions(list(command), folder, prompt_via, timeout=timeout, serve=serve)

        async def main() -> list[Any]:
            return [await run_client_revision(j, opts) for j in judges]

        runs = asyncio.run(main())
    _write_reports(runs, json_out=json_out, junit=junit)
    return 0 if conformant(runs) else 1


def _write_reports(runs: list[Any], *, json_out: bool, junit: Path | None) -> None:
    import orjson

    from . import report

    if junit is not None:
        report.write_junit(junit, runs)
    if json_out:
        sys.stdout.write(
            orjson.dumps(report.to_json(runs), option=orjson.OPT_INDENT_2).decode() + "\n"
        )
    else:
        sys.stdout.write(report.text(runs))
    sys.stdout.flush()


def run_conform_list(
    protocol: str = "both", schemas: list[str] | None = None, json_out: bool = False
) -> int:
    """Print the catalogue of each revision: id, tier, capability, citation, text."""
    import orjson

    from .catalogue import catalogue

    out: list[dict[str, Any]] = []
    for judge in load_judges(protocol, schemas):
        rows = {
            row.id: row
            for role in ("agent", "client")
            for transport in ("stdio", "http", "ws")
            for row in catalogue(
                judge.revision, role=role, transport=transport, batches=judge.batches
            )
        }
        for row in rows.values():
            out.append(
                {
                    "protocol": judge.revision.protocol_version,
                    "id": row.id,
                    "tier": row.tier.value,
                    "capability": row.capability,
                    "role": row.role,
                    "transport": row.transport,
                    "citation": row.citation,
                    "text": row.text,
                }
            )
    if json_out:
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    lines = [
        "| v | id | tier | capability | citation | requirement |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in out:
        lines.append(
            f"| {r['protocol']} | {r['id']} | {r['tier']} | {r['capability'] or ''} | "
            f"{r['citation']} | {r['text']} |"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
