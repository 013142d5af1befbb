"""`make cluster` as a test: PostgreSQL, Redis, three replicas of a generated agent (v2 and
v1) behind HAProxy on 127.0.0.1; concurrent v1 and v2 sessions driven through the balancer
with the generated HTTP client; the replica holding the most v2 sessions SIGKILLed mid-turn,
then PostgreSQL stopped (``pg_ctl stop -m immediate``) and started again; every acknowledged
turn is replayed by ``session/load`` (v1) or ``session/resume`` with ``replayFrom`` (v2) on
another replica (bench/cluster.py holds the scenario)."""

from __future__ import annotations

import cluster_support as cs
import pytest


@pytest.mark.slow
def test_replica_killed_and_store_restarted_lose_no_acknowledged_turn() -> None:
    cs.need("postgresql", "redis-server", "haproxy")
    from bench import cluster

    stats, victim, _ = cluster.run(sessions=4, turns=5, outage=2.0)
    assert stats.failed_turns >= 1, "the kill did not land under a running turn"
    assert stats.v2_reconnected >= 1, "no v2 session was resumed on another replica"
    assert stats.reconnected >= 1
    assert stats.outage >= 2.0
    assert stats.acknowledged >= 4
    assert stats.unloadable == 0
    assert stats.lost == 0, f"{stats.lost} acknowledged turns missing after killing {victim}"
