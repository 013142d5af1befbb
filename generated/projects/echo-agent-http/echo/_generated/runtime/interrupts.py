"""Interrupts: a turn pauses for the client (`elicitation/create`, or
`session/request_permission` on a revision without elicitation) and resumes typed."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from .dispatch import RuntimeCore, _model_dump
from .errors import from_validation_error

if TYPE_CHECKING:
    from .turns import Turn


class InterruptDeclined(Exception):
    """The client declined or cancelled an interrupt; the turn ends as cancelled."""

    def __init__(self, name: str, action: str) -> None:
        super().__init__(f"interrupt {name!r} was answered with {action!r}")
        self.interrupt = name
        self.action = action


class Interrupts(RuntimeCore):
    """Sends a turn's interrupts to the client (a part of AgentRuntime)."""

    async def _interrupt(self, turn: Turn, name: str, payload: Any) -> Any:
        spec = next(
            (i for i in self._acp_manifest.get("interrupts") or () if i["name"] == name), None
        )
        if spec is None:
            raise ValueError(f"the manifest declares no interrupt named {name!r}")
        conn = self.connection
        assert conn is not None
        s = turn.session
        self._transition(s, "agent", "interrupt")
        resume_schema = (spec.get("resume") or {}).get("schema") or {
            "type": "object",
            "properties": {},
        }
        if self.PROFILE.get("elicitation", True):
            req = {
                "sessionId": s.id,
                "mode": "form",
                "message": spec.get("description") or name,
                "requestedSchema": resume_schema,
                "_meta": {"interrupt": name, "payload": _model_dump(payload)},
            }
            answer = await conn.request("elicitation/create", req)
            action = answer.get("action") if type(answer) is dict else None
            content = (answer.get("content") if type(answer) is dict else None) or {}
        else:
            action, content = await self._permission_interrupt(turn, name, spec, payload)
        if action != "accept":
            raise InterruptDeclined(name, str(action))
        self._transition(s, "client", "resume")
        cls = self._mclass(_camel(name) + "Resume")
        if cls is None:
            return content
        try:
            return cls.model_validate(content)
        except Exception as exc:
            if hasattr(exc, "errors"):
                raise from_validation_error(exc, ("resume", name)) from None
            raise

    async def _permission_interrupt(
        self, turn: Turn, name: str, spec: dict[str, Any], payload: Any
    ) -> tuple[str, dict[str, Any]]:
        """An interrupt on a revision without `elicitation/create`: its equivalent is
        `session/request_permission` (approve / decline). The answer is one bit, so
        approving sets the resume schema's required boolean fields to true; a resume
        schema that needs more than that is answered by the resume model's validation
        error (declare such interrupts on a revision with elicitation)."""
        conn = self.connection
        assert conn is not None
        req = {
            "sessionId": turn.session.id,
            "toolCall": {
                "toolCallId": f"interrupt-{name}-{uuid.uuid4().hex[:12]}",
                "title": spec.get("description") or name,
                "rawInput": _model_dump(payload),
            },
            "options": [
                {"optionId": "accept", "name": "Approve", "kind": "allow_once"},
                {"optionId": "decline", "name": "Decline", "kind": "reject_once"},
            ],
            "_meta": {"interrupt": name},
        }
        answer = await conn.request("session/request_permission", req)
        outcome = answer.get("outcome") if type(answer) is dict else None
        chosen = outcome.get("optionId") if type(outcome) is dict else None
        if chosen != "accept":
            return str(chosen or "cancel"), {}
        schema = (spec.get("resume") or {}).get("schema") or {}
        props = schema.get("properties") or {}
        content = {
            key: True
            for key in schema.get("required") or ()
            if type(props.get(key)) is dict and props[key].get("type") == "boolean"
        }
        return "accept", content


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.replace("-", "_").split("_") if p)
