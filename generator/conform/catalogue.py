"""The requirements, as data: a table you can read and diff (`agentgen conform list`).

Each `Spec` is one requirement written from the protocol's own text, cited as
`file:lines @ commit` into agentclientprotocol/agent-client-protocol's docs (`DOCS_AT`)
or as a JSON pointer into the revision's schema.  Where a requirement is one the
official kit (acp-tck) checks, it carries that kit's id and tier, so the two reports can
be read side by side; ours are `AGENTGEN-...`.

Nothing here is written per protocol version.  `catalogue(revision)` keeps the specs
that apply to a revision (a method it has, the prompt lifecycle it describes) and
computes each capability gate from the revision description (templates/runtime/wire/
revision.py): where `sessionCapabilities.resume` or `capabilities.session` sits is read
from `AgentCapabilityNames`, never spelled here.  A baseline session requirement is
mandatory where the revision's session surface is unconditional (its prompt
capabilities sit outside the session capability, v1) and a capability requirement gated
by that capability where they sit inside it (v2: the whole surface is opt-in).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..protocol import runtime_revision as rv
from .verdict import Tier

DOCS_AT = "b7f0005"  # agentclientprotocol/agent-client-protocol, the docs cited below

Gate = tuple[str, ...]


@dataclass(frozen=True)
class Requirement:
    """One row of a revision's catalogue."""

    id: str
    tier: Tier
    capability: str | None  # dotted path in the initialize result, or "inferred:<what>"
    text: str
    citation: str
    role: str  # "agent" | "client"
    transport: str  # "any" | "stdio" | "http" | "ws"
    gate: Gate | None = None  # the capability's path, split (None: not gated)


def _always(rev: rv.Revision) -> bool:
    return True


@dataclass(frozen=True)
class Spec:
    id: str
    tier: Tier
    text: str
    cite: str | Callable[[rv.Revision], str]
    role: str = "agent"
    transport: str = "any"
    applies: Callable[[rv.Revision], bool] = _always
    # a capability requirement: where its capability sits (None: the requirement is
    # the spec's tier as written, e.g. a baseline on a revision that gates nothing)
    gate: Callable[[rv.Revision], Gate | None] | None = None
    inferred: str | None = None  # "modes": support read from session/new's answer
    # JSON-RPC batches: True only where the schema has batch envelopes, False only where
    # it has none (the schema's root `anyOf` arrays, read by schema_link), None either way
    batches: bool | None = None

    def row(self, rev: rv.Revision) -> Requirement:
        cite = self.cite(rev) if callable(self.cite) else self.cite
        cite = cite.replace("{v}", f"v{rev.protocol_version}")
        gate = self.gate(rev) if self.gate is not None else None
        tier, capability = self.tier, None
        if gate is not None:
            tier, capability = Tier.CAPABILITY, ".".join(gate)
        elif self.inferred is not None:
            tier, capability = Tier.CAPABILITY, f"inferred:{self.inferred}"
        return Requirement(
            self.id, tier, capability, self.text, cite, self.role, self.transport, gate
        )


# ---- what a revision has: read from its description ------------------------------------


def has(method: str) -> Callable[[rv.Revision], bool]:
    def check(rev: rv.Revision) -> bool:
        return method in rev.side("agent") or method in rev.side("client")

    return check


def lifecycle(name: str) -> Callable[[rv.Revision], bool]:
    def check(rev: rv.Revision) -> bool:
        return rev.turn.lifecycle == name

    return check


def both(*tests: Callable[[rv.Revision], bool]) -> Callable[[rv.Revision], bool]:
    def check(rev: rv.Revision) -> bool:
        return all(t(rev) for t in tests)

    return check


def session_surface(rev: rv.Revision) -> Gate | None:
    """The capability that gates the whole session surface, where the revision has one:
    the session capability when the prompt capabilities sit inside it."""
    caps = rev.agent_capabilities
    if caps.session and caps.prompt[: len(caps.session)] == caps.session:
        return (rev.init.response_capabilities, *caps.session)
    return None


def session_method(field: str) -> Callable[[rv.Revision], Gate | None]:
    """A session method's gate: its own SessionCapabilities field when the revision has
    one (`sessionCapabilities.resume`), else the session surface's (None: baseline)."""

    def gate(rev: rv.Revision) -> Gate | None:
        caps = rev.agent_capabilities
        if field in caps.session_fields:
            return (rev.init.response_capabilities, *caps.session, field)
        return session_surface(rev)

    return gate


