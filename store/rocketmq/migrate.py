"""``mq migrate``: a DLedger-mode broker store rewritten as a master-slave one.

From SRC (a stopped broker's store root in DLedger mode: ``dledger-<id>/``, ``consumequeue/``,
``config/``) to DEST, a new directory RocketMQ's ``DefaultMessageStore`` opens with
``enableDLegerCommitLog=false``:

- ``commitlog/``: the messages of the DLedger log's committed entries (commitment.py: up to
  the checkpoint's committed index, or further to what a consume queue or the key index
  points at; all entries with ``include_uncommitted``), in log order, back to back
  (commitlog.py: files, blanks); each
  message's bytes as they were except PHYSICALOFFSET, now its position in the new log;
- ``consumequeue/<topic>/<queueId>/``: each source queue's units at the SAME queue offsets
  (consumer offsets stay valid), with their size and tag code, pointing at the messages'
  new offsets. A queue's files keep the source's file size and names; units before the
  first kept one in its file (RocketMQ's own ``fillPreBlank`` units, or units of messages
  no longer in the log) are written as ``fillPreBlank`` units (0, Integer.MAX_VALUE, 0), as
  RocketMQ writes a queue that starts past 0; units of messages left out at a queue's end
  (uncommitted ones) are not written. When such blanks lead a file that also holds units
  of messages, the new commit log starts one file in (not at 0), so that the blanks' offset
  0 lies below it and RocketMQ takes the first real unit as the queue's minimum. A queue
  left with no unit of a kept message but a max offset past 0 (idle since its messages'
  files were deleted, or all of them left out) keeps its offsets as (1, 1, 0) units, and
  the log then starts one file in too (requeue.py, a queue's units a chunk at a time: a fillPreBlank unit there
  would make RocketMQ resume dispatch at 2 GiB);
- ``index/``: the broker's key index (index.py: RocketMQ's IndexFile format and the keys
  ``IndexService.buildIndex`` puts) of the messages before the end of the furthest
  consume-queue unit; the broker re-dispatches (and so indexes) the messages from there
  when it starts, so they are left to it (said). Built in the move's own pass for the
  messages up to SRC's furthest unit; when the units kept end before that (a follower's
  left-out tail), made again from the new log up to the kept units' end;
- ``checkpoint``: physicMsgTimestamp and logicsMsgTimestamp = the last message's store
  time, indexMsgTimestamp = the last indexed message's (0 without an index)
  (``StoreCheckpoint``: i64 at 0, 8, 16 of a 4 KiB file);
- (a RocketMQ 5 store whose ``consumequeue/`` is a RocksDB database, ``storeType=defaultRocksDB``:
  not read, no queue written, said; the master-slave broker dispatches every message again
  from the new log when it starts, at the queue offsets the messages hold);
- ``config/``: copied as it is. No ``abort`` file: the broker recovers as after a clean stop;
- ``compaction/`` (RocketMQ 5's ``CompactionStore``: the compacted logs of compaction topics,
  their own queues and ``position-checkpoint``): copied as it is. Its logs hold copies of
  messages at their own offsets and its checkpoint counts queue offsets, none of which the
  move changes; a compaction topic's older messages may live only there;
- ``timerlog/`` and ``timerwheel`` (RocketMQ 5's timer, timer.py): the timer log's units
  at their new commit-log offsets, the wheel (timer-log positions) as it is.

With ``id_map``, a CSV file there (never over an existing one; written under a temporary
name and renamed after DEST): ``old_msg_id,new_msg_id,uniq_key`` for each message moved,
in log order; the offset message ids as ``MessageDecoder.createMessageId`` makes them (the
store host's address, IPv4 or IPv6, and port, then the commit-log offset; upper-case hex).

A store whose DLedger log follows an old master-slave ``commitlog/`` (a broker that entered
DLedger mode with messages: divided.py) moves whole: scan.batches yields the old log's
messages (all certain: they precede every DLedger entry) and then the DLedger log's, in
one offset space, so both go into the new commit log in that order.

Not yet: a RocketMQ 5 store with ``batchconsumequeue/`` (topics of queue.type BatchCQ, whose units
count a batch's messages): it is refused, nothing written.

Rules kept here: SRC is only read. DEST must not exist or be an empty directory; the
store is written under a temporary sibling name (``.<name>.migrating-<pid>``) and renamed
to DEST only when complete, so an interrupted run leaves no DEST that looks like a store
(a failed one removes its temporary directory; the next run for the same DEST removes
one a killed run left, whose process is gone). A source that is damaged or inconsistent
(an entry that is not a message, a unit that points where no message starts) stops the
move with :class:`MigrateError` saying where; ``mq check`` tells more. So does an entry
whose own DLedger bodyCrc fails (changed since it was written: moved, it would become a
sound-looking message), unless ``skip_damaged`` leaves it out (moving.py). A SRC without
``consumequeue/`` is refused before anything else is read of it (:func:`check_source`).
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from dataclasses import dataclass, field

import numpy as np

from ..filestore import FileStore
from ..format import HEADER_SIZE, MAGIC_NORMAL
from ..reading import Selection
from ..writing import copy_tree, pwrite_all, write_file
from .commitment import LOCK_FILE, Bound, broker_holds, commit_bound
from .epochs import CONTROLLER_ENTRY_EPOCH, EPOCH_FILE, EpochEntry, epoch_file_text
from .commitlog import COMMIT_LOG_DIR, MAPPED_FILE_SIZE_COMMIT_LOG, CommitLogWriter
from .consumequeue import CONSUME_QUEUE_DIR
from .index import MAX_HASH_SLOT_NUM, MAX_INDEX_NUM, IndexWriter, build_index
from .lookup import INDEX_DIR
from .layout import BrokerStore, batch_queue_files, rocksdb_queues
from .moving import IdMap, MigrateError, Mover, Offsets
from .requeue import log_start, write_queues
from .scan import batches, crc_damaged
from .timer import TimerLogError, move_timer_log

CONFIG_DIR = "config"
OFFSETS_DIR = ".moved-offsets"  # in the temporary DEST while the queues are rewritten (moving.Offsets)
COMPACTION_DIR = "compaction"  # RocketMQ 5: CompactionStore's root (compactionLog/, compactionCq/, position-checkpoint)
CHECKPOINT_FILE = "checkpoint"  # StorePathConfigHelper.getStoreCheckpoint
CHECKPOINT_SIZE = 4096  # StoreCheckpoint maps MappedFile.OS_PAGE_SIZE bytes
CHECKPOINT_TIMES = struct.Struct(">qqq")  # physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp
CONFIRM_OFFSET = struct.Struct(">q")  # StoreCheckpoint's confirmPhyOffset (RocketMQ 5) ...
CONFIRM_OFFSET_AT = 32  # ... after the three timestamps and masterFlushedOffset


@dataclass
class Summary:
    src: str
    dest: str
    messages: int = 0  # messages written to the new commit log
    bytes: int = 0  # their bytes
    files: int = 0  # commit-log files
    blanks: int = 0  # blank records ending a file
    queues: int = 0  # consume queues written
    units: int = 0  # units written (pointing at messages)
    committed_index: int | None = None
    left_out: int = 0  # messages of uncommitted entries not moved
    left_out_bytes: int = 0
    left_out_units: int = 0  # consume-queue units of left-out messages not written
    other_entries: int = 0  # entries that are not messages (no-op, config): not moved
    undispatched: int = 0  # messages no unit points at (transaction halves; not dispatched yet)
    damaged: list = field(default_factory=list)  # (entry index, SRC offset) of damaged entries left out (skip_damaged)
    index_files: int = 0  # index/ files written
    index_keys: int = 0  # keys put in them
    index_seconds: float = 0.0  # time the index writer took (hashing and writing the keys)
    index_wall_seconds: float = 0.0  # the whole index step (reading the new log's keys too)
    dispatched_until: int = 0  # the end of the furthest unit: the broker dispatches (indexes) from here
    log_start: int = 0  # the new commit log's first offset
    log_end: int = 0  # where its last message ends (its max offset)
    epochs: list = field(default_factory=list)  # (epoch, start offset) written to epochFileCheckpoint (controller_mode)
    notes: list[str] = field(default_factory=list)

    def row(self) -> dict:
        return {"dest": self.dest, "messages": self.messages, "bytes": self.bytes, "queues": self.queues,
                "units": self.units, "files": self.files, "blanks": self.blanks,
                "committed_index": self.committed_index, "left_out": self.left_out,
                "left_out_bytes": self.left_out_bytes, "left_out_units": self.left_out_units,
                "other_entries": self.other_entries, "index_files": self.index_files,
                "index_keys": self.index_keys, "damaged": len(self.damaged), "log_start": self.log_start,
                "epochs": [list(e) for e in self.epochs], "note": "; ".join(self.notes)}


def temp_name(dest: str) -> str:
    dest = os.path.abspath(dest)
    return os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.migrating-{os.getpid()}")


def _stale_temps(dest: str) -> list[str]:
    """Temporary directories of earlier runs for ``dest`` whose process is gone (killed)."""
    dest = os.path.abspath(dest)
    return stale_temps(os.path.dirname(dest), f".{os.path.basename(dest)}.migrating-")


def stale_temps(parent: str, prefix: str) -> list[str]:
    """The entries of ``parent`` named ``prefix<pid>`` whose process is gone (a killed run's)."""
    out = []
    for n in os.listdir(parent):
        pid = n[len(prefix):]
        if n.startswith(prefix) and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            out.append(os.path.join(parent, n))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _check_dest(dest: str, src_root: str) -> None:
    dest_abs = os.path.realpath(dest)
    src_abs = os.path.realpath(src_root)
    if dest_abs == src_abs or dest_abs.startswith(src_abs + os.sep) or src_abs.startswith(dest_abs + os.sep):
        raise MigrateError(f"{dest}: DEST must lie outside SRC ({src_root}) and not hold it")
    if os.path.lexists(dest):
        if not os.path.isdir(dest):
            raise MigrateError(f"{dest}: exists and is not a directory")
        if os.listdir(dest):
            raise MigrateError(f"{dest}: exists and is not empty (give a new directory)")
    parent = os.path.dirname(os.path.abspath(dest))
    if not os.path.isdir(parent):
        raise MigrateError(f"{parent}: no such directory (DEST's parent must exist)")


def check_source(broker: BrokerStore) -> None:
    """MigrateError unless ``broker`` is a DLedger-mode store with its consume queues (checked
    before anything else is read of it, its ``index/`` files' shape included)."""
    if broker.commit_log:
        raise MigrateError(f"{broker.root}: a master-slave store already ({COMMIT_LOG_DIR}/, no dledger-<id>/): "
                           f"nothing to move")
    if broker.root is None:
        parent = os.path.dirname(os.path.abspath(broker.node_dir))
        raise MigrateError(f"{parent}: no {CONSUME_QUEUE_DIR}/ beside {os.path.basename(broker.node_dir)}/ (a DLedger-"
                           f"mode broker's store root holds both): its consume queues are missing, or this is no "
                           f"broker's store root. To go on, make them from the log first with 'dledgerctl mq rebuild "
                           f"{parent}' (it writes {CONSUME_QUEUE_DIR}/ and index/ there: run it on a copy to leave "
                           f"this one as it is), then migrate that")


def migrate(broker: BrokerStore, dest: str, *, commitlog_file_size: int = MAPPED_FILE_SIZE_COMMIT_LOG,
            include_uncommitted: bool = False, data_file_size: int | None = None,
            index_file_size: int | None = None, progress=None, max_hash_slot_num: int = MAX_HASH_SLOT_NUM,
            max_index_num: int = MAX_INDEX_NUM, id_map: str | None = None, skip_damaged: bool = False,
            cut: int | None = None, controller_mode: bool = False) -> Summary:
    """Write the master-slave store at ``dest`` (see the module's text); its summary.
    An entry whose own DLedger bodyCrc fails (its bytes changed since it was written) stops
    the move, or with ``skip_damaged`` is left out and listed in ``Summary.damaged`` (its
    units keep their queue offsets as blank units: requeue.write_queues).
    MigrateError when the move cannot be made; DEST is then left as it was. Only when
    ``id_map`` cannot be put in place after DEST was does the error say DEST was written
    (and where the map was left).

    ``cut``: move the entries up to this index (the group's committed index, one cut for every
    replica of a group), whatever this replica's own checkpoint says; refused when this
    replica proves entries past it committed. ``controller_mode``: also write the epoch file a
    controller-mode broker keeps (epochs.CONTROLLER_ENTRY_EPOCH from the log's first offset),
    so that each replica's first handshake with the master keeps what it holds
    (docs/rocketmq.md, "Into controller mode")."""
    check_source(broker)
    src = broker.root
    bcq = batch_queue_files(src)
    if bcq:
        raise MigrateError(f"{os.path.dirname(os.path.dirname(bcq[0]))}: RocketMQ 5 batch consume queues (a topic "
                           f"of queue.type BatchCQ); such a store cannot be moved yet (its messages would be left "
                           f"without a queue)")
    _check_dest(dest, src)
    if id_map is not None:
        _check_id_map(id_map, src)
    if broker_holds(src):
        raise MigrateError(f"{src}: a running broker holds its lock file: stop the broker first")
    bound = commit_bound(broker.node_dir, src)
    if cut is not None:
        bound = _at_cut(broker, bound, cut, data_file_size, index_file_size)
    if not bound.known and not include_uncommitted:
        raise MigrateError(f"{broker.node_dir}: its checkpoint holds no committed index and no consume queue points "
                           f"at a message: which entries are certain is unknown (give --include-uncommitted to move "
                           f"them all)")
    summary = Summary(src, os.path.abspath(dest), committed_index=bound.checkpoint)
    tmp = temp_name(dest)
    for stale in _stale_temps(dest) + ([tmp] if os.path.lexists(tmp) else []):
        shutil.rmtree(stale)
        summary.notes.append(f"removed {os.path.basename(stale)}, left by an interrupted run")
    for stale in _stale_temps(id_map) if id_map is not None else []:
        os.unlink(stale)
        summary.notes.append(f"removed {os.path.basename(stale)}, left by an interrupted run")
    os.makedirs(tmp)
    map_tmp = temp_name(id_map) if id_map is not None else None
    try:
        with IdMap(map_tmp) as ids:
            _write(broker, tmp, summary, commitlog_file_size, None if include_uncommitted else bound,
                   data_file_size, index_file_size, progress, (max_hash_slot_num, max_index_num), ids, skip_damaged)
        if controller_mode:
            _enter_controller_mode(tmp, summary)
        if os.path.isdir(dest):
            os.rmdir(dest)  # empty (checked): the rename takes its place
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if map_tmp is not None and os.path.lexists(map_tmp):
            os.unlink(map_tmp)
        raise
    _sync_dir(dest)
    if map_tmp is not None:
        try:
            os.rename(map_tmp, id_map)
        except OSError as exc:
            raise MigrateError(f"{dest}: written (the move is done), but the id map could not be renamed to "
                               f"{id_map} ({exc.strerror}); it was left at {map_tmp}") from None
        _sync_dir(id_map)
    return summary


def _sync_dir(path: str) -> None:
    """fsync the directory that holds ``path`` (a rename into it lasts)."""
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_id_map(path: str, src_root: str) -> None:
    map_abs = os.path.realpath(path)
    src_abs = os.path.realpath(src_root)
    if map_abs == src_abs or map_abs.startswith(src_abs + os.sep):
        raise MigrateError(f"{path}: --id-map must lie outside SRC ({src_root})")
    if os.path.lexists(path):
        raise MigrateError(f"{path}: exists (give a new file for --id-map)")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise MigrateError(f"{parent}: no such directory (for --id-map {path})")


def _first_message(broker, data_file_size, index_file_size, bound: Bound | None = None) -> int | None:
    """The commit-log offset of SRC's first message (with ``bound``: of the first entry it
    does not hold certain); None: it holds none."""
    sel = Selection(from_index=None if bound is None or bound.checkpoint is None else bound.checkpoint + 1)
    for b in batches(broker.node_dir, sel, data_file_size=data_file_size, index_file_size=index_file_size):
        if b.damage:
            continue
        normal = b.magic == MAGIC_NORMAL
        if bound is not None:
            normal &= ~bound.certain(b.index, b.pos)
        normal = np.flatnonzero(normal)
        if len(normal):
            return int(b.pos[normal[0]]) + HEADER_SIZE
    return None


def _damaged_offsets(broker, data_file_size, index_file_size) -> np.ndarray:
    """The SRC offsets (increasing) of the messages whose entry's bodyCrc fails (scan.crc_damaged)."""
    out = []
    for b in batches(broker.node_dir, Selection(), data_file_size=data_file_size, index_file_size=index_file_size):
        if b.damage:
            continue
        rows = np.flatnonzero(b.magic == MAGIC_NORMAL)
        out.append(b.pos[rows[crc_damaged(b, rows)]] + HEADER_SIZE)
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def _enter_controller_mode(tmp: str, summary: Summary) -> None:
    """The files a controller-mode broker (RocketMQ 5) needs beside the moved log: its epoch
    file (one epoch, CONTROLLER_ENTRY_EPOCH, from the log's first offset), and its store
    checkpoint's confirmPhyOffset at the log's end. Every message moved is committed; and at
    start a controller-mode store re-reads the log from its confirm offset
    (ConsumeQueueStore.compensateForHA), which in 5.3.3 throws on a message of magic V2 (a
    topic longer than 127 bytes), so the store would not start from 0 on such a log."""
    summary.epochs = [(CONTROLLER_ENTRY_EPOCH, summary.log_start)]
    write_file(os.path.join(tmp, EPOCH_FILE), epoch_file_text([EpochEntry(*e) for e in summary.epochs]).encode())
    path = os.path.join(tmp, CHECKPOINT_FILE)
    fd = os.open(path, os.O_WRONLY)
    try:
        pwrite_all(fd, CONFIRM_OFFSET.pack(summary.log_end), CONFIRM_OFFSET_AT, path)
        os.fsync(fd)
    finally:
        os.close(fd)


def _at_cut(broker, bound: Bound, cut: int, data_file_size, index_file_size) -> Bound:
    """The bound of a move at the group's cut (``--cut``): every entry up to ``cut``, none past
    it. MigrateError when this replica itself proves an entry past ``cut`` committed (its
    checkpoint, or a queue or the key index pointing at its message): the cut is not the
    group's committed index, and moving at it would drop messages consumers may have had."""
    if cut < -1:
        raise MigrateError(f"--cut {cut}: an entry index, or -1 for none")
    if bound.checkpoint is not None and bound.checkpoint > cut:
        raise MigrateError(f"{broker.node_dir}: its checkpoint says entries up to {bound.checkpoint} are committed, "
                           f"past --cut {cut}: the group's committed index is at least {bound.checkpoint}")
    if bound.proven >= 0:
        with FileStore.open(broker.node_dir, read_only=True, data_file_size=data_file_size,
                            index_file_size=index_file_size) as s:
            if s.end_index > cut and s.begin_index <= cut + 1:
                pos, _size = s.locate(cut + 1)
                if pos + HEADER_SIZE <= bound.proven:
                    raise MigrateError(f"{broker.node_dir}: {bound.proof} points at commit-log offset {bound.proven}, "
                                       f"at or past entry {cut + 1}'s message: entries past --cut {cut} were "
                                       f"committed (the broker dispatches only committed entries)")
    return Bound(cut)


def _step(progress, text: str) -> None:
    """Tell the progress (when it can be told: dledgerctl's bar) that a step the bytes do not
    measure begins."""
    step = getattr(progress, "step", None)
    if step is not None:
        step(text)


def _write(broker, tmp, summary, file_size, committed, data_file_size, index_file_size, progress, index_shape,
           ids: IdMap, skip_damaged: bool = False) -> None:
    cut = None if committed is None else _first_message(broker, data_file_size, index_file_size, committed)
    start, furthest = log_start(broker.root, _first_message(broker, data_file_size, index_file_size), file_size,
                                 cut)
    skipped = _damaged_offsets(broker, data_file_size, index_file_size) if skip_damaged else None
    if skipped is not None and len(skipped) and not start:
        start = file_size  # (the blank units left for them lie below the log, as a pull needs: requeue.py)
        summary.notes.append(f"the commit log starts at {start} (the units of damaged messages left out are blank "
                             f"units, which must lie below the log)")
    elif start:
        summary.notes.append(f"the commit log starts at {start} (a queue begins with fillPreBlank units, or holds "
                             f"blank units only, which RocketMQ takes for messages when the log starts at 0)")
    summary.dispatched_until = summary.log_start = start  # (DefaultMessageStore.start: dispatch resumes there at least)
    log = CommitLogWriter(os.path.join(tmp, COMMIT_LOG_DIR), file_size, start)
    # the index is built in this pass for the messages up to the furthest unit's (the broker
    # dispatches from the end of its queues' units); checked against that end afterwards
    index = IndexWriter(tmp, *index_shape)
    spill = os.path.join(tmp, OFFSETS_DIR)
    offsets = Offsets(spill)
    mover = Mover(broker.node_dir, log, index, ids, offsets, summary, committed, furthest, progress, root=broker.root,
                  skip_damaged=skip_damaged)
    try:
        for b in batches(broker.node_dir, Selection(), data_file_size=data_file_size, index_file_size=index_file_size):
            mover.feed(b)
        _step(progress, "finishing the commit log and index")
    finally:
        offsets.close()
        log.close()
        t0 = time.perf_counter()
        index.close()
        mover.key_seconds += time.perf_counter() - t0
    summary.files, summary.blanks, summary.log_end = log.files, log.blanks, log.offset
    old_a, new_a = mover.offsets()
    src_first, indexed_last, skipped_first, last_ts = mover.src_first, mover.indexed_last, mover.skipped_first, \
        mover.last_ts
    _step(progress, "writing the consume queues")
    write_queues(broker.root, tmp, old_a, new_a, 1 << 62 if src_first is None else src_first, summary,
                 np.array([o for _i, o in summary.damaged], np.int64) if summary.damaged else None)
    try:
        _, lost = move_timer_log(broker.root, tmp, old_a, new_a)
    except TimerLogError as exc:
        raise MigrateError(f"{exc} (RocketMQ 5's timer log; nothing was written)") from None
    if lost:
        summary.notes.append(f"{lost} timer-log units of messages not moved point nowhere now (the timer skips them)")
    del old_a, new_a
    shutil.rmtree(spill)  # (DEST gets none of it)
    if (indexed_last is None or indexed_last < summary.dispatched_until) and \
            (skipped_first is None or skipped_first >= summary.dispatched_until):
        summary.index_wall_seconds = mover.key_seconds
        index_ts = _index_done(summary, index)
    else:  # (left-out messages, or fillPreBlank-only queues, moved the broker's dispatch point)
        _step(progress, "writing the index")
        index_ts = _write_index(tmp, summary, *index_shape)
    write_file(os.path.join(tmp, CHECKPOINT_FILE), CHECKPOINT_TIMES.pack(last_ts, last_ts, index_ts).ljust(
        CHECKPOINT_SIZE, b"\0"))
    rocksdb = rocksdb_queues(broker.root) is not None
    if rocksdb:
        summary.notes.append(f"SRC's {CONSUME_QUEUE_DIR}/ is a RocksDB database (RocketMQ 5's storeType "
                             f"defaultRocksDB), not read: the broker dispatches every message again when it starts, at the queue "
                             f"offsets the messages hold")
    config = os.path.join(broker.root, CONFIG_DIR)
    if os.path.isdir(config):
        copy_tree(config, os.path.join(tmp, CONFIG_DIR))
    else:
        summary.notes.append("no config/ in SRC")
    compaction = os.path.join(broker.root, COMPACTION_DIR)
    if os.path.isdir(compaction):
        copy_tree(compaction, os.path.join(tmp, COMPACTION_DIR))
    if committed is not None:
        if committed.note():
            summary.notes.append(committed.note())
        if committed.highest is not None:
            summary.committed_index = max(committed.highest, -1 if committed.checkpoint is None else
                                          committed.checkpoint)
    if summary.damaged:
        shown = ", ".join(f"{i} (offset {o})" for i, o in summary.damaged[:10])
        summary.notes.append(f"{len(summary.damaged)} damaged entries left out (their own bodyCrc fails; their units "
                             f"are blank units now): entries {shown}{' ...' if len(summary.damaged) > 10 else ''}")
    if summary.left_out:
        summary.notes.append(f"{summary.left_out} messages of entries past the committed index "
                             f"{summary.committed_index} left out")
    if summary.undispatched and not rocksdb:
        summary.notes.append(f"{summary.undispatched} messages no unit points at (transaction halves never get "
                             f"one; messages past every queue's end the broker dispatches when it starts)")


def _write_index(tmp: str, summary: Summary, slots: int, index_num: int) -> int:
    """``index/`` made again from the new log for the messages before
    ``summary.dispatched_until`` (when the move's own pass could not know that end); the
    store time of the last one indexed (the checkpoint's indexMsgTimestamp), 0 when none was."""
    shutil.rmtree(os.path.join(tmp, INDEX_DIR), ignore_errors=True)
    t0 = time.perf_counter()
    writer = build_index(tmp, summary.dispatched_until, slots=slots, index_num=index_num)
    summary.index_wall_seconds = time.perf_counter() - t0
    return _index_done(summary, writer)


def _index_done(summary: Summary, writer: IndexWriter) -> int:
    summary.index_files, summary.index_keys, summary.index_seconds = len(writer.files), writer.keys_written, \
        writer.seconds
    if writer.indexed < summary.messages:
        summary.notes.append(f"{summary.messages - writer.indexed} messages past the end of every consume queue not "
                             f"indexed (the broker dispatches and indexes them when it starts)")
    return writer.last_ts
