"""The typed description of a protocol revision, read once from its schema.

`describe(schema, meta, label=..., package=...)` returns the runtime's own `Revision`
(templates/runtime/wire/revision.py: frozen dataclasses and NamedTuples, imported here as
`runtime_revision`, a symlink to that file that the wheel carries as a copy), and
`revision_source(rev)` renders it as `_generated/revision.py`.  Every wire name comes
from the schema: a field is found by what it refers to (the property of
`InitializeRequest` whose type is `Implementation` is the client's info, whatever it is
called), or by the definition that declares it; requiredness is the schema's
`required`.  Where a revision lacks a definition the field is None / False, and the
runtime leaves that feature out.
"""

from __future__ import annotations

from typing import Any

from .. import schemas
from ..errors import AgentgenError
from . import runtime_revision as rv
from .methods import method_table

__all__ = ["describe", "doc_text", "revision_source"]


class _Defs:
    """Property lookups on a schema's definitions (following `allOf` references)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.defs = schemas.defs(schema)

    def node(self, name: str | None) -> dict[str, Any]:
        node = self.defs.get(name) if name else None
        return node if isinstance(node, dict) else {}

    def props(self, name: str | None) -> dict[str, Any]:
        """The properties of definition `name` and of what its `allOf` parts refer to."""
        out: dict[str, Any] = {}
        seen: set[str] = set()
        stack = [name] if name else []
        while stack:
            cur = stack.pop()
            if cur in seen:
                continue
            seen.add(cur)
            node = self.node(cur)
            props = node.get("properties")
            if isinstance(props, dict):
                for key, value in props.items():
                    out.setdefault(str(key), value)
            for part in node.get("allOf") or []:
                stack.extend(schemas.refs(part))
        return out

    def required(self, name: str | None) -> set[str]:
        node = self.node(name)
        return {str(r) for r in node.get("required") or []}

    def field_to(self, name: str | None, target: str) -> str | None:
        """The property of `name` whose value refers (directly or as `T | null`) to `target`."""
        for key, value in self.props(name).items():
            if target in set(schemas.refs(value)):
                return key
        return None

    def has(self, name: str | None, field: str) -> bool:
        return field in self.props(name)

    def path_to(self, name: str, target: str, depth: int = 2) -> tuple[str, ...]:
        """The property path from `name` to a property referring to `target` (breadth first)."""
        frontier: list[tuple[str, tuple[str, ...]]] = [(name, ())]
        for _ in range(depth):
            nxt: list[tuple[str, tuple[str, ...]]] = []
            for cur, path in frontier:
                for key, value in self.props(cur).items():
                    refs = list(schemas.refs(value))
                    if target in refs:
                        return (*path, key)
                    nxt.extend((r, (*path, key)) for r in refs if r in self.defs)
            frontier = nxt
        return ()

    def flags(self, name: str | None) -> tuple[str, ...]:
        """The properties of `name` typed boolean (a capability flag: true / false); the
        others are object markers (`{}` = supported, absent or null = not)."""
        out = []
        for key, value in self.props(name).items():
            kind = value.get("type") if isinstance(value, dict) else None
            if kind == "boolean" or (isinstance(kind, list) and "boolean" in kind):
                out.append(key)
        return tuple(sorted(out))

    def consts(self, name: str | None, field: str) -> tuple[str, ...]:
        """The `const` values `field` takes in the variants (anyOf/oneOf) of `name`."""
        out: list[str] = []
        node = self.node(name)
        for key in ("anyOf", "oneOf"):
            for branch in node.get(key) or []:
                if not isinstance(branch, dict):
                    continue
                value = (branch.get("properties") or {}).get(field)
                if isinstance(value, dict) and isinstance(value.get("const"), str):
                    out.append(value["const"])
                elif isinstance(value, dict) and isinstance(value.get("enum"), list):
                    out.extend(str(v) for v in value["enum"])
                elif "const" in branch and isinstance(branch["const"], str):
                    out.append(branch["const"])
        if isinstance(node.get("enum"), list):
            out.extend(str(v) for v in node["enum"])
        return tuple(out)

    def variant_tag(self, union: str, member: str, field: str) -> str | None:
        """The `field` const of the variant of `union` that is (or extends) `member`."""
        for key in ("anyOf", "oneOf"):
            for branch in self.node(union).get(key) or []:
                if not isinstance(branch, dict) or member not in set(schemas.refs(branch)):
                    continue
                value = (branch.get("properties") or {}).get(field)
                if isinstance(value, dict) and isinstance(value.get("const"), str):
                    return str(value["const"])
        return None


def _replay_primers(d: _Defs, chunk_id: str | None) -> tuple[tuple[str, str], ...]:
    """The (chunk tag, whole-message tag) pairs of `SessionUpdate`: a `<x>_chunk` variant
    (a `ContentChunk` carrying a message id) whose `<x>` variant is a whole message (a
    message id and a `content` array)."""
    if not chunk_id:
        return ()
    variants: dict[str, list[str]] = {}
    for branch in (
        d.node("SessionUpdate").get("anyOf") or d.node("SessionUpdate").get("oneOf") or []
    ):
        if not isinstance(branch, dict):
            continue
        tag = ((branch.get("properties") or {}).get("sessionUpdate") or {}).get("const")
        if isinstance(tag, str):
            variants[tag] = list(schemas.refs(branch))
    out = []
    for tag, refs in sorted(variants.items()):
        whole = tag.removesuffix("_chunk")
        if whole == tag or whole not in variants or "ContentChunk" not in refs:
            continue
        props = {k: v for r in variants[whole] for k, v in d.props(r).items()}
        content = props.get("content")
        kind = content.get("type") if isinstance(content, dict) else None
        if chunk_id in props and (kind == "array" or (isinstance(kind, list) and "array" in kind)):
            out.append((tag, whole))
    return tuple(out)


def _version(meta: dict[str, Any] | None, v2_lifecycle: bool) -> int:
    version = (meta or {}).get("version")
    if isinstance(version, int) and not isinstance(version, bool):
        return version
    # The schema itself does not state its protocol version (ProtocolVersion is any
    # uint16); a revision whose prompt answers on acceptance is version 2.
    return 2 if v2_lifecycle else 1


def describe(
    schema: dict[str, Any],
    meta: dict[str, Any] | None = None,
    *,
    label: str = "the ACP schema",
    package: str = "",
) -> rv.Revision:
    """The `Revision` of `schema` (an instance of templates/runtime/wire/revision.py's class)."""
    d = _Defs(schema)
    table = method_table(schema, meta)
    by_name = {(m.side, m.name): m for m in table.methods}

    def cls(side: str, wire: str, role: str) -> str | None:
        m = by_name.get((side, wire))
        return getattr(m, role) if m is not None else None

    init_req = cls("agent", "initialize", "params") or "InitializeRequest"
    init_resp = cls("agent", "initialize", "result") or "InitializeResponse"
    if not d.node(init_req) or not d.node(init_resp):
        raise AgentgenError(
            "the schema has no initialize request/response definitions",
            pointer="/$defs",
            hint="pass an ACP protocol schema (schema.json of a protocol revision)",
        )
    req_info = d.field_to(init_req, "Implementation")
    req_caps = d.field_to(init_req, "ClientCapabilities")
    resp_info = d.field_to(init_resp, "Implementation")
    resp_caps = d.field_to(init_resp, "AgentCapabilities")
    missing = [
        f"{where}: no property of type {what}"
        for where, what, found in (
            (init_req, "Implementation", req_info),
            (init_req, "ClientCapabilities", req_caps),
            (init_resp, "Implementation", resp_info),
            (init_resp, "AgentCapabilities", resp_caps),
        )
        if found is None
    ]
    if missing:
        raise AgentgenError(
            "cannot read the initialize shape: " + "; ".join(missing),
            pointer=f"/$defs/{init_req}",
        )
    assert req_info and req_caps and resp_info and resp_caps
    init = rv.InitShape(
        request_info=req_info,
        request_info_required=req_info in d.required(init_req),
        request_capabilities=req_caps,
        response_info=resp_info,
        response_info_required=resp_info in d.required(init_resp),
        response_capabilities=resp_caps,
        auth_methods=d.field_to(init_resp, "AuthMethod"),
    )

    caps = "AgentCapabilities"
    load_flag = "loadSession" if d.has(caps, "loadSession") else None
    prompt_path = d.path_to(caps, "PromptCapabilities")
    session_path = d.path_to(caps, "SessionCapabilities")
    prov = d.props(caps).get("providers")
    agent_caps = rv.AgentCapabilityNames(
        load_session=load_flag,
        prompt=prompt_path,
        prompt_fields=tuple(sorted(k for k in d.props("PromptCapabilities") if k != "_meta")),
        prompt_flags=d.flags("PromptCapabilities"),
        session=session_path,
        session_fields=tuple(sorted(k for k in d.props("SessionCapabilities") if k != "_meta")),
        session_flags=d.flags("SessionCapabilities"),
        providers="providers" if prov is not None else None,
        providers_is_flag=isinstance(prov, dict) and prov.get("type") == "boolean",
        mcp=d.path_to(caps, "McpCapabilities"),
        mcp_fields=tuple(sorted(k for k in d.props("McpCapabilities") if k != "_meta")),
        mcp_flags=d.flags("McpCapabilities"),
    )
    elicit_field = d.field_to("ClientCapabilities", "ElicitationCapabilities")
    client_caps = rv.ClientCapabilityNames(
        elicitation=elicit_field,
        elicitation_form=d.field_to("ElicitationCapabilities", "ElicitationFormCapabilities"),
    )

    # the agent-handled auth method: the union's `AuthMethodAgent` variant, or (older
    # revisions, no union) the plain `AuthMethod` object
    auth_def = "AuthMethodAgent" if d.node("AuthMethodAgent") else "AuthMethod"
    auth_id = d.field_to(auth_def, "AuthMethodId") or (
        "id" if d.has(auth_def, "id") else "methodId"
    )
    terminal_env = d.props("AuthMethodTerminal").get("env")
    client_auth = d.field_to("ClientCapabilities", "AuthCapabilities")
    auth = rv.AuthMethodShape(
        id=auth_id,
        agent_type=d.variant_tag("AuthMethod", "AuthMethodAgent", "type"),
        terminal_type=d.variant_tag("AuthMethod", "AuthMethodTerminal", "type"),
        terminal_env_list=isinstance(terminal_env, dict) and terminal_env.get("type") == "array",
        client_auth=client_auth,
        client_terminal="terminal" if d.has("AuthCapabilities", "terminal") else None,
    )

    opt_id = d.field_to("SessionConfigOption", "SessionConfigId") or "id"
    config = rv.ConfigOptionShape(
        id=opt_id,
        current_value=next(iter(d.props("SessionConfigBoolean")), "currentValue"),
        select_options=d.field_to("SessionConfigSelect", "SessionConfigSelectOptions") or "options",
        kinds=d.consts("SessionConfigOption", "type") or ("select",),
        value_tags=d.consts(cls("agent", "session/set_config_option", "params"), "type"),
    )

    prompt_resp = cls("agent", "session/prompt", "result") or "PromptResponse"
    v2 = not d.has(prompt_resp, "stopReason")
    chunk_id = d.field_to("ContentChunk", "MessageId")
    prompt_id = d.field_to(prompt_resp, "MessageId")
    stop = d.consts("StopReason", "stopReason") or d.consts("IdleStateUpdate", "stopReason")
    idle_err = "error" if "error" in stop and d.has("ErrorStopReason", "error") else None
    turn = rv.TurnShape(
        lifecycle="v2" if v2 else "v1",
        chunk_message_id=chunk_id,
        chunk_message_id_required=bool(chunk_id) and chunk_id in d.required("ContentChunk"),
        prompt_message_id=prompt_id,
        prompt_message_id_required=bool(prompt_id) and prompt_id in d.required(prompt_resp),
        prompt_usage="usage" if d.has(prompt_resp, "usage") else None,
        stop_reasons=stop,
        idle_usage="usage" if d.has("IdleStateUpdate", "usage") else None,
        idle_error=idle_err,
    )

    perm_req = cls("client", "session/request_permission", "params")
    permission = rv.PermissionShape(
        tool_call=d.field_to(perm_req, "ToolCallUpdate"),
        title="title" if d.has(perm_req, "title") else None,
        description="description" if d.has(perm_req, "description") else None,
    )
    resume_req = cls("agent", "session/resume", "params")
    sessions_replay = d.has(resume_req, "replayFrom")
    sessions = rv.SessionShape(
        load=("agent", "session/load") in by_name,
        resume=("agent", "session/resume") in by_name,
        resume_replay_from="replayFrom" if d.has(resume_req, "replayFrom") else None,
        list=("agent", "session/list") in by_name,
        close=("agent", "session/close") in by_name,
        delete=("agent", "session/delete") in by_name,
        replay_primers=_replay_primers(d, chunk_id) if sessions_replay else (),
    )
    models = rv.ModelNames(
        initialize_request=init_req,
        initialize_response=init_resp,
        new_session_response=cls("agent", "session/new", "result"),
        prompt_request=cls("agent", "session/prompt", "params"),
        prompt_response=cls("agent", "session/prompt", "result"),
        session_notification=cls("client", "session/update", "params"),
        session_update="SessionUpdate" if d.node("SessionUpdate") else None,
    )
    fs_field = d.field_to("ClientCapabilities", "FileSystemCapabilities")
    fs_flags = [k for k in d.props("FileSystemCapabilities") if k != "_meta"]
    diff_props = d.props("Diff")
    authoring = rv.AuthoringShape(
        updates=d.consts("SessionUpdate", "sessionUpdate"),
        tool_call_statuses=d.consts("ToolCallStatus", ""),
        diff="text" if "newText" in diff_props else "changes" if "changes" in diff_props else None,
        fs=fs_field,
        fs_read=next((k for k in fs_flags if k.startswith("read")), None) if fs_field else None,
        fs_write=next((k for k in fs_flags if k.startswith("write")), None) if fs_field else None,
        terminal="terminal" if d.props("ClientCapabilities").get("terminal") else None,
        permission_subject=d.field_to(perm_req, "RequestPermissionSubject"),
        modes=d.field_to(cls("agent", "session/new", "result"), "SessionModeState"),
        command_hint="hint"
        if d.has("UnstructuredCommandInput", "hint") or d.has("TextCommandInput", "hint")
        else None,
        command_tag=d.variant_tag("AvailableCommand", "Command", "type"),
        command_input_tag=d.variant_tag("AvailableCommandInput", "TextCommandInput", "type"),
        config_category=d.has("SessionConfigOption", "category"),
    )
    methods = tuple(
        rv.Method(m.attr, m.kind, m.params, m.result, m.name, m.side, m.unstable, *_route(d, m))
        for m in table.methods
    )
    return rv.Revision(
        protocol_version=_version(meta, v2),
        label=label,
        package=package,
        methods=methods,
        init=init,
        agent_capabilities=agent_caps,
        client_capabilities=client_caps,
        auth_method=auth,
        config_option=config,
        turn=turn,
        permission=permission,
        sessions=sessions,
        models=models,
        elicitation=("client", "elicitation/create") in by_name,
        request_permission=perm_req is not None,
        authoring=authoring,
    )


# what a session method does to the session it names, where the schema cannot say it (a
# load's or resume's result carries no session id; a close's params look like a prompt's):
# the protocol's meaning of these method names.  A delete acts on the store, whether or not
# the session is open on this connection.
_SESSION_EFFECTS = {
    "session/load": "opens",
    "session/resume": "opens",
    "session/close": "closes",
    "session/delete": "none",
}


def _route(d: _Defs, m: Any) -> tuple[str, str]:
    """(scope, effect) of method `m`: session-scoped when its params require a property of
    type SessionId; it opens a session when its result has one (session/new, a fork)."""
    sid = d.field_to(m.params, "SessionId") if m.params else None
    scoped = sid is not None and sid in d.required(m.params)
    if m.result and d.field_to(m.result, "SessionId") is not None:
        return ("session" if scoped else "connection"), "opens"
    if m.name in _SESSION_EFFECTS and m.side == "agent":
        return "session", _SESSION_EFFECTS[m.name]
    return ("session", "uses") if scoped else ("connection", "none")


def revision_source(rev: rv.Revision, *, runtime: str = ".runtime") -> str:
    """`revision.py` of `_generated/` (or of `_generated/<package>/`): `REVISION = ...`."""
    names = sorted(rv.__all__)
    body = repr(rev)
    return (
        f'"""The protocol revision this package serves, read from {doc_text(rev.label)}: do not edit."""\n\n'
        f"from {runtime}.wire.revision import {', '.join(n for n in names if n + '(' in body)}\n\n"
        f"REVISION = {body}\n"
    )


def doc_text(text: str) -> str:
    """`text` made safe inside a generated docstring."""
    return text.replace('"""', "'''").replace("\\", "/")
