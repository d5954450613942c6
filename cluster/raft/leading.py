"""The leader's part of a node's deciding logic: made when the node becomes leader, dropped
when it steps down, so what only a leader has (a dispatcher per follower, the proposals
waiting for the quorum, the quorum itself, a leadership transfer under way) cannot outlive
its term. RaftCore (core.py) holds it as its ``role`` while it leads (notleading.py's
NotLeading otherwise: the same calls, answered as a follower or candidate does) and runs
its :meth:`Leader.tick`. Each follower's own replication is its
Dispatcher (dispatcher.py).

A proposal's entries are appended at once and wait in ``pending`` until the quorum's
commit index passes them (:meth:`Leader.advance_commit`), their deadline passes, or
leadership changes. The leader's own copy counts once it meets the flush policy
(:meth:`Leader.ack_self`).

A leadership transfer: the leader stops taking appends, waits until the target has every
entry, then asks it to take over (LeadershipTransferRequest ``take``); the target starts a
real election at once (elections.py), which its peers grant although a leader is alive.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Sequence

from store.errors import StoreCorruptError, StoreError, StoreIOError, is_disk_full
from store.format import MAGIC_NORMAL

from .appendtimes import AppendTimes
from .dispatcher import Dispatcher
from .elections import VOTE_AGAIN_MS
from .proposal import Proposal
from .quorum import Quorum
from .rpc import (
    Code,
    HeartBeatRequest,
    InstallSnapshotRequest,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    ProbeRequest,
    PushRequest,
    RepairRequest,
)

DISPATCHED = (PushRequest, InstallSnapshotRequest, ProbeRequest, RepairRequest)  # what a dispatcher sends


@dataclass
class Transfer:
    """A leadership transfer under way: to whom, until when, and whether it was asked to take over."""

    target: str
    deadline: int
    asked: bool = False


class Leader:
    """One term's leadership, from the first entry of its term, ``first``. It reads the
    settings, the member's state, the log and the members (``roster``); it sends, says and
    finishes proposals through ``outbox``, reads the time of the call from ``clock``, and
    works with the node's long-lived parts it is given (``reads``, ``reconfig``,
    ``compaction``). ``follow(now, term, leader)`` steps the node down; ``sync(done)`` (or
    None) and ``flush()`` make its own copy durable under flush=sync (RaftCore's ``syncer``
    and ``flush``); ``applier()`` is the state machine's side of snapshots, or None."""

    def __init__(self, cfg, member, log, roster, outbox, clock, first: int, said: str, now: int, *, reads,
                 reconfig, compaction, follow, sync, flush, applier) -> None:
        c, s = self.cfg, self.log = cfg, log
        self.member, self.roster, self.outbox, self.clock = member, roster, outbox, clock
        self.reads, self.reconfig, self.compaction = reads, reconfig, compaction
        self.follow, self.sync, self.flush, self.applier = follow, sync, flush, applier
        self.active = True  # until step_down (a callback may outlive this leadership)
        self.term = member.term
        self.said = said  # how this leadership began (its no-op), for the state line
        self.quorum = Quorum(list(roster.current.voters), c.self_id, self.term, first, s.committed_index)
        self.term_first_index = first  # (reads wait for it to commit)
        self.append_times = AppendTimes(first, now)  # (a follower's lag in time: the age of what it lacks)
        if first <= s.end_index:
            self.append_times.record(first, now)
        self.dispatchers: dict[str, Dispatcher] = {}
        self.pending: deque[Proposal] = deque()
        self.heartbeat_due: dict[str, int] = {}
        self.peer_ack_at: dict[str, int] = {}
        self.answered_at: dict[str, int] = {}  # when each peer last answered in this term
        self.transfer: Transfer | None = None

    def start(self, now: int) -> None:
        """The first moves of a new leader: its own copy, a dispatcher per member, a commit
        (a pending config change finishes with this term's first entry) and a heartbeat."""
        self.ack_self()
        for p in self.roster.others():
            self.add_dispatcher(p, now)
        self.advance_commit()
        if self.active:  # (a commit that leaves this node out of the voters steps it down)
            self.tick(now)

    def step_down(self) -> None:
        """Leadership ends: the reads waiting for it and every proposal still waiting fail."""
        self.active = False
        self.reads.fail(Code.NOT_LEADER, "leadership changed before the read was confirmed")
        while self.pending:
            self.outbox.finish(self.pending.popleft(), Code.TERM_CHANGED,
                               "leadership changed before the entry committed")

    # -- time -------------------------------------------------------------------------
    def tick(self, now: int) -> None:
        c, roster = self.cfg, self.roster
        members = roster.current
        alive = int(roster.is_voter()) + sum(1 for p in roster.voters_but_me()
                                             if now - self.peer_ack_at.get(p, now) < c.leader_lost_ms)
        if alive < members.quorum:
            self.outbox.note(f"heard from only {alive} of {len(members.voters)} voters in {c.leader_lost_ms} ms; "
                             "stepping down")
            self.follow(now, self.member.term, None)
            return
        if not c.never_lead:  # (a never-lead leader writes nothing: no config entry either)
            self.reconfig.promote_learners(self, now)
        for p in roster.others():
            if now >= self.heartbeat_due.get(p, now):
                self.heartbeat(p, now)
        self.progress_transfer(now)
        self.pump(now)

    def heartbeat(self, p: str, now: int, read_round: int = 0) -> None:
        """A heartbeat to ``p`` now (one of a read round, reads.py, when ``read_round``)."""
        c = self.cfg
        self.heartbeat_due[p] = now + c.heartbeat_interval_ms
        self.outbox.send(p, HeartBeatRequest(c.group, c.self_id, self.term, read_round=read_round, sent_at=now))

    def expire(self, now: int) -> None:
        """What times out on a leader: proposals, then linearizable reads (whose rounds are
        retried meanwhile)."""
        while self.pending and self.pending[0].deadline <= now:
            self.outbox.finish(self.pending.popleft(), Code.WAIT_QUORUM_ACK_TIMEOUT,
                               f"no quorum acknowledged the entry within {self.cfg.max_wait_ack_ms} ms")
        self.reads.expire(now)
        self.reads.retry_rounds(now)

    # -- replication ------------------------------------------------------------------
    def pump(self, now: int) -> None:
        if not self.active:
            return
        outbox = self.outbox
        committed = self.log.committed_index
        damaged = -1
        for p, d in self.dispatchers.items():
            for req in d.poll(now, committed):
                outbox.send(p, req)
            if d.said:
                for text in d.take_said():
                    outbox.note(text)
            if d.damaged_at > committed:
                damaged = d.damaged_at if damaged < 0 else min(damaged, d.damaged_at)
            d.damaged_at = -1
        if damaged >= 0:
            self.damage_met(damaged, now)

    def damage_met(self, index: int, now: int) -> None:
        """A follower needs entry ``index``, which our copy of fails its checks, and it is not
        committed. Nothing repairs it: the scrub mends committed entries only, and while we lead
        no follower gets past it, so every append would wait for a quorum until it timed out.
        It was never acknowledged to a client (nothing past the commit index is), so we cut it
        and what follows it from our log and step down: a new term starts, and its leader
        (which holds the entry, if a majority does: the vote rules see to that) goes on. We
        must not go on leading in this term: a follower may hold a sound copy we do not know
        of, which an entry we wrote again at ``index`` in the same term would contradict."""
        s, say = self.log, self.outbox.note
        if index <= s.committed_index or index > s.end_index:
            return
        try:
            s.get(index, checked=True)
            return  # (it reads sound now: repaired meanwhile)
        except StoreCorruptError as exc:
            why = str(exc)
        except StoreError:
            return  # (not damage: a read that failed; the dispatcher tries again)
        end = s.end_index
        try:
            s.truncate(index, force=True)
        except StoreError as exc:
            say(f"entry {index} is damaged here and not committed, and cutting it failed: {exc}")
            return
        say(f"entry {index} is damaged here and not committed (commit index {s.committed_index}), so no "
                  f"follower can be sent it: cut entries {index}..{end} (never acknowledged to a client) and "
            f"stepping down so that a new term goes on without them ({why})",
            event="truncation", from_index=index, to_index=end, leader=self.cfg.self_id,
            term=self.member.term, end_index=s.end_index)
        self.follow(now, self.member.term, None)
        self.reconfig.log_changed(())  # (a config entry cut away un-does its change)

    def ack_self(self) -> None:
        """The leader's own copy counts once it meets the flush policy: at once (async: the
        page cache), or once fsynced (sync)."""
        term, end = self.member.term, self.log.end_index
        if self.cfg.flush != "sync":
            self.quorum.ack(self.cfg.self_id, term, end)
            return
        if self.sync is None:
            self.flush()
            self._synced(term, end)
        else:
            self.sync(lambda: self._synced(term, end))

    def _synced(self, term: int, end: int) -> None:
        if self.active and self.member.term == term:
            if self.quorum.ack(self.cfg.self_id, term, end):
                self.advance_commit()

    def advance_commit(self) -> None:
        if not self.active:
            return
        q = self.quorum.advance()
        if q is None:
            return
        now, configs = self.clock.now, self.roster.configs
        self.log.set_committed(q)
        self.reads.commit_advanced(self, now)
        while self.pending and self.pending[0].last_index <= q:
            self.outbox.finish(self.pending.popleft(), Code.SUCCESS)
        if not self.roster.is_voter() and configs.last_index <= q:
            self.outbox.note(f"config entry {configs.last_index}, which leaves this node out of the voters, is "
                             "committed: stepping down")
            self.follow(now, self.member.term, None)

    def term_committed(self) -> bool:
        return self.log.committed_index >= self.term_first_index

    def add_dispatcher(self, p: str, now: int) -> None:
        c, roster = self.cfg, self.roster
        self.dispatchers[p] = Dispatcher(p, c.group, c.self_id, self.term, self.log, c, self.quorum, now,
                                         java=p in roster.java_peers, snapshots=self.applier(),
                                         configs=roster.configs)
        self.peer_ack_at[p] = now
        self.heartbeat_due[p] = now

    def follow_members(self, new, now: int) -> None:
        """The members changed (``new``): count its voters, replicate to its members."""
        self.quorum.set_voters(list(new.voters))
        for p in list(self.dispatchers):
            if p not in new.members:
                del self.dispatchers[p]
                self.peer_ack_at.pop(p, None)
                self.heartbeat_due.pop(p, None)
        for p in self.roster.others():
            if p not in self.dispatchers:
                self.add_dispatcher(p, now)
        if self.transfer is not None and self.transfer.target not in new.voters:
            self.outbox.note(f"leadership transfer to {self.transfer.target} given up: it is no voter now")
            self.transfer = None

    # -- answers from followers -------------------------------------------------------
    def on_response(self, peer: str, req, resp, now: int) -> None:
        """``peer`` answered ``req`` of this term."""
        self.answered_at[peer] = now
        if getattr(resp, "code", None) in (Code.SUCCESS, Code.INCONSISTENT_STATE, Code.INCONSISTENT_INDEX):
            self.peer_ack_at[peer] = now
        if isinstance(req, HeartBeatRequest) and resp.code == Code.SUCCESS:
            self.reads.heartbeat_answered(peer, req, resp, now)
        if isinstance(req, HeartBeatRequest) and resp.code == Code.TERM_NOT_READY:
            # a Java member still moving to our term (it voted for us as a candidate): beat again soon
            self.heartbeat_due[peer] = min(self.heartbeat_due.get(peer, now), now + VOTE_AGAIN_MS)
        if isinstance(req, DISPATCHED):
            d = self.dispatchers.get(peer)
            if d is not None:
                d.on_response(req, resp, now)
                self.advance_commit()
                self.pump(now)

    def on_failure(self, peer: str, req, why: str, now: int) -> None:
        d = self.dispatchers.get(peer) if isinstance(req, DISPATCHED) else None
        if d is not None:
            d.on_failure(req, now, why)

    def on_peer_lost(self, peer: str, now: int) -> None:
        d = self.dispatchers.get(peer)
        if d is not None:
            d.lost(now)

    # -- proposals --------------------------------------------------------------------
    def propose(self, p: Proposal, bodies, now: int) -> Proposal:
        """Append ``bodies`` (see RaftCore.propose): ``p`` refused, or waiting for the quorum."""
        c, compaction, s = self.cfg, self.compaction, self.log
        if c.never_lead:
            target = self.transfer.target if self.transfer is not None else None
            p.code, p.leader_id = Code.NOT_LEADER, target
            p.remark = (f"{c.self_id} never leads: it leads only to hand leadership to "
                        f"{target or 'a voter that catches up'}")
            return p
        if not bodies:
            p.code, p.remark = Code.REQUEST_WITH_EMPTY_BODYS, "nothing to append"
            return p
        if self.transfer is not None:
            p.code, p.remark = Code.LEADER_TRANSFERRING, f"handing leadership to {self.transfer.target}"
            return p
        if len(self.pending) >= c.max_pending_requests:
            p.code, p.remark = Code.LEADER_PENDING_FULL, f"{len(self.pending)} appends wait for the quorum"
            return p
        if compaction.disk_full is not None:
            p.code, p.remark = Code.DISK_FULL, compaction.disk_full
            return p
        try:
            appended = s.append_leader(bodies if isinstance(bodies, Sequence) else list(bodies),
                                       self.member.term, MAGIC_NORMAL)
        except StoreIOError as exc:
            # the store keeps a batch whole or not at all: a full disk refuses it cleanly
            full = is_disk_full(exc)
            p.code, p.remark = (Code.DISK_FULL, f"disk full: {exc}") if full else (Code.DISK_ERROR, str(exc))
            compaction.appends_refused(p.code, exc)
            return p
        except StoreError as exc:
            p.code, p.remark = Code.UNEXPECTED_ARGUMENT, str(exc)
            return p
        compaction.appends_taken()
        return self.track(p, appended, now)

    def track(self, p: Proposal, appended, now: int) -> Proposal:
        """``p``'s entries are appended: it waits for the quorum (or its deadline)."""
        p.appended, p.first_index, p.last_index = appended, appended[0].index, appended[-1].index
        p.deadline = now + self.cfg.max_wait_ack_ms
        self.append_times.record(p.last_index, now)
        self.pending.append(p)
        self.ack_self()
        self.advance_commit()
        self.pump(now)
        return p

    # -- the node's and the operator's calls, as a leader answers them (notleading.py: as others do)
    def change_members(self, kind: str, node: str, address: str | None, now: int) -> Proposal:
        return self.reconfig.change_members(kind, node, address, now, self)

    def read_index(self, now: int, joins: int):
        return self.reads.read_index(now, joins, self)

    def refuse_operator(self, peer: str | None) -> tuple[Code, str] | None:
        members = self.roster.current.members
        if peer is None:
            return None
        if peer not in members:
            return Code.UNKNOWN_MEMBER, f"{peer!r} is not a member ({', '.join(members)})"
        if peer == self.cfg.self_id:
            return Code.UNEXPECTED_ARGUMENT, f"{peer} is the leader itself"
        return None

    def speak_java(self, peer: str) -> None:
        d = self.dispatchers.get(peer)
        if d is not None:
            d.speak_java()

    def describe(self, now: int) -> dict:
        return {"peers": [d.describe(now) for d in self.dispatchers.values()]}

    # -- the followers, as operators see them -------------------------------------------
    def peer_alive(self, peer: str, now: int) -> bool:
        d = self.dispatchers.get(peer)
        return d is not None and d.last_ack_at is not None and now - d.last_ack_at < self.cfg.leader_lost_ms

    def peer_reachable(self, peer: str, now: int) -> bool:
        """Alive, and nothing sent to it has failed since it last answered (a member stopped
        a moment ago answered recently, but its connection is gone)."""
        return self.peer_alive(peer, now) and self.dispatchers[peer].lost_at is None

    def live_watermarks(self, now: int) -> dict[str, int]:
        """What each live follower needs next (the first entry it lacks)."""
        return {p: d.watermark + 1 for p, d in self.dispatchers.items() if self.peer_alive(p, now)}

    def watermarks(self, now: int) -> list[dict]:
        """One row per member, the leader's first: what it has and what each follower
        acknowledged (see Dispatcher.describe), with the leader's end and commit index."""
        s, c, members = self.log, self.cfg, self.roster.current
        common = {"leader": c.self_id, "term": self.member.term, "leader_end_index": s.end_index,
                  "committed_index": s.committed_index}
        me = members.members.get(c.self_id) or c.peers[c.self_id]
        rows = [{"peer": c.self_id, "address": me.address, "member": members.role_of(c.self_id) or "removed",
                 "alive": True, "state": "LEADER",
                 "watermark": s.end_index, "next_index": s.end_index + 1, "lag_entries": 0, "lag_bytes": 0,
                 "in_flight": 0, "in_flight_bytes": 0, "ms_since_ack": 0, "lag_ms": 0, "last_error": "", "note": "",
                 **common}]
        if c.never_lead:
            target = self.transfer.target if self.transfer is not None else "a voter, once one answers"
            rows[0]["note"] = f"never leads: handing leadership to {target}"
        for p, d in self.dispatchers.items():
            row = d.describe(now)
            row = {"peer": p, "address": members.members[p].address, "member": members.role_of(p),
                   "alive": self.peer_alive(p, now), **row, **common,
                   "lag_ms": self.append_times.age_ms(d.watermark + 1, now) if row["lag_entries"] else 0}
            rows.append({k: row[k] for k in rows[0]})  # every row in the leader row's field order
        return rows

    def pause_peer(self, peer: str, below: int, why: str) -> bool:
        d = self.dispatchers.get(peer)
        if d is None:
            return False
        d.pause(below, why)
        self.outbox.note(f"replication to {peer} paused: {why}")
        return True

    def compare_peer(self, peer: str, index: int, why: str, now: int) -> None:
        d = self.dispatchers.get(peer)
        if d is None:
            return
        d.compare_from(index, why)
        self.outbox.note(f"replication to {peer} compares again from {index}: {why}")
        self.pump(now)

    def cut_off(self, peer: str, note: str) -> None:
        """Retention deleted entries ``peer`` needs: say so in its row."""
        d = self.dispatchers.get(peer)
        if d is not None:
            d.set_note(note)

    # -- leadership transfer ----------------------------------------------------------
    def on_transfer(self, req: LeadershipTransferRequest, now: int) -> LeadershipTransferResponse:
        """An operator asks this leader to hand leadership to ``req.transferee``."""
        c = self.cfg
        term = self.member.term
        if c.never_lead and self.transfer is not None:
            return LeadershipTransferResponse(term, Code.LEADER_TRANSFERRING,
                                              f"{c.self_id} never leads: handing leadership to {self.transfer.target}")
        if req.transferee not in self.roster.current.voters or req.transferee == c.self_id:
            return LeadershipTransferResponse(term, Code.UNKNOWN_MEMBER, f"cannot hand over to {req.transferee!r}")
        if not self.peer_alive(req.transferee, now):
            return LeadershipTransferResponse(term, Code.TAKE_LEADERSHIP_FAILED,
                                              f"{req.transferee} has not answered for {c.leader_lost_ms} ms")
        if self.transfer is not None:
            return LeadershipTransferResponse(term, Code.LEADER_TRANSFERRING,
                                              f"already handing leadership to {self.transfer.target}")
        self.start_transfer(req.transferee, now)
        return LeadershipTransferResponse(term)

    def start_transfer(self, target: str, now: int) -> None:
        self.transfer = Transfer(target, now + self.cfg.max_wait_ack_ms)
        self.outbox.note(f"handing leadership to {target}: new appends wait until it has caught up")
        self.progress_transfer(now)

    def progress_transfer(self, now: int) -> None:
        c, t, s = self.cfg, self.transfer, self.log
        if t is None and c.never_lead:
            target = self.handover_target(now)
            if target is not None:
                self.start_transfer(target, now)
            return
        if t is None:
            p = c.preferred_leader
            d = self.dispatchers.get(p) if p else None
            if d is not None and d.watermark == s.end_index and not self.pending:
                self.start_transfer(p, now)  # the preferred leader is caught up: hand over
            return
        if now >= t.deadline:
            self.outbox.note(f"leadership transfer to {t.target} timed out; staying leader")
            self.transfer = None
            return
        d = self.dispatchers[t.target]
        if not t.asked and d.watermark == s.end_index:
            t.asked = True
            self.reads.void_lease()  # (its voters will grant it although this leader is alive)
            self.outbox.send(t.target, LeadershipTransferRequest(c.group, c.self_id, t.target, self.member.term,
                                                                 take=True, end_index=s.end_index))

    def handover_target(self, now: int) -> str | None:
        """The voter a never-lead leader hands leadership to: of those that answer, the one
        nearest the end of the log (the transfer asks it once it has everything)."""
        lost = self.cfg.leader_lost_ms  # (alive: it answered a heartbeat or a push lately)
        voters = self.roster.current.voters
        alive = [(d.watermark, p) for p, d in self.dispatchers.items() if p in voters
                 and p != self.cfg.self_id and p in self.answered_at and now - self.answered_at[p] < lost]
        return max(alive)[1] if alive else None
