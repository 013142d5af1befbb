"""What every session store shares (store.py, store_sqlite.py, store_postgres.py): the
``list_sessions`` cursor, history bounds read from the environment, the retention
plan (which oldest turns a bound drops), how the database stores write a small
turn's messages as one history row (``joined``, ``unjoined``), and how they keep a
model's message history a row a message (``split_state``, ``model_plan``, ``join_state``)."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("acp.runtime.store")

_CURSOR_DIGITS = 18  # a cursor is a 64-bit sequence number


def cursor_seq(cursor: str | None) -> int:
    """The sequence number a ``list_sessions`` cursor stands for (every store's cursors are
    decimal sequence numbers); ValueError for one no store hands out."""
    if cursor is None:
        return 0
    if not cursor.isdigit() or len(cursor) > _CURSOR_DIGITS:
        raise ValueError("not a cursor this store handed out")
    return int(cursor)


class _FromEnv:
    """A bound's default: the environment variable, else the documented default."""

    def __repr__(self) -> str:
        return "FROM_ENV"


FROM_ENV = _FromEnv()
Limit = int | None | _FromEnv

DEFAULT_HISTORY_BYTES = 256 * 1024 * 1024
DEFAULT_HISTORY_TURNS = 100_000


def env_limit(value: Limit, name: str, default: int) -> int | None:
    """``value``, or for FROM_ENV: ``$name`` (a count of bytes or turns; ``0`` or
    ``none``: unbounded) else ``default``.  A value that is not a count is logged (it
    names the variable) and the default used."""
    if not isinstance(value, _FromEnv):
        return value
    import os

    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("0", "none"):
        return None
    if not raw.isdigit():
        log.warning(
            "%s=%r is not a whole number (0 or 'none': no bound): using %d", name, raw, default
        )
        return default
    return int(raw)


JOIN_BELOW = 128 * 1024
"""A turn of fewer bytes than this, of several messages none of which holds a newline, is
one history row (SQLite's schema 5, PostgreSQL's 3): a turn of many updates writes one
row and one index entry, not one of each a message."""


def joined(messages: list[bytes], size: int) -> bytes | None:
    """A turn's messages (``size`` bytes in all) as one history row, its ``parts`` being
    ``len(messages)``: joined by newlines, which no stored frame holds; None when they
    stay a row each (one message, a large turn, or a newline in one of them)."""
    if len(messages) <= 1 or size >= JOIN_BELOW:
        return None
    one = b"\n".join(messages)
    # one pass in C: the joins' newlines alone, none inside a message
    return one if one.count(b"\n") == len(messages) - 1 else None


def unjoined(row: bytes, parts: int) -> list[bytes]:
    """The messages of a history row of ``parts`` of them (see ``joined``)."""
    return row.split(b"\n") if parts > 1 else [row]


MODEL_HISTORY = "model_history"
"""The state's key holding a model's message history (a list of messages as JSON,
model/history.py).  The database stores keep it a row a message, apart from the rest of
the state (SQLite's schema 7, PostgreSQL's 4): a turn inserts the messages it added and
deletes those the history let go, so a message (a 5 MB tool result) is written once, not
once a turn for as long as the history keeps it.  In the stored state the list's place
holds its length (an int), which ``join_state`` replaces by the rows."""


def split_state(state: dict[str, Any]) -> tuple[bytes, list[bytes] | None]:
    """The state as the database stores keep it: its JSON without the model's messages
    (their count in their place), and each message's JSON (None: the state has no model
    history list)."""
    model = state.get(MODEL_HISTORY)
    if type(model) is not list:
        return orjson.dumps(state), None
    rest = dict(state)
    rest[MODEL_HISTORY] = len(model)
    return orjson.dumps(rest), [orjson.dumps(m) for m in model]


KEY_DIGEST_FROM = 4096
"""A model message of fewer bytes than this is its own key (``model_keys``); a larger
one's key is its digest, which its row keeps."""


def model_keys(messages: list[bytes] | None) -> list[bytes]:
    """What tells stored model messages apart, one a message: a message of fewer than
    ``KEY_DIGEST_FROM`` bytes is its own key (compared as bytes: nothing to hash); a larger
    one's is a NUL (which no JSON text holds) and 16 bytes of its SHA-256.  A stored
    message whose key the new history has at its place is not written again."""
    if not messages:
        return []
    sha = hashlib.sha256
    small = KEY_DIGEST_FROM
    return [m if len(m) < small else b"\0" + sha(m).digest()[:16] for m in messages]


