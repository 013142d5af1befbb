"""Small helpers on wire values, shared by the runtime's modules: a required field of a
request's params, a generated model (or any value) as a wire value, a manifest name as a
class-name prefix, an option from the environment, a tool's output within its bound."""

from __future__ import annotations

import math
import os
from typing import Any

from .errors import invalid_params


def need(params: Any, key: str, typ: type | tuple[type, ...], where: str = "params") -> Any:
    """`params[key]`, checked to be a `typ`; else an invalid-params error located at it."""
    if type(params) is not dict:
        raise invalid_params(
            f"{where} must be an object", [{"loc": [where], "msg": "expected an object"}]
        )
    if key not in params:
        raise invalid_params(
            f"{where}.{key}: field required", [{"loc": [where, key], "msg": "field required"}]
        )
    val = params[key]
    if not isinstance(val, typ) or (isinstance(val, bool) and typ is int):
        name = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise invalid_params(
            f"{where}.{key}: expected {name}",
            [{"loc": [where, key], "msg": f"expected {name}"}],
        )
    return val


def model_dump(obj: Any) -> Any:
    """A generated model as its wire value (aliases, no nulls); anything else as it is."""
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        return dump(by_alias=True, exclude_none=True, mode="json")
    return obj


def camel(name: str) -> str:
    """A manifest name (`needs-approval`, `needs_approval`) as the prefix of its generated
    classes (`NeedsApproval`): the rule `generator.names.pascal` follows."""
    return "".join(p[:1].upper() + p[1:] for p in name.replace("-", "_").split("_") if p)


def env_option(name: str, default: Any, kind: type = int, minimum: float = 0) -> Any:
    """An option's default from the environment (``ACP_<OPTION>``), else ``default``: a
    count, size or number of seconds, so a value that does not parse as `kind`, is below
    `minimum` or is not finite (``nan``, ``inf``) is ignored for the default."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        return default
    if not math.isfinite(value) or value < minimum:
        return default
    return value


TOOL_OUTPUT_LIMIT = 64 * 1024  # bytes of one tool's output a model gets (like run_command's)


def tool_output_limit() -> int:
    """``$ACP_TOOL_OUTPUT_LIMIT`` (at least 1 KiB), else ``TOOL_OUTPUT_LIMIT``."""
    return int(env_option("ACP_TOOL_OUTPUT_LIMIT", TOOL_OUTPUT_LIMIT, minimum=1024))


_UTF8_TOP, _UTF8_CONTINUATION = 0xC0, 0x80  # a byte inside a character, not its start


def keep_tail(buf: bytearray, chunk: bytes, limit: int) -> bool:
    """Add `chunk` to a command's output `buf`, keeping its last `limit` bytes (as a
    terminal does) from a character's start; True when something was cut."""
    buf += chunk
    if len(buf) <= limit:
        return False
    del buf[: len(buf) - limit]
    while buf and (buf[0] & _UTF8_TOP) == _UTF8_CONTINUATION:
        del buf[0]
    return True


def bounded(text: str, limit: int | None = None) -> str:
    """`text` whole when its UTF-8 form fits `limit` bytes (default `tool_output_limit()`),
    else its start and a note saying how much was cut (the model, the client and the
    stored history all get this same text)."""
    limit = tool_output_limit() if limit is None else limit
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    head = data[:limit].decode("utf-8", "ignore")
    return (
        f"{head}\n[output cut: {len(data) - limit} more bytes not shown "
        f"(the limit is {limit} bytes); ask for a smaller part]"
    )
