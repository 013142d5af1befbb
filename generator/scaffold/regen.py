"""`agentgen regen`: rewrite `_generated/` only; report what a new revision breaks.

Exit 0: regenerated (or already current), nothing of the user's affected. Exit 1 only
for what the user must change, each listed as `file:line: what` with what to do: user
handlers must change; code of theirs builds a message that gained a required field; the
project's tests write a message the new revision no longer accepts; a dependency is
missing. A field newly required in a message only the runtime builds is information.
Several `--schema`s: a revision report per revision, against the recorded schema of the
same revision (else one no longer served; none: the revision is added, no report).
`--dry-run` writes nothing.

Output, most useful first: what the user must change (`file:line: what`), the notes that
need nothing, one line per revision (`protocol schema (v2): OLD -> NEW: 255 changes, 130
breaking`), the files rewritten (one line when many), and last a one-line result on
stderr (`regen: v1 -> v2: 130 breaking, 110 added, 15 changed; nothing of yours to
change`). The full per-type revision report and each rewritten file: `--verbose`, or
`--report FILE` for the report.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import console
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


_FEW_FILES = 5  # more rewritten files than this: one line (each with --verbose)


@dataclass
class _Revisions:
    """What the served schemas change: the user's findings, the runtime-only required
    fields, one header line and one summary per changed revision, the full reports."""

    findings: list[compat.Finding] = field(default_factory=list)
    runtime_sends: list[compat.Required] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    reports: list[str] = field(default_factory=list)


def run_regen(
    project_dir: Path,
    *,
    schema: str | Sequence[str] | None = None,
    meta: str | Sequence[str] | None = None,
    dry_run: bool = False,
    verbose: bool = False,
    report: Path | None = None,
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
    revs = _report_revisions(proj, role, recorded, served)
    findings = revs.findings
    unserved: list[str] = []
    if new_schema:
        unserved = _unserved(proj, recorded, served)
        findings = sorted(set(findings), key=lambda f: (f.path, f.line, f.message))

    handler_findings = _handler_findings(proj, old_files, rendered.files)
    lost = _lost_capabilities(proj, role, recorded, served) if new_schema else []

    prefix = f"{proj.package}/{project.GENERATED}/"
    file_lines = _file_lines(proj, rendered.files, dry_run)
    if not dry_run:
        project.write_generated(gen, rendered.files)
    deps = compat.missing_dependencies(
        proj.root / "pyproject.toml", rendered.files, proj.package, prefix
    )

    # what the project loses first, then what the user must change, then what needs
    # nothing, then the details
    _print_group(
        f"\nwarning: {len(lost)} capability(ies) of your project no longer served:",
        [compat.Finding(proj.manifest_path.name, 0, line) for line in lost],
    )
    _print_findings(handler_findings, findings, deps)
    _print_group(
        "\nwarning: code of yours imports a private module of the generated package "
        "(it may move at any regen):",
        private_imports(proj),
    )
    _print_runtime_sends(revs.runtime_sends, verbose)
    for line in unserved:
        print(line)
    _print_revisions(revs, verbose, report)
    few = verbose or len(file_lines) <= _FEW_FILES
    print(*(file_lines if few else [_files_line(file_lines)]), sep="\n")
    to_change = len(handler_findings) + len(findings) + len(deps)
    sys.stdout.flush()  # the result line comes last, stderr or not
    console.summary(
        _summary(revs.summaries, unserved, file_lines, to_change, dry_run, len(lost)),
        ok=not to_change,
    )
    return 1 if to_change else 0


def _print_revisions(revs: _Revisions, verbose: bool, report: Path | None) -> None:
    """One line per changed revision; the full reports when verbose, else in `report`."""
    if revs.headers:
        print()
    for header, text in zip(revs.headers, revs.reports, strict=True):
        print(header)
        if verbose and text:
            console.lines(text.rstrip() + "\n", sys.stdout, marks=("BREAKING",))
    if report is not None:
        texts = [f"{h}\n{t}" for h, t in zip(revs.headers, revs.reports, strict=True)]
        report.write_text("\n".join(texts) or "no revision changed\n", encoding="utf-8")
        print(f"the full revision report: {report}")
    elif any(revs.reports) and not verbose:
        print("(the full revision report, type by type: --verbose, or --report FILE)")


def _summary(
    revisions: list[str],
    unserved: list[str],
    file_lines: list[str],
    to_change: int,
    dry_run: bool,
    lost: int = 0,
) -> str:
    """The closing line: what changed, what the project lost, and how many lines of the
    user's to change."""
    what = revisions + [line.split(" (", 1)[0] for line in unserved]
    if lost:
        what.append(f"{lost} capability(ies) lost (the warning above)")
    if not what:
        what = [_files_line(file_lines)]
    yours = (
        "nothing of yours to change"
        if not to_change
        else f"{to_change} line{'s' if to_change > 1 else ''} of your code to change"
    )
    return f"regen{' (dry run)' if dry_run else ''}: {'; '.join(what)}; {yours}"


