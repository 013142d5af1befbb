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
from .private import private_imports


def _abs_spec(spec: str | None) -> str | None:
    if spec and inputs.is_local(spec):
        return str(Path(spec).expanduser().resolve())
    return spec


def _pairs(
    schema: str | Sequence[str] | None, meta: str | Sequence[str] | None, new_schema: bool
) -> list[tuple[str | None, str | None]]:
    """The (schema, meta) specs to render, local paths made absolute."""
    pairs = [(_abs_spec(s), _abs_spec(m)) for s, m in inputs.schema_pairs(schema, meta)]
    if not new_schema and inputs.specs(meta):  # a new meta table for the recorded schema
        pairs = [(None, _abs_spec(inputs.specs(meta)[0]))]
    return pairs


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
    pairs = _pairs(schema, meta, new_schema)
    rendered = project.render_recorded(
        proj,
        schema_spec=pairs[0][0],
        meta_spec=pairs[0][1],
        new_schema=new_schema,
        more=tuple(pairs[1:]) if new_schema else (),
    )

    role = str(proj.source.get("role") or "agent")
    recorded = _recorded(proj.source)
    served = [rendered.schema, *rendered.more]
    findings, runtime_sends = _report_revisions(proj, role, recorded, served)
    if new_schema:
        _report_unserved(recorded, served)
        findings = sorted(set(findings), key=lambda f: (f.path, f.line, f.message))

    handler_findings = _handler_findings(proj, old_files, rendered.files)

    prefix = _report_files(proj, rendered.files, dry_run)
    if not dry_run:
        project.write_generated(gen, rendered.files)
    deps = compat.missing_dependencies(
        proj.root / "pyproject.toml", rendered.files, proj.package, prefix
    )

    _print_findings(handler_findings, runtime_sends, findings, deps)
    _print_group(
        "\nwarning: code of yours imports a private module of the generated package "
        "(it may move at any regen):",
        private_imports(proj),
    )
    return 1 if handler_findings or findings or deps else 0


def _report_revisions(
    proj: project.Project,
    role: str,
    recorded: list[dict[str, Any]],
    served: list[inputs.Loaded],
) -> tuple[list[compat.Finding], list[compat.Required]]:
    """Print a revision report for each served schema that changed; return the findings
    in the user's code and tests, and the newly required fields only the runtime sends."""
    findings: list[compat.Finding] = []
    runtime_sends: list[compat.Required] = []
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
        findings += _send_findings(proj, role, required, runtime_sends)
        findings += compat.check_tests(
            sorted((proj.root / "tests").rglob("*.py")), proj.root, old_schema.data, new.data
        )
    return findings, runtime_sends


def _send_findings(
    proj: project.Project,
    role: str,
    required: list[compat.Required],
    runtime_sends: list[compat.Required],
) -> list[compat.Finding]:
    """The places in the user's code that build a message with a newly required field;
    the fields no user code builds are appended to `runtime_sends`."""
    findings: list[compat.Finding] = []
    built = compat.user_references(proj.root / proj.package, proj.root, {r.owner for r in required})
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
    return findings


def _report_unserved(recorded: list[dict[str, Any]], served: list[inputs.Loaded]) -> None:
    """Print each recorded revision that the new schemas no longer serve."""
    kept = {_lifecycle(s.revision) for s in served}
    for rec in recorded:
        gone = _lifecycle(rec.get("revision") or {})
        if gone not in kept:
            print(
                f"no longer served: {gone} ({rec.get('origin')}); its peers are refused. "
                "Serve both: repeat --schema, one per revision"
            )


def _handler_findings(
    proj: project.Project, old_files: dict[str, bytes], new_files: dict[str, str]
) -> list[compat.Finding]:
    """The user handlers the new dispatcher and models break (none without both
    dispatchers)."""

    def text(rel: str) -> str:
        raw = old_files.get(rel)
        return raw.decode("utf-8", "replace") if raw is not None else ""

    new_disp = new_files.get("dispatcher.py", "")
    old_disp = text("dispatcher.py")
    if not (old_disp and new_disp):
        return []
    try:
        return compat.find_breakage(
            package_dir=proj.root / proj.package,
            root=proj.root,
            old_dispatcher=old_disp,
            new_dispatcher=new_disp,
            old_models=text("models.py"),
            new_models=new_files.get("models.py", ""),
        )
    except SyntaxError as exc:
        raise AgentgenError(
            f"cannot read the old dispatcher: {exc.msg}",
            source=str(proj.generated_dir / "dispatcher.py"),
            line=exc.lineno,
            hint="restore _generated/ from version control or run `agentgen check`",
        ) from None


def _report_files(proj: project.Project, new_files: dict[str, str], dry_run: bool) -> str:
    """Print what regenerating adds, updates and removes in `_generated/`; return the
    folder's prefix (`<package>/_generated/`)."""
    added, modified, removed = project.changed_files(proj.generated_dir, new_files)
    prefix = f"{proj.package}/{project.GENERATED}/"
    verb = "would " if dry_run else ""
    for label, names in (("add", added), ("update", modified), ("remove", removed)):
        for name in names:
            print(f"{verb}{label} {prefix}{name}")
    if not (added or modified or removed):
        print(f"{prefix} is up to date")
    return prefix


def _print_group(heading: str, findings: Sequence[compat.Finding]) -> None:
    """Print `heading` then one finding a line; nothing when there are none."""
    if findings:
        print(heading)
        for finding in findings:
            print(str(finding))


def _print_findings(
    handler_findings: list[compat.Finding],
    runtime_sends: list[compat.Required],
    findings: list[compat.Finding],
    deps: Sequence[compat.Finding],
) -> None:
    """Print what the user must change, grouped, and the runtime's new required fields."""
    _print_group(
        f"\n{len(handler_findings)} place(s) in your code must change for the new dispatcher:",
        handler_findings,
    )
    if runtime_sends:
        print(
            f"\n{len(runtime_sends)} field(s) newly required in what this project sends, "
            "all in messages the runtime builds (nothing to do):"
        )
        for req in runtime_sends:
            print(f"  {req.subject} ({req.where})")
    sends = [f for f in findings if f.message.startswith("builds ")]
    _print_group(
        f"\n{len(sends)} place(s) in your code build a message that gained a required field:",
        sends,
    )
    tests = [f for f in findings if not f.message.startswith("builds ")]
    _print_group(f"\n{len(tests)} place(s) in your tests must change for the new revision:", tests)
    _print_group(f"\n{len(deps)} dependency(ies) missing from your pyproject.toml:", deps)


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
