"""A follower's answers to its leader's replication requests: pushes (PUSH, follower.py
FollowerLog stores them), snapshots (INSTALL_SNAPSHOT, install.py), and the byte-for-byte
compare's probes and repairs. A part of RaftCore (core.py), which first takes the sender
as its leader (RaftCore.accept_leader); this part then keeps the members (reconfig.py) and
the node's log lines in step with what the log became.
"""

from __future__ import annotations

from . import install
from .rpc import Code, InstallSnapshotRequest, InstallSnapshotResponse, ProbeRequest, PushRequest, PushResponse, PushType


class Following:
    """The follower's side of ``core`` (RaftCore): its FollowerLog is ``core.follower``."""

    def __init__(self, core) -> None:
        self.core = core
        self.receiving: tuple | None = None  # the snapshot arriving: (leader, term, index)

    def on_push(self, req: PushRequest, now: int) -> PushResponse:
        core = self.core
        s, follower = core.store, core.follower
        refused = core.accept_leader(req.leader_id, req.term, now)
        if refused is not None:
            return PushResponse(core.member.term, refused, req.first_index, req.count, s.begin_index, s.end_index)
        before = (s.begin_index, s.end_index)
        resp = follower.handle(req)
        for first, last, why in follower.take_cuts():
            core.note(f"truncated entries {first}..{last} from {req.leader_id} in term {req.term}: {why}; "
                      f"after the push the log ends at {s.end_index}", event="truncation", from_index=first,
                      to_index=last, leader=req.leader_id, term=req.term, end_index=s.end_index)
        for text, fields in follower.take_notes(now):
            core.note(text, **fields)
        if (req.members and req.type == PushType.TRUNCATE and resp.code == Code.SUCCESS
                and s.begin_index == req.first_index):  # the log begins at the leader's first entry
            core.reconfig.begin_again(req.members, req.first_index - 1)
        if req.config_at or core.configs.entries or before != (s.begin_index, s.end_index):
            core.reconfig.log_changed(req.config_at)
        return resp

    def on_install(self, req: InstallSnapshotRequest, now: int) -> InstallSnapshotResponse:
        core = self.core
        s = core.store
        refused = core.accept_leader(req.leader_id, req.term, now)
        if refused is not None:
            return InstallSnapshotResponse(core.member.term, refused, 0, False, s.begin_index,
                                           s.end_index, f"not from the leader of term {core.member.term}")
        resp = install.receive(req, core.follower, core.applier)
        if resp.installed:
            core.reconfig.begin_again(req.members, s.begin_index - 1)
            core.reconfig.log_changed((s.begin_index,))
        arriving = (req.leader_id, req.term, req.index)
        if arriving != self.receiving and resp.code == Code.SUCCESS:
            self.receiving = arriving
            core.note(f"receiving snapshot {req.index} ({req.size} bytes) from {req.leader_id}"
                      + (f"; {resp.received} bytes of it were here already" if resp.received > len(req.data)
                         else ""))
        if resp.installed:
            core.compaction.snapshot_installed(req.index)
            core.note(f"installed snapshot {req.index} (term {req.snap_term}, {req.size} bytes) from "
                      f"{req.leader_id}; the log begins again at {s.begin_index}")
        elif resp.code != Code.SUCCESS:
            core.note(f"snapshot {req.index} from {req.leader_id} not installed: {resp.code.name} {resp.remark}")
        return resp

    def on_probe_or_repair(self, req):
        """A PROBE or REPAIR from the leader it has taken (DEEP_COMPARE, deepcompare.py)."""
        core = self.core
        if type(req) is ProbeRequest:
            return core.follower.probe(req, core.member.term)
        resp = core.follower.repair(req, core.member.term)
        core.reconfig.log_changed(())
        if resp.code == Code.SUCCESS and not resp.dropped:
            core.note(f"repair from {req.leader_id}: nothing to drop from {req.from_index}")
        elif resp.code == Code.SUCCESS:
            core.note(f"repair from {req.leader_id}: dropped {resp.dropped} entries from {req.from_index}",
                      event="truncation", from_index=req.from_index, to_index=req.from_index + resp.dropped - 1,
                      leader=req.leader_id, term=req.term, end_index=core.store.end_index)
        return resp
