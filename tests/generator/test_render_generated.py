"""render_generated: the `_generated/` file set, determinism, formatting, revision profile."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from generator.protocol.revision import describe
from generator.render import render_generated, runtime_files

MANIFEST = {"name": "r", "version": "1.0.0", "title": "R"}


def _load(shared_acp: Path, rev: str, unstable: bool = False) -> tuple[dict, dict | None]:
    sfx = ".unstable" if unstable else ""
    meta = shared_acp / rev / f"meta{sfx}.json"
    return json.loads((shared_acp / rev / f"schema{sfx}.json").read_text()), (
        json.loads(meta.read_text()) if meta.exists() else None
    )


@pytest.mark.parametrize(
    ("rev", "unstable"), [("legacy", False), ("v1", False), ("v1", True), ("v2", False)]
)
def test_files_deterministic_and_methods_complete(
    shared_acp: Path, rev: str, unstable: bool
) -> None:
    schema, meta = _load(shared_acp, rev, unstable)
    a = render_generated(
        schema=schema, meta=meta, manifest=MANIFEST, role="agent", transport="stdio"
    )
    b = render_generated(
        schema=schema, meta=meta, manifest=MANIFEST, role="agent", transport="stdio"
    )
    assert a == b
    for rel in ("__init__.py", "dispatcher.py", "models.py", "manifest_models.py", "manifest.json"):
        assert rel in a
    shipped = runtime_files("stdio", "agent", testing=True)  # the tests' client too
    assert {rel for rel in a if rel.startswith("runtime/")} == set(shipped)
    for rel, text in shipped.items():
        assert a[rel] == text  # copied verbatim
    # a stdio agent: no HTTP module (the server's, nor the wire facts it shares with the client)
    assert not [rel for rel in shipped if rel.startswith("runtime/http_")]
    tree = ast.parse(a["dispatcher.py"])
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    agent_methods = {
        f.name for f in classes["AgentBase"].body if isinstance(f, ast.AsyncFunctionDef)
    }
    wire = {
        d["x-method"]
        for d in (schema.get("$defs") or {}).values()
        if isinstance(d, dict) and d.get("x-side") in ("agent", "both") and "x-method" in d
    }
    assert len(agent_methods - {"prompt"}) == len(wire)
    assert json.loads(a["manifest.json"]) == MANIFEST


def test_generated_code_is_ruff_formatted(shared_acp: Path, tmp_path: Path) -> None:
    schema, meta = _load(shared_acp, "v1", True)
    files = render_generated(
        schema=schema, meta=meta, manifest=MANIFEST, role="agent", transport="stdio"
    )
    for rel in ("dispatcher.py", "__init__.py"):
        p = tmp_path / rel
        p.write_text(files[rel])
    ruff = Path(sys.executable).parent / "ruff"
    r = subprocess.run(
        [str(ruff), "format", "--check", "--line-length", "100", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_revision_follows_the_schema(shared_acp: Path) -> None:
    """The revision description reads each wire name and requiredness from the schema."""
    v1u, m1u = _load(shared_acp, "v1", True)
    v1, m1 = _load(shared_acp, "v1")
    v2, m2 = _load(shared_acp, "v2")
    r1u = describe(v1u, m1u)
    assert r1u.turn.lifecycle == "v1" and r1u.agent_capabilities.providers == "providers"
    assert (r1u.init.request_info, r1u.init.response_capabilities) == (
        "clientInfo",
        "agentCapabilities",
    )
    assert r1u.turn.prompt_usage == "usage" and r1u.sessions.load
    r1 = describe(v1, m1)
    assert r1.agent_capabilities.providers is None and r1.turn.prompt_usage is None
    assert r1.config_option.id == "id" and not r1.turn.chunk_message_id_required
    r2 = describe(v2, m2)
    assert r2.turn.lifecycle == "v2" and r2.protocol_version == 2
    assert (r2.init.request_info, r2.init.request_info_required) == ("info", True)
    assert r2.config_option.id == "configId" and r2.turn.chunk_message_id_required
    assert r2.auth_method == type(r2.auth_method)(
        id="methodId",
        agent_type="agent",
        terminal_type="terminal",
        terminal_env_list=True,
        client_auth="auth",
        client_terminal="terminal",
    )
    assert (r1.auth_method.terminal_type, r1.auth_method.terminal_env_list) == ("terminal", False)
    assert r2.agent_capabilities.prompt == ("session", "prompt")
    assert r2.agent_capabilities.load_session is None and not r2.sessions.load
    assert r2.permission.tool_call is None and r2.permission.title == "title"
    assert r2.side("agent")["session/prompt"].params == "PromptRequest"


def test_bad_role_is_refused(shared_acp: Path) -> None:
    from generator.errors import AgentgenError

    schema, meta = _load(shared_acp, "v1")
    with pytest.raises(AgentgenError):
        render_generated(
            schema=schema, meta=meta, manifest=MANIFEST, role="robot", transport="stdio"
        )


def test_callbacks_module_ships_only_with_async_callbacks() -> None:
    """callbacks.py (which needs httpx) is in a stdio agent only when its manifest declares
    async output to a callback URL; an HTTP agent or client never gets what it lacks."""
    from generator.render import uses_callbacks

    with_cb = {"name": "a", "version": "1", "output_modes": {"async": {"callback": True}}}
    assert uses_callbacks(with_cb) and not uses_callbacks(MANIFEST)
    assert "runtime/sessions/callbacks.py" in runtime_files("stdio", "agent", callbacks=True)
    for transport in ("stdio", "http"):
        for role in ("agent", "client"):
            shipped = runtime_files(transport, role)
            assert "runtime/sessions/callbacks.py" not in shipped
            server = (transport, role) == ("http", "agent")
            for module in ("server", "app", "connection", "streams", "launch"):
                assert (f"runtime/http/http_{module}.py" in shipped) == server
            # a stdio agent carries no console; a client no session store
            assert ("runtime/console/main.py" in shipped) == (role == "client")
            assert ("runtime/sessions/store.py" in shipped) == (role == "agent")
            assert ("runtime/agent/agent.py" in shipped) == (role == "agent")
            assert ("runtime/wire/http_wire.py" in shipped) == (server or role == "client")
            # a client speaks both transports, whichever it was made with
            assert ("runtime/client/http_client.py" in shipped) == (role == "client")


def test_every_project_carries_the_observe_room() -> None:
    """The runtime reaches `observe` as a package (`from .. import observe`), and the room
    reaches its SDK module inside a function: both ship with every agent and client (the
    `otel` extra turns them on); before, a room imported by its package name was missed."""
    for transport in ("stdio", "http"):
        for role in ("agent", "client"):
            shipped = runtime_files(transport, role)
            assert "runtime/observe/__init__.py" in shipped, (transport, role)
            assert "runtime/observe/otel.py" in shipped, (transport, role)