def load_gate(rev: rv.Revision) -> Gate | None:
    flag = rev.agent_capabilities.load_session
    return (rev.init.response_capabilities, flag) if flag else session_surface(rev)


def prompt_gate(field: str) -> Callable[[rv.Revision], Gate | None]:
    def gate(rev: rv.Revision) -> Gate | None:
        caps = rev.agent_capabilities
        if field not in caps.prompt_fields:
            return None
        return (rev.init.response_capabilities, *caps.prompt, field)

    return gate


def has_prompt_field(field: str) -> Callable[[rv.Revision], bool]:
    def check(rev: rv.Revision) -> bool:
        return field in rev.agent_capabilities.prompt_fields

    return check


def by_version(**cites: str) -> Callable[[rv.Revision], str]:
    """A citation per docs folder (`v1=...`, `v2=...`): the docs are per revision."""

    def cite(rev: rv.Revision) -> str:
        key = f"v{rev.protocol_version}"
        text = cites.get(key) or next(iter(cites.values()))
        return text.replace("{v}", key)

    return cite


def doc(path: str, lines: str) -> str:
    return f"docs/protocol/{{v}}/{path}:{lines} @ {DOCS_AT}"


def _v(v1: str, v2: str) -> Callable[[rv.Revision], str]:
    return by_version(v1=v1.replace("{v}", "v1"), v2=v2.replace("{v}", "v2"))


MAN, CAP, ADV, INF = Tier.MANDATORY, Tier.CAPABILITY, Tier.ADVISORY, Tier.INFORMATIONAL
V1, V2 = lifecycle("v1"), lifecycle("v2")

