"""The first turn of a model agent does not wait for its provider's model code (issue 36:
the first 429 within 1 s): once `initialize` is answered, model/route.py `warm` imports
it in a background thread, for the API the first turn will likely use: everything its
first request loads, with the garbage collector off meanwhile and what loaded frozen
after.  (The time it saves is measured in bench/bench_first_429.py, never asserted
here.)"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import hardening_support as hs
import pytest
from coder_support import Editor
from runtime.model import route

KEYS = ("ACP_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")


@pytest.mark.parametrize(
    ("env", "llm", "warmed"),
    [
        ({"ACP_MODEL": "openai:gpt-4.1-mini"}, {}, ["openai-responses"]),
        (
            {"ACP_MODEL": "openai:gpt-x", "OPENAI_BASE_URL": "http://127.0.0.1:1/v1"},
            {},
            ["openai-chat"],
        ),
        ({"ACP_MODEL": "openai-chat:gpt-x"}, {}, ["openai-chat"]),
        ({"ACP_MODEL": "openai-responses:gpt-x"}, {}, ["openai-responses"]),
        ({}, {"default_model": "anthropic:claude-x"}, ["anthropic"]),
        ({"ACP_MODEL": "anthropic:claude-x"}, {"default_model": "openai:gpt-x"}, ["anthropic"]),
        ({"ACP_MODEL": "test"}, {}, []),  # the scripted model: nothing to load
        ({"ACP_MODEL": "groq:llama"}, {}, []),  # a provider pydantic-ai builds itself
        ({"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}, {}, ["openai-chat"]),
        ({"ANTHROPIC_API_KEY": "k"}, {}, ["anthropic"]),
        ({}, {"provider": "main"}, ["openai-chat", "anthropic"]),  # the editor routes it
        # a route speaks Chat Completions (first), the environment's `openai:` Responses
        (
            {},
            {"provider": "main", "default_model": "openai:gpt-x"},
            ["openai-chat", "openai-responses"],
        ),
        ({}, {}, []),
    ],
)
def test_the_api_warmed_is_the_one_the_first_turn_uses(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], llm: dict[str, Any], warmed: list[str]
) -> None:
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert route.apis_to_warm(llm) == warmed


def test_warm_imports_the_model_code_in_a_thread_once_a_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(route, "_warmed", threading.Event())
    monkeypatch.setenv("ACP_MODEL", "openai:gpt-x")
    thread = route.warm({})
    assert thread is not None and thread.daemon and thread is not threading.current_thread()
    thread.join(120)
    assert "pydantic_ai.models.openai" in sys.modules and "openai" in sys.modules
    assert route.warm({}) is None  # once a process


# ---- what the warm-up leaves to the first request: nothing to load, no collection ----------
# A real stdio agent (v1), started through PROBE: it records every module imported, by which
# thread and whether the warm-up had ended, and what the collector did during the warm-up.
# The editor waits for the warm-up to end, then sends the first prompt, which a scripted
# endpoint on 127.0.0.1 answers `429 Retry-After: 7`.
PROBE = r"""
import atexit, gc, json, runpy, subprocess, sys, threading
from pathlib import Path

package, out = sys.argv[1], Path(sys.argv[2])
imports = []
facts = {}
ended = threading.Event()


class Recorder:
    def find_spec(self, name, path=None, target=None):
        imports.append((name, threading.current_thread().name, ended.is_set()))
        return None


sys.meta_path.insert(0, Recorder())
start = threading.Thread.start


def start_and_watch(self):
    if self.name == "acp-model-warm":
        run = self.run

        def watched():
            before = sum(s["collections"] for s in gc.get_stats())
            try:
                run()
            finally:
                facts["collections"] = sum(s["collections"] for s in gc.get_stats()) - before
                facts["frozen"] = gc.get_freeze_count()
                facts["collecting"] = gc.isenabled()
                ended.set()
                out.with_suffix(".ended").write_text("")

        self.run = watched
    start(self)


threading.Thread.start = start_and_watch
popen = subprocess.Popen.__init__


def popen_and_record(self, args, *rest, **kw):
    facts.setdefault("processes", []).append((list(map(str, args)), ended.is_set()))
    popen(self, args, *rest, **kw)


subprocess.Popen.__init__ = popen_and_record
atexit.register(lambda: out.write_text(json.dumps({"imports": imports, **facts})))
sys.argv = [package]
runpy.run_module(package, run_name="__main__", alter_sys=True)
"""
WARM_HANDLERS = """
from __future__ import annotations

from typing import Any

from pydantic_ai import Agent as Model

from ._generated.acp import AgentBase, Turn, run_model

