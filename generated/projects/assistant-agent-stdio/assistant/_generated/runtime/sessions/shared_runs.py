"""Byte runs that several messages of one turn hold (a prompt's text and its echo): found
once, so that the SQLite store (store_sqlite.py) writes each such run a single time."""

from __future__ import annotations

_PROBE = 64  # bytes of a message looked for in another one
_PROBES = 8  # places tried, spread over the message
# where: the centres of its eighths, in sixteenths, the middle ones first (7/16, 9/16, ...)
_ORDER = tuple(sorted(range(1, 2 * _PROBES, 2), key=lambda c: (abs(c - _PROBES), c)))


def _extend(a: bytes, i: int, b: memoryview, j: int, most: int, back: bool) -> int:
    """How many bytes from a[i:] equal b[j:] (``back``: how many before a[i] equal those
    before b[j]), at most ``most``: doubling steps, then halving, each comparing only
    bytes not compared yet (memcmp, through ``startswith``/``endswith``)."""

    def same(done: int, n: int) -> bool:
        if back:
            return a.endswith(b[j - done - n : j - done], 0, i - done)
        return a.startswith(b[j + done : j + done + n], i + done)

    done, step, n = 0, 64 * 1024, 0
    while done < most:
        n = min(step, most - done)
        if not same(done, n):
            break
        done += n
        step *= 2
    else:
        return done
    while n > 1:
        half = n // 2
        if same(done, half):
            done += half
            n -= half
        else:
            n = half
    return done


def _common_run(a: bytes, b: bytes, least: int) -> tuple[int, int, int] | None:
    """(offset in a, offset in b, length) of a run of at least ``least`` bytes that both
    messages hold (a prompt's text and its echo), found from probes of ``a``; else None.

    Probes start in the middle of ``a`` (its head is the envelope, which the echo does not
    repeat: a search for it reads all of ``b`` and, on repetitive text, compares at every
    byte), and each is first tried where it would sit in ``b`` were the two messages
    aligned at their ends or at their starts (an echo's text: one compare, no search)."""
    mb = memoryview(b)
    for k in _ORDER:
        p = len(a) * k // (2 * _PROBES)
        probe = a[p : p + _PROBE]
        for guess in (p + len(b) - len(a), p):
            if 0 <= guess and b.startswith(probe, guess):
                j = guess
                break
        else:
            j = b.find(probe)
        if j < 0:
            continue
        right = _extend(a, p, mb, j, min(len(a) - p, len(b) - j), back=False)
        left = _extend(a, p, mb, j, min(p, j), back=True)
        if left + right >= least:
            return p - left, j - left, left + right
    return None


def shared_runs(messages: list[bytes], least: int) -> tuple[bytes, dict[int, int]] | None:
    """A run of bytes that the turn's first large message shares with later ones (stored
    once), and where it sits in each message that holds it; None when nothing is shared."""
    big = [k for k, m in enumerate(messages) if len(m) >= least]
    if len(big) <= 1:  # a pair at least
        return None
    first = messages[big[0]]
    run: bytes | None = None
    where: dict[int, int] = {}
    for k in big[1:]:
        m = messages[k]
        if run is None:
            found = _common_run(first, m, least)
            if found is not None:
                i, j, n = found
                run = first[i : i + n]
                where[big[0]] = i
                where[k] = j
        elif len(run) <= len(m):
            j = m.find(run)
            if j >= 0:
                where[k] = j
    return (run, where) if run is not None else None