AGENT: tuple[Spec, ...] = (
    # ---- transport and JSON-RPC ---------------------------------------------------------
    Spec(
        "ACP-TRANSPORT-001",
        MAN,
        "Every line the agent writes to stdout is one JSON-RPC 2.0 message object.",
        _v(doc("transports.mdx", "24-26"), doc("transports.mdx", "25-27")),
        transport="stdio",
        batches=False,
    ),
    Spec(
        "ACP-TRANSPORT-201",
        MAN,
        "Every line the agent writes to stdout is one JSON-RPC 2.0 message object or a "
        "non-empty array of them (a batch).",
        _v(doc("transports.mdx", "24-26"), doc("transports.mdx", "25-27,57")),
        transport="stdio",
        batches=True,
    ),
    Spec(
        "ACP-TRANSPORT-002",
        MAN,
        "What the agent writes is valid UTF-8.",
        doc("transports.mdx", "6"),
    ),
    Spec(
        "ACP-JSONRPC-001",
        MAN,
        "A response's `id` is the id of the request it answers, exactly (integer and "
        "string ids alike), and each request is answered once.",
        doc("overview.mdx", "219-223"),
    ),
    Spec(
        "ACP-JSONRPC-002",
        MAN,
        "A response carries exactly one of `result` and `error`; an error has an integer "
        "`code` and a string `message`.",
        doc("overview.mdx", "219-222"),
    ),
    Spec(
        "ACP-JSONRPC-003",
        MAN,
        "Notifications never receive a response, success or error.",
        doc("overview.mdx", "223"),
    ),
    Spec(
        "ACP-JSONRPC-004",
        ADV,
        "A method the agent does not know is answered with error -32601.",
        doc("extensibility.mdx", "80-91"),
    ),
    Spec(
        "ACP-JSONRPC-005",
        ADV,
        "After an erroneous request the connection stays usable.",
        doc("overview.mdx", "217-223"),
    ),
    Spec(
        "ACP-ERROR-001",
        ADV,
        "An error's `message` is a non-empty single line.",
        doc("overview.mdx", "219-222"),
    ),
    Spec(
        "ACP-SCHEMA-001",
        MAN,
        "Every message the agent sends validates against the revision's schema (params "
        "by the method's definition, a result by the request's).",
        "#/$defs (the --schema given) via templates/runtime/wire/wirecheck.py",
    ),
    Spec(
        "ACP-SCHEMA-002",
        ADV,
        "No message the agent sends carries a field at the root of a protocol type that "
        "the schema does not name (other than `_meta`), nor an unknown variant of a "
        "tagged union without the `_` prefix.",
        doc("extensibility.mdx", "39"),
    ),
    # ---- batches (revisions with batch envelopes) -----------------------------------------
    Spec(
        "ACP-BATCH-201",
        MAN,
        "An empty array is answered with one Invalid Request error (-32600, `id: null`), "
        "not an array.",
        by_version(v2=doc("transports.mdx", "57-59").replace("{v}", "v2")),
        batches=True,
        transport="not-http",
    ),
    Spec(
        "ACP-BATCH-202",
        MAN,
        "A batch of notifications gets no reply at all, never an empty array.",
        by_version(v2=doc("transports.mdx", "66-72").replace("{v}", "v2")),
        batches=True,
        transport="not-http",
    ),
    Spec(
        "ACP-BATCH-204",
        ADV,
        "A batch of requests is answered with one array holding a response per request.",
        by_version(v2=doc("transports.mdx", "62-65").replace("{v}", "v2")),
        batches=True,
        transport="not-http",
    ),
    # ---- initialize ------------------------------------------------------------------------
    Spec(
        "ACP-INIT-001",
        MAN,
        "`initialize` succeeds with a result that validates, carrying an integer "
        "`protocolVersion`.",
        _v(doc("initialization.mdx", "54"), doc("initialization.mdx", "47")),
    ),
    Spec(
        "ACP-INIT-002",
        MAN,
        "Asked for the revision's protocol version, the agent answers that version.",
        doc("initialization.mdx", "96"),
        applies=V1,
    ),
    Spec(
        "ACP-INIT-201",
        MAN,
        "Asked for the revision's protocol version, the agent answers it, or (when it does "
        "not support it) its own latest version: never another value.",
        doc("initialization.mdx", "94"),
        applies=V2,
    ),
    Spec(
        "ACP-INIT-003",
        MAN,
        "Asked for an unsupported version (65535), the agent answers with its own latest "
        "version: not 65535 echoed, not lower than what it answers for the revision's.",
        _v(doc("initialization.mdx", "96"), doc("initialization.mdx", "94")),
    ),
    Spec(
        "ACP-INIT-202",
        MAN,
        "Asked for an older version (1), the agent answers 1 or its own latest version, "
        "never an error.",
        doc("initialization.mdx", "94"),
        applies=lambda r: r.protocol_version > 1,
    ),
    Spec(
        "ACP-INIT-004",
        ADV,
        "The `initialize` result names the agent (`name` and `version`).",
        doc("initialization.mdx", "54"),
        applies=lambda r: not r.init.response_info_required,
    ),
    Spec(
        "ACP-INIT-203",
        MAN,
        "The `initialize` result's implementation information is an object with a "
        "non-empty `name` and `version`.",
        doc("initialization.mdx", "248"),
        applies=lambda r: r.init.response_info_required,
    ),
    Spec(
        "ACP-AUTH-001",
        ADV,
        "The ids of the advertised `authMethods` are unique.",
        "#/$defs/AuthMethod (id: 'Unique identifier')",
        applies=lambda r: r.init.auth_methods is not None,
    ),
    Spec(
        "ACP-AUTH-002",
        MAN,
        "No terminal auth method is advertised to a client that did not opt in "
        "(`auth.terminal` in its capabilities).",
        by_version(v1=doc("authentication.mdx", "126-128").replace("{v}", "v1")),
        applies=lambda r: (
            r.auth_method.terminal_type is not None and r.auth_method.client_auth is not None
        ),
    ),
    Spec(
        "ACP-EXT-001",
        MAN,
        "A request for an unknown `_`-prefixed method gets a response (a result or any error).",
        doc("extensibility.mdx", "65"),
    ),
    # ---- sessions ----------------------------------------------------------------------------
    Spec(
        "ACP-SESSION-001",
        MAN,
        "`session/new` with an absolute `cwd` succeeds with a non-empty string `sessionId`.",
        _v(doc("session-setup.mdx", "71"), doc("session-setup.mdx", "69")),
        gate=session_surface,
    ),
    Spec(
        "ACP-SESSION-002",
        MAN,
        "Two `session/new` calls on one connection return distinct session ids.",
        _v(doc("session-setup.mdx", "71"), doc("session-setup.mdx", "69")),
        gate=session_surface,
    ),
    Spec(
        "ACP-ADDDIRS-001",
        CAP,
        "`session/new` with an absolute `additionalDirectories` entry is accepted.",
        _v(doc("session-setup.mdx", "315-316"), doc("session-setup.mdx", "282-286")),
        applies=lambda r: "additionalDirectories" in r.agent_capabilities.session_fields,
        gate=session_method("additionalDirectories"),
    ),
    Spec(
        "ACP-LOAD-001",
        CAP,
        "`session/load` of a session the agent made succeeds with a result that validates.",
        by_version(v1=doc("session-setup.mdx", "104-108").replace("{v}", "v1")),
        applies=has("session/load"),
        gate=load_gate,
    ),
    Spec(
        "ACP-LOAD-002",
        CAP,
        "Every `session/update` of a `session/load` replay arrives before its response.",
        by_version(v1=doc("session-setup.mdx", "134,178").replace("{v}", "v1")),
        applies=has("session/load"),
        gate=load_gate,
    ),
    Spec(
        "ACP-RESUME-001",
        CAP,
        "`session/resume` of a session the agent made succeeds with a result that validates.",
        _v(doc("session-setup.mdx", "217-243"), doc("session-setup.mdx", "83-89")),
        applies=has("session/resume"),
        gate=session_method("resume"),
    ),
    Spec(
        "ACP-RESUME-002",
        CAP,
        "`session/resume` (without a replay asked for) sends no conversation history "
        "before its response.",
        _v(doc("session-setup.mdx", "243"), doc("session-setup.mdx", "118-121")),
        applies=has("session/resume"),
        gate=session_method("resume"),
    ),
    Spec(
        "ACP-LIST-001",
        CAP,
        "`session/list` with no filter succeeds with a `sessions` array.",
        _v(doc("session-list.mdx", "94"), doc("session-list.mdx", "73")),
        applies=has("session/list"),
        gate=session_method("list"),
    ),
    Spec(
        "ACP-LIST-002",
        CAP,
        "`session/list` filtered by a `cwd` no session uses returns `sessions: []`.",
        _v(doc("session-list.mdx", "166"), doc("session-list.mdx", "145")),
        applies=has("session/list"),
        gate=session_method("list"),
    ),
    Spec(
        "ACP-CLOSE-001",
        CAP,
        "`session/close` of an idle session succeeds with an empty object.",
        _v(doc("session-setup.mdx", "282-299"), doc("session-setup.mdx", "225-244")),
        applies=has("session/close"),
        gate=session_method("close"),
    ),
    Spec(
        "ACP-DELETE-001",
        CAP,
        "`session/delete` of a session the agent made succeeds with an empty object.",
        doc("session-delete.mdx", "35-52"),
        applies=has("session/delete"),
        gate=session_method("delete"),
    ),
    Spec(
        "ACP-DELETE-002",
        ADV,
        "Deleting a session that never existed succeeds silently.",
        doc("session-delete.mdx", "86"),
        applies=has("session/delete"),
    ),
    Spec(
        "ACP-MODES-001",
        CAP,
        "When `session/new` answers with `modes`, `currentModeId` is one of `availableModes`.",
        by_version(v1=doc("session-modes.mdx", "55-59").replace("{v}", "v1")),
        applies=lambda r: r.authoring.modes is not None and "session/set_mode" in r.side("agent"),
        inferred="modes",
    ),
    Spec(
        "ACP-MODES-002",
        CAP,
        "`session/set_mode` to another advertised mode succeeds.",
        by_version(v1=doc("session-modes.mdx", "83-103").replace("{v}", "v1")),
        applies=lambda r: r.authoring.modes is not None and "session/set_mode" in r.side("agent"),
        inferred="modes",
    ),
    Spec(
        "ACP-CONFIG-001",
        CAP,
        "Every config option `session/new` answers with has a current value its type allows "
        "(a boolean's is a bool, a select's one of its options).",
        "#/$defs/SessionConfigOption",
        applies=has("session/set_config_option"),
        inferred="configOptions",
    ),
    Spec(
        "ACP-CONFIG-002",
        CAP,
        "`session/set_config_option` answers with the complete list of config options, the "
        "changed one holding its new value.",
        _v(doc("session-config-options.mdx", "255"), doc("session-config-options.mdx", "236")),
        applies=has("session/set_config_option"),
        inferred="configOptions",
    ),
    # ---- prompt turns --------------------------------------------------------------------------
    Spec(
        "ACP-PROMPT-001",
        MAN,
        "A text prompt ends with a result whose `stopReason` is one the revision defines.",
        by_version(v1=doc("prompt-turn.mdx", "217").replace("{v}", "v1")),
        applies=V1,
        gate=session_surface,
    ),
    Spec(
        "ACP-PROMPT-002",
        MAN,
        "Every `session/update` of a turn carries the prompted session's id.",
        by_version(v1=doc("initialization.mdx", "245").replace("{v}", "v1")),
        applies=V1,
        gate=session_surface,
    ),
    Spec(
        "AGENTGEN-PROMPT-001",
        MAN,
        "No `session/update` of a turn arrives after the `session/prompt` response that ended it.",
        by_version(v1=doc("prompt-turn.mdx", "217,343").replace("{v}", "v1")),
        applies=V1,
        gate=session_surface,
    ),
    Spec(
        "ACP-PROMPT-201",
        CAP,
        "The `session/prompt` result (the prompt accepted) carries a non-empty `messageId`.",
        by_version(v2=doc("prompt-lifecycle.mdx", "109-119").replace("{v}", "v2")),
        applies=lambda r: r.turn.lifecycle == "v2" and r.turn.prompt_message_id_required,
        gate=session_surface,
    ),
    Spec(
        "ACP-PROMPT-205",
        CAP,
        "Every `session/update` of a turn carries the prompted session's id.",
        "#/$defs/UpdateSessionNotification/required",
        applies=V2,
        gate=session_surface,
    ),
    Spec(
        "ACP-STATE-201",
        CAP,
        "A turn-ending idle `state_update` was preceded in the turn by `state: running`.",
        by_version(v2=doc("prompt-lifecycle.mdx", "143").replace("{v}", "v2")),
        applies=V2,
        gate=session_surface,
    ),
    Spec(
        "ACP-STATE-203",
        CAP,
        "The idle `state_update` that ends a turn carries a `stopReason` the revision "
        "defines or one starting with `_`.",
        by_version(v2=doc("prompt-lifecycle.mdx", "332,465").replace("{v}", "v2")),
        applies=V2,
        gate=session_surface,
    ),
    Spec(
        "ACP-PROMPT-003",
        ADV,
        "A prompt of text and a `resource_link` block is accepted and the turn ends.",
        _v(doc("initialization.mdx", "204"), doc("initialization.mdx", "203")),
    ),
    Spec(
        "ACP-META-001",
        ADV,
        "A prompt carrying `_meta` (a `traceparent`) is accepted and the turn ends.",
        doc("extensibility.mdx", "33-39"),
    ),
    Spec(
        "ACP-PROMPTCAP-001",
        CAP,
        "With `image` advertised, a prompt holding an image block is accepted and the turn ends.",
        "#/$defs/PromptCapabilities/properties/image",
        applies=has_prompt_field("image"),
        gate=prompt_gate("image"),
    ),
    Spec(
        "ACP-PROMPTCAP-002",
        CAP,
        "With `audio` advertised, a prompt holding an audio block is accepted and the turn ends.",
        "#/$defs/PromptCapabilities/properties/audio",
        applies=has_prompt_field("audio"),
        gate=prompt_gate("audio"),
    ),
    Spec(
        "ACP-PROMPTCAP-003",
        CAP,
        "With `embeddedContext` advertised, a prompt holding a `resource` block is accepted "
        "and the turn ends.",
        "#/$defs/PromptCapabilities/properties/embeddedContext",
        applies=has_prompt_field("embeddedContext"),
        gate=prompt_gate("embeddedContext"),
    ),
    # ---- cancel ----------------------------------------------------------------------------------
    Spec(
        "ACP-CANCEL-001",
        MAN,
        "After `session/cancel` during a turn, the prompt ends with `stopReason: cancelled`, "
        "not an error.",
        by_version(v1=doc("prompt-turn.mdx", "332,339").replace("{v}", "v1")),
        applies=V1,
        gate=session_surface,
    ),
    Spec(
        "ACP-CANCEL-002",
        MAN,
        "After `session/cancel`, every `session/update` of the turn arrives before the "
        "prompt's response.",
        by_version(v1=doc("prompt-turn.mdx", "343").replace("{v}", "v1")),
        applies=V1,
        gate=session_surface,
    ),
    Spec(
        "ACP-CANCEL-201",
        CAP,
        "After `session/cancel` during a turn, the agent reports an idle `state_update` "
        "with `stopReason: cancelled`.",
        by_version(v2=doc("prompt-lifecycle.mdx", "503,510").replace("{v}", "v2")),
        applies=V2,
        gate=session_surface,
    ),
    Spec(
        "ACP-CANCEL-202",
        CAP,
        "After the idle `cancelled` update, nothing more of the cancelled turn arrives.",
        by_version(v2=doc("prompt-lifecycle.mdx", "514").replace("{v}", "v2")),
        applies=V2,
        gate=session_surface,
    ),
    # ---- what the agent may call -----------------------------------------------------------------
    Spec(
        "ACP-CLIENTCAP-001",
        MAN,
        "The agent never calls `fs/*` on a client that did not declare file system support.",
        by_version(v1=doc("file-system.mdx", "10,28").replace("{v}", "v1")),
        applies=lambda r: r.authoring.fs is not None,
    ),
    Spec(
        "ACP-CLIENTCAP-002",
        MAN,
        "The agent never calls `terminal/*` on a client that did not declare terminals.",
        by_version(v1=doc("terminals.mdx", "10,25").replace("{v}", "v1")),
        applies=lambda r: r.authoring.terminal is not None,
    ),
    Spec(
        "ACP-CLIENTCAP-003",
        MAN,
        "The agent never calls `elicitation/create` on a client that declared no elicitation.",
        doc("elicitation.mdx", "26-27"),
        applies=lambda r: r.elicitation,
    ),
    Spec(
        "ACP-CLIENTCAP-202",
        MAN,
        "Every method the agent calls is one the revision lets an agent call (the client's "
        "table, the protocol's) or starts with `_`.",
        doc("extensibility.mdx", "43,52"),
    ),
    # ---- the process --------------------------------------------------------------------------
    Spec(
        "ACP-SHUTDOWN-001",
        ADV,
        "When its stdin closes, the agent exits on its own (no signal needed).",
        doc("transports.mdx", "30-43"),
        transport="stdio",
    ),
    Spec(
        "ACP-STDERR-001",
        INF,
        "How much the agent writes to stderr (recorded, never judged).",
        doc("transports.mdx", "22-28"),
        transport="stdio",
    ),
    Spec(
        "ACP-INFO-PARSE-001",
        INF,
        "What the agent does with a line that is not JSON, and whether it stays usable.",
        "(the docs are silent)",
    ),
    Spec(
        "ACP-INFO-INVALIDREQ-001",
        INF,
        "What the agent does with JSON that is not JSON-RPC, and whether it stays usable.",
        "(the docs are silent)",
    ),
    Spec(
        "ACP-INFO-UNKNOWNSESSION-001",
        INF,
        "What the agent answers to a prompt for a session it never made.",
        doc("error.mdx", "1-10"),
    ),
)


