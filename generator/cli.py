"""The `agentgen` command line: one Typer command per verb, no logic here.

Each command imports its implementation lazily (start-up time matters for
pre-commit) and returns the exit code that implementation gives.
"""

from __future__ import annotations

from pathlib import Path

import typer

from .errors import AgentgenError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Generate typed models, dispatchers and ready-to-run projects for ACP agents.",
    pretty_exceptions_enable=False,
    # plain help and usage errors: rendering them with rich costs ~0.1 s of start-up
    rich_markup_mode=None,
)

Fmt = typer.Option("text", "--format", help="text | json")


def _run(fn, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
    try:
        code = fn(*args, **kwargs)
    except AgentgenError as err:
        typer.echo(f"agentgen: error: {err}", err=True)
        raise typer.Exit(err.exit_code) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    raise typer.Exit(code or 0)


@app.command()
def methods(
    schema: str = typer.Argument(
        ..., help="Protocol schema: path, http(s) URL or npm:PKG@VER#PATH"
    ),
    meta: str | None = typer.Option(None, "--meta", help="meta.json / meta.unstable.json"),
    fmt: str = typer.Option("table", "--format", help="table | json"),
) -> None:
    """Print the method table derived from a protocol schema."""
    from .protocol.methods import run_methods

    _run(run_methods, schema, meta=meta, fmt=fmt)


@app.command()
def models(
    schema: str | None = typer.Argument(
        None, help="Protocol schema (default: the locked upstream)"
    ),
    meta: str | None = typer.Option(None, "--meta", help="meta.json / meta.unstable.json"),
    manifest: Path | None = typer.Option(None, "--manifest", help="Generate a manifest's models"),
    out: Path = typer.Option(..., "-o", "--out", help="Output .py file"),
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
    old: str = typer.Argument(..., help="Old protocol schema"),
    new: str = typer.Argument(..., help="New protocol schema"),
    fmt: str = Fmt,
) -> None:
    """Report what changed between two protocol schema revisions."""
    from .protocol.diff import run_diff

    _run(run_diff, old, new, fmt=fmt)


@app.command()
def validate(
    files: list[Path] = typer.Argument(..., help="Manifests (YAML or JSON)"),
    fmt: str = Fmt,
) -> None:
    """Validate agent manifests: exit 0 valid, 1 invalid, 2 usage error."""
    from .manifest.validate import run_validate

    _run(run_validate, files, fmt=fmt)


@app.command()
def new(
    directory: Path = typer.Argument(..., help="Directory to create"),
    manifest: Path = typer.Option(..., "--manifest", "-m", help="Agent manifest"),
    role: str = typer.Option("agent", "--role", help="agent | client"),
    transport: str = typer.Option("stdio", "--transport", help="stdio | http"),
    schema: list[str] | None = typer.Option(
        None,
        "--schema",
        help="Protocol schema (default: locked); repeat it to serve several revisions (v1 and v2)",
    ),
    meta: list[str] | None = typer.Option(
        None, "--meta", help="meta.json for the schema (one per --schema, in order)"
    ),
) -> None:
    """Scaffold a ready-to-run agent or client project."""
    from .scaffold.new import run_new

    _run(
        run_new,
        directory,
        manifest=manifest,
        role=role,
        transport=transport,
        schema=schema,
        meta=meta,
    )


@app.command()
def regen(
    project: Path = typer.Option(Path("."), "--project", "-p", help="Generated project"),
    schema: list[str] | None = typer.Option(
        None, "--schema", help="New protocol schema; repeat it to serve several revisions"
    ),
    meta: list[str] | None = typer.Option(
        None, "--meta", help="meta.json for the new schema (one per --schema, in order)"
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Report only, touch nothing"),
) -> None:
    """Regenerate a project's _generated/ package; user code is never touched."""
    from .scaffold.regen import run_regen

    _run(run_regen, project, schema=schema, meta=meta, dry_run=dry_run)


@app.command()
def check(
    project: Path = typer.Option(Path("."), "--project", "-p", help="Generated project"),
) -> None:
    """Exit 1 when generated files are stale against their recorded inputs."""
    from .scaffold.check import run_check

    _run(run_check, project)


@app.command()
def update(
    project: Path = typer.Option(Path("."), "--project", "-p", help="Generated project"),
) -> None:
    """Apply template changes with copier's 3-way merge; exit 1 on conflicts."""
    from .scaffold.update import run_update

    _run(run_update, project)


def main() -> None:
    app(prog_name="agentgen")


if __name__ == "__main__":  # pragma: no cover
    main()
