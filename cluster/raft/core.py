"""The deciding logic of one node: election, replication, commit. No sockets, no clock.

Everything comes in through six calls, each given the current time in milliseconds:
``tick(now)``, ``handle(request, now) -> response`` (a request from a peer),
``on_response(peer, request, response, now)`` and ``on_failure(peer, request, why, now)``
(the outcome of a request this node sent), ``propose(bodies, now)`` (a client append) and
``read_index(now)`` (a linearizable read, reads.py). What the node must do comes out of
``take()`` (requests to send, notes for the log); the clients' proposals and reads it
finished, out of ``take_finished()``. Randomness comes from the ``rng`` given at
construction: a test can run whole clusters deterministically; the node only moves bytes.

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
- Role behaviour is swapped with the role, as etcd-io/raft swaps its ``step`` and ``tick``
  functions: ``tick_role`` (Elections.tick_follower, Elections.tick_candidate, Leader.tick)
  and ``role``, which answers every call only a leader serves (leading.py Leader while
  leading, notleading.py NotLeading otherwise: appends and reads refused NOT_LEADER, answers
  of an ended leadership dropped), not scattered "is there a leader?" ifs.

Here: where every event enters (the calls above), role changes and the handling of peers'
requests and answers. Concerns of their own are parts, each made here with what it uses
(explicit arguments, never this object), with its own state, in a file of its own (the
simulator still drives one RaftCore):

- what they share, each a small object of its own: ``member`` (member.py MemberState:
  role, term, vote, leader) with ``terms`` (TermKeeper: a term or vote on disk first),
  ``roster`` (membership.py Roster: who the members are, which are Java), ``outbox``
  (proposal.py Outbox: requests to send, notes, proposals finished; what take() and
  take_finished() empty), ``clock`` (the time of the call), and the log (storage.py
  RaftLog, the one interface to the store);
- ``elections`` (elections.py, Elections): the election timer, rounds, votes, the
  follower's side of a leadership transfer; for the node's whole life. It changes the role
  through the three calls it is given (become_follower, become_candidate, become_leader).
- ``role``: a ``Leader`` (leading.py) made on becoming leader and dropped on stepping down:
  the dispatchers (dispatcher.py, one per follower), the proposals waiting, the quorum, a
  transfer under way; a ``NotLeading`` otherwise.
- ``reads`` (reads.py, Reads): linearizable reads and the read lease; its rounds'
  heartbeats go through the Leader it is given when the node leads.
- ``reconfig`` (reconfig.py, Reconfiguration): membership changes (no state: the members
  are the roster's ``configs``); the role follows each change (``_members_changed``).
- ``compaction`` (compaction.py, Compaction): retention, the log's deletion after
  snapshots, the disk's refusal of appends; told the role with each call that may delete.
- ``following`` (following.py, Following): a follower's answers to its leader's pushes,
  snapshots, probes and repairs, over ``follower`` (follower.py FollowerLog; install.py).

No part holds another's state, or this object; tests/test_layers.py keeps it so.
"""

from __future__ import annotations

import random

from store.errors import StoreError
from store.format import MAGIC_NOOP

from .compaction import Compaction
from .config import NodeConfig
from .dispatchstate import DispatchState
from .elections import Elections
from .follower import FollowerLog
from .following import Following
from .leading import Leader
from .member import MemberState, Role, TermKeeper
from .membership import Configs, Membership, Roster, initial
from .notleading import NotLeading
from .proposal import Clock, Finished, Outbox, Proposal, Ready
from .reads import ReadIndex, Reads
from .reconfig import Reconfiguration
from .rpc import (
    Code,
    HeartBeatRequest,
    HeartBeatResponse,
    InstallSnapshotRequest,
    LeadershipTransferRequest,
    ProbeRequest,
    PushRequest,
    RepairRequest,
    VoteRequest,
    error_response,
)
from .storage import RaftLog

SYNC_MODE_FLUSH_MS = 200  # the periodic flush under flush=sync (see RaftCore._flush_period)
# How far above its own term a message may move a node. With pre-vote a group's term grows
# by one per election, and a Java member (which has none) alone by one a second at most:
# 2^31 is decades of elections. Without a bound, one forged frame of a term near the
# format's limit (store.format.TERM_MAX, which wire.py already enforces) would leave no
# term for the next election, and the group without a leader for good.
TERM_STEP_MAX = 1 << 31
# what only a leader sends: taken from a member not known yet (handle)
_FROM_A_LEADER = (HeartBeatRequest, PushRequest, InstallSnapshotRequest)


