"""Keeps a log readable when the same thing happens many times a second: a peer sending
bad frames in a loop, a dispatcher going round the same states. No I/O: the caller logs.

Each key (a peer's host, a line's text) is let through at most once per ``window``
seconds; what is held back meanwhile is counted, and the next line let through for that
key says how many were held back, so nothing is hidden, only folded.
"""

from __future__ import annotations


class Repeats:
    def __init__(self, window: float = 10.0, keys: int = 1024) -> None:
        self.window = window
        self.keys = keys  # keys remembered at most (the oldest are forgotten first)
        self._seen: dict[object, list] = {}  # key -> [when last let through, held back since]

    def check(self, key, now: float) -> int | None:
        """None to hold this occurrence back; else let it through, with how many of ``key``
        were held back since the last one let through."""
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.window:
            seen[1] += 1
            return None
        held = seen[1] if seen is not None else 0
        if seen is None and len(self._seen) >= self.keys:
            self._forget(now)
        self._seen[key] = [now, 0]
        return held

    def _forget(self, now: float) -> None:
        old = [k for k, (at, _held) in self._seen.items() if now - at >= self.window]
        for k in old or list(self._seen)[: self.keys // 2]:
            del self._seen[k]


def held_back(n: int, what: str = "") -> str:
    """The tail of a line let through after ``n`` like it were held back (``what``: a noun
    for them, say "connection")."""
    if not n:
        return ""
    return f" ({n} more {what}{'s' if n > 1 else ''} since)" if what else f" ({n} more like it held back)"