def _report_revisions(
    proj: project.Project,
    role: str,
    recorded: list[dict[str, Any]],
    served: list[inputs.Loaded],
) -> _Revisions:
    """A header and a summary for each served schema that changed or was added; the
    findings in the user's code and tests, and the newly required fields only the
    runtime sends."""
    out = _Revisions()
    several = len(served) > 1 or len(recorded) > 1
    for new in served:
        old_rec = _counterpart(recorded, served, new)
        label = f" ({_lifecycle(new.revision)})" if several else ""
        if old_rec is None:  # a revision the project did not serve: no diff to report
            out.headers.append(f"protocol schema{label}: added {new.origin}")
            out.summaries.append(f"{_lifecycle(new.revision)} added")
            out.reports.append("")
            # what the user's code builds and the tests write, checked all the same
            # (against the first recorded revision, the one the code was written for)
            first, _ = _old_schema(proj, recorded[0])
            if first is not None:
                entries = inputs.revision_report(first, new).entries
                _check_user_code(out, proj, role, first, new, entries)
            continue
        if old_rec.get("sha256") == new.sha256:
            continue
        header = f"protocol schema{label}: {old_rec.get('origin')} -> {new.origin}"
        step = _step(old_rec, new)
        old_schema, note = _old_schema(proj, old_rec)
        if old_schema is None:
            out.headers.append(f"{header}\n{note}")
            out.summaries.append(step)
            out.reports.append("")
            continue
        report = inputs.revision_report(old_schema, new)
        counts = _counts(report.entries)
        out.headers.append(f"{header}: {note}{counts}" if note else f"{header}: {counts}")
        out.summaries.append(f"{step}: {_summary_counts(report.entries)}")
        out.reports.append(report.text)
        _check_user_code(out, proj, role, old_schema, new, report.entries)
    return out


def _check_user_code(
    out: _Revisions,
    proj: project.Project,
    role: str,
    old: inputs.Loaded,
    new: inputs.Loaded,
    entries: Sequence[Any],
) -> None:
    """The user's code building a message that gained a required field, and the tests
    writing one the new revision refuses, into `out` (with the runtime-only fields)."""
    required = compat.required_to_send(list(entries), new.data, role)
    out.findings += _send_findings(proj, role, required, out.runtime_sends)
    out.findings += compat.check_tests(
        sorted((proj.root / "tests").rglob("*.py")), proj.root, old.data, new.data
    )


def _step(old_rec: dict[str, Any], new: inputs.Loaded) -> str:
    """`v1 -> v2`; the same revision from elsewhere: `v1 (ORIGIN)`."""
    was, now = _lifecycle(old_rec.get("revision") or {}), _lifecycle(new.revision)
    if was != now:
        return f"{was} -> {now}"
    return f"{now} (a new schema)" if now != "?" else "a new schema"


def _counts(entries: Sequence[Any]) -> str:
    breaking = sum(1 for e in entries if e.breaking)
    return f"{len(entries)} changes, {breaking} breaking"


def _summary_counts(entries: Sequence[Any]) -> str:
    breaking = sum(1 for e in entries if e.breaking)
    added = sum(1 for e in entries if not e.breaking and e.kind.endswith("-added"))
    changed = len(entries) - breaking - added
    return f"{breaking} breaking, {added} added, {changed} changed"


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


