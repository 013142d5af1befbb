"""The checks of an agent's Streamable HTTP and WebSocket transport (the RFD's rules),
and what every HTTP or WebSocket transcript is judged on."""

from __future__ import annotations

import asyncio

from .engine import CheckRun, Ctx, Skip, check
from .http_peer import CONNECTION, SESSION, HttpPeer, WsPeer
from .verdict import Status

Finding = tuple[str, Status, str]
OK, ACCEPTED, MULTIPLE, SWITCHING = 200, 202, 300, 101


def _http(ctx: Ctx) -> HttpPeer:
    peer = ctx.conv.peer
    if not isinstance(peer, HttpPeer):
        raise Skip("not an HTTP peer")
    return peer


@check("http2", "AGENTGEN-HTTP-007")
async def http2(ctx: Ctx) -> None:
    """(The kit's own requests go over HTTP/1.1: httpcore's HTTP/2 connections stall
    when several requests share one; the version an agent serves is judged here.)"""
    version = await _http(ctx).http2_version()
    ctx.judge_that(
        "AGENTGEN-HTTP-007", version == "HTTP/2", f"offered HTTP/2, it answered {version}"
    )


@check("http-status", "AGENTGEN-HTTP-003")
async def http_status(ctx: Ctx) -> None:
    peer = _http(ctx)
    sid = await ctx.ready()
    cid = peer.connection or ""
    body = b'{"jsonrpc":"2.0","method":"_conform/notice","params":{}}'
    prompt = (
        b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"'
        + sid.encode()
        + b'"}}'
    )
    json_type = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    cases: list[tuple[str, str, dict[str, str], bytes, int]] = [
        ("POST without Acp-Connection-Id", "POST", json_type, body, 400),
        (
            "POST with an unknown Acp-Connection-Id",
            "POST",
            {**json_type, CONNECTION: "conform-unknown"},
            body,
            404,
        ),
        (
            "a session-scoped POST without Acp-Session-Id",
            "POST",
            {**json_type, CONNECTION: cid},
            prompt,
            400,
        ),
        ("POST as text/plain", "POST", {"Content-Type": "text/plain", CONNECTION: cid}, body, 415),
        ("GET without Acp-Connection-Id", "GET", {"Accept": "text/event-stream"}, b"", 400),
        (
            "GET accepting only JSON",
            "GET",
            {"Accept": "application/json", CONNECTION: cid},
            b"",
            406,
        ),
        (
            "GET with an unknown Acp-Session-Id",
            "GET",
            {"Accept": "text/event-stream", CONNECTION: cid, SESSION: "conform-unknown"},
            b"",
            404,
        ),
        ("DELETE without Acp-Connection-Id", "DELETE", {}, b"", 400),
    ]
    wrong = []
    for what, method, headers, data, want in cases:
        try:
            got = await asyncio.wait_for(peer.raw(method, headers, data), ctx.opts.timeout)
        except TimeoutError:
            wrong.append(f"{what}: no answer within {ctx.opts.timeout:g}s, not {want}")
            continue
        if got.status != want:
            wrong.append(f"{what}: {got.status}, not {want}")
    ctx.judge_that("AGENTGEN-HTTP-003", not wrong, "; ".join(wrong))


@check("two-sessions", "AGENTGEN-HTTP-005")
async def two_sessions(ctx: Ctx) -> None:
    _http(ctx)
    await ctx.initialize()
    if not ctx.gated("ACP-SESSION-001"):
        raise Skip("the session surface is not advertised")
    first = await ctx.new_session()
    second = await ctx.new_session()
    await asyncio.gather(
        ctx.turn(first, [ctx.text("first session")]),
        ctx.turn(second, [ctx.text("second session")]),
    )
    await ctx.conv.quiet(ctx.opts.quiet)
    crossed = []
    for seen in ctx.conv.seen:
        params = seen.msg.get("params")
        channel = seen.frame.channel
        if seen.msg.get("method") != "session/update" or type(params) is not dict:
            continue
        owner = params.get("sessionId")
        if channel.startswith("sse:") and channel not in ("sse:conn", f"sse:{owner}"):
            crossed.append(f"an update of {owner} on {channel}")
    mine = {s: [x for x in ctx.conv.seen if x.frame.channel == f"sse:{s}"] for s in (first, second)}
    ctx.judge_that(
        "AGENTGEN-HTTP-005",
        not crossed and all(mine.values()),
        "; ".join(crossed) or "a session's stream carried nothing of its turn",
    )


@check("new-connection", "AGENTGEN-HTTP-008")
async def new_connection(ctx: Ctx) -> None:
    _http(ctx)
    await ctx.initialize()
    if not ctx.gated("AGENTGEN-HTTP-008"):
        return
    sid = await ctx.new_session()
    await ctx.turn(sid, [ctx.text("Remember me.")])
    other = await ctx.second_connection()
    await other.initialize()
    msg = await other.conv.request("session/resume", {"sessionId": sid, "cwd": ctx.opts.cwd})
    ctx.judge_that(
        "AGENTGEN-HTTP-008", "result" in msg, f"resume on a new connection: {msg.get('error')!r}"
    )


