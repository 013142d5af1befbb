"""`agentgen inspect`'s guard, over plain HTTP and WebSocket: the token, the Host and the
Origin are checked on every request (CVE-2025-49596 was an inspector proxy without them)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets
from inspect_support import PY, Inspector, inspector, schema_path, write_broken_agent


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, shared_acp: Path) -> Iterator[Inspector]:
    tmp = tmp_path_factory.mktemp("inspect-guard")
    agent = write_broken_agent(tmp)
    with inspector(
        "--schema",
        str(schema_path(shared_acp)),
        "--",
        PY,
        str(agent),
        cwd=tmp,
        cache=tmp_path_factory.getbasetemp() / "inspect-cache",
    ) as found:
        yield found


def test_the_page_loads_with_the_token_and_sets_the_cookie(running: Inspector) -> None:
    r = httpx.get(running.url)
    assert r.status_code == 200 and "agentgen inspect" in r.text
    assert r.cookies.get("agentgen_inspect") == running.token
    again = httpx.get(f"{running.base}/static/app.js", cookies={"agentgen_inspect": running.token})
    assert again.status_code == 200 and "WebSocket" in again.text


@pytest.mark.parametrize("path", ["/", "/static/app.js", "/ws"])
def test_a_request_without_the_token_is_refused(running: Inspector, path: str) -> None:
    r = httpx.get(running.base + path)
    assert r.status_code == 401, r.text
    last = "y" if running.token.endswith("x") else "x"  # one character off, never the same
    wrong = httpx.get(running.base + path, params={"token": running.token[:-1] + last})
    assert wrong.status_code == 401
    cookie = httpx.get(running.base + path, cookies={"agentgen_inspect": "guess"})
    assert cookie.status_code == 401


def test_a_foreign_origin_is_refused(running: Inspector) -> None:
    r = httpx.get(running.url, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403, r.text
    other_port = httpx.get(running.url, headers={"Origin": "http://127.0.0.1:1"})
    assert other_port.status_code == 403
    own = httpx.get(running.url, headers={"Origin": running.base})
    assert own.status_code == 200


def test_a_foreign_host_is_refused(running: Inspector) -> None:
    # a DNS rebinding page reaches 127.0.0.1 under its own name: the Host header says so
    r = httpx.get(running.url, headers={"Host": f"evil.example:{running.port}"})
    assert r.status_code == 421, r.text
    no_port = httpx.get(running.url, headers={"Host": "127.0.0.1"})
    assert no_port.status_code == 421
    local = httpx.get(running.url, headers={"Host": f"localhost:{running.port}"})
    assert local.status_code == 200


def _ws_refused(url: str, **kw: object) -> int | None:
    async def attempt() -> int | None:
        try:
            async with websockets.connect(url, **kw) as ws:  # type: ignore[arg-type]
                await ws.recv()
        except websockets.InvalidStatus as exc:
            return int(exc.response.status_code)
        return None

    return asyncio.run(attempt())


def test_the_websocket_needs_the_token_and_the_own_origin(running: Inspector) -> None:
    ws = f"ws://127.0.0.1:{running.port}/ws"
    assert _ws_refused(ws) == 403
    assert _ws_refused(f"{ws}?token={running.token}", origin="http://evil.example") == 403

    async def first_event() -> dict[str, object]:
        async with websockets.connect(f"{ws}?token={running.token}", origin=running.base) as c:
            return dict(json.loads(await c.recv()))

    assert asyncio.run(first_event())["kind"] == "connecting"
