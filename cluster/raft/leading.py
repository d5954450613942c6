"""The leader's side of replication: proposals (client appends), the quorum's commit
index, and what operators see of and do to its followers. A part of RaftCore (core.py),
as a base class; each follower's own replication is its Dispatcher (dispatcher.py).

A proposal's entries are appended at once and wait in ``pending`` until the quorum's
commit index passes them (``_advance_commit``), their deadline passes, or leadership
changes. The leader's own copy counts once it meets the flush policy (``_ack_self``).
"""

from __future__ import annotations

from typing import Sequence

from store.errors import StoreError, StoreIOError, is_disk_full
from store.format import MAGIC_NORMAL

from .member import Role
from .proposal import Proposal
from .rpc import Code


class Leading:
    """Proposals, commit and the operator's view of the followers (a base of RaftCore)."""

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
        if self.reads_waiting and self._term_committed():
            self._term_entry_committed(self.now)
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
        if self.cfg.never_lead:
            target = self.transfer.target if self.transfer is not None else None
            p.code, p.leader_id = Code.NOT_LEADER, target
            p.remark = (f"{self.cfg.self_id} never leads: it leads only to hand leadership to "
                        f"{target or 'a voter that catches up'}")
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

    def _peer_alive(self, peer: str, now: int) -> bool:
        d = self.dispatchers.get(peer)
        return d is not None and d.last_ack_at is not None and now - d.last_ack_at < self.cfg.leader_lost_ms

    def _peer_reachable(self, peer: str, now: int) -> bool:
        """Alive, and nothing sent to it has failed since it last answered (a member stopped
        a moment ago answered recently, but its connection is gone)."""
        return self._peer_alive(peer, now) and self.dispatchers[peer].lost_at is None

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
        if c.never_lead:
            target = self.transfer.target if self.transfer is not None else "a voter, once one answers"
            rows[0]["note"] = f"never leads: handing leadership to {target}"
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
