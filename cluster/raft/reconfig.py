"""The membership side of a node's deciding logic (RaftCore): who its members are, and
the leader's changes of them. A part of RaftCore (a base class of it, so the simulator
drives it through the same object); the rules are in cluster/raft/membership.py.

- Members are the node's Configs (the last config entry in its log, else its base). The
  leader replicates to every member, counts only voters (Quorum.set_voters follows each
  change the moment its entry is appended), and stands down once an entry that leaves it
  out of the voters commits.
- A follower learns config entries from the leader's pushes (``config_at`` names them),
  forgets those cut from its log (:meth:`_log_changed` reconciles after every change to
  the log), and takes the leader's member list when its log begins again at the leader's
  first entry (a cut back, an installed snapshot).
- The leader adds a learner or removes a member on an operator's request
  (:meth:`change_members`), and promotes a learner that has caught up
  (:meth:`_promote_learners`): one change at a time, never leaving no live majority.
"""

from __future__ import annotations

from store.errors import StoreError, is_disk_full
from store.format import MAGIC_CONFIG

from .config import ConfigError
from .dispatcher import Dispatcher
from .member import Role
from .membership import Membership, MembershipError
from .proposal import Proposal
from .rpc import Code


class Reconfiguration:
    @property
    def members(self) -> Membership:
        return self.configs.current

    def _others(self) -> list[str]:
        """Every other member, voter or learner (the leader replicates to all of them)."""
        return [p for p in self.members.members if p != self.cfg.self_id]

    def _voters_but_me(self) -> list[str]:
        return [p for p in self.members.voters if p != self.cfg.self_id]

    def _is_voter(self) -> bool:
        return self.cfg.self_id in self.members.voters

    def _add_dispatcher(self, p: str, now: int) -> None:
        c = self.cfg
        self.dispatchers[p] = Dispatcher(p, c.group, c.self_id, self.member.term, self.store, c, self.quorum, now,
                                         java=p in self.java_peers, snapshots=self.applier, configs=self.configs)
        self.peer_ack_at[p] = now
        self.heartbeat_due[p] = now

    def _members_changed(self, old: Membership, now: int) -> None:
        new = self.members
        self._note(f"members now: {new.describe()} (were: {old.describe()})")
        if self.member.role != Role.LEADER:
            return
        self.quorum.set_voters(list(new.voters))
        for p in list(self.dispatchers):
            if p not in new.members:
                del self.dispatchers[p]
                self.peer_ack_at.pop(p, None)
                self.heartbeat_due.pop(p, None)
        for p in self._others():
            if p not in self.dispatchers:
                self._add_dispatcher(p, now)
        if self.transfer is not None and self.transfer.target not in new.voters:
            self._note(f"leadership transfer to {self.transfer.target} given up: it is no voter now")
            self.transfer = None

    def _log_changed(self, config_at) -> None:
        """After the log changed under a follower (appended, truncated, cut, its head
        deleted): the config entries it still holds, and those ``config_at`` names (the
        leader says which entries of a push are config entries)."""
        old, s = self.members, self.store
        if self.configs.reconcile(s):
            self._keep_base()
        for i in config_at:
            if not s.begin_index <= i <= s.end_index:
                continue
            e = s.get(i)
            if e.magic != MAGIC_CONFIG:
                continue
            try:
                self.configs.add(i, e.term, Membership.from_body(e.body))
            except MembershipError as exc:
                self._note(f"config entry {i} ignored: {exc}")
        if self.members != old:
            self._members_changed(old, self.now)

    def _begin_again(self, members: bytes, base_index: int) -> None:
        """The log began again at the leader's first entry (a cut back, a snapshot): the
        membership in force before it is the leader's."""
        if not members:
            return
        try:
            base = Membership.from_body(members)
        except MembershipError as exc:
            self._note(f"the leader's member list ignored: {exc}")
            return
        old = self.members
        self.configs.reset(base, base_index)
        self._keep_base()
        if self.members != old:
            self._members_changed(old, self.now)

    def _keep_base(self) -> None:
        if self.save_base is not None:
            try:
                self.save_base(self.configs.base, self.configs.base_index)
            except OSError as exc:
                self._note(f"the member list in force at the log's beginning is not on disk: {exc}")

    def _promote_learners(self, now: int) -> None:
        """A learner that caught up to within learner_catch_up_entries (and answers) becomes
        a voter, one change at a time."""
        members, s = self.members, self.store
        if not members.learners or self.configs.last_index > s.committed_index or self.transfer is not None:
            return
        for p in members.learners:
            d = self.dispatchers.get(p)
            if d is None or not self._peer_alive(p, now) or s.end_index - d.watermark > self.cfg.learner_catch_up_entries:
                continue
            new = members.promoting(p)
            live = sum(1 for v in new.voters if v == self.cfg.self_id or self._peer_alive(v, now))
            if live >= new.quorum:
                self._append_config(new, f"{p} caught up (lags {s.end_index - d.watermark} entries): a voter now", now)
            return

    def change_members(self, kind: str, node: str, address: str | None, now: int) -> Proposal:
        """An operator's change (``add``: ``node`` at ``address`` joins as a learner, and is
        promoted once caught up; ``remove``: ``node`` leaves), as a config entry. Finished at
        once when refused, else when the entry commits (or times out), as :meth:`propose`."""
        self.now = now
        m, s = self.member, self.store
        p = Proposal(1, m.term, leader_id=m.leader_id)
        members = self.members
        refusal = None
        if m.role != Role.LEADER:
            refusal = Code.NOT_LEADER, f"leader is {m.leader_id or 'unknown'}"
        elif self.cfg.never_lead:
            refusal = Code.NOT_LEADER, f"{self.cfg.self_id} never leads: it writes no config entry"
        elif self.java_peers:
            refusal = Code.UNSUPPORTED, ("the group has Java DLedger members, which cannot read config entries "
                                         f"({', '.join(sorted(self.java_peers))})")
        elif self.configs.last_index > s.committed_index:
            refusal = Code.ILLEGAL_MEMBER_STATE, (f"another change is pending: config entry "
                                                  f"{self.configs.last_index} ({members.describe()}) is not "
                                                  f"committed yet")
        elif self.transfer is not None:
            refusal = Code.LEADER_TRANSFERRING, f"handing leadership to {self.transfer.target}"
        else:
            try:
                new = members.adding_learner(node, address or "") if kind == "add" else members.removing(node)
            except (MembershipError, ConfigError) as exc:
                refusal = Code.UNEXPECTED_ARGUMENT, str(exc)
            else:
                live = [v for v in new.voters if v == self.cfg.self_id or self._peer_reachable(v, now)]
                if len(live) < new.quorum:
                    refusal = Code.ILLEGAL_MEMBER_STATE, (
                        f"{'adding' if kind == 'add' else 'removing'} {node} would leave {len(live)} live voters "
                        f"of {len(new.voters)} ({', '.join(live) or 'none'}): no majority")
        if refusal is not None:
            p.code, p.remark = refusal
            return p
        why = f"{node} joins as a learner at {address}" if kind == "add" else f"{node} leaves"
        return self._append_config(new, why, now)

    def _append_config(self, new: Membership, why: str, now: int) -> Proposal:
        m = self.member
        p = Proposal(1, m.term, leader_id=m.leader_id)
        try:
            appended = self.store.append_leader([new.body()], m.term, MAGIC_CONFIG)
        except StoreError as exc:
            p.code, p.remark = (Code.DISK_FULL if is_disk_full(exc) else Code.DISK_ERROR), str(exc)
            return p
        old = self.members
        idx = appended[0].index
        self.configs.add(idx, m.term, new)
        self._note(f"config entry {idx}: {why}")
        self._members_changed(old, now)
        return self._track(p, appended, now)
