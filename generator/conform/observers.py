"""The requirements judged on every frame of every check's transcript.

Framing, UTF-8, JSON-RPC discipline, schema validity and what the agent may call are
properties of each frame the peer sent, whatever the check was doing: each observer
reads one finished check (`CheckRun`) and gives its ids an outcome for that transcript.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .conversation import is_response, same_id
from .engine import CheckRun
from .http_checks import TRANSPORT_OBSERVED, http_observer, ws_observer
from .verdict import Outcome, Status

Finding = tuple[str, Status, str]  # (id, status, message)
Observer = Callable[[CheckRun], list[Finding]]


def _ok_or(rid: str, problems: list[str]) -> list[Finding]:
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return [(rid, Status.FAIL, problems[0] + more)]
    return [(rid, Status.PASS, "")]


def framing(run: CheckRun) -> list[Finding]:
    """Each frame is UTF-8; each is one JSON-RPC message (or, where the revision has
    batches, a non-empty array of them)."""
    not_utf8: list[str] = []
    not_message: list[str] = []
    for frame in run.transcript.received():
        if not frame.utf8():
            not_utf8.append(f"a frame that is not UTF-8: {frame.data[:80]!r}")
        if frame.channel != "stdio":
            continue  # HTTP bodies, SSE events and WebSocket frames: the transport's rules
        value = frame.message()
        if type(value) is list and value and all(_envelope(v) for v in value):
            if not run.ctx.judge.batches:
                not_message.append(
                    f"a batch array on a revision without batches: {frame.text[:120]}"
                )
            continue
        if not _envelope(value):
            not_message.append(f"not a JSON-RPC message: {frame.text[:120]}")
    transport = "ACP-TRANSPORT-201" if run.ctx.judge.batches else "ACP-TRANSPORT-001"
    return _ok_or("ACP-TRANSPORT-002", not_utf8) + _ok_or(transport, not_message)


def _envelope(value: Any) -> bool:
    return (
        type(value) is dict
        and value.get("jsonrpc") == "2.0"
        and ("method" in value or "id" in value)
    )


def jsonrpc(run: CheckRun) -> list[Finding]:
    """Responses answer the kit's requests by exact id, once each (001), carry one of
    result and error, the latter well formed (002), and nothing answers a notification
    (003: a response without an id, unless the kit sent something invalid on purpose)."""
    conv, provoked = run.conv, run.ctx.provoked
    wrong_id: list[str] = []
    shape: list[str] = []
    to_notes: list[str] = []
    answered: list[Any] = []
    for seen in conv.seen:
        msg = seen.msg
        if not is_response(msg) or seen.frame.channel == "post-status":
            continue  # (a transport's refusal is the HTTP rules' business)
        rid = msg.get("id")
        has_result, has_error = "result" in msg, "error" in msg
        if has_result == has_error:
            shape.append(
                f"a response with {'both result and error' if has_result else 'neither result nor error'}: {seen.frame.text[:120]}"
            )
        if has_error:
            error = msg["error"]
            if (
                type(error) is not dict
                or type(error.get("code")) is not int
                or type(error.get("message")) is not str
            ):
                shape.append(f"a malformed error object: {error!r}"[:160])
        if rid is None:
            if not provoked:
                to_notes.append(f"a response without a request id: {seen.frame.text[:120]}")
            continue
        mine = [k for k in conv.requests if same_id(k, rid)]
        if not mine:
            near = [k for k in conv.requests if str(k) == str(rid)]
            hint = f" (the kit's id was {near[0]!r})" if near else ""
            wrong_id.append(f"a response with id {rid!r} answers no request the kit sent{hint}")
        elif any(same_id(a, rid) for a in answered):
            wrong_id.append(f"request {rid!r} answered twice")
        answered.append(rid)
    return (
        _ok_or("ACP-JSONRPC-001", wrong_id)
        + _ok_or("ACP-JSONRPC-002", shape)
        + _ok_or("ACP-JSONRPC-003", to_notes)
    )


def errors(run: CheckRun) -> list[Finding]:
    bad = []
    for seen in run.conv.seen:
        error = seen.msg.get("error") if is_response(seen.msg) else None
        if type(error) is dict and type(error.get("message")) is str:
            text = error["message"]
            if not text.strip() or "\n" in text:
                bad.append(f"error message {text!r}")
    return _ok_or("ACP-ERROR-001", bad)


def schema(run: CheckRun) -> list[Finding]:
    """Every message validates as its receiver reads it (001); the agent sends nothing
    the schema does not name (002, strict).  A call of a method the revision does not
    let the agent make is the method rule's finding (CLIENTCAP-*), an error object
    JSON-RPC's (JSONRPC-002), a response to no request of the kit JSONRPC-001's."""
    judge, conv = run.ctx.judge, run.conv
    client = judge.revision.side("client")
    if _other_version(run):
        return []  # the agent chose another version: this schema cannot judge it
    lenient: list[str] = []
    strict: list[str] = []
    for seen in conv.seen:
        msg = seen.msg
        answers = None
        if "method" in msg:
            if msg.get("method") not in client:
                continue
        else:
            if "error" in msg:
                continue
            mine = [k for k in conv.requests if same_id(k, msg.get("id"))]
            if not mine:
                continue
            answers = conv.requests[mine[0]]
        found = judge.problems(msg, answers, sender="agent", strict=False)
        if found:
            lenient.append(found[0])
            continue
        strict.extend(judge.problems(msg, answers, sender="agent", strict=True)[:1])
    return _ok_or("ACP-SCHEMA-001", lenient) + _ok_or("ACP-SCHEMA-002", strict)


def _other_version(run: CheckRun) -> bool:
    """The connection was initialized in a version other than the revision's (the
    version probes): its frames are another revision's."""
    for seen in run.conv.seen:
        if run.conv.requests.get(seen.msg.get("id")) == "initialize" and "method" not in seen.msg:
            result = seen.msg.get("result")
            version = result.get("protocolVersion") if type(result) is dict else None
            return version != run.ctx.judge.revision.protocol_version
    return False


