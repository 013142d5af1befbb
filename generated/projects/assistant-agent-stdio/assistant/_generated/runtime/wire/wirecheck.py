"""Schema-checked wire: a test mode that validates every frame against the revision's models.

Off unless ``ACP_WIRE_CHECK`` is set: ``1`` checks every frame a `Connection` sends and
receives, ``send`` only the frames it sends (for tests whose peer sends bad frames on
purpose). The check runs where every frame passes (`jsonrpc.Connection`), so stdio, HTTP
and WebSocket are all covered. A frame is checked against the params class of its method,
or the result class of the request it answers, from the generated method table; a frame
this runtime *sends* must also carry no key the schema does not name and no unknown
variant of a tagged union (names come from the schema, never from memory).

A violation is logged (logger ``acp.runtime.wirecheck``: ERROR for a frame sent, WARNING
for one received), appended as one JSON line
to the file named by ``ACP_WIRE_CHECK_LOG`` when set (a test harness reads it to fail
the test, subprocess agents included), and raised as `WireCheckError` where a caller can
see it (a handler's own request or notification).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import orjson

from .errors import plain_message
from .masking import frame_secrets, mask_secrets
from .revision import revision_for

log = logging.getLogger("acp.runtime.wirecheck")

ENV = "ACP_WIRE_CHECK"
LOG_ENV = "ACP_WIRE_CHECK_LOG"

# wire name -> (python method, kind, params class, result class)
MethodEntry = tuple[str, str, str | None, str | None]

# Keys the runtime sends on purpose although the schema does not name them (the schema
# allows extra keys there), each with its reason. Keep this short.
DELIBERATE_EXTRAS: dict[str, frozenset[str]] = {
    # a client that speaks v1 too declares its capabilities under v1's name as well, for
    # an agent that answers its v2 offer in v1 (runtime.client.client.negotiate)
    "InitializeRequest": frozenset({"clientCapabilities"}),
    # HTTP clients (the official SDK's) open a session's SSE stream when a message they
    # receive carries its sessionId; a load/resume answer is the first such message.
    "LoadSessionResponse": frozenset({"sessionId"}),
    "ResumeSessionResponse": frozenset({"sessionId"}),
}


class WireCheckError(Exception):
    """A frame that does not match the protocol revision's schema."""


def mode() -> str | None:
    """``"all"``, ``"send"`` or None (off), from ``ACP_WIRE_CHECK``."""
    raw = os.environ.get(ENV, "").strip().lower()
    if raw in ("", "0", "off", "false", "no"):
        return None
    return "send" if raw == "send" else "all"


def _catch_all_tag(model: Any) -> tuple[str, Any] | None:
    """(wire key, value) of the tag a catch-all variant holds, or None for other models."""
    fields = getattr(type(model), "__pydantic_fields__", {})
    for name, info in fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and "x-agentgen-refused-tags" in extra:
            return info.alias or name, getattr(model, name, None)
    return None


def _walk(value: Any, path: str, problems: list[str]) -> None:
    """Keys the schema does not name, and unknown variants, in a validated value."""
    from pydantic import BaseModel, RootModel

    if isinstance(value, RootModel):
        _walk(value.root, path, problems)
        return
    if isinstance(value, BaseModel):
        tag = _catch_all_tag(value)
        if tag is not None:
            key, name = tag
            if not (isinstance(name, str) and name.startswith("_")):
                problems.append(
                    f"{path or '<root>'}: {key} {name!r} is not a variant of this revision "
                    f"(extension values start with '_')"
                )
            return  # a catch-all keeps whatever it got: nothing more to check inside
        extra = value.__pydantic_extra__ or {}
        allowed = DELIBERATE_EXTRAS.get(type(value).__name__, frozenset())
        for key in extra:
            if key not in allowed:
                problems.append(f"{path}/{key}: not a field of {type(value).__name__}")
        for name in type(value).__pydantic_fields__:
            _walk(getattr(value, name, None), f"{path}/{name}", problems)
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _walk(item, f"{path}/{i}", problems)
    elif isinstance(value, dict):
        for k, item in value.items():
            _walk(item, f"{path}/{k}", problems)


_SHOWN_VALUE = 80  # characters of a value, in a violation's text


def _same_scalar(sent: Any, read: Any) -> bool:
    if type(sent) is bool or type(read) is bool:
        return type(sent) is type(read) and sent == read
    return bool(sent == read)


