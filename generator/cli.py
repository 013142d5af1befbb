"""The `agentgen` command line: one Typer command per verb, no logic here.

Each command imports its implementation lazily (start-up time matters for
pre-commit) and returns the exit code that implementation gives (generator/guard.py:
0 clean, 1 findings in the input, 2 usage, environment or internal error).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import typer

from .guard import run_guarded


def _posix_usage() -> None:
    """Typer's plain help writes required arguments as `{DIR}` in usage lines and adds
    `<path>` / `<list[Path]>` after their names: write `DIR`, `[SCHEMA]`, `FILE...` as
    POSIX usage does. (Leaves Typer alone if its internals differ.)"""
    arg = getattr(typer.core, "TyperArgument", None)
    if arg is None or not hasattr(arg, "_usage_display_name") or not hasattr(arg, "display_type"):
        return
    shown_type = arg.display_type

    def usage(self: typer.core.TyperArgument) -> str:
        name = self.metavar or (self.name or "ARG").upper()
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    def display_type(self: typer.core.TyperArgument, ctx: object) -> str:
        return "" if self.metavar else shown_type(self, ctx)

    arg._usage_display_name = usage  # noqa: SLF001 - Typer's usage hook, patched on purpose
    arg.display_type = display_type


_posix_usage()

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # plain help and usage errors: rendering them with rich costs ~0.1 s of start-up
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class Role(StrEnum):
    agent = "agent"
    client = "client"


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


class TextFormat(StrEnum):
    text = "text"
    json = "json"


class TableFormat(StrEnum):
    table = "table"
    json = "json"


SCHEMA_HELP = "Protocol schema: a path, an http(s) URL or npm:PKG@VER#PATH"


def _run(fn, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
    raise typer.Exit(run_guarded(fn, *args, **kwargs))


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            line = f"agentgen {version('acp-agentgen')}"
        except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
            line = "agentgen (not installed)"
        from .sources import default_schema_line

        typer.echo(f"{line}; default protocol schema: {default_schema_line()}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: bool = typer.Option(
        False,
        "--version",
        "-V",
        callback=_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """Generate typed models, dispatchers and ready-to-run projects for ACP agents.

    Exit codes: 0 clean, 1 findings in the input, 2 usage or internal error.
    """


@app.command()
def methods(
    schema: str | None = typer.Argument(
        None, metavar="SCHEMA", help=SCHEMA_HELP + " (default: the locked upstream)"
    ),
    meta: str | None = typer.Option(
        None, "--meta", metavar="FILE", help="meta.json / meta.unstable.json"
    ),
    fmt: TableFormat = typer.Option(TableFormat.table, "--format", help="Output format."),
) -> None:
    """Print the method table derived from a protocol schema."""
    from .protocol.methods import run_methods

    _run(run_methods, schema, meta=meta, fmt=fmt.value)


@app.command()
def models(
    schema: str | None = typer.Argument(
        None, metavar="SCHEMA", help=SCHEMA_HELP + " (default: the locked upstream)"
    ),
    meta: str | None = typer.Option(
        None, "--meta", metavar="FILE", help="meta.json / meta.unstable.json"
    ),
    manifest: Path | None = typer.Option(
        None, "--manifest", "-m", metavar="FILE", help="Generate a manifest's models instead."
    ),
    out: Path = typer.Option(..., "-o", "--out", metavar="OUT.py", help="Output .py file"),
) -> None:
    """Generate pydantic v2 models for a protocol schema or an agent manifest."""
    if manifest is not None:
        from .manifest.models import run_manifest_models

        _run(run_manifest_models, manifest, out=out)
    else:
        from .protocol.models import run_models

        _run(run_models, schema, meta=meta, out=out)


@app.command()
def diff(
    old: str = typer.Argument(..., metavar="OLD", help="The old protocol schema"),
    new: str = typer.Argument(..., metavar="NEW", help="The new protocol schema"),
    fmt: TextFormat = typer.Option(TextFormat.text, "--format", help="Output format."),
    fail_on_breaking: bool = typer.Option(
        False, "--fail-on-breaking", help="Exit 1 when any change is breaking (for CI)."
    ),
) -> None:
    """Report what changed between two protocol schema revisions (BREAKING marked)."""
    from .protocol.diff import run_diff

    _run(run_diff, old, new, fmt=fmt.value, fail_on_breaking=fail_on_breaking)


class Kind(StrEnum):
    text = "text"
    json = "json"


@app.command()
def init(
    directory: Path = typer.Argument(Path("."), metavar="[DIR]", help="Where to write agent.yaml"),
    name: str | None = typer.Option(None, "--name", help="Agent name (default: the folder's)."),
    description: str | None = typer.Option(None, "--description", help="One sentence."),
    input_kind: Kind | None = typer.Option(
        None, "--input", help="Prompt as text or a JSON object."
    ),
    output_kind: Kind | None = typer.Option(None, "--output", help="Result as text or JSON."),
    streaming: bool | None = typer.Option(
        None, "--streaming/--no-streaming", help="Stream output while working."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        help="A pydantic-ai model id (openai:gpt-4.1-mini): the agent runs a model.",
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Defaults for every unanswered question."),
    example: str | None = typer.Option(
        None,
        "--example",
        help="Write an example's agent.yaml and handlers.py instead (coder, assistant, ...).",
    ),
) -> None:
    """Write a commented starter agent.yaml, asking on a terminal (a flag for each question)."""
    import sys

    from .scaffold.init import run_example, run_init

    if example is not None:
        given = (name, description, input_kind, output_kind, streaming, model)
        _run(run_example, directory, example, alone=all(v is None for v in given))

    _run(
        run_init,
        directory,
        name=name,
        description=description,
        input_kind=input_kind.value if input_kind else None,
        output_kind=output_kind.value if output_kind else None,
        streaming=streaming,
        model=model,
        yes=yes,
        interactive=sys.stdin.isatty(),
    )


@app.command()
def validate(
    files: list[Path] = typer.Argument(
        ..., metavar="FILE", help="Manifests (YAML or JSON; AGNTCY documents too)"
    ),
    fmt: TextFormat = typer.Option(TextFormat.text, "--format", help="Output format."),
) -> None:
    """Validate agent manifests: exit 0 valid, 1 invalid, 2 usage error."""
    from .manifest.validate import run_validate

    _run(run_validate, files, fmt=fmt.value)


@app.command()
def new(
    directory: Path = typer.Argument(..., metavar="DIR", help="Directory to create"),
    manifest: Path = typer.Option(
        ..., "--manifest", "-m", metavar="FILE", help="The agent manifest"
    ),
    role: Role = typer.Option(Role.agent, "--role", help="Scaffold the agent or a client."),
    transport: Transport = typer.Option(
        Transport.stdio, "--transport", help="stdio (one process per client) or HTTP (/acp)."
    ),
    schema: list[str] | None = typer.Option(
        None,
        "--schema",
        metavar="SCHEMA",
        help=SCHEMA_HELP + " (default: the locked one); repeat it to serve several revisions",
    ),
    meta: list[str] | None = typer.Option(
        None, "--meta", metavar="FILE", help="meta.json for the schema (one per --schema)"
    ),
    git: bool = typer.Option(
        True, "--git/--no-git", help="git init and a first commit (when git is installed)."
    ),
) -> None:
    """Scaffold a ready-to-run agent or client project."""
    from .scaffold.new import run_new

    _run(
        run_new,
        directory,
        manifest=manifest,
        role=role.value,
        transport=transport.value,
        schema=schema,
        meta=meta,
        git=git,
    )


ProjectDir = typer.Option(Path("."), "--project", "-p", metavar="DIR", help="The generated project")


@app.command()
def regen(
    project: Path = ProjectDir,
    schema: list[str] | None = typer.Option(
        None, "--schema", metavar="SCHEMA", help="A new protocol schema; repeat it for several"
    ),
    meta: list[str] | None = typer.Option(
        None, "--meta", metavar="FILE", help="meta.json for the new schema (one per --schema)"
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Report only, touch nothing"),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="Also print the full revision report, type by type, and each rewritten file",
    ),
    report: Path | None = typer.Option(
        None, "--report", metavar="FILE", help="Write the full revision report to FILE"
    ),
) -> None:
    """Regenerate a project's _generated/ package; user code is never touched.

    Prints what of yours must change (file:line) first, then one line per protocol
    revision, and ends with a one-line result."""
    from .scaffold.regen import run_regen

    _run(
        run_regen,
        project,
        schema=schema,
        meta=meta,
        dry_run=dry_run,
        verbose=verbose,
        report=report,
    )


@app.command()
def check(
    project: Path = ProjectDir,
    every: bool = typer.Option(
        False,
        "--all",
        help="Check every generated project under --project (default .); none found passes.",
    ),
) -> None:
    """Exit 1 when generated files are stale against their recorded inputs."""
    from .scaffold.check import run_check, run_check_all

    _run(run_check_all if every else run_check, project)


@app.command()
def update(project: Path = ProjectDir) -> None:
    """Apply template changes with copier's 3-way merge; exit 1 on conflicts."""
    from .scaffold.update import run_update

    _run(run_update, project)