def calls(run: CheckRun) -> list[Finding]:
    """What the agent called of a client that declared no capability."""
    rev = run.ctx.judge.revision
    allowed = set(rev.side("client")) | set(rev.side("protocol"))
    fs: list[str] = []
    terminal: list[str] = []
    elicit: list[str] = []
    undefined: list[str] = []
    for seen in run.conv.seen:
        method = seen.msg.get("method")
        if type(method) is not str:
            continue
        if method.startswith("fs/") and method in allowed:
            fs.append(f"called {method} (the kit declared no file system)")
        elif method.startswith("terminal/") and method in allowed:
            terminal.append(f"called {method} (the kit declared no terminal)")
        elif method == "elicitation/create":
            elicit.append("called elicitation/create (the kit declared no elicitation)")
        if method not in allowed and not method.startswith("_"):
            undefined.append(f"called {method!r}, which is no method an agent may call")
    return (
        _ok_or("ACP-CLIENTCAP-001", fs)
        + _ok_or("ACP-CLIENTCAP-002", terminal)
        + _ok_or("ACP-CLIENTCAP-003", elicit)
        + _ok_or("ACP-CLIENTCAP-202", undefined)
    )


def process(run: CheckRun) -> list[Finding]:
    ended = run.ended
    found: list[Finding] = [
        (
            "ACP-STDERR-001",
            Status.PASS,
            f"{run.transcript.stderr_bytes()} bytes on stderr",
        )
    ]
    if getattr(ended, "on_its_own", None) is not None:
        found.append(
            (
                "ACP-SHUTDOWN-001",
                Status.PASS if ended.on_its_own else Status.FAIL,
                f"exited {ended.seconds:.2f}s after stdin closed"
                if ended.on_its_own
                else f"still running {ended.seconds:.1f}s after stdin closed: signalled",
            )
        )
    return found


OBSERVERS: tuple[Observer, ...] = (
    framing,
    jsonrpc,
    errors,
    schema,
    calls,
    process,
    http_observer,
    ws_observer,
)

OBSERVED = (
    "ACP-TRANSPORT-001",
    "ACP-TRANSPORT-201",
    "ACP-TRANSPORT-002",
    "ACP-JSONRPC-001",
    "ACP-JSONRPC-002",
    "ACP-JSONRPC-003",
    "ACP-ERROR-001",
    "ACP-SCHEMA-001",
    "ACP-SCHEMA-002",
    "ACP-CLIENTCAP-001",
    "ACP-CLIENTCAP-002",
    "ACP-CLIENTCAP-003",
    "ACP-CLIENTCAP-202",
    "ACP-SHUTDOWN-001",
    "ACP-STDERR-001",
    *TRANSPORT_OBSERVED,
)


def observe(run: CheckRun, rows: dict[str, Any]) -> list[Outcome]:
    out = []
    for observer in OBSERVERS:
        for rid, status, message in observer(run):
            if rid in rows:
                out.append(
                    Outcome(rid, status, run.check.name, message, run.transcript, run.seconds)
                )
    return out
