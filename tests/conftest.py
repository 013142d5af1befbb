"""Shared fixtures. Keep additions small; one fixture per shared input."""

from __future__ import annotations

import atexit
import gc
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = (REPO / ".." / "shared").resolve()
SCHEMAS_LOCK = REPO / "tests" / "schemas.lock.json"

# One schema cache for the whole run (all xdist workers, tests that move HOME): every
# locked schema is fetched from the npm registry at most once per checkout.
os.environ.setdefault("AGENTGEN_CACHE_DIR", str(REPO / ".cache" / "agentgen"))
# Generated protocol models (generator/protocol/models.py keeps them by schema, label and
# producer) in one folder for this run, not in the checkout's cache: every run renders
# each input afresh once, as on a fresh clone, then the xdist workers and the agentgen
# subprocesses of the run read it back. Made by the first process (the controller; the
# workers inherit the variable) and removed when that process ends.
if "AGENTGEN_MODELS_CACHE" not in os.environ:
    os.environ["AGENTGEN_MODELS_CACHE"] = tempfile.mkdtemp(prefix="agentgen-models-")
    atexit.register(shutil.rmtree, os.environ["AGENTGEN_MODELS_CACHE"], True)
# Agents the tests start keep their sessions in a throwaway file (one per worker), not in
# the user's ~/.local/state; a test that restarts an agent on its own store sets its own.
os.environ.setdefault(
    "ACP_SESSION_DB", str(Path(tempfile.mkdtemp(prefix="agentgen-sessions-")) / "sessions.db")
)

# mypy caches: the projects the tests type-check share the standard library, pydantic and
# pydantic-ai, which mypy then reads from the cache instead of checking them again for
# every project (mypy's incremental mode, as a user runs it: a module whose file changed
# is checked again).  One folder for the run (made by the first process, the controller:
# the workers inherit the variable), a cache in it per kind of check, each used by one
# mypy at a time (tests/mypy_support.py); and one a process (the controller and each
# xdist worker import this file) for the mypy of a project's own virtualenv.  Removed
# when the process that made them ends.
if "AGENTGEN_MYPY_RUN_CACHE" not in os.environ:
    os.environ["AGENTGEN_MYPY_RUN_CACHE"] = tempfile.mkdtemp(prefix="agentgen-mypy-run-")
    atexit.register(shutil.rmtree, os.environ["AGENTGEN_MYPY_RUN_CACHE"], True)
os.environ["MYPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="agentgen-mypy-")
atexit.register(shutil.rmtree, os.environ["MYPY_CACHE_DIR"], True)

# Schema-checked wire (templates/runtime/wire/wirecheck.py) for the whole suite: every frame a
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


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Collect the garbage now, then freeze the heap, so that what runs after the session
    (pytest's own gc passes at unconfigure, over a million objects after a worker's share
    of the suite) is quick. An xdist worker is told to end once it reports its session
    finished (after this hook), and one still busy 5 s later is sent SIGINT by execnet:
    the KeyboardInterrupt then landed in hypothesis' gc callback, a traceback at the end
    of a run whose every test passed. What the collection here finalizes still reaches
    pytest's unraisable-exception report."""
    _write_durations(session.config)
    gc.collect()
    gc.freeze()


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


# What `slow` means (pyproject's marker, ARCHITECTURE.md "Tests", `make test-fast`): the
# test installs or builds (pip, venv, a wheel), runs a project's own test suite, starts an
# SDK peer (Node), a browser (Chromium) or a server program (PostgreSQL, Redis, HAProxy,
# Prometheus), or runs a fuzz, soak or load loop. Short-lived processes (the agentgen CLI, an agent started for one test,
# git, ruff, mypy, npm filling the schema cache) and loopback sockets do not make a test
# slow. A test not marked slow that starts one of these programs fails, naming it.
SLOW_PROGRAMS = frozenset(
    {
        "pip",
        "pip3",
        "node",
        "npx",
        "initdb",
        "pg_ctl",
        "postgres",
        "redis-server",
        "haproxy",
        "chromium",
        "prometheus",
    }
)
SLOW_MODULES = frozenset({"pip", "venv", "build", "pytest"})  # `python -m <module>`
_running: dict[str, pytest.Item | None] = {"item": None}


def _slow_program(args: Any) -> str | None:
    """The program of a Popen `args` that only a test marked slow may start."""
    if isinstance(args, (str, bytes, os.PathLike)):
        return None  # a shell line or a bare executable path: not one of the test tools
    argv = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args]
    name = Path(argv[0]).name if argv else ""
    if name in SLOW_PROGRAMS:
        return name
    if name.startswith("python") and argv[1:2] == ["-m"] and argv[2:3]:
        module = argv[2].split(".")[0]
        return f"python -m {module}" if module in SLOW_MODULES else None
    return None


_popen_init = subprocess.Popen.__init__


