"""What ``mq check`` adds on a controller-mode store root (store/kinds.py's CONTROLLER_MODE:
``commitlog/`` with ``epochFileCheckpoint`` beside it): the epoch file's errors (``mq epochs``,
replica.py), what a slave's truncation leaves pointing past the commit log's end, and the
stale tail a truncation killed half-way leaves valid. Rows have check.py's finding shape.

Findings:

- ``epoch-*`` (replica.py's error findings, under their code: ``epoch-file-unloadable``,
  ``epoch-order``, ``epoch-past-log``); its warnings and notes are ``mq epochs``'s only;
- ``index-past-log-end``: entries of an ``index/`` file that point at or past the log's max
  offset, one row per file (the first such entry's byte, how many);
- ``timer-past-log-end``: RocketMQ 5 ``timerlog/`` units whose message lies past the log's max
  offset, one row per file (the first such unit's byte, how many; timer.py's layout), or
  ``timer-damaged`` where a file does not read as units;
- ``stale-tail``: in the last epoch's span (when the replica has epochs after its first), a
  message stored before that epoch's first message, and the log from there on;
- ``unconfirmed-tail``: the broker crashed (its ``abort`` file is there) and its log goes past
  the ``checkpoint``'s confirmPhyOffset: the bytes past it were confirmed by no SyncStateSet,
  and may be a stale tail (#10666). Consume-queue units past the end are check.py's
  ``cq-past-log-end``.

Why these, from RocketMQ 5.3.3 (store/.../DefaultMessageStore.truncateDirtyFiles, CommitLog,
MappedFileQueue.truncateDirtyFiles, ConsumeQueue.truncateDirtyLogicFiles, ha/autoswitch/
AutoSwitchHAClient.doTruncate, EpochFileCache.truncateSuffixByOffset, StoreCheckpoint): a
slave's handshake truncates the consume queues, then the commit log, then the epoch file. The
first two only move in-memory write positions: bytes past the point stay on disk as they were,
and only whole files past it are deleted; nothing touches ``index/`` or ``timerlog/`` (#10668),
nor ConsumeQueueExt (#10755). The epoch file drops the epochs starting at or past the point and
is rewritten; CommitLog.truncateDirtyFiles lowers the confirm offset to the point, which the
``checkpoint`` file gets within a second (StoreCheckpoint.flush, scheduled each second). So
offline, after a crash:

- the stale bytes inside the last kept file are valid messages, and units and index entries
  still point at them: they cannot be told from the log's own tail by their bytes. What tells
  them is the confirm offset: the crash left ``abort``, and the log runs past confirmPhyOffset.
  RocketMQ's recoverAbnormally then keeps the whole valid tail (dispatching only up to the
  confirm offset); as a slave its next handshake cuts it again, but elected master
  (changeToMaster) it appends its new epoch at the tail's end and serves it (#10666). Seen on
  5.3.3 (tests/java/test_mq_check_controller_mode_java.py): a slave killed right after
  ``Truncate slave log to A success`` restarted with its old max offset B, and made master at
  epoch 3 took ``3-B``. The same signs come from a crash with puts the SyncStateSet had not
  confirmed yet (a lone master's, a slave's last transfer): only ``mq align`` against the
  master's epochs says which bytes its next handshake cuts;
- when the master's data then overwrote the tail's start and the crash came after, the
  stale bytes past the new data stop recovery where the new data ends, unless a stale
  message starts exactly there (messages of one size): then the stale messages follow the
  master's as valid ones, queue offsets, units and epoch file (the master's epochs, copied
  from transfer headers) all in order. Seen on 5.3.3: restarted, the slave's handshake found
  the consistent point at that tail's end (its last epoch ends there, the master's later),
  kept it for good and took the master's bytes from there, mid-message. What tells the tail
  is its store time: a master stamps each message under its put lock
  (CommitLog.asyncPutMessage: ``setStoreTimestamp(beginLockTimestamp)``, unless
  duplicationEnable), so one epoch's (one master's) store times never go back, and every
  message of an epoch was stored after the epoch's first; a stale one in the last epoch's
  span was stored before it, by the old master. ``stale-tail`` names the first (the first
  epoch is not judged: a store ``mq migrate`` moved holds several masters' messages there);
- the files the truncation deleted are gone, but what pointed into them stays: units
  (``cq-past-log-end``), index entries and timer units past the log's end. At its next start
  RocketMQ cuts the units in memory (``maxPhyOffsetOfConsumeQueue >= processOffset``:
  truncateDirtyLogicFiles; on disk they stay, cut again at each start), and after a crash
  drops the index files newer than the checkpoint's indexMsgTimestamp (IndexService.load),
  which dispatch writes again; the timer log it keeps (#10668);
- a crash between the commit log's truncation and the epoch file's rewrite (or the other way
  round, a copy of files) leaves an epoch starting past the log's max offset:
  ``epoch-past-log``.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from ..format import HEADER_SIZE
from .columns import message_columns
from .commitlog import COMMIT_LOG_DIR, batches
from .lookup import HASH_SLOT_SIZE, INDEX_DIR, INDEX_HEADER_SIZE, INDEX_SIZE, open_index
from ..regular import UnreadableFile, read_regular
from .replica import ERROR, read_replica
from .timer import OFFSET_PY_AT, TIMER_LOG_DIR, TimerLogError, unit_positions

CHECKPOINT_FILE = "checkpoint"  # StorePathConfigHelper.getStoreCheckpoint
ABORT_FILE = "abort"  # StorePathConfigHelper.getAbortFile: made at start, deleted at a clean shutdown
_CONFIRM = struct.Struct(">q")  # StoreCheckpoint.confirmPhyOffset, at byte 32 (RocketMQ 5)
CONFIRM_AT = 32
_CHUNK = 1 << 20  # index entries read at a time
TIMER_FILE_LIMIT = 1 << 30  # a timer-log file read whole (mappedFileSizeTimerLog: 100 MiB by default)
# an index entry (lookup.py's IndexFile): key hash, commit-log offset, time diff, previous entry
_ENTRY = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])


def _row(kind: str, file: str, offset, detail: str) -> dict:
    return {"finding": kind, "file": file, "offset": offset, "index": None, "topic": None, "queue_id": None,
            "queue_offset": None, "detail": detail}


def replica_findings(root: str, *, in_use: bool = False) -> list[dict]:
    """``mq check``'s findings on the controller-mode store root ``root`` beyond its messages
    and consume queues (see the module doc). ``in_use``: a running broker writes it: what
    points past the log's end as read, and the confirm offset, are in flight, not findings."""
    rep = read_replica(root)
    used = os.path.basename(rep.used) if rep.used else "epochFileCheckpoint"
    out = [_row(f.code, used, None, f.detail) for f in rep.findings if f.severity == ERROR]
    if in_use or rep.min_offset < 0:
        return out
    end = rep.max_offset
    out += _index_past(root, end)
    out += _timer_past(root, end)
    stale = _stale_tail(root, rep)
    if stale is not None:
        out.append(stale)
    tail = _unconfirmed_tail(root, rep.min_offset, end)
    if tail is not None:
        out.append(tail)
    return out


