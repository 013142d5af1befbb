"""`agentgen conform client`: the kit plays the agent.  Our generated client (v1 and v2)
is CONFORMANT; a scriptable client right is too, and each defect planted in it is caught
by the requirement named for it."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest
from conform_support import PY, explain, failing, make_judges
from project_support import write_project

from generator.conform.client_checks import ClientOptions, run_client_revision
from generator.conform.schema_link import Judge
from generator.conform.verdict import Run
from generator.manifest.validate import load_valid

REPO = Path(__file__).resolve().parents[2]
FAKE_CLIENT = Path(__file__).resolve().parents[1] / "peers" / "conform_client.py"
GOLDEN = REPO / "generated" / "projects" / "echo-client-stdio"


@pytest.fixture(scope="module")
def judges(shared_acp: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Judge]:
    return make_judges(shared_acp, tmp_path_factory)


def _judge(judge: Judge, command: list[str], cwd: Path, env: dict[str, str]) -> Run:
    opts = ClientOptions(command, str(cwd), env=env, timeout=20)
    return asyncio.run(run_client_revision(judge, opts))


@pytest.mark.parametrize("protocol", [1, 2])
def test_the_generated_client_is_conformant(
    judges: dict[int, Judge], shared_acp: Path, tmp_path: Path, protocol: int
) -> None:
    """The echo example's generated client, for each revision: CONFORMANT (it answers the
    permission question with --yes, reads the kit's file, tolerates the unknowns)."""
    if protocol == 1:
        root, package = GOLDEN, "echo_agent_client"
    else:
        schema = (shared_acp / "v2" / "schema.json").read_text()
        package = "conform_client_v2"
        write_project(
            tmp_path,
            package,
            schema=__import__("json").loads(schema),
            manifest=load_valid(REPO / "examples" / "echo" / "agent.yaml").data,
            role="client",
            handlers=(GOLDEN / "echo_agent_client" / "handlers.py").read_text(),
            main=(GOLDEN / "echo_agent_client" / "__main__.py").read_text(),
        )
        root = tmp_path
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(root)}
    run = _judge(judges[protocol], [PY, "-m", package, "--yes", "--", "{agent}"], work, env)
    assert run.conformant, explain(run)
    assert not failing(run)
    # --yes answers the held permission question at once: no cancel to judge
    cancel = next(r for r in run.results if r.id == "AGENTGEN-CLIENT-006")
    assert cancel.status.value == "SKIPPED" and "at once" in cancel.reason()


def test_the_generated_http_client_is_conformant_over_websocket(
    judges: dict[int, Judge], tmp_path: Path
) -> None:
    """The echo example's HTTP client, `--websocket --url {url}`: the kit serves the
    WebSocket (`Acp-Connection-Id` on the upgrade) and judges it CONFORMANT."""
    root = REPO / "generated" / "projects" / "echo-client-http"
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [PY, "-m", "echo_agent_client", "--yes", "--websocket", "--url", "{url}"]
    run = _judge(judges[1], command, tmp_path, env)
    assert run.transport == "ws"
    assert run.conformant, explain(run)
    assert not failing(run)


def test_the_generated_http_client_is_conformant_over_streamable_http(
    judges: dict[int, Judge], tmp_path: Path
) -> None:
    """`--serve http`: the kit serves the RFD's endpoint (200 + Acp-Connection-Id and a
    cookie for initialize, 202, SSE streams); the client sends the headers on every
    request, Acp-Session-Id on session-scoped ones, and returns the cookie."""
    root = REPO / "generated" / "projects" / "echo-client-http"
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [PY, "-m", "echo_agent_client", "--yes", "--url", "{url}"]
    opts = ClientOptions(command, str(tmp_path), env=env, timeout=20, serve="http")
    run = asyncio.run(run_client_revision(judges[1], opts))
    assert run.transport == "http"
    assert run.conformant, explain(run)
    statuses = {r.id: r.status.value for r in run.results}
    assert {statuses[f"AGENTGEN-CLIENT-HTTP-00{i}"] for i in (1, 2, 3, 4)} == {"PASS"}


HTTP_DEFECTS = {
    "stream-accept-json": "AGENTGEN-CLIENT-HTTP-003",
    "no-connection-id": "AGENTGEN-CLIENT-HTTP-001",
}


@pytest.mark.parametrize("defect", sorted(HTTP_DEFECTS))
def test_a_planted_http_client_defect_is_caught_by_its_transport_requirement_alone(
    judges: dict[int, Judge], tmp_path: Path, defect: str
) -> None:
    """The generated HTTP client with one header defect planted in what it sends
    (tests/peers/conform_http_defect.py): the turn still works, and the one transport
    requirement for that header is the only one that fails."""
    root = REPO / "generated" / "projects" / "echo-client-http"
    env = {**os.environ, "PYTHONPATH": str(root), "FAKE_CLIENT_DEFECT": defect}
    wrapper = str(FAKE_CLIENT.parent / "conform_http_defect.py")
    command = [PY, wrapper, "echo_agent_client", "--yes", "--url", "{url}"]
    opts = ClientOptions(command, str(tmp_path), env=env, timeout=20, serve="http")
    run = asyncio.run(run_client_revision(judges[1], opts))
    assert not run.conformant
    assert failing(run) == {HTTP_DEFECTS[defect]}, explain(run)