def _on(wanted: str, transport: str) -> bool:
    """`any`, one transport, or `not-<transport>` (batches: the HTTP RFD leaves batch
    requests to its Phase 4, docs/rfds/streamable-http-websocket-transport.mdx:372)."""
    if wanted.startswith("not-"):
        return transport != wanted[4:]
    return wanted in ("any", transport)


def catalogue(
    rev: rv.Revision, *, role: str = "agent", transport: str = "stdio", batches: bool = False
) -> list[Requirement]:
    """The requirements that apply to `rev` (whose schema has batch envelopes or not) for
    a peer of `role` over `transport`."""
    rows = []
    for spec in SPECS:
        if spec.role != role or not _on(spec.transport, transport):
            continue
        if spec.batches is not None and spec.batches != batches:
            continue
        if spec.applies(rev):
            rows.append(spec.row(rev))
    return rows


RFD = f"docs/rfds/streamable-http-websocket-transport.mdx:{{}} @ {DOCS_AT}"


def rfd(lines: str) -> str:
    return RFD.format(lines)


TRANSPORTS: tuple[Spec, ...] = (
    Spec(
        "AGENTGEN-HTTP-001",
        MAN,
        "`initialize` POSTed without `Acp-Connection-Id` is answered 200 with the JSON-RPC "
        "response as its body and an `Acp-Connection-Id` header.",
        rfd("55,137-138,306"),
        transport="http",
    ),
    Spec(
        "AGENTGEN-HTTP-002",
        MAN,
        "Every other POST the agent accepts is answered 202 Accepted with an empty body "
        "(its response comes on a stream).",
        rfd("37,55,310"),
        transport="http",
    ),
    Spec(
        "AGENTGEN-HTTP-003",
        MAN,
        "The routing errors: a POST or GET without `Acp-Connection-Id` 400, an unknown one "
        "404, a session-scoped POST without `Acp-Session-Id` 400, a GET not accepting "
        "`text/event-stream` 406, a POST that is not `application/json` 415; DELETE 202.",
        rfd("265-268,297-314"),
        transport="http",
    ),
    Spec(
        "AGENTGEN-HTTP-004",
        MAN,
        "A session-scoped stream carries only its own session's messages; a response to a "
        "connection-level request comes on the connection-scoped stream.",
        rfd("35,56,123-124,396"),
        transport="http",
    ),
    Spec(
        "AGENTGEN-HTTP-005",
        MAN,
        "Two sessions of one connection prompted at once: each session's updates arrive on "
        "its own stream, none on the other's.",
        rfd("396,403"),
        transport="http",
    ),
    Spec(
        "AGENTGEN-HTTP-006",
        MAN,
        "The streams are `text/event-stream` and each event's data is one JSON-RPC message.",
        rfd("14,35,56"),
        transport="http",
    ),
    Spec(
        "AGENTGEN-HTTP-007",
        MAN,
        "The agent serves HTTP/2 (h2c over cleartext, ALPN over TLS).",
        rfd("39,270"),
        transport="http",
    ),
    Spec(
        "AGENTGEN-HTTP-008",
        CAP,
        "A session made on one connection is resumed on a new connection.",
        rfd("62,75,229-246"),
        transport="http",
        applies=has("session/resume"),
        gate=session_method("resume"),
    ),
    Spec(
        "AGENTGEN-HTTP-009",
        INF,
        "The cookies the agent sets (the kit returns them on every later request).",
        rfd("47-49"),
        transport="http",
    ),
    Spec(
        "AGENTGEN-WS-001",
        MAN,
        "The WebSocket upgrade is answered 101 with an `Acp-Connection-Id` header.",
        rfd("276-287"),
        transport="ws",
    ),
    Spec(
        "AGENTGEN-WS-002",
        MAN,
        "Every message the agent sends is a text frame holding one JSON-RPC message.",
        rfd("289-291"),
        transport="ws",
    ),
    Spec(
        "AGENTGEN-WS-003",
        ADV,
        "A ping is answered with a pong.",
        "RFC 6455 section 5.5.2 (the RFD carries JSON-RPC over WebSocket as it is)",
        transport="ws",
    ),
    Spec(
        "AGENTGEN-WS-004",
        ADV,
        "The kit's close is answered with a close (the closing handshake completes).",
        rfd("291"),
        transport="ws",
    ),
)

