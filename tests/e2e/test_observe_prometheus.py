"""A real Prometheus (Debian's `prometheus`) on 127.0.0.1 scrapes a generated HTTP agent's
`/metrics` (`OTEL_METRICS_EXPORTER=prometheus`: the `otel` extra's Prometheus reader) while
a client runs prompt turns on it; the request and turn metrics are read back through
Prometheus' own HTTP API (issue 39)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import cluster_support as cs
import hardening_support as hs
import httpx
import pytest

pytestmark = pytest.mark.slow  # a Prometheus server

TURNS = 12


def _query(prometheus: str, expr: str) -> float | None:
    r = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=5)
    r.raise_for_status()
    result = r.json()["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def _until(prometheus: str, expr: str, at_least: float, timeout: float = 60) -> float:
    """`expr`'s value once it reaches `at_least` (Prometheus scrapes every second)."""
    deadline = time.monotonic() + timeout
    while True:
        value = _query(prometheus, expr)
        if value is not None and value >= at_least:
            return value
        assert time.monotonic() < deadline, f"{expr} = {value}, not {at_least} within {timeout} s"
        time.sleep(0.5)  # a poll: the next scrape is Prometheus' own schedule


def _turns(url: str, count: int) -> list[str]:
    """`count` prompt turns on one session over the agent's WebSocket: their stop reasons."""
    import websockets.sync.client as ws_client

    reasons = []
    with ws_client.connect(url.replace("http://", "ws://"), max_size=None) as ws:

        def call(rid: int, method: str, params: Any) -> dict[str, Any]:
            ws.send(hs.rpc(rid, method, params))
            while True:
                msg = json.loads(ws.recv(timeout=10))
                if msg.get("id") == rid and "method" not in msg:
                    return msg

        call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        sid = call(2, "session/new", {"cwd": "/tmp", "mcpServers": []})["result"]["sessionId"]
        for i in range(count):
            answer = call(10 + i, "session/prompt", hs.text_prompt(sid, f"seq t{i} 3"))
            reasons.append(answer["result"]["stopReason"])
    return reasons


def test_prometheus_scrapes_the_request_and_turn_metrics(tmp_path: Path, shared_acp: Path) -> None:
    cs.need("prometheus")
    env = hs.build(
        tmp_path, shared_acp, "obs_prom", manifest={"name": "obs-prom", "version": "0.1.0"}
    )
    env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
    env.update(ACP_TEST_TRANSPORT="http", OTEL_METRICS_EXPORTER="prometheus")
    with hs.listening(env, "obs_prom") as agent:
        page = httpx.get(f"http://{agent.where}/metrics", timeout=5)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
        prometheus = cs.start_prometheus([agent.where])
        try:
            assert _turns(agent.url, TURNS) == ["end_turn"] * TURNS
            prompts = (
                'sum(acp_request_duration_seconds_count{method="session/prompt",outcome="ok"})'
            )
            assert _until(prometheus.url, prompts, TURNS) == TURNS
            turns = 'sum(acp_turn_duration_seconds_count{stop_reason="end_turn"})'
            assert _until(prometheus.url, turns, TURNS) == TURNS
            inits = 'sum(acp_request_duration_seconds_count{method="initialize"})'
            assert _query(prometheus.url, inits) == 1
            # the client has gone: its session is no longer held here
            assert _until(prometheus.url, "-sum(acp_sessions_active)", 0) == 0
            assert _query(prometheus.url, 'up{job="acp"}') == 1
        finally:
            prometheus.stop()
    # /metrics is served only when asked for
    env.pop("OTEL_METRICS_EXPORTER")
    with hs.listening(env, "obs_prom") as agent:
        assert httpx.get(f"http://{agent.where}/metrics", timeout=5).status_code == 404
