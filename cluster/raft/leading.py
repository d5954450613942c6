"""The leader's part of a node's deciding logic: made when the node becomes leader, dropped
when it steps down, so what only a leader has (a dispatcher per follower, the proposals
waiting for the quorum, the quorum itself, a leadership transfer under way) cannot outlive
its term. RaftCore (core.py) holds it as ``core.leader`` (None on a follower or candidate)
and runs its :meth:`Leader.tick` while it leads. Each follower's own replication is its
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
    """One term's leadership of ``core`` (RaftCore), from the first entry of its term, ``first``."""

    def __init__(self, core, first: int, said: str, now: int) -> None:
        c, s = core.cfg, core.store
        self.core = core
        self.term = core.member.term
        self.said = said  # how this leadership began (its no-op), for the state line
        self.quorum = Quorum(list(core.members.voters), c.self_id, self.term, first, s.committed_index)
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

    @property
    def leads(self) -> bool:
        """Is this still the core's leadership (a callback may outlive it)?"""
        return self.core.leader is self

    def start(self, now: int) -> None:
        """The first moves of a new leader: its own copy, a dispatcher per member, a commit
        (a pending config change finishes with this term's first entry) and a heartbeat."""
        self.ack_self()
        for p in self.core.others():
            self.add_dispatcher(p, now)
        self.advance_commit()
        if self.leads:  # (a commit that leaves this node out of the voters steps it down)
            self.tick(now)

    def step_down(self) -> None:
        """Leadership ends: every proposal still waiting fails."""
        while self.pending:
            self.core.finish(self.pending.popleft(), Code.TERM_CHANGED, "leadership changed before the entry committed")

    # -- time -------------------------------------------------------------------------
    def tick(self, now: int) -> None:
        core, c = self.core, self.core.cfg
        members = core.members
        alive = int(core.is_voter()) + sum(1 for p in core.voters_but_me()
                                           if now - self.peer_ack_at.get(p, now) < c.leader_lost_ms)
        if alive < members.quorum:
            core.note(f"heard from only {alive} of {len(members.voters)} voters in {c.leader_lost_ms} ms; "
                      "stepping down")
            core.become_follower(now, core.member.term, None)
            return
        if not c.never_lead:  # (a never-lead leader writes nothing: no config entry either)
            core.reconfig.promote_learners(self, now)
        for p in core.others():
            if now >= self.heartbeat_due.get(p, now):
                self.heartbeat(p, now)
        self.progress_transfer(now)
        self.pump(now)

    def heartbeat(self, p: str, now: int, read_round: int = 0) -> None:
        """A heartbeat to ``p`` now (one of a read round, reads.py, when ``read_round``)."""
        c = self.core.cfg
        self.heartbeat_due[p] = now + c.heartbeat_interval_ms
        self.core.send(p, HeartBeatRequest(c.group, c.self_id, self.term, read_round=read_round, sent_at=now))

    def expire_proposals(self, now: int) -> None:
        while self.pending and self.pending[0].deadline <= now:
            self.core.finish(self.pending.popleft(), Code.WAIT_QUORUM_ACK_TIMEOUT,
                             f"no quorum acknowledged the entry within {self.core.cfg.max_wait_ack_ms} ms")

    # -- replication ------------------------------------------------------------------
    def pump(self, now: int) -> None:
        if not self.leads:
            return
        core = self.core
        committed = core.store.committed_index
        damaged = -1
        for p, d in self.dispatchers.items():
            for req in d.poll(now, committed):
                core.send(p, req)
            if d.said:
                for text in d.take_said():
                    core.note(text)
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
        core, s = self.core, self.core.store
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
            core.note(f"entry {index} is damaged here and not committed, and cutting it failed: {exc}")
            return
        core.note(f"entry {index} is damaged here and not committed (commit index {s.committed_index}), so no "
                  f"follower can be sent it: cut entries {index}..{end} (never acknowledged to a client) and "
                  f"stepping down so that a new term goes on without them ({why})",
                  event="truncation", from_index=index, to_index=end, leader=core.cfg.self_id,
                  term=core.member.term, end_index=s.end_index)
        core.become_follower(now, core.member.term, None)
        core.reconfig.log_changed(())  # (a config entry cut away un-does its change)

    def ack_self(self) -> None:
        """The leader's own copy counts once it meets the flush policy: at once (async: the
        page cache), or once fsynced (sync)."""
        core = self.core
        term, end = core.member.term, core.store.end_index
        if core.cfg.flush != "sync":
            self.quorum.ack(core.cfg.self_id, term, end)
            return
        if core.syncer is None:
            core.flush()
            self._synced(term, end)
        else:
            core.syncer(lambda: self._synced(term, end))

    def _synced(self, term: int, end: int) -> None:
        if self.leads and self.core.member.term == term:
            if self.quorum.ack(self.core.cfg.self_id, term, end):
                self.advance_commit()

    def advance_commit(self) -> None:
        core = self.core
        if not self.leads:
            return
        q = self.quorum.advance()
        if q is None:
            return
        core.store.set_committed(q)
        core.reads.commit_advanced(self, core.now)
        while self.pending and self.pending[0].last_index <= q:
            core.finish(self.pending.popleft(), Code.SUCCESS)
        if not core.is_voter() and core.configs.last_index <= q:
            core.note(f"config entry {core.configs.last_index}, which leaves this node out of the voters, is "
                      "committed: stepping down")
            core.become_follower(core.now, core.member.term, None)

    def term_committed(self) -> bool:
        return self.core.store.committed_index >= self.term_first_index

    def add_dispatcher(self, p: str, now: int) -> None:
        core, c = self.core, self.core.cfg
        self.dispatchers[p] = Dispatcher(p, c.group, c.self_id, self.term, core.store, c, self.quorum, now,
                                         java=p in core.java_peers, snapshots=core.applier, configs=core.configs)
        self.peer_ack_at[p] = now
        self.heartbeat_due[p] = now

    def follow_members(self, new, now: int) -> None:
        """The members changed (``new``): count its voters, replicate to its members."""
        core = self.core
        self.quorum.set_voters(list(new.voters))
        for p in list(self.dispatchers):
            if p not in new.members:
                del self.dispatchers[p]
                self.peer_ack_at.pop(p, None)
                self.heartbeat_due.pop(p, None)
        for p in core.others():
            if p not in self.dispatchers:
                self.add_dispatcher(p, now)
        if self.transfer is not None and self.transfer.target not in new.voters:
            core.note(f"leadership transfer to {self.transfer.target} given up: it is no voter now")
            self.transfer = None

    # -- answers from followers -------------------------------------------------------
    def on_response(self, peer: str, req, resp, now: int) -> None:
        """``peer`` answered ``req`` of this term."""
        self.answered_at[peer] = now
        if getattr(resp, "code", None) in (Code.SUCCESS, Code.INCONSISTENT_STATE, Code.INCONSISTENT_INDEX):
            self.peer_ack_at[peer] = now
        if isinstance(req, HeartBeatRequest) and resp.code == Code.SUCCESS:
            self.core.reads.heartbeat_answered(peer, req, resp, now)
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
        core, c = self.core, self.core.cfg
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
        if core.compaction.disk_full is not None:
            p.code, p.remark = Code.DISK_FULL, core.compaction.disk_full
            return p
        try:
            appended = core.store.append_leader(bodies if isinstance(bodies, Sequence) else list(bodies),
                                                core.member.term, MAGIC_NORMAL)
        except StoreIOError as exc:
            # the store keeps a batch whole or not at all: a full disk refuses it cleanly
            full = is_disk_full(exc)
            p.code, p.remark = (Code.DISK_FULL, f"disk full: {exc}") if full else (Code.DISK_ERROR, str(exc))
            core.compaction.appends_refused(p.code, exc)
            return p
        except StoreError as exc:
            p.code, p.remark = Code.UNEXPECTED_ARGUMENT, str(exc)
            return p
        core.compaction.appends_taken()
        return self.track(p, appended, now)

    def track(self, p: Proposal, appended, now: int) -> Proposal:
        """``p``'s entries are appended: it waits for the quorum (or its deadline)."""
        p.appended, p.first_index, p.last_index = appended, appended[0].index, appended[-1].index
        p.deadline = now + self.core.cfg.max_wait_ack_ms
        self.append_times.record(p.last_index, now)
        self.pending.append(p)
        self.ack_self()
        self.advance_commit()
        self.pump(now)
        return p

    # -- the followers, as operators see them -------------------------------------------
    def peer_alive(self, peer: str, now: int) -> bool:
        d = self.dispatchers.get(peer)
        return d is not None and d.last_ack_at is not None and now - d.last_ack_at < self.core.cfg.leader_lost_ms

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
        core = self.core
        s, c, members = core.store, core.cfg, core.members
        common = {"leader": c.self_id, "term": core.member.term, "leader_end_index": s.end_index,
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
        self.core.note(f"replication to {peer} paused: {why}")
        return True

    def compare_peer(self, peer: str, index: int, why: str, now: int) -> None:
        d = self.dispatchers.get(peer)
        if d is None:
            return
        d.compare_from(index, why)
        self.core.note(f"replication to {peer} compares again from {index}: {why}")
        self.pump(now)

    def cut_off(self, peer: str, note: str) -> None:
        """Retention deleted entries ``peer`` needs: say so in its row."""
        d = self.dispatchers.get(peer)
        if d is not None:
            d.set_note(note)

    # -- leadership transfer ----------------------------------------------------------
    def on_transfer(self, req: LeadershipTransferRequest, now: int) -> LeadershipTransferResponse:
        """An operator asks this leader to hand leadership to ``req.transferee``."""
        core, c = self.core, self.core.cfg
        term = core.member.term
        if c.never_lead and self.transfer is not None:
            return LeadershipTransferResponse(term, Code.LEADER_TRANSFERRING,
                                              f"{c.self_id} never leads: handing leadership to {self.transfer.target}")
        if req.transferee not in core.members.voters or req.transferee == c.self_id:
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
        self.transfer = Transfer(target, now + self.core.cfg.max_wait_ack_ms)
        self.core.note(f"handing leadership to {target}: new appends wait until it has caught up")
        self.progress_transfer(now)

    def progress_transfer(self, now: int) -> None:
        core, c, t = self.core, self.core.cfg, self.transfer
        if t is None and c.never_lead:
            target = self.handover_target(now)
            if target is not None:
                self.start_transfer(target, now)
            return
        if t is None:
            p = c.preferred_leader
            d = self.dispatchers.get(p) if p else None
            if d is not None and d.watermark == core.store.end_index and not self.pending:
                self.start_transfer(p, now)  # the preferred leader is caught up: hand over
            return
        if now >= t.deadline:
            core.note(f"leadership transfer to {t.target} timed out; staying leader")
            self.transfer = None
            return
        d = self.dispatchers[t.target]
        if not t.asked and d.watermark == core.store.end_index:
            t.asked = True
            core.reads.void_lease()  # (its voters will grant it although this leader is alive)
            core.send(t.target, LeadershipTransferRequest(c.group, c.self_id, t.target, core.member.term, take=True,
                                                          end_index=core.store.end_index))

    def handover_target(self, now: int) -> str | None:
        """The voter a never-lead leader hands leadership to: of those that answer, the one
        nearest the end of the log (the transfer asks it once it has everything)."""
        core = self.core
        lost = core.cfg.leader_lost_ms  # (alive: it answered a heartbeat or a push lately)
        alive = [(d.watermark, p) for p, d in self.dispatchers.items() if p in core.members.voters
                 and p != core.cfg.self_id and p in self.answered_at and now - self.answered_at[p] < lost]
        return max(alive)[1] if alive else None