@app.command(context_settings={"allow_interspersed_args": False})
def inspect(
    command: list[str] | None = typer.Argument(
        None, metavar="[-- CMD ARGS...]", help="The agent to start (stdio)"
    ),
    url: str | None = typer.Option(
        None, "--url", metavar="URL", help="An HTTP agent's endpoint (.../acp) instead of a command"
    ),
    websocket: bool = typer.Option(False, "--websocket", help="Reach --url over a WebSocket"),
    schema: str | None = typer.Option(
        None, "--schema", metavar="SCHEMA", help=SCHEMA_HELP + " (default: the locked one)"
    ),
    cwd: Path | None = typer.Option(
        None, "--cwd", metavar="DIR", help="The session folder: files and terminals stay in it"
    ),
    port: int = typer.Option(0, "--port", metavar="N", help="The page's port (0: a free one)"),
    no_open: bool = typer.Option(False, "--no-open", help="Print the URL, open no browser"),
    auto_approve: bool = typer.Option(
        False,
        "--auto-approve",
        help="Allow the agent's file writes and terminal commands without asking",
    ),
) -> None:
    """See and drive an ACP agent in a local web page: every frame shown, schema-checked."""
    from .inspect import run_inspect

    _run(
        run_inspect,
        command,
        url=url,
        websocket=websocket,
        schema=schema,
        cwd=cwd,
        port=port,
        open_browser=not no_open,
        auto_approve=auto_approve,
    )