CLIENT: tuple[Spec, ...] = (
    Spec(
        "AGENTGEN-CLIENT-001",
        MAN,
        "The client's first message is `initialize`.",
        doc("initialization.mdx", "24"),
        role="client",
    ),
    Spec(
        "AGENTGEN-CLIENT-002",
        MAN,
        "`initialize` carries an integer `protocolVersion` (the latest the client speaks).",
        _v(doc("initialization.mdx", "94"), doc("initialization.mdx", "92")),
        role="client",
    ),
    Spec(
        "AGENTGEN-CLIENT-003",
        MAN,
        "The client calls nothing the agent did not advertise (no `session/load` without "
        "`loadSession`, no optional session method without its capability) and no method "
        "the revision does not have.",
        _v(doc("session-setup.mdx", "104,213,278"), doc("session-delete.mdx", "52")),
        role="client",
    ),
    Spec(
        "AGENTGEN-CLIENT-004",
        MAN,
        "Prompt blocks stay within the agent's prompt capabilities (text and resource links "
        "when it advertises none).",
        _v(doc("prompt-turn.mdx", "92"), doc("prompt-lifecycle.mdx", "99")),
        role="client",
    ),
    Spec(
        "AGENTGEN-CLIENT-005",
        MAN,
        "A permission answer is one of the options offered (or `cancelled`).",
        _v(doc("tool-calls.mdx", "146-170"), doc("tool-calls.mdx", "194-253")),
        role="client",
    ),
    Spec(
        "AGENTGEN-CLIENT-006",
        CAP,
        "A client that cancels a turn (`session/cancel`; the kit sends the client SIGINT, a "
        "user's Ctrl-C, while its permission question is open) answers every pending "
        "`session/request_permission` with the `cancelled` outcome.",
        _v(doc("prompt-turn.mdx", "328"), doc("prompt-lifecycle.mdx", "499")),
        role="client",
        applies=both(has("session/cancel"), has("session/request_permission")),
        inferred="session/cancel (the client cancels on SIGINT)",
    ),
    Spec(
        "AGENTGEN-CLIENT-007",
        MAN,
        "An unknown `session/update` kind, a `_` notification and a `$/cancel_request` for "
        "no pending request are tolerated: the turn goes on, nothing is answered.",
        _v(doc("extensibility.mdx", "109"), doc("extensibility.mdx", "109,118")),
        role="client",
    ),
    Spec(
        "AGENTGEN-CLIENT-008",
        CAP,
        "A client that declares file reading answers `fs/read_text_file` with the file's text.",
        by_version(v1=doc("file-system.mdx", "10-28").replace("{v}", "v1")),
        role="client",
        applies=has("fs/read_text_file"),
        inferred="fs.readTextFile (the client's initialize)",
    ),
    Spec(
        "AGENTGEN-CLIENT-013",
        CAP,
        "A client that lists sessions passes the agent's `nextCursor` back as `cursor` "
        "unchanged (cursors are opaque).",
        _v(doc("session-list.mdx", "170-173"), doc("session-list.mdx", "149-152")),
        role="client",
        applies=has("session/list"),
        inferred="session/list (the client lists sessions)",
    ),
    Spec(
        "AGENTGEN-CLIENT-009",
        MAN,
        "Each response of the client answers a request of the agent by its exact id, once.",
        doc("overview.mdx", "219-223"),
        role="client",
    ),
    Spec(
        "AGENTGEN-CLIENT-010",
        MAN,
        "A response carries exactly one of `result` and `error`.",
        doc("overview.mdx", "219-222"),
        role="client",
    ),
    Spec(
        "AGENTGEN-CLIENT-011",
        MAN,
        "Every message the client sends validates against the revision's schema.",
        "#/$defs (the --schema given) via templates/runtime/wire/wirecheck.py",
        role="client",
    ),
    Spec(
        "AGENTGEN-CLIENT-012",
        ADV,
        "No message the client sends carries a field the schema does not name.",
        doc("extensibility.mdx", "39"),
        role="client",
    ),
)

CLIENT_HTTP: tuple[Spec, ...] = (
    Spec(
        "AGENTGEN-CLIENT-HTTP-001",
        MAN,
        "Every request after `initialize` carries the `Acp-Connection-Id` the agent gave.",
        rfd("123,265-268"),
        role="client",
        transport="http",
    ),
    Spec(
        "AGENTGEN-CLIENT-HTTP-002",
        MAN,
        "A POST of a session-scoped method carries `Acp-Session-Id`.",
        rfd("124,267"),
        role="client",
        transport="http",
    ),
    Spec(
        "AGENTGEN-CLIENT-HTTP-003",
        MAN,
        "POSTs are `application/json`; stream GETs accept `text/event-stream`.",
        rfd("265-266"),
        role="client",
        transport="http",
    ),
    Spec(
        "AGENTGEN-CLIENT-HTTP-004",
        MAN,
        "The cookies the agent sets are returned on every later request.",
        rfd("47-49"),
        role="client",
        transport="http",
    ),
)

SPECS: tuple[Spec, ...] = AGENT + TRANSPORTS + CLIENT + CLIENT_HTTP


def all_ids() -> set[str]:
    return {s.id for s in SPECS}