class RaftCore:
    def __init__(self, config: NodeConfig, store: RaftLog, terms, rng: random.Random, now: int, flusher=None,
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
        self.cfg = c = config
        self.store = store
        self.flusher = flusher or store.flush
        self.syncer = syncer
        self.rng = rng
        self.clock = Clock(now)
        self.outbox = out = Outbox()
        self.member = m = MemberState.load(config.self_id, terms)
        self.term_keeper = TermKeeper(m, terms, out)
        if store.end_term > m.term:
            # currterm behind the log (lost or damaged): never run below the log's own term
            m.advance_term(terms, store.end_term)
        self.follower = FollowerLog(store, sync=config.flush == "sync", learn_file_size=config.data_file_size is None)
        # Who the members are: the last config entry in the log, else the base (--peers, or
        # what the node kept on disk). Members that are Java DLedger nodes (configured, or
        # learnt from their messages): no no-op entries while there are any (DLedger 0.2.7
        # cannot read magic 2 back), and their dispatchers speak as DLedger's leader does.
        self.roster = roster = Roster(c.self_id, configs or Configs(initial(c.peers, c.self_id, c.learner)),
                                      set(c.dledger_peers), save_base)
        # The state machine's side of snapshots (cluster/raft/statemachine.py Applier; the node or
        # the simulator sets it, None without a state machine): a leader sends its snapshot to
        # a follower that needs entries it no longer holds, a follower installs the one sent.
        self.applier = None
        self.flush_at = now + c.flush_interval_ms
        self.checkpoint_at = now + c.checkpoint_interval_ms
        # the parts (see the module's docstring), each made with what it uses
        applier = self._applier
        self.elections = Elections(c, rng, m, self.term_keeper, store, roster, out, now, follow=self.become_follower,
                                   stand=self.become_candidate, lead=self.become_leader)
        self.reads = Reads(c, m, store, roster, self.clock)
        self.reconfig = Reconfiguration(c, m, store, roster, out, self.clock, self._members_changed)
        self.compaction = Compaction(c, store, out, self.reconfig, applier, now, clock, disk_usage)
        self.following = Following(m, store, self.follower, roster, out, self.reconfig, self.compaction, applier,
                                   self.accept_leader)
        self.not_leading = NotLeading(m, self.reads)
        # the calls only a leader serves go to the role (a Leader while leading), and the
        # role's own tick runs: both swapped with the role
        self.role: Leader | NotLeading = self.not_leading
        self.tick_role = self.elections.tick_follower
        self._state_said: tuple | None = None  # (role, term, leader) the log last said

    def _applier(self):
        return self.applier

    # -- outputs ----------------------------------------------------------------------
    def take(self) -> Ready:
        """What the node must do now; it begins the round the reads registered since wait for."""
        if self.reads.read_round_due:
            self.reads.begin_due_round()
        self._say_state()
        return self.outbox.take()

    def take_finished(self) -> Finished:
        """The proposals and reads finished since the last call (read after take())."""
        return Finished(self.outbox.take_done(), self.reads.take_done())

    def has_output(self) -> bool:
        """Is there something for take() or take_finished()?"""
        out, reads = self.outbox, self.reads
        return bool(out.sends or out.done or reads.done or reads.read_round_due)

    def _say_state(self) -> None:
        """One line for each change of role, term or leader, and of a follower's dispatcher
        state (but between APPEND and COMMIT, which alternate as pushes are answered), with
        the numbers."""
        m, note = self.member, self.outbox.note
        now = (m.role, m.term, m.leader_id)
        was = self._state_said
        if now != was:
            self._state_said = now
            leader = f"leader {m.leader_id}" if m.leader_id and m.role != Role.LEADER else \
                "no leader known" if m.role != Role.LEADER else self.role.said
            since = "" if was is None else f" (was {was[0]} in term {was[1]})"
            note(f"{m.role} in term {m.term}, {leader}{since}", event="state", role=str(m.role), term=m.term,
                 leader=m.leader_id, was_role=None if was is None else str(was[0]),
                 was_term=None if was is None else was[1], end_index=self.store.end_index,
                 committed_index=self.store.committed_index)
        for p, d in self.role.dispatchers.items():
            changed = d.state_changed()
            if changed is None:
                continue
            before, state = changed
            if before is not None and {before, state} <= _STEADY:
                continue
            note(f"replication to {p}: {before or 'start'} -> {state} (match {d.watermark}, "
                 f"next {d.next_index}{f', compare at {d.compare_index}' if state == 'COMPARE' else ''})",
                 event="replication", peer=p, state=str(state),
                 was_state=None if before is None else str(before), match_index=d.watermark,
                 next_index=d.next_index, compare_index=d.compare_index)

    # -- time -------------------------------------------------------------------------
    def tick(self, now: int) -> None:
        self.clock.now = now
        self.tick_role(now)
        self.role.expire(now)
        if now >= self.flush_at:
            self.flush_at = now + self._flush_period()
            self.flush()
        self.compaction.tick(now, self.role)
        if now >= self.checkpoint_at:
            self.checkpoint_at = now + self.cfg.checkpoint_interval_ms
            try:
                self.store.persist_checkpoint()
            except StoreError as exc:
                self.outbox.note(f"checkpoint not written: {exc}")

    def _flush_period(self) -> int:
        """How often the periodic flush runs. With flush=sync every acknowledged entry is
        already on disk and only the index files and the odd unacknowledged tail are left,
        so it runs at most every SYNC_MODE_FLUSH_MS: every 10 ms it kept the disk busy when
        an acknowledgement wanted it, and one sequential client waited on it."""
        if self.cfg.flush == "sync":
            return max(self.cfg.flush_interval_ms, SYNC_MODE_FLUSH_MS)
        return self.cfg.flush_interval_ms

    def flush(self) -> None:
        try:
            self.flusher()
        except StoreError as exc:
            self.outbox.note(f"flush failed: {exc}")

    # -- who the members are ----------------------------------------------------------
    @property
    def members(self) -> Membership:
        return self.roster.current

    @property
    def java_peers(self) -> set[str]:
        return self.roster.java_peers

    def mark_java(self, peer: str) -> None:
        """``peer`` is a Java DLedger node (it sent or answered as one)."""
        java = self.roster.java_peers
        if peer in self.members.members and peer != self.cfg.self_id and peer not in java:
            java.add(peer)
            self.outbox.note(f"{peer} is a Java DLedger node: speaking DLedger's own push to it (name it in "
                             f"--dledger-peers: a no-op entry written before it was heard from cannot reach it)")
            self.role.speak_java(peer)

    def _members_changed(self, new: Membership, now: int) -> None:
        self.role.follow_members(new, now)

    # -- role changes -----------------------------------------------------------------
    def become_candidate(self) -> None:
        self.member.role, self.member.leader_id = Role.CANDIDATE, None
        self.tick_role = self.elections.tick_candidate
        self._drop_leader()

    def _drop_leader(self) -> None:
        """Leave the leader's part, if this node had one: its proposals and reads are answered
        NOT_LEADER (a candidate or follower has no dispatchers, proposals or quorum)."""
        was, self.role = self.role, self.not_leading
        was.step_down()

    def become_leader(self, now: int) -> None:
        m, c, s = self.member, self.cfg, self.store
        self.elections.stand_down()
        if c.never_lead:
            # it leads only to hand over: it writes nothing (a broker reads every entry as a message)
            first, said = s.end_index + 1, "it never leads: handing over to a voter once caught up"
        elif self.roster.java_peers:
            # DLedger 0.2.7 stops reading its log at a no-op (magic 2): none while Java members
            # are in the group; earlier terms' entries commit with this term's first append
            first, said = s.end_index + 1, "no no-op: Java DLedger members"
        else:
            try:
                first = s.append_leader([b""], m.term, MAGIC_NOOP)[0].index
            except StoreError as exc:
                self.outbox.note(f"cannot append the no-op entry ({exc}); stepping down")
                self.become_follower(now, m.term, None)
                return
            said = f"no-op at {first}"
        m.role, m.leader_id = Role.LEADER, c.self_id
        self.role = leader = Leader(c, m, s, self.roster, self.outbox, self.clock, first, said, now, reads=self.reads,
                                    reconfig=self.reconfig, compaction=self.compaction, follow=self.become_follower,
                                    sync=self.syncer, flush=self.flush, applier=self._applier)
        self.tick_role = leader.tick
        self.reads.lead(leader)
        leader.start(now)

    def become_follower(self, now: int, term: int, leader: str | None) -> bool:
        """Step down (or stay) as a follower of ``leader`` in ``term``. False when ``term``
        could not be persisted: then a follower in the current term, of no known leader."""
        m = self.member
        moved = term <= m.term or self.term_keeper.move_to(term)
        if not moved:
            leader = None
        m.role, m.leader_id = Role.FOLLOWER, leader
        self.tick_role = self.elections.tick_follower
        self.elections.stand_down()
        self._drop_leader()
        self.elections.restart_timer(now)
        return moved

    def accept_leader(self, leader: str, term: int, now: int, heartbeat: bool = False) -> Code | None:
        """A heartbeat or push from ``leader`` in ``term``: None to go on, or the code to refuse it with."""
        m = self.member
        if term < m.term:
            return Code.EXPIRED_TERM
        if term == m.term and m.role == Role.LEADER:
            return Code.INCONSISTENT_LEADER  # two leaders in one term: impossible unless a peer is broken
        if term > m.term or m.role != Role.FOLLOWER or m.leader_id != leader:
            if term == m.term and m.role == Role.FOLLOWER and m.leader_id not in (None, leader):
                return Code.INCONSISTENT_LEADER
            if not self.become_follower(now, term, leader):
                return self.term_keeper.disk_code()  # nothing is accepted from a term not on disk
        self.elections.heard_leader(now, heartbeat)
        return None

    # -- requests from peers ----------------------------------------------------------
    def handle(self, req, now: int, java: bool = False):
        """Answer a request from a peer; never raises on its content. ``java``: it came in
        Java DLedger's form, which makes its sender known as a Java node once it is taken
        (from a member of this group, answered SUCCESS): a refused request teaches nothing."""
        self.clock.now = now
        c, m = self.cfg, self.member
        kind = type(req)
        if getattr(req, "group", c.group) != c.group:
            return error_response(kind, m.term, Code.UNKNOWN_GROUP, f"this node serves group {c.group!r}")
        sender = getattr(req, "leader_id", None)
        if sender not in self.members.members and not self.roster.configs.known(sender) and sender not in c.peers \
                and not (kind in _FROM_A_LEADER and getattr(req, "term", -1) >= m.term):
            # (a leader's beat, push or snapshot of a term not below ours is taken from a member this
            # node does not know yet: one added by a config entry it has not received, having been
            # down then; refused, it could never receive that entry and would stand for ever)
            return error_response(kind, m.term, Code.UNKNOWN_MEMBER, f"{sender!r} is not a member")
        if getattr(req, "term", -1) > m.term + TERM_STEP_MAX:
            self.outbox.note(f"refused a {kind.__name__} from {sender}: its term is more than {TERM_STEP_MAX} above "
                             f"this node's {m.term}")
            return error_response(kind, m.term, Code.UNEXPECTED_ARGUMENT,
                                  f"term {req.term} is more than {TERM_STEP_MAX} above this node's {m.term}")
        resp = self._handle(kind, req, now)
        if java and resp.code == Code.SUCCESS:
            self.mark_java(sender)
        return resp

    def _handle(self, kind, req, now: int):
        if kind is VoteRequest:
            return self.elections.on_vote(req, now, self.role.transfer)
        if kind is HeartBeatRequest:
            refused = self.accept_leader(req.leader_id, req.term, now, heartbeat=True)
            return HeartBeatResponse(self.member.term, refused or Code.SUCCESS, self.member.leader_id,
                                     refused is None and self.cfg.read_lease)
        if kind is PushRequest:
            return self.following.on_push(req, now)
        if kind is InstallSnapshotRequest:
            return self.following.on_install(req, now)
        if kind is LeadershipTransferRequest:
            if req.take:
                return self.elections.on_take(req, now)
            return self.role.on_transfer(req, now)
        if kind is ProbeRequest or kind is RepairRequest:
            refused = self.accept_leader(req.leader_id, req.term, now)
            if refused is not None:
                return error_response(kind, self.member.term, refused, f"not from the leader of term {self.member.term}")
            return self.following.on_probe_or_repair(req)
        return error_response(kind, self.member.term, Code.UNSUPPORTED, f"unexpected request {kind.__name__}")

    # -- answers to our requests ------------------------------------------------------
    def on_response(self, peer: str, req, resp, now: int) -> None:
        self.clock.now = now
        term = getattr(resp, "term", -1)
        if term > self.member.term + TERM_STEP_MAX:
            self.outbox.note(f"ignored {peer}'s answer to a {type(req).__name__}: its term is more than "
                             f"{TERM_STEP_MAX} above this node's {self.member.term}")
            self.on_failure(peer, req, "its answer's term is out of reach", now)
            return
        if isinstance(req, VoteRequest):
            self.elections.on_vote_response(peer, req, resp, now)
            return
        if term > self.member.term:
            self.become_follower(now, term, None)
            return
        if getattr(req, "term", None) == self.member.term:
            self.role.on_response(peer, req, resp, now)

    def on_failure(self, peer: str, req, why: str, now: int) -> None:
        self.clock.now = now
        self.role.on_failure(peer, req, why, now)

    def on_peer_lost(self, peer: str, now: int) -> None:
        """The connection to ``peer`` was lost: until it answers again it does not count as
        live for a membership change (it may have stopped a moment ago)."""
        self.clock.now = now
        self.role.on_peer_lost(peer, now)

    # -- the node's and the operator's calls ------------------------------------------
    def propose(self, bodies, now: int) -> Proposal:
        """Append ``bodies`` as leader. The returned proposal is finished at once when
        refused (NOT_LEADER, LEADER_PENDING_FULL, DISK_FULL, ...: nothing was appended),
        else when committed or timed out (it then shows up in ``take_finished().proposals``)."""
        self.clock.now = now
        m = self.member
        return self.role.propose(Proposal(len(bodies), m.term, leader_id=m.leader_id), bodies, now)

    def read_index(self, now: int, joins: int = 0) -> ReadIndex:
        """A read index for a linearizable read: done at once when refused (NOT_LEADER, or
        SUCCESS on a leader that needs nobody else), else once a heartbeat round begun after
        it arrived is answered by a majority (then it shows up in ``take_finished().reads``).
        ``joins``: a round whose heartbeats the caller knows left after this read arrived
        (0: none); while it is out, it serves this read too."""
        self.clock.now = now
        return self.role.read_index(now, joins)

    def change_members(self, kind: str, node: str, address: str | None, now: int) -> Proposal:
        """An operator's change (``add``: ``node`` at ``address`` joins as a learner, and is
        promoted once caught up; ``remove``: ``node`` leaves), as a config entry. Finished at
        once when refused, else when the entry commits (or times out), as :meth:`propose`."""
        self.clock.now = now
        return self.role.change_members(kind, node, address, now)

    def snapshot_saved(self, index: int, now: int) -> None:
        """The state machine's snapshot as of ``index`` is on disk: retention may delete up to
        it, and the log it covers goes now (DLedger HEAD resets its log after each snapshot),
        but for ``snapshot_keep_entries`` entries before it and, on a leader, what live
        followers still need (one that is away gets the snapshot when it is back)."""
        self.clock.now = now
        self.compaction.snapshot_saved(index, now, self.role)

    def start_transfer(self, target: str, now: int) -> None:
        """Hand leadership to ``target`` once it has every entry (leaders only: else nothing)."""
        self.role.start_transfer(target, now)

    def refuse_operator(self, peer: str | None) -> tuple[Code, str] | None:
        """Why an operator request about follower ``peer`` cannot be served here, if it cannot."""
        return self.role.refuse_operator(peer)

    def watermarks(self, now: int) -> list[dict]:
        """One row per member, the leader's first (leaders only: else none): see Leader.watermarks."""
        return self.role.watermarks(now)

    def pause_peer(self, peer: str, below: int, why: str) -> bool:
        """Hold replication to ``peer`` (see Dispatcher.pause) while a repair is under way;
        False when this node no longer leads (its dispatchers are gone)."""
        return self.role.pause_peer(peer, below, why)

    def compare_peer(self, peer: str, index: int, why: str, now: int) -> None:
        """Send ``peer``'s dispatcher back to COMPARE from ``index``."""
        self.role.compare_peer(peer, index, why, now)

    def describe(self) -> dict:
        m, s = self.member, self.store
        return {
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
            "pending": len(self.role.pending),
            "member": self.members.role_of(self.cfg.self_id) or "removed",
            "never_lead": self.cfg.never_lead,
            **self.follower.describe(),
            **self.roster.configs.describe(),
            **self.role.describe(self.clock.now),
        }


_STEADY = frozenset({DispatchState.APPEND, DispatchState.COMMIT})  # (alternate as pushes are answered)
