"""JSON-RPC error codes and the exceptions handlers raise."""

from __future__ import annotations

from typing import Any, ClassVar

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
AUTH_REQUIRED = -32000


class RpcError(Exception):
    """A JSON-RPC error answer (code, message, optional data)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_wire(self) -> dict[str, Any]:
        """The error object, every string in it cut to ``MAX_ECHO`` characters: what a
        peer sent (an id, a method name, a value) is echoed bounded, never whole."""
        out: dict[str, Any] = {"code": self.code, "message": clip(self.message)}
        if self.data is not None:
            out["data"] = _bounded(self.data, 0)
        return out


MAX_ECHO = 300  # characters of any one string an error carries
_MAX_ECHO_DEPTH = 16


def clip(text: str, limit: int = MAX_ECHO) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [cut: {len(text) - limit} more characters]"


def _bounded(value: Any, depth: int) -> Any:
    if type(value) is str:
        return clip(value)
    if depth >= _MAX_ECHO_DEPTH:
        return value if type(value) in (int, float, bool) or value is None else "[cut: nested]"
    if type(value) is dict:
        return {clip(str(k)): _bounded(v, depth + 1) for k, v in value.items()}
    if type(value) in (list, tuple):
        return [_bounded(v, depth + 1) for v in value]
    return value


class ConnectionClosed(RpcError):
    """The connection ended with this request still waiting for its answer."""

    def __init__(self, message: str = "connection closed", data: Any = None) -> None:
        super().__init__(INTERNAL_ERROR, message, data)


class AgentExited(ConnectionClosed):
    """The agent's process ended (stdio); ``status`` is its exit status when known
    (negative: killed by that signal)."""

    def __init__(self, status: int | None) -> None:
        how = "" if status is None else f" (exit status {status})"
        super().__init__(f"the agent exited{how}", {"status": status})
        self.status = status


def internal_error() -> RpcError:
    """The answer for an unexpected exception: no stack trace, no message text."""
    return RpcError(INTERNAL_ERROR, "internal error")


def method_not_found(method: str) -> RpcError:
    return RpcError(METHOD_NOT_FOUND, f"method not found: {method}", {"method": method})


def invalid_params(message: str, errors: list[dict[str, Any]] | None = None) -> RpcError:
    return RpcError(INVALID_PARAMS, f"invalid params: {message}", {"errors": errors or []})


_NO_VALUE = object()
MAX_ERRORS = 20  # validation errors listed in one answer


def from_validation_error(
    exc: Any, prefix: tuple[Any, ...] = (), value: Any = _NO_VALUE
) -> RpcError:
    """-32602 with one entry per pydantic error: location, message, type (no input values).
    Given the validated ``value``, each entry also has the JSON pointer (RFC 6901) of the
    problem inside it, and ``data.pointer`` is the first one's."""
    errs: list[dict[str, Any]] = []
    found = exc.errors(include_url=False, include_input=False, include_context=False)
    for e in found[:MAX_ERRORS]:
        raw = tuple(e.get("loc", ()))
        err: dict[str, Any] = {
            "loc": [*prefix, *raw],
            "msg": plain_message(e),
            "type": e.get("type", ""),
        }
        if value is not _NO_VALUE:
            err["pointer"] = json_pointer(value, raw)
        errs.append(err)
    where = ", ".join(_fmt(e["loc"]) + ": " + e["msg"] for e in errs[:5])
    out = invalid_params(where or "validation failed", errs)
    if len(found) > MAX_ERRORS:
        out.data["cut"] = f"{len(found) - MAX_ERRORS} more errors not listed"
    if errs and "pointer" in errs[0]:
        out.message += f" (at {errs[0]['pointer'] or '/'})"
        out.data["pointer"] = errs[0]["pointer"]
    return out


# what pydantic puts before the text of a ValueError or an assert raised in a validator
_PYDANTIC_PREFIXES = {"value_error": "Value error, ", "assertion_error": "Assertion failed, "}


def plain_message(error: Any) -> str:
    """One pydantic error's message without pydantic's "Value error, " (or "Assertion
    failed, ") before the validator's own words."""
    msg = str(error.get("msg", ""))
    prefix = _PYDANTIC_PREFIXES.get(str(error.get("type", "")))
    return msg.removeprefix(prefix) if prefix else msg


def json_pointer(value: Any, loc: tuple[Any, ...]) -> str:
    """The RFC 6901 pointer into ``value`` of a pydantic location: the parts that name a
    key or an index of the data are kept, those that name a union member (a tag or a
    model name) are not; a missing field (the last part) is named."""
    out = []
    node = value
    for i, part in enumerate(loc):
        if (type(node) is dict and part in node) or (
            type(node) is list and type(part) is int and 0 <= part < len(node)
        ):
            node = node[part]
        elif i == len(loc) - 1 and type(node) is dict and type(part) is str:
            node = None  # a field that is missing
        else:
            continue  # a union member's name, not part of the data
        out.append(str(part).replace("~", "~0").replace("/", "~1"))
    return "".join("/" + p for p in out)


def _fmt(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


class AgentError(Exception):
    """Base of the manifest's typed errors (generated subclasses set the class vars)."""

    code: ClassVar[int] = -32000
    name: ClassVar[str] = "AgentError"
    transient: ClassVar[bool] = False
    description: ClassVar[str] = ""

    def __init__(self, message: str | None = None, details: Any = None) -> None:
        super().__init__(message or self.description or self.name)
        self.message = message or self.description or self.name
        self.details = details

    def to_rpc(self) -> RpcError:
        return RpcError(
            self.code,
            self.message,
            {"name": self.name, "transient": self.transient, "details": self.details},
        )


UNSUPPORTED_VERSION = "UnsupportedProtocolVersion"  # the error data's name, both sides


def unspoken_version(answered: Any, spoken: list[int]) -> RpcError:
    """The error of an agent that answered `initialize` with a version this client does
    not speak: what the agent speaks and how to speak it too (regenerate the client)."""
    said = " and ".join(map(str, spoken))
    msg = f"the agent speaks ACP protocol version {answered!r}; this client speaks {said}"
    if type(answered) is int:
        both = " ".join(f"--schema v{v}" for v in sorted({*spoken, answered}))
        msg += (
            f": regenerate the client for version {answered} (in its project: agentgen "
            f"regen --schema v{answered}, or {both} to speak both)"
        )
    details = {"answered": answered, "supported": spoken}
    return RpcError(-32603, msg, {"name": UNSUPPORTED_VERSION, "details": details})