def _unserved(
    proj: project.Project, recorded: list[dict[str, Any]], served: list[inputs.Loaded]
) -> list[str]:
    """A line for each recorded revision that the new schemas no longer serve, with the
    command that serves it beside them (the recorded schema itself: a project made on
    `v1-unstable` keeps it)."""
    kept = {_lifecycle(s.revision) for s in served}
    return [
        f"no longer served: {gone} ({rec.get('origin')}); its peers are refused. "
        f"Serve both: {_keeping(proj, rec, served)}"
        for rec in recorded
        if (gone := _lifecycle(rec.get("revision") or {})) not in kept
    ]


def _spec(origin: str, proj: project.Project) -> str:
    """What to pass as --schema for `origin`: its short name (`v1-unstable`) when it is a
    schema of the locked package, else the origin (a path made absolute)."""
    from ..sources import expand_short

    for short in ("v1", "v1-unstable", "v2", "v2-unstable"):
        try:
            if expand_short(short) == origin:
                return short
        except AgentgenError:  # no readable lock: no short names
            break
    return project.resolve_origin(origin, proj.root)


def _keeping(proj: project.Project, rec: dict[str, Any], served: list[inputs.Loaded]) -> str:
    """The regen that serves the recorded schema `rec` beside the new ones (a new one of
    the same revision gives way to it)."""
    kept = _lifecycle(rec.get("revision") or {})
    specs = [_spec(str(rec.get("origin")), proj)]
    specs += [_spec(s.origin, proj) for s in served if _lifecycle(s.revision) != kept]
    return "agentgen regen " + " ".join(f"--schema {shlex.quote(x)}" for x in specs)


# what a revision must have for a manifest feature to work: the methods of each side
_PROVIDER_METHODS = ("providers/list", "providers/set", "providers/disable")
_EDITOR_METHODS = ("fs/read_text_file", "fs/write_text_file", "terminal/create")


def _lost_capabilities(
    proj: project.Project,
    role: str,
    recorded: list[dict[str, Any]],
    served: list[inputs.Loaded],
) -> list[str]:
    """What the project's manifest uses that the recorded revisions served and the new
    ones no longer do, each with what it means and the regen that keeps it: the
    `providers` an editor routes the model with (unstable v1's providers/*), and the
    model's editor tools (v1's fs/* and terminal/*; v2 has neither)."""
    from ..protocol.methods import method_table

    if role != "agent":
        return []
    try:
        manifest = inputs.load_manifest(proj.manifest_path)
    except AgentgenError:
        return []  # render_recorded read it already; nothing more to say
    llm = manifest.get("llm") if isinstance(manifest.get("llm"), dict) else None
    providers = [str(p.get("id")) for p in manifest.get("providers") or () if type(p) is dict]
    if not providers and llm is None:
        return []
    new_names = {m.name for s in served for m in method_table(s.data)}
    shown = ", ".join(_spec(s.origin, proj) for s in served)
    out: list[str] = []
    for rec in recorded:
        old, _ = _old_schema(proj, rec)
        if old is None:
            continue
        names = {m.name for m in method_table(old.data)}
        fix = _keeping(proj, rec, served)
        was = _spec(str(rec.get("origin")), proj)
        if providers and names & set(_PROVIDER_METHODS) and not new_names & set(_PROVIDER_METHODS):
            out.append(
                f"providers: the manifest's providers ({', '.join(providers)}) are served by "
                f"{was} (providers/list, providers/set, providers/disable) and by none of "
                f"{shown}: an editor can no longer route them (providers/* answer -32601). "
                f"Keep them: {fix}"
            )
        lost_editor = names & set(_EDITOR_METHODS) and not new_names & set(_EDITOR_METHODS)
        if llm is not None and lost_editor:
            on_disk = llm.get("on_disk")
            http = proj.source.get("transport") == "http"
            if on_disk is False or (on_disk is None and http):
                what = "read_file, write_file and run_command are offered to no client"
                if http and on_disk is None:
                    what += " (llm.on_disk: true offers them on the server's disk)"
            else:
                what = (
                    "read_file, write_file and run_command work on disk instead, in the "
                    "session's folder (files as saved, commands run by the agent, not in the "
                    "editor's terminal)"
                )
            out.append(
                f"the model's editor tools: {was} serves the client's files and terminal "
                f"(fs/*, terminal/*), {shown} does not: {what}. Keep them for v1 clients: {fix}"
            )
        if out:
            break  # the first recorded revision that had them says it
    return out


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


