"""Checks as code: each check names the requirement ids it proves and gets a fresh peer.

`@check(name, *ids)` registers an async function of a `Ctx`.  The runner starts a new
peer for every check (a fresh process over stdio), runs it under a deadline, gives
each id the check named and did not judge a FAIL when the check broke off (the peer
went silent, crashed, or a request went unanswered), then hands the transcript to the
observers (observers.py: the requirements judged on every frame of every check).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..protocol import runtime_revision as rv
from .catalogue import Requirement
from .conversation import Conversation, Unanswered
from .schema_link import Judge
from .transcript import Transcript
from .verdict import Outcome, Status

CLIENT_NAME = "agentgen-conform"
AUTH_REQUIRED = -32000  # the error an agent gives a session/new it wants authenticated


@dataclass
class Options:
    command: list[str]
    cwd: str  # the sessions' folder (absolute)
    env: dict[str, str] | None = None
    timeout: float = 10.0  # one response
    turn_timeout: float = 30.0  # one prompt turn
    check_timeout: float = 60.0  # one check, whatever it waits on
    quiet: float = 0.5  # "nothing more arrives": how long the kit listens
    grace: float = 2.0  # each step of the shutdown ladder
    cancel_prompt: str = "Count slowly from 1 to 200, one number per line."
    auth_method: str | None = None


class Blocked(Exception):
    """The check could not judge: the peer speaks another version, or wants auth."""


class Skip(Exception):
    """The whole check does not apply (its reason goes to each of its ids)."""


@dataclass
class Shared:
    """What one check learns that another uses (checks run in catalogue order)."""

    answered_version: int | None = None
    peer: dict[str, Any] = field(default_factory=dict)


@dataclass
class Turn:
    """One prompt turn as the kit saw it."""

    session: str
    request: Any  # the prompt's id
    response: dict[str, Any] | None
    start: int  # index in `seen` when the prompt was sent
    answered: int | None  # index of the response
    ended: int | None  # index of what ended the turn (v1 the response, v2 the idle)
    stop_reason: Any = None
    idle: dict[str, Any] | None = None
    running_seen: bool = False

    @property
    def error(self) -> Any:
        return self.response.get("error") if self.response is not None else None


class Ctx:
    def __init__(
        self,
        name: str,
        judge: Judge,
        rows: dict[str, Requirement],
        opts: Options,
        conv: Conversation,
        shared: Shared,
    ) -> None:
        self.name = name
        self.judge = judge
        self.rev: rv.Revision = judge.revision
        self.rows = rows
        self.opts = opts
        self.conv = conv
        self.shared = shared
        self.found: dict[str, list[tuple[Status, str]]] = {}
        self.init_result: dict[str, Any] | None = None
        self.last_new: dict[str, Any] = {}  # the latest session/new result
        self.provoked = False  # the kit sent something invalid on purpose
        self.off_schema = False  # the kit sent a valid frame the schema does not name
        self.start_peer: Callable[[Transcript], Awaitable[Any]] | None = None
        self.others: list[Any] = []  # peers of further connections the check opened

    # ---- outcomes ----------------------------------------------------------------------------
    def applies(self, rid: str) -> bool:
        return rid in self.rows

    def ok(self, rid: str, message: str = "") -> None:
        self._put(rid, Status.PASS, message)

    def fail(self, rid: str, message: str) -> None:
        self._put(rid, Status.FAIL, message)

    def skip(self, rid: str, message: str) -> None:
        self._put(rid, Status.SKIPPED, message)

    def judge_that(self, rid: str, passed: bool, message: str, passed_message: str = "") -> None:
        if passed:
            self.ok(rid, passed_message)
        else:
            self.fail(rid, message)

    def _put(self, rid: str, status: Status, message: str) -> None:
        if rid in self.rows:
            self.found.setdefault(rid, []).append((status, message))

    # ---- capabilities -----------------------------------------------------------------------
    def caps(self) -> dict[str, Any]:
        caps = (self.init_result or {}).get(self.rev.init.response_capabilities)
        return caps if type(caps) is dict else {}

    def advertised(self, rid: str) -> bool:
        """The capability gating `rid` is in the agent's initialize answer (a flag true or
        an object marker); True for an ungated requirement."""
        row = self.rows.get(rid)
        if row is None or row.gate is None:
            return True
        node: Any = self.init_result or {}
        for key in row.gate:
            node = node.get(key) if type(node) is dict else None
        return node is True or type(node) is dict

    def gated(self, *rids: str) -> bool:
        """Skip each of `rids` whose capability the agent did not advertise; True when
        any of them is left to judge."""
        left = False
        for rid in rids:
            if not self.applies(rid):
                continue
            if self.advertised(rid):
                left = True
            else:
                self.skip(rid, f"not advertised ({self.rows[rid].capability})")
        return left

    # ---- the protocol's first steps ------------------------------------------------------------
    def init_params(self, version: Any) -> dict[str, Any]:
        init = self.rev.init
        params: dict[str, Any] = {"protocolVersion": version, init.request_capabilities: {}}
        params[init.request_info] = {"name": CLIENT_NAME, "version": "1"}
        return params

    async def initialize(
        self, version: Any = None, *, rid: Any = None, judge_version: bool = True
    ) -> dict[str, Any]:
        """`initialize` for the revision's version (or `version`); the result.  Raises
        Blocked when the agent answers another version and `judge_version` is set."""
        asked = self.rev.protocol_version if version is None else version
        msg = await self.conv.request("initialize", self.init_params(asked), rid=rid)
        result = msg.get("result")
        if type(result) is not dict:
            raise Unanswered(f"initialize failed: {_short(msg.get('error'))}")
        self.init_result = result
        answered = result.get("protocolVersion")
        if judge_version and version is None and answered != self.rev.protocol_version:
            raise Blocked(
                f"VERSION-MISMATCH: asked for {self.rev.protocol_version}, the agent answered "
                f"{answered!r}"
            )
        if self.opts.auth_method and version is None:
            await self.authenticate()
        return result

    async def authenticate(self) -> None:
        method = "authenticate" if "authenticate" in self.rev.side("agent") else "auth/login"
        await self.conv.request(method, {self.rev.auth_method.id: self.opts.auth_method})

    def session_params(self, **extra: Any) -> dict[str, Any]:
        return {"cwd": self.opts.cwd, "mcpServers": [], **extra}

    async def new_session(self, **extra: Any) -> str:
        msg = await self.conv.request("session/new", self.session_params(**extra))
        result = msg.get("result")
        sid = result.get("sessionId") if type(result) is dict else None
        if type(sid) is not str or not sid:
            error = msg.get("error")
            methods = (self.init_result or {}).get(self.rev.init.auth_methods or "")
            if (
                type(error) is dict
                and error.get("code") == AUTH_REQUIRED
                and methods
                and not self.opts.auth_method
            ):
                raise Blocked("AUTH-GATED: session/new wants authentication (give --auth-method)")
            raise Unanswered(f"session/new gave no session id: {_short(error or result)}")
        self.last_new = dict(result) if type(result) is dict else {}
        return sid

    async def ready(self) -> str:
        """initialize and a new session: the start of most checks."""
        await self.initialize()
        return await self.new_session()

    async def second_connection(self) -> Ctx:
        """Another connection to the same agent (its frames in the same transcript)."""
        assert self.start_peer is not None
        peer = await self.start_peer(self.conv.peer.transcript)
        self.others.append(peer)
        conv = Conversation(peer, timeout=self.opts.timeout)
        peer.on_frame = conv.feed
        if hasattr(peer, "on_reject"):
            peer.on_reject = conv.reject
        other = Ctx(self.name, self.judge, self.rows, self.opts, conv, self.shared)
        other.start_peer = self.start_peer
        return other

    # ---- a prompt turn ----------------------------------------------------------------------------
    def text(self, text: str) -> dict[str, Any]:
        return {"type": "text", "text": text}

    async def turn(
        self,
        sid: str,
        blocks: list[dict[str, Any]],
        *,
        meta: Any = None,
        after_send: Callable[[Turn], Awaitable[None]] | None = None,
    ) -> Turn:
        params: dict[str, Any] = {"sessionId": sid, "prompt": blocks}
        if meta is not None:
            params["_meta"] = meta
        start = self.conv.mark()
        rid = await self.conv.send_request("session/prompt", params)
        turn = Turn(sid, rid, None, start, None, None)
        if after_send is not None:
            await after_send(turn)
        timeout = self.opts.turn_timeout
        if self.rev.turn.lifecycle == "v1":
            msg = await self.conv.response(rid, "session/prompt", timeout=timeout)
            turn.response = msg
            turn.answered = turn.ended = self.conv.index_of(msg)
            result = msg.get("result")
            turn.stop_reason = result.get("stopReason") if type(result) is dict else None
            return turn
        msg = await self.conv.response(rid, "session/prompt", timeout=self.opts.timeout)
        turn.response = msg
        turn.answered = self.conv.index_of(msg)
        if "error" in msg:
            return turn
        idle = await self.conv.wait_for(lambda s: _idle_end(s.msg, sid), timeout, since=start)
        if idle is None:
            raise Unanswered(f"no idle state_update ending the turn within {timeout:g}s")
        turn.ended = idle.index
        turn.idle = idle.msg["params"]["update"]
        turn.stop_reason = turn.idle.get("stopReason")
        turn.running_seen = any(
            _state(u, sid) == "running" for u in self.conv.updates(start, idle.index)
        )
        return turn


def _state(params: dict[str, Any], sid: str) -> Any:
    update = params.get("update")
    if params.get("sessionId") != sid or type(update) is not dict:
        return None
    return update.get("state") if update.get("sessionUpdate") == "state_update" else None


def _idle_end(msg: dict[str, Any], sid: str) -> bool:
    if msg.get("method") != "session/update" or type(msg.get("params")) is not dict:
        return False
    params = msg["params"]
    update = params.get("update")
    return (
        _state(params, sid) == "idle"
        and type(update) is dict
        and update.get("stopReason") is not None
    )


def _short(value: Any, width: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


# ---- the registry -------------------------------------------------------------------------------

CheckFn = Callable[[Ctx], Awaitable[None]]


@dataclass(frozen=True)
class Check:
    name: str
    ids: tuple[str, ...]
    run: CheckFn
    role: str = "agent"


CHECKS: list[Check] = []


def check(name: str, *ids: str, role: str = "agent") -> Callable[[CheckFn], CheckFn]:
    def register(fn: CheckFn) -> CheckFn:
        CHECKS.append(Check(name, ids, fn, role))
        return fn

    return register


def selected(checks: list[Check], rows: dict[str, Requirement], keyword: str | None) -> list[Check]:
    """The checks that prove an id of the catalogue and match `-k` (a substring of the
    check's name or of one of its ids, case-insensitive; `not X` leaves those out)."""
    out = [c for c in checks if any(i in rows for i in c.ids)]
    if not keyword:
        return out
    negate = keyword.startswith("not ")
    word = keyword[4:].strip().lower() if negate else keyword.strip().lower()

    def hit(c: Check) -> bool:
        return word in c.name.lower() or any(word in i.lower() for i in c.ids)

    return [c for c in out if hit(c) != negate]


@dataclass
class CheckRun:
    """A finished check: its outcomes, transcript, and how the peer ended."""

    check: Check
    outcomes: list[Outcome]
    transcript: Transcript
    conv: Conversation
    ctx: Ctx
    ended: Any
    seconds: float
    blocked: str | None = None


async def run_check(
    chk: Check,
    judge: Judge,
    rows: dict[str, Requirement],
    opts: Options,
    shared: Shared,
    start_peer: Callable[[Transcript], Awaitable[Any]],
) -> CheckRun:
    transcript = Transcript()
    started = time.monotonic()
    peer = await start_peer(transcript)
    conv = Conversation(peer, timeout=opts.timeout)
    peer.on_frame = conv.feed
    if hasattr(peer, "on_reject"):
        peer.on_reject = conv.reject
    ctx = Ctx(chk.name, judge, rows, opts, conv, shared)
    ctx.start_peer = start_peer
    blocked = await _run_one(chk, ctx)
    for other in ctx.others:
        await other.close()
    ended = await peer.close()
    seconds = time.monotonic() - started
    outcomes = [
        Outcome(rid, status, chk.name, message, transcript, seconds)
        for rid, found in ctx.found.items()
        for status, message in found
    ]
    return CheckRun(chk, outcomes, transcript, conv, ctx, ended, seconds, blocked)


async def _run_one(chk: Check, ctx: Ctx) -> str | None:
    """Run the check; an id it named and did not judge FAILs when it broke off, and is
    SKIPPED when it was blocked (returned: why) or skipped whole."""
    broke: str | None = None
    try:
        await asyncio.wait_for(chk.run(ctx), ctx.opts.check_timeout)
    except Skip as exc:
        for rid in chk.ids:
            ctx.skip(rid, str(exc))
    except Blocked as exc:
        for rid in chk.ids:
            if rid not in ctx.found:
                ctx.skip(rid, str(exc))
        return str(exc)
    except Unanswered as exc:
        broke = str(exc)
    except TimeoutError:
        broke = f"the check did not finish within {ctx.opts.check_timeout:g}s"
    except Exception as exc:  # noqa: BLE001 - a peer's garbage must not stop the run
        broke = f"{type(exc).__name__}: {exc}"
    if broke is not None:
        _broke_off(chk, ctx, broke)
    return None


def _broke_off(chk: Check, ctx: Ctx, why: str) -> None:
    if not ctx.conv.peer.alive():
        why += " (the agent exited)"
    for rid in chk.ids:
        if rid not in ctx.found:
            ctx.fail(rid, why)