@check("ws-ping", "AGENTGEN-WS-003")
async def ws_ping(ctx: Ctx) -> None:
    peer = ctx.conv.peer
    if not isinstance(peer, WsPeer):
        raise Skip("not a WebSocket peer")
    await ctx.initialize()
    took = await peer.ping()
    ctx.judge_that("AGENTGEN-WS-003", took is not None, "no pong")


# ---- on every HTTP / WebSocket transcript ------------------------------------------------------------


def _ok_or(rid: str, problems: list[str]) -> list[Finding]:
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return [(rid, Status.FAIL, problems[0] + more)]
    return [(rid, Status.PASS, "")]


def _posts(peer: HttpPeer) -> tuple[list[str], list[str]]:
    """What is wrong with the answers to the kit's POSTs: initialize's, and the others'."""
    init, accepted = [], []
    for ex in peer.exchanges:
        if ex.method != "POST" or ex.what == "raw":
            continue
        body = ex.body.strip()
        if ex.what == "initialize" and CONNECTION not in ex.sent_headers:
            if ex.status != OK or not ex.headers.get(CONNECTION.lower()) or not body:
                got = ex.headers.get(CONNECTION.lower())
                init.append(f"initialize answered {ex.status}, connection id {got!r}")
        elif OK <= ex.status < MULTIPLE and (ex.status != ACCEPTED or body):
            extra = " with a body" if body else ""
            accepted.append(f"POST {ex.what} answered {ex.status}{extra}, not 202")
    return init, accepted


def _routing(run: CheckRun) -> list[str]:
    routing = []
    for seen in run.conv.seen:
        key = seen.frame.channel.removeprefix("sse:")
        if not seen.frame.channel.startswith("sse:") or key == "conn":
            continue
        params = seen.msg.get("params")
        owner = params.get("sessionId") if type(params) is dict else None
        if owner is not None and owner != key:
            routing.append(f"{seen.frame.channel} carried a message of {owner}")
        if "method" not in seen.msg:
            asked = run.conv.requests.get(seen.msg.get("id"))
            entry = run.ctx.rev.side("agent").get(asked or "")
            if entry is not None and entry.scope != "session":
                routing.append(f"the response to {asked} came on {seen.frame.channel}")
    return routing


def http_observer(run: CheckRun) -> list[Finding]:
    peer = run.conv.peer
    if not isinstance(peer, HttpPeer):
        return []
    init, accepted = _posts(peer)
    framing = list(peer.stream_problems) + [
        f"{f.channel}: an event that is not one JSON-RPC message: {f.text[:80]}"
        for f in run.transcript.received()
        if f.channel.startswith("sse:") and type(f.message()) is not dict
    ]
    cookies = ", ".join(sorted({c.split("=", 1)[0] for c in peer.cookies_set})) or "none"
    return (
        _ok_or("AGENTGEN-HTTP-001", init)
        + _ok_or("AGENTGEN-HTTP-002", accepted)
        + _ok_or("AGENTGEN-HTTP-004", _routing(run))
        + _ok_or("AGENTGEN-HTTP-006", framing)
        + [("AGENTGEN-HTTP-009", Status.PASS, f"cookies set: {cookies}")]
    )


def _message(value: object, batches: bool) -> bool:
    """One JSON-RPC message, or (where the revision has batches) a non-empty array of them."""
    if type(value) is list:
        return batches and bool(value) and all(type(v) is dict for v in value)
    return type(value) is dict


def ws_observer(run: CheckRun) -> list[Finding]:
    peer = run.conv.peer
    if not isinstance(peer, WsPeer):
        return []
    up = peer.upgrade
    upgrade = (
        []
        if up is not None and up.status == SWITCHING and up.headers.get(CONNECTION.lower())
        else [
            f"the upgrade answered {up.status if up else None} with {CONNECTION} {up.headers.get(CONNECTION.lower()) if up else None!r}"
        ]
    )
    frames = [f"a binary frame: {b[:60]!r}" for b in peer.binary]
    frames += [
        f"a text frame that is not one JSON-RPC message: {f.text[:80]}"
        for f in run.transcript.received()
        if f.channel == "ws" and not _message(f.message(), run.ctx.judge.batches)
    ]
    closing = [] if peer.close_code in (1000, None) else [f"closed with {peer.close_code}"]
    if peer.close_code is None:
        closing = ["the close handshake did not complete"]
    return (
        _ok_or("AGENTGEN-WS-001", upgrade)
        + _ok_or("AGENTGEN-WS-002", frames)
        + _ok_or("AGENTGEN-WS-004", closing)
    )


TRANSPORT_OBSERVED = (
    "AGENTGEN-HTTP-001",
    "AGENTGEN-HTTP-002",
    "AGENTGEN-HTTP-004",
    "AGENTGEN-HTTP-006",
    "AGENTGEN-HTTP-009",
    "AGENTGEN-WS-001",
    "AGENTGEN-WS-002",
    "AGENTGEN-WS-004",
)
