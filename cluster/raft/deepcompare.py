"""A follower that does not converge, as its dispatcher (dispatcher.py) handles it: the
DEEP_COMPARE state. Part of the Dispatcher (a base class of it), kept apart because it is
a concern of its own. No I/O.

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
    """The DEEP_COMPARE state of a Dispatcher (which has the attributes used here)."""

    def _refused_after(self, matched: int) -> None:
        """The push after a match at ``matched`` was refused as inconsistent."""
        if matched != self.refused_at:
            self.refused_at, self.refusals = matched, 0
        self.refusals += 1
        if self.refusals >= STUCK_AFTER and not self.java:
            self.refusals = 0
            self._restart(DispatchState.DEEP_COMPARE, matched, self.last_error)
            self.search = DivergenceSearch(self.store, self.peer, deep=True, start=matched + 1)
            self.said.append(f"replication to {self.peer} does not converge after {matched} ({self.last_error}): "
                             f"comparing its entries with ours byte for byte")

    def _deep_compare(self, now: int, commit_index: int) -> list:
        if self.outstanding is not None:
            if now - self.outstanding_at < self.config.max_push_timeout_ms:
                return []
            self.outstanding = None  # unanswered: ask again
        search = self.search
        probe = search.next_probe()
        if probe is not None:
            req = ProbeRequest(self.group, self.self_id, self.term, *probe)
        else:
            r = search.result
            if r.truncate_from is None:  # all equal after all (it caught up meanwhile): go on
                self.compare_from(r.match_index, f"no entry of {self.peer} differs from ours after {search.start - 1}")
                return self.poll(now, commit_index)
            req = RepairRequest(self.group, self.self_id, self.term, r.truncate_from)
        self.outstanding, self.outstanding_at, self.last_send_at = req, now, now
        return [req]

    def _deep_answered(self, req, resp, now: int) -> None:
        if resp.code != Code.SUCCESS:
            self.last_error = f"{type(req).__name__[:-7].lower()}: {resp.code.name} {resp.remark}".strip()
            self.retry_at = now + min(self.config.heartbeat_interval_ms, 100)
            self.compare_from(self.search.start - 1, self.last_error)
            return
        if type(req) is ProbeRequest:
            self.search.feed(resp)
            return
        r = self.search.result
        where = (f"its entry {r.first_diff} differs from ours (term {r.follower_term}, crc32 {r.follower_digest}; "
                 f"ours term {r.leader_term}, crc32 {r.leader_digest})" if r.first_diff is not None
                 else f"it holds entries past our end {r.leader_end}")
        self.said.append(f"cut {self.peer} back from {req.from_index}, committed entries included "
                         f"({resp.dropped} dropped): {where}; filling it again from {req.from_index}")
        self.note = f"cut back from {req.from_index}: {where}"
        self.compare_from(req.from_index - 1, "filling it again after a byte-for-byte compare")
