"""Interrupts: a turn pauses for the client and resumes typed.

What the agent may ask depends on what the client declared at `initialize`: with
elicitation (form mode) declared and `elicitation/create` in the revision, the interrupt is
an elicitation carrying the resume schema; else, when the resume schema is answered by
approve/decline (no required field other than booleans), `session/request_permission`;
else the turn ends normally with a message to the user saying why.  An error the client
answers an interrupt with ends the turn the same way: it never becomes the prompt's error.
"""

from __future__ import annotations

import uuid
from typing import Any

from ..wire.errors import REQUEST_CANCELLED, RpcError, from_validation_error
from ..wire.fields import camel, model_dump
from .context import AgentContext, Session


class InterruptDeclined(Exception):
    """The client declined or cancelled an interrupt; the turn ends as cancelled."""

    def __init__(self, name: str, action: str) -> None:
        super().__init__(f"interrupt {name!r} was answered with {action!r}")
        self.interrupt = name
        self.action = action


class InterruptUnavailable(Exception):
    """The client cannot answer this interrupt (not declared, refused, or answered
    something the resume schema does not accept): the turn ends normally, and
    ``message`` is said to the user."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.interrupt = name
        self.message = message


def _yes_no(spec: dict[str, Any]) -> bool:
    """Whether approve/decline answers the interrupt: its resume schema requires nothing
    but booleans (approving sets them true)."""
    schema = (spec.get("resume") or {}).get("schema") or {}
    props = schema.get("properties") or {}
    return all(
        type(props.get(key)) is dict and props[key].get("type") == "boolean"
        for key in schema.get("required") or ()
    )


class Interrupts:
    """Sends a turn's interrupts to the client (of one connection)."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: AgentContext) -> None:
        self._ctx = ctx

    def _elicitation_declared(self) -> bool:
        names = self._ctx.revision.client_capabilities
        if not names.elicitation or not names.elicitation_form:
            return False
        caps = self._ctx.client_capabilities.get(names.elicitation)
        return type(caps) is dict and type(caps.get(names.elicitation_form)) is dict

    async def ask(self, s: Session, name: str, payload: Any) -> Any:
        """Interrupt `name` of a turn of `s`: the typed resume (see the module's doc)."""
        ctx = self._ctx
        spec = next((i for i in ctx.manifest.get("interrupts") or () if i["name"] == name), None)
        if spec is None:
            raise ValueError(f"the manifest declares no interrupt named {name!r}")
        asked = spec.get("description") or name
        elicit = ctx.revision.elicitation and self._elicitation_declared()
        if not elicit and not _yes_no(spec):
            raise InterruptUnavailable(
                name,
                f"The agent needs your input to go on ({asked}), but this client cannot "
                "answer questions (it did not declare elicitation): the turn ends here.",
            )
        ctx.transition(s, "agent", "interrupt")
        try:
            if elicit:
                action, content = await self._elicit(s, name, spec, payload)
            else:
                action, content = await self._permission_interrupt(s, name, spec, payload)
        except RpcError as err:  # the client's answer to our request, not the prompt's
            if err.code == REQUEST_CANCELLED:
                raise InterruptDeclined(name, "cancel") from None
            raise InterruptUnavailable(
                name,
                f"The agent asked for your input ({asked}) and the client answered with "
                f"error {err.code} ({err.message[:200]}): the turn ends here.",
            ) from None
        if action != "accept":
            raise InterruptDeclined(name, str(action))
        ctx.transition(s, "client", "resume")
        cls = ctx.mclass(camel(name) + "Resume")
        if cls is None:
            return content
        try:
            return cls.model_validate(content)
        except Exception as exc:
            if not hasattr(exc, "errors"):
                raise
            why = from_validation_error(exc, ("resume", name)).message
            raise InterruptUnavailable(
                name,
                f"The answer to {asked!r} does not match what the agent expects "
                f"({why.removeprefix('invalid params: ')}): the turn ends here.",
            ) from None

    async def _elicit(
        self, s: Session, name: str, spec: dict[str, Any], payload: Any
    ) -> tuple[str, dict[str, Any]]:
        conn = self._ctx.conn()
        resume_schema = (spec.get("resume") or {}).get("schema") or {
            "type": "object",
            "properties": {},
        }
        req = {
            "sessionId": s.id,
            "mode": "form",
            "message": spec.get("description") or name,
            "requestedSchema": resume_schema,
            "_meta": {"interrupt": name, "payload": model_dump(payload)},
        }
        answer = await conn.request("elicitation/create", req)
        action = answer.get("action") if type(answer) is dict else None
        content = (answer.get("content") if type(answer) is dict else None) or {}
        return str(action), content if type(content) is dict else {}

    async def _permission_interrupt(
        self, s: Session, name: str, spec: dict[str, Any], payload: Any
    ) -> tuple[str, dict[str, Any]]:
        """`session/request_permission` (approve / decline) as the interrupt. The answer
        is one bit, so approving sets the resume schema's required booleans to true."""
        conn = self._ctx.conn()
        shape = self._ctx.revision.permission
        title = spec.get("description") or name
        req: dict[str, Any] = {"sessionId": s.id}
        if shape.tool_call:  # v1: the permission is asked for a tool call
            req[shape.tool_call] = {
                "toolCallId": f"interrupt-{name}-{uuid.uuid4().hex[:12]}",
                "title": title,
                "rawInput": model_dump(payload),
            }
        meta: dict[str, Any] = {"interrupt": name}
        if shape.title:  # v2: the request carries its own title; the payload goes in _meta
            req[shape.title] = title
            meta["payload"] = model_dump(payload)
        req.update(
            {
                "options": [
                    {"optionId": "accept", "name": "Approve", "kind": "allow_once"},
                    {"optionId": "decline", "name": "Decline", "kind": "reject_once"},
                ],
                "_meta": meta,
            }
        )
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
