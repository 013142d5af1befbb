"""v2 conformance (issue 22): what a strict v2 peer checks, one test per rule.

- the wire check is strict on what the runtime sends (a value the models' receive-side
  leniency would default, drop or coerce is a violation);
- capability markers: `{}` = supported, absent = not, on revisions whose schema says so
  (booleans only where the schema types the field boolean);
- JSON-RPC batches over stdio and WebSocket;
- `session/resume` replay primers.

Agents are generated from every locked v2 schema (tests/schemas.lock.json: `v2/...` and
`v2-<npm version>/...`), so a new draft release is one lock entry away.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hardening_support as hs

LOCK = json.loads((Path(__file__).resolve().parent / "schemas.lock.json").read_text())
V2_REVS = sorted({rel.split("/")[0] for rel in LOCK if rel.startswith("v2")})


def _build(tmp: Path, shared_acp: Path, rev: str, package: str) -> dict[str, Any]:
    env = hs.build(tmp, shared_acp, package, rev=rev, unstable=False)
    handlers = hs.load(tmp, package)
    return {
        "env": env,
        "package": package,
        "agent": handlers.Agent,
        "serve": hs.runtime_of(package, "serve"),
        "wirecheck": hs.runtime_of(package, "wirecheck"),
        "models": __import__(f"{package}._generated.models", fromlist=["_"]),
    }


@pytest.fixture(scope="module", params=V2_REVS)
def v2(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, shared_acp: Path):
    rev = request.param
    package = "conf_" + rev.replace("-", "_").replace(".", "_")
    return _build(tmp_path_factory.mktemp(package), shared_acp, rev, package)


@pytest.fixture(scope="module")
def v1(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> dict[str, Any]:
    return _build(tmp_path_factory.mktemp("conf_v1"), shared_acp, "v1", "conf_v1")


@pytest.fixture
def own_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Violations provoked on purpose go to the test's own file, not the suite's."""
    log = tmp_path / "violations.jsonl"
    monkeypatch.setenv("ACP_WIRE_CHECK", "1")
    monkeypatch.setenv("ACP_WIRE_CHECK_LOG", str(log))
    return log


class InProcess:
    """One agent connection in this process: frames fed in, frames written collected."""

    def __init__(self, fa: dict[str, Any]) -> None:
        self.out: list[Any] = []

        async def sink(batch: list[tuple[bytes, Any]]) -> None:
            self.out.extend(orjson.loads(f) for f, _ in batch)

        self.conn = fa["serve"].agent_connection(fa["agent"](), sink)

    async def call(self, rid: Any, method: str, params: Any) -> dict[str, Any]:
        self.conn.feed(
            orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        )
        for _ in range(1000):
            for m in self.out:
                if type(m) is dict and m.get("id") == rid and "method" not in m:
                    return m
            await asyncio.sleep(0.005)
        raise AssertionError(f"no answer to {method}")


V2_INIT = {"protocolVersion": 2, "info": {"name": "conformance", "version": "0"}}


def _booleans(value: Any, path: str = "") -> list[str]:
    if type(value) is bool:
        return [path]
    if type(value) is dict:
        return [p for k, v in value.items() for p in _booleans(v, f"{path}/{k}")]
    if type(value) is list:
        return [p for i, v in enumerate(value) for p in _booleans(v, f"{path}/{i}")]
    return []


def test_strict_send_check_refuses_a_boolean_where_v2_wants_a_marker(
    v2: dict[str, Any], own_log: Path
) -> None:
    """The v2 models accept `true` for a capability marker on receive (the schema's
    `x-deserialize-default-on-error`: it reads as absent); sending it is a violation that
    raises in the sender, located at the field. The same frame with `{}` passes."""
    wc = v2["wirecheck"]
    owner = v2["agent"]()
    check = wc.for_owner(owner)
    assert check is not None

    def frame(marker: Any) -> bytes:
        result = {
            "protocolVersion": 2,
            "info": {"name": "a", "version": "1"},
            "capabilities": {"session": {"prompt": {"embeddedContext": marker}}},
        }
        return orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": result})

    check.sent(frame({}), "initialize")
    with pytest.raises(wc.WireCheckError) as err:
        check.sent(frame(True), "initialize")
    text = str(err.value)
    assert "initialize result (InitializeResponse)" in text
    assert "/capabilities/session/prompt/embeddedContext: true" in text
    assert "a receiver reads null" in text
    assert len(own_log.read_text().splitlines()) == 1  # recorded for the harness too


def test_strict_send_check_refuses_a_value_the_models_coerce(
    v2: dict[str, Any], own_log: Path
) -> None:
    """A string where the schema wants an integer (pydantic's lax mode coerces "5" to 5 on
    receive): a strict peer refuses it, so sending it is a violation."""
    wc = v2["wirecheck"]
    check = wc.for_owner(v2["agent"]())
    assert check is not None

    def frame(used: Any) -> bytes:
        update = {"sessionUpdate": "usage_update", "used": used, "size": 10}
        params = {"sessionId": "s1", "update": update}
        return orjson.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params})

    check.sent(frame(5), None)
    with pytest.raises(wc.WireCheckError, match=r'/update/used: "5" is not a value'):
        check.sent(frame("5"), None)


def test_v2_initialize_sends_capability_markers_never_booleans(v2: dict[str, Any]) -> None:
    """On v2 every capability the agent advertises is an object marker: embedded context
    (how JSON input travels) is `{}`, image and audio are left out, and no boolean sits
    anywhere in the capabilities (session methods included)."""

    async def main() -> None:
        p = InProcess(v2)
        r = await p.call(1, "initialize", V2_INIT)
        caps = r["result"]["capabilities"]
        assert caps["session"]["prompt"] == {"embeddedContext": {}}
        assert _booleans(caps) == []
        assert all(v == {} for k, v in caps["session"].items() if k != "prompt"), caps
        await p.conn.close()

    asyncio.run(main())


def test_v1_initialize_keeps_boolean_prompt_flags(v1: dict[str, Any]) -> None:
    """v1 types PromptCapabilities' fields boolean: there they stay true/false."""

    async def main() -> None:
        p = InProcess(v1)
        r = await p.call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        prompt = r["result"]["agentCapabilities"]["promptCapabilities"]
        assert prompt == {"image": False, "audio": False, "embeddedContext": True}
        await p.conn.close()

    asyncio.run(main())


def test_revision_description_reads_flags_from_the_schema(
    v1: dict[str, Any], v2: dict[str, Any]
) -> None:
    """Which capability fields are booleans comes from each schema's types."""
    r1 = __import__(f"{v1['package']}._generated.revision", fromlist=["_"]).REVISION
    r2 = __import__(f"{v2['package']}._generated.revision", fromlist=["_"]).REVISION
    assert r1.agent_capabilities.prompt_flags == ("audio", "embeddedContext", "image")
    assert r2.agent_capabilities.prompt_flags == ()
    assert r2.agent_capabilities.session_flags == ()
