"""Elections: a part of RaftCore (core.py) that lives as long as the node, with the state of
its own timers and rounds, made with what it uses (see :class:`Elections`). RaftCore runs
:meth:`Elections.tick_follower` or :meth:`Elections.tick_candidate` while the node is a follower or a candidate. What core.py's
docstring says of votes holds here: pre-vote first, a vote only for a log at least as up to
date, once per term, never while a live leader is known but to a member taking over; Java
DLedger members asked in their own way (they have no pre-vote).

The follower's side of a leadership transfer is here too: asked by its leader to take over
(LeadershipTransferRequest ``take``, leading.py has the leader's side), a member starts a
real election at once, which its peers grant although a leader is alive.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .member import MemberState, Role, TermKeeper
from .membership import Roster
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


class Elections:
    """The election timer, the round under way, and what this member knows of its leader's
    liveness. It reads the settings (``cfg``), the random source (``rng``), the member's
    state, the log's end (``log``) and the members (``roster``); it moves terms and records
    votes through ``terms``, sends and says through ``outbox``, and changes the role through
    the three calls it is given: ``follow(now, term, leader) -> bool`` (step down, False when
    the term could not be persisted), ``stand()`` (become a candidate) and ``lead(now)``."""

    def __init__(self, cfg, rng, member: MemberState, terms: TermKeeper, log, roster: Roster, outbox, now: int, *,
                 follow, stand, lead) -> None:
        c = self.cfg = cfg
        self.rng, self.member, self.terms, self.log, self.roster, self.outbox = rng, member, terms, log, roster, outbox
        self.follow, self.stand, self.lead = follow, stand, lead
        self.round: Round | None = None
        self.last_leader_contact: int | None = None
        self.last_leader_heartbeat: int | None = None  # (a Java leader is judged alive by these alone)
        self.pending_take: tuple | None = None  # a transfer to us waiting to catch up: leader, term, end, deadline
        self.behind_voter: tuple | None = None  # never-lead: (voter, when) it refused a vote for a shorter log
        self.started_at = now  # (a member keeping the lease promise votes for nobody for leader-lost after)
        # A node that has just started knows of no leader to wait for: it asks for a
        # pre-vote after one vote round, not after the whole leader-lost interval (which
        # can be long), and pre-vote keeps it from disturbing a leader that does exist.
        self.election_at = now + self.vote_round_timeout()
        if c.read_lease:  # (but one keeping the lease promise waits out leader-lost: lease_promised)
            self.election_at = max(self.election_at, now + c.leader_lost_ms)

    def election_timeout(self) -> int:
        c = self.cfg
        return c.leader_lost_ms + self.rng.randint(c.min_vote_interval_ms, c.max_vote_interval_ms)

    def vote_round_timeout(self) -> int:
        c = self.cfg
        return c.heartbeat_interval_ms + self.rng.randint(c.min_vote_interval_ms, c.max_vote_interval_ms)

    def restart_timer(self, now: int) -> None:
        """No election before a whole election timeout from now."""
        self.election_at = now + self.election_timeout()

    def heard_leader(self, now: int, heartbeat: bool) -> None:
        """The leader of this term was heard from (a heartbeat, or another request)."""
        self.last_leader_contact = now
        if heartbeat:
            self.last_leader_heartbeat = now
        self.restart_timer(now)

    def stand_down(self) -> None:
        """The node leads or follows now: no round is under way."""
        self.round = None

    # -- time, by role ----------------------------------------------------------------
    def tick_follower(self, now: int) -> None:
        m, say = self.member, self.outbox.note
        if self.pending_take is not None:
            leader, term, end, deadline = self.pending_take
            if m.term != term or m.leader_id != leader or now >= deadline:
                self.pending_take = None
                if now >= deadline:
                    say(f"not taking leadership from {leader}: not caught up to {end} within {TAKE_WAIT_MS} ms")
            elif self.log.end_index >= end:
                self.pending_take = None
                say(f"taking leadership from {leader}")
                self.start_round(now, pre=False, take_leadership=True)
                return
        if now >= self.election_at:
            if not self.roster.is_voter():  # a learner, or removed: it never stands for election
                self.restart_timer(now)
                return
            if self.cfg.never_lead:
                behind = self._behind_voter(now)
                if behind is None:  # the others elect among themselves
                    self.restart_timer(now)
                    return
                say(f"no leader heard for {self.cfg.leader_lost_ms} ms and {behind}'s log is behind this "
                    "one's: standing, to bring it up to date and hand leadership to it (this member never "
                    "leads)")
            else:
                say(f"no leader heard for {self.cfg.leader_lost_ms} ms; asking for a pre-vote")
            self.start_round(now, pre=True)

    def tick_candidate(self, now: int) -> None:
        r = self.round
        if not self.roster.is_voter():  # removed (or made a learner) while standing
            self.follow(now, self.member.term, None)
            return
        if r is None or now >= r.deadline:
            self.start_round(now, pre=True)
            return
        for p, at in list(r.again.items()):
            if now >= at:
                del r.again[p]
                self.outbox.send(p, r.request)
        self._ask_java(now)

    def lease_promised(self, now: int) -> bool:
        """Is this member within leader-lost of its start while keeping the read-lease promise
        (NodeConfig.read_lease)? Then it votes for nobody, itself included, but a member taking
        over from its leader."""
        c = self.cfg
        return c.read_lease and now - self.started_at < c.leader_lost_ms

    # -- standing ---------------------------------------------------------------------
    def start_round(self, now: int, *, pre: bool, take_leadership: bool = False) -> None:
        m, c, java = self.member, self.cfg, self.roster.java_peers
        if not take_leadership and self.lease_promised(now):
            self.election_at = self.started_at + c.leader_lost_ms
            return
        term = m.term + 1
        if not pre and not self.terms.move_to(term, c.self_id):
            self.follow(now, m.term, None)  # no election it cannot remember
            return
        self.stand()
        req = VoteRequest(c.group, c.self_id, term, self.log.end_index, self.log.end_term, pre, take_leadership)
        self.round = r = Round(pre, term, now + self.vote_round_timeout(), take_leadership, {c.self_id},
                               request=req)
        voters = self.roster.voters_but_me()
        first = [p for p in voters if not (pre and p in java)]
        for p in first:
            self.outbox.send(p, req)
        if len(first) < len(voters):
            r.java_at = now + PREVOTE_JAVA_WAIT_MS if first else now
            self._ask_java(now)
        self._count_round(now)

    def _ask_java(self, now: int) -> None:
        """Send the pre-vote to the Java members once it is time (Round.java_at)."""
        r, java = self.round, self.roster.java_peers
        if r is not None and r.java_at is not None and now >= r.java_at:
            r.java_at = None
            for p in self.roster.voters_but_me():
                if p in java:
                    self.outbox.send(p, r.request)

    def _count_round(self, now: int) -> None:
        r = self.round
        members = self.roster.current
        if r is None or sum(1 for p in r.accepts if p in members.voters) < members.quorum:
            return
        if r.pre:
            self.start_round(now, pre=False, take_leadership=r.take_leadership)
        else:
            self.lead(now)

    def on_vote_response(self, peer: str, req: VoteRequest, resp: VoteResponse, now: int) -> None:
        r = self.round
        if resp.term > self.member.term and resp.vote_result != VoteResult.ACCEPT:
            self.follow(now, resp.term, None)
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
            elif all(p in r.accepts or p in r.rejects for p in self.roster.voters_but_me()
                     if p not in self.roster.java_peers):
                r.java_at = now
                self._ask_java(now)
        self._count_round(now)

    # -- voting -----------------------------------------------------------------------
    def leader_alive(self, now: int) -> bool:
        m = self.member
        if m.role == Role.LEADER:
            return True
        # A Java follower takes its leader for lost once no heartbeat came for the leader-lost
        # interval, pushes or not (DLedgerLeaderElector): of a Java leader, this node judges
        # alike, or it would refuse the vote of the follower that saw the leader die first
        # (and DLedger waits a whole leader-lost interval again after such a refusal).
        leader = m.leader_id
        contact = self.last_leader_heartbeat if leader in self.roster.java_peers else self.last_leader_contact
        return leader is not None and contact is not None and now - contact < self.cfg.leader_lost_ms

    def on_vote(self, req: VoteRequest, now: int, transfer=None) -> VoteResponse:
        """A vote asked of this member; ``transfer``: the leadership transfer this member (as
        leader) has under way, if any."""
        m, s = self.member, self.log
        if req.leader_id not in self.roster.current.voters:  # a learner, or a member removed: it cannot lead
            return VoteResponse(m.term, VoteResult.REJECT_UNKNOWN_LEADER)
        if req.term < m.term or (req.pre_vote and req.term <= m.term and m.voted_for not in (None, req.leader_id)):
            return VoteResponse(m.term, VoteResult.REJECT_EXPIRED_VOTE_TERM)
        # (the member we asked to take over is let in: a Java one does not say it is taking over)
        taking = req.take_leadership or (transfer is not None and transfer.asked and transfer.target == req.leader_id)
        if not taking and self.leader_alive(now) and m.leader_id != req.leader_id:
            return VoteResponse(m.term, VoteResult.REJECT_ALREADY_HAS_LEADER)
        if not taking and self.lease_promised(now):  # (it may have answered a leader just before it started)
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
        if req.term > m.term and not self.follow(now, req.term, None):
            return VoteResponse(m.term, VoteResult.REJECT_TERM_NOT_READY, self.terms.disk_code())
        if rejection is not None:
            self._refused_behind(req.leader_id, now)
            return VoteResponse(m.term, rejection)
        if m.voted_for not in (None, req.leader_id):
            return VoteResponse(m.term, VoteResult.REJECT_ALREADY_VOTED)
        if not self.terms.vote(req.leader_id):
            return VoteResponse(m.term, VoteResult.REJECT_TERM_NOT_READY, self.terms.disk_code())
        self.restart_timer(now)
        return VoteResponse(m.term, VoteResult.ACCEPT)

    def on_take(self, req: LeadershipTransferRequest, now: int) -> LeadershipTransferResponse:
        """From our leader: we are caught up, take over now."""
        m, c = self.member, self.cfg
        if c.never_lead:
            return LeadershipTransferResponse(m.term, Code.TAKE_LEADERSHIP_FAILED, f"{c.self_id} never leads")
        if req.term != m.term or m.leader_id != req.leader_id or m.role == Role.LEADER:
            return LeadershipTransferResponse(m.term, Code.INCONSISTENT_LEADER, "not from the current leader")
        if req.end_index > self.log.end_index:
            # (a Java leader asks while we may still lack up to 1000 of its entries: wait
            # for them, as DLedger's transferee does, or its voters would refuse us)
            self.pending_take = (req.leader_id, req.term, req.end_index, now + TAKE_WAIT_MS)
            self.outbox.note(f"taking leadership from {req.leader_id} once caught up to its entry {req.end_index}")
            return LeadershipTransferResponse(m.term)
        self.outbox.note(f"taking leadership from {req.leader_id}")
        self.start_round(now, pre=False, take_leadership=True)
        return LeadershipTransferResponse(m.term)

    # -- a member that never leads (NodeConfig.never_lead) ----------------------------------
    def _refused_behind(self, voter: str, now: int) -> None:
        """A never-lead member refused ``voter`` a vote for a log shorter than its own: without
        this vote it cannot win, so unless a leader is alive this member stands soon (a random
        vote interval, not a whole election timeout) to bring it up to date."""
        c = self.cfg
        if not c.never_lead:
            return
        self.behind_voter = (voter, now)
        if self.member.role == Role.FOLLOWER and not self.leader_alive(now):
            self.election_at = min(self.election_at, now + self.rng.randint(c.min_vote_interval_ms,
                                                                            c.max_vote_interval_ms))

    def _behind_voter(self, now: int) -> str | None:
        """The voter whose request for votes this member refused for a log shorter than its
        own, within the last two leader-lost intervals: with this member's vote out of its
        reach, the group may have no leader unless this member brings it up to date."""
        if self.behind_voter is None:
            return None
        voter, at = self.behind_voter
        if now - at > 2 * self.cfg.leader_lost_ms or voter not in self.roster.current.voters:
            self.behind_voter = None
            return None
        return voter
