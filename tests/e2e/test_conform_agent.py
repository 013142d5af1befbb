"""`agentgen conform agent` over stdio, on agents as users run them: a scriptable fake
agent right and with each planted defect, our generated echo agent (v1 and v2), an agent
on the official Python SDK written as its echo example is, and the command line (exit
codes, -k, JUnit read back)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conform_support import (
    FAKE,
    PY,
    explain,
    failing,
    fake_env,
    judge_agent,
    make_judges,
    run_agent,
)
from project_support import write_project

from generator.conform.engine import CheckRun
from generator.conform.schema_link import Judge
from generator.conform.verdict import Run, Status
from generator.manifest.validate import load_valid

REPO = Path(__file__).resolve().parents[2]
FAKE_CMD = [PY, str(FAKE)]


@pytest.fixture(scope="module")
def judges(shared_acp: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Judge]:
    return make_judges(shared_acp, tmp_path_factory)


@pytest.fixture(scope="module")
def fake_run(
    judges: dict[int, Judge], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[int], tuple[Run, list[CheckRun]]]:
    """`fake_run(protocol)`: the whole kit run on the fake agent without defect, and each
    check's run as the kit made it (its transcript), for that protocol: run once for the
    module, read by the tests that judge it and that read what the kit sent."""
    from generator.conform import runner

    done: dict[int, tuple[Run, list[CheckRun]]] = {}

    def get(protocol: int) -> tuple[Run, list[CheckRun]]:
        if protocol not in done:
            seen: list[CheckRun] = []
            original = runner.run_check

            async def recording(*args: Any, **kw: Any) -> CheckRun:
                check_run = await original(*args, **kw)
                seen.append(check_run)
                return check_run

            cwd = tmp_path_factory.mktemp(f"fake-v{protocol}")
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(runner, "run_check", recording)
                run = run_agent(judges[protocol], FAKE_CMD, cwd, env=fake_env(protocol))
            done[protocol] = run, seen
        return done[protocol]

    return get


@pytest.mark.parametrize("protocol", [1, 2])
def test_the_fake_agent_without_defect_is_conformant(
    fake_run: Callable[[int], tuple[Run, list[CheckRun]]], protocol: int
) -> None:
    """The fake agent, right: CONFORMANT with every mandatory requirement judged (none
    NOT_TESTED) and cancel exercised (the `hang` prompt runs until cancelled)."""
    run, _ = fake_run(protocol)
    assert run.conformant, explain(run)
    statuses = {r.id: r.status for r in run.results}
    assert Status.NOT_TESTED not in statuses.values()
    cancelled = "ACP-CANCEL-001" if protocol == 1 else "ACP-CANCEL-201"
    assert statuses[cancelled] == Status.PASS


def test_an_agent_of_both_revisions_is_judged_in_each(
    judges: dict[int, Judge], tmp_path: Path
) -> None:
    """An agent that speaks v1 and v2 answers the version probes in the version it
    chooses (v1 for the downgrade probe, v2 for 65535): those frames are that version's,
    not judged by the other revision's schema (a v1 `agentInfo` answer is no schema
    violation in the v2 run)."""
    for protocol in (1, 2):
        env = {**os.environ, "FAKE_PROTOCOL": "both"}
        run = run_agent(judges[protocol], FAKE_CMD, tmp_path, env=env)
        assert run.conformant, explain(run)
        assert not failing(run), explain(run)


# defect -> (protocol, the one requirement that must catch it)
DEFECTS = {
    "string-id-as-int": (1, "ACP-JSONRPC-001"),  # a wrong id
    "update-after-answer": (1, "AGENTGEN-PROMPT-001"),  # an update after the answer
    "undeclared-fs": (1, "ACP-CLIENTCAP-001"),  # a method the client did not declare
    "cancel-ignored": (1, "ACP-CANCEL-001"),  # a cancel ignored
    "batch-empty-wrapped": (2, "ACP-BATCH-201"),  # a batch mishandled
    "update-after-cancel": (1, "ACP-CANCEL-002"),
    "echo-version": (1, "ACP-INIT-003"),
    "answers-notification": (1, "ACP-JSONRPC-003"),
    "result-and-error": (1, "ACP-JSONRPC-002"),
    "same-session": (1, "ACP-SESSION-002"),
    "wrong-session-update": (1, "ACP-PROMPT-002"),
    "stdout-noise": (1, "ACP-TRANSPORT-001"),
    "latin1": (1, "ACP-TRANSPORT-002"),
    "ext-silent": (1, "ACP-EXT-001"),
    "list-ignores-cwd": (1, "ACP-LIST-002"),
    "resume-replays": (1, "ACP-RESUME-002"),
    "late-replay": (1, "ACP-LOAD-002"),
    "config-partial": (1, "ACP-CONFIG-002"),
    "terminal-auth": (1, "ACP-AUTH-002"),
    "bad-mode": (1, "ACP-MODES-001"),
    "no-running": (2, "ACP-STATE-201"),
}


Judged = dict[str, tuple[set[str], bool]]


def _judge_defects(judges: dict[int, Judge], cwd: Path, defects: list[str]) -> Judged:
    """A whole kit run on the fake agent with each defect, three at a time: what FAILed
    and the verdict."""

    async def one(defect: str, limit: asyncio.Semaphore) -> tuple[str, set[str], bool]:
        protocol, _ = DEFECTS[defect]
        async with limit:
            run = await judge_agent(
                judges[protocol], FAKE_CMD, cwd, env=fake_env(protocol, defect), jobs=2
            )
        return defect, failing(run), run.conformant

    async def main() -> list[tuple[str, set[str], bool]]:
        limit = asyncio.Semaphore(3)
        return await asyncio.gather(*(one(d, limit) for d in defects))

    return {defect: (ids, ok) for defect, ids, ok in asyncio.run(main())}


@pytest.fixture(scope="module")
def judged(
    judges: dict[int, Judge], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[list[str]], Judged]:
    """`judged(defects)`: `_judge_defects` with each defect's kit run made once for the
    module (the headline defects are among every defect)."""
    done: Judged = {}
    cwd = tmp_path_factory.mktemp("defects")

    def get(defects: list[str]) -> Judged:
        todo = [d for d in defects if d not in done]
        if todo:
            done.update(_judge_defects(judges, cwd, todo))
        return {d: done[d] for d in defects}

    return get


def test_the_headline_defects_are_each_caught_by_their_requirement_alone(
    judged: Callable[[list[str]], Judged],
) -> None:
    """A wrong id, an update after the answer, an undeclared method called, a cancel
    ignored, a batch mishandled: NOT CONFORMANT, failing only the requirement named."""
    chosen = [
        "string-id-as-int",
        "update-after-answer",
        "undeclared-fs",
        "cancel-ignored",
        "batch-empty-wrapped",
    ]
    found = judged(chosen)
    assert found == {d: ({DEFECTS[d][1]}, False) for d in chosen}


@pytest.mark.slow  # 21 whole kit runs (about 400 agent processes)
def test_every_planted_defect_is_caught_by_its_requirement_and_nothing_else(
    judged: Callable[[list[str]], Judged],
) -> None:
    """Each of the 21 defects planted in the fake agent: NOT CONFORMANT, and the only
    requirement failing is the one named for the defect."""
    found = judged(list(DEFECTS))
    assert found == {defect: ({rid}, False) for defect, (_, rid) in DEFECTS.items()}


# ---- our generated echo agent and the official SDK -------------------------------------------------

MAIN = "from ._generated import run_agent\nfrom .handlers import Agent\n\nrun_agent(Agent, None)\n"


@pytest.mark.slow  # a whole kit run: about 20 starts of a generated agent
@pytest.mark.wire_check_send_only  # the kit sends invalid frames on purpose (the probes)
@pytest.mark.parametrize("protocol", [1, 2])
def test_the_generated_echo_agent_is_conformant(
    judges: dict[int, Judge], shared_acp: Path, tmp_path: Path, protocol: int
) -> None:
    """examples/echo generated for each revision: CONFORMANT on the whole kit (its turn is
    over before a cancel can reach it: the cancel requirements are SKIPPED, as the
    official kit reports them)."""
    schema = json.loads(
        (
            shared_acp / ("v1/schema.unstable.json" if protocol == 1 else "v2/schema.json")
        ).read_text()
    )
    manifest = load_valid(REPO / "examples" / "echo" / "agent.yaml").data
    package = f"conform_echo_v{protocol}"
    write_project(
        tmp_path,
        package,
        schema=schema,
        manifest=manifest,
        handlers=(REPO / "examples" / "echo" / "handlers.py").read_text(),
        main=MAIN,
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "ACP_SESSION_DB": str(tmp_path / "s.db")}
    run = run_agent(judges[protocol], [PY, "-m", package], tmp_path, env=env, quiet=0.3)
    assert run.conformant, explain(run)
    assert not failing(run)


SDK_AGENT = '''
"""An agent on the official ACP Python SDK, its initialize written as the SDK's
examples/echo_agent.py writes it: the version the client asked for is the answer."""
import asyncio
from uuid import uuid4

from acp import (
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    run_agent,
    text_block,
    update_agent_message,
)


class Echo:
    def on_connect(self, conn):
        self.conn = conn

    async def initialize(self, protocol_version, **kwargs):
        return InitializeResponse(protocol_version=protocol_version)

    async def new_session(self, cwd, **kwargs):
        return NewSessionResponse(session_id=uuid4().hex)

    async def prompt(self, session_id, prompt, **kwargs):
        for block in prompt:
            text = getattr(block, "text", "")
            await self.conn.session_update(session_id, update_agent_message(text_block(text)))
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id, **kwargs):
        return None


asyncio.run(run_agent(Echo()))
'''


@pytest.mark.slow  # a whole kit run: about 20 starts of an SDK agent
def test_an_sdk_echo_agent_fails_exactly_the_version_requirement(
    judges: dict[int, Judge], tmp_path: Path
) -> None:
    """The official SDK 0.12.1 with the echo example's initialize (it answers the version
    it is asked): NOT CONFORMANT on v1, failing ACP-INIT-003 (65535 echoed) and no other
    requirement that decides the verdict -- the official kit's verdict on it too."""
    script = tmp_path / "sdk_echo.py"
    script.write_text(SDK_AGENT)
    run = run_agent(judges[1], [PY, str(script)], tmp_path, quiet=0.3)
    assert not run.conformant
    assert [r.id for r in run.failing()] == ["ACP-INIT-003"], explain(run)
    assert "65535" in next(r for r in run.results if r.id == "ACP-INIT-003").reason()


