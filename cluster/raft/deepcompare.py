"""A follower that does not converge, as its dispatcher (dispatcher.py) handles it: the
DEEP_COMPARE state. A part the Dispatcher holds (``dispatcher.deep``), with the state of its
own: how often pushes were refused after one match, and the byte-for-byte search. No I/O.

A dledgerctl follower that refuses, ``STUCK_AFTER`` times running, the push that follows a
compare matching at the same index holds an entry it counts as committed that is not the
leader's (only a forged push or commit can put one there). The dispatcher then compares
the entries from there by their bytes (PROBE: crc32 of each whole entry, divergence.py),
cuts the follower where they first differ (REPAIR, committed entries included: the leader
of the term holds every committed entry) and fills it again from COMPARE, saying so in
one line. Java followers (which answer no PROBE) are left as they are.
"""

from __future__ import annotations

from .divergence import DivergenceSearch
from .dispatchstate import DispatchState
from .rpc import Code, ProbeRequest, RepairRequest

# Refusals of the push after a compare that matched at the same index before a follower is
# compared byte for byte (DEEP_COMPARE): one can be a follower that restarted meanwhile.
STUCK_AFTER = 2


class DeepCompare:
    """The DEEP_COMPARE state of ``dispatcher`` (dispatcher.py Dispatcher)."""

    def __init__(self, dispatcher) -> None:
        self.d = dispatcher
        self.refused_at, self.refusals = -2, 0  # the match index pushes after it were refused at, how often
        self.search: DivergenceSearch | None = None  # the byte-for-byte search

    def moved_on(self, index: int) -> None:
        """The follower acknowledged up to ``index``."""
        if index > self.refused_at:
            self.refused_at, self.refusals = -2, 0

    def refused_after(self, matched: int) -> None:
        """The push after a match at ``matched`` was refused as inconsistent."""
        d = self.d
        if matched != self.refused_at:
            self.refused_at, self.refusals = matched, 0
        self.refusals += 1
        if self.refusals >= STUCK_AFTER and not d.java:
            self.refusals = 0
            d.restart(DispatchState.DEEP_COMPARE, matched, d.last_error)
            self.search = DivergenceSearch(d.store, d.peer, deep=True, start=matched + 1)
            d.say(f"replication to {d.peer} does not converge after {matched} ({d.last_error}): "
                  f"comparing its entries with ours byte for byte")

    def next_request(self):
        """The next PROBE or REPAIR to send; None when no entry differs after all (it caught
        up meanwhile): the dispatcher is back at COMPARE then."""
        d, search = self.d, self.search
        probe = search.next_probe()
        if probe is not None:
            return ProbeRequest(d.group, d.self_id, d.term, *probe)
        r = search.result
        if r.truncate_from is None:  # all equal after all: go on
            d.compare_from(r.match_index, f"no entry of {d.peer} differs from ours after {search.start - 1}")
            return None
        return RepairRequest(d.group, d.self_id, d.term, r.truncate_from)

    def answered(self, req, resp, now: int) -> None:
        d = self.d
        if resp.code != Code.SUCCESS:
            why = f"{type(req).__name__[:-7].lower()}: {resp.code.name} {resp.remark}".strip()
            d.deep_refused(why, now, self.search.start - 1)
            return
        if type(req) is ProbeRequest:
            self.search.feed(resp)
            return
        r = self.search.result
        where = (f"its entry {r.first_diff} differs from ours (term {r.follower_term}, crc32 {r.follower_digest}; "
                 f"ours term {r.leader_term}, crc32 {r.leader_digest})" if r.first_diff is not None
                 else f"it holds entries past our end {r.leader_end}")
        d.say(f"cut {d.peer} back from {req.from_index}, committed entries included "
              f"({resp.dropped} dropped): {where}; filling it again from {req.from_index}")
        d.set_note(f"cut back from {req.from_index}: {where}")
        d.compare_from(req.from_index - 1, "filling it again after a byte-for-byte compare")
