"""When a leader appended its entries, roughly: so that a follower's lag can be said in time,
as the age of the oldest entry it lacks (``dledger_peer_lag_seconds``, ``lag_ms`` in
``peer watermarks``).

Appends within ``RESOLUTION_MS`` of the last record share it (the record keeps its first
time, so an age is overstated by at most that much), and at most ``CAP`` records are kept
(with 10 ms records, 11 minutes of appends without a pause); an entry older than what is
kept is said to be as old as the oldest record: at least that old. Pure values, no clock:
times are the core's ``now`` in milliseconds.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left

RESOLUTION_MS = 10
CAP = 1 << 16


class AppendTimes:
    def __init__(self, first_index: int, now: int) -> None:
        """A leadership that began at ``now`` whose first own entry is ``first_index``:
        entries before it are older than ``now``."""
        self.first_index, self.began = first_index, now
        self._idx = array("q")  # the last index each record covers, ascending
        self._ms = array("q")  # when the record began
        self._start = 0  # records before it were dropped (CAP)

    def record(self, last_index: int, now: int) -> None:
        """Entries up to ``last_index`` were appended at ``now``."""
        if len(self._idx) > self._start and now - self._ms[-1] < RESOLUTION_MS:
            self._idx[-1] = last_index
            return
        self._idx.append(last_index)
        self._ms.append(now)
        if len(self._idx) - self._start > CAP:
            self._start += 1
            if self._start >= CAP:  # (compact: drop what is no longer kept)
                del self._idx[:self._start]
                del self._ms[:self._start]
                self._start = 0

    def age_ms(self, index: int, now: int) -> int:
        """How long ago entry ``index`` was appended (at least; 0 for one not recorded yet)."""
        if index < self.first_index:
            return now - self.began
        k = bisect_left(self._idx, index, self._start)
        if k >= len(self._idx):
            return 0
        return now - self._ms[k]