# ---- the command line -----------------------------------------------------------------------------------


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "agentgen", "conform", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )


def test_cli_exit_codes_subset_and_junit_read_back(shared_acp: Path, tmp_path: Path) -> None:
    """exit 1 and a JUnit report whose one failure is the defect's requirement, with a
    transcript excerpt; -k runs a subset (exit 0 when it passes); no command is exit 2."""
    schema = str(shared_acp / "v1" / "schema.unstable.json")
    junit = tmp_path / "conform.xml"
    env = {**fake_env(1, "echo-version"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    common = ["--protocol", "1", "--schema", schema, "--quiet", "0.2", "--cancel-prompt", "hang"]
    done = _cli("agent", *common, "--junit", str(junit), "--", *FAKE_CMD, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "VERDICT: NOT CONFORMANT (ACP-INIT-003 FAIL)" in done.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "1"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    failure = cases["ACP-INIT-003"].find("failure")
    assert failure is not None and "65535" in (failure.get("message") or "")
    assert '"protocolVersion":65535' in (failure.text or "")  # the transcript excerpt
    assert cases["ACP-INIT-001"].find("failure") is None
    assert cases["ACP-MODES-001"].find("failure") is None

    subset = _cli("agent", *common, "-k", "prompt", "--json", "--", *FAKE_CMD, env=env)
    assert subset.returncode == 0, subset.stdout + subset.stderr
    ids = {r["id"] for r in json.loads(subset.stdout)["runs"][0]["requirements"]}
    assert "ACP-PROMPT-001" in ids and "ACP-INIT-003" not in ids

    usage = _cli("agent", *common, env=env)
    assert usage.returncode == 2 and "give the agent's command after --" in usage.stderr


def test_the_kit_sends_only_frames_the_schema_allows(
    judges: dict[int, Judge], fake_run: Callable[[int], tuple[Run, list[CheckRun]]]
) -> None:
    """Every frame the kit itself sends (but in the checks that send invalid frames on
    purpose) passes the strict wire check as a client's frame, on both revisions."""
    from generator.conform.conversation import same_id

    seen = [(done.ctx.rev.protocol_version, done) for p in (1, 2) for done in fake_run(p)[1]]
    problems = []
    for protocol, done in seen:
        if done.ctx.provoked or done.ctx.off_schema:
            continue
        calls = {s.msg.get("id"): s.msg.get("method") for s in done.conv.seen if "method" in s.msg}
        for frame in done.transcript.sent():
            msg = frame.message()
            answers = None
            if type(msg) is dict and "method" not in msg:
                answers = next((m for k, m in calls.items() if same_id(k, msg.get("id"))), None)
            for p in judges[protocol].problems(msg, answers, sender="client", strict=True):
                problems.append(f"v{protocol} {done.check.name}: {p}")
    assert not problems, problems[:5]
    assert len(seen) > 30
