"""Leader-side quorum: per-term watermarks of every peer and the commit index they allow.

Rules this module keeps (no I/O, no clock):

- Watermarks belong to one leader term. A report from another term is ignored, so an ack
  that was in flight across a term change can never count for the new term.
- Within the term a watermark only rises, except through :meth:`lower`, which the leader
  calls when a follower proves it lost entries (it restarted from an older disk state and
  answered a compare with a shorter log). A lowered watermark is never counted again until
  the follower re-acknowledges.
- The commit index is the highest index a majority holds (the leader's own log counts as
  one, and only once its bytes meet the flush policy), and it only moves to an index of
  the current term (``first_index_of_term``): entries of earlier terms commit with the first
  entry of this term, which is why a new leader appends a no-op. It never goes back.
- Only voters count (cluster/raft/membership.py): :meth:`set_voters` follows a membership change
  the moment its entry is appended; a member that is no voter (a learner, or a leader that
  removed itself) is acknowledged but not counted.
"""

from __future__ import annotations


class Quorum:
    def __init__(self, peers: list[str], self_id: str, term: int, first_index_of_term: int,
                 committed: int = -1) -> None:
        if not peers:
            raise ValueError("no voters")
        self.peers = list(peers)  # the voters
        self.self_id = self_id
        self.term = term
        self.first_index_of_term = first_index_of_term  # the new leader's no-op
        self.watermarks: dict[str, int] = {p: -1 for p in self.peers}
        self.seen: dict[str, int] = {}  # every member's watermark, voter or not
        self.committed = committed

    @property
    def size(self) -> int:
        return len(self.peers) // 2 + 1

    def set_voters(self, voters: list[str]) -> None:
        """The voters changed: a new one counts with what it acknowledged so far."""
        self.peers = list(voters)
        self.watermarks = {p: self.seen.get(p, -1) for p in self.peers}

    def ack(self, peer: str, term: int, index: int) -> bool:
        """``peer`` holds the leader's log up to ``index`` (reported in ``term``).
        Returns True when the watermark rose."""
        if term != self.term:
            return False
        if index > self.seen.get(peer, -1):
            self.seen[peer] = index
        if peer not in self.watermarks:
            return False
        if index > self.watermarks[peer]:
            self.watermarks[peer] = index
            return True
        return False

    def lower(self, peer: str, index: int) -> None:
        """``peer`` holds at most ``index`` (it lost entries); its watermark drops to that."""
        if peer in self.watermarks and index < self.watermarks[peer]:
            self.watermarks[peer] = index
        if index < self.seen.get(peer, -1):
            self.seen[peer] = index

    def quorum_index(self) -> int:
        """The highest index that at least a majority of peers hold."""
        marks = sorted(self.watermarks.values(), reverse=True)
        return marks[self.size - 1]

    def advance(self) -> int | None:
        """Move the commit index as far as the watermarks allow; returns the new commit
        index, or None when it did not move."""
        q = self.quorum_index()
        if q >= self.first_index_of_term and q > self.committed:
            self.committed = q
            return q
        return None

    def lag(self, peer: str, leader_end: int) -> int:
        return max(0, leader_end - self.watermarks.get(peer, -1))