def test_the_fake_client_without_defect_is_conformant(
    judges: dict[int, Judge], tmp_path: Path
) -> None:
    """... and proves the two requirements only a willing client shows: it lists sessions
    (the kit's cursor sent back as given) and cancels on SIGINT while the kit's permission
    question is open (the question answered `cancelled`)."""
    run = _judge(judges[1], [PY, str(FAKE_CLIENT), "--", "{agent}"], tmp_path, dict(os.environ))
    assert run.conformant, explain(run)
    statuses = {r.id: r.status.value for r in run.results}
    assert statuses["AGENTGEN-CLIENT-006"] == "PASS"
    assert statuses["AGENTGEN-CLIENT-013"] == "PASS"


CLIENT_DEFECTS = {
    "no-initialize": "AGENTGEN-CLIENT-001",
    "calls-load": "AGENTGEN-CLIENT-003",
    "image-prompt": "AGENTGEN-CLIENT-004",
    "unoffered-option": "AGENTGEN-CLIENT-005",
    "crash-on-unknown": "AGENTGEN-CLIENT-007",
    "answers-notification": "AGENTGEN-CLIENT-007",
    "wrong-id": "AGENTGEN-CLIENT-009",
    "cancel-keeps-question": "AGENTGEN-CLIENT-006",
    "cancel-selects": "AGENTGEN-CLIENT-006",
    "cursor-changed": "AGENTGEN-CLIENT-013",
}


@pytest.mark.parametrize("defect", sorted(CLIENT_DEFECTS))
def test_a_planted_client_defect_is_caught_by_its_requirement(
    judges: dict[int, Judge], tmp_path: Path, defect: str
) -> None:
    env = {**os.environ, "FAKE_CLIENT_DEFECT": defect}
    run = _judge(judges[1], [PY, str(FAKE_CLIENT), "--", "{agent}"], tmp_path, env)
    assert not run.conformant
    assert CLIENT_DEFECTS[defect] in failing(run), explain(run)
    if defect in ("cancel-keeps-question", "cancel-selects", "cursor-changed"):
        assert failing(run) == {CLIENT_DEFECTS[defect]}, explain(run)  # and by nothing else


def test_the_client_command_line(shared_acp: Path, tmp_path: Path) -> None:
    """exit 1 for a defective client, 2 without {agent}."""
    schema = str(shared_acp / "v1" / "schema.unstable.json")
    env = {
        **os.environ,
        "FAKE_CLIENT_DEFECT": "image-prompt",
        "XDG_CACHE_HOME": str(tmp_path / "c"),
    }
    args = [PY, "-m", "agentgen", "conform", "client", "--protocol", "1", "--schema", schema]
    done = subprocess.run(
        [*args, "--", PY, str(FAKE_CLIENT), "--", "{agent}"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "AGENTGEN-CLIENT-004 FAIL" in done.stdout
    usage = subprocess.run(
        [*args, "--", PY, str(FAKE_CLIENT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert usage.returncode == 2 and "{agent}" in usage.stderr


@pytest.mark.slow  # npm (the SDK, installed once per checkout) and Node
def test_the_typescript_sdk_example_client_is_judged(
    judges: dict[int, Judge], tmp_path: Path
) -> None:
    """The official TypeScript SDK 2.4.0 with its example client's behaviour
    (tests/peers/ts_example_client.mjs): on v1 NOT CONFORMANT, failing exactly the
    permission question it puts to a user on stdin (unanswered, so the turn's tolerance
    is unproven too) and the file read it answers with fixed text -- README's result."""
    import ts_peer

    root = ts_peer.install()
    command = ["node", str(root / "ts_example_client.mjs"), "--", "{agent}"]
    run = _judge(judges[1], command, tmp_path, dict(os.environ))
    assert not run.conformant
    assert failing(run) == {
        "AGENTGEN-CLIENT-005",
        "AGENTGEN-CLIENT-007",
        "AGENTGEN-CLIENT-008",
    }, explain(run)
    reasons = {r.id: r.reason() for r in run.results}
    assert "Mock file content" in reasons["AGENTGEN-CLIENT-008"]
    assert "no answer to the permission question" in reasons["AGENTGEN-CLIENT-005"]
    # SIGINT ends it (Node's default) without a session/cancel: not judged, never a FAIL
    assert "no session/cancel on SIGINT" in reasons["AGENTGEN-CLIENT-006"]
