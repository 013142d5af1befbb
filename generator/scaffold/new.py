"""`agentgen new DIR`: copier renders the skeleton, agentgen writes `_generated/`.

The project is built in a temporary sibling directory and moved into place (one rename)
only when complete, so a failure leaves nothing behind and nothing existing is
overwritten. SIGTERM/SIGHUP during the build clean it up like an error does; a build
killed outright (SIGKILL, power loss) is swept by the next `new` in the same directory:
each staging directory records the id of the process building it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import AgentgenError
from ..names import summary
from ..render import input_kind, uses_callbacks, uses_model
from . import inputs, project, template_store


def _pep440(version: Any) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        return str(Version(str(version)))
    except InvalidVersion:
        return "0.1.0"


def _check_target(directory: Path) -> Path:
    if ".." in directory.parts:
        raise AgentgenError(
            "refusing a target path with '..' in it",
            source=str(directory),
            hint="give the directory without '..' (an absolute path works)",
        )
    target = directory.expanduser().absolute()
    if target.exists() or target.is_symlink():
        if not target.is_dir() or target.is_symlink():
            raise AgentgenError("exists and is not a directory", source=str(directory))
        if any(target.iterdir()):
            raise AgentgenError(
                "directory exists and is not empty; refusing to write into it",
                source=str(directory),
                hint="choose a new directory",
            )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AgentgenError(
            f"cannot create the parent directory: {exc.strerror}", source=str(target.parent)
        ) from None
    return target


STAGING = ".agentgen-"  # `.<target>.agentgen-XXXX`: a build in progress
_OWNER = ".agentgen-pid"
UNCLAIMED_AFTER = 60  # seconds: a staging directory with no owner record by then is dead


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, someone else's
        return True
    return True


def sweep_stale(parent: Path) -> None:
    """Remove the staging directories of `new` runs that died without cleaning up."""
    try:
        candidates = [p for p in parent.iterdir() if p.name.startswith(".") and STAGING in p.name]
    except OSError:
        return
    for path in candidates:
        if not path.is_dir() or path.is_symlink():
            continue
        try:
            pid = int((path / _OWNER).read_text(encoding="ascii"))
        except (OSError, ValueError):
            # no record yet: killed between mkdtemp and writing it, or being created now
            with contextlib.suppress(OSError):
                if time.time() - path.stat().st_mtime > UNCLAIMED_AFTER:
                    shutil.rmtree(path, ignore_errors=True)
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(path, ignore_errors=True)


class _Terminated(BaseException):
    """SIGTERM/SIGHUP while building: unwinds through the clean-up, then exits."""


@contextlib.contextmanager
def _cleanup_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into an exception so `finally` blocks run."""

    def handler(signum: int, frame: object) -> None:
        raise _Terminated(signum)

    previous: dict[int, object] = {}
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is None:
            continue
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread: signals stay as they are
            break
    try:
        yield
    except _Terminated as stop:
        raise SystemExit(128 + int(stop.args[0])) from None
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)  # type: ignore[arg-type]


def copier_answers(
    manifest: dict[str, Any], *, role: str, package: str, transport: str, manifest_file: str
) -> dict[str, Any]:
    name = manifest["name"] + ("-client" if role == "client" else "")
    title = manifest.get("title")
    return {
        "project_name": name,
        "package_name": package,
        "version": _pep440(manifest.get("version", "0.1.0")),
        "title": summary(title) or name,
        "summary": summary(manifest.get("description")),
        "transport": transport,
        "callbacks": role == "agent" and uses_callbacks(manifest),
        "llm": uses_model(manifest, role),
        # what the stub `prompt` receives: "blocks", "text" (a str) or "typed" (Input)
        "input_kind": input_kind(manifest),
        "commands": role == "agent" and bool(manifest.get("commands")),
        "manifest_file": manifest_file,
        # the stdio auth methods the handlers answer (hooks stubbed in handlers.py)
        "agent_login": role == "agent" and _declares(manifest, "agent"),
        "terminal_login": role == "agent" and _declares(manifest, "terminal"),
    }


def _declares(manifest: dict[str, Any], auth_type: str) -> bool:
    return any(
        isinstance(a, dict) and a.get("type") == auth_type for a in manifest.get("auth") or ()
    )


def run_copier_copy(dst: Path, role: str, answers: dict[str, Any]) -> None:
    import copier

    snap = template_store.snapshot(role, project.agentgen_version())
    try:
        copier.run_copy(
            snap.src_path,
            dst,
            data=answers,
            vcs_ref=snap.tag,
            defaults=True,
            overwrite=False,
            quiet=True,
            unsafe=False,
            skip_tasks=True,
        )
    except template_store.copier_errors() as exc:  # one clear line, no traceback
        raise AgentgenError(f"copier could not render the {role} template: {exc}") from None
    template_store.record_source(dst / ".copier-answers.yml")


def _abs(spec: str | None) -> str | None:
    if spec and inputs.is_local(spec):
        return str(Path(spec).expanduser().resolve())
    return spec


def _pause_point(name: str) -> None:
    """Tests only: with `AGENTGEN_PAUSE_AT=name`, say so on stderr and wait there (so a
    test can interrupt `new` at exactly this point)."""
    if os.environ.get("AGENTGEN_PAUSE_AT") == name:
        import sys

        print(f"agentgen: paused at {name}", file=sys.stderr, flush=True)
        time.sleep(60)


