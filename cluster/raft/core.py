"""The deciding logic of one node: election, replication, commit. No sockets, no clock.

Everything comes in through five calls, each given the current time in milliseconds:
``tick(now)``, ``handle(request, now) -> response`` (a request from a peer),
``on_response(peer, request, response, now)`` and ``on_failure(peer, request, why, now)``
(the outcome of a request this node sent), and ``propose(bodies, now)`` (a client append).
What the node must do comes out of ``take()``: requests to send, finished proposals and
notes for the log. Randomness comes from the ``rng`` given at construction. So a test
can run whole clusters deterministically, and the asyncio node only moves bytes.

Rules kept here:

- Term and vote reach the disk (``terms.save``, fsynced) before any message that depends
  on them is produced. A node never goes back to a lower term. When the disk refuses
  them (full), the node stays in its term: it grants no vote, starts no election and
  accepts nothing from a leader of the new term until it can write it.
- Pre-vote: a node whose election timer fires first asks, without changing its term,
  whether peers would vote for it; only a majority of yeses starts a real election. A
  node cut off from the cluster therefore never inflates terms and disrupts the leader
  when it returns.
- A vote (or pre-vote) is granted only to a candidate whose log is at least as up to
  date (last term, then last index), at most once per term, and never while a live
  leader is known (heard from within ``leader_lost_ms``), unless the candidate is taking
  over through a leadership transfer.
- A leader appends a no-op entry (magic 2) in its term before anything else, except while
  the group has Java DLedger members (0.2.7 cannot read magic 2 back); entries commit only
  through an entry of the current term (quorum.py).
- Java DLedger members have no pre-vote and answer a vote (or a heartbeat) for a term above
  theirs REJECT_TERM_NOT_READY (TERM_NOT_READY) while they move to it, having checked the
  candidate's log first: that answer passes a pre-vote, and the vote or heartbeat is sent
  again ``VOTE_AGAIN_MS`` later. Java members take a pre-vote for a vote and leave their
  leader for its term, so a pre-vote asks them only once no dledgerctl member has said a
  leader is alive (after ``PREVOTE_JAVA_WAIT_MS`` at most; at once when there is none):
  such a group is disturbed no more than a group of Java members alone.
- A leader that has not heard from a majority within ``leader_lost_ms`` steps down
  ("check quorum"), so a partitioned leader stops accepting appends it cannot commit.
- Role behaviour lives in ``_tick_<role>`` functions picked by role, not in scattered ifs.

Concerns of their own live beside it, as parts of the same object (base classes, so the
simulator drives one RaftCore): membership changes in cluster/raft/reconfig.py, the log's moving
beginning (retention, deletion after snapshots) in cluster/raft/compaction.py; the leader's
per-follower replication in cluster/raft/dispatcher.py, the follower's in cluster/raft/follower.py
and cluster/raft/install.py.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

from store.errors import StoreError, StoreIOError, is_disk_full
from store.format import MAGIC_NOOP, MAGIC_NORMAL

from . import install
from .appendtimes import AppendTimes
from .compaction import Compaction
from .config import NodeConfig
from .dispatcher import Dispatcher, DispatchState
from .follower import FollowerLog
from .member import MemberState, Role
from .membership import Configs, initial
from .proposal import Note, Proposal, Ready
from .quorum import Quorum
from .reconfig import Reconfiguration
from .retention import Retention
from .rpc import (
    Code,
    HeartBeatRequest,
    HeartBeatResponse,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    ProbeRequest,
    ProbeResponse,
    PushRequest,
    PushResponse,
    PushType,
    RepairRequest,
    RepairResponse,
    Send,
    VoteRequest,
    VoteResponse,
    VoteResult,
)

PREVOTE_JAVA_WAIT_MS = 100  # how long a pre-vote waits for dledgerctl members before asking Java ones
TAKE_WAIT_MS = 1000  # DLedgerConfig.leadershipTransferWaitTimeout: a transferee catching up first
VOTE_AGAIN_MS = 20  # a Java voter that answered REJECT_TERM_NOT_READY is asked again after this
SYNC_MODE_FLUSH_MS = 200  # the periodic flush under flush=sync (see RaftCore._flush_period)
# How far above its own term a message may move a node. With pre-vote a group's term grows
# by one per election, and a Java member (which has none) alone by one a second at most:
# 2^31 is decades of elections. Without a bound, one forged frame of a term near the
# format's limit (store.format.TERM_MAX, which wire.py already enforces) would leave no
# term for the next election, and the group without a leader for good.
TERM_STEP_MAX = 1 << 31


@dataclass
class _Round:
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
class _Transfer:
    target: str
    deadline: int
    asked: bool = False


class RaftCore(Reconfiguration, Compaction):
    def __init__(self, config: NodeConfig, store, terms, rng: random.Random, now: int, flusher=None,
                 syncer=None, clock=None, disk_usage=None) -> None:
        """``flusher()``: the periodic flush (default: the store's, inline). ``syncer(done)``:
        flush=sync only -- make everything appended so far durable, then call ``done()``
        (default: flush inline and call it at once; the node does it in a thread, so the
        leader's fsync overlaps the followers'). ``clock()`` (wall-clock seconds, the clock
        of file modification times) and ``disk_usage()`` (a ratio, or None) drive retention
        (cluster/raft/retention.py); a store that cannot delete its head has none."""
        self.cfg = config
        self.store = store
        self.flusher = flusher or store.flush
        self.syncer = syncer
        self.terms = terms
        self.rng = rng
        self.now = now
        self.member = MemberState.load(config.self_id, terms)
        if store.end_term > self.member.term:
            # currterm behind the log (lost or damaged): never run below the log's own term
            self.member.advance_term(terms, store.end_term)
        self.follower = FollowerLog(store, sync=config.flush == "sync")
        # who the members are: the last config entry in the log, else the base (--peers, or
        # what the node kept in members.json); the node replaces it with what it found on disk
        self.configs = Configs(initial(config.peers, config.self_id, config.learner))
        self.save_base = None  # the node's: keep the base on disk when it changes (members.json)
        self.dispatchers: dict[str, Dispatcher] = {}
        self.append_times: AppendTimes | None = None  # leader: when its entries were appended
        self.quorum: Quorum | None = None
        self.pending: deque[Proposal] = deque()
        self.round: _Round | None = None
        self.transfer: _Transfer | None = None
        self.last_leader_contact: int | None = None
        # A node that has just started knows of no leader to wait for: it asks for a
        # pre-vote after one vote round, not after the whole leader-lost interval (which
        # can be long), and pre-vote keeps it from disturbing a leader that does exist.
        self.election_at = now + self._vote_round_timeout()
        self.heartbeat_due: dict[str, int] = {}
        self.peer_ack_at: dict[str, int] = {}
        self.flush_at = now + config.flush_interval_ms
        self.checkpoint_at = now + config.checkpoint_interval_ms
        self.retention = Retention(config, clock, disk_usage) if hasattr(store, "delete_head") else None
        self.retention_at = now + config.retention_check_ms
        self.disk_full: str | None = None  # why appends are refused for disk usage (the full ratio)
        self.disk_refusing = False  # the last append failed on the disk (noted once, and when it ends)
        self.term_error: StoreError | None = None  # why the last term or vote could not be persisted
        # Members that are Java DLedger nodes (configured, or learnt from their messages):
        # no no-op entries while there are any (DLedger 0.2.7 cannot read magic 2 back),
        # and their dispatchers speak as DLedger's leader does (cluster/raft/dispatcher.py).
        self.java_peers: set[str] = set(config.dledger_peers)
        self.pending_take: tuple | None = None  # a transfer to us waiting to catch up: leader, term, end, deadline
        # The state machine's side of snapshots (cluster/raft/statemachine.py Applier; the node or
        # the simulator sets it, None without a state machine): a leader sends its snapshot to
        # a follower that needs entries it no longer holds, a follower installs the one sent.
        # Its latest snapshot bounds what retention deletes (retention_limit).
        self.applier = None
        self.retention_limit: int | None = None
        self.receiving: tuple | None = None  # the snapshot arriving: (leader, term, index)
        self._sends: list[Send] = []
        self._done: list[Proposal] = []
        self._notes: list[str] = []
        self._state_said: tuple | None = None  # (role, term, leader) the log last said
        self._leader_said = ""  # how this node's leadership began (its no-op), for that line

    # -- outputs ----------------------------------------------------------------------
    def take(self) -> Ready:
        self._say_state()
        ready = Ready(self._sends, self._done, self._notes)
        self._sends, self._done, self._notes = [], [], []
        return ready

    def _send(self, to: str, request) -> None:
        self._sends.append(Send(to, request))

    def _note(self, text: str, **fields) -> None:
        self._notes.append(Note(text, fields) if fields else text)

    def _say_state(self) -> None:
        """One line for each change of role, term or leader, and of a follower's dispatcher
        state (but between APPEND and COMMIT, which alternate as pushes are answered), with
        the numbers."""
        m = self.member
        now = (m.role, m.term, m.leader_id)
        was = self._state_said
        if now != was:
            self._state_said = now
            leader = f"leader {m.leader_id}" if m.leader_id and m.role != Role.LEADER else \
                "no leader known" if m.role != Role.LEADER else self._leader_said
            since = "" if was is None else f" (was {was[0]} in term {was[1]})"
            self._note(f"{m.role} in term {m.term}, {leader}{since}", event="state", role=str(m.role), term=m.term,
                       leader=m.leader_id, was_role=None if was is None else str(was[0]),
                       was_term=None if was is None else was[1], end_index=self.store.end_index,
                       committed_index=self.store.committed_index)
        for p, d in self.dispatchers.items():
            if d.state is not d.said_state:
                before, d.said_state = d.said_state, d.state
                if before is not None and {before, d.state} <= _STEADY:
                    continue
                self._note(f"replication to {p}: {before or 'start'} -> {d.state} (match {d.watermark}, "
                           f"next {d.next_index}{f', compare at {d.compare_index}' if d.state == 'COMPARE' else ''})",
                           event="replication", peer=p, state=str(d.state),
                           was_state=None if before is None else str(before), match_index=d.watermark,
                           next_index=d.next_index, compare_index=d.compare_index)


    # -- time -------------------------------------------------------------------------
    def _election_timeout(self) -> int:
        c = self.cfg
        return c.leader_lost_ms + self.rng.randint(c.min_vote_interval_ms, c.max_vote_interval_ms)

    def _vote_round_timeout(self) -> int:
        c = self.cfg
        return c.heartbeat_interval_ms + self.rng.randint(c.min_vote_interval_ms, c.max_vote_interval_ms)

    def tick(self, now: int) -> None:
        self.now = now
        _TICKS[self.member.role](self, now)
        if self.member.role == Role.LEADER:
            self._expire_proposals(now)
        if now >= self.flush_at:
            self.flush_at = now + self._flush_period()
            self._flush()
        if self.retention is not None and now >= self.retention_at:
            self.retention_at = now + self.cfg.retention_check_ms
            self._clean_space(now)
        if now >= self.checkpoint_at:
            self.checkpoint_at = now + self.cfg.checkpoint_interval_ms
            persist = getattr(self.store, "persist_checkpoint", None)
            if persist is not None:
                try:
                    persist()
                except StoreError as exc:
                    self._note(f"checkpoint not written: {exc}")


    def _flush_period(self) -> int:
        """How often the periodic flush runs. With flush=sync every acknowledged entry is
        already on disk and only the index files and the odd unacknowledged tail are left,
        so it runs at most every SYNC_MODE_FLUSH_MS: every 10 ms it kept the disk busy when
        an acknowledgement wanted it, and one sequential client waited on it."""
        if self.cfg.flush == "sync":
            return max(self.cfg.flush_interval_ms, SYNC_MODE_FLUSH_MS)
        return self.cfg.flush_interval_ms

    def _flush(self) -> None:
        try:
            self.flusher()
        except StoreError as exc:
            self._note(f"flush failed: {exc}")

    def _tick_follower(self, now: int) -> None:
        if self.pending_take is not None:
            leader, term, end, deadline = self.pending_take
            if self.member.term != term or self.member.leader_id != leader or now >= deadline:
                self.pending_take = None
                if now >= deadline:
                    self._note(f"not taking leadership from {leader}: not caught up to {end} within {TAKE_WAIT_MS} ms")
            elif self.store.end_index >= end:
                self.pending_take = None
                self._note(f"taking leadership from {leader}")
                self._start_round(now, pre=False, take_leadership=True)
                return
        if now >= self.election_at:
            if not self._is_voter():  # a learner, or removed: it never stands for election
                self.election_at = now + self._election_timeout()
                return
            self._note(f"no leader heard for {self.cfg.leader_lost_ms} ms; asking for a pre-vote")
            self._start_round(now, pre=True)

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

    def mark_java(self, peer: str) -> None:
        """``peer`` is a Java DLedger node (it sent or answered as one)."""
        if peer in self.members.members and peer != self.cfg.self_id and peer not in self.java_peers:
            self.java_peers.add(peer)
            self._note(f"{peer} is a Java DLedger node: speaking DLedger's own push to it (name it in "
                       f"--dledger-peers: a no-op entry written before it was heard from cannot reach it)")
            d = self.dispatchers.get(peer)
            if d is not None:
                d.java = True

    def _tick_leader(self, now: int) -> None:
        c, members = self.cfg, self.members
        alive = int(self._is_voter()) + sum(1 for p in self._voters_but_me()
                                             if now - self.peer_ack_at.get(p, now) < c.leader_lost_ms)
        if alive < members.quorum:
            self._note(f"heard from only {alive} of {len(members.voters)} voters in {c.leader_lost_ms} ms; "
                       "stepping down")
            self._become_follower(now, self.member.term, None)
            return
        self._promote_learners(now)
        for p in self._others():
            if now >= self.heartbeat_due.get(p, now):
                self.heartbeat_due[p] = now + c.heartbeat_interval_ms
                self._send(p, HeartBeatRequest(c.group, c.self_id, self.member.term))
        self._progress_transfer(now)
        self._pump(now)

    # -- elections --------------------------------------------------------------------
    def _start_round(self, now: int, *, pre: bool, take_leadership: bool = False) -> None:
        m, c = self.member, self.cfg
        term = m.term + 1
        if not pre and not self._persist_term(term, c.self_id):
            self._become_follower(now, m.term, None)  # no election it cannot remember
            return
        m.role, m.leader_id = Role.CANDIDATE, None
        req = VoteRequest(c.group, c.self_id, term, self.store.end_index, self.store.end_term, pre, take_leadership)
        self.round = r = _Round(pre, term, now + self._vote_round_timeout(), take_leadership, {c.self_id},
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
        return (self.member.leader_id is not None and self.last_leader_contact is not None
                and now - self.last_leader_contact < self.cfg.leader_lost_ms)

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
        if req.ledger_end_term < s.end_term:
            rejection = VoteResult.REJECT_EXPIRED_LEDGER_TERM
        elif req.ledger_end_term == s.end_term and req.ledger_end_index < s.end_index:
            rejection = VoteResult.REJECT_SMALL_LEDGER_END_INDEX
        else:
            rejection = None
        if req.pre_vote:
            return VoteResponse(m.term, rejection or VoteResult.ACCEPT)
        if req.term > m.term and not self._become_follower(now, req.term, None):
            return VoteResponse(m.term, VoteResult.REJECT_TERM_NOT_READY, self._disk_code())
        if rejection is not None:
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

    # -- role changes -----------------------------------------------------------------
    def _become_leader(self, now: int) -> None:
        m, c, s = self.member, self.cfg, self.store
        m.role, m.leader_id = Role.LEADER, c.self_id
        self.round = None
        if self.java_peers:
            # DLedger 0.2.7 stops reading its log at a no-op (magic 2): none while Java members
            # are in the group; earlier terms' entries commit with this term's first append
            first, said = s.end_index + 1, "no no-op: Java DLedger members"
        else:
            try:
                first = s.append_leader([b""], m.term, MAGIC_NOOP)[0].index
            except StoreError as exc:
                self._note(f"cannot append the no-op entry ({exc}); stepping down")
                self._become_follower(now, m.term, None)
                return
            said = f"no-op at {first}"
        self.quorum = Quorum(list(self.members.voters), c.self_id, m.term, first, s.committed_index)
        self.append_times = AppendTimes(first, now)  # (a follower's lag in time: the age of what it lacks)
        if first <= s.end_index:
            self.append_times.record(first, now)
        self._ack_self()
        self.dispatchers, self.peer_ack_at, self.heartbeat_due = {}, {}, {}
        for p in self._others():
            self._add_dispatcher(p, now)
        self._leader_said = said
        self._advance_commit()
        self._tick_leader(now)

    def _persist_term(self, term: int, voted_for: str | None = None) -> bool:
        """Move to ``term``, on disk first; False (with a note) when the disk refuses: the
        node stays in its term, where it can neither vote nor lead nor follow in the new one."""
        try:
            self.member.advance_term(self.terms, term, voted_for)
        except StoreError as exc:
            self.term_error = exc
            self._note(f"cannot move to term {term}, it is not on disk: {exc}")
            return False
        return True

    def _disk_code(self) -> Code:
        return Code.DISK_FULL if is_disk_full(self.term_error) else Code.DISK_ERROR

    def _become_follower(self, now: int, term: int, leader: str | None) -> bool:
        """Step down (or stay) as a follower of ``leader`` in ``term``. False when ``term``
        could not be persisted: then a follower in the current term, of no known leader."""
        m = self.member
        moved = term <= m.term or self._persist_term(term)
        if not moved:
            leader = None
        was_leader = m.role == Role.LEADER
        m.role, m.leader_id = Role.FOLLOWER, leader
        self.round = None
        if was_leader:
            self.dispatchers, self.quorum, self.transfer = {}, None, None
            while self.pending:
                p = self.pending.popleft()
                self._finish(p, Code.TERM_CHANGED, "leadership changed before the entry committed")
        self.election_at = now + self._election_timeout()
        return moved

    def _accept_leader(self, leader: str, term: int, now: int) -> Code | None:
        """A heartbeat or push from ``leader`` in ``term``: None to go on, or the code to refuse it with."""
        m = self.member
        if term < m.term:
            return Code.EXPIRED_TERM
        if term == m.term and m.role == Role.LEADER:
            return Code.INCONSISTENT_LEADER  # two leaders in one term: impossible unless a peer is broken
        if term > m.term or m.role != Role.FOLLOWER or m.leader_id != leader:
            if term == m.term and m.role == Role.FOLLOWER and m.leader_id not in (None, leader):
                return Code.INCONSISTENT_LEADER
            if not self._become_follower(now, term, leader):
                return self._disk_code()  # nothing is accepted from a term not on disk
        self.last_leader_contact = now
        self.election_at = now + self._election_timeout()
        return None

    # -- requests from peers ----------------------------------------------------------
    def handle(self, req, now: int, java: bool = False):
        """Answer a request from a peer; never raises on its content. ``java``: it came in
        Java DLedger's form, which makes its sender known as a Java node once it is taken
        (from a member of this group, answered SUCCESS): a refused request teaches nothing."""
        self.now = now
        c = self.cfg
        kind = type(req)
        if getattr(req, "group", c.group) != c.group:
            return _error(kind, self.member.term, Code.UNKNOWN_GROUP, f"this node serves group {c.group!r}")
        sender = getattr(req, "leader_id", None)
        if sender not in self.members.members and not self.configs.known(sender) and sender not in c.peers:
            return _error(kind, self.member.term, Code.UNKNOWN_MEMBER, f"{sender!r} is not a member")
        if getattr(req, "term", -1) > self.member.term + TERM_STEP_MAX:
            self._note(f"refused a {kind.__name__} from {sender}: its term is more than {TERM_STEP_MAX} above "
                       f"this node's {self.member.term}")
            return _error(kind, self.member.term, Code.UNEXPECTED_ARGUMENT,
                          f"term {req.term} is more than {TERM_STEP_MAX} above this node's {self.member.term}")
        resp = self._handle(kind, req, now)
        if java and resp.code == Code.SUCCESS:
            self.mark_java(sender)
        return resp

    def _handle(self, kind, req, now: int):
        if kind is VoteRequest:
            return self._on_vote(req, now)
        if kind is HeartBeatRequest:
            refused = self._accept_leader(req.leader_id, req.term, now)
            return HeartBeatResponse(self.member.term, refused or Code.SUCCESS, self.member.leader_id)
        if kind is PushRequest:
            refused = self._accept_leader(req.leader_id, req.term, now)
            if refused is not None:
                return PushResponse(self.member.term, refused, req.first_index, req.count,
                                    self.store.begin_index, self.store.end_index)
            before = (self.store.begin_index, self.store.end_index)
            resp = self.follower.handle(req)
            for first, last, why in self.follower.cuts:
                self._note(f"truncated entries {first}..{last} from {req.leader_id} in term {req.term}: {why}; "
                           f"after the push the log ends at {self.store.end_index}", event="truncation", from_index=first,
                           to_index=last, leader=req.leader_id, term=req.term, end_index=self.store.end_index)
            self.follower.cuts.clear()
            if (req.members and req.type == PushType.TRUNCATE and resp.code == Code.SUCCESS
                    and self.store.begin_index == req.first_index):  # the log begins at the leader's first entry
                self._begin_again(req.members, req.first_index - 1)
            if req.config_at or self.configs.entries or before != (self.store.begin_index, self.store.end_index):
                self._log_changed(req.config_at)
            return resp
        if kind is InstallSnapshotRequest:
            refused = self._accept_leader(req.leader_id, req.term, now)
            if refused is not None:
                return InstallSnapshotResponse(self.member.term, refused, 0, False, self.store.begin_index,
                                               self.store.end_index, f"not from the leader of term {self.member.term}")
            resp = install.receive(req, self.follower, self.applier)
            if resp.installed:
                self._begin_again(req.members, self.store.begin_index - 1)
                self._log_changed((self.store.begin_index,))
            arriving = (req.leader_id, req.term, req.index)
            if arriving != self.receiving and resp.code == Code.SUCCESS:
                self.receiving = arriving
                self._note(f"receiving snapshot {req.index} ({req.size} bytes) from {req.leader_id}"
                           + (f"; {resp.received} bytes of it were here already" if resp.received > len(req.data)
                              else ""))
            if resp.installed:
                self.retention_limit = max(req.index, -1 if self.retention_limit is None else self.retention_limit)
                self._note(f"installed snapshot {req.index} (term {req.snap_term}, {req.size} bytes) from "
                           f"{req.leader_id}; the log begins again at {self.store.begin_index}")
            elif resp.code != Code.SUCCESS:
                self._note(f"snapshot {req.index} from {req.leader_id} not installed: {resp.code.name} {resp.remark}")
            return resp
        if kind is LeadershipTransferRequest:
            return self._on_transfer(req, now)
        if kind is ProbeRequest or kind is RepairRequest:
            refused = self._accept_leader(req.leader_id, req.term, now)
            if refused is not None:
                return _error(kind, self.member.term, refused, f"not from the leader of term {self.member.term}")
            if kind is ProbeRequest:
                return self.follower.probe(req, self.member.term)
            resp = self.follower.repair(req, self.member.term)
            self._log_changed(())
            if resp.code == Code.SUCCESS and not resp.dropped:
                self._note(f"repair from {req.leader_id}: nothing to drop from {req.from_index}")
            elif resp.code == Code.SUCCESS:
                self._note(f"repair from {req.leader_id}: dropped {resp.dropped} entries from {req.from_index}",
                           event="truncation", from_index=req.from_index, to_index=req.from_index + resp.dropped - 1,
                           leader=req.leader_id, term=req.term, end_index=self.store.end_index)
            return resp
        return _error(kind, self.member.term, Code.UNSUPPORTED, f"unexpected request {kind.__name__}")

    # -- answers to our requests ------------------------------------------------------
    def on_response(self, peer: str, req, resp, now: int) -> None:
        self.now = now
        term = getattr(resp, "term", -1)
        if term > self.member.term + TERM_STEP_MAX:
            self._note(f"ignored {peer}'s answer to a {type(req).__name__}: its term is more than {TERM_STEP_MAX} "
                       f"above this node's {self.member.term}")
            self.on_failure(peer, req, "its answer's term is out of reach", now)
            return
        if isinstance(req, VoteRequest):
            self._on_vote_response(peer, req, resp, now)
            return
        if term > self.member.term:
            self._become_follower(now, term, None)
            return
        if self.member.role != Role.LEADER or getattr(req, "term", None) != self.member.term:
            return
        if getattr(resp, "code", None) in (Code.SUCCESS, Code.INCONSISTENT_STATE, Code.INCONSISTENT_INDEX):
            self.peer_ack_at[peer] = now
        if isinstance(req, HeartBeatRequest) and resp.code == Code.TERM_NOT_READY:
            # a Java member still moving to our term (it voted for us as a candidate): beat again soon
            self.heartbeat_due[peer] = min(self.heartbeat_due.get(peer, now), now + VOTE_AGAIN_MS)
        if isinstance(req, _DISPATCHED):
            d = self.dispatchers.get(peer)
            if d is not None:
                d.on_response(req, resp, now)
                self._advance_commit()
                self._pump(now)

    def on_failure(self, peer: str, req, why: str, now: int) -> None:
        self.now = now
        if isinstance(req, _DISPATCHED) and self.member.role == Role.LEADER:
            d = self.dispatchers.get(peer)
            if d is not None:
                d.on_failure(req, now, why)

    # -- replication (leader) ---------------------------------------------------------
    def _pump(self, now: int) -> None:
        if self.member.role != Role.LEADER:
            return
        committed = self.store.committed_index
        for p, d in self.dispatchers.items():
            for req in d.poll(now, committed):
                self._send(p, req)
            if d.said:
                for text in d.said:
                    self._note(text)
                d.said.clear()

    def _ack_self(self) -> None:
        """The leader's own copy counts once it meets the flush policy: at once (async: the
        page cache), or once fsynced (sync)."""
        term, end = self.member.term, self.store.end_index
        if self.cfg.flush != "sync":
            self.quorum.ack(self.cfg.self_id, term, end)
            return
        if self.syncer is None:
            self._flush()
            self._synced(term, end)
        else:
            self.syncer(lambda: self._synced(term, end))

    def _synced(self, term: int, end: int) -> None:
        if self.quorum is not None and self.member.term == term and self.member.role == Role.LEADER:
            if self.quorum.ack(self.cfg.self_id, term, end):
                self._advance_commit()

    def _advance_commit(self) -> None:
        if self.quorum is None:
            return
        q = self.quorum.advance()
        if q is None:
            return
        self.store.set_committed(q)
        while self.pending and self.pending[0].last_index <= q:
            self._finish(self.pending.popleft(), Code.SUCCESS)
        if not self._is_voter() and self.configs.last_index <= q:
            self._note(f"config entry {self.configs.last_index}, which leaves this node out of the voters, is "
                       "committed: stepping down")
            self._become_follower(self.now, self.member.term, None)

    def _finish(self, p: Proposal, code: Code, remark: str = "") -> None:
        p.code, p.remark = code, remark
        self._done.append(p)

    def _expire_proposals(self, now: int) -> None:
        while self.pending and self.pending[0].deadline <= now:
            self._finish(self.pending.popleft(), Code.WAIT_QUORUM_ACK_TIMEOUT,
                         f"no quorum acknowledged the entry within {self.cfg.max_wait_ack_ms} ms")

    def propose(self, bodies, now: int) -> Proposal:
        """Append ``bodies`` as leader. The returned proposal is finished at once when
        refused (NOT_LEADER, LEADER_PENDING_FULL, DISK_FULL, ...: nothing was appended),
        else when committed or timed out (it then shows up in ``take().done``)."""
        self.now = now
        m = self.member
        p = Proposal(len(bodies), m.term, leader_id=m.leader_id)
        if m.role != Role.LEADER:
            p.code, p.remark = Code.NOT_LEADER, f"leader is {m.leader_id or 'unknown'}"
            return p
        if not bodies:
            p.code, p.remark = Code.REQUEST_WITH_EMPTY_BODYS, "nothing to append"
            return p
        if self.transfer is not None:
            p.code, p.remark = Code.LEADER_TRANSFERRING, f"handing leadership to {self.transfer.target}"
            return p
        if len(self.pending) >= self.cfg.max_pending_requests:
            p.code, p.remark = Code.LEADER_PENDING_FULL, f"{len(self.pending)} appends wait for the quorum"
            return p
        if self.disk_full is not None:
            p.code, p.remark = Code.DISK_FULL, self.disk_full
            return p
        try:
            appended = self.store.append_leader(bodies if isinstance(bodies, Sequence) else list(bodies), m.term,
                                                MAGIC_NORMAL)
        except StoreIOError as exc:
            # the store keeps a batch whole or not at all: a full disk refuses it cleanly
            full = is_disk_full(exc)
            p.code, p.remark = (Code.DISK_FULL, f"disk full: {exc}") if full else (Code.DISK_ERROR, str(exc))
            if not self.disk_refusing:
                self._note(f"appends refused with {p.code.name} until the disk takes them: {exc}")
            self.disk_refusing = True
            return p
        except StoreError as exc:
            p.code, p.remark = Code.UNEXPECTED_ARGUMENT, str(exc)
            return p
        if self.disk_refusing:
            self.disk_refusing = False
            self._note("the disk takes appends again")
        return self._track(p, appended, now)

    def _track(self, p: Proposal, appended, now: int) -> Proposal:
        """``p``'s entries are appended: it waits for the quorum (or its deadline)."""
        p.appended, p.first_index, p.last_index = appended, appended[0].index, appended[-1].index
        p.deadline = now + self.cfg.max_wait_ack_ms
        self.append_times.record(p.last_index, now)
        self.pending.append(p)
        self._ack_self()
        self._advance_commit()
        self._pump(now)
        return p

    # -- leadership transfer ----------------------------------------------------------
    def _on_transfer(self, req: LeadershipTransferRequest, now: int) -> LeadershipTransferResponse:
        m, c = self.member, self.cfg
        if req.take:
            # from our leader: we are caught up, take over now
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
        self.transfer = _Transfer(target, now + self.cfg.max_wait_ack_ms)
        self._note(f"handing leadership to {target}: new appends wait until it has caught up")
        self._progress_transfer(now)

    def _progress_transfer(self, now: int) -> None:
        t = self.transfer
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
            self._send(t.target, LeadershipTransferRequest(self.cfg.group, self.cfg.self_id, t.target,
                                                           self.member.term, take=True, end_index=self.store.end_index))

    # -- for operators ----------------------------------------------------------------
    def _peer_alive(self, peer: str, now: int) -> bool:
        d = self.dispatchers.get(peer)
        return d is not None and d.last_ack_at is not None and now - d.last_ack_at < self.cfg.leader_lost_ms

    def refuse_operator(self, peer: str | None) -> tuple[Code, str] | None:
        """Why an operator request about follower ``peer`` cannot be served here, if it cannot."""
        m, c = self.member, self.cfg
        if m.role != Role.LEADER:
            return Code.NOT_LEADER, f"leader is {m.leader_id or 'unknown'}"
        if peer is None:
            return None
        if peer not in self.members.members:
            return Code.UNKNOWN_MEMBER, f"{peer!r} is not a member ({', '.join(self.members.members)})"
        if peer == c.self_id:
            return Code.UNEXPECTED_ARGUMENT, f"{peer} is the leader itself"
        return None

    def watermarks(self, now: int) -> list[dict]:
        """One row per member, the leader's first: what it has and what each follower
        acknowledged (see Dispatcher.describe), with the leader's end and commit index."""
        s, c, members = self.store, self.cfg, self.members
        common = {"leader": c.self_id, "term": self.member.term, "leader_end_index": s.end_index,
                  "committed_index": s.committed_index}
        me = members.members.get(c.self_id) or c.peers[c.self_id]
        rows = [{"peer": c.self_id, "address": me.address, "member": members.role_of(c.self_id) or "removed",
                 "alive": True, "state": "LEADER",
                 "watermark": s.end_index, "next_index": s.end_index + 1, "lag_entries": 0, "lag_bytes": 0,
                 "in_flight": 0, "in_flight_bytes": 0, "ms_since_ack": 0, "lag_ms": 0, "last_error": "", "note": "",
                 **common}]
        for p, d in self.dispatchers.items():
            row = d.describe(now)
            row = {"peer": p, "address": members.members[p].address, "member": members.role_of(p),
                   "alive": self._peer_alive(p, now), **row, **common,
                   "lag_ms": self.append_times.age_ms(d.watermark + 1, now) if row["lag_entries"] else 0}
            rows.append({k: row[k] for k in rows[0]})  # every row in the leader row's field order
        return rows

    def pause_peer(self, peer: str, below: int, why: str) -> bool:
        """Hold replication to ``peer`` (see Dispatcher.pause) while a repair is under way;
        False when this node no longer leads (its dispatchers are gone)."""
        d = self.dispatchers.get(peer)
        if d is None or self.member.role != Role.LEADER:
            return False
        d.pause(below, why)
        self._note(f"replication to {peer} paused: {why}")
        return True

    def compare_peer(self, peer: str, index: int, why: str, now: int) -> None:
        """Send ``peer``'s dispatcher back to COMPARE from ``index``."""
        d = self.dispatchers.get(peer)
        if d is None or self.member.role != Role.LEADER:
            return
        d.compare_from(index, why)
        self._note(f"replication to {peer} compares again from {index}: {why}")
        self._pump(now)

    def describe(self) -> dict:
        m, s = self.member, self.store
        out = {
            "id": self.cfg.self_id,
            "group": self.cfg.group,
            "role": str(m.role),
            "term": m.term,
            "leader": m.leader_id,
            "voted_for": m.voted_for,
            "begin_index": s.begin_index,
            "end_index": s.end_index,
            "end_term": s.end_term,
            "committed_index": s.committed_index,
            "pending": len(self.pending),
            "member": self.members.role_of(self.cfg.self_id) or "removed",
            **self.configs.describe(),
        }
        if m.role == Role.LEADER:
            out["peers"] = [d.describe(self.now) for d in self.dispatchers.values()]
        return out


_DISPATCHED = (PushRequest, InstallSnapshotRequest, ProbeRequest, RepairRequest)  # what a dispatcher sends
_STEADY = frozenset({DispatchState.APPEND, DispatchState.COMMIT})  # (alternate as pushes are answered)
_TICKS = {Role.FOLLOWER: RaftCore._tick_follower, Role.CANDIDATE: RaftCore._tick_candidate,
          Role.LEADER: RaftCore._tick_leader}


def _error(kind, term: int, code: Code, remark: str):
    if kind is VoteRequest:
        return VoteResponse(term, VoteResult.REJECT_UNKNOWN_LEADER, code)
    if kind is HeartBeatRequest:
        return HeartBeatResponse(term, code)
    if kind is PushRequest:
        return PushResponse(term, code, remark=remark)
    if kind is ProbeRequest:
        return ProbeResponse(term, code, remark=remark)
    if kind is RepairRequest:
        return RepairResponse(term, code, remark=remark)
    if kind is InstallSnapshotRequest:
        return InstallSnapshotResponse(term, code, remark=remark)
    return LeadershipTransferResponse(term, code, remark)
