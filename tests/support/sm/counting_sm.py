"""A state machine for the tests: it counts how often each entry was applied to its state.

Its state is every applied index with how many times it was applied (kept in snapshots like
any state), so a test reading it after restarts sees whether an entry reached the state
twice. ``query`` answers JSON: {"count": n, "twice": [indexes applied more than once],
"first": i, "last": j}."""

from __future__ import annotations

import json


class Counting:
    def __init__(self) -> None:
        self.times: dict[int, int] = {}

    def apply(self, index: int, term: int, body: bytes) -> None:
        self.times[index] = self.times.get(index, 0) + 1

    def snapshot(self) -> bytes:
        return json.dumps(sorted(self.times.items())).encode()

    def restore(self, data: bytes) -> None:
        self.times = {int(i): int(n) for i, n in json.loads(data)}

    def query(self, request: bytes) -> bytes:
        idx = sorted(self.times)
        return json.dumps({"count": len(idx), "twice": [i for i in idx if self.times[i] > 1],
                           "first": idx[0] if idx else None, "last": idx[-1] if idx else None}).encode()
