"""`agentgen regen`: rewrite `_generated/` only; report what a new revision breaks.

Exit 0: regenerated (or already current), nothing of the user's affected. Exit 1, each
listed as `file:line: what` with what to do: user handlers must change; a message this
project sends gained a required field (the runtime and any code building it must send
it); the project's tests write a message the new revision no longer accepts.
`--dry-run` writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import AgentgenError
from . import compat, inputs, project


def _abs_spec(spec: str | None) -> str | None:
    if spec and inputs.is_local(spec):
        return str(Path(spec).expanduser().resolve())
    return spec


def run_regen(
    project_dir: Path,
    *,
    schema: str | Sequence[str] | None = None,
    meta: str | Sequence[str] | None = None,
    dry_run: bool = False,
) -> int:
    proj = project.find_project(project_dir)
    gen = proj.generated_dir
    old_files = project.existing_files(gen)
    new_schema = bool(inputs.specs(schema))
    pairs = [(_abs_spec(s), _abs_spec(m)) for s, m in inputs.schema_pairs(schema, meta)]
    if not new_schema and inputs.specs(meta):  # a new meta table for the recorded schema
        pairs = [(None, _abs_spec(inputs.specs(meta)[0]))]
    rendered = project.render_recorded(
        proj,
        schema_spec=pairs[0][0],
        meta_spec=pairs[0][1],
        new_schema=new_schema,
        more=tuple(pairs[1:]) if new_schema else (),
    )

    findings: list[compat.Finding] = []
    recorded_sha = proj.source["schema"].get("sha256")
    if recorded_sha and recorded_sha != rendered.schema.sha256:
        print(f"protocol schema: {proj.source['schema'].get('origin')} -> {rendered.schema.origin}")
        old_origin = proj.source["schema"].get("origin")
        try:
            old_schema = inputs.load_schema(
                project.resolve_origin(old_origin, proj.root) if old_origin else None
            )
        except AgentgenError as err:
            print(f"(no revision report: the recorded schema is not available: {err})")
        else:
            if old_schema.sha256 != recorded_sha:
                print(
                    "(note: the recorded schema changed since generation; comparing with it as it is now)"
                )
            report = inputs.revision_report(old_schema, rendered.schema)
            print(report.text.rstrip())
            findings += compat.newly_required_to_send(
                report.entries,
                rendered.schema.data,
                str(proj.source.get("role") or "agent"),
                source=rendered.schema.origin,
            )
            findings += compat.check_tests(
                sorted((proj.root / "tests").rglob("*.py")),
                proj.root,
                old_schema.data,
                rendered.schema.data,
            )

    def text(rel: str) -> str:
        raw = old_files.get(rel)
        return raw.decode("utf-8", "replace") if raw is not None else ""

    handler_findings: list[compat.Finding] = []
    new_disp = rendered.files.get("dispatcher.py", "")
    old_disp = text("dispatcher.py")
    if old_disp and new_disp:
        try:
            handler_findings = compat.find_breakage(
                package_dir=proj.root / proj.package,
                root=proj.root,
                old_dispatcher=old_disp,
                new_dispatcher=new_disp,
                old_models=text("models.py"),
                new_models=rendered.files.get("models.py", ""),
            )
        except SyntaxError as exc:
            raise AgentgenError(
                f"cannot read the old dispatcher: {exc.msg}",
                source=str(gen / "dispatcher.py"),
                line=exc.lineno,
                hint="restore _generated/ from version control or run `agentgen check`",
            ) from None

    added, modified, removed = project.changed_files(gen, rendered.files)
    prefix = f"{proj.package}/{project.GENERATED}/"
    verb = "would " if dry_run else ""
    for label, names in (("add", added), ("update", modified), ("remove", removed)):
        for name in names:
            print(f"{verb}{label} {prefix}{name}")
    if not (added or modified or removed):
        print(f"{prefix} is up to date")
    if not dry_run:
        project.write_generated(gen, rendered.files)
    deps = compat.missing_dependencies(
        proj.root / "pyproject.toml", rendered.files, proj.package, prefix
    )

    if handler_findings:
        n = len(handler_findings)
        print(f"\n{n} place(s) in your code must change for the new dispatcher:")
        for finding in handler_findings:
            print(str(finding))
    sends = [f for f in findings if f.line == 0]
    if sends:
        print(f"\n{len(sends)} field(s) newly required in what this project sends:")
        for finding in sends:
            print(str(finding))
    tests = [f for f in findings if f.line != 0]
    if tests:
        print(f"\n{len(tests)} place(s) in your tests must change for the new revision:")
        for finding in tests:
            print(str(finding))
    if deps:
        print(f"\n{len(deps)} dependency(ies) missing from your pyproject.toml:")
        for finding in deps:
            print(str(finding))
    return 1 if handler_findings or findings or deps else 0
