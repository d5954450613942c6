"""A follower's answers to its leader's replication requests: pushes (PUSH, follower.py
FollowerLog stores them), snapshots (INSTALL_SNAPSHOT, install.py), and the byte-for-byte
compare's probes and repairs. A part of RaftCore (core.py), made with what it uses (see
:class:`Following`), which first takes the sender as its leader (RaftCore.accept_leader);
this part then keeps the members (reconfig.py) and the node's log lines in step with what
the log became.
"""

from __future__ import annotations

from . import install
from .rpc import Code, InstallSnapshotRequest, InstallSnapshotResponse, ProbeRequest, PushRequest, PushResponse, PushType


class Following:
    """The follower's side of the core. ``accept_leader(leader, term, now, heartbeat=False)``
    (RaftCore's) takes the sender as leader or says why not; ``follower`` (follower.py
    FollowerLog) stores what it sends into ``log``; ``reconfig`` and ``compaction`` keep the
    members and the snapshot limit in step; ``applier()`` installs snapshots (None: no
    state machine); notes go out through ``outbox``."""

    def __init__(self, member, log, follower, roster, outbox, reconfig, compaction, applier, accept_leader) -> None:
        self.member, self.log, self.follower, self.roster, self.outbox = member, log, follower, roster, outbox
        self.reconfig, self.compaction, self.applier, self.accept_leader = reconfig, compaction, applier, accept_leader
        self.receiving: tuple | None = None  # the snapshot arriving: (leader, term, index)

    def on_push(self, req: PushRequest, now: int) -> PushResponse:
        s, follower, say = self.log, self.follower, self.outbox.note
        refused = self.accept_leader(req.leader_id, req.term, now)
        if refused is not None:
            return PushResponse(self.member.term, refused, req.first_index, req.count, s.begin_index, s.end_index)
        before = (s.begin_index, s.end_index)
        resp = follower.handle(req)
        for first, last, why in follower.take_cuts():
            say(f"truncated entries {first}..{last} from {req.leader_id} in term {req.term}: {why}; "
                f"after the push the log ends at {s.end_index}", event="truncation", from_index=first,
                to_index=last, leader=req.leader_id, term=req.term, end_index=s.end_index)
        for text, fields in follower.take_notes(now):
            say(text, **fields)
        if (req.members and req.type == PushType.TRUNCATE and resp.code == Code.SUCCESS
                and s.begin_index == req.first_index):  # the log begins at the leader's first entry
            self.reconfig.begin_again(req.members, req.first_index - 1)
        if req.config_at or self.roster.configs.entries or before != (s.begin_index, s.end_index):
            self.reconfig.log_changed(req.config_at)
        return resp

    def on_install(self, req: InstallSnapshotRequest, now: int) -> InstallSnapshotResponse:
        s, say = self.log, self.outbox.note
        refused = self.accept_leader(req.leader_id, req.term, now)
        if refused is not None:
            return InstallSnapshotResponse(self.member.term, refused, 0, False, s.begin_index,
                                           s.end_index, f"not from the leader of term {self.member.term}")
        resp = install.receive(req, self.follower, self.applier())
        if resp.installed:
            self.reconfig.begin_again(req.members, s.begin_index - 1)
            self.reconfig.log_changed((s.begin_index,))
        arriving = (req.leader_id, req.term, req.index)
        if arriving != self.receiving and resp.code == Code.SUCCESS:
            self.receiving = arriving
            say(f"receiving snapshot {req.index} ({req.size} bytes) from {req.leader_id}"
                      + (f"; {resp.received} bytes of it were here already" if resp.received > len(req.data)
                         else ""))
        if resp.installed:
            self.compaction.snapshot_installed(req.index)
            say(f"installed snapshot {req.index} (term {req.snap_term}, {req.size} bytes) from "
                      f"{req.leader_id}; the log begins again at {s.begin_index}")
        elif resp.code != Code.SUCCESS:
            say(f"snapshot {req.index} from {req.leader_id} not installed: {resp.code.name} {resp.remark}")
        return resp

    def on_probe_or_repair(self, req):
        """A PROBE or REPAIR from the leader it has taken (DEEP_COMPARE, deepcompare.py)."""
        term, say = self.member.term, self.outbox.note
        if type(req) is ProbeRequest:
            return self.follower.probe(req, term)
        resp = self.follower.repair(req, term)
        self.reconfig.log_changed(())
        if resp.code == Code.SUCCESS and not resp.dropped:
            say(f"repair from {req.leader_id}: nothing to drop from {req.from_index}")
        elif resp.code == Code.SUCCESS:
            say(f"repair from {req.leader_id}: dropped {resp.dropped} entries from {req.from_index}",
                      event="truncation", from_index=req.from_index, to_index=req.from_index + resp.dropped - 1,
                leader=req.leader_id, term=req.term, end_index=self.log.end_index)
        return resp