def _stale_tail(root: str, rep) -> dict | None:
    """The first message of the last epoch's span stored before that epoch's first message,
    when the replica has epochs after its first: from there on the log is a stale tail."""
    if len(rep.entries) < 2:
        return None
    start = rep.entries[-1].start_offset
    if not max(rep.min_offset, 0) <= start < rep.max_offset:
        return None
    first_ts = None
    for b in batches(os.path.join(root, COMMIT_LOG_DIR), at=start):
        if b.damage or not len(b):
            break
        offs = b.pos + HEADER_SIZE - b.start  # (the messages' bytes in their file)
        ts = message_columns(b.buf, offs, b.bsize, False).store_ts
        if first_ts is None:
            first_ts = int(ts[0])
        before = np.flatnonzero(ts < first_ts)
        if len(before):
            k = int(before[0])
            at = b.start + int(offs[k])
            return _row("stale-tail", b.file, int(offs[k]),
                        f"the message at commit-log offset {at}, in epoch {rep.entries[-1].epoch}'s span (from "
                        f"{start}), was stored at {int(ts[k])}, before that epoch's first message ({first_ts}): "
                        f"another master stored it before this epoch began, so the {rep.max_offset - at} bytes from "
                        f"there to the log's end {rep.max_offset} are a tail a truncation left valid behind the "
                        f"master's data (apache/rocketmq#10666); RocketMQ keeps them at its start and a handshake "
                        f"cuts them only if the master's epoch ends before them: cut the log there ('dledgerctl mq "
                        f"align' with the master)")
    return None


