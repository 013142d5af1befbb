"""Outcomes, a requirement's status, and the verdict: computed from the records, never
by a check.

The rule is the official kit's (acp-tck README, "The tier / status / verdict model"): a
check gives each requirement it proves PASS, FAIL or SKIPPED; a requirement's status is
the worst of its outcomes (FAIL > PASS > SKIPPED), NOT_TESTED when no check gave it one.
CONFORMANT when no mandatory requirement FAILs or is NOT_TESTED, no capability one FAILs,
and no version-dependent check was skipped because the peer never spoke the revision
under test (`blocked`).  Advisory and informational requirements never decide it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .transcript import Transcript


class Tier(StrEnum):
    MANDATORY = "mandatory"
    CAPABILITY = "capability"
    ADVISORY = "advisory"
    INFORMATIONAL = "informational"


class Status(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIPPED = "SKIPPED"
    NOT_TESTED = "NOT_TESTED"


_RANK = {Status.FAIL: 3, Status.PASS: 2, Status.SKIPPED: 1, Status.NOT_TESTED: 0}


@dataclass
class Outcome:
    """What one check found about one requirement."""

    requirement: str
    status: Status
    check: str  # the check's name
    message: str = ""
    transcript: Transcript | None = None
    duration: float = 0.0
    stderr: str = ""


@dataclass
class Result:
    """One requirement of the catalogue with every outcome bound to it."""

    id: str
    tier: Tier
    capability: str | None
    text: str
    citation: str
    protocol: int
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def status(self) -> Status:
        if not self.outcomes:
            return Status.NOT_TESTED
        return max((o.status for o in self.outcomes), key=_RANK.__getitem__)

    def reason(self) -> str:
        """The message of the outcome that decided the status."""
        for o in self.outcomes:
            if o.status == self.status and o.message:
                return o.message
        return ""

    def counts_against(self) -> bool:
        status = self.status
        if self.tier == Tier.MANDATORY:
            return status in (Status.FAIL, Status.NOT_TESTED)
        if self.tier == Tier.CAPABILITY:
            return status == Status.FAIL
        return False


@dataclass
class Run:
    """The results of one revision's run against one peer."""

    protocol: int
    role: str
    target: str
    transport: str
    schema: str
    results: list[Result]
    blocked: list[str] = field(default_factory=list)  # why the run could not judge
    peer: dict[str, Any] = field(default_factory=dict)  # what the peer said about itself
    seconds: float = 0.0

    @property
    def conformant(self) -> bool:
        return not self.blocked and not any(r.counts_against() for r in self.results)

    def failing(self) -> list[Result]:
        return [r for r in self.results if r.counts_against()]

    def tier_counts(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for r in self.results:
            row = counts.setdefault(r.tier.value, {s.value: 0 for s in Status})
            row[r.status.value] += 1
        return counts


def conformant(runs: list[Run]) -> bool:
    return bool(runs) and all(run.conformant for run in runs)
