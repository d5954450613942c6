"""Member state: role, term, vote and leader, with the term and vote kept by a term store
(cluster/node/terms.py on disk; MemoryTermStore below in simulations).

Rule: the term and the vote are written (and fsynced, by the term store) *before* anything
that depends on them leaves the node -- a vote granted, a request sent in a new term. A
node that crashes and restarts therefore never votes twice in one term and never goes back
to an older term. Role and leader are volatile: a restarted node is a follower that knows
no leader.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Role(enum.StrEnum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"


class MemoryTermStore:
    """For simulations: what was saved survives a simulated crash of the node using it."""

    def __init__(self, term: int = 0, voted_for: str | None = None) -> None:
        self.term, self.voted_for = term, voted_for
        self.saves = 0

    def load(self) -> tuple[int, str | None]:
        return self.term, self.voted_for

    def save(self, term: int, voted_for: str | None) -> None:
        self.term, self.voted_for = term, voted_for
        self.saves += 1


@dataclass
class MemberState:
    self_id: str
    term: int = 0
    voted_for: str | None = None
    role: Role = Role.FOLLOWER
    leader_id: str | None = None

    @classmethod
    def load(cls, self_id: str, terms) -> "MemberState":
        term, vote = terms.load()
        return cls(self_id, term, vote)

    def advance_term(self, terms, term: int, voted_for: str | None = None) -> None:
        """Move to a higher ``term`` (persisted first); forgets the leader."""
        if term <= self.term:
            raise ValueError(f"term {term} is not above the current term {self.term}")
        terms.save(term, voted_for)
        self.term, self.voted_for, self.leader_id = term, voted_for, None

    def vote(self, terms, candidate: str) -> None:
        """Record a vote for ``candidate`` in the current term (persisted first)."""
        if self.voted_for not in (None, candidate):
            raise ValueError(f"already voted for {self.voted_for} in term {self.term}")
        if self.voted_for != candidate:
            terms.save(self.term, candidate)
            self.voted_for = candidate