conform_app = typer.Typer(
    no_args_is_help=True,
    help="Judge an ACP agent or client against the protocol's requirements (exit 0 "
    "CONFORMANT, 1 not, 2 usage).",
)
app.add_typer(conform_app, name="conform")

ConformProtocol = typer.Option(
    "both", "--protocol", metavar="1|2|both", help="The protocol version(s) to judge"
)
ConformSchemas = typer.Option(
    None,
    "--schema",
    metavar="SCHEMA",
    help=SCHEMA_HELP + " (repeat for each revision; default: the locked v1 and v2)",
)


@conform_app.command("agent", context_settings={"allow_interspersed_args": False})
def conform_agent(
    target: list[str] | None = typer.Argument(
        None,
        metavar="-- CMD ARGS...",
        help="The agent's command (stdio: a fresh process per check)",
    ),
    protocol: str = ConformProtocol,
    schema: list[str] | None = ConformSchemas,
    json_out: bool = typer.Option(False, "--json", help="The report as JSON on stdout"),
    junit: Path | None = typer.Option(
        None,
        "--junit",
        metavar="FILE",
        help="Also write a JUnit XML report (one testcase per requirement)",
    ),
    keyword: str | None = typer.Option(
        None,
        "-k",
        metavar="WORD",
        help="Only the checks whose name or requirement id holds WORD ('not WORD': all others)",
    ),
    cwd: Path | None = typer.Option(
        None, "--cwd", metavar="DIR", help="The sessions' folder (default: a temporary one)"
    ),
    timeout: float = typer.Option(
        10.0, "--timeout", metavar="S", help="Seconds to wait for one response"
    ),
    quiet: float = typer.Option(
        0.5, "--quiet", metavar="S", help="Seconds of silence that mean 'nothing more arrives'"
    ),
    cancel_prompt: str | None = typer.Option(
        None,
        "--cancel-prompt",
        metavar="TEXT",
        help="A prompt that keeps the agent busy long enough to cancel it",
    ),
    auth_method: str | None = typer.Option(
        None, "--auth-method", metavar="ID", help="Authenticate with this advertised method first"
    ),
    jobs: int = typer.Option(
        2, "--jobs", "-j", metavar="N", help="Checks run at once (each its own agent)"
    ),
    launch: str | None = typer.Option(
        None, "--launch", metavar="CMD", help="Start this server first (stopped at the end)"
    ),
    ready_url: str | None = typer.Option(
        None,
        "--ready-url",
        metavar="URL",
        help="--launch's server is ready when this answers (default: the agent's URL)",
    ),
) -> None:
    """Judge an agent: `agentgen conform agent -- CMD...` (stdio) or `... agent URL`."""
    from .conform import run_conform_agent

    _run(
        run_conform_agent,
        target or [],
        protocol=protocol,
        schemas=schema,
        json_out=json_out,
        junit=junit,
        keyword=keyword,
        cwd=cwd,
        timeout=timeout,
        quiet=quiet,
        cancel_prompt=cancel_prompt,
        auth_method=auth_method,
        jobs=jobs,
        launch=launch,
        ready_url=ready_url,
    )


