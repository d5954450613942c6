"""The deciding logic of one node: election, replication, commit. No sockets, no clock.

Everything comes in through six calls, each given the current time in milliseconds:
``tick(now)``, ``handle(request, now) -> response`` (a request from a peer),
``on_response(peer, request, response, now)`` and ``on_failure(peer, request, why, now)``
(the outcome of a request this node sent), ``propose(bodies, now)`` (a client append) and
``read_index(now)`` (a linearizable read, reads.py). What the node must do comes out of
``take()``: requests to send, finished proposals and reads, and notes for the log. Randomness comes from the ``rng`` given at construction. So a test
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

Here: where every event enters (the five calls), ticks by role, role changes and the
handling of peers' requests and answers. Concerns of their own live beside it, as parts of
the same object (base classes, so the simulator drives one RaftCore): votes and leadership
transfer in elections.py, proposals, commit and the operator's view of the followers in
leading.py, membership changes in reconfig.py, the log's moving beginning (retention,
deletion after snapshots) in compaction.py; the leader's per-follower replication in
dispatcher.py, the follower's in follower.py and install.py.
"""

from __future__ import annotations

import random
from collections import deque

from store.errors import StoreError, is_disk_full
from store.format import MAGIC_NOOP

from . import install
from .appendtimes import AppendTimes
from .compaction import Compaction
from .config import NodeConfig
from .dispatcher import Dispatcher, DispatchState
from .elections import TAKE_WAIT_MS, VOTE_AGAIN_MS, Elections, Round, Transfer
from .follower import FollowerLog
from .leading import Leading
from .reads import Reads
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

SYNC_MODE_FLUSH_MS = 200  # the periodic flush under flush=sync (see RaftCore._flush_period)
# How far above its own term a message may move a node. With pre-vote a group's term grows
# by one per election, and a Java member (which has none) alone by one a second at most:
# 2^31 is decades of elections. Without a bound, one forged frame of a term near the
# format's limit (store.format.TERM_MAX, which wire.py already enforces) would leave no
# term for the next election, and the group without a leader for good.
TERM_STEP_MAX = 1 << 31