def _checked_popen_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> None:
    item = _running["item"]
    if item is not None and item.get_closest_marker("slow") is None:
        program = _slow_program(args)
        if program is not None:
            raise pytest.fail.Exception(
                f"{item.nodeid} starts {program!r} but is not marked slow: add "
                "@pytest.mark.slow (tests/conftest.py says what slow means)",
                pytrace=False,
            )
    _popen_init(self, args, *rest, **kw)


subprocess.Popen.__init__ = _checked_popen_init  # type: ignore[method-assign]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _running["item"] = item
    try:
        return (yield)
    finally:
        _running["item"] = None


# Three xdist workers (`make test`: `-n 3 --dist loadscope --no-loadscope-reorder`): the
# tests of a module (or of a class) run on one worker, so a fixture built once per module
# (a generated project, the built wheel, a server) is built once, not once a worker. The
# modules are handed out longest first by tests/durations.json (seconds a test, written
# by `make test-durations`), so the workers finish together instead of one starting a
# long module when the other is done. (Not `loadgroup`: under pytest 9 xdist 3.8 cannot
# rename a test to its group, and every test is then its own unit.)
DURATIONS = REPO / "tests" / "durations.json"
_UNKNOWN_SLOW = 10.0  # a slow test not yet recorded: placed among the long ones


def _recorded_durations() -> dict[str, float]:
    try:
        data: dict[str, float] = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a worker, the longest units first (every worker collects: they order alike); a
    run in one process keeps the files' order."""
    if not hasattr(config, "workerinput"):
        return
    known = _recorded_durations()
    units: dict[str, list[pytest.Item]] = {}
    for item in items:  # xdist's loadscope unit: the id up to its last `::`
        units.setdefault(item.nodeid.rsplit("::", 1)[0], []).append(item)

    def cost(item: pytest.Item) -> float:
        default = _UNKNOWN_SLOW if item.get_closest_marker("slow") else 0.0
        return known.get(item.nodeid, default)

    ordered = sorted(units.values(), key=lambda unit: -sum(cost(i) for i in unit))
    items[:] = [item for unit in ordered for item in unit]


_durations: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get("AGENTGEN_RECORD_DURATIONS"):
        _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def _write_durations(config: pytest.Config) -> None:
    target = os.environ.get("AGENTGEN_RECORD_DURATIONS")
    if not target or hasattr(config, "workerinput") or not _durations:
        return
    # tests under half a second are left out: unrecorded, they come last, in order
    kept = {k: round(v, 1) for k, v in sorted(_durations.items()) if v >= 0.5}
    Path(target).write_text(json.dumps(kept, indent=0) + "\n", encoding="utf-8")


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def upstream_schemas() -> Path:
    """The upstream ACP schemas the tests use, laid out as `<rev>/schema[.unstable].json`.

    Each file is the one `tests/schemas.lock.json` pins (npm package, version, path,
    sha256), fetched through agentgen's own npm source and cached; `../shared/acp/<rel>`
    is read instead only when present with the locked sha256. Upstream publishes no
    meta.json on npm: tests read method names from the schema's x-method/x-side.
    """
    from generator import sources
    from generator.files import write_atomic

    root = Path(sources.cache_dir()) / "test-schemas"
    lock = sources.read_lock_file(SCHEMAS_LOCK)
    for rel, raw_entry in sorted(lock.items()):
        entry = sources.check_lock_entry(raw_entry, str(SCHEMAS_LOCK), f"/{rel}")
        dest = root / rel
        if _sha256(dest) == entry["sha256"]:
            continue
        shortcut = SHARED / "acp" / rel
        if _sha256(shortcut) == entry["sha256"]:
            raw = shortcut.read_bytes()
        else:
            raw = sources.fetch_locked(entry, str(SCHEMAS_LOCK))
        write_atomic(dest, raw)
    return root


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_acp() -> Path:
    """The upstream ACP schemas (read-only, never copied into the repo)."""
    return upstream_schemas()


@pytest.fixture(scope="session")
def shared_agntcy() -> Path:
    """The two real AGNTCY manifests (published in AGNTCY's git repositories, not in any
    package registry: read from ../shared/agntcy when present, else the test is skipped
    with the reason shown)."""
    path = SHARED / "agntcy"
    if not path.is_dir():
        pytest.skip(f"AGNTCY example manifests not found at {path} (not in any registry)")
    return path


@pytest.fixture(scope="session")
def acpbench() -> Path:
    """The lab's stdio load driver (../shared/tools/acpbench.py), when present."""
    path = SHARED / "tools" / "acpbench.py"
    if not path.is_file():
        pytest.skip(f"the acpbench load driver is not at {path}")
    return path


@pytest.fixture(scope="module")
def postgres() -> Iterator[Any]:
    """A private PostgreSQL server (tests/cluster_support.py), started once per module
    that asks for it (skipped with the reason when PostgreSQL is not installed)."""
    import cluster_support as cs

    cs.need("postgresql")
    server = cs.start_postgres()
    try:
        yield server
    finally:
        server.stop()
