"""A node's clean-space service: when to delete data files from the head of its log. No I/O
of its own: the time of day, the store's disk usage and the follower needs come in; the
decision goes out; the core deletes (``store.delete_head``) and reports.

DLedger's rules (DLedgerMmapFileStore.CleanSpaceService), with its option names:

- every check, the disk usage of the store's file system is read (a ratio, 0..1);
- files older than ``fileReservedHours`` are deleted at the hours of ``deleteWhen``
  ("04", or several as "03;04"), or at any hour while the disk is fuller than
  ``diskSpaceRatioToCheckExpired``;
- fuller than ``diskSpaceRatioToForceClean`` (and ``enableDiskForceClean``), the oldest
  files go whatever their age;
- fuller than ``diskFullRatio``, appends are refused (DISK_FULL) until space returns.

What this adds (store.retention.plan_head_deletion keeps it): never a file holding an
entry past the commit index, never the file being written, and on a leader never a file
holding entries a live follower still needs, unless the disk forces it; then the plan
names the followers it cut off, whom the leader later cuts back to its new first entry.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from store.format import parse_decimal
from store.retention import HeadDeletion, head_files, plan_head_deletion


def parse_delete_when(text: str) -> frozenset[int]:
    """DLedger's ``deleteWhen``: hours of the day, ``"04"`` or ``"03;04"``. ValueError if not."""
    hours = set()
    for part in str(text).split(";"):
        part = part.strip()
        if not part:
            continue
        hour = parse_decimal(part)  # (ASCII digits only: '²'.isdigit() is true, int('²') fails)
        if hour is None or not 0 <= hour <= 23:
            raise ValueError(f"--delete-when {text!r}: {part!r} is not an hour 00-23")
        hours.add(hour)
    if not hours:
        raise ValueError(f"--delete-when {text!r} names no hour")
    return frozenset(hours)


@dataclass(frozen=True)
class Check:
    """One check's findings, for the log line and the metrics to come."""

    ratio: float | None  # disk usage, None when unknown
    time_up: bool  # an hour of deleteWhen
    check_expired: bool  # ratio above diskSpaceRatioToCheckExpired
    force: bool  # ratio above diskSpaceRatioToForceClean (and force clean enabled)
    disk_full: bool  # ratio above diskFullRatio: appends are refused

    @property
    def deletes(self) -> bool:
        return self.time_up or self.check_expired or self.force


class Retention:
    """``clock()``: wall-clock seconds (file modification times are on that clock; the node
    gives time.time, the simulator its own; without one no file is ever old);
    ``disk_usage()``: the store's file system usage as a ratio, or None when unknown."""

    def __init__(self, config, clock=None, disk_usage=None) -> None:
        self.cfg = config
        self.clock = clock or (lambda: 0.0)
        self.disk_usage = disk_usage or (lambda: None)
        self.hours = parse_delete_when(config.delete_when)
        self.last: Check | None = None

    def check(self) -> Check:
        c = self.cfg
        ratio = self.disk_usage()
        hour = datetime.datetime.fromtimestamp(self.clock()).hour  # (local time, as DLedger's deleteWhen)
        full = ratio is not None and ratio > c.disk_full_ratio
        self.last = Check(ratio, hour in self.hours, ratio is not None and ratio > c.disk_ratio_check,
                          c.force_clean and ratio is not None and ratio > c.disk_ratio_force, full)
        return self.last

    def plan(self, store, check: Check, keep_from: dict[str, int] | None = None,
             limit: int | None = None) -> HeadDeletion | None:
        """What to delete now (None: not a time to delete). ``keep_from``: on a leader, each
        live follower's next needed index. ``limit``: nothing after this index goes (a state
        machine's latest snapshot: what it needs to recover), whatever the disk says."""
        if not check.deletes or store.begin_index < 0:
            return None
        committed = store.committed_index if limit is None else min(store.committed_index, limit)
        return plan_head_deletion(head_files(store), committed=committed, now=self.clock(),
                                  reserved_s=self.cfg.file_reserved_hours * 3600, keep_from=keep_from,
                                  force=check.force)