class RaftCore(Elections, Leading, Reads, Reconfiguration, Compaction):
    def __init__(self, config: NodeConfig, store, terms, rng: random.Random, now: int, flusher=None,
                 syncer=None, clock=None, disk_usage=None, *, configs: Configs | None = None,
                 save_base=None) -> None:
        """``flusher()``: the periodic flush (default: the store's, inline). ``syncer(done)``:
        flush=sync only -- make everything appended so far durable, then call ``done()``
        (default: flush inline and call it at once; the node does it in a thread, so the
        leader's fsync overlaps the followers'). ``clock()`` (wall-clock seconds, the clock
        of file modification times) and ``disk_usage()`` (a ratio, or None) drive retention
        (cluster/raft/retention.py). ``configs``: the members the node found on disk (default:
        the base from ``--peers``); ``save_base(membership, index)``: keep the base where a
        restart finds it when it changes (the node's members.json; default: nowhere)."""
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
        self.follower = FollowerLog(store, sync=config.flush == "sync", learn_file_size=config.data_file_size is None)
        # who the members are: the last config entry in the log, else the base (--peers, or
        # what the node kept on disk)
        self.configs = configs or Configs(initial(config.peers, config.self_id, config.learner))
        self.save_base = save_base
        self.dispatchers: dict[str, Dispatcher] = {}
        self.append_times: AppendTimes | None = None  # leader: when its entries were appended
        self.quorum: Quorum | None = None
        self.pending: deque[Proposal] = deque()
        self.round: Round | None = None
        self.transfer: Transfer | None = None
        self.last_leader_contact: int | None = None
        self.last_leader_heartbeat: int | None = None  # (a Java leader is judged alive by these alone)
        # A node that has just started knows of no leader to wait for: it asks for a
        # pre-vote after one vote round, not after the whole leader-lost interval (which
        # can be long), and pre-vote keeps it from disturbing a leader that does exist.
        self.election_at = now + self._vote_round_timeout()
        if config.read_lease:  # (but one keeping the lease promise waits out leader-lost: _lease_promised)
            self.election_at = max(self.election_at, now + config.leader_lost_ms)
        self.heartbeat_due: dict[str, int] = {}
        self.peer_ack_at: dict[str, int] = {}
        self.answered_at: dict[str, int] = {}  # leader: when each peer last answered in this term
        # linearizable reads (raft/reads.py): the latest heartbeat round, the rounds out (round ->
        # the voters that answered it, when it began), the reads waiting, the reads done
        self.read_round, self.read_rounds = 0, {}
        self.read_round_due = False  # reads registered since take() last ran (it begins their round)
        self.reads_waiting: list = []
        self._reads_done: list = []
        self.term_first_index: int | None = None  # leader: the first entry of its term (reads wait for it)
        # read leases (raft/reads.py): per voter keeping the promise, when the latest heartbeat it
        # answered left; until when the lease holds (-1: it does not); whether a transfer voided it
        self.lease_acks: dict[str, int] = {}
        self.lease_until, self.lease_void = -1, False
        self.started_at = now  # (a member keeping the lease promise votes for nobody for leader-lost after)
        self.flush_at = now + config.flush_interval_ms
        self.checkpoint_at = now + config.checkpoint_interval_ms
        self.retention = Retention(config, clock, disk_usage)
        self.retention_at = now + config.retention_check_ms
        self.disk_full: str | None = None  # why appends are refused for disk usage (the full ratio)
        self.disk_refusing = False  # the last append failed on the disk (noted once, and when it ends)
        self.term_error: StoreError | None = None  # why the last term or vote could not be persisted
        # Members that are Java DLedger nodes (configured, or learnt from their messages):
        # no no-op entries while there are any (DLedger 0.2.7 cannot read magic 2 back),
        # and their dispatchers speak as DLedger's leader does (cluster/raft/dispatcher.py).
        self.java_peers: set[str] = set(config.dledger_peers)
        self.pending_take: tuple | None = None  # a transfer to us waiting to catch up: leader, term, end, deadline
        self.behind_voter: tuple | None = None  # never-lead: (voter, when) it refused a vote for a shorter log
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
        if self.read_round_due:
            self._begin_due_read_round()
        self._say_state()
        ready = Ready(self._sends, self._done, self._notes, self._reads_done)
        self._sends, self._done, self._notes, self._reads_done = [], [], [], []
        return ready

    def has_output(self) -> bool:
        """Is there something for take() (requests to send, proposals or reads done)?"""
        return bool(self._sends or self._done or self._reads_done or self.read_round_due)

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

    def tick(self, now: int) -> None:
        self.now = now
        _TICKS[self.member.role](self, now)
        if self.member.role == Role.LEADER:
            self._expire_proposals(now)
            self._expire_reads(now)
            self._retry_read_rounds(now)
        if now >= self.flush_at:
            self.flush_at = now + self._flush_period()
            self._flush()
        if now >= self.retention_at:
            self.retention_at = now + self.cfg.retention_check_ms
            self._clean_space(now)
        if now >= self.checkpoint_at:
            self.checkpoint_at = now + self.cfg.checkpoint_interval_ms
            try:
                self.store.persist_checkpoint()
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
            if self.cfg.never_lead:
                behind = self._behind_voter(now)
                if behind is None:  # the others elect among themselves
                    self.election_at = now + self._election_timeout()
                    return
                self._note(f"no leader heard for {self.cfg.leader_lost_ms} ms and {behind}'s log is behind this "
                           "one's: standing, to bring it up to date and hand leadership to it (this member never "
                           "leads)")
            else:
                self._note(f"no leader heard for {self.cfg.leader_lost_ms} ms; asking for a pre-vote")
            self._start_round(now, pre=True)

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
        if not self.cfg.never_lead:  # (a never-lead leader writes nothing: no config entry either)
            self._promote_learners(now)
        for p in self._others():
            if now >= self.heartbeat_due.get(p, now):
                self.heartbeat_due[p] = now + c.heartbeat_interval_ms
                self._send(p, HeartBeatRequest(c.group, c.self_id, self.member.term, sent_at=now))
        self._progress_transfer(now)
        self._pump(now)

    # -- role changes -----------------------------------------------------------------
    def _become_leader(self, now: int) -> None:
        m, c, s = self.member, self.cfg, self.store
        m.role, m.leader_id = Role.LEADER, c.self_id
        self.round = None
        if self.cfg.never_lead:
            # it leads only to hand over: it writes nothing (a broker reads every entry as a message)
            first, said = s.end_index + 1, "it never leads: handing over to a voter once caught up"
        elif self.java_peers:
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
        self.term_first_index = first
        self.append_times = AppendTimes(first, now)  # (a follower's lag in time: the age of what it lacks)
        if first <= s.end_index:
            self.append_times.record(first, now)
        self._ack_self()
        self.dispatchers, self.peer_ack_at, self.heartbeat_due, self.answered_at = {}, {}, {}, {}
        self.lease_acks, self.lease_until, self.lease_void = {}, -1, False
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
            self.dispatchers, self.quorum, self.transfer, self.term_first_index = {}, None, None, None
            self._fail_reads(Code.NOT_LEADER, "leadership changed before the read was confirmed")
            while self.pending:
                p = self.pending.popleft()
                self._finish(p, Code.TERM_CHANGED, "leadership changed before the entry committed")
        self.election_at = now + self._election_timeout()
        return moved

    def _accept_leader(self, leader: str, term: int, now: int, heartbeat: bool = False) -> Code | None:
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
        if heartbeat:
            self.last_leader_heartbeat = now
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
            refused = self._accept_leader(req.leader_id, req.term, now, heartbeat=True)
            return HeartBeatResponse(self.member.term, refused or Code.SUCCESS, self.member.leader_id,
                                     refused is None and self.cfg.read_lease)
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
            for text, fields in self.follower.take_notes(now):
                self._note(text, **fields)
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
        self.answered_at[peer] = now
        if getattr(resp, "code", None) in (Code.SUCCESS, Code.INCONSISTENT_STATE, Code.INCONSISTENT_INDEX):
            self.peer_ack_at[peer] = now
        if isinstance(req, HeartBeatRequest) and resp.code == Code.SUCCESS:
            self._heartbeat_answered(peer, req, resp, now)
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

    def on_peer_lost(self, peer: str, now: int) -> None:
        """The connection to ``peer`` was lost: until it answers again it does not count as
        live for a membership change (it may have stopped a moment ago)."""
        self.now = now
        d = self.dispatchers.get(peer) if self.member.role == Role.LEADER else None
        if d is not None:
            d.lost_at = now

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
            "never_lead": self.cfg.never_lead,
            **self.follower.describe(),
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