def stored_digest(message: bytes, key: bytes) -> bytes | None:
    """What a model message's row keeps of its key: a large message's digest; None for a
    small one (its own key: ``coalesce(digest, message)`` reads it back)."""
    return key if len(message) >= KEY_DIGEST_FROM else None


def join_state(raw: bytes, messages: list[bytes]) -> dict[str, Any]:
    """A stored state read back: the model's messages (the rows, in order) in the place
    ``split_state`` left their count."""
    state: dict[str, Any] = orjson.loads(raw)
    if type(state.get(MODEL_HISTORY)) is int:
        state[MODEL_HISTORY] = orjson.loads(b"[" + b",".join(messages) + b"]")
    return state


class ModelRows:
    """A session's stored model messages as a database store knows them: their keys
    (``model_keys``) in order, their sizes, and the sums of both (what a bound counts,
    what a store's memory of them holds)."""

    __slots__ = ("held", "keys", "size", "sizes")

    def __init__(self, keys: list[bytes], sizes: list[int]) -> None:
        self.keys = keys
        self.sizes = sizes
        self.size = sum(sizes)  # the messages' bytes
        self.held = sum(map(len, keys))  # the keys' bytes

    def after(self, drop: int, keys: list[bytes], messages: list[bytes]) -> ModelRows:
        """These rows less the first ``drop``, ``messages`` (``keys``) added."""
        if not drop and not keys:
            return self
        out = ModelRows.__new__(ModelRows)
        sizes = list(map(len, messages))
        out.keys = self.keys[drop:] + keys
        out.sizes = self.sizes[drop:] + sizes
        out.size = self.size - sum(self.sizes[:drop]) + sum(sizes)
        out.held = self.held - sum(map(len, self.keys[:drop])) + sum(map(len, keys))
        return out


def model_plan(old: list[bytes], new: list[bytes]) -> tuple[int, int]:
    """How a stored model history (``old``, the messages' keys in order) becomes
    ``new``: ``(drop, same)``: its first ``drop`` rows go, the rest are ``new[:same]``
    (kept as they are), and ``new[same:]`` are inserted.  A history grows at its end and
    lets go of its oldest messages (model/history.py), so the rows kept are a run of the
    stored ones' end that starts the new history; anything else (a history replaced or
    edited) rewrites it whole."""
    n = len(old)
    if new:
        first = new[0]
        for k in range(n):
            if old[k] == first and n - k <= len(new) and old[k:] == new[: n - k]:
                return k, n - k
    return n, 0


def trim_plan(
    sizes: list[int], held: int, max_bytes: int | None, max_turns: int | None
) -> tuple[int, int]:
    """History retention, for every store: given a session's turns' sizes (oldest first)
    and the bytes they hold, how many of the oldest turns to drop and their bytes.  Nothing
    until a bound is passed; then whole turns go down to 3/4 of each bound passed (so the
    next trims come later); the latest turn always stays, however large."""
    if max_bytes is not None and held <= max_bytes:
        max_bytes = None
    if max_turns is not None and len(sizes) <= max_turns:
        max_turns = None
    if max_bytes is None and max_turns is None:
        return 0, 0
    goal_bytes = held if max_bytes is None else max_bytes * 3 // 4
    goal_turns = len(sizes) if max_turns is None else max(1, max_turns * 3 // 4)
    cut = dropped = 0
    while cut < len(sizes) - 1 and (held - dropped > goal_bytes or len(sizes) - cut > goal_turns):
        dropped += sizes[cut]
        cut += 1
    return cut, dropped


def private_file(path: str | Path) -> None:
    """Create the SQLite store's file for its owner alone before SQLite opens it: the file
    0600, each folder made for it 0700, whatever the umask (a session's history holds the
    conversation and the files the agent read). What exists is left as it is (never
    loosened); SQLite gives the -wal and -shm files the database file's own mode."""
    if str(path) in ("", ":memory:"):
        return
    target = Path(path)
    private_folder(target.parent)
    try:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return
    os.chmod(target, 0o600)


def private_folder(folder: Path) -> None:
    """Make `folder` and its missing parents 0700 whatever the umask; existing ones keep
    their mode."""
    missing: list[Path] = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        try:
            made.mkdir(mode=0o700)
        except FileExistsError:  # made by another process meanwhile: its own mode
            continue
        os.chmod(made, 0o700)  # the umask may have taken bits off
