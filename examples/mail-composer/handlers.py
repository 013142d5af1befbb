"""The mail composer's handler: typed config, input and output, an approval interrupt,
and the manifest's two errors.

This is `<package>/handlers.py` of the project `agentgen new --manifest
examples/mail-composer/agent.yaml` creates.  Besides `AgentBase` and `Turn`, everything
imported from `_generated.acp` is generated from agent.yaml: `Config`, `Input`, `Output`,
`ApprovalPayload` / `ApprovalResume`, and the error classes `QuotaExceeded` (transient,
with `QuotaExceededData`) and `UnknownRecipient`.
"""

from __future__ import annotations

import os

from ._generated.acp import (
    AgentBase,
    ApprovalPayload,
    ApprovalResume,
    Config,
    Input,
    Output,
    QuotaExceeded,
    QuotaExceededData,
    Turn,
    UnknownRecipient,
)

SUBJECT_MAX = 60  # characters of a subject line

GREETINGS = {"formal": "Dear {name},", "friendly": "Hi {name},", "terse": ""}
CLOSINGS = {"formal": "Kind regards,", "friendly": "Cheers,", "terse": ""}
# Domains this composer never writes to (reserved for documentation and tests).
BLOCKED_DOMAINS = (".invalid", ".test")


def compose(brief: str, recipients: list[str], config: Config) -> tuple[str, str]:
    """A subject and body for `brief`, in the configured tone and length."""
    tone = config.tone or "friendly"
    first = recipients[0].split("@", 1)[0].replace(".", " ").title()
    sentence = brief.strip().split(".", 1)[0]
    subject = (
        sentence if len(sentence) <= SUBJECT_MAX else sentence[: SUBJECT_MAX - 3].rstrip() + "..."
    )
    parts = [GREETINGS[tone].format(name=first), brief.strip(), CLOSINGS[tone]]
    if config.signature:
        parts.append(config.signature)
    body = "\n\n".join(p for p in parts if p)
    limit = config.max_length or 800
    if len(body) > limit:
        body = body[: limit - 3].rstrip() + "..."
    return subject, body


class Agent(AgentBase):
    """Drafts an email, streams the draft, and asks for approval before answering."""

    def __init__(self) -> None:
        super().__init__()
        self.drafts = 0
        self.daily_quota = int(os.environ.get("MAIL_COMPOSER_DAILY_QUOTA", "100"))

    async def prompt(self, turn: Turn, input: Input) -> Output | None:
        config: Config = turn.config
        recipients = [r.root for r in input.recipients]
        for address in recipients:
            if address.lower().endswith(BLOCKED_DOMAINS):
                raise UnknownRecipient(f"{address} is not an allowed recipient")
        if self.drafts >= self.daily_quota:
            raise QuotaExceeded(data=QuotaExceededData(retry_after=3600.0, used=self.drafts))
        self.drafts += 1

        subject, body = compose(input.brief, recipients, config)
        await turn.send_text(body)  # the draft, streamed as it is ready
        answer: ApprovalResume = await turn.interrupt(
            "approval", ApprovalPayload(subject=subject, body=body)
        )
        return Output(subject=subject, body=body, recipients=recipients, approved=answer.approved)
