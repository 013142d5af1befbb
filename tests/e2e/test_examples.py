"""The examples: each manifest is valid, and each handler runs as the agent of a project
generated from its manifest (stdio subprocess, raw JSON-RPC lines)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import mypy_support
import pytest
from project_support import write_project

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.parent.name for p in (REPO / "examples").glob("*/agent.yaml"))
SECRET = "sk-example-SECRET-1234"


def test_the_three_examples_exist() -> None:
    assert {"echo", "mail-composer", "research"} <= set(EXAMPLES)
    for name in EXAMPLES:
        assert (REPO / "examples" / name / "handlers.py").is_file(), name


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_is_valid_against_the_format_schema(name: str) -> None:
    import jsonschema

    from generator.manifest.load import load_manifest

    schema = json.loads((REPO / "schema" / "manifest.schema.json").read_text())
    data = load_manifest(REPO / "examples" / name / "agent.yaml").data
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(data))
    assert not errors, [f"{e.json_path}: {e.message}" for e in errors]
    # every embedded schema is itself a valid JSON Schema
    embedded = [data.get("input"), data.get("output"), (data.get("config") or {}).get("schema")]
    for i in data.get("interrupts") or ():
        embedded += [i["payload"]["schema"], i["resume"]["schema"]]
    embedded += [e["data"]["schema"] for e in data.get("errors") or () if "data" in e]
    for sub in embedded:
        if sub is not None:
            jsonschema.Draft202012Validator.check_schema(sub)


def test_examples_pass_agentgen_validate(tmp_path: Path) -> None:
    """The real command: schema plus the semantic checks (codes, states, refs...)."""
    files = [f"examples/{name}/agent.yaml" for name in EXAMPLES]
    agentgen = [sys.executable, "-m", "agentgen", "validate"]
    ok = subprocess.run(
        [*agentgen, "--format", "json", *files],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert [d for d in json.loads(ok.stdout) if d["severity"] != "note"] == [], ok.stdout
    # the same command does reject a broken copy (the check above can fail)
    broken = tmp_path / "agent.yaml"
    text = (REPO / "examples" / "research" / "agent.yaml").read_text()
    broken.write_text(text.replace("initial: idle", "initial: nowhere"))
    bad = subprocess.run([*agentgen, str(broken)], capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and "nowhere" in bad.stdout + bad.stderr


# ---- running the examples -------------------------------------------------------------


def build(tmp: Path, shared_acp: Path, name: str, package: str = "exagent") -> dict[str, str]:
    """The project `agentgen new` would make for the example, with its handlers.py."""
    from generator.manifest.load import load_manifest

    write_project(
        tmp,
        package,
        schema=json.loads((shared_acp / "v1" / "schema.unstable.json").read_text()),
        manifest=load_manifest(REPO / "examples" / name / "agent.yaml").data,
        handlers=(REPO / "examples" / name / "handlers.py").read_text(),
        main="from ._generated import run_agent\nfrom .handlers import Agent\n\nrun_agent(Agent, None)\n",
    )
    return {**os.environ, "PYTHONPATH": str(tmp)}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    """`project(name)`: the environment to run the example's agent (built once)."""
    built: dict[str, dict[str, str]] = {}

    def get(name: str) -> dict[str, str]:
        if name not in built:
            built[name] = build(tmp_path_factory.mktemp(name), shared_acp, name)
        return dict(built[name])

    return get


