"""The one raw transcript type every transport records: what crossed the wire, as bytes.

A peer is judged on its bytes: each stdout line of a stdio agent, each HTTP body or SSE
event, each WebSocket text frame is one `Frame` with its direction and the monotonic time
it was seen.  Parsing happens after recording (`Frame.message`), so a frame that is not
JSON, not UTF-8 or not JSON-RPC is still in the transcript for the requirement that
judges it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson

# direction: "out" the kit sent it, "in" the peer sent it, "err" the peer's stderr,
# "note" what the kit did that is not a frame (a process started, stdin closed)
DIRECTIONS = ("out", "in", "err", "note")

_UNPARSED = object()


@dataclass
class Frame:
    direction: str
    data: bytes
    at: float  # time.monotonic() when it was seen
    channel: str = "stdio"  # "stdio", "post", "sse:<stream>", "ws", ...
    _parsed: Any = field(default=_UNPARSED, repr=False, compare=False)

    @property
    def text(self) -> str:
        """The bytes as text (undecodable bytes replaced: UTF-8 is judged on `data`)."""
        return self.data.decode("utf-8", "replace")

    def utf8(self) -> bool:
        try:
            self.data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    def message(self) -> Any:
        """The parsed JSON value (a JSON-RPC object or a batch array), or None when the
        frame is not JSON.  Undecodable bytes are replaced first: that is the UTF-8
        requirement's finding, not the JSON one's."""
        if self._parsed is _UNPARSED:
            try:
                self._parsed = orjson.loads(self.text)
            except orjson.JSONDecodeError:
                self._parsed = None
        return self._parsed

    def messages(self) -> list[dict[str, Any]]:
        """The JSON-RPC objects in the frame: itself, or a batch's entries."""
        msg = self.message()
        if type(msg) is dict:
            return [msg]
        if type(msg) is list:
            return [m for m in msg if type(m) is dict]
        return []


@dataclass
class Transcript:
    """Every frame of one check, both ways, in arrival order."""

    started: float = field(default_factory=time.monotonic)
    frames: list[Frame] = field(default_factory=list)

    def add(self, direction: str, data: bytes, channel: str = "stdio") -> Frame:
        frame = Frame(direction, data, time.monotonic(), channel)
        self.frames.append(frame)
        return frame

    def note(self, text: str) -> None:
        self.add("note", text.encode())

    def received(self) -> list[Frame]:
        return [f for f in self.frames if f.direction == "in"]

    def sent(self) -> list[Frame]:
        return [f for f in self.frames if f.direction == "out"]

    def stderr_bytes(self) -> int:
        return sum(len(f.data) for f in self.frames if f.direction == "err")

    def excerpt(self, limit: int = 40, width: int = 400) -> str:
        """The transcript as lines `+0.012s >> {...}` (`>>` sent, `<<` received, `!!`
        stderr, `--` a note), the last `limit` frames, each cut at `width` characters."""
        arrows = {"out": ">>", "in": "<<", "err": "!!", "note": "--"}
        shown = self.frames[-limit:]
        lines = []
        if len(self.frames) > limit:
            lines.append(f"... {len(self.frames) - limit} earlier frames")
        for f in shown:
            text = f.text.rstrip("\n")
            if len(text) > width:
                text = text[: width - 3] + "..."
            channel = "" if f.channel == "stdio" else f" [{f.channel}]"
            lines.append(f"+{f.at - self.started:.3f}s {arrows[f.direction]}{channel} {text}")
        return "\n".join(lines)

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {
                "direction": f.direction,
                "channel": f.channel,
                "t": round(f.at - self.started, 6),
                "data": f.text,
                "utf8": f.utf8(),
            }
            for f in self.frames
        ]
