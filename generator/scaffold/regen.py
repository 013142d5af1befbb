"""`agentgen regen`: rewrite `_generated/` only; report what a new revision breaks.

Exit 0: regenerated (or already current), no user code affected. Exit 1: user
handlers must change (listed as `file:line: what`). `--dry-run` writes nothing.
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
            print(inputs.revision_report(old_schema, rendered.schema).text.rstrip())

    def text(rel: str) -> str:
        raw = old_files.get(rel)
        return raw.decode("utf-8", "replace") if raw is not None else ""

    findings: list[compat.Finding] = []
    new_disp = rendered.files.get("dispatcher.py", "")
    old_disp = text("dispatcher.py")
    if old_disp and new_disp:
        try:
            findings = compat.find_breakage(
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

    if findings:
        print(f"\n{len(findings)} place(s) in your code must change for the new dispatcher:")
        for finding in findings:
            print(str(finding))
        return 1
    return 0
