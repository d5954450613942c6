"""The membership side of a node's deciding logic (RaftCore): how its members change, on a
follower as its log changes and on a leader as it changes them. A part of RaftCore with no
state of its own: the members are the Roster's ``configs`` (cluster/raft/membership.py has
the rules), and what a leader replicates to is its Leader part's (leading.py).

- Members are the node's Configs (the last config entry in its log, else its base). The
  leader replicates to every member, counts only voters (Quorum.set_voters follows each
  change the moment its entry is appended), and stands down once an entry that leaves it
  out of the voters commits.
- A follower learns config entries from the leader's pushes (``config_at`` names them),
  forgets those cut from its log (:meth:`log_changed` reconciles after every change to
  the log), and takes the leader's member list when its log begins again at the leader's
  first entry (a cut back, an installed snapshot).
- The leader adds a learner or removes a member on an operator's request
  (:meth:`change_members`), and promotes a learner that has caught up
  (:meth:`promote_learners`): one change at a time, never leaving no live majority.
"""

from __future__ import annotations

from store.errors import StoreError, is_disk_full
from store.format import MAGIC_CONFIG

from .config import ConfigError
from .membership import Membership, MembershipError
from .proposal import Proposal
from .rpc import Code


class Reconfiguration:
    """Membership changes. It reads the settings, the member's state, the log and the time of
    the call (``clock``); it changes the members through ``roster`` (its Configs) and says
    through ``outbox``; ``changed(new, now)`` is told of every change (the role follows it:
    a leader replicates to the new members and counts the new voters)."""

    def __init__(self, cfg, member, log, roster, outbox, clock, changed) -> None:
        self.cfg, self.member, self.log, self.roster, self.outbox, self.clock = cfg, member, log, roster, outbox, clock
        self.changed = changed

    def members_changed(self, old: Membership, now: int) -> None:
        new = self.roster.current
        self.outbox.note(f"members now: {new.describe()} (were: {old.describe()})")
        self.changed(new, now)

    def log_changed(self, config_at) -> None:
        """After the log changed under a follower (appended, truncated, cut, its head
        deleted): the config entries it still holds, and those ``config_at`` names (the
        leader says which entries of a push are config entries)."""
        old, s, configs = self.roster.current, self.log, self.roster.configs
        if configs.reconcile(s):
            self._keep_base()
        for i in config_at:
            if not s.begin_index <= i <= s.end_index:
                continue
            e = s.get(i)
            if e.magic != MAGIC_CONFIG:
                continue
            try:
                configs.add(i, e.term, Membership.from_body(e.body))
            except MembershipError as exc:
                self.outbox.note(f"config entry {i} ignored: {exc}")
        now = self.roster.current
        if now is not old and now != old:  # (most pushes change nothing: no comparison of the lists)
            self.members_changed(old, self.clock.now)

    def begin_again(self, members: bytes, base_index: int) -> None:
        """The log began again at the leader's first entry (a cut back, a snapshot): the
        membership in force before it is the leader's."""
        roster = self.roster
        if not members:
            return
        try:
            base = Membership.from_body(members)
        except MembershipError as exc:
            self.outbox.note(f"the leader's member list ignored: {exc}")
            return
        old = roster.current
        roster.configs.reset(base, base_index)
        self._keep_base()
        if roster.current != old:
            self.members_changed(old, self.clock.now)

    def _keep_base(self) -> None:
        roster = self.roster
        if roster.save_base is not None:
            try:
                roster.save_base(roster.configs.base, roster.configs.base_index)
            except OSError as exc:
                self.outbox.note(f"the member list in force at the log's beginning is not on disk: {exc}")

    # -- a leader's changes -----------------------------------------------------------
    def promote_learners(self, leader, now: int) -> None:
        """A learner that caught up to within learner_catch_up_entries (and answers) becomes
        a voter, one change at a time."""
        members, s, c = self.roster.current, self.log, self.cfg
        if not members.learners or self.roster.configs.last_index > s.committed_index or leader.transfer is not None:
            return
        for p in members.learners:
            d = leader.dispatchers.get(p)
            if d is None or not leader.peer_alive(p, now) or s.end_index - d.watermark > c.learner_catch_up_entries:
                continue
            new = members.promoting(p)
            live = sum(1 for v in new.voters if v == c.self_id or leader.peer_alive(v, now))
            if live >= new.quorum:
                self._append_config(leader, new, f"{p} caught up (lags {s.end_index - d.watermark} entries): a voter now",
                                    now)
            return

    def change_members(self, kind: str, node: str, address: str | None, now: int, leader) -> Proposal:
        """See RaftCore.change_members: on ``leader`` (leading.py Leader)."""
        m, s, c, roster = self.member, self.log, self.cfg, self.roster
        p = Proposal(1, m.term, leader_id=m.leader_id)
        members, configs = roster.current, roster.configs
        refusal = None
        if c.never_lead:
            refusal = Code.NOT_LEADER, f"{c.self_id} never leads: it writes no config entry"
        elif roster.java_peers:
            refusal = Code.UNSUPPORTED, ("the group has Java DLedger members, which cannot read config entries "
                                         f"({', '.join(sorted(roster.java_peers))})")
        elif configs.last_index > s.committed_index:
            refusal = Code.ILLEGAL_MEMBER_STATE, (f"another change is pending: config entry "
                                                  f"{configs.last_index} ({members.describe()}) is not "
                                                  f"committed yet")
        elif leader.transfer is not None:
            refusal = Code.LEADER_TRANSFERRING, f"handing leadership to {leader.transfer.target}"
        else:
            try:
                new = members.adding_learner(node, address or "") if kind == "add" else members.removing(node)
            except (MembershipError, ConfigError) as exc:
                refusal = Code.UNEXPECTED_ARGUMENT, str(exc)
            else:
                live = [v for v in new.voters if v == c.self_id or leader.peer_reachable(v, now)]
                if len(live) < new.quorum:
                    refusal = Code.ILLEGAL_MEMBER_STATE, (
                        f"{'adding' if kind == 'add' else 'removing'} {node} would leave {len(live)} live voters "
                        f"of {len(new.voters)} ({', '.join(live) or 'none'}): no majority")
        if refusal is not None:
            p.code, p.remark = refusal
            return p
        why = f"{node} joins as a learner at {address}" if kind == "add" else f"{node} leaves"
        return self._append_config(leader, new, why, now)

    def _append_config(self, leader, new: Membership, why: str, now: int) -> Proposal:
        m = self.member
        p = Proposal(1, m.term, leader_id=m.leader_id)
        try:
            appended = self.log.append_leader([new.body()], m.term, MAGIC_CONFIG)
        except StoreError as exc:
            p.code, p.remark = (Code.DISK_FULL if is_disk_full(exc) else Code.DISK_ERROR), str(exc)
            return p
        old = self.roster.current
        idx = appended[0].index
        self.roster.configs.add(idx, m.term, new)
        self.outbox.note(f"config entry {idx}: {why}")
        self.members_changed(old, now)
        return leader.track(p, appended, now)
