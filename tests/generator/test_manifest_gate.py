"""One set of manifest checks for every command, exit codes, and `new` leaving nothing
behind when it fails or is killed.

`validate`, `models --manifest` and `new` (and `regen`, `check`, which read the manifest
through the same scaffold input as `new`) pass every manifest through
`generator.manifest.validate.load_valid`: each broken case of tests/cases/manifests/ is
refused by all of them, at the location `validate` prints first, with exit 1.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scaffold_support import fake_pipeline, store, write_fake_schema  # noqa: F401 - fixtures
from typer.testing import CliRunner

from generator.cli import app
from generator.errors import InvalidInput
from generator.manifest.validate import validate_file

CASES = Path(__file__).resolve().parents[1] / "cases" / "manifests"
BROKEN = sorted(p for p in CASES.iterdir() if p.is_dir() and not p.name.startswith("valid-"))
REPO = Path(__file__).resolve().parents[2]


def _manifest(case: Path) -> Path:
    (found,) = [p for p in case.iterdir() if p.name in ("agent.yaml", "agent.json")]
    return found


def _first_location(case: Path) -> str:
    """`file:line:col` of the first line validate prints for the case."""
    first = (case / "expected.txt").read_text(encoding="utf-8").splitlines()[0]
    _, line, col, _ = first.split(":", 3)
    return f"{_manifest(case)}:{line}:{col}"


@pytest.mark.parametrize("case", BROKEN, ids=[c.name for c in BROKEN])
def test_models_and_new_refuse_what_validate_refuses(case: Path, tmp_path: Path) -> None:
    manifest = str(_manifest(case))
    runner = CliRunner()
    out = tmp_path / "models.py"
    res = runner.invoke(app, ["models", "--manifest", manifest, "-o", str(out)])
    assert res.exit_code == 1, res.output
    assert res.stderr.startswith(f"agentgen: error: {_first_location(case)}: "), res.stderr
    assert len(res.stderr.splitlines()) == 1 and not out.exists()

    target = tmp_path / "proj"
    res = runner.invoke(app, ["new", str(target), "--manifest", manifest])
    assert res.exit_code == 1, res.output
    assert res.stderr.startswith(f"agentgen: error: {_first_location(case)}: "), res.stderr
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no staging directory either


def test_models_manifest_refuses_a_dangling_ref_instead_of_any(tmp_path: Path) -> None:
    """Before: `models --manifest` turned a dangling $ref into RootModel[Any]."""
    case = CASES / "ref-unresolved"
    out = tmp_path / "m.py"
    res = CliRunner().invoke(app, ["models", "--manifest", str(_manifest(case)), "-o", str(out)])
    assert res.exit_code == 1 and "does not resolve" in res.stderr and not out.exists()


def test_a_syntax_error_is_a_finding_not_a_usage_error() -> None:
    """validate: 1 for a manifest that does not parse (a finding), 2 for a missing file."""
    proc = subprocess.run(
        [sys.executable, "-m", "agentgen", "validate", str(_manifest(CASES / "yaml-tab-indent"))],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "agentgen", "validate", "no/such/agent.yaml"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2 and "file not found" in proc.stdout + proc.stderr


def test_a_huge_number_is_located_not_a_traceback() -> None:
    for case in ("number-5000-digits-yaml", "number-5000-digits-json"):
        with pytest.raises(InvalidInput) as err:
            validate_file(_manifest(CASES / case))
        assert err.value.pointer == "/config/options/0/default"
        assert err.value.line == (5 if case.endswith("yaml") else 1)


# ---- file-system errors: one line, exit 2 ---------------------------------------------


def _manifest_file(tmp: Path) -> Path:
    path = tmp / "agent.yaml"
    path.write_text("name: research-agent\nversion: 0.1.0\n", encoding="utf-8")
    return path


def _new_args(tmp: Path, target: Path) -> list[str]:
    """`new` with the stand-in pipeline's schema (scaffold_support.fake_pipeline)."""
    schema = write_fake_schema(
        tmp / "s.json", {"initialize": ["InitializeRequest", "InitializeResponse"]}, {}
    )
    return ["new", str(target), "--manifest", str(_manifest_file(tmp)), "--schema", str(schema)]