class Peer:
    """The client end of a stdio agent: raw JSON-RPC lines; answers elicitations with
    `self.elicit(params) -> result`."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.seen: list[dict[str, Any]] = []
        self.elicit: Any = None
        self.permit = False  # the answer to session/request_permission
        self.permissions: list[dict[str, Any]] = []
        self.reader = asyncio.get_running_loop().create_task(self._read())
        self.next_id = 100

    @classmethod
    async def start(cls, env: dict[str, str]) -> Peer:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "exagent",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stdout
        while line := await self.proc.stdout.readline():
            msg = json.loads(line)
            self.seen.append(msg)
            if msg.get("method") == "elicitation/create" and "id" in msg:
                result = self.elicit(msg["params"]) if self.elicit else {"action": "decline"}
                await self.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
            elif msg.get("method") == "session/request_permission" and "id" in msg:
                self.permissions.append(msg["params"])
                chosen = "accept" if self.permit else "decline"
                outcome = {"outcome": "selected", "optionId": chosen}
                await self.send({"jsonrpc": "2.0", "id": msg["id"], "result": {"outcome": outcome}})
            else:
                self.inbox.put_nowait(msg)

    async def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        await self.proc.stdin.drain()

    async def request(self, method: str, params: Any) -> int:
        self.next_id += 1
        await self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return self.next_id

    async def answer(self, rid: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The response to `rid` and the notifications that came before it."""
        before = []
        while True:
            msg = await asyncio.wait_for(self.inbox.get(), 15)
            if msg.get("id") == rid:
                return msg, before
            before.append(msg)

    async def call(self, method: str, params: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        return await self.answer(await self.request(method, params))

    async def session(
        self, config: dict[str, Any] | None = None, *, elicitation: bool = True
    ) -> str:
        caps = {"elicitation": {"form": {}}} if elicitation else {}
        r, _ = await self.call("initialize", {"protocolVersion": 1, "clientCapabilities": caps})
        assert "result" in r, r
        params: dict[str, Any] = {"cwd": "/tmp", "mcpServers": []}
        if config is not None:
            params["_meta"] = {"config": config}
        r, _ = await self.call("session/new", params)
        assert "result" in r, r
        return str(r["result"]["sessionId"])

    async def stop(self) -> bytes:
        assert self.proc.stdin and self.proc.stderr
        self.proc.stdin.close()
        await asyncio.wait_for(self.proc.wait(), 10)
        self.reader.cancel()
        return await self.proc.stderr.read()


def chunks(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        u["params"]["update"]["content"]
        for u in updates
        if u.get("method") == "session/update"
        and u["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
    ]


def text_prompt(sid: str, *texts: str) -> dict[str, Any]:
    return {"sessionId": sid, "prompt": [{"type": "text", "text": t} for t in texts]}


@pytest.mark.slow
def test_echo_streams_each_text_block_back(project: Any) -> None:
    env = project("echo")

    async def main() -> None:
        peer = await Peer.start(env)
        sid = await peer.session()
        blocks = ["hello", "", "ünïcode ✓\nsecond line"]
        prompt = text_prompt(sid, *blocks)
        prompt["prompt"].insert(1, {"type": "resource_link", "uri": "file:///x", "name": "x"})
        r, before = await peer.call("session/prompt", prompt)
        assert r["result"] == {"stopReason": "end_turn"}
        assert chunks(before) == [{"type": "text", "text": t} for t in blocks]
        await peer.stop()

    asyncio.run(main())


@pytest.mark.slow
def test_echo_passes_acpbench(project: Any, acpbench: Path) -> None:
    """The shared load driver's echo check: every prompt echoed chunk by chunk."""
    env = project("echo")
    tool = acpbench
    cmd = [sys.executable, str(tool), "--prompts", "50", "--sessions", "2", "--blocks", "5"]
    r = subprocess.run(
        [*cmd, "--", sys.executable, "-m", "exagent"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0 and "failures=0 bad_lines=0" in r.stdout, r.stdout + r.stderr


@pytest.mark.slow
def test_mail_composer_config_input_interrupt_output(project: Any) -> None:
    env = project("mail-composer")

    async def main() -> None:
        peer = await Peer.start(env)
        asked: list[dict[str, Any]] = []

        def approve(params: dict[str, Any]) -> dict[str, Any]:
            asked.append(params)
            return {"action": "accept", "content": {"approved": True, "comment": "ok"}}

        peer.elicit = approve
        sid = await peer.session({"tone": "formal", "signature": "A. Writer"})
        brief = "Lunch on Friday at noon. The usual place."
        doc = {"brief": brief, "recipients": ["jane.doe@example.org"]}
        r, before = await peer.call("session/prompt", text_prompt(sid, json.dumps(doc)))
        assert r["result"] == {"stopReason": "end_turn"}, r
        draft, output = chunks(before)
        body = draft["text"]
        assert body.startswith("Dear Jane Doe,") and body.endswith("Kind regards,\n\nA. Writer")
        # the interrupt: its payload typed by ApprovalPayload, its schema the resume schema
        (ask,) = asked
        assert ask["_meta"] == {
            "interrupt": "approval",
            "payload": {"subject": "Lunch on Friday at noon", "body": body},
        }
        assert ask["requestedSchema"]["required"] == ["approved"]
        # the output: validated against Output, sent as a JSON resource
        assert output["type"] == "resource"
        assert json.loads(output["resource"]["text"]) == {
            "subject": "Lunch on Friday at noon",
            "body": body,
            "recipients": ["jane.doe@example.org"],
            "approved": True,
        }

        # input that does not match: the turn ends normally, saying what the agent expects
        # (located by the generated Input model); never a JSON-RPC error
        bad = {"brief": "", "recipients": []}
        r, before = await peer.call("session/prompt", text_prompt(sid, json.dumps(bad)))
        assert r["result"] == {"stopReason": "end_turn"}, r
        (said,) = chunks(before)
        assert "input.brief" in said["text"] and "input.recipients" in said["text"]
        assert '"recipients"' in said["text"]  # the input schema is quoted

        # UnknownRecipient: the manifest's error, not transient, no data
        doc_blocked = {"brief": "hi", "recipients": ["bob@mail.invalid"]}
        r, _ = await peer.call("session/prompt", text_prompt(sid, json.dumps(doc_blocked)))
        assert r["error"]["code"] == 1002
        assert r["error"]["message"] == "bob@mail.invalid is not an allowed recipient"
        assert r["error"]["data"] == {
            "name": "UnknownRecipient",
            "transient": False,
            "details": None,
        }

        # invalid config at session/new: located by the generated Config model
        r, _ = await peer.call(
            "session/new",
            {"cwd": "/tmp", "mcpServers": [], "_meta": {"config": {"tone": "shouty"}}},
        )
        assert r["error"]["code"] == -32602
        assert [e["loc"] for e in r["error"]["data"]["errors"]] == [
            ["params", "_meta", "config", "tone"]
        ]
        # an option set on the session changes the typed config the handler reads
        peer.elicit = approve
        r, _ = await peer.call(
            "session/set_config_option", {"sessionId": sid, "configId": "tone", "value": "terse"}
        )
        assert "result" in r, r
        r, before = await peer.call("session/prompt", text_prompt(sid, json.dumps(doc)))
        assert chunks(before)[0]["text"] == f"{brief}\n\nA. Writer"
        await peer.stop()

    asyncio.run(main())


@pytest.mark.slow
def test_mail_composer_without_elicitation(project: Any) -> None:
    """A client that did not declare elicitation is never sent `elicitation/create`: the
    approval (a yes/no resume) becomes `session/request_permission`; and a plain-text
    prompt to this JSON-input agent ends its turn normally with what JSON it expects."""
    env = project("mail-composer")

    async def main() -> None:
        peer = await Peer.start(env)
        peer.permit = True
        sid = await peer.session(elicitation=False)
        doc = {"brief": "Hello there", "recipients": ["a@example.org"]}
        r, before = await peer.call("session/prompt", text_prompt(sid, json.dumps(doc)))
        assert r["result"] == {"stopReason": "end_turn"}, r
        assert not any(m.get("method") == "elicitation/create" for m in peer.seen)
        (asked,) = peer.permissions
        assert asked["_meta"] == {"interrupt": "approval"}
        assert json.loads(chunks(before)[-1]["resource"]["text"])["approved"] is True
        peer.permit = False
        r, _ = await peer.call("session/prompt", text_prompt(sid, json.dumps(doc)))
        assert r["result"] == {"stopReason": "cancelled"}

        r, before = await peer.call("session/prompt", text_prompt(sid, "write to Jane about lunch"))
        assert r["result"] == {"stopReason": "end_turn"}, r
        (said,) = chunks(before)
        assert "not JSON" in said["text"] and '"brief"' in said["text"]
        await peer.stop()

    asyncio.run(main())


@pytest.mark.slow
def test_mail_composer_quota_is_a_transient_error_with_typed_data(project: Any) -> None:
    env = {**project("mail-composer"), "MAIL_COMPOSER_DAILY_QUOTA": "1"}

    async def main() -> None:
        peer = await Peer.start(env)
        peer.elicit = lambda params: {"action": "accept", "content": {"approved": False}}
        sid = await peer.session()
        doc = json.dumps({"brief": "Hello", "recipients": ["a@example.org"]})
        r, before = await peer.call("session/prompt", text_prompt(sid, doc))
        assert json.loads(chunks(before)[-1]["resource"]["text"])["approved"] is False
        r, _ = await peer.call("session/prompt", text_prompt(sid, doc))
        assert r["error"] == {
            "code": 1001,
            "message": "The daily quota of drafts is used up; retry later.",
            "data": {
                "name": "QuotaExceeded",
                "transient": True,
                "details": {"retry_after": 3600.0, "used": 1},
            },
        }
        await peer.stop()

    asyncio.run(main())


@pytest.mark.slow
def test_mail_composer_declined_approval_cancels_the_turn(project: Any) -> None:
    env = project("mail-composer")

    async def main() -> None:
        peer = await Peer.start(env)
        peer.elicit = lambda params: {"action": "decline"}
        sid = await peer.session()
        doc = json.dumps({"brief": "Hello", "recipients": ["a@example.org"]})
        r, before = await peer.call("session/prompt", text_prompt(sid, doc))
        assert r["result"] == {"stopReason": "cancelled"}
        assert len(chunks(before)) == 1  # the draft; no output after the decline
        await peer.stop()

    asyncio.run(main())


@pytest.mark.slow
def test_mail_composer_prompt_after_a_declined_approval(project: Any) -> None:
    env = project("mail-composer")

    async def main() -> None:
        peer = await Peer.start(env)
        peer.elicit = lambda params: {"action": "decline"}
        sid = await peer.session()
        doc = json.dumps({"brief": "Hello", "recipients": ["a@example.org"]})
        r, _ = await peer.call("session/prompt", text_prompt(sid, doc))
        assert r["result"] == {"stopReason": "cancelled"}
        peer.elicit = lambda params: {"action": "accept", "content": {"approved": True}}
        r, _ = await peer.call("session/prompt", text_prompt(sid, doc))
        await peer.stop()
        assert r.get("result") == {"stopReason": "end_turn"}, r

    asyncio.run(main())


@pytest.mark.slow
def test_research_providers_auth_states_and_cancel(project: Any) -> None:
    env = {**project("research"), "RESEARCH_STEP_DELAY": "0.3"}

    async def main() -> None:
        peer = await Peer.start(env)
        r, _ = await peer.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        assert [m["id"] for m in r["result"]["authMethods"]] == ["bearer"]
        assert "RESEARCH_AGENT_TOKEN" in r["result"]["authMethods"][0]["description"]
        r, _ = await peer.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        sid = r["result"]["sessionId"]

        r, _ = await peer.call("providers/list", {})
        assert r["result"]["providers"] == [
            {
                "providerId": "main",
                "supported": ["openai", "anthropic"],
                "required": True,
                "current": {"apiType": "openai", "baseUrl": "https://api.openai.com/v1"},
            }
        ]
        r, _ = await peer.call("providers/disable", {"providerId": "main"})
        assert r["error"]["code"] == -32602  # required
        r, _ = await peer.call(
            "providers/set",
            {
                "providerId": "main",
                "apiType": "anthropic",
                "baseUrl": "https://llm.example.org",
                "headers": {"x-api-key": SECRET},
            },
        )
        assert r["result"] == {}

        # a run streams its steps through the provider the client chose
        rid = await peer.request("session/prompt", text_prompt(sid, "Why is the sky blue?"))
        first = await asyncio.wait_for(peer.inbox.get(), 15)
        assert chunks([first])[0]["text"] == (
            "Using anthropic at https://llm.example.org/v1/messages\n"
        )
        # running: a second prompt is refused by the manifest's states
        r, _ = await peer.call("session/prompt", text_prompt(sid, "another"))
        assert r["error"]["code"] == -32002 and "running" in r["error"]["message"]
        # cancel from running ends the turn and returns to idle
        await peer.send(
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
        )
        r, _ = await peer.answer(rid)
        assert r["result"] == {"stopReason": "cancelled"}
        # idle again: a full run goes through
        r, before = await peer.call("session/prompt", text_prompt(sid, "Short one"))
        assert r["result"] == {"stopReason": "end_turn"}
        texts = [c["text"] for c in chunks(before)]
        assert texts[1] == "Question: Short one\n" and len(texts) == 6
        err = await peer.stop()
        everything = json.dumps(peer.seen) + err.decode(errors="replace")
        assert SECRET not in everything

    asyncio.run(main())


@pytest.mark.slow
def test_example_handlers_type_check_against_their_generated_code(
    tmp_path: Path, shared_acp: Path
) -> None:
    """Each example's handlers and manifest models pass mypy as a generated project checks
    its code (its own [tool.mypy]: strict); the generated code they import is read, not
    reported here (the golden projects' test checks it)."""
    packages, generated = [], []
    for name in EXAMPLES:
        package = "ex_" + name.replace("-", "_")
        build(tmp_path, shared_acp, name, package)
        packages += ["-m", f"{package}.handlers", "-m", f"{package}._generated.manifest_models"]
        generated.append(f"{package}.*")  # what they import (modules named here are checked)
    config = tmp_path / "pyproject.toml"
    config.write_text(mypy_support.project_config(silent=generated), encoding="utf-8")
    r = mypy_support.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), *packages],
        kind="project",  # the projects' options: the third-party modules read from its cache
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(tmp_path)},
    )
    assert r.returncode == 0, r.stdout + r.stderr