@conform_app.command("client", context_settings={"allow_interspersed_args": False})
def conform_client(
    command: list[str] | None = typer.Argument(
        None,
        metavar="-- CMD ARGS... {agent}",
        help="The client's command; {agent} is replaced by a command that connects it to the kit",
    ),
    protocol: str = ConformProtocol,
    schema: list[str] | None = ConformSchemas,
    json_out: bool = typer.Option(False, "--json", help="The report as JSON on stdout"),
    junit: Path | None = typer.Option(
        None, "--junit", metavar="FILE", help="Also write a JUnit XML report"
    ),
    prompt_via: str = typer.Option(
        "stdin",
        "--prompt-via",
        metavar="stdin|arg",
        help="How the client gets its prompt ({prompt} for arg)",
    ),
    timeout: float = typer.Option(
        15.0, "--timeout", metavar="S", help="Seconds for one check's turn"
    ),
    serve: str = typer.Option(
        "ws",
        "--serve",
        metavar="ws|http",
        help="What {url} is: a WebSocket or a Streamable HTTP endpoint the kit serves",
    ),
) -> None:
    """Judge a client: the kit plays the agent (`agentgen conform client -- CMD... {agent}`)."""
    from .conform import run_conform_client

    _run(
        run_conform_client,
        command or [],
        protocol=protocol,
        schemas=schema,
        json_out=json_out,
        junit=junit,
        prompt_via=prompt_via,
        timeout=timeout,
        serve=serve,
    )


@conform_app.command("list")
def conform_list(
    protocol: str = ConformProtocol,
    schema: list[str] | None = ConformSchemas,
    json_out: bool = typer.Option(False, "--json", help="The catalogue as JSON"),
) -> None:
    """The requirement catalogue: id, tier, capability gate, citation, text."""
    from .conform import run_conform_list

    _run(run_conform_list, protocol, schema, json_out)


registry_app = typer.Typer(
    no_args_is_help=True,
    help="The ACP registry entry of an agent (acp-registry/<id>/agent.json + icon.svg).",
)
app.add_typer(registry_app, name="registry")


@registry_app.command("check")
def registry_check(
    directory: Path = typer.Argument(
        Path("."),
        metavar="DIR",
        help="An entry folder (<id>/agent.json), a folder of entries, or a project",
    ),
    launch: bool = typer.Option(
        False,
        "--launch",
        help="Also build the wheel, run it with uvx under a temporary HOME and check the "
        "initialize handshake and its auth methods",
    ),
) -> None:
    """Check entries as the registry's CI does: one located line per problem, exit 1."""
    from .registry.check import run_registry_check

    _run(run_registry_check, directory, launch=launch)


def main() -> None:
    app(prog_name="agentgen")


if __name__ == "__main__":  # pragma: no cover
    main()
