"""`make cluster` as a test: PostgreSQL, Redis, three replicas of a generated agent behind
HAProxy on 127.0.0.1; concurrent sessions driven through the balancer with the generated
HTTP client; one replica SIGKILLed mid-turn; every acknowledged turn is replayed by
``session/load`` on another replica (bench/cluster.py holds the scenario)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import cluster_support as cs


@pytest.mark.slow
def test_replica_killed_mid_turn_loses_no_acknowledged_turn() -> None:
    cs.need("postgresql", "redis-server", "haproxy")
    import cluster

    stats, victim, _ = cluster.run(sessions=4, turns=4)
    assert stats.failed_turns >= 1, "the kill did not land under a running turn"
    assert stats.reconnected >= 1
    assert stats.acknowledged >= 4
    assert stats.unloadable == 0
    assert stats.lost == 0, f"{stats.lost} acknowledged turns missing after killing {victim}"