def run_new(
    directory: Path,
    *,
    manifest: Path,
    role: str = "agent",
    transport: str = "stdio",
    schema: str | Sequence[str] | None = None,
    meta: str | Sequence[str] | None = None,
    git: bool = False,
) -> int:
    """Build the project; with `git`, also make it a repository with a first commit
    (the command line's default: `--no-git` skips it)."""
    if role not in project.ROLES:
        raise AgentgenError(f"unknown role {role!r}", hint="agent | client")
    if transport not in project.TRANSPORTS:
        raise AgentgenError(f"unknown transport {transport!r}", hint="stdio | http")
    target = _check_target(directory)
    manifest_path = Path(manifest)
    data = inputs.load_manifest(manifest_path)
    package = project.package_name(data.get("name"), source=str(manifest_path))
    if role == "client":  # installable beside the agent it talks to
        package += "_client"
    # Local inputs as absolute paths: the build runs in a staging directory.
    pairs = [(_abs(s), _abs(m)) for s, m in inputs.schema_pairs(schema, meta)]
    (schema_spec, meta_spec), more = pairs[0], tuple(pairs[1:])

    sweep_stale(target.parent)
    commit = f"agentgen new: {data['name']} ({role}, {transport})" if git else None
    with _cleanup_on_signals():
        said = _build(
            target,
            data,
            manifest_path,
            role,
            transport,
            package,
            schema_spec,
            meta_spec,
            more,
            commit=commit,
        )
    named = data["name"] + ("-client" if role == "client" else "")
    print(f"created {role} project {named} ({transport}) in {directory}")
    if said is not None:
        print(said)
    model = role == "agent" and bool(data.get("llm"))
    print(next_steps(directory, data["name"], role, transport, model=model))
    return 0


def next_steps(
    directory: Path, name: str, role: str, transport: str, *, model: bool = False
) -> str:
    """What to type next: install the project, run it, test it (`model`: an agent with a
    model, whose key and model id come from the environment)."""
    script = f"{name}-client" if role == "client" else name
    editor: list[str] = []
    if role == "agent" and transport == "http":
        run = f"{script} --port 8000          # serves ACP on http://127.0.0.1:8000/acp"
    elif role == "agent":
        run = f"{script}                      # speaks ACP on stdio (an editor starts it)"
        from ..registry.entry import zed_snippet

        editor = zed_snippet(script, {"OPENAI_API_KEY": "your key"} if model else None)
    elif transport == "http":
        run = f"{script} --url http://127.0.0.1:8000/acp   # prompts from stdin"
    else:
        run = f"{script} -- AGENT_COMMAND...   # starts the agent, prompts from stdin"
    target = (
        "--url http://127.0.0.1:8000/acp"
        if transport == "http"
        else "-- " + (script if role == "agent" else "AGENT_COMMAND...")
    )
    watch = f"  agentgen inspect {target}   # drive it in a browser, every frame checked"
    install = '  python -m pip install -e ".[test]"'
    key = (
        "  export OPENAI_API_KEY=...   # the model's key (ANTHROPIC_API_KEY for anthropic:, "
        "OPENAI_BASE_URL for a gateway; ACP_MODEL picks the model, ACP_MODEL=test needs "
        f"no key; `{script} --help` lists them all)"
    )
    keys = [key] if model else []
    if Path(directory).name != script:  # the names come from the manifest, not the folder
        package = script.replace("-", "_")
        install += (
            f"   # installs {script} (command {script}, package {package}: the manifest's name)"
        )
    return "\n".join(
        [
            "next:",
            f"  cd {directory}",
            "  python -m venv .venv && . .venv/bin/activate   # an environment of its own",
            install,
            *keys,
            f"  {run}",
            watch,
            "  python -m pytest",
            (
                f"  your code: {name.replace('-', '_')}{'_client' if role == 'client' else ''}"
                "/handlers.py (never rewritten; `agentgen regen` updates _generated/)"
            ),
            *editor,
        ]
    )


def _build(
    target: Path,
    data: dict[str, Any],
    manifest_path: Path,
    role: str,
    transport: str,
    package: str,
    schema_spec: str | None,
    meta_spec: str | None,
    more: tuple[tuple[str | None, str | None], ...] = (),
    *,
    commit: str | None = None,
) -> str | None:
    """Build the project in a staging directory beside `target`; with `commit`, make it a
    repository with that first commit there too; then rename it into place. An interrupt
    (Ctrl-C, SIGTERM) at any point before the rename leaves nothing. Returns git's line."""
    suffix = manifest_path.suffix.lower()
    manifest_file = "agent.json" if suffix == ".json" else "agent.yaml"
    staging: Path | None = None
    try:
        try:
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}{STAGING}", dir=target.parent))
            # written whole or not at all: a sweep never reads half a pid
            (staging / "pid.tmp").write_text(str(os.getpid()), encoding="ascii")
            (staging / "pid.tmp").replace(staging / _OWNER)
        except OSError as exc:
            raise AgentgenError(
                f"cannot write here: {exc.strerror}", source=str(target.parent)
            ) from None
        build = staging / "project"
        answers = copier_answers(
            data, role=role, package=package, transport=transport, manifest_file=manifest_file
        )
        run_copier_copy(build, role, answers)
        shutil.copyfile(manifest_path, build / manifest_file)
        rendered = project.render(
            target,  # origins are recorded relative to the final place
            package,
            manifest_rel=manifest_file,
            role=role,
            transport=transport,
            schema_spec=schema_spec,
            meta_spec=meta_spec,
            manifest_path=build / manifest_file,
            more=more,
        )
        project.write_generated(build / package / project.GENERATED, rendered.files)
        if role == "agent" and transport == "stdio":  # editors launch stdio agents
            from ..registry.entry import write_entry

            write_entry(build, data, distribution=answers["project_name"])
        said = None
        if commit is not None:
            from .git_init import first_commit

            _pause_point("new:first-commit")
            said = first_commit(build, commit)
        if target.exists():
            target.rmdir()  # empty, checked above
        build.rename(target)
        return said
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
