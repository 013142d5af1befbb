"""Turn recording: the frames a session's history holds (the user's prompt, the agent's
``session/update`` notifications, a replay primed for a v2 client) and what a finished
turn's recorded updates become besides its saved history: its held-back ``idle``
acknowledgment, its callback."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from ..wire.errors import RpcError, invalid_params

if TYPE_CHECKING:
    from ..agent.agent import AgentRuntime

UPDATE_PREFIX = b'{"jsonrpc":"2.0","method":"session/update"'


class CallbackSender(Protocol):
    """What the session core needs of callbacks.py's sender. callbacks.py (and httpx) ship
    only in projects whose manifest declares async output with a callback, so it is
    loaded by name in `callbacks_for`, never imported here."""

    def schedule(self, url: str, payload: dict[str, Any]) -> Any: ...


def is_idle(frame: bytes) -> bool:
    """A ``state_update`` to ``idle`` (cheap test first: most updates are chunks)."""
    if b'"state_update"' not in frame or b'"idle"' not in frame:
        return False
    update = orjson.loads(frame).get("params", {}).get("update", {})
    return bool(update.get("sessionUpdate") == "state_update" and update.get("state") == "idle")


def primed(frames: list[bytes], sid: str, primers: tuple[tuple[str, str], ...]) -> list[bytes]:
    """A replay's frames with each message primed: before the first chunk of a message
    id, that message's whole-message update with `content: []` (unless one came before),
    so a client that patches messages by id starts it empty (v2 session/resume)."""
    if not primers:
        return frames
    whole_of = dict(primers)
    wholes = set(whole_of.values())
    seen: set[tuple[str, str]] = set()
    out: list[bytes] = []
    for frame in frames:
        try:
            update = orjson.loads(frame)["params"]["update"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            out.append(frame)
            continue
        tag = update.get("sessionUpdate") if type(update) is dict else None
        mid = update.get("messageId") if type(update) is dict else None
        if type(tag) is str and type(mid) is str:
            whole = tag if tag in wholes else whole_of.get(tag)
            if whole is not None and (whole, mid) not in seen:
                seen.add((whole, mid))
                if whole != tag:
                    primer = {"sessionUpdate": whole, "messageId": mid, "content": []}
                    params = {"sessionId": sid, "update": primer}
                    out.append(
                        orjson.dumps(
                            {"jsonrpc": "2.0", "method": "session/update", "params": params}
                        )
                    )
        out.append(frame)
    return out


def user_frames(sid: str, params: dict[str, Any]) -> list[bytes]:
    """The user's prompt as a v1 history records it (``user_message_chunk`` updates; v2
    records the agent's own ``user_message`` update instead).  Built before
    the turn runs: content JSON cannot carry is refused before anything happens."""
    blocks = params.get("prompt")
    if type(blocks) is not list:
        return []
    frames = []
    for i, block in enumerate(blocks):
        msg = {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {
                "sessionId": sid,
                "update": {"sessionUpdate": "user_message_chunk", "content": block},
            },
        }
        try:
            frames.append(orjson.dumps(msg))
        except TypeError:  # orjson: nested deeper than it serializes (255 levels)
            raise invalid_params(
                f"params.prompt[{i}]: content nested too deeply",
                [{"loc": ["params", "prompt", i], "msg": "nested too deeply"}],
            ) from None
    return frames


def unsaved_idle(idle: bytes, err: RpcError, field: str | None) -> bytes:
    """The idle update of a turn whose save failed: stopReason ``error`` with the store's
    error (the revision's error stop reason), else the original one with it in _meta."""
    msg = orjson.loads(idle)
    update = msg["params"]["update"]
    if field:
        update["stopReason"] = "error"
        update[field] = err.to_wire()
    else:
        update["_meta"] = {**(update.get("_meta") or {}), "error": err.to_wire()}
    return orjson.dumps(msg)


def send_callback(
    callbacks: CallbackSender | None,
    sid: str,
    params: dict[str, Any],
    result: Any,
    frames: list[bytes],
) -> None:
    """A finished turn's recorded updates POSTed to the prompt's ``_meta.callbackUrl``
    (when the agent has a callback sender)."""
    meta = params.get("_meta")
    url = meta.get("callbackUrl") if type(meta) is dict and callbacks is not None else None
    if url is None or callbacks is None:
        return
    updates = [orjson.loads(f)["params"]["update"] for f in frames]
    stop = result.get("stopReason") if type(result) is dict else None
    if stop is None:  # v2: the stop reason is in the turn's last state_update
        for u in reversed(updates):
            if u.get("sessionUpdate") == "state_update" and u.get("state") == "idle":
                stop = u.get("stopReason")
                break
    callbacks.schedule(url, {"sessionId": sid, "stopReason": stop, "updates": updates})


def callbacks_for(agent_cls: type[AgentRuntime]) -> CallbackSender | None:
    """A callback sender when the manifest declares ``output_modes.async.callback``."""
    modes = (getattr(agent_cls, "_acp_manifest", {}) or {}).get("output_modes") or {}
    async_mode = modes.get("async") if type(modes) is dict else None
    if type(async_mode) is dict and async_mode.get("callback"):
        sender: CallbackSender = importlib.import_module(".callbacks", __package__).CallbackSender()
        return sender
    return None
