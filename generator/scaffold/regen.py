"""`agentgen regen`: rewrite `_generated/` only; report what a new revision breaks.

Exit 0: regenerated (or already current), nothing of the user's affected. Exit 1 only
for what the user must change, each listed as `file:line: what` with what to do: user
handlers must change; code of theirs builds a message that gained a required field; the
project's tests write a message the new revision no longer accepts; a dependency is
missing. A field newly required in a message only the runtime builds is information.
Several `--schema`s: a revision report per revision, against the recorded schema of the
same revision (else the first recorded). `--dry-run` writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    runtime_sends: list[compat.Required] = []
    role = str(proj.source.get("role") or "agent")
    recorded = _recorded(proj.source)
    served = [rendered.schema, *rendered.more]
    several = len(served) > 1 or len(recorded) > 1
    for new in served:
        old_rec = _counterpart(recorded, new)
        if old_rec.get("sha256") == new.sha256:
            continue
        label = f" ({_lifecycle(new.revision)})" if several else ""
        print(f"protocol schema{label}: {old_rec.get('origin')} -> {new.origin}")
        old_schema = _old_schema(proj, old_rec)
        if old_schema is None:
            continue
        report = inputs.revision_report(old_schema, new)
        print(report.text.rstrip())
        required = compat.required_to_send(report.entries, new.data, role)
        built = compat.user_references(
            proj.root / proj.package, proj.root, {r.owner for r in required}
        )
        for req in required:
            if req.owner not in built:
                runtime_sends.append(req)
            for use in built.get(req.owner, ()):
                findings.append(
                    compat.Finding(
                        use.path,
                        use.line,
                        f"builds {req.owner}: {req.subject} is newly required in what this "
                        f"{role} sends ({req.where}): send it",
                    )
                )
        findings += compat.check_tests(
            sorted((proj.root / "tests").rglob("*.py")), proj.root, old_schema.data, new.data
        )
    if new_schema:
        kept = {_lifecycle(s.revision) for s in served}
        for rec in recorded:
            gone = _lifecycle(rec.get("revision") or {})
            if gone not in kept:
                print(
                    f"no longer served: {gone} ({rec.get('origin')}); its peers are refused. "
                    "Serve both: repeat --schema, one per revision"
                )
        findings = sorted(set(findings), key=lambda f: (f.path, f.line, f.message))

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
    if runtime_sends:
        print(
            f"\n{len(runtime_sends)} field(s) newly required in what this project sends, "
            "all in messages the runtime builds (nothing to do):"
        )
        for req in runtime_sends:
            print(f"  {req.subject} ({req.where})")
    sends = [f for f in findings if f.message.startswith("builds ")]
    if sends:
        print(f"\n{len(sends)} place(s) in your code build a message that gained a required field:")
        for finding in sends:
            print(str(finding))
    tests = [f for f in findings if not f.message.startswith("builds ")]
    if tests:
        print(f"\n{len(tests)} place(s) in your tests must change for the new revision:")
        for finding in tests:
            print(str(finding))
    if deps:
        print(f"\n{len(deps)} dependency(ies) missing from your pyproject.toml:")
        for finding in deps:
            print(str(finding))
    return 1 if handler_findings or findings or deps else 0


def _recorded(source: dict[str, Any]) -> list[dict[str, Any]]:
    """The schema records of SOURCE.json: the first revision, then the others."""
    return [source["schema"], *(source.get("more_schemas") or ())]


def _lifecycle(revision: dict[str, Any]) -> str:
    return str(revision.get("lifecycle") or "?")


def _counterpart(recorded: list[dict[str, Any]], new: inputs.Loaded) -> dict[str, Any]:
    """The recorded schema `new` replaces: the one of the same revision, else the first."""
    for rec in recorded:
        if _lifecycle(rec.get("revision") or {}) == _lifecycle(new.revision):
            return rec
    return recorded[0]


def _old_schema(proj: project.Project, rec: dict[str, Any]) -> inputs.Loaded | None:
    origin = rec.get("origin")
    try:
        old = inputs.load_schema(project.resolve_origin(origin, proj.root) if origin else None)
    except AgentgenError as err:
        print(f"(no revision report: the recorded schema is not available: {err})")
        return None
    if old.sha256 != rec.get("sha256"):
        print(
            "(note: the recorded schema changed since generation; comparing with it as it is now)"
        )
    return old
