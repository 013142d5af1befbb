"""The typed description of one protocol revision.

agentgen builds it once from the revision's schema and writes it into the project's
`_generated/` (`revision.py`: `REVISION = Revision(...)`); the runtime reads its
attributes and never guesses a wire name.  Every field name and requiredness here was
read from the schema: which property of `InitializeRequest` carries the client's
`Implementation`, what a `SessionConfigOption` calls its id, whether a message chunk
must carry `messageId`, and so on.

The shapes are NamedTuples (immutable, compared by value, written by `repr` as
`Name(field=...)`): every agent creates these classes at start-up, and a NamedTuple
class costs a fraction of a frozen dataclass's (which compiles six methods each).
`Revision` stays a frozen dataclass: it keeps its method tables in its `__dict__`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple


class Method(NamedTuple):
    """One protocol method.  The first four fields keep the order of the old
    `(attr, kind, params, result)` table rows."""

    attr: str  # python method name: "session_prompt"
    kind: str  # "request" | "notification"
    params: str | None  # model class of the params: "PromptRequest"
    result: str | None  # model class of the result (None for notifications)
    name: str = ""  # wire name: "session/prompt"
    side: str = "agent"  # who handles it: "agent" | "client" | "protocol" | ...
    unstable: bool = False
    # "session": its params name a session (a required property of type SessionId);
    # "connection": anything else
    scope: str = "connection"
    # what it does to a session of the connection: "opens" (its result names a new
    # session, or it attaches an existing one: load / resume), "uses", "closes" or "none"
    effect: str = "none"


class InitShape(NamedTuple):
    """Field names of `initialize` (v1: clientInfo/agentCapabilities..., v2: info/capabilities)."""

    request_info: str  # the client's Implementation: "clientInfo" | "info"
    request_info_required: bool
    request_capabilities: str  # "clientCapabilities" | "capabilities"
    response_info: str  # the agent's Implementation: "agentInfo" | "info"
    response_info_required: bool
    response_capabilities: str  # "agentCapabilities" | "capabilities"
    auth_methods: str | None  # "authMethods"


class AgentCapabilityNames(NamedTuple):
    """Where each capability the runtime advertises sits in `AgentCapabilities`."""

    load_session: str | None  # "loadSession" (v1); None where the revision has no such flag
    prompt: tuple[
        str, ...
    ]  # path to PromptCapabilities: ("promptCapabilities",) | ("session", "prompt")
    prompt_fields: tuple[
        str, ...
    ]  # PromptCapabilities' fields: ("image", "audio", "embeddedContext")
    session: tuple[str, ...]  # path to SessionCapabilities: ("sessionCapabilities",) | ("session",)
    session_fields: tuple[str, ...]  # its fields: ("list", "resume", "close", ...)
    providers: str | None  # "providers" where the revision has provider routing
    providers_is_flag: bool  # the providers capability is a boolean (else an object)
    # the fields of PromptCapabilities / SessionCapabilities typed boolean (v1's prompt
    # flags); every other field is an object marker: `{}` supported, absent not (v2)
    prompt_flags: tuple[str, ...] = ()
    session_flags: tuple[str, ...] = ()
    # path to McpCapabilities: ("mcpCapabilities",) (v1) | ("session", "mcp") (v2); () none
    mcp: tuple[str, ...] = ()
    mcp_fields: tuple[str, ...] = ()  # its transports: ("http", "sse") | ("http", "stdio")
    mcp_flags: tuple[str, ...] = ()  # those typed boolean (v1); the others `{}` markers

    def mark(self, flags: tuple[str, ...], values: dict[str, bool]) -> dict[str, Any]:
        """`values` (capability -> supported) in the revision's shape: a flag is written
        true/false, a marker `{}` when supported and left out when not."""
        out: dict[str, Any] = {}
        for name, supported in values.items():
            if name in flags:
                out[name] = supported
            elif supported:
                out[name] = {}
        return out


class ClientCapabilityNames(NamedTuple):
    elicitation: str | None  # "elicitation"
    elicitation_form: str | None  # "form"


class AuthMethodShape(NamedTuple):
    id: str  # "id" (v1) | "methodId" (v2)
    agent_type: str | None  # the `type` tag an agent-handled method carries ("agent"), if any
    # the `type` tag of a terminal-login method ("terminal"); None: the revision has none
    # (such a method is then listed in the `_meta` "terminal-auth" form older clients read)
    terminal_type: str | None = None
    terminal_env_list: bool = False  # its `env` is [{name, value}] (v2), else {name: value}
    # where the client opts in to terminal methods: ClientCapabilities.<client_auth>.<..>
    client_auth: str | None = None  # "auth"
    client_terminal: str | None = None  # "terminal"


class ConfigOptionShape(NamedTuple):
    id: str  # "id" (v1) | "configId" (v2)
    current_value: str  # "currentValue"
    select_options: str  # "options"
    # the option kinds SessionConfigOption has ("select", "boolean"); a boolean option on
    # a revision without "boolean" is served as a select of "true" / "false"
    kinds: tuple[str, ...] = ("select", "boolean")
    # the `type` tags session/set_config_option's value takes ("id" for a select's value
    # on v2, "boolean"); a revision whose request takes a select's value bare has no "id"
    value_tags: tuple[str, ...] = ()


class TurnShape(NamedTuple):
    """The prompt lifecycle."""

    lifecycle: str  # "v1": the prompt answers when the turn ends | "v2": on acceptance
    chunk_message_id: str | None  # the message id field of a ContentChunk ("messageId")
    chunk_message_id_required: bool
    prompt_message_id: str | None  # v2: PromptResponse's message id field, when it has one
    prompt_message_id_required: bool
    prompt_usage: str | None  # v1 unstable: PromptResponse.usage
    stop_reasons: tuple[str, ...]  # what `stopReason` may say
    idle_usage: str | None  # v2 unstable: IdleStateUpdate.usage
    idle_error: str | None  # the error field of an `error` stop reason ("error"), if any


class PermissionShape(NamedTuple):
    """`session/request_permission` as this revision asks it."""

    tool_call: str | None  # v1: the request names a tool call ("toolCall")
    title: str | None  # v2: the request carries a title ("title")
    description: str | None  # v2: and a description


class AuthoringShape(NamedTuple):
    """What a handler's Turn calls map onto (runtime/agent/authoring.py)."""

    updates: tuple[str, ...] = ()  # the `sessionUpdate` tags the revision has
    tool_call_statuses: tuple[str, ...] = ()  # ToolCallStatus values ("cancelled" on v2)
    diff: str | None = None  # Diff's shape: "text" (path/oldText/newText) | "changes" (v2)
    fs: str | None = None  # ClientCapabilities' FileSystemCapabilities field ("fs")
    fs_read: str | None = None  # its read flag ("readTextFile")
    fs_write: str | None = None  # its write flag ("writeTextFile")
    terminal: str | None = None  # ClientCapabilities' terminal flag ("terminal")
    permission_subject: str | None = None  # v2: RequestPermissionRequest's subject field
    modes: str | None = None  # NewSessionResponse's SessionModeState field ("modes")
    command_hint: str | None = None  # the command input's hint field ("hint")
    command_tag: str | None = None  # AvailableCommand's `type` where it is a union ("command")
    command_input_tag: str | None = None  # the text input's `type` where tagged ("text")
    config_category: bool = False  # SessionConfigOption has `category`

    def gate(self, method: str) -> tuple[str, ...] | None:
        """The client capability (a path in ClientCapabilities) `method` needs; () for
        one every client serves; None when this revision cannot send it at all."""
        if method.startswith("fs/"):
            flag = self.fs_read if method.startswith("fs/read") else self.fs_write
            return (self.fs, flag) if self.fs and flag else None
        if method.startswith("terminal/"):
            return (self.terminal,) if self.terminal else None
        return ()


