"""The typed seam between the generator and the runtime (issue 21 item 4): the generator
imports the runtime's revision module (templates/runtime/wire/revision.py, reached as
`generator.protocol.runtime_revision`) like any other module, so `describe` returns the
runtime's own `Revision` and mypy sees its fields."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

from generator.protocol import runtime_revision
from generator.protocol.revision import describe, revision_source
from generator.sources import load_schema

REPO = Path(__file__).resolve().parents[2]


def test_the_generator_and_the_runtime_read_one_revision_module(tmp_path: Path) -> None:
    import runtime.wire.revision  # the runtime as a generated project lays it out

    one = Path(runtime_revision.__file__).resolve()
    assert one == (REPO / "templates" / "runtime" / "wire" / "revision.py").resolve()
    assert one == Path(runtime.wire.revision.__file__).resolve()
    rev = describe(dict(load_schema(None).data))
    # an instance of a normally imported module's class, not of a module loaded by path
    assert type(rev) is runtime_revision.Revision
    assert type(rev).__module__ == "generator.protocol.runtime_revision"
    # what the project's _generated/revision.py says is that same description, read back
    # through the runtime's own classes
    source = revision_source(rev).replace(
        "from .runtime.wire.revision", "from runtime.wire.revision"
    )
    (tmp_path / "revision.py").write_text(source, encoding="utf-8")
    assert repr(runpy.run_path(str(tmp_path / "revision.py"))["REVISION"]) == repr(rev)


def test_mypy_sees_the_fields_of_the_described_revision(tmp_path: Path) -> None:
    """No `Any` across the seam: a misspelt field of `describe(...)`'s result is a type
    error, and a right one has the runtime's declared type."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from generator.protocol.revision import describe\n"
        "rev = describe({})\n"
        "reveal_type(rev.turn.lifecycle)\n"
        "rev.turn.no_such_field\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(probe)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = done.stdout + done.stderr
    assert 'Revealed type is "str"' in out, out
    assert '"TurnShape" has no attribute "no_such_field"' in out, out