@pytest.mark.usefixtures("fake_pipeline", "store")
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_new_on_a_full_or_read_only_disk_is_one_line(
    err: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from generator import files

    def fail(path: Path, *args: object, **kwargs: object) -> None:
        raise OSError(err, os.strerror(err), str(path))

    monkeypatch.setattr(files, "write_atomic", fail)
    monkeypatch.setattr("generator.scaffold.project.write_atomic", fail)
    parent = tmp_path / "out"
    parent.mkdir()
    res = CliRunner().invoke(app, _new_args(tmp_path, parent / "proj"))
    assert res.exit_code == 2, res.output
    (line,) = res.stderr.splitlines()
    assert line.startswith("agentgen: error: ") and os.strerror(err) in line
    assert "Traceback" not in res.output
    assert list(parent.iterdir()) == []  # the staging directory is gone too


@pytest.mark.usefixtures("fake_pipeline", "store")
def test_new_where_nothing_can_be_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    def fail(*args: object, **kwargs: object) -> str:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkdtemp", fail)
    res = CliRunner().invoke(app, _new_args(tmp_path, tmp_path / "proj"))
    assert res.exit_code == 2
    (line,) = res.stderr.splitlines()
    assert "Read-only file system" in line and str(tmp_path) in line


def test_an_internal_error_is_one_line_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    from generator.manifest import validate

    def boom(*args: object, **kwargs: object) -> int:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(validate, "run_validate", boom)
    monkeypatch.delenv("AGENTGEN_DEBUG", raising=False)
    res = CliRunner().invoke(app, ["validate", "x.yaml"])
    assert res.exit_code == 2
    (line,) = res.stderr.splitlines()
    assert line.startswith("agentgen: internal error: ZeroDivisionError")


# ---- an interrupted `new` leaves nothing behind ---------------------------------------


def _start_new(parent: Path, name: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentgen",
            "new",
            str(parent / name),
            "--manifest",
            str(REPO / "examples" / "echo" / "agent.yaml"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # Ctrl-C as a terminal delivers it: a run started in the background by a shell
        # without job control ignores SIGINT, and the child would inherit that (then the
        # SIGINT below did nothing and the test waited out the pause, 60 s, and failed)
        preexec_fn=_default_sigint,  # noqa: PLW1509 - one signal call, no lock taken
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for_staging(proc: subprocess.Popen[str], parent: Path) -> Path:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = [p for p in parent.iterdir() if ".agentgen-" in p.name]
        if found and (found[0] / ".agentgen-pid").exists():
            return found[0]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.005)  # a poll: the staging dir is made by another process
    raise AssertionError("no staging directory appeared")


@pytest.mark.slow
def test_sigterm_during_new_cleans_up(tmp_path: Path) -> None:
    proc = _start_new(tmp_path, "proj")
    _wait_for_staging(proc, tmp_path)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_ctrl_c_before_the_first_commit_leaves_nothing(tmp_path: Path) -> None:
    """SIGINT between "created agent project" and the first commit (before: the whole tree
    was left with a `.git` and no commit, and the next `new` into it refused)."""
    env = {**os.environ, "AGENTGEN_PAUSE_AT": "new:first-commit"}
    proc = _start_new(tmp_path, "proj", env=env)
    assert proc.stderr is not None
    line = proc.stderr.readline()  # the build is done; git is next
    assert line.strip() == "agentgen: paused at new:first-commit", line
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
    # and the same `new` without the interrupt makes the project, committed
    done = _start_new(tmp_path, "proj")
    out, err = done.communicate(timeout=120)
    assert done.returncode == 0, err
    assert "first commit" in out
    log = subprocess.run(
        ["git", "log", "--oneline"],
        cwd=tmp_path / "proj",
        capture_output=True,
        text=True,
        check=False,
    )
    assert log.returncode == 0 and "agentgen new: echo" in log.stdout


@pytest.mark.slow
@pytest.mark.usefixtures("fake_pipeline", "store")
def test_a_killed_new_is_swept_by_the_next(tmp_path: Path) -> None:
    proc = _start_new(tmp_path, "proj")
    staging = _wait_for_staging(proc, tmp_path)
    proc.kill()  # SIGKILL: no clean-up can run
    proc.communicate(timeout=60)
    assert staging.exists()
    res = CliRunner().invoke(app, _new_args(tmp_path, tmp_path / "other"))
    assert res.exit_code == 0, res.output
    assert not [p for p in tmp_path.iterdir() if ".agentgen-" in p.name]
    assert (tmp_path / "other" / "pyproject.toml").is_file()
