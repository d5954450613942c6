"""A DLedger-mode store that starts with an old master-slave commit log: where each message is.

A broker that had messages in master-slave mode and was restarted with
``enableDLegerCommitLog=true`` keeps its ``commitlog/`` and puts every later message in the
DLedger log (``dledger-<selfId>/``). What RocketMQ does with such a store (``DLedgerCommitLog``;
rocketmq-all-4.9.4 and 4.9.8 hold the same file; 5.3.3 keeps the same rules and adds an
abnormal recovery; DLedger 0.2.6 and 0.3.1.2 ``MmapFileList`` agree):

- The divided offset (``dividedCommitlogOffset``) splits one offset space between the two
  logs. At load, when DLedger's data directory holds files, it is the first data file's
  start. When it holds none (the first start in DLedger mode) and ``commitlog/`` holds
  files, the old log is recovered as a master-slave one, a blank record (TOTALSIZE = the
  bytes left, MAGICCODE = BLANK_MAGIC_CODE) is written at the last file's write position
  unless one is there already, that file is marked full, and the divided offset is its
  start + its size: the old log's end rounded up to a whole file. DLedger's first data
  file is created there (``MmapFileList.getLastMappedFile(startOffset)`` rounds down to
  its file size, which is ``mappedFileSizeCommitLog`` as the old log's). With no old
  file it stays -1 and the DLedger log starts at 0.
- DLedger entries' ``pos`` are offsets in that file list, so the first entry's pos is the
  divided offset (its index is still 0: DLedger's index files start at 0). The append
  hook writes PHYSICALOFFSET = pos + 48. Old messages keep their commit-log offsets (all
  below the divided offset), new ones are at pos + 48 (at or past it + 48); consume-queue
  units hold these offsets for both, and queue offsets run on across the switch (the
  consume queues are the same files).
- ``getMessage``/``getData`` (and so ``lookMessageByOffset`` and consumers' pulls) read
  an offset below the divided offset from the old log's files, any other from the DLedger
  file list (only below its committed position).
- ``getMinOffset`` is the old log's first file's start while old files remain, else the
  DLedger log's; ``getMaxOffset`` the DLedger log's committed position.
- Retention: while old files remain, ``deleteExpiredFile`` deletes only them (by age, as a
  master-slave broker does: all but the last, then the last one alone once it expired),
  with DLedger's own deletion held off (files kept ten years, no forced clean); when they
  are all gone DLedger's deletion runs. Units of deleted messages lie below the min
  offset, as after any retention. A store whose old files are all gone is an ordinary
  DLedger-mode store whose log starts past 0.

Here: :func:`old_log_dir` finds such an old log beside a node directory,
:func:`divided_offset` reads the split from the files, :func:`in_old_log` says which
log a commit-log offset is read from, as RocketMQ picks. scan.batches yields the old
log's messages (commitlog.batches; each with no DLedger index: ``index`` -1) and then
the DLedger log's, so every ``mq`` command reads the store as the broker does.
"""

from __future__ import annotations

import os

from ..format import parse_file_name
from ..layout import DATA_DIR
from .commitlog import COMMIT_LOG_DIR

NO_INDEX = -1  # an old-log message's ``index``: it is no DLedger entry


def old_log_dir(node_dir: str) -> str | None:
    """The old master-slave ``commitlog/`` that the DLedger log of ``node_dir`` follows: the
    store root's (the node directory's parent's), when it holds a commit-log file; None
    when there is none (or ``node_dir`` is no DLedger node directory)."""
    node_dir = os.path.abspath(node_dir)
    if not os.path.isdir(os.path.join(node_dir, DATA_DIR)):
        return None
    log = os.path.join(os.path.dirname(node_dir), COMMIT_LOG_DIR)
    try:
        names = os.listdir(log)
    except OSError:
        return None
    return log if any(parse_file_name(n) is not None for n in names) else None


def divided_offset(node_dir: str) -> int | None:
    """Where the DLedger log of ``node_dir`` begins in the shared offset space: its first
    data file's start (``dividedCommitlogOffset`` as RocketMQ sets it at load); None when
    it has no data file yet."""
    try:
        starts = [s for n in os.listdir(os.path.join(node_dir, DATA_DIR)) if (s := parse_file_name(n)) is not None]
    except OSError:
        return None
    return min(starts) if starts else None


def in_old_log(offset: int, divided: int | None) -> bool:
    """Is commit-log ``offset`` read from the old log (``DLedgerCommitLog.getMessage``:
    below the divided offset; everything when the DLedger log has no file)?"""
    return divided is None or offset < divided


def log_bytes(node_dir: str) -> int:
    """The bytes of the log's files on disk: a DLedger node directory's ``data/`` and the old
    commit log before it, or a master-slave ``commitlog/`` (for progress bars)."""
    dirs = [node_dir] if os.path.basename(os.path.normpath(node_dir)) == COMMIT_LOG_DIR and \
        not os.path.isdir(os.path.join(node_dir, DATA_DIR)) else [os.path.join(node_dir, DATA_DIR)]
    old = old_log_dir(node_dir)
    if old is not None:
        dirs.append(old)
    total = 0
    for d in dirs:
        try:
            total += sum(e.stat().st_size for e in os.scandir(d) if e.is_file())
        except OSError:
            pass
    return total
