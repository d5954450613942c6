"""Elections and leadership transfer: a part of RaftCore (core.py), as a base class, so the
simulator drives one object. What core.py's docstring says of votes holds here: pre-vote
first, a vote only for a log at least as up to date, once per term, never while a live
leader is known but to a member taking over; Java DLedger members asked in their own way
(they have no pre-vote).

A leadership transfer: the leader stops taking appends, waits until the target has every
entry, then asks it to take over (LeadershipTransferRequest ``take``); the target starts a
real election at once, which its peers grant although a leader is alive.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from store.errors import StoreError

from .member import Role
from .rpc import Code, LeadershipTransferRequest, LeadershipTransferResponse, VoteRequest, VoteResponse, VoteResult

PREVOTE_JAVA_WAIT_MS = 100  # how long a pre-vote waits for dledgerctl members before asking Java ones
TAKE_WAIT_MS = 1000  # DLedgerConfig.leadershipTransferWaitTimeout: a transferee catching up first
VOTE_AGAIN_MS = 20  # a Java voter that answered REJECT_TERM_NOT_READY is asked again after this


@dataclass
class Round:
    """An election round (a pre-vote or a vote) under way."""

    pre: bool
    term: int
    deadline: int
    take_leadership: bool = False
    accepts: set = field(default_factory=set)
    rejects: set = field(default_factory=set)
    # Java DLedger voters answer a vote for a term above theirs REJECT_TERM_NOT_READY and
    # move to that term: asked again a moment later, they vote (peer -> when to ask again)
    again: dict = field(default_factory=dict)
    request: object = None
    # a pre-vote asks Java members (which take it for a vote, and leave their leader for its
    # term) only after no dledgerctl member has said a leader is alive: when to ask them
    java_at: int | None = None


@dataclass
class Transfer:
    """A leadership transfer under way: to whom, until when, and whether it was asked to take over."""

    target: str
    deadline: int
    asked: bool = False


class Elections:
    """Votes, rounds and transfers (a base of RaftCore: its member, cfg, store, members and
    the round and transfer under way)."""

    def _election_timeout(self) -> int:
        c = self.cfg
        return c.leader_lost_ms + self.rng.randint(c.min_vote_interval_ms, c.max_vote_interval_ms)

    def _vote_round_timeout(self) -> int:
        c = self.cfg
        return c.heartbeat_interval_ms + self.rng.randint(c.min_vote_interval_ms, c.max_vote_interval_ms)

    def _tick_candidate(self, now: int) -> None:
        r = self.round
        if not self._is_voter():  # removed (or made a learner) while standing
            self._become_follower(now, self.member.term, None)
            return
        if r is None or now >= r.deadline:
            self._start_round(now, pre=True)
            return
        for p, at in list(r.again.items()):
            if now >= at:
                del r.again[p]
                self._send(p, r.request)
        self._ask_java(now)

    def _lease_promised(self, now: int) -> bool:
        """Is this member within leader-lost of its start while keeping the read-lease promise
        (NodeConfig.read_lease)? Then it votes for nobody, itself included, but a member taking
        over from its leader."""
        return self.cfg.read_lease and now - self.started_at < self.cfg.leader_lost_ms

    def _start_round(self, now: int, *, pre: bool, take_leadership: bool = False) -> None:
        m, c = self.member, self.cfg
        if not take_leadership and self._lease_promised(now):
            self.election_at = self.started_at + c.leader_lost_ms
            return
        term = m.term + 1
        if not pre and not self._persist_term(term, c.self_id):
            self._become_follower(now, m.term, None)  # no election it cannot remember
            return
        m.role, m.leader_id = Role.CANDIDATE, None
        req = VoteRequest(c.group, c.self_id, term, self.store.end_index, self.store.end_term, pre, take_leadership)
        self.round = r = Round(pre, term, now + self._vote_round_timeout(), take_leadership, {c.self_id},
                                request=req)
        voters = self._voters_but_me()
        first = [p for p in voters if not (pre and p in self.java_peers)]
        for p in first:
            self._send(p, req)
        if len(first) < len(voters):
            r.java_at = now + PREVOTE_JAVA_WAIT_MS if first else now
            self._ask_java(now)
        self._count_round(now)

    def _ask_java(self, now: int) -> None:
        """Send the pre-vote to the Java members once it is time (Round.java_at)."""
        r = self.round
        if r is not None and r.java_at is not None and now >= r.java_at:
            r.java_at = None
            for p in self._voters_but_me():
                if p in self.java_peers:
                    self._send(p, r.request)

    def _count_round(self, now: int) -> None:
        r = self.round
        members = self.members
        if r is None or sum(1 for p in r.accepts if p in members.voters) < members.quorum:
            return
        if r.pre:
            self._start_round(now, pre=False, take_leadership=r.take_leadership)
        else:
            self._become_leader(now)

    def _leader_alive(self, now: int) -> bool:
        if self.member.role == Role.LEADER:
            return True
        # A Java follower takes its leader for lost once no heartbeat came for the leader-lost
        # interval, pushes or not (DLedgerLeaderElector): of a Java leader, this node judges
        # alike, or it would refuse the vote of the follower that saw the leader die first
        # (and DLedger waits a whole leader-lost interval again after such a refusal).
        leader = self.member.leader_id
        contact = self.last_leader_heartbeat if leader in self.java_peers else self.last_leader_contact
        return leader is not None and contact is not None and now - contact < self.cfg.leader_lost_ms

    def _on_vote(self, req: VoteRequest, now: int) -> VoteResponse:
        m, s = self.member, self.store
        if req.leader_id not in self.members.voters:  # a learner, or a member removed: it cannot lead
            return VoteResponse(m.term, VoteResult.REJECT_UNKNOWN_LEADER)
        if req.term < m.term or (req.pre_vote and req.term <= m.term and m.voted_for not in (None, req.leader_id)):
            return VoteResponse(m.term, VoteResult.REJECT_EXPIRED_VOTE_TERM)
        # (the member we asked to take over is let in: a Java one does not say it is taking over)
        taking = req.take_leadership or (self.transfer is not None and self.transfer.asked
                                         and self.transfer.target == req.leader_id)
        if not taking and self._leader_alive(now) and m.leader_id != req.leader_id:
            return VoteResponse(m.term, VoteResult.REJECT_ALREADY_HAS_LEADER)
        if not taking and self._lease_promised(now):  # (it may have answered a leader just before it started)
            return VoteResponse(m.term, VoteResult.REJECT_ALREADY_HAS_LEADER)
        # (an empty log's last term is -1 as DLedger says it; the store says 0)
        end_term = s.end_term if s.end_index >= 0 else -1
        if req.ledger_end_term < end_term:
            rejection = VoteResult.REJECT_EXPIRED_LEDGER_TERM
        elif req.ledger_end_term == end_term and req.ledger_end_index < s.end_index:
            rejection = VoteResult.REJECT_SMALL_LEDGER_END_INDEX
        else:
            rejection = None
        if req.pre_vote:
            if rejection is not None:
                self._refused_behind(req.leader_id, now)
            return VoteResponse(m.term, rejection or VoteResult.ACCEPT)
        if req.term > m.term and not self._become_follower(now, req.term, None):
            return VoteResponse(m.term, VoteResult.REJECT_TERM_NOT_READY, self._disk_code())
        if rejection is not None:
            self._refused_behind(req.leader_id, now)
            return VoteResponse(m.term, rejection)
        if m.voted_for not in (None, req.leader_id):
            return VoteResponse(m.term, VoteResult.REJECT_ALREADY_VOTED)
        try:
            m.vote(self.terms, req.leader_id)
        except StoreError as exc:
            self.term_error = exc
            self._note(f"cannot vote for {req.leader_id} in term {m.term}, the vote is not on disk: {exc}")
            return VoteResponse(m.term, VoteResult.REJECT_TERM_NOT_READY, self._disk_code())
        self.election_at = now + self._election_timeout()
        return VoteResponse(m.term, VoteResult.ACCEPT)

    def _on_vote_response(self, peer: str, req: VoteRequest, resp: VoteResponse, now: int) -> None:
        r = self.round
        if resp.term > self.member.term and resp.vote_result != VoteResult.ACCEPT:
            self._become_follower(now, resp.term, None)
            return
        if r is None or r.term != req.term or r.pre != req.pre_vote or self.member.role != Role.CANDIDATE:
            return  # an answer to an earlier round
        if resp.vote_result == VoteResult.REJECT_TERM_NOT_READY and resp.code == Code.SUCCESS:
            # A Java voter whose term is below ours: it checked our log first (it answers so
            # only to a log at least as new as its own) and is moving to our term now. As a
            # pre-vote that is a yes (Java has no pre-vote: it took ours for a vote); as a
            # vote, ask it again in a moment.
            if r.pre:
                r.accepts.add(peer)
                self._count_round(now)
            else:
                r.again[peer] = now + VOTE_AGAIN_MS
            return
        (r.accepts if resp.vote_result == VoteResult.ACCEPT else r.rejects).add(peer)
        if r.java_at is not None:
            if resp.vote_result == VoteResult.REJECT_ALREADY_HAS_LEADER:
                r.java_at = None  # a live leader: leave the Java members with it
            elif all(p in r.accepts or p in r.rejects for p in self._voters_but_me() if p not in self.java_peers):
                r.java_at = now
                self._ask_java(now)
        self._count_round(now)

    def _on_transfer(self, req: LeadershipTransferRequest, now: int) -> LeadershipTransferResponse:
        m, c = self.member, self.cfg
        if req.take:
            # from our leader: we are caught up, take over now
            if c.never_lead:
                return LeadershipTransferResponse(m.term, Code.TAKE_LEADERSHIP_FAILED, f"{c.self_id} never leads")
            if req.term != m.term or m.leader_id != req.leader_id:
                return LeadershipTransferResponse(m.term, Code.INCONSISTENT_LEADER, "not from the current leader")
            if req.end_index > self.store.end_index:
                # (a Java leader asks while we may still lack up to 1000 of its entries: wait
                # for them, as DLedger's transferee does, or its voters would refuse us)
                self.pending_take = (req.leader_id, req.term, req.end_index, now + TAKE_WAIT_MS)
                self._note(f"taking leadership from {req.leader_id} once caught up to its entry {req.end_index}")
                return LeadershipTransferResponse(m.term)
            self._note(f"taking leadership from {req.leader_id}")
            self._start_round(now, pre=False, take_leadership=True)
            return LeadershipTransferResponse(m.term)
        if m.role != Role.LEADER:
            return LeadershipTransferResponse(m.term, Code.NOT_LEADER, f"leader is {m.leader_id or 'unknown'}")
        if c.never_lead and self.transfer is not None:
            return LeadershipTransferResponse(m.term, Code.LEADER_TRANSFERRING,
                                              f"{c.self_id} never leads: handing leadership to {self.transfer.target}")
        if req.transferee not in self.members.voters or req.transferee == c.self_id:
            return LeadershipTransferResponse(m.term, Code.UNKNOWN_MEMBER, f"cannot hand over to {req.transferee!r}")
        if not self._peer_alive(req.transferee, now):
            return LeadershipTransferResponse(m.term, Code.TAKE_LEADERSHIP_FAILED,
                                              f"{req.transferee} has not answered for {c.leader_lost_ms} ms")
        if self.transfer is not None:
            return LeadershipTransferResponse(m.term, Code.LEADER_TRANSFERRING,
                                              f"already handing leadership to {self.transfer.target}")
        self.start_transfer(req.transferee, now)
        return LeadershipTransferResponse(m.term)

    def start_transfer(self, target: str, now: int) -> None:
        self.transfer = Transfer(target, now + self.cfg.max_wait_ack_ms)
        self._note(f"handing leadership to {target}: new appends wait until it has caught up")
        self._progress_transfer(now)

    def _progress_transfer(self, now: int) -> None:
        t = self.transfer
        if t is None and self.cfg.never_lead:
            target = self._handover_target(now)
            if target is not None:
                self.start_transfer(target, now)
            return
        if t is None:
            p = self.cfg.preferred_leader
            d = self.dispatchers.get(p) if p else None
            if d is not None and d.watermark == self.store.end_index and not self.pending:
                self.start_transfer(p, now)  # the preferred leader is caught up: hand over
            return
        if now >= t.deadline:
            self._note(f"leadership transfer to {t.target} timed out; staying leader")
            self.transfer = None
            return
        d = self.dispatchers[t.target]
        if not t.asked and d.watermark == self.store.end_index:
            t.asked = True
            self._void_lease()  # (its voters will grant it although this leader is alive)
            self._send(t.target, LeadershipTransferRequest(self.cfg.group, self.cfg.self_id, t.target,
                                                           self.member.term, take=True, end_index=self.store.end_index))

    # -- a member that never leads (NodeConfig.never_lead) ----------------------------------
    def _refused_behind(self, voter: str, now: int) -> None:
        """A never-lead member refused ``voter`` a vote for a log shorter than its own: without
        this vote it cannot win, so unless a leader is alive this member stands soon (a random
        vote interval, not a whole election timeout) to bring it up to date."""
        if not self.cfg.never_lead:
            return
        self.behind_voter = (voter, now)
        if self.member.role == Role.FOLLOWER and not self._leader_alive(now):
            c = self.cfg
            self.election_at = min(self.election_at, now + self.rng.randint(c.min_vote_interval_ms,
                                                                            c.max_vote_interval_ms))

    def _behind_voter(self, now: int) -> str | None:
        """The voter whose request for votes this member refused for a log shorter than its
        own, within the last two leader-lost intervals: with this member's vote out of its
        reach, the group may have no leader unless this member brings it up to date."""
        if self.behind_voter is None:
            return None
        voter, at = self.behind_voter
        if now - at > 2 * self.cfg.leader_lost_ms or voter not in self.members.voters:
            self.behind_voter = None
            return None
        return voter

    def _handover_target(self, now: int) -> str | None:
        """The voter a never-lead leader hands leadership to: of those that answer, the one
        nearest the end of the log (the transfer asks it once it has everything)."""
        lost = self.cfg.leader_lost_ms  # (alive: it answered a heartbeat or a push lately)
        alive = [(d.watermark, p) for p, d in self.dispatchers.items() if p in self.members.voters
                 and p != self.cfg.self_id and p in self.answered_at and now - self.answered_at[p] < lost]
        return max(alive)[1] if alive else None
