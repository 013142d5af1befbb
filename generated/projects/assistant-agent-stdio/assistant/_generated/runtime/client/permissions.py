"""How a client answers a permission request that stands for one of its interrupts: the
interrupt's answer, a yes or a no, picks the agent's first option of that kind."""

from __future__ import annotations

from typing import Any


def approves(content: Any, spec: dict[str, Any]) -> bool:
    """A permission is one bit: the answer (`content`, dumped) approves when it sets every
    boolean the resume schema requires to true."""
    if content is None:
        return False
    schema = (spec.get("resume") or {}).get("schema") or {}
    props = schema.get("properties") or {}
    flags = [
        k
        for k in schema.get("required") or ()
        if type(props.get(k)) is dict and props[k].get("type") == "boolean"
    ]
    return type(content) is dict and all(content.get(k) is True for k in flags)


def option_of(options: list[dict[str, Any]], kind: str) -> str | None:
    """The id of the first option whose kind starts with `kind` ("allow" / "reject")."""
    for o in options:
        if str(o.get("kind", "")).startswith(kind) and type(o.get("optionId")) is str:
            return str(o["optionId"])
    return None


__all__ = ["approves", "option_of"]
