"""The mail-composer example, agent and client both scaffolded with `agentgen new`: the
generated client declares elicitation, answers the approval interrupt in a typed
`interrupt_approval` handler and the turn completes; its console script, reading prompts
from a pipe, declines it with a line on stderr.  And the client API is typed all the
way: a script using it passes `mypy --strict --disallow-any-expr`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import mypy_support
import pytest

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
MANIFEST = REPO / "examples" / "mail-composer" / "agent.yaml"
DOC = {"brief": "Lunch on Friday at noon. The usual place.", "recipients": ["jane.doe@example.org"]}

pytestmark = pytest.mark.slow  # two `agentgen new`, subprocess agents, mypy


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Iterator[Path]:
    """`agentgen new` of the mail-composer agent (with the example's handlers.py) and of
    its client, under one folder."""
    from typer.testing import CliRunner

    from generator.cli import app

    root = tmp_path_factory.mktemp("mail")
    old = os.environ.get("AGENTGEN_TEMPLATE_STORE")
    os.environ["AGENTGEN_TEMPLATE_STORE"] = str(root / "store")
    try:
        schema = str(shared_acp / "v1" / "schema.unstable.json")
        for where, role in (("agent", "agent"), ("client", "client")):
            result = CliRunner().invoke(
                app,
                ["new", str(root / where), "-m", str(MANIFEST), "--schema", schema, "--role", role],
            )
            assert result.exit_code == 0, result.output
    finally:
        if old is None:
            os.environ.pop("AGENTGEN_TEMPLATE_STORE", None)
        else:
            os.environ["AGENTGEN_TEMPLATE_STORE"] = old
    shutil.copy(
        REPO / "examples" / "mail-composer" / "handlers.py",
        root / "agent" / "mail_composer" / "handlers.py",
    )
    assert (root / "client" / "mail_composer_client" / "handlers.py").is_file()
    yield root


def _env(root: Path) -> dict[str, str]:
    path = os.pathsep.join([str(root / "agent"), str(root / "client")])
    return {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}


DRIVER = """
from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from mail_composer_client._generated.dispatcher import AgentConnection
from mail_composer_client._generated.manifest_models import ApprovalPayload, ApprovalResume
from mail_composer_client._generated.runtime.client.client import spawn_agent
from mail_composer_client.handlers import Client


class Approving(Client):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[list[str]] = []
        self.updates: list[Any] = []

    async def session_update(self, params: Any) -> None:
        self.updates.append(params.model_dump(by_alias=True, mode="json")["update"])

    async def interrupt_approval(
        self, payload: ApprovalPayload, message: str
    ) -> ApprovalResume | None:
        self.asked.append([payload.subject, message])
        return ApprovalResume(approved=True, comment="fine")


async def main() -> None:
    client = Approving()
    async with spawn_agent(client, AgentConnection, sys.executable, "-m", "mail_composer") as agent:
        await agent.negotiate(client)
        new = await agent.session_new({"cwd": "/tmp", "mcpServers": []})
        prompt = [{"type": "text", "text": sys.argv[1]}]
        resp = await agent.session_prompt({"sessionId": new.session_id.root, "prompt": prompt})
        stop = resp.model_dump(by_alias=True, mode="json")["stopReason"]
    resources = [
        json.loads(u["content"]["resource"]["text"])
        for u in client.updates
        if u.get("sessionUpdate") == "agent_message_chunk" and u["content"]["type"] == "resource"
    ]
    print(json.dumps({"stop": stop, "asked": client.asked, "output": resources}))


asyncio.run(main())
"""


def test_the_generated_client_answers_the_interrupt_in_its_typed_handler(
    projects: Path,
) -> None:
    driver = projects / "drive.py"
    driver.write_text(DRIVER)
    done = subprocess.run(
        [PY, str(driver), json.dumps(DOC)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_env(projects),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["stop"] == "end_turn", result
    assert result["asked"] == [["Lunch on Friday at noon", "Approve the draft before it is final."]]
    (output,) = result["output"]
    assert output["approved"] is True and output["recipients"] == DOC["recipients"]


def test_the_console_client_declines_an_interrupt_when_stdin_is_not_a_terminal(
    projects: Path,
) -> None:
    done = subprocess.run(
        [PY, "-m", "mail_composer_client", "--", PY, "-m", "mail_composer"],
        input=json.dumps(DOC) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_env(projects),
    )
    # exit 3: the turn ended because nobody could answer (issue 23), so scripts notice
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith("Hi Jane Doe,")  # the draft streamed before the interrupt
    lines = done.stderr.strip().splitlines()
    assert lines == [
        (
            "the agent asks (approval): Approve the draft before it is final. -- declined: stdin "
            "is not a terminal, nobody can answer here (answer it with `interrupt_approval` in "
            "handlers.py)"
        ),
        "[turn: cancelled]",
        (
            "the turn was cancelled: the agent asked something nobody could answer here "
            "(exit status 3)"
        ),
    ]


TYPED = """
from __future__ import annotations

import asyncio
import sys
from typing import assert_type

from mail_composer_client._generated import models
from mail_composer_client._generated.dispatcher import AgentConnection
from mail_composer_client._generated.manifest_models import ApprovalPayload, ApprovalResume
from mail_composer_client._generated.runtime.client.client import spawn_agent
from mail_composer_client.handlers import Client


class Approving(Client):
    async def interrupt_approval(
        self, payload: ApprovalPayload, message: str
    ) -> ApprovalResume | None:
        return ApprovalResume(approved=payload.subject != "")


async def main(text: str) -> str:
    client = Approving()
    async with spawn_agent(client, AgentConnection, sys.executable, "-m", "mail_composer") as agent:
        assert_type(agent, AgentConnection)
        init = await agent.negotiate(client)
        assert_type(init, models.InitializeResponse)
        # params as wire dicts (the typed models are accepted too)
        servers: list[object] = []
        new_params: dict[str, object] = {"cwd": "/tmp", "mcpServers": servers}
        new = await agent.session_new(new_params)
        assert_type(new, models.NewSessionResponse)
        sid: str = new.session_id.root
        block: dict[str, object] = {"type": "text", "text": text}
        blocks: list[object] = [block]
        prompt: dict[str, object] = {"sessionId": sid, "prompt": blocks}
        resp = await agent.session_prompt(prompt)
        assert_type(resp, models.PromptResponse)
        return str(resp.stop_reason)


print(asyncio.run(main(sys.argv[1])))
"""


def test_a_script_using_the_client_api_is_typed_without_any(projects: Path) -> None:
    script = projects / "typed_use.py"
    script.write_text(textwrap.dedent(TYPED))
    config = projects / "mypy.ini"
    config.write_text(
        "[mypy]\nstrict = True\n\n[mypy-typed_use]\n"
        "disallow_any_expr = True\ndisallow_any_explicit = True\n"
    )
    env = _env(projects)
    env["MYPYPATH"] = env["PYTHONPATH"]
    # (strict everywhere, as `--strict` is: the script's stricter options are its own)
    typed = mypy_support.run(
        [PY, "-m", "mypy", "--config-file", str(config), str(script)],
        kind="strict",
        cwd=projects,
        env=env,
    )
    assert typed.returncode == 0, typed.stdout + typed.stderr
    ran = subprocess.run(
        [PY, str(script), json.dumps(DOC)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().splitlines()[-1].endswith("end_turn")


def test_the_readme_script_with_the_content_helpers_is_typed_and_runs(projects: Path) -> None:
    """README "Using the generated client from Python": the 20-line script with the typed
    content helpers passes `mypy --strict` and prints the agent's typed Output."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("#### Using the generated client from Python", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    script = projects / "readme_script.py"
    script.write_text(code)
    env = _env(projects)
    env["MYPYPATH"] = env["PYTHONPATH"]
    typed = mypy_support.run(
        [PY, "-m", "mypy", "--strict", str(script)], kind="strict", cwd=projects, env=env
    )
    assert typed.returncode == 0, typed.stdout + typed.stderr
    ran = subprocess.run(
        [PY, str(script)], capture_output=True, text=True, timeout=60, check=False, env=env
    )
    assert ran.returncode == 0, ran.stderr
    stop, output = ran.stdout.strip().splitlines()[-1].split(" ", 1)
    assert stop == "end_turn"
    assert json.loads(output)["approved"] is True
    assert json.loads(output)["recipients"] == ["jane@example.org"]
