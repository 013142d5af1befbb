"""`agentgen conform agent URL`: a generated agent over Streamable HTTP and WebSocket,
both revisions, CONFORMANT; the same agent behind a wrapper that answers 200 where the
RFD says 202, launched by the kit (`--launch ... --ready-url`), caught by that rule alone."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from conform_support import PY, explain, judge_agent, make_judges
from hardening_support import HANDLERS, MANIFEST, build_revisions, free_port, listening

from generator.conform.schema_link import Judge
from generator.conform.verdict import Run, Status


@pytest.fixture(scope="module")
def judges(shared_acp: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Judge]:
    return make_judges(shared_acp, tmp_path_factory)


@pytest.fixture(scope="module")
def agents(
    shared_acp: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[dict[str, str], str]]:
    tmp = tmp_path_factory.mktemp("conform-http")
    return build_revisions(tmp, shared_acp, "conform_http", manifest=MANIFEST, handlers=HANDLERS)


@pytest.mark.wire_check_send_only  # the kit sends invalid frames on purpose (the probes)
@pytest.mark.parametrize("protocol", [1, 2])
def test_a_generated_agent_is_conformant_over_http_and_websocket(
    judges: dict[int, Judge],
    agents: dict[str, tuple[dict[str, str], str]],
    tmp_path: Path,
    protocol: int,
) -> None:
    env, package = agents[f"v{protocol}"]
    env = {**env, "ACP_SESSION_DB": str(tmp_path / "s.db"), "ACP_TEST_TRANSPORT": "http"}
    with listening(env, package) as agent:
        ws = agent.url.replace("http://", "ws://")

        async def main() -> tuple[Run, Run]:
            http = await judge_agent(
                judges[protocol], [agent.url], tmp_path, transport="http", quiet=0.3
            )
            sock = await judge_agent(judges[protocol], [ws], tmp_path, transport="ws", quiet=0.3)
            return http, sock

        http, sock = asyncio.run(main())
    assert http.conformant, explain(http)
    assert sock.conformant, explain(sock)
    statuses = {r.id: r.status for r in http.results}
    for rid in (
        "AGENTGEN-HTTP-001",
        "AGENTGEN-HTTP-002",
        "AGENTGEN-HTTP-003",
        "AGENTGEN-HTTP-005",
        "AGENTGEN-HTTP-007",
    ):
        assert statuses[rid] == Status.PASS, rid
    assert statuses["AGENTGEN-HTTP-008"] == Status.PASS  # resumed on a new connection
    assert "ACP-TRANSPORT-001" not in statuses and "ACP-SHUTDOWN-001" not in statuses
    ws_statuses = {r.id: r.status for r in sock.results}
    assert {ws_statuses[f"AGENTGEN-WS-00{i}"] for i in (1, 2, 3, 4)} == {Status.PASS}


# The generated agent's app, served by Hypercorn, behind ASGI middleware that turns each
# 202 Accepted into 200 OK.
WRAPPER = """
import asyncio
import sys

from hypercorn.asyncio import serve
from hypercorn.config import Config

from {package}._generated.runtime.http.http_server import app_for
from {package}.handlers import Agent

inner = app_for(Agent)


async def app(scope, receive, send):
    async def sending(message):
        if message["type"] == "http.response.start" and message["status"] == 202:
            message = {{**message, "status": 200}}
        await send(message)

    await inner(scope, receive, sending)


config = Config()
config.bind = ["127.0.0.1:" + sys.argv[1]]
asyncio.run(serve(app, config))
"""


@pytest.mark.wire_check_send_only  # the kit sends invalid frames on purpose (the probes)
def test_a_200_where_the_rfd_says_202_is_caught_by_that_rule_alone(
    shared_acp: Path, agents: dict[str, tuple[dict[str, str], str]], tmp_path: Path
) -> None:
    env, package = agents["v1"]
    script = tmp_path / "wrapped.py"
    script.write_text(WRAPPER.format(package=package))
    port = free_port()
    url = f"http://127.0.0.1:{port}/acp"
    env = {
        **env,
        "ACP_SESSION_DB": str(tmp_path / "s.db"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [
            PY, "-m", "agentgen", "conform", "agent",
            "--launch", f"{PY} {script} {port}",
            "--ready-url", f"http://127.0.0.1:{port}/health",
            "--protocol", "1", "--schema", str(shared_acp / "v1" / "schema.unstable.json"),
            "--quiet", "0.3", "--cancel-prompt", "hang", "--json", url,
        ],
        env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    failed = {r["id"] for r in report["runs"][0]["requirements"] if r["status"] == "FAIL"}
    assert failed == {"AGENTGEN-HTTP-002"}
    reason = next(r for r in report["runs"][0]["requirements"] if r["id"] == "AGENTGEN-HTTP-002")
    assert "answered 200, not 202" in reason["outcomes"][0]["message"] or any(
        "answered 200" in o["message"] for o in reason["outcomes"]
    )
