"""Reports: a terminal table by tier, JSON, and JUnit XML (one testcase per requirement,
a failure carrying a transcript excerpt) for GitHub's and GitLab's test views."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ..files import write_atomic
from .verdict import Result, Run, Status, Tier, conformant

_ORDER = (Tier.MANDATORY, Tier.CAPABILITY, Tier.ADVISORY, Tier.INFORMATIONAL)


def verdict_line(run: Run) -> str:
    if run.conformant:
        return "VERDICT: CONFORMANT"
    why = [f"{r.id} {r.status.value}" for r in run.failing()]
    why += run.blocked
    return f"VERDICT: NOT CONFORMANT ({'; '.join(why)})"


def text(runs: list[Run], *, width: int = 100) -> str:
    out: list[str] = []
    for run in runs:
        out.append(
            f"agentgen conform {run.role} over {run.transport}, protocol {run.protocol} "
            f"({run.schema}): {run.target}"
        )
        for tier in _ORDER:
            rows = [r for r in run.results if r.tier == tier]
            if not rows:
                continue
            out.append(f"  {tier.value.upper()}")
            for r in rows:
                reason = r.reason()
                line = f"    {r.id:<30} {r.status.value:<10} {reason}".rstrip()
                out.append(line if len(line) <= width else line[: width - 3] + "...")
        counts = run.tier_counts()
        summary = ", ".join(
            f"{tier}: " + " ".join(f"{n} {status.lower()}" for status, n in row.items() if n)
            for tier, row in counts.items()
        )
        out.append(f"  {summary}  ({run.seconds:.1f}s)")
        out.append(f"  {verdict_line(run)}")
        out.append("")
    if len(runs) > 1:
        out.append("CONFORMANT (every revision)" if conformant(runs) else "NOT CONFORMANT")
    return "\n".join(out).rstrip() + "\n"


def _result_json(r: Result, transcripts: bool) -> dict[str, Any]:
    return {
        "id": r.id,
        "tier": r.tier.value,
        "capability": r.capability,
        "text": r.text,
        "citation": r.citation,
        "status": r.status.value,
        "outcomes": [
            {
                "check": o.check,
                "status": o.status.value,
                "message": o.message,
                "duration_s": round(o.duration, 3),
                **(
                    {
                        "transcript": o.transcript.to_json() if o.transcript else [],
                        "stderr": o.stderr,
                    }
                    if transcripts and o.status == Status.FAIL
                    else {}
                ),
            }
            for o in r.outcomes
        ],
    }


def to_json(runs: list[Run]) -> dict[str, Any]:
    return {
        "conformant": conformant(runs),
        "runs": [
            {
                "role": run.role,
                "transport": run.transport,
                "protocol": run.protocol,
                "schema": run.schema,
                "target": run.target,
                "peer": run.peer,
                "seconds": round(run.seconds, 3),
                "verdict": {
                    "conformant": run.conformant,
                    "blocked": run.blocked,
                    "tier_counts": run.tier_counts(),
                },
                "requirements": [_result_json(r, True) for r in run.results],
            }
            for run in runs
        ],
    }


def junit(runs: list[Run]) -> bytes:
    """One testsuite per run, one testcase per requirement: FAIL is a failure (with the
    transcript of the check that failed it), SKIPPED and NOT_TESTED are skipped (a
    mandatory NOT_TESTED a failure: it decides the verdict)."""
    suites = ET.Element("testsuites", name="agentgen conform")
    total_fail = 0
    for run in runs:
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"{run.role}.{run.transport}.v{run.protocol}",
            tests=str(len(run.results)),
            time=f"{run.seconds:.3f}",
        )
        fails = skips = 0
        for r in run.results:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"conform.{run.role}.{run.transport}.v{run.protocol}.{r.tier.value}",
                name=r.id,
                time=f"{sum(o.duration for o in r.outcomes):.3f}",
            )
            props = ET.SubElement(case, "properties")
            for key, value in (
                ("tier", r.tier.value),
                ("capability", r.capability or ""),
                ("citation", r.citation),
            ):
                ET.SubElement(props, "property", name=key, value=value)
            status = r.status
            if status == Status.FAIL or (status == Status.NOT_TESTED and r.tier == Tier.MANDATORY):
                fails += 1
                bad = next((o for o in r.outcomes if o.status == Status.FAIL), None)
                message = bad.message if bad else "no check ran it"
                failure = ET.SubElement(case, "failure", message=message[:500], type=r.tier.value)
                body = [r.text, f"citation: {r.citation}"]
                if bad is not None and bad.transcript is not None:
                    body += [f"check: {bad.check}", bad.transcript.excerpt()]
                failure.text = "\n".join(body)
            elif status in (Status.SKIPPED, Status.NOT_TESTED):
                skips += 1
                ET.SubElement(case, "skipped", message=(r.reason() or status.value)[:500])
        suite.set("failures", str(fails))
        suite.set("skipped", str(skips))
        suite.set("errors", "0")
        total_fail += fails
    suites.set("failures", str(total_fail))
    ET.indent(suites)
    data: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return data


def write_junit(path: Path, runs: list[Run]) -> None:
    write_atomic(path, junit(runs))
