"""The log's beginning moves, in a node's deciding logic (RaftCore): the clean-space check
(retention's rules, cluster/raft/retention.py) and the deletion of the log a state-machine
snapshot covers. A part of RaftCore (a base class of it); what to delete is planned by
store/retention.py, and the core deletes (``store.delete_head``) and says so.
"""

from __future__ import annotations

from store.errors import StoreError
from store.retention import head_files, plan_head_deletion

from .member import Role


class Compaction:
    def _clean_space(self, now: int) -> None:
        """The clean-space check (cluster/raft/retention.py): refuse appends above the full
        ratio; delete expired head files, keeping on a leader what live followers need
        unless the disk forces it, and say whom that cut off."""
        check = self.retention.check()
        full = (f"disk usage {check.ratio:.2f} is above the full ratio {self.cfg.disk_full_ratio:.2f}"
                if check.disk_full else None)
        if (full is None) != (self.disk_full is None):
            self._note(f"appends refused with DISK_FULL: {full}" if full else "disk usage is below the full ratio "
                       "again; appends are taken")
        self.disk_full = full
        keep_from = None
        if self.member.role == Role.LEADER:
            keep_from = {p: d.watermark + 1 for p, d in self.dispatchers.items() if self._peer_alive(p, now)}
        plan = self.retention.plan(self.store, check, keep_from, self.retention_limit)
        if plan is None or not plan.files:
            return
        why = ("disk usage above the force ratio" if check.force else "disk usage above the check ratio"
               if check.check_expired else f"older than {self.cfg.file_reserved_hours:g} h")
        self._delete_head(plan, "clean space", why, keep_from)

    def _delete_head(self, plan, who: str, why: str, keep_from: dict[str, int] | None) -> None:
        s = self.store
        old_begin = s.begin_index
        try:
            data, index = s.delete_head(len(plan.files))
        except StoreError as exc:
            self._note(f"{who}: could not delete {plan.files[0].name}: {exc}")
            return
        self._note(f"{who}: deleted {len(data)} data and {len(index)} index files ({why}): entries "
                   f"{old_begin}..{s.begin_index - 1}; the log now begins at {s.begin_index} "
                   f"(kept: {plan.kept_because})", event="deletion", data_files=len(data), index_files=len(index),
                   from_index=old_begin, to_index=s.begin_index - 1, begin_index=s.begin_index, reason=why)
        self._log_changed(())  # (config entries deleted with the head: the last one is the base now)
        for p in plan.cuts_off:
            then = "sent a snapshot or cut back" if self.applier is not None else "cut back"
            self._note(f"{who}: {p} needed entry {keep_from[p]}, now deleted; it will be {then} to {s.begin_index}")
            d = self.dispatchers.get(p)
            if d is not None:
                d.note = f"cut off by retention: needed {keep_from[p]}, the log now begins at {s.begin_index}"

    def snapshot_saved(self, index: int, now: int) -> None:
        """The state machine's snapshot as of ``index`` is on disk: retention may delete up to
        it, and the log it covers goes now (DLedger HEAD resets its log after each snapshot),
        but for ``snapshot_keep_entries`` entries before it and, on a leader, what live
        followers still need (one that is away gets the snapshot when it is back)."""
        self.now = now
        self.retention_limit = max(index, -1 if self.retention_limit is None else self.retention_limit)
        keep, s = self.cfg.snapshot_keep_entries, self.store
        if keep < 0 or s.begin_index < 0:
            return
        keep_from = None
        if self.member.role == Role.LEADER:
            keep_from = {p: d.watermark + 1 for p, d in self.dispatchers.items() if self._peer_alive(p, now)}
        plan = plan_head_deletion(head_files(s), committed=min(s.committed_index, self.retention_limit - keep),
                                  keep_from=keep_from)
        if plan.files:
            self._delete_head(plan, f"snapshot {index}", "covered by it", keep_from)