class SessionShape(NamedTuple):
    load: bool  # `session/load` exists
    resume: bool  # `session/resume` exists
    resume_replay_from: str | None  # ResumeSessionRequest's replay field ("replayFrom")
    list: bool
    close: bool
    delete: bool
    # (chunk tag, whole-message tag) pairs of SessionUpdate, e.g. ("agent_message_chunk",
    # "agent_message"): a replay primes each message with its whole-message update
    # (`content: []`) before the first chunk of that message (v2)
    replay_primers: tuple[tuple[str, str], ...] = ()


class ModelNames(NamedTuple):
    """Class names of the generated protocol models this revision uses (None: absent)."""

    initialize_request: str | None
    initialize_response: str | None
    new_session_response: str | None
    prompt_request: str | None
    prompt_response: str | None
    session_notification: str | None  # params of `session/update`
    session_update: str | None  # the update union


_NO_AUTHORING = AuthoringShape()  # a revision described without authoring shapes


@dataclass(frozen=True)
class Revision:
    protocol_version: int
    label: str  # where it came from (the schema's origin)
    package: str  # the `_generated` subpackage holding its models ("" when only one revision)
    methods: tuple[Method, ...]
    init: InitShape
    agent_capabilities: AgentCapabilityNames
    client_capabilities: ClientCapabilityNames
    auth_method: AuthMethodShape
    config_option: ConfigOptionShape
    turn: TurnShape
    permission: PermissionShape
    sessions: SessionShape
    models: ModelNames
    elicitation: bool  # `elicitation/create` exists
    request_permission: bool  # `session/request_permission` exists
    authoring: AuthoringShape = _NO_AUTHORING

    def side(self, side: str) -> dict[str, Method]:
        """The methods `side` handles, by wire name (computed once per side)."""
        cache: dict[str, dict[str, Method]] = self.__dict__.setdefault("_sides", {})
        found = cache.get(side)
        if found is None:
            found = cache[side] = {m.name: m for m in self.methods if m.side == side}
        return found


def revision_for(revisions: Iterable[Revision], version: Any) -> Revision | None:
    """The revision among `revisions` whose protocol version is `version`, if any."""
    return next((r for r in revisions if r.protocol_version == version), None)


__all__ = [
    "AgentCapabilityNames",
    "AuthMethodShape",
    "AuthoringShape",
    "ClientCapabilityNames",
    "ConfigOptionShape",
    "InitShape",
    "Method",
    "ModelNames",
    "PermissionShape",
    "Revision",
    "SessionShape",
    "TurnShape",
    "revision_for",
]
