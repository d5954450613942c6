"""Linearizable reads: the ReadIndex way (Raft thesis §6.4, as etcd serves them). A part of
RaftCore (core.py), made with what it uses (see :class:`Reads`), that lives as long as the
node: its read rounds are numbered across terms, and what a leader's lease was stays
visible after it steps down.

A read asks the leader for a read index (:meth:`Reads.read_index`). The leader notes its
commit index, then confirms it still leads with a round of heartbeats answered by a
majority: a leader cut off from the majority cannot, and answers NOT_LEADER (or times out)
instead of serving what may already be stale. A round serves every read that arrived
before it began. Reads do not begin rounds themselves: the next take() does, so the reads
registered together share one round; and a read the caller knows arrived before a round out
began (the node: its bytes were read from the socket before the heartbeats were written)
joins that round. Up to
ROUNDS_IN_FLIGHT rounds are out at once, so a read that arrives while one is out starts
the next at once (or, when that many are out, waits for a slot and shares the round begun
then with every read that came meanwhile). A new leader serves reads only once an entry of its own term has committed, since
until then its commit index may be behind what an earlier leader acknowledged; the reads
that arrive meanwhile take the commit index of that moment.

With NodeConfig.read_lease, a leader also holds a lease: a majority keeping the lease promise
(no vote for anyone within leader-lost of hearing from their leader, or of starting) answered
heartbeats it sent less than read_lease_ms ago, so no other leader can have been elected
meanwhile; while it holds, a read takes the commit index at once, with no round. Its safety
rests on the members' clocks running at rates within READ_LEASE_DRIFT of each other.

A confirmed read carries its index: the caller answers once it has applied (or holds
committed) that far. The read's round is a local mark on the heartbeats (never on the
wire): an answer counts for the reads registered before its heartbeat was sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from .member import Role
from .rpc import Code, HeartBeatRequest


@dataclass(eq=False, slots=True)
class ReadIndex:
    """A linearizable read waiting for the leader: ``code`` is None until it is done; then
    SUCCESS with ``index`` (answer once applied that far), or why not (NOT_LEADER with
    ``leader_id`` when known, TIMEOUT)."""

    deadline: int
    index: int = -1  # the commit index the read must see; -1 until the term's first entry commits
    round: int = 0  # the heartbeat round that confirms it
    code: Code | None = None
    leader_id: str | None = None
    remark: str = ""
    ctx: object = None  # the caller's own, for when the read is done (the node: who waits for it)

    @property
    def done(self) -> bool:
        return self.code is not None


ROUNDS_IN_FLIGHT = 2  # heartbeat rounds out at once: reads that come while one is out need not wait for it


class Reads:
    """ReadIndex reads and the read lease: ``read_round`` the latest round started,
    ``read_rounds`` the rounds out (round -> the voters that answered it, and when it
    began), ``reads_waiting``, and the lease (see :meth:`_renew_lease`). It reads the
    settings, the member's state, the log's commit index, the members (``roster``) and the
    time of the call (``clock``); its rounds' heartbeats go out through ``leader`` (leading.py
    Leader), the leadership it serves, given by :meth:`lead` and gone with :meth:`fail`."""

    def __init__(self, cfg, member, log, roster, clock) -> None:
        self.cfg, self.member, self.log, self.roster, self.clock = cfg, member, log, roster, clock
        self.leader = None
        self.read_round, self.read_rounds = 0, {}
        self.read_round_due = False  # reads registered since take() last ran (it begins their round)
        self.reads_waiting: list[ReadIndex] = []
        self.done: list[ReadIndex] = []  # (for take_finished())
        # read leases: per voter keeping the promise, when the latest heartbeat it answered
        # left; until when the lease holds (-1: it does not); whether a transfer voided it
        self.lease_acks: dict[str, int] = {}
        self.lease_until, self.lease_void = -1, False

    def take_done(self) -> list[ReadIndex]:
        done, self.done = self.done, []
        return done

    def lead(self, leader) -> None:
        """The node became leader (``leader``): a lease of its own term only."""
        self.leader = leader
        self.lease_acks, self.lease_until, self.lease_void = {}, -1, False

    def refuse(self, now: int) -> ReadIndex:
        """NOT_LEADER: this member does not lead, or leads only to hand over (never_lead)."""
        m, c = self.member, self.cfg
        r = ReadIndex(now, code=Code.NOT_LEADER, leader_id=None if m.role == Role.LEADER else m.leader_id)
        r.remark = f"{c.self_id} never leads" if c.never_lead and m.role == Role.LEADER else \
            f"leader is {m.leader_id or 'unknown'}"
        return r

    def read_index(self, now: int, joins: int, leader) -> ReadIndex:
        """See RaftCore.read_index: on ``leader`` (leading.py Leader)."""
        m, c = self.member, self.cfg
        if c.never_lead:
            return self.refuse(now)
        first = leader.term_first_index
        committed = self.log.committed_index
        index = committed if committed >= first else -1
        if index >= 0 and now < self.lease_until and not self.lease_void:  # (on the lease: no round)
            return ReadIndex(now, index, 0, Code.SUCCESS, m.leader_id)
        if joins and joins in self.read_rounds:  # (the common case under load: a round just begun)
            r = ReadIndex(now + c.max_wait_ack_ms, index, joins, None, m.leader_id)
            self.reads_waiting.append(r)
            return r
        voters = self.roster.current.voters
        if index >= 0 and len(voters) == 1 and c.self_id in voters:  # (a group of one: nobody to ask)
            return ReadIndex(now + c.max_wait_ack_ms, index, 0, Code.SUCCESS, m.leader_id)
        r = ReadIndex(now + c.max_wait_ack_ms, index, self.read_round + 1, None, m.leader_id)
        self.reads_waiting.append(r)
        self.read_round_due = True  # (begun by take(): every read registered until then shares it)
        return r

    def begin_due_round(self) -> None:
        """From take(): the round the reads registered since the last one wait for, when a
        slot is free (else the first round out to be confirmed begins it)."""
        self.read_round_due = False
        if (len(self.read_rounds) < ROUNDS_IN_FLIGHT and self.leader is not None
                and any(r.index >= 0 and r.round > self.read_round for r in self.reads_waiting)):
            self._start_read_round(self.clock.now)

    def _start_read_round(self, now: int) -> None:
        roster = self.roster
        self.read_round += 1
        self.read_rounds[self.read_round] = ({self.cfg.self_id} if roster.is_voter() else set(), now)
        for p in roster.others():
            self.leader.heartbeat(p, now, self.read_round)  # (this round is a heartbeat too)
        self._confirm_reads(self.read_round, now)

    def heartbeat_answered(self, peer: str, req: HeartBeatRequest, resp, now: int) -> None:
        """A heartbeat was answered SUCCESS in this term by ``peer``: for the read round it
        belongs to, and for the lease when ``peer`` keeps the lease promise."""
        if req.read_round:
            self._read_answered(peer, req, now)
        if resp.lease and self.cfg.read_lease and req.sent_at > self.lease_acks.get(peer, -1):
            self.lease_acks[peer] = req.sent_at
            self._renew_lease()

    def _renew_lease(self) -> None:
        """The lease holds until read_lease_ms after the latest time by which a majority (this
        leader and the voters keeping the promise) had answered heartbeats sent since: none of
        them votes for another leader before (NodeConfig.read_lease). Never with Java members
        (they make no such promise), nor once this term's leadership is being handed over."""
        c, members = self.cfg, self.roster.current
        voters = members.voters
        if self.roster.java_peers or self.lease_void:
            self.lease_until = -1
            return
        need = members.quorum - (1 if c.self_id in voters else 0)
        acks = sorted((self.lease_acks.get(p, -1) for p in voters if p != c.self_id), reverse=True)
        if need <= 0 or need > len(acks) or acks[need - 1] < 0:  # (a group of one reads without a lease)
            self.lease_until = -1
            return
        self.lease_until = acks[need - 1] + c.read_lease_ms

    def void_lease(self) -> None:
        """Leadership is being handed over (a member was asked to take it, and its voters grant
        it although this leader is alive): no more reads on the lease in this term."""
        self.lease_void, self.lease_until = True, -1

    def _read_answered(self, peer: str, req: HeartBeatRequest, now: int) -> None:
        """A heartbeat of a read round was answered SUCCESS in this term by ``peer``."""
        out = self.read_rounds.get(req.read_round)
        if out is None:
            return  # (a round confirmed already, or given up)
        if peer in self.roster.current.voters:
            out[0].add(peer)
        self._confirm_reads(req.read_round, now)

    def _confirm_reads(self, k: int, now: int) -> None:
        """Round ``k`` is confirmed once a majority answered it: every read registered before
        it began is served, and the rounds before it are of no more use."""
        out = self.read_rounds.get(k)
        if out is None or len(out[0]) < self.roster.current.quorum:
            return
        for done in [j for j in self.read_rounds if j <= k]:
            del self.read_rounds[done]
        waiting, self.reads_waiting = self.reads_waiting, []
        done, success = self.done, Code.SUCCESS
        for r in waiting:
            if r.round <= k and r.index >= 0:
                r.code = success
                done.append(r)
            else:
                self.reads_waiting.append(r)  # (arrived after it began, or the term's first entry is not in)
        if (len(self.read_rounds) < ROUNDS_IN_FLIGHT
                and any(r.index >= 0 and r.round > self.read_round for r in self.reads_waiting)):
            self._start_read_round(now)

    def retry_rounds(self, now: int) -> None:
        """No round begun for a heartbeat interval while reads wait (their heartbeats or the
        answers may be lost, or slow behind pushes): another round, which serves every read
        waiting (they all arrived before it). The rounds out stay good for their reads until
        max_wait_ack_ms, when the reads themselves time out."""
        if not self.reads_waiting or not any(r.index >= 0 for r in self.reads_waiting):
            return
        c = self.cfg
        latest = max((at for _acks, at in self.read_rounds.values()), default=None)
        if latest is not None and now - latest < c.heartbeat_interval_ms:
            return
        for k in [k for k, (_acks, at) in self.read_rounds.items() if now - at >= c.max_wait_ack_ms]:
            del self.read_rounds[k]
        self._start_read_round(now)

    def commit_advanced(self, leader, now: int) -> None:
        """The leader's commit index moved: once it passed the first entry of the leader's
        term, the reads waiting for that read from here."""
        if not self.reads_waiting or not leader.term_committed():
            return
        pending = [r for r in self.reads_waiting if r.index < 0]
        if not pending:
            return
        for r in pending:
            r.index = self.log.committed_index
            r.round = self.read_round + 1
        if len(self.read_rounds) < ROUNDS_IN_FLIGHT:
            self._start_read_round(now)

    def _read_done(self, r: ReadIndex, code: Code, remark: str = "") -> None:
        m = self.member
        r.code, r.remark = code, remark
        if code != Code.SUCCESS:
            r.leader_id = m.leader_id if m.leader_id != self.cfg.self_id else None
        self.done.append(r)

    def fail(self, code: Code, remark: str) -> None:
        """Every waiting read ends (leadership was lost)."""
        self.leader = None
        waiting, self.reads_waiting, self.read_rounds = self.reads_waiting, [], {}
        for r in waiting:
            self._read_done(r, code, remark)

    def expire(self, now: int) -> None:
        if not self.reads_waiting or self.reads_waiting[0].deadline > now:
            return
        keep = []
        for r in self.reads_waiting:
            if r.deadline <= now:
                self._read_done(r, Code.TIMEOUT,
                                f"no majority confirmed this leader within {self.cfg.max_wait_ack_ms} ms")
            else:
                keep.append(r)
        self.reads_waiting = keep
        if not keep:
            self.read_rounds = {}
