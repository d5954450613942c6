"""A linearizability checker for histories of a key-value store (tests only).

Wing & Gong's search (as Lowe improved it with a cache of visited states, and as Knossos
and porcupine run it), with P-compositionality: a history of single-key operations is
linearizable exactly when each key's sub-history is, so each key is checked on its own.

An operation is a :class:`Op`: ``put`` (sets the key's value) or ``get`` (returns the value,
None for a key never set), with the time it was invoked and the time it completed. An
operation whose outcome is unknown (a put that timed out, or whose leader changed before it
committed: it may still take effect, any time after its invocation) has ``end`` = None; the
search may place it anywhere after its invocation, including after everything, which is
the same as it never taking effect. A get whose outcome is unknown says nothing and is left
out of the history by the caller. Operations that were refused (nothing happened) are left
out too.

Times are any comparable numbers. Two operations overlap when each was invoked before the
other completed; an operation invoked at the very time another completed counts as
overlapping it (the search is then free to order them either way), so coarse clocks make
the checker more permissive, never wrong the other way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

INFINITY = float("inf")


@dataclass(frozen=True)
class Op:
    key: str
    kind: str  # "put" | "get"
    value: Any  # put: the value written; get: the value read (None: never set)
    start: float
    end: float | None  # None: unknown outcome (puts only)
    client: Any = None


class _Entry:
    __slots__ = ("op", "id", "is_call", "match", "prev", "next")

    def __init__(self, op, id_, is_call):
        self.op, self.id, self.is_call = op, id_, is_call
        self.match = self.prev = self.next = None


def _step(state, op: Op):
    """The register: (ok, new state)."""
    if op.kind == "put":
        return True, op.value
    return op.value == state, state


def _linearizable_key(ops: list[Op]) -> tuple[bool, list[Op] | None]:
    """Wing & Gong over one key's operations; (True, an order) or (False, None)."""
    events = []
    for i, op in enumerate(ops):
        end = INFINITY if op.end is None else op.end
        if end < op.start:
            raise ValueError(f"{op} completed before it was invoked")
        events.append((op.start, 0, i, True))
        events.append((end, 1, i, False))  # (calls first at a tie: overlapping)
    events.sort()
    head = _Entry(None, -1, False)
    prev, calls = head, {}
    for _t, _k, i, is_call in events:
        e = _Entry(ops[i], i, is_call)
        if is_call:
            calls[i] = e
        else:
            calls[i].match = e
        e.prev, prev.next = prev, e
        prev = e

    def lift(e: _Entry) -> None:  # take a call and its return out of the list
        e.prev.next = e.next
        if e.next is not None:
            e.next.prev = e.prev
        r = e.match
        r.prev.next = r.next
        if r.next is not None:
            r.next.prev = r.prev

    def unlift(e: _Entry) -> None:
        r = e.match
        r.prev.next = r
        if r.next is not None:
            r.next.prev = r
        e.prev.next = e
        if e.next is not None:
            e.next.prev = e

    state, linearized, stack, seen = None, 0, [], set()
    entry = head.next
    while head.next is not None:
        if entry.is_call:
            ok, new_state = _step(state, entry.op)
            if ok:
                key = (linearized | (1 << entry.id), new_state)
                if key not in seen:
                    seen.add(key)
                    stack.append((entry, state))
                    state, linearized = new_state, key[0]
                    lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
        else:  # a return before its call could be placed: undo the last choice
            if not stack:
                return False, None
            entry, state = stack.pop()
            linearized &= ~(1 << entry.id)
            unlift(entry)
            entry = entry.next
    return True, [e.op for e, _s in stack]


@dataclass
class Result:
    ok: bool
    bad_key: str | None = None  # the first key whose history is not linearizable
    ops: int = 0
    keys: int = 0

    def __bool__(self) -> bool:
        return self.ok


def check(history: Iterable[Op]) -> Result:
    """Is ``history`` linearizable for a key-value store? Checked key by key."""
    by_key: dict[str, list[Op]] = {}
    n = 0
    for op in history:
        by_key.setdefault(op.key, []).append(op)
        n += 1
    for key in sorted(by_key):
        ok, _order = _linearizable_key(by_key[key])
        if not ok:
            return Result(False, key, n, len(by_key))
    return Result(True, None, n, len(by_key))
