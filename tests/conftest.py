"""Shared fixtures. Keep additions small; one fixture per shared input."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = (REPO / ".." / "shared").resolve()

# One schema cache for the whole run (all xdist workers, tests that move HOME): the
# locked default schema is fetched with `npm pack` at most once per checkout.
os.environ.setdefault("AGENTGEN_CACHE_DIR", str(REPO / ".cache" / "agentgen"))
# Agents the tests start keep their sessions in a throwaway file (one per worker), not in
# the user's ~/.local/state; a test that restarts an agent on its own store sets its own.
os.environ.setdefault(
    "ACP_SESSION_DB", str(Path(tempfile.mkdtemp(prefix="agentgen-sessions-")) / "sessions.db")
)

# Schema-checked wire (templates/runtime/wirecheck.py) for the whole suite: every frame a
# generated runtime sends or receives, in process or in a subprocess that inherits the
# environment, is validated against its revision's models. Violations are appended to one
# file per test worker; a test during which one was written fails. `ACP_WIRE_CHECK=0 pytest`
# turns it off. Tests whose peer sends malformed frames on purpose are marked
# `wire_check_send_only` (only what the runtime sends is checked). A known runtime bug that
# another test must not be blind to meanwhile: `wire_check_known(pattern, reason=...)`
# tolerates violations matching the regex `pattern` and fails the test when none occurs
# (the bug is fixed: remove the marker).
os.environ.setdefault("ACP_WIRE_CHECK", "1")
_WIRE_LOG = Path(tempfile.mkdtemp(prefix="acp-wire-check-")) / "violations.jsonl"
os.environ["ACP_WIRE_CHECK_LOG"] = str(_WIRE_LOG)
_wire_seen = {"bytes": 0}  # how much of the file earlier checks have read


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "wire_check_send_only: the test's peer sends malformed frames on purpose; check only "
        "what the runtime sends",
    )
    config.addinivalue_line(
        "markers",
        "wire_check_known(pattern, reason): wire-check violations matching the regex are a "
        "known bug (named in reason); the test fails if none occurs",
    )


def _new_wire_violations() -> list[str]:
    """Violations written since the last call (by this process or any it started)."""
    if not _WIRE_LOG.exists():
        return []
    with _WIRE_LOG.open("rb") as fh:
        fh.seek(_wire_seen["bytes"])
        data = fh.read()
    complete = data[: data.rfind(b"\n") + 1]
    _wire_seen["bytes"] += len(complete)
    return [json.loads(line)["violation"] for line in complete.splitlines() if line.strip()]


def _fail_on_wire_violations(when: str, item: pytest.Item | None = None) -> None:
    found = _new_wire_violations()
    if item is not None and item.get_closest_marker("wire_check_send_only") is not None:
        # (subprocess agents inherit an environment copied before the test ran, so the
        # direction is filtered here rather than with ACP_WIRE_CHECK=send)
        found = [v for v in found if not re.match(r"ACP wire check \(\w+ received\)", v)]
    marker = item.get_closest_marker("wire_check_known") if item is not None else None
    if marker is not None and os.environ.get("ACP_WIRE_CHECK", "1") not in ("", "0"):
        pattern = re.compile(marker.args[0])
        known = [v for v in found if pattern.search(v)]
        found = [v for v in found if not pattern.search(v)]
        if not known and not found:
            reason = marker.kwargs.get("reason", "")
            pytest.fail(
                f"wire_check_known({marker.args[0]!r}) no longer happens ({reason}): "
                "remove the marker",
                False,
            )
    if found:
        shown = "\n".join(found[:10])
        more = f"\n... and {len(found) - 10} more" if len(found) > 10 else ""
        pytest.fail(
            f"{len(found)} frame(s) failed the ACP wire check {when}:\n{shown}{more}", False
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    _new_wire_violations()  # anything older was reported with an earlier test
    result = yield
    _fail_on_wire_violations("while its fixtures started")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    try:
        result = yield
    except BaseException:
        found = _new_wire_violations()  # the test failed anyway: say what the wire check saw
        if found:
            item.add_report_section("call", "ACP wire check", "\n".join(found[:20]))
        raise
    _fail_on_wire_violations("during the test", item)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    result = yield
    _fail_on_wire_violations("while its fixtures ended")
    return result


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_acp() -> Path:
    """The upstream ACP schemas (read-only, never copied into the repo)."""
    path = SHARED / "acp"
    assert path.is_dir(), f"upstream schemas not found at {path}"
    return path


@pytest.fixture(scope="session")
def shared_agntcy() -> Path:
    """The two real AGNTCY manifests."""
    path = SHARED / "agntcy"
    assert path.is_dir(), f"AGNTCY manifests not found at {path}"
    return path
