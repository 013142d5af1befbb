"""ACP auth methods from the manifest's ``auth:`` list (the stdio side; auth.py is HTTP's).

Types (ACP RFD "auth-methods"): ``agent`` (the agent logs the user in when the client
calls ``authenticate`` / ``auth/login``: the handler hook ``authenticate_with``) and
``terminal`` (the client runs the agent's own command again with the method's ``args``
and ``env`` in an interactive terminal: the generated console script then calls the
``login`` hook; exit status 0 is success, after which the client reconnects).

How a method is listed depends on the revision and on what the client declared:

* an ``agent`` method: ``{id, name, description}`` (+ the revision's ``type`` tag);
* a ``terminal`` method, client declared ``<auth>.<terminal>``: the revision's typed form
  (``type: terminal``, ``args``, ``env`` as an object in v1, ``[{name, value}]`` in v2),
  plus the ``_meta["terminal-auth"]`` form for readers that predate it;
* a ``terminal`` method, v1 client declaring only ``_meta["terminal-auth"]`` (clients
  from before the typed form, and the ACP registry's CI): an untyped (agent-shaped)
  method carrying ``_meta["terminal-auth"]`` = ``{command, args, env, label}``;
* otherwise the terminal method is not listed (a client may see one only when it opted in).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

from ..wire.revision import AuthMethodShape

METHOD_TYPES = ("agent", "terminal")
LEGACY_TERMINAL = "terminal-auth"  # the `_meta` key of the pre-RFD terminal form


class AuthMethod(NamedTuple):
    """One stdio auth method of the manifest."""

    id: str
    type: str  # "agent" | "terminal"
    name: str
    description: str | None
    args: tuple[str, ...]  # terminal: the login flow's arguments
    env: tuple[tuple[str, str], ...]  # terminal: variables set on the login invocation


def manifest_methods(manifest: Mapping[str, Any]) -> tuple[AuthMethod, ...]:
    out = []
    for a in manifest.get("auth") or ():
        kind = a.get("type")
        if kind not in METHOD_TYPES:
            continue
        env = a.get("env") if kind == "terminal" else None
        default_name = "Log in from the terminal" if kind == "terminal" else "Log in"
        out.append(
            AuthMethod(
                id=str(a.get("id") or kind),
                type=str(kind),
                name=str(a.get("name") or default_name),
                description=a.get("description"),
                args=tuple(str(x) for x in a.get("args") or ()),
                env=tuple((str(k), str(v)) for k, v in (env or {}).items()),
            )
        )
    return tuple(out)


def terminal_opt_in(shape: AuthMethodShape, capabilities: Mapping[str, Any]) -> str | None:
    """How the client takes terminal methods: "typed", "legacy" (`_meta`) or None."""
    auth = capabilities.get(shape.client_auth) if shape.client_auth else None
    if shape.terminal_type and shape.client_terminal and type(auth) is dict:
        flag = auth.get(shape.client_terminal)
        if flag is True or type(flag) is dict:  # v1: true; v2: {}
            return "typed"
    meta = capabilities.get("_meta")
    if shape.agent_type is None and type(meta) is dict and meta.get(LEGACY_TERMINAL):
        return "legacy"  # only where an untyped method is an agent method (v1)
    return None


def _legacy(m: AuthMethod) -> dict[str, Any]:
    return {
        "command": sys.argv[0] if sys.argv and sys.argv[0] else "",
        "args": list(m.args),
        "env": dict(m.env),
        "label": m.name,
    }


def listed(
    methods: tuple[AuthMethod, ...], shape: AuthMethodShape, capabilities: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The `authMethods` of an initialize answer, in the revision's shape."""
    opt_in = terminal_opt_in(shape, capabilities)
    out: list[dict[str, Any]] = []
    for m in methods:
        entry: dict[str, Any] = {shape.id: m.id, "name": m.name}
        if m.description:
            entry["description"] = m.description
        if m.type == "agent":
            if shape.agent_type:
                entry["type"] = shape.agent_type
        elif opt_in == "typed" and shape.terminal_type:
            entry["type"] = shape.terminal_type
            entry["args"] = list(m.args)
            if m.env:
                env = dict(m.env)
                entry["env"] = (
                    [{"name": k, "value": v} for k, v in env.items()]
                    if shape.terminal_env_list
                    else env
                )
            entry["_meta"] = {LEGACY_TERMINAL: _legacy(m)}
        elif opt_in == "legacy":
            entry["_meta"] = {LEGACY_TERMINAL: _legacy(m)}
        else:
            continue
        out.append(entry)
    return out


def login_args(methods: tuple[AuthMethod, ...], argv: list[str]) -> AuthMethod | None:
    """The terminal method whose `args` end the command line, if any: the client appends
    them to the agent's configured invocation to start the login flow."""
    for m in methods:
        n = len(m.args)
        if m.type == "terminal" and n and argv[-n:] == list(m.args):
            return m
    return None
