"""The log's beginning moves, in a node's deciding logic (RaftCore): the clean-space check
(retention's rules, cluster/raft/retention.py) and the deletion of the log a state-machine
snapshot covers, and the disk's refusal of appends. A part of RaftCore that lives as long as
the node, with the state of its own; what to delete is planned by store/retention.py, and
this part deletes (``store.delete_head``) and says so.
"""

from __future__ import annotations

from store.errors import StoreError
from store.retention import head_files, plan_head_deletion

from .retention import Retention


class Compaction:
    """Retention and snapshot deletion. It reads the settings, deletes from the log (``log``),
    says through ``outbox``, has ``reconfig`` (reconfig.py) reconcile the members with what
    is left, and asks ``applier()`` whether a state machine sends snapshots; ``clock`` and
    ``disk_usage`` as RaftCore takes them. What live followers still need (and whom a
    deletion cut off) it learns from the node's role (leading.py Leader, or notleading.py
    NotLeading: none), given with each call that may delete."""

    def __init__(self, cfg, log, outbox, reconfig, applier, now: int, clock=None, disk_usage=None) -> None:
        self.cfg, self.log, self.outbox, self.reconfig, self.applier = cfg, log, outbox, reconfig, applier
        self.retention = Retention(cfg, clock, disk_usage)
        self.retention_at = now + cfg.retention_check_ms
        # The state machine's latest snapshot bounds what retention deletes (None: no state machine)
        self.retention_limit: int | None = None
        self.disk_full: str | None = None  # why appends are refused for disk usage (the full ratio)
        self.disk_refusing = False  # the last append failed on the disk (noted once, and when it ends)

    def tick(self, now: int, role) -> None:
        if now >= self.retention_at:
            self.retention_at = now + self.cfg.retention_check_ms
            self._clean_space(now, role)
            # (what the latest snapshot covers, kept at its save for a follower then live, goes
            # once that follower is no longer live: a leader keeps only what live followers need)
            if self.retention_limit is not None:
                self._covered_head(self.retention_limit, f"snapshot {self.retention_limit}", now, role)

    def appends_refused(self, code, exc) -> None:
        """An append failed on the disk (said once, until one is taken again)."""
        if not self.disk_refusing:
            self.outbox.note(f"appends refused with {code.name} until the disk takes them: {exc}")
        self.disk_refusing = True

    def appends_taken(self) -> None:
        if self.disk_refusing:
            self.disk_refusing = False
            self.outbox.note("the disk takes appends again")

    def snapshot_installed(self, index: int) -> None:
        """A snapshot as of ``index`` is the state machine's now: retention may delete up to it."""
        self.retention_limit = max(index, -1 if self.retention_limit is None else self.retention_limit)

    def _clean_space(self, now: int, role) -> None:
        """The clean-space check (cluster/raft/retention.py): refuse appends above the full
        ratio; delete expired head files, keeping on a leader what live followers need
        unless the disk forces it, and say whom that cut off."""
        c = self.cfg
        check = self.retention.check()
        full = (f"disk usage {check.ratio:.2f} is above the full ratio {c.disk_full_ratio:.2f}"
                if check.disk_full else None)
        if (full is None) != (self.disk_full is None):
            self.outbox.note(f"appends refused with DISK_FULL: {full}" if full else "disk usage is below the full ratio "
                      "again; appends are taken")
        self.disk_full = full
        keep_from = role.live_watermarks(now)
        plan = self.retention.plan(self.log, check, keep_from, self.retention_limit)
        if plan is None or not plan.files:
            return
        why = ("disk usage above the force ratio" if check.force else "disk usage above the check ratio"
               if check.check_expired else f"older than {c.file_reserved_hours:g} h")
        self._delete_head(plan, "clean space", why, keep_from, role)

    def _delete_head(self, plan, who: str, why: str, keep_from: dict[str, int] | None, role) -> None:
        s, say = self.log, self.outbox.note
        old_begin = s.begin_index
        try:
            data, index = s.delete_head(len(plan.files))
        except StoreError as exc:
            say(f"{who}: could not delete {plan.files[0].name}: {exc}")
            return
        say(f"{who}: deleted {len(data)} data and {len(index)} index files ({why}): entries "
                  f"{old_begin}..{s.begin_index - 1}; the log now begins at {s.begin_index} "
                  f"(kept: {plan.kept_because})", event="deletion", data_files=len(data), index_files=len(index),
                  from_index=old_begin, to_index=s.begin_index - 1, begin_index=s.begin_index, reason=why)
        self.reconfig.log_changed(())  # (config entries deleted with the head: the last one is the base now)
        for p in plan.cuts_off:
            then = "sent a snapshot or cut back" if self.applier() is not None else "cut back"
            say(f"{who}: {p} needed entry {keep_from[p]}, now deleted; it will be {then} to {s.begin_index}")
            role.cut_off(p, f"cut off by retention: needed {keep_from[p]}, the log now begins at {s.begin_index}")

    def snapshot_saved(self, index: int, now: int, role) -> None:
        """See RaftCore.snapshot_saved."""
        self.snapshot_installed(index)
        self._covered_head(index, f"snapshot {index}", now, role)

    def _covered_head(self, index: int, who: str, now: int, role) -> None:
        """Delete the head files the snapshot as of ``index`` covers, but for
        ``--snapshot-keep-entries`` and what live followers still need."""
        keep, s = self.cfg.snapshot_keep_entries, self.log
        if keep < 0 or s.begin_index < 0 or self.retention_limit is None:
            return
        keep_from = role.live_watermarks(now)
        plan = plan_head_deletion(head_files(s), committed=min(s.committed_index, self.retention_limit - keep),
                                  keep_from=keep_from)
        if plan.files:
            self._delete_head(plan, who, "covered by it", keep_from, role)