def _file_lines(proj: project.Project, new_files: dict[str, str], dry_run: bool) -> list[str]:
    """What regenerating adds, updates and removes in `_generated/`, a line each."""
    added, modified, removed = project.changed_files(proj.generated_dir, new_files)
    prefix = f"{proj.package}/{project.GENERATED}/"
    verb = "would " if dry_run else ""
    out = [
        f"{verb}{label} {prefix}{name}"
        for label, names in (("add", added), ("update", modified), ("remove", removed))
        for name in names
    ]
    return out or [f"{prefix} is up to date"]


def _files_line(file_lines: list[str]) -> str:
    """The file lines in one: `update pkg/_generated/: 2 add, 9 update (--verbose: each)`."""
    if len(file_lines) == 1:
        return file_lines[0]
    counts: dict[str, int] = {}
    for line in file_lines:
        verb = line.rsplit(" ", 1)[0]
        counts[verb] = counts.get(verb, 0) + 1
    where = file_lines[0].rsplit(" ", 1)[1].split(f"/{project.GENERATED}/")[0]
    each = ", ".join(f"{verb} {n}" for verb, n in counts.items())
    return f"{where}/{project.GENERATED}/: {each} file(s)"


def _print_group(heading: str, findings: Sequence[compat.Finding]) -> None:
    """Print `heading` then one finding a line; nothing when there are none."""
    if findings:
        print(heading)
        for finding in findings:
            print(str(finding))


def _print_findings(
    handler_findings: list[compat.Finding],
    findings: list[compat.Finding],
    deps: Sequence[compat.Finding],
) -> None:
    """Print what the user must change, grouped."""
    _print_group(
        f"\n{len(handler_findings)} place(s) in your code must change for the new dispatcher:",
        handler_findings,
    )
    sends = [f for f in findings if f.message.startswith("builds ")]
    _print_group(
        f"\n{len(sends)} place(s) in your code build a message that gained a required field:",
        sends,
    )
    tests = [f for f in findings if not f.message.startswith("builds ")]
    _print_group(f"\n{len(tests)} place(s) in your tests must change for the new revision:", tests)
    _print_group(f"\n{len(deps)} dependency(ies) missing from your pyproject.toml:", deps)


def _print_runtime_sends(runtime_sends: list[compat.Required], verbose: bool) -> None:
    """The fields newly required in messages only the runtime builds: information, one
    line (each field with --verbose)."""
    if not runtime_sends:
        return
    head = (
        f"\n{len(runtime_sends)} field(s) newly required in what this project sends, "
        "all in messages the runtime builds (nothing to do"
    )
    if not verbose:
        print(f"{head}; --verbose lists them)")
        return
    print(f"{head}):")
    for req in runtime_sends:
        print(f"  {req.subject} ({req.where})")


def _recorded(source: dict[str, Any]) -> list[dict[str, Any]]:
    """The schema records of SOURCE.json: the first revision, then the others."""
    return [source["schema"], *(source.get("more_schemas") or ())]


def _lifecycle(revision: dict[str, Any]) -> str:
    return str(revision.get("lifecycle") or "?")


def _counterpart(
    recorded: list[dict[str, Any]], served: list[inputs.Loaded], new: inputs.Loaded
) -> dict[str, Any] | None:
    """The recorded schema `new` replaces: the one of the same revision, else the first
    recorded revision no longer served; None when `new` is a revision added beside the
    recorded ones (no report: a diff between two revisions served side by side says
    nothing about what changed)."""
    for rec in recorded:
        if _lifecycle(rec.get("revision") or {}) == _lifecycle(new.revision):
            return rec
    kept = {_lifecycle(s.revision) for s in served}
    for rec in recorded:
        if _lifecycle(rec.get("revision") or {}) not in kept:
            return rec
    return None


def _old_schema(proj: project.Project, rec: dict[str, Any]) -> tuple[inputs.Loaded | None, str]:
    """The recorded schema as it is now, and a note when it is missing or changed."""
    origin = rec.get("origin")
    try:
        old = inputs.load_schema(project.resolve_origin(origin, proj.root) if origin else None)
    except AgentgenError as err:
        return None, f"(no revision report: the recorded schema is not available: {err})"
    if old.sha256 != rec.get("sha256"):
        return old, "(note: the recorded schema changed since generation; compared as it is now) "
    return old, ""
