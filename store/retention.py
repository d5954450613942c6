"""Which data files at the head of a log may be deleted: the rules, without deleting anything.

DLedger's clean-space service (DLedgerMmapFileStore.CleanSpaceService, MmapFileList.
deleteExpiredFileByTime) deletes whole data files from the head of the log, oldest first,
never the last one, once a file was last written more than ``fileReservedHours`` ago
(checked at the hour ``deleteWhen`` or whenever the disk is fuller than
``diskSpaceRatioToCheckExpired``), or regardless of age when the disk is fuller than
``diskSpaceRatioToForceClean``. It then moves the begin index to the first entry of the
new first file and deletes the index files wholly below that entry's record.

:func:`plan_head_deletion` keeps those rules and adds what DLedger does not check:

- a file holding an entry past the commit index is never deleted (nor any after it);
- by default a file holding an entry a live follower still needs (``keep_from``: the
  lowest next index of the followers the leader replicates to) is kept; only ``force``
  (a disk past the force ratio) deletes it, and the plan names whom that cuts off;
- deletion stops at the first file that may not go, so the log never has a hole.

Everything here is pure: the caller lists the files (:func:`head_files`) and deletes
(``FileStore.delete_head``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .format import HEADER_SIZE, ENTRY_HEADER


@dataclass(frozen=True)
class HeadFile:
    """A data file of a log, with the entries it holds and when it was last written."""

    name: str
    start: int  # logical offset of its first byte
    first_index: int  # first entry in it (-1: none)
    last_index: int  # last entry in it
    mtime: float  # seconds since the epoch (DLedger: MmapFile.getLastModifiedTimestamp)


@dataclass
class HeadDeletion:
    """What :func:`plan_head_deletion` decided: delete ``files`` (head first), after which
    the log begins at ``new_begin``; ``kept_because`` says why the next file stays;
    ``cuts_off`` names the followers whose next entry goes with the deleted files."""

    files: list[HeadFile] = field(default_factory=list)
    new_begin: int = -1
    kept_because: str = ""
    cuts_off: list[str] = field(default_factory=list)

    @property
    def last_deleted_index(self) -> int:
        return self.files[-1].last_index if self.files else -1


def head_files(store) -> list[HeadFile]:
    """The data files of an open store, oldest first, with the entries each holds (the
    first entry's header is read from each file; a file's last entry is the one before the
    next file's first). A memory store answers for itself."""
    own = getattr(store, "head_files", None)
    if own is not None:
        return own()
    out: list[tuple[str, int, int, float]] = []
    for f in store.data.files:
        first = -1
        if f.mm is not None and f.actual_size >= HEADER_SIZE:
            magic, size, idx = ENTRY_HEADER.unpack_from(f.mm, 0)[:3]
            if magic > 0 and size >= HEADER_SIZE and store.begin_index <= idx <= store.end_index:
                first = idx
        try:
            mtime = os.stat(f.path).st_mtime
        except OSError:
            mtime = 0.0
        out.append((f.name, f.start, first, mtime))
    files = []
    for k, (name, start, first, mtime) in enumerate(out):
        nxt = next((o[2] for o in out[k + 1:] if o[2] >= 0), None)
        last = store.end_index if nxt is None else nxt - 1
        files.append(HeadFile(name, start, first, last if first >= 0 else -1, mtime))
    return files


def plan_head_deletion(files: list[HeadFile], *, committed: int, now: float | None = None,
                       reserved_s: float | None = None, before_index: int | None = None,
                       keep_from: dict[str, int] | None = None, force: bool = False) -> HeadDeletion:
    """Which files to delete from the head, oldest first.

    A file may go when it is not the last file, every entry in it is at or below
    ``committed``, it is older than ``reserved_s`` (when given; ``force`` ignores age), all
    its entries are below ``before_index`` (when given), and no follower in ``keep_from``
    (id -> the next index it needs) needs an entry in it, unless ``force``. The first file
    that may not go ends the deletion."""
    plan = HeadDeletion()
    keep_from = keep_from or {}
    needed = min(keep_from.values(), default=None)
    for k, f in enumerate(files):
        if k == len(files) - 1:
            plan.kept_because = f"{f.name} is the file being written"
            break
        if f.first_index < 0:
            plan.kept_because = f"{f.name} holds no readable entry"
            break
        if f.last_index > committed:
            plan.kept_because = f"{f.name} holds entries past the commit index {committed}"
            break
        if before_index is not None and f.last_index >= before_index:
            plan.kept_because = f"{f.name} holds entry {before_index} or later"
            break
        if reserved_s is not None and not force and now is not None and now - f.mtime < reserved_s:
            plan.kept_because = f"{f.name} was written {now - f.mtime:.0f} s ago (kept for {reserved_s:.0f} s)"
            break
        if needed is not None and needed <= f.last_index and not force:
            who = sorted(p for p, n in keep_from.items() if n <= f.last_index)
            plan.kept_because = f"{f.name} holds entries {', '.join(who)} still need{'s' if len(who) == 1 else ''}"
            break
        plan.files.append(f)
    if plan.files:
        plan.new_begin = plan.last_deleted_index + 1
        plan.cuts_off = sorted(p for p, n in keep_from.items() if n < plan.new_begin)
    return plan
