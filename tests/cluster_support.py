"""Private PostgreSQL, Redis, HAProxy and Prometheus servers on 127.0.0.1 for the
multi-replica tests and ``make cluster`` (OS packages: postgresql, redis-server, haproxy,
prometheus; .ci/run installs them).

Each ``start_*`` returns a ``Server`` (url, process, stop()) in a directory of its own.  When
a binary is missing ``need()`` skips the test outside CI, saying what to install, and fails it
in CI (``CI=true``), where .ci/run must have installed it.  PostgreSQL refuses to run as
root: as root the instance runs as ``nobody`` in a directory it owns.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI") == "true"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start on 127.0.0.1:{port}")
        time.sleep(0.05)  # a poll: the server is another process, no notice it listens


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    dir: Path
    port: int
    stops: list[list[str]] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)  # how it was started: restart() runs it again
    crash: list[str] = field(default_factory=list)  # an abrupt stop (else SIGKILL)

    def outage(self) -> None:
        """Stop the server abruptly (PostgreSQL: ``pg_ctl stop -m immediate``); its data
        stays for ``restart()``."""
        if self.crash:
            subprocess.run(self.crash, capture_output=True, timeout=60, check=True)
        else:
            self.proc.kill()
        self.proc.wait(30)

    def restart(self) -> None:
        """Start it again on the same port and data directory, after ``outage()``."""
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.dir
        )
        _wait_port(self.port, self.proc, "the restarted server")

    def stop(self) -> None:
        for cmd in self.stops:
            subprocess.run(cmd, capture_output=True, timeout=60, check=False)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: p.split("/")[4])
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def missing() -> list[str]:
    """Debian packages of the servers that are not installed."""
    out = []
    if postgres_bin() is None:
        out.append("postgresql")
    if shutil.which("redis-server") is None:
        out.append("redis-server")
    if shutil.which("haproxy") is None:
        out.append("haproxy")
    if shutil.which("prometheus") is None:
        out.append("prometheus")
    return out


def need(*packages: str) -> None:
    """Skip (outside CI) or fail (in CI) unless these servers are installed."""
    gone = [p for p in missing() if p in packages]
    if not gone:
        return
    message = f"needs the OS packages {' '.join(gone)} (apt-get install {' '.join(gone)})"
    if IN_CI:
        pytest.fail(f"{message}: .ci/run should have installed them")
    pytest.skip(f"{message}; not in CI, so skipped")


def _as_user() -> tuple[list[str], int | None, int | None]:
    """PostgreSQL must not run as root: (command prefix, uid, gid) of an unprivileged user."""
    if os.geteuid() != 0:
        return [], None, None
    pw = pwd.getpwnam("nobody")
    return (
        ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups"],
        (pw.pw_uid),
        pw.pw_gid,
    )


def start_postgres() -> Server:
    bindir = postgres_bin()
    assert bindir is not None
    base = Path(tempfile.mkdtemp(prefix="acp-pg-"))
    data = base / "data"
    prefix, uid, gid = _as_user()
    if uid is not None:
        os.chmod(base, 0o755)
        os.chown(base, uid, gid or -1)
    port = free_port()
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
        timeout=120,
        cwd=base,
    )
    argv = [
        *prefix,
        str(bindir / "postgres"),
        "-D",
        str(data),
        "-p",
        str(port),
        "-h",
        "127.0.0.1",
        "-k",
        str(base),
        "-c",
        "fsync=off",
        "-c",
        "max_connections=200",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=base)
    _wait_port(port, proc, "PostgreSQL")
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    # accepting TCP is not yet accepting logins: wait for a query to work
    deadline = time.monotonic() + 30
    import psycopg

    while True:
        try:
            with psycopg.connect(url, connect_timeout=2) as c:
                c.execute("SELECT 1")
            break
        except psycopg.OperationalError:
            if proc.poll() is not None:  # it could not bind: another process took the port
                shutil.rmtree(base, ignore_errors=True)
                return start_postgres()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # a poll: PostgreSQL is another process, no notice of logins
    crash = [*prefix, str(bindir / "pg_ctl"), "stop", "-D", str(data), "-m", "immediate", "-w"]
    return Server(url, proc, base, port, argv=argv, crash=crash)


def fresh_database(server: Server) -> str:
    """A new empty database on ``server``; its URL."""
    import uuid

    import psycopg

    name = "t" + uuid.uuid4().hex[:12]
    with psycopg.connect(server.url, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    return server.url.rsplit("/", 1)[0] + "/" + name


def start_redis() -> Server:
    base = Path(tempfile.mkdtemp(prefix="acp-redis-"))
    port = free_port()
    argv = [
        str(shutil.which("redis-server")),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(base),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_port(port, proc, "Redis")
    return Server(f"redis://127.0.0.1:{port}/0", proc, base, port, argv=argv)


def start_prometheus(targets: list[str], interval: float = 1.0) -> Server:
    """Prometheus scraping each ``host:port`` of `targets` (their ``/metrics``) every
    `interval` seconds; its HTTP API at the returned url (``http://127.0.0.1:<port>``)."""
    base = Path(tempfile.mkdtemp(prefix="acp-prometheus-"))
    port = free_port()
    every = f"{interval:g}s"
    listed = ", ".join(f'"{t}"' for t in targets)
    (base / "prometheus.yml").write_text(
        f"global: {{scrape_interval: {every}, evaluation_interval: {every}}}\n"
        "scrape_configs:\n"
        f"  - {{job_name: acp, metrics_path: /metrics, static_configs: [{{targets: [{listed}]}}]}}\n"
    )
    argv = [
        str(shutil.which("prometheus")),
        f"--config.file={base / 'prometheus.yml'}",
        f"--storage.tsdb.path={base / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=base)
    _wait_port(port, proc, "Prometheus")
    return Server(f"http://127.0.0.1:{port}", proc, base, port, argv=argv)
