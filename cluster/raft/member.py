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

from store.errors import StoreError, is_disk_full

from .rpc import Code


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


class TermKeeper:
    """Moves ``member`` to a new term and records its votes through the term store
    (``terms``), on disk first; when the disk refuses, says so (``outbox``) and remembers why
    (``error``), so that what depends on it is answered with :meth:`disk_code`."""

    def __init__(self, member: MemberState, terms, outbox) -> None:
        self.member, self.terms, self.outbox = member, terms, outbox
        self.error: StoreError | None = None  # why the last term or vote could not be persisted

    def move_to(self, term: int, voted_for: str | None = None) -> bool:
        """Move to ``term``, on disk first; False (with a note) when the disk refuses: the
        node stays in its term, where it can neither vote nor lead nor follow in the new one."""
        try:
            self.member.advance_term(self.terms, term, voted_for)
        except StoreError as exc:
            self.refused(exc, f"cannot move to term {term}, it is not on disk: {exc}")
            return False
        return True

    def vote(self, candidate: str) -> bool:
        """Vote for ``candidate`` in this term, on disk first; False (with a note) when refused."""
        m = self.member
        try:
            m.vote(self.terms, candidate)
        except StoreError as exc:
            self.refused(exc, f"cannot vote for {candidate} in term {m.term}, the vote is not on disk: {exc}")
            return False
        return True

    def refused(self, exc: StoreError, text: str) -> None:
        """The disk refused a term or a vote (``exc``): said, and answered with disk_code()."""
        self.error = exc
        self.outbox.note(text)

    def disk_code(self) -> Code:
        return Code.DISK_FULL if is_disk_full(self.error) else Code.DISK_ERROR