MODEL = Model(instructions="Be brief.")


class Agent(AgentBase):
    async def prompt(self, turn: Turn, input: Any) -> None:
        await run_model(turn, MODEL, input)
"""
WARM_MANIFEST: dict[str, Any] = {
    "name": "warm-agent",
    "version": "0.1.0",
    "llm": {"instructions": "Be brief."},
}
# the model code and what its first request runs on: none of it may load in the turn
MODEL_CODE = ("openai", "anthropic", "pydantic_ai", "genai_prices", "httpx2", "httpcore2", "anyio")
MODEL_CODE += ("h11", "jiter", "certifi", "sniffio", "distro")


class RateLimited(BaseHTTPRequestHandler):
    paths: ClassVar[list[str]] = []

    def log_message(self, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).paths.append(self.path)
        body = json.dumps({"error": {"message": "slow down", "type": "rate_limit_error"}})
        self.send_response(429)
        self.send_header("Retry-After", "7")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())


@pytest.fixture(scope="module")
def warm_agent(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Any:
    tmp = tmp_path_factory.mktemp("warm_agent")
    env = hs.build(tmp, shared_acp, "warm_agent", manifest=WARM_MANIFEST, handlers=WARM_HANDLERS)
    probe = tmp / "probe.py"
    probe.write_text(PROBE)
    return env, probe


@pytest.mark.parametrize(
    ("model", "path"),
    [
        ("openai:gpt-test", "/v1/chat/completions"),  # a gateway's base URL: Chat Completions
        ("openai-responses:gpt-test", "/v1/responses"),
        ("anthropic:claude-test", "/v1/messages"),
    ],
)
def test_the_first_request_after_the_warm_up_loads_nothing_and_nothing_was_collected(
    warm_agent: Any, tmp_path: Path, model: str, path: str
) -> None:
    """The warm-up (model/route.py `warm`) imports what the first model request of the
    model's API needs (its client's resource module, the stream's, the run's, the
    platform facts its headers carry) and nothing of the model code is left to the turn; while it loads, the collector does not run
    (the start-up's objects would be walked again and again), and what it loaded is
    frozen (never walked again).  The 429 still comes from the endpoint: one request,
    `retry_after: 7`.  Fails on the old code: the chat and Responses resources loaded in
    the turn, and `uname -p` ran in it (the client's platform headers); 130 to 300
    collections during the warm-up, nothing frozen."""
    env, probe = warm_agent
    RateLimited.paths = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), RateLimited)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    out = tmp_path / "probe.json"
    run_env = {
        k: v for k, v in env.items() if not k.startswith(("ACP_MODEL", "OPENAI_", "ANTHROPIC_"))
    }
    run_env |= {"ACP_MODEL": model, "ACP_SESSION_STORE": "memory:"}
    run_env |= {"OPENAI_API_KEY": "sk-warm", "OPENAI_BASE_URL": url + "/v1"}
    run_env |= {"ANTHROPIC_API_KEY": "sk-ant-warm", "ANTHROPIC_BASE_URL": url}

    async def main() -> dict[str, Any]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(probe),
            "warm_agent",
            str(out),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=run_env,
            cwd=tmp_path,
        )
        ed = Editor(proc, tmp_path)
        await ed.initialize(1, {})
        for _ in range(600):  # the warm-up ends (60 s at most)
            if out.with_suffix(".ended").exists():
                break
            await asyncio.sleep(0.1)
        sid = (await ed.call("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["sessionId"]
        ed.next_id += 1
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}
        await ed.send(
            {"jsonrpc": "2.0", "id": ed.next_id, "method": "session/prompt", "params": prompt}
        )
        while (msg := await asyncio.wait_for(ed.inbox.get(), 30)).get("id") != ed.next_id:
            pass
        await ed.stop()
        return dict(msg)

    try:
        answer = asyncio.run(main())
    finally:
        server.shutdown()
        server.server_close()
    assert answer["error"]["data"]["retry_after"] == 7, answer
    assert RateLimited.paths == [path]  # the endpoint answered it, once
    seen = json.loads(out.read_text())
    late = [m for m, _, ended in seen["imports"] if ended and m.split(".")[0] in MODEL_CODE]
    assert late == [], "\n".join(late)
    assert [p for p, ended in seen.get("processes", []) if ended] == []  # `uname -p`: warmed
    warmed = [m for m, thread, _ in seen["imports"] if thread == "acp-model-warm"]
    assert "pydantic_ai.models." + model.partition(":")[0].partition("-")[0] in warmed
    assert seen["collections"] == 0 and seen["collecting"] is True
    assert seen["frozen"] > 10_000  # the start-up's and the model code's objects