def _index_past(root: str, end: int) -> list[dict]:
    files = open_index(root)
    out = []
    for f in files or []:
        try:
            base = INDEX_HEADER_SIZE + f.slots * HASH_SLOT_SIZE
            last = f.last_entry
            first, count = None, 0
            for lo in range(1, last + 1, _CHUNK):
                # (a copy: the map is closed below, which a view into it would keep from closing)
                phy = np.frombuffer(f.data, _ENTRY, count=min(_CHUNK, last + 1 - lo), offset=base + lo * INDEX_SIZE)[
                    "phy"].astype(np.int64)
                past = np.flatnonzero(phy >= end)
                if len(past) and first is None:
                    first = lo + int(past[0])
                count += len(past)
        finally:
            f.data.close()
        if count:
            out.append(_row("index-past-log-end", f"{INDEX_DIR}/{f.name}", base + first * INDEX_SIZE,
                            f"{count} entr{'ies' if count > 1 else 'y'} from entry {first} on point at or past the "
                            f"log's max offset {end}: what a slave's truncation (or a crash) left; a look-up by key "
                            f"finds no message there (the broker does not cut its index; 'dledgerctl mq rebuild' "
                            f"writes it again)"))
    return out


def _timer_past(root: str, end: int) -> list[dict]:
    d = os.path.join(root, TIMER_LOG_DIR)
    if not os.path.isdir(d):
        return []
    out = []
    for name in sorted(n for n in os.listdir(d) if n.isdigit()):
        path = os.path.join(d, name)
        try:
            data = read_regular(path, TIMER_FILE_LIMIT)
            at = unit_positions(data, f"{TIMER_LOG_DIR}/{name}")
        except (TimerLogError, UnreadableFile, OSError) as exc:
            out.append(_row("timer-damaged", f"{TIMER_LOG_DIR}/{name}", None, str(exc)))
            continue
        past = [p for p in at if (u := _offset_size(data, p))[0] >= 0 and u[0] + u[1] > end]
        if past:
            off, size = _offset_size(data, past[0])
            out.append(_row("timer-past-log-end", f"{TIMER_LOG_DIR}/{name}", past[0],
                            f"{len(past)} unit{'s' if len(past) > 1 else ''} from this one on ({off}, {size}) point "
                            f"past the log's max offset {end}: the timer reads no message there (a slave's "
                            f"truncation does not reach the timer log: apache/rocketmq#10668)"))
    return out


def _offset_size(data: bytes, p: int) -> tuple[int, int]:
    return struct.unpack_from(">qi", data, p + OFFSET_PY_AT)


def read_confirm_offset(root: str) -> int | None:
    """The store ``checkpoint``'s confirmPhyOffset (RocketMQ 5), or None when the file is not
    there or too short to hold one (a 4.x broker's)."""
    try:
        with open(os.path.join(root, CHECKPOINT_FILE), "rb") as fh:
            head = fh.read(CONFIRM_AT + _CONFIRM.size)
    except OSError:
        return None
    if len(head) < CONFIRM_AT + _CONFIRM.size:
        return None
    return _CONFIRM.unpack_from(head, CONFIRM_AT)[0]


def _unconfirmed_tail(root: str, lo: int, end: int) -> dict | None:
    if not os.path.isfile(os.path.join(root, ABORT_FILE)):
        return None
    confirm = read_confirm_offset(root)
    if confirm is None or not lo <= confirm < end:
        return None
    return _row("unconfirmed-tail", CHECKPOINT_FILE, CONFIRM_AT,
                f"the broker crashed (abort) with {end - confirm} bytes of log past its confirm offset {confirm} "
                f"(to {end}): no SyncStateSet confirmed them, and a slave's truncation killed before its master's "
                f"data overwrote them leaves them valid (apache/rocketmq#10666). RocketMQ keeps them at its start; "
                f"as a slave its next handshake cuts them to the consistent point, elected master it serves them: "
                f"'dledgerctl mq align' with the master says what is cut")