def _differences(sent: Any, read: Any, path: str, problems: list[str], limit: int = 5) -> None:
    """Where `read` (what this revision's models make of a frame) is not `sent`."""
    if len(problems) >= limit:
        return
    if type(sent) is dict and type(read) is dict:
        for key, item in sent.items():
            if key not in read:
                problems.append(
                    f"{path}/{key}: {_shown(item)} is dropped by a receiver "
                    "(not a value the schema allows here)"
                )
            else:
                _differences(item, read[key], f"{path}/{key}", problems, limit)
        return
    if type(sent) is list and type(read) is list:
        if len(sent) != len(read):
            problems.append(
                f"{path or '<root>'}: a receiver keeps {len(read)} of the {len(sent)} items "
                "(the others are not values the schema allows here)"
            )
            return
        for i, (a, b) in enumerate(zip(sent, read, strict=True)):
            _differences(a, b, f"{path}/{i}", problems, limit)
        return
    if type(sent) in (dict, list) or type(read) in (dict, list) or not _same_scalar(sent, read):
        problems.append(
            f"{path or '<root>'}: {_shown(sent)} is not a value the schema allows here "
            f"(a receiver reads {_shown(read)})"
        )


def _shown(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= _SHOWN_VALUE else text[: _SHOWN_VALUE - 3] + "..."


_LOGGED_MAX = 20  # a peer sending junk must not flood (and block) a stderr nobody reads
_SHOWN_BYTES = 600  # of a frame, in a violation's text
_counts = {"logged": 0}


def _record(text: str, level: int) -> None:
    target = os.environ.get(LOG_ENV)
    _counts["logged"] += 1
    logged = _counts["logged"]
    if logged <= _LOGGED_MAX:
        log.log(level, "%s", text)
    elif logged == _LOGGED_MAX + 1:
        log.log(
            level, "more wire-check violations: not logged%s", f" (see {target})" if target else ""
        )
    if target:
        try:
            with open(target, "ab") as fh:
                fh.write(orjson.dumps({"pid": os.getpid(), "violation": text}) + b"\n")
        except OSError as exc:  # the harness's file is gone: the log line still says it
            print(f"acp wire check: cannot write {target}: {exc}", file=sys.stderr)


class WireCheck:
    """Checks the frames of one connection for one side (``agent`` or ``client``)."""

    def __init__(
        self,
        side: str,
        models: Any,
        agent_methods: dict[str, MethodEntry],
        client_methods: dict[str, MethodEntry],
        *,
        check_received: bool = True,
        owner: Any = None,
    ) -> None:
        self.side = side
        self.models = models
        # what this side handles (it receives these requests) and what it calls
        self.handled = agent_methods if side == "agent" else client_methods
        self.called = client_methods if side == "agent" else agent_methods
        self.check_received = check_received
        self.owner = owner  # an agent or client of several revisions: follow its choice

    def _follow_revision(self, msg: dict[str, Any], method: str | None) -> bool:
        """Check against the revision the connection speaks (an owner of several revisions
        picks one at `initialize`, whose own frames are checked against the revision their
        `protocolVersion` names). False: a version this side does not speak, nothing to
        check against."""
        revisions = getattr(self.owner, "REVISIONS", ()) if self.owner is not None else ()
        if not revisions:
            return True
        rev = getattr(self.owner, "revision", None)
        if (msg.get("method") if "method" in msg else method) == "initialize":
            body = msg.get("params") if "method" in msg else msg.get("result")
            version = body.get("protocolVersion") if type(body) is dict else None
            rev = revision_for(revisions, version)
            if rev is None:
                return False
        if rev is None or (rev is revisions[-1] and len(revisions) == 1):
            return True
        models = self.owner.protocol_models_of(rev.package)
        if models is None:
            return False
        agent_methods, client_methods = rev.side("agent"), rev.side("client")
        self.models = models
        self.handled = agent_methods if self.side == "agent" else client_methods
        self.called = client_methods if self.side == "agent" else agent_methods
        return True

    # ---- one message ----------------------------------------------------------------
    def _cls(self, name: str | None) -> Any:
        return getattr(self.models, name, None) if name else None

    def _problems(self, msg: Any, method: str | None, sending: bool) -> list[str]:
        if type(msg) is not dict:
            return ["a frame must be a JSON object"]
        if msg.get("jsonrpc") != "2.0":
            return ['"jsonrpc" must be "2.0"']
        if not self._follow_revision(msg, method):
            return []
        if "method" in msg:
            return self._call_problems(msg, sending)
        return self._response_problems(msg, method, sending)

    def _call_problems(self, msg: dict[str, Any], sending: bool) -> list[str]:
        """A request or notification: a method this side may call (or serve), in its kind."""
        name = msg["method"]
        if type(name) is not str:
            return ['"method" must be a string']
        table = self.called if sending else self.handled
        entry = table.get(name)
        request = "id" in msg
        if entry is None:
            if name.startswith(("_", "$/")):
                return []  # extensions and protocol notifications: not in the schema's table
            return [f"{name!r} is not a method this side may {'call' if sending else 'serve'}"]
        if request != (entry[1] == "request"):
            return [
                f"{name!r} is a {entry[1]}, sent as a {'request' if request else 'notification'}"
            ]
        if sending and request and self.side == "agent":
            undeclared = self._undeclared(name)
            if undeclared:
                return [undeclared]
        return self._validate(entry[2], msg.get("params", {}), f"{name} params", sending)

    def _response_problems(
        self, msg: dict[str, Any], method: str | None, sending: bool
    ) -> list[str]:
        """A response: an id and a result (checked against `method`'s) or an error."""
        if "id" not in msg:
            return ["a frame without method must be a response (id + result or error)"]
        if "error" in msg:
            err = msg["error"]
            if (
                type(err) is not dict
                or type(err.get("code")) is not int
                or type(err.get("message")) is not str
            ):
                return ["error must be an object with an integer code and a string message"]
            return []
        if "result" not in msg:
            return ["a response carries result or error"]
        if method is None:
            return []  # answers a request this check did not see (sent before it was on)
        table = self.handled if sending else self.called
        entry = table.get(method)
        if entry is None:
            return []
        return self._validate(entry[3], msg["result"], f"{method} result", sending)

    def _undeclared(self, method: str) -> str | None:
        """An agent-to-client request whose client capability (fs.readTextFile,
        terminal, ...) the client did not declare at initialize."""
        rev = getattr(self.owner, "revision", None)
        caps = getattr(self.owner, "client_capabilities", None)
        shape = getattr(rev, "authoring", None)
        if shape is None or type(caps) is not dict:
            return None
        gate = shape.gate(method)
        if not gate:
            return None
        node: Any = caps
        for key in gate:
            node = node.get(key) if type(node) is dict else None
        if node is True:
            return None
        return f"{method!r} needs the client capability {'.'.join(gate)}, which the client did not declare"

    def _validate(self, cls_name: str | None, value: Any, what: str, sending: bool) -> list[str]:
        cls = self._cls(cls_name)
        if cls is None:
            return []
        try:
            model = cls.model_validate(value if value is not None else {})
        except Exception as exc:  # pydantic's ValidationError (imported lazily)
            errors = getattr(exc, "errors", None)
            if errors is None:
                raise
            out = []
            for e in errors(include_url=False, include_input=False, include_context=False)[:5]:
                loc = "/".join(str(p) for p in e.get("loc", ()))
                out.append(f"{what} ({cls_name}) /{loc}: {plain_message(e)}")
            return out
        if not sending:
            return []
        problems: list[str] = []
        _walk(model, "", problems)
        # strict on what we send: the models are lenient where the schema lets a receiver
        # be (`x-deserialize-default-on-error`, skipped list items, lax coercions); a
        # value they change on the way in is one a strict peer refuses or a lenient
        # peer misreads (a boolean where the schema wants a `{}` marker reads as absent)
        if not problems:
            read = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
            _differences(value if value is not None else {}, read, "", problems)
        return [f"{what} ({cls_name}) {p}" for p in problems]

    def problems(self, msg: Any, method: str | None, *, sending: bool) -> list[str]:
        """What is wrong with one parsed frame (`method`: the request a response answers),
        nothing logged or raised: for a viewer that marks every frame (agentgen inspect)."""
        try:
            return self._problems(msg, method, sending)
        except Exception as exc:  # noqa: BLE001 - reported like any violation
            return [f"the check itself failed: {type(exc).__name__}: {exc}"]

    # ---- the connection's hooks ---------------------------------------------------
    def sent(self, frame: bytes, method: str | None) -> None:
        """Check a frame about to be written; raises WireCheckError (after recording it)."""
        try:
            msg = orjson.loads(frame)
        except orjson.JSONDecodeError:
            problems = ["not JSON"]
        else:
            try:
                problems = self._problems(msg, method, True)
            except Exception as exc:  # noqa: BLE001 - reported like any violation
                problems = [f"the check itself failed: {type(exc).__name__}: {exc}"]
        if problems:
            text = self._report("sent", problems, frame)
            raise WireCheckError(text)

    def received(self, msg: Any, method: str | None) -> None:
        """Check a parsed incoming frame; a violation is recorded (the frame is still handled)."""
        if not self.check_received:
            return
        try:
            problems = self._problems(msg, method, False)
        except Exception as exc:  # noqa: BLE001 - the check must never break receiving
            problems = [f"the check itself failed: {type(exc).__name__}: {exc}"]
        if problems:
            self._report("received", problems, orjson.dumps(msg), msg)

    def _report(self, direction: str, problems: list[str], frame: bytes, msg: Any = None) -> str:
        """Record a violation: the problems and the frame's start, its credentials (header
        and env values, URL credentials: a malformed `providers/set` is never registered
        for redaction) masked."""
        if msg is None:
            try:
                msg = orjson.loads(frame)
            except orjson.JSONDecodeError:
                msg = None
        secrets = frame_secrets(msg)
        whole = mask_secrets(frame.decode("utf-8", "replace"), secrets)
        shown = whole if len(whole) <= _SHOWN_BYTES else whole[:_SHOWN_BYTES] + "..."
        text = mask_secrets(
            f"ACP wire check ({self.side} {direction}): "
            + "; ".join(problems)
            + f" -- frame: {shown}",
            secrets,
        )
        # what we send wrong is our bug (ERROR); what the peer sends wrong, the peer's
        _record(text, logging.ERROR if direction == "sent" else logging.WARNING)
        return text


class ConnectionCheck:
    """The wire check of one connection (jsonrpc.Connection): pairs each response with the
    method of the request it answers, whichever side sent that request."""

    def __init__(self, check: WireCheck) -> None:
        self.check = check
        self._in: dict[Any, str] = {}  # id -> method of requests we answer
        self._out: dict[int, str] = {}  # id -> method of requests we sent

    def sent(self, frame: bytes) -> None:
        """The wire check of one outgoing frame. A response that fails it is still sent
        (the check records it; the peer must not wait forever); anything else raises."""
        msg = orjson.loads(frame)
        if type(msg) is dict and "method" not in msg:
            method = self._in.pop(msg.get("id"), None)
            try:
                self.check.sent(frame, method)
            except WireCheckError:
                pass  # recorded and logged
            return
        if type(msg) is dict and type(msg.get("id")) is int:
            self._out[msg["id"]] = str(msg.get("method"))
        self.check.sent(frame, None)

    def received(self, msg: dict[str, Any]) -> None:
        rid = msg.get("id")
        hashable = rid is None or type(rid) in (int, str)
        if "method" in msg:
            if "id" in msg and hashable:
                self._in[rid] = str(msg["method"])
            self.check.received(msg, None)
        else:
            method = self._out.pop(rid, None) if type(rid) is int else None
            self.check.received(msg, method)


def for_handlers(*handlers: Any) -> WireCheck | None:
    """The check for a connection whose handlers are bound methods of a generated
    `AgentBase`/`ClientBase` subclass; None when the mode is off or the owner is not one."""
    level = mode()
    if level is None:
        return None
    for handler in handlers:
        owner = getattr(handler, "__self__", None)
        if owner is None:
            continue
        check = for_owner(owner, check_received=level == "all")
        if check is not None:
            return check
    return None


def for_owner(owner: Any, *, check_received: bool = True) -> WireCheck | None:
    """Read the revision (method tables, models) from the generated module `owner` comes from."""
    for klass in type(owner).__mro__:
        if "_acp_generated_base" in klass.__dict__:
            module = sys.modules.get(klass.__module__)
            tables = getattr(module, "METHODS", None)
            if not isinstance(tables, dict) or "agent" not in tables or "client" not in tables:
                return None
            side = "agent" if klass.__dict__.get("METHODS") is tables["agent"] else "client"
            models = klass.protocol_models_of("")  # type: ignore[attr-defined]
            return WireCheck(
                side,
                models,
                tables["agent"],
                tables["client"],
                check_received=check_received,
                owner=owner,
            )
    return None
