"""The checks of an agent: each drives a fresh agent and judges the ids it names.

Written from the protocol's text (catalogue.py cites it); the shapes come from the
revision description (`ctx.rev`), never from a version number.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .conversation import Seen, is_response
from .engine import Ctx, Skip, Turn, check

UNSUPPORTED_VERSION = 65535  # a version no revision has
METHOD_NOT_FOUND = -32601
INVALID_REQUEST = -32600

HISTORY = (
    "user_message_chunk",
    "agent_message_chunk",
    "agent_thought_chunk",
    "user_message",
    "agent_message",
    "agent_thought",
)


def _result(msg: dict[str, Any]) -> Any:
    return msg.get("result")


def _kind(params: dict[str, Any]) -> Any:
    update = params.get("update")
    return update.get("sessionUpdate") if type(update) is dict else None


# ---- initialize ---------------------------------------------------------------------------------


@check(
    "initialize",
    "ACP-INIT-001",
    "ACP-INIT-002",
    "ACP-INIT-201",
    "ACP-INIT-004",
    "ACP-INIT-203",
    "ACP-AUTH-001",
    "ACP-AUTH-002",
)
async def initialize(ctx: Ctx) -> None:
    rev = ctx.rev
    asked = rev.protocol_version
    msg = await ctx.conv.request("initialize", ctx.init_params(asked))
    result = _result(msg)
    if type(result) is not dict:
        ctx.fail("ACP-INIT-001", f"initialize answered {msg.get('error')!r}")
        return
    problems = ctx.judge.problems(msg, "initialize", sender="agent", strict=False)
    version = result.get("protocolVersion")
    ctx.judge_that(
        "ACP-INIT-001",
        type(version) is int and not problems,
        f"protocolVersion {version!r}; {'; '.join(problems)}".rstrip("; "),
    )
    ctx.init_result = result
    ctx.shared.answered_version = version if type(version) is int else None
    ctx.shared.peer = {
        "protocolVersion": version,
        "info": result.get(rev.init.response_info),
        "capabilities": result.get(rev.init.response_capabilities),
    }
    ctx.judge_that("ACP-INIT-002", version == asked, f"asked for {asked}, answered {version!r}")
    ctx.judge_that(
        "ACP-INIT-201",
        type(version) is int and 0 < version <= asked,
        f"asked for {asked}, answered {version!r} (neither it nor an older latest)",
    )
    info = result.get(rev.init.response_info)
    named = type(info) is dict and all(
        type(info.get(k)) is str and info.get(k) for k in ("name", "version")
    )
    ctx.judge_that("ACP-INIT-004", named, f"{rev.init.response_info} is {info!r}")
    if version == asked:
        ctx.judge_that("ACP-INIT-203", named, f"{rev.init.response_info} is {info!r}")
    else:
        ctx.skip("ACP-INIT-203", f"VERSION-MISMATCH: answered {version!r}")
    methods = result.get(rev.init.auth_methods or "") or []
    methods = methods if type(methods) is list else []
    ids = [m.get(rev.auth_method.id) for m in methods if type(m) is dict]
    dupes = sorted({str(i) for i in ids if ids.count(i) > 1})
    ctx.judge_that("ACP-AUTH-001", not dupes, f"auth method ids used twice: {dupes}")
    terminal = [
        m for m in methods if type(m) is dict and m.get("type") == rev.auth_method.terminal_type
    ]
    ctx.judge_that(
        "ACP-AUTH-002",
        not terminal,
        f"a terminal auth method is advertised ({terminal[0].get(rev.auth_method.id)!r}) to a "
        f"client without {rev.auth_method.client_auth}.{rev.auth_method.client_terminal}"
        if terminal
        else "",
    )


@check("version-probe", "ACP-INIT-003")
async def version_probe(ctx: Ctx) -> None:
    result = await ctx.initialize(UNSUPPORTED_VERSION)
    version = result.get("protocolVersion")
    own = ctx.shared.answered_version
    if type(version) is not int:
        ctx.fail("ACP-INIT-003", f"answered protocolVersion {version!r} to 65535")
    elif version == UNSUPPORTED_VERSION:
        ctx.fail("ACP-INIT-003", "answered 65535: the unsupported version echoed back")
    elif own is not None and version < own:
        ctx.fail("ACP-INIT-003", f"answered {version} to 65535, lower than its {own}")
    else:
        ctx.ok("ACP-INIT-003", f"answered {version}")


@check("version-downgrade", "ACP-INIT-202")
async def version_downgrade(ctx: Ctx) -> None:
    msg = await ctx.conv.request("initialize", ctx.init_params(1))
    result = _result(msg)
    version = result.get("protocolVersion") if type(result) is dict else None
    ctx.judge_that(
        "ACP-INIT-202",
        version in (1, ctx.rev.protocol_version),
        f"asked for 1, answered {msg.get('error') or version!r}",
    )


# ---- JSON-RPC ---------------------------------------------------------------------------------


@check("ids", "ACP-JSONRPC-001")
async def ids(ctx: Ctx) -> None:
    """A string id and an integer id, each echoed exactly (the observer judges every
    other response of every check the same way)."""
    rid = "conform-1-\u00e9"
    await ctx.initialize(rid=rid)
    await ctx.conv.request("session/new", ctx.session_params(), rid=424242)
    ctx.ok("ACP-JSONRPC-001", "a string and an integer id echoed")


@check("notifications", "ACP-JSONRPC-003")
async def notifications(ctx: Ctx) -> None:
    sid = await ctx.ready()
    await ctx.conv.notify("_conform/notice", {"note": "an unknown notification"})
    await ctx.conv.notify("session/cancel", {"sessionId": sid})  # nothing to cancel
    await ctx.conv.quiet(ctx.opts.quiet)
    await ctx.conv.request("session/new", ctx.session_params())
    ctx.ok("ACP-JSONRPC-003")


@check("unknown-method", "ACP-JSONRPC-004", "ACP-JSONRPC-005")
async def unknown_method(ctx: Ctx) -> None:
    await ctx.initialize()
    ctx.off_schema = True
    msg = await ctx.conv.request("conform/no_such_method", {})
    error = msg.get("error")
    code = error.get("code") if type(error) is dict else None
    ctx.judge_that(
        "ACP-JSONRPC-004", code == METHOD_NOT_FOUND, f"answered {error or _result(msg)!r}"
    )
    again = await ctx.conv.request("session/new", ctx.session_params())
    ctx.judge_that(
        "ACP-JSONRPC-005", "result" in again, f"then session/new answered {again.get('error')!r}"
    )


@check("extension", "ACP-EXT-001")
async def extension(ctx: Ctx) -> None:
    await ctx.initialize()
    await ctx.conv.request("_conform/ping", {"n": 1})
    ctx.ok("ACP-EXT-001")


# ---- sessions --------------------------------------------------------------------------------------


@check("sessions", "ACP-SESSION-001", "ACP-SESSION-002", "ACP-ADDDIRS-001")
async def sessions(ctx: Ctx) -> None:
    await ctx.initialize()
    if not ctx.gated("ACP-SESSION-001", "ACP-SESSION-002", "ACP-ADDDIRS-001"):
        return
    first = await ctx.new_session()
    ctx.ok("ACP-SESSION-001", f"sessionId {first!r}")
    second = await ctx.new_session()
    ctx.judge_that("ACP-SESSION-002", first != second, f"both calls answered {first!r}")
    if ctx.applies("ACP-ADDDIRS-001") and ctx.advertised("ACP-ADDDIRS-001"):
        msg = await ctx.conv.request(
            "session/new", ctx.session_params(additionalDirectories=[ctx.opts.cwd])
        )
        ctx.judge_that("ACP-ADDDIRS-001", "result" in msg, f"answered {msg.get('error')!r}")


# ---- prompt turns ---------------------------------------------------------------------------------


def _judge_updates(ctx: Ctx, rid: str, turn: Turn) -> None:
    end = turn.ended if turn.ended is not None else None
    wrong = [
        u.get("sessionId")
        for u in ctx.conv.updates(turn.start, end)
        if u.get("sessionId") != turn.session
    ]
    ctx.judge_that(
        rid,
        not wrong,
        f"updates of the turn carry sessionId {wrong[0]!r}, not {turn.session!r}" if wrong else "",
    )


@check(
    "prompt",
    "ACP-PROMPT-001",
    "ACP-PROMPT-002",
    "AGENTGEN-PROMPT-001",
    "ACP-PROMPT-201",
    "ACP-PROMPT-205",
    "ACP-STATE-201",
    "ACP-STATE-203",
)
async def prompt(ctx: Ctx) -> None:
    await ctx.initialize()
    if not ctx.gated("ACP-PROMPT-001", "ACP-PROMPT-201"):
        raise Skip("the session surface is not advertised")
    sid = await ctx.new_session()
    turn = await ctx.turn(sid, [ctx.text("Hello from agentgen conform.")])
    stops = ctx.rev.turn.stop_reasons
    if ctx.rev.turn.lifecycle == "v1":
        ctx.judge_that(
            "ACP-PROMPT-001",
            turn.error is None and turn.stop_reason in stops,
            f"the prompt ended with {turn.error or turn.stop_reason!r}",
            f"stopReason {turn.stop_reason!r}",
        )
        _judge_updates(ctx, "ACP-PROMPT-002", turn)
        await ctx.conv.quiet(ctx.opts.quiet)
        late = [u for u in ctx.conv.updates(_after(turn)) if u.get("sessionId") == sid]
        ctx.judge_that(
            "AGENTGEN-PROMPT-001",
            not late,
            f"{len(late)} session/update after the prompt's response ({_kind(late[0]) if late else ''})",
        )
        return
    result = _result(turn.response or {})
    mid = result.get(ctx.rev.turn.prompt_message_id or "") if type(result) is dict else None
    ctx.judge_that(
        "ACP-PROMPT-201",
        type(mid) is str and bool(mid),
        f"the prompt's result is {result or turn.error!r}",
    )
    _judge_updates(ctx, "ACP-PROMPT-205", turn)
    ctx.judge_that(
        "ACP-STATE-201", turn.running_seen, "the turn ended idle with no `running` before it"
    )
    reason = turn.stop_reason
    ctx.judge_that(
        "ACP-STATE-203",
        reason in stops or (type(reason) is str and reason.startswith("_")),
        f"the turn ended with stopReason {reason!r}",
        f"stopReason {reason!r}",
    )


def _after(turn: Turn) -> int:
    """The index in `seen` just after what ended the turn."""
    return (turn.ended if turn.ended is not None else 0) + 1


def _ended_well(ctx: Ctx, turn: Turn) -> tuple[bool, str]:
    if turn.error is not None:
        return False, f"the prompt was refused: {turn.error!r}"
    if turn.stop_reason not in ctx.rev.turn.stop_reasons:
        return False, f"the turn ended with {turn.stop_reason!r}"
    return True, ""


@check("prompt-blocks", "ACP-PROMPT-003", "ACP-META-001")
async def prompt_blocks(ctx: Ctx) -> None:
    sid = await ctx.ready()
    link = {"type": "resource_link", "uri": f"file://{ctx.opts.cwd}/README.md", "name": "README.md"}
    turn = await ctx.turn(sid, [ctx.text("Read this file."), link])
    good, why = _ended_well(ctx, turn)
    ctx.judge_that("ACP-PROMPT-003", good, why)
    meta = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    turn = await ctx.turn(sid, [ctx.text("A prompt with _meta.")], meta=meta)
    good, why = _ended_well(ctx, turn)
    ctx.judge_that("ACP-META-001", good, why)


_PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg=="
_SILENCE = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA="


@check("prompt-capabilities", "ACP-PROMPTCAP-001", "ACP-PROMPTCAP-002", "ACP-PROMPTCAP-003")
async def prompt_capabilities(ctx: Ctx) -> None:
    await ctx.initialize()
    blocks: dict[str, dict[str, Any]] = {
        "ACP-PROMPTCAP-001": {"type": "image", "mimeType": "image/png", "data": _PIXEL},
        "ACP-PROMPTCAP-002": {"type": "audio", "mimeType": "audio/wav", "data": _SILENCE},
        "ACP-PROMPTCAP-003": {
            "type": "resource",
            "resource": {
                "uri": f"file://{ctx.opts.cwd}/note.txt",
                "mimeType": "text/plain",
                "text": "a note",
            },
        },
    }
    if not ctx.gated(*blocks):
        return
    sid = await ctx.new_session()
    for rid, block in blocks.items():
        if ctx.applies(rid) and ctx.advertised(rid):
            turn = await ctx.turn(sid, [ctx.text("What is attached?"), block])
            good, why = _ended_well(ctx, turn)
            ctx.judge_that(rid, good, why)


# ---- cancel ---------------------------------------------------------------------------------------------


@check("cancel", "ACP-CANCEL-001", "ACP-CANCEL-002", "ACP-CANCEL-201", "ACP-CANCEL-202")
async def cancel(ctx: Ctx) -> None:
    sid = await ctx.ready()
    v1 = ctx.rev.turn.lifecycle == "v1"
    own = ("ACP-CANCEL-001", "ACP-CANCEL-002") if v1 else ("ACP-CANCEL-201", "ACP-CANCEL-202")
    sent: dict[str, int] = {}

    async def cancel_once_started(turn: Turn) -> None:
        # the turn is under way once anything of it arrives (an update, a request)
        started = await ctx.conv.wait_for(
            lambda s: _of_session(s, sid) or _answers(s, turn.request),
            ctx.opts.turn_timeout,
            since=turn.start,
        )
        if started is None:
            return
        if v1 and _answers(started, turn.request):
            return  # over before anything streamed: nothing to cancel
        if not v1 and _turn_over(ctx, turn):
            return
        ctx.conv.cancelled.add(sid)
        sent["at"] = ctx.conv.mark()
        await ctx.conv.notify("session/cancel", {"sessionId": sid})
        ctx.conv.cancel_sent_at = ctx.conv.peer.transcript.frames[-1].at

    turn = await ctx.turn(sid, [ctx.text(ctx.opts.cancel_prompt)], after_send=cancel_once_started)
    at = sent.get("at")
    if at is None or turn.ended is None or turn.ended < at or _crossed(ctx, turn, at):
        for rid in own:
            ctx.skip(
                rid, "the turn ended before the cancel reached it (give a longer --cancel-prompt)"
            )
        return
    if v1:
        ctx.judge_that(
            "ACP-CANCEL-001",
            turn.error is None and turn.stop_reason == "cancelled",
            f"after session/cancel the prompt ended with {turn.error or turn.stop_reason!r}",
        )
    else:
        ctx.judge_that(
            "ACP-CANCEL-201",
            turn.stop_reason == "cancelled",
            f"after session/cancel the turn ended with {turn.stop_reason!r}",
        )
    await ctx.conv.quiet(ctx.opts.quiet)
    late = [u for u in ctx.conv.updates(_after(turn)) if u.get("sessionId") == sid]
    ctx.judge_that(
        own[1],
        not late,
        f"{len(late)} session/update after the cancelled turn ended ({_kind(late[0]) if late else ''})",
    )


def _crossed(ctx: Ctx, turn: Turn, at: int) -> bool:
    """The turn ended otherwise than cancelled within the quiet period after the cancel
    was sent: its end and the cancel crossed on the wire (not a cancel ignored)."""
    if turn.stop_reason == "cancelled" or turn.ended is None:
        return False
    sent = ctx.conv.cancel_sent_at
    end = ctx.conv.seen[turn.ended].frame.at
    return sent is not None and end - sent < ctx.opts.quiet


def _of_session(s: Seen, sid: str) -> bool:
    params = s.msg.get("params")
    return (
        "method" in s.msg
        and type(params) is dict
        and params.get("sessionId") == sid
        and _kind(params) != "state_update"
    )


def _answers(s: Seen, rid: Any) -> bool:
    return is_response(s.msg) and s.msg.get("id") == rid and type(s.msg.get("id")) is type(rid)


def _turn_over(ctx: Ctx, turn: Turn) -> bool:
    return any(
        _kind(u) == "state_update"
        and (u.get("update") or {}).get("state") == "idle"
        and u.get("sessionId") == turn.session
        for u in ctx.conv.updates(turn.start)
    )


# ---- load / resume / list / close / delete ---------------------------------------------------------------


async def _with_history(ctx: Ctx) -> str:
    sid = await ctx.new_session()
    await ctx.turn(sid, [ctx.text("Something to remember.")])
    await ctx.conv.quiet(min(ctx.opts.quiet, 0.2))
    return sid


@check("load", "ACP-LOAD-001", "ACP-LOAD-002")
async def load(ctx: Ctx) -> None:
    await ctx.initialize()
    if not ctx.gated("ACP-LOAD-001", "ACP-LOAD-002"):
        return
    sid = await _with_history(ctx)
    mark = ctx.conv.mark()
    msg = await ctx.conv.request("session/load", ctx.session_params(sessionId=sid))
    at = ctx.conv.index_of(msg)
    problems = ctx.judge.problems(msg, "session/load", sender="agent", strict=False)
    ctx.judge_that(
        "ACP-LOAD-001",
        "result" in msg and not problems,
        f"answered {msg.get('error') or problems!r}",
    )
    before = len([u for u in ctx.conv.updates(mark, at) if u.get("sessionId") == sid])
    await ctx.conv.quiet(ctx.opts.quiet)
    # order is seen within one channel: over HTTP a replay on the session's stream and
    # the answer on the connection's are not ordered against each other
    channel = ctx.conv.seen[at].frame.channel
    after = [
        s.msg["params"]
        for s in ctx.conv.seen[at + 1 :]
        if s.frame.channel == channel
        and s.msg.get("method") == "session/update"
        and type(s.msg.get("params")) is dict
        and s.msg["params"].get("sessionId") == sid
    ]
    ctx.judge_that(
        "ACP-LOAD-002",
        not after,
        f"{len(after)} replayed update(s) after the session/load response ({before} before it)",
        f"{before} replayed update(s), all before the response",
    )


@check("resume", "ACP-RESUME-001", "ACP-RESUME-002")
async def resume(ctx: Ctx) -> None:
    await ctx.initialize()
    if not ctx.gated("ACP-RESUME-001", "ACP-RESUME-002"):
        return
    sid = await _with_history(ctx)
    mark = ctx.conv.mark()
    msg = await ctx.conv.request("session/resume", {"sessionId": sid, "cwd": ctx.opts.cwd})
    at = ctx.conv.index_of(msg)
    problems = ctx.judge.problems(msg, "session/resume", sender="agent", strict=False)
    ctx.judge_that(
        "ACP-RESUME-001",
        "result" in msg and not problems,
        f"answered {msg.get('error') or problems!r}",
    )
    history = [
        u for u in ctx.conv.updates(mark, at) if u.get("sessionId") == sid and _kind(u) in HISTORY
    ]
    ctx.judge_that(
        "ACP-RESUME-002",
        not history,
        f"{len(history)} history update(s) before the resume response",
    )


@check("list", "ACP-LIST-001", "ACP-LIST-002")
async def list_sessions(ctx: Ctx) -> None:
    await ctx.initialize()
    if not ctx.gated("ACP-LIST-001", "ACP-LIST-002"):
        return
    await ctx.new_session()
    msg = await ctx.conv.request("session/list", {})
    result = _result(msg)
    listed = result.get("sessions") if type(result) is dict else None
    ctx.judge_that("ACP-LIST-001", type(listed) is list, f"answered {msg.get('error') or result!r}")
    nowhere = ctx.opts.cwd.rstrip("/") + "/conform-no-session-here"
    msg = await ctx.conv.request("session/list", {"cwd": nowhere})
    result = _result(msg)
    listed = result.get("sessions") if type(result) is dict else None
    ctx.judge_that(
        "ACP-LIST-002",
        listed == [],
        f"filtered by an unused cwd it answered {msg.get('error') or listed!r}",
    )


@check("close", "ACP-CLOSE-001")
async def close(ctx: Ctx) -> None:
    await ctx.initialize()
    if not ctx.gated("ACP-CLOSE-001"):
        return
    sid = await ctx.new_session()
    msg = await ctx.conv.request("session/close", {"sessionId": sid})
    ctx.judge_that(
        "ACP-CLOSE-001",
        type(_result(msg)) is dict,
        f"answered {msg.get('error') or _result(msg)!r}",
    )


@check("delete", "ACP-DELETE-001", "ACP-DELETE-002")
async def delete(ctx: Ctx) -> None:
    await ctx.initialize()
    if not ctx.gated("ACP-DELETE-001"):
        ctx.skip("ACP-DELETE-002", "session/delete not advertised")
        return
    sid = await ctx.new_session()
    msg = await ctx.conv.request("session/delete", {"sessionId": sid})
    ctx.judge_that(
        "ACP-DELETE-001",
        type(_result(msg)) is dict,
        f"answered {msg.get('error') or _result(msg)!r}",
    )
    msg = await ctx.conv.request("session/delete", {"sessionId": "conform-never-made"})
    ctx.judge_that(
        "ACP-DELETE-002",
        "result" in msg,
        f"deleting an unknown session answered {msg.get('error')!r}",
    )


# ---- modes and config options ------------------------------------------------------------------------------


@check("modes", "ACP-MODES-001", "ACP-MODES-002")
async def modes(ctx: Ctx) -> None:
    await ctx.initialize()
    await ctx.new_session()
    state = ctx.last_new.get(ctx.rev.authoring.modes or "")
    if type(state) is not dict:
        raise Skip("session/new answered no modes")
    available = [m.get("id") for m in state.get("availableModes") or [] if type(m) is dict]
    current = state.get("currentModeId")
    ctx.judge_that(
        "ACP-MODES-001",
        current in available,
        f"currentModeId {current!r} is not one of {available}",
    )
    other = next((m for m in available if m != current), None)
    if other is None:
        ctx.skip("ACP-MODES-002", "one mode only: nothing to switch to")
        return
    sid = ctx.last_new.get("sessionId")
    msg = await ctx.conv.request("session/set_mode", {"sessionId": sid, "modeId": other})
    ctx.judge_that(
        "ACP-MODES-002", "result" in msg, f"session/set_mode answered {msg.get('error')!r}"
    )


def _option_values(option: dict[str, Any], key: str) -> list[Any]:
    out: list[Any] = []
    for entry in option.get(key) or []:
        if type(entry) is dict and "value" in entry:
            out.append(entry["value"])
        elif type(entry) is dict and type(entry.get("options")) is list:
            out.extend(o.get("value") for o in entry["options"] if type(o) is dict)
    return out


@check("config", "ACP-CONFIG-001", "ACP-CONFIG-002")
async def config(ctx: Ctx) -> None:
    await ctx.initialize()
    await ctx.new_session()
    shape = ctx.rev.config_option
    options = ctx.last_new.get("configOptions")
    if type(options) is not list or not options:
        raise Skip("session/new answered no configOptions")
    bad = []
    for option in options:
        if type(option) is not dict:
            continue
        current = option.get(shape.current_value)
        if option.get("type") == "boolean":
            ok = type(current) is bool
        elif option.get("type") == "select":
            ok = current in _option_values(option, shape.select_options)
        else:
            ok = True
        if not ok:
            bad.append(f"{option.get(shape.id)!r} = {current!r}")
    ctx.judge_that(
        "ACP-CONFIG-001", not bad, f"current values their type does not allow: {', '.join(bad)}"
    )
    select = next(
        (
            o
            for o in options
            if type(o) is dict
            and o.get("type") == "select"
            and len(set(map(str, _option_values(o, shape.select_options)))) > 1
        ),
        None,
    )
    if select is None:
        ctx.skip("ACP-CONFIG-002", "no select option with a second value to set")
        return
    new = next(
        v
        for v in _option_values(select, shape.select_options)
        if v != select.get(shape.current_value)
    )
    params: dict[str, Any] = {
        "sessionId": ctx.last_new.get("sessionId"),
        "configId": select.get(shape.id),
        "value": new,
    }
    if "id" in shape.value_tags:
        params["type"] = "id"
    msg = await ctx.conv.request("session/set_config_option", params)
    result = _result(msg)
    got = result.get("configOptions") if type(result) is dict else None
    if type(got) is not list:
        ctx.fail(
            "ACP-CONFIG-002", f"session/set_config_option answered {msg.get('error') or result!r}"
        )
        return
    by_id = {o.get(shape.id): o for o in got if type(o) is dict}
    missing = [o.get(shape.id) for o in options if type(o) is dict and o.get(shape.id) not in by_id]
    changed = by_id.get(select.get(shape.id), {}).get(shape.current_value)
    ctx.judge_that(
        "ACP-CONFIG-002",
        not missing and changed == new,
        f"the answer leaves out {missing}"
        if missing
        else f"{select.get(shape.id)!r} answers {changed!r}, not {new!r}",
    )


# ---- batches ------------------------------------------------------------------------------------------------


@check("batch", "ACP-BATCH-201", "ACP-BATCH-202", "ACP-BATCH-204")
async def batch(ctx: Ctx) -> None:
    await ctx.initialize()
    ctx.provoked = True  # the empty array is invalid on purpose
    mark = ctx.conv.mark()
    await ctx.conv.send_raw(b"[]")
    got = await ctx.conv.wait_for(lambda s: True, ctx.opts.timeout, since=mark)
    if got is None:
        ctx.fail("ACP-BATCH-201", "no answer to an empty array")
    else:
        error = got.msg.get("error")
        ctx.judge_that(
            "ACP-BATCH-201",
            not got.batch
            and got.msg.get("id") is None
            and type(error) is dict
            and error.get("code") == INVALID_REQUEST,
            f"an empty array was answered with {got.frame.text[:200]}",
        )
    await ctx.conv.quiet(ctx.opts.quiet)
    mark = ctx.conv.mark()
    notes = [{"jsonrpc": "2.0", "method": "_conform/notice", "params": {"n": i}} for i in range(2)]
    await ctx.conv.send_raw(_dumps(notes))
    await ctx.conv.quiet(ctx.opts.quiet)
    replies = [s for s in ctx.conv.seen[mark:] if is_response(s.msg) or s.frame.message() == []]
    empty = [f for f in ctx.conv.peer.transcript.received() if f.message() == []]
    ctx.judge_that(
        "ACP-BATCH-202",
        not replies and not empty,
        "a batch of notifications was answered" + (" with an empty array" if empty else ""),
    )
    first, second = ctx.conv.new_id(), ctx.conv.new_id()
    for rid in (first, second):
        ctx.conv.requests[rid] = "session/new"
    calls = [
        {"jsonrpc": "2.0", "id": rid, "method": "session/new", "params": ctx.session_params()}
        for rid in (first, second)
    ]
    mark = ctx.conv.mark()
    await ctx.conv.send_raw(_dumps(calls))
    a = await ctx.conv.response(first, "session/new")
    b = await ctx.conv.response(second, "session/new")
    frames = {id(s.frame) for s in ctx.conv.seen[mark:] if s.msg is a or s.msg is b}
    together = len(frames) == 1 and all(
        s.batch for s in ctx.conv.seen[mark:] if s.msg is a or s.msg is b
    )
    ctx.judge_that("ACP-BATCH-204", together, "the two responses did not come back as one array")


def _dumps(value: Any) -> bytes:
    import orjson

    return orjson.dumps(value)


# ---- informational probes -------------------------------------------------------------------------------------


async def _probe(ctx: Ctx, rid: str, raw: bytes) -> None:
    ctx.provoked = True
    mark = ctx.conv.mark()
    await ctx.conv.send_raw(raw)
    await ctx.conv.quiet(ctx.opts.quiet)
    said = [s.frame.text[:160] for s in ctx.conv.seen[mark:]]
    after = await ctx.conv.request("session/new", ctx.session_params())
    usable = "usable" if "result" in after else f"then session/new answered {after.get('error')!r}"
    ctx.ok(rid, f"{'answered ' + said[0] if said else 'silent'}; {usable}")


@check("probes", "ACP-INFO-PARSE-001", "ACP-INFO-INVALIDREQ-001", "ACP-INFO-UNKNOWNSESSION-001")
async def probes(ctx: Ctx) -> None:
    await ctx.initialize()
    await _probe(ctx, "ACP-INFO-PARSE-001", b"{this is not json")
    await _probe(ctx, "ACP-INFO-INVALIDREQ-001", b'{"foo": "bar"}')
    rid = await ctx.conv.send_request(
        "session/prompt", {"sessionId": "conform-never-made", "prompt": [ctx.text("hi")]}
    )
    try:
        msg = await ctx.conv.response(rid, "session/prompt", timeout=ctx.opts.timeout)
    except Exception:  # noqa: BLE001 - recorded, never judged
        ctx.ok("ACP-INFO-UNKNOWNSESSION-001", "no answer")
        return
    error = msg.get("error")
    ctx.ok(
        "ACP-INFO-UNKNOWNSESSION-001",
        f"error {error.get('code')}" if type(error) is dict else "a result",
    )
    await asyncio.sleep(0)
