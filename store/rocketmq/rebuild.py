"""``mq rebuild``: a stopped broker's consume queues and key index made again from its log, in place.

What a broker's dispatch (``ReputMessageService``) would write if it read the whole log from
its first message, for either kind of store (DLedger mode: ``dledger-<id>/``; master-slave:
``commitlog/``):

- ``consumequeue/<topic>/<queueId>/``: for each message the dispatch puts in a queue (not a
  transaction's prepared or rollback half), a unit (commit-log offset, size, tag code) at
  the message's own QUEUEOFFSET, in files of the store's consume-queue file size (the old
  files' size, else RocketMQ's default). A queue whose first message in the log has a
  queue offset past 0 gets ``fillPreBlank`` units (0, Integer.MAX_VALUE, 0) before it in
  its file, as ``ConsumeQueue.putMessagePositionInfo`` writes them. The tag code is
  Java's hash of TAGS, or for a delayed message in SCHEDULE_TOPIC_XXXX its delivery time
  (store time + the level's delay; ``--delay-levels`` when the broker's messageDelayLevel
  is not the default);
- ``index/``: the keys ``IndexService.buildIndex`` puts (index.py) for every message before
  the end of the furthest unit written (the broker dispatches the rest itself at start);
- ``checkpoint``: logicsMsgTimestamp and indexMsgTimestamp set to the last dispatched and
  the last indexed message's store time (physicMsgTimestamp kept), so that an abnormal
  recovery does not discard the new index files.

In DLedger mode only committed entries are dispatched (past the committed index a
follower's entries may be cut), unless ``include_uncommitted``.

Rules kept here: nothing in the store changes until everything is written. The new files
are written under ``<root>/.rebuild-<pid>/`` (one a killed run left, whose process is gone,
is removed first); then the old ``consumequeue/``, ``index/`` and ``checkpoint`` are renamed
aside to ``<name>.old-<UTC time>`` (never deleted) and the new ones renamed in, with Ctrl-C
and SIGTERM held over the renames (interrupts.py: they finish, or a failed one is put back,
whole; :class:`RebuildInterrupted` then says which). A full disk is an error naming the file
and the bytes (store/writing.py), and what was written is removed. A log the
dispatch could not read as it stands (a damaged entry, an entry that is not a message, a
negative QUEUEID, a wrong PHYSICALOFFSET, a queue offset seen twice or skipped) stops the
rebuild with :class:`RebuildError` naming the place, before anything is renamed; ``mq
check`` tells more. A running broker (holding the root's ``lock`` file) is refused, and so
is a RocketMQ 5 store with ``batchconsumequeue/`` (topics of queue.type BatchCQ, whose
queues this rebuild does not write) or whose ``consumequeue/`` is a RocksDB database
(``storeType=defaultRocksDB``).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import struct
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..errors import StoreUsageError
from ..writing import write_all
from ..format import FILE_NAME_DIGITS, HEADER_SIZE, MAGIC_NORMAL
from ..interrupts import HeldSignals
from ..reading import Selection
from .brokerconf import BROKER_PROPERTIES, CONFIG_DIR, KEY_CQ_FILE_SIZE, default_conf, queue_file_size
from .commitlog import COMMIT_LOG_DIR
from .commitment import commit_bound
from .consumequeue import BLANK_SIZE, CONSUME_QUEUE_DIR, CQ_FILE_SIZE, CQ_STORE_UNIT_SIZE, UNIT, find_queues
from .index import MAX_HASH_SLOT_NUM, MAX_INDEX_NUM, IndexWriter, take_keys
from .layout import BrokerStore, batch_queue_files, rocksdb_queues
from .logwalk import walk
from .lookup import INDEX_DIR
from .migrate import CHECKPOINT_FILE, CHECKPOINT_SIZE, CHECKPOINT_TIMES, LOCK_FILE, _sync_dir, stale_temps
from .scan import batches
from .stream import Log, _overlaps

FLUSH_UNITS = 1 << 20  # units buffered over all queues before they are written out
_REFUSED = ("damage", "entry-crc", "not-a-message", "queue-id", "phy-offset")  # what a rebuild cannot take as it stands


class RebuildError(StoreUsageError):
    """The queues cannot be rebuilt from the log as it stands (the text says why); the store
    was not changed."""


class RebuildInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM: ``signum``) stopped the rebuild; the text says what it left: nothing
    changed (before the final renames), or the renames finished (they are held to their end)."""

    def __init__(self, text: str, signum: int = signal.SIGINT) -> None:
        super().__init__(text)
        self.signum = signum


@dataclass
class Summary:
    root: str
    messages: int = 0  # messages read from the log
    units: int = 0  # units written (one per dispatched message)
    queues: int = 0  # consume queues written
    queue_files: int = 0
    blanks: int = 0  # fillPreBlank units written
    undispatched: int = 0  # transaction halves (prepared, rollback): no unit
    committed_index: int | None = None
    left_out: int = 0  # messages of entries past the committed index
    index_files: int = 0
    index_keys: int = 0
    dispatched_until: int = 0  # the end of the furthest unit
    kept_aside: list[str] = field(default_factory=list)  # the old files, renamed
    notes: list[str] = field(default_factory=list)

    def row(self) -> dict:
        return {"root": self.root, "messages": self.messages, "queues": self.queues, "units": self.units,
                "queue_files": self.queue_files, "blanks": self.blanks, "undispatched": self.undispatched,
                "committed_index": self.committed_index, "left_out": self.left_out,
                "index_files": self.index_files, "index_keys": self.index_keys,
                "kept_aside": " ".join(self.kept_aside), "note": "; ".join(self.notes)}


def store_root(broker: BrokerStore) -> str:
    """The broker's store root, also when its ``consumequeue/`` is gone (what a rebuild is for)."""
    if broker.root is not None:
        return broker.root
    return os.path.dirname(os.path.abspath(broker.node_dir))


def rebuild(broker: BrokerStore, *, include_uncommitted: bool = False, queue_file_size: int | None = None,
            delay_levels_ms: list[int] | None = None, max_hash_slot_num: int = MAX_HASH_SLOT_NUM,
            max_index_num: int = MAX_INDEX_NUM, data_file_size: int | None = None,
            index_file_size: int | None = None, progress=None, broker_conf: str | None = None) -> Summary:
    """Rebuild ``consumequeue/``, ``index/`` and the checkpoint's dispatch times (see the
    module's text); the summary. RebuildError (store unchanged) when it cannot be done.
    ``broker_conf``: the broker's configuration file, for its consume-queue file size
    (:func:`queue_file_size_for`)."""
    root = store_root(broker)
    if not any(os.path.lexists(os.path.join(root, n)) for n in _BROKER_FILES) and not _asides(root, CONSUME_QUEUE_DIR):
        raise RebuildError(f"{root}: does not look like a broker's store root (none of {', '.join(_BROKER_FILES)}): "
                           f"give the store root that holds the log")
    bcq = batch_queue_files(root)
    if bcq:
        raise RebuildError(f"{os.path.dirname(os.path.dirname(bcq[0]))}: RocketMQ 5 batch consume queues (a topic "
                           f"of queue.type BatchCQ), which this rebuild does not write: their messages would get "
                           f"units in {CONSUME_QUEUE_DIR}/ instead; nothing changed")
    if rocksdb_queues(root):
        raise RebuildError(f"{rocksdb_queues(root)}: {CONSUME_QUEUE_DIR}/ is a RocksDB database (RocketMQ 5's "
                           f"storeType defaultRocksDB), which this rebuild does not write; nothing changed")
    try:
        with _Lock(root):
            return _rebuild(broker, root, include_uncommitted, queue_file_size, delay_levels_ms, max_hash_slot_num,
                            max_index_num, data_file_size, index_file_size, progress, broker_conf)
    except KeyboardInterrupt as exc:
        if isinstance(exc, RebuildInterrupted):
            raise
        raise RebuildInterrupted(f"{root}: interrupted before the rebuilt files were renamed in: the store is as it "
                                 f"was (what was written under .rebuild-{os.getpid()} was removed)") from None


def _rebuild(broker, root, include_uncommitted, queue_file_size, delay_levels_ms, max_hash_slot_num, max_index_num,
             data_file_size, index_file_size, progress, broker_conf) -> Summary:
    committed = None
    if not broker.commit_log:
        # (the old queues and index prove their messages committed: commitment.py)
        committed = commit_bound(broker.node_dir, root)
        if not committed.known and not include_uncommitted:
            raise RebuildError(f"{broker.node_dir}: its checkpoint holds no committed index and no consume queue "
                               f"points at a message: which entries the broker dispatches is unknown (give "
                               f"--include-uncommitted to take them all)")
    old_queues = find_queues(root)
    fsize, size_notes = queue_file_size_for(root, old_queues, queue_file_size, broker_conf)
    if fsize % CQ_STORE_UNIT_SIZE:
        raise RebuildError(f"consume-queue files of {fsize} bytes: not a whole number of {CQ_STORE_UNIT_SIZE}-byte "
                           f"units")
    summary = Summary(root, committed_index=None if include_uncommitted or committed is None else
                      committed.checkpoint)
    summary.notes += size_notes + _torn(old_queues, root)
    for stale in stale_temps(root, ".rebuild-"):
        shutil.rmtree(stale)
        summary.notes.append(f"removed {os.path.basename(stale)}, left by an interrupted run")
    tmp = os.path.join(root, f".rebuild-{os.getpid()}")
    if os.path.lexists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    held = HeldSignals()
    try:
        last_ts = _write_queues(broker, tmp, fsize, summary, None if include_uncommitted else committed,
                                delay_levels_ms, data_file_size, index_file_size, progress)
        index_ts = _write_index(broker, tmp, summary, max_hash_slot_num, max_index_num, data_file_size,
                                index_file_size)
        _write_checkpoint(root, tmp, last_ts, index_ts)
        _notes(old_queues, summary, tmp, root)
        _sync_dirs(tmp)
        held.start()  # (from here a Ctrl-C waits for the renames: they finish, or are put back, whole)
    except BaseException:
        held.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        _swap(root, tmp, summary)
    finally:
        held.stop()
    if held.caught:
        aside = f" (the old files are {', '.join(summary.kept_aside)})" if summary.kept_aside else ""
        raise RebuildInterrupted(f"{root}: interrupted during the final renames, which were finished first: the "
                                 f"rebuild is complete{aside}", held.caught[0])
    return summary


# what a broker's store root holds besides its log (StorePathConfigHelper; config/ beside it)
_BROKER_FILES = ("lock", "abort", CHECKPOINT_FILE, "config", CONSUME_QUEUE_DIR, INDEX_DIR)


class _Lock:
    """The store root's ``lock`` file, held (as ``DefaultMessageStore.start`` takes it: a
    POSIX record lock on its first byte) from the check until the new files are in, so a
    broker started meanwhile fails to start instead of writing into files being moved. A
    root without one (a broker makes it when it first opens the store) gets none: nothing is
    left behind by a run that is killed."""

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, LOCK_FILE)
        self.fd = -1

    def __enter__(self) -> "_Lock":
        try:
            self.fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return self
        except OSError as exc:
            raise RebuildError(f"{self.path}: cannot be opened to lock it ({exc.strerror or exc})") from None
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError:
            self.__exit__()
            raise RebuildError(f"{os.path.dirname(self.path)}: a running broker holds its lock file: stop the "
                               f"broker first") from None
        return self

    def __exit__(self, *exc) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # (releases the lock)
            self.fd = -1


def _asides(root: str, name: str) -> list[str]:
    """The ``NAME.old-TIME`` directories earlier rebuilds left, newest last."""
    return sorted(n for n in os.listdir(root) if n.startswith(f"{name}.old-"))


def queue_file_size_for(root: str, old_queues, given: int | None, broker_conf: str | None) -> tuple[int, list[str]]:
    """The size of the rebuilt queue files, and the notes that say where it came from: ``given``
    (--queue-file-size); else the broker's mappedFileSizeConsumeQueue in ``broker_conf`` or
    ``root/config/broker.properties`` (brokerconf.py: RocketMQ refuses queue files of another
    size); else the old files' size; else the newest set-aside queues' (a rebuild killed
    between its renames leaves them); else RocketMQ's default, said with how to give another.
    Only whole numbers of units count as a file's size (a torn file's length is not one)."""
    path = broker_conf or default_conf(root)
    conf = queue_file_size(path) if path is not None else None
    notes = [conf.note] if conf is not None and conf.note else []
    old = _common_size(f.size for q in old_queues for f in q.files)
    if given is not None:
        if conf is not None and conf.size not in (None, given):
            notes.append(f"--queue-file-size {given} is not the {conf.size} bytes {conf.path} sets: the broker "
                         f"refuses queue files of another size than its own")
        return given, notes
    if conf is not None and conf.size is not None:
        was = f" (the old ones are {old} bytes)" if old not in (None, conf.size) else ""
        return conf.size, notes + [f"consume-queue files of {conf.size} bytes, the {KEY_CQ_FILE_SIZE} of "
                                   f"{conf.path}{was}"]
    if old is not None:
        return old, notes
    for name in reversed(_asides(root, CONSUME_QUEUE_DIR)):
        aside = _common_size(os.path.getsize(os.path.join(d, f)) for d, _, files in
                             os.walk(os.path.join(root, name)) for f in files if f.isdigit())
        if aside is not None:
            return aside, notes + [f"consume-queue files of {aside} bytes, the size of those in {name}"]
    where = f"{conf.path} does not set {KEY_CQ_FILE_SIZE}" if conf is not None else \
        f"no broker configuration beside the store ({os.path.join(root, CONFIG_DIR, BROKER_PROPERTIES)})"
    return CQ_FILE_SIZE, notes + [f"consume-queue files of {CQ_FILE_SIZE} bytes, RocketMQ's default "
                                  f"{KEY_CQ_FILE_SIZE}: no queue file is left to take the size from and {where}; a "
                                  f"broker that sets another refuses these files: rebuild again with --broker-conf "
                                  f"FILE (its configuration) or --queue-file-size SIZE"]


def _common_size(sizes) -> int | None:
    """The most common of ``sizes`` that is a whole number of units (the larger on a tie); None if none is."""
    counts = Counter(s for s in sizes if s >= CQ_STORE_UNIT_SIZE and s % CQ_STORE_UNIT_SIZE == 0)
    return max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0] if counts else None


def _torn(old_queues, root: str) -> list[str]:
    """A note on the old queue files that end in part of a unit (torn: what a rebuild is for)."""
    torn = [f for q in old_queues for f in q.files if f.size % CQ_STORE_UNIT_SIZE]
    if not torn:
        return []
    f = torn[0]
    more = f" and {len(torn) - 1} more" if len(torn) > 1 else ""
    files = "file ends" if len(torn) == 1 else "files end"
    return [f"{len(torn)} old consume-queue {files} in part of a unit (torn: {os.path.relpath(f.path, root)} has "
            f"{f.size % CQ_STORE_UNIT_SIZE} bytes past its last whole one{more}); the queues were rebuilt from the "
            f"log"]


def _sync_dirs(top: str) -> None:
    """fsync every directory under ``top`` (the new files' names last once renamed in)."""
    for d, _, _ in os.walk(top):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _safe_name(topic: str) -> bool:
    """A topic that names one directory under consumequeue/ (no separator, no NUL, not . or ..)."""
    return topic not in ("", ".", "..") and "/" not in topic and "\0" not in topic and \
        len(topic.encode("utf-8", "surrogateescape")) <= 255


class _Queues:
    """The units being written, per queue: buffered, then written to their files in
    queue-offset order (a file is opened only while a flush writes to it)."""

    def __init__(self, dir: str, fsize: int) -> None:
        self.dir, self.fsize = dir, fsize
        self.expect: dict[tuple[str, int], int] = {}  # queue -> the queue offset its next message must have
        self.last_phy: dict[tuple[str, int], int] = {}  # queue -> the commit-log offset of its last message
        self.written: dict[tuple[str, int], int] = {}  # queue -> the queue offset its pending units start at
        self.pending: dict[tuple[str, int], list[np.ndarray]] = {}
        self.buffered = 0
        self.files: set[str] = set()
        self.blanks = 0
        self.end = 0  # the end of the furthest unit (offset + size)

    def add(self, topic: str, qid: int, qoff: np.ndarray, phy: np.ndarray, size: np.ndarray,
            tags: np.ndarray) -> None:
        """One queue's next units, in log order (queue offsets must follow on)."""
        key = (topic, qid)
        if key not in self.expect:
            if not _safe_name(topic):
                raise RebuildError(f"the message at commit-log offset {int(phy[0])} has topic {topic!r}, which cannot "
                                   f"be a directory's name (a broker never stores one: run 'dledgerctl mq check')")
            first = int(qoff[0])
            if first < 0:
                raise RebuildError(f"queue {topic}/{qid}: the message at commit-log offset {int(phy[0])} has queue "
                                   f"offset {first}: a broker never writes a negative one (run 'dledgerctl mq check')")
            start = first - first % (self.fsize // CQ_STORE_UNIT_SIZE)
            self.expect[key], self.written[key] = first, start
            if first > start:  # fillPreBlank: the file's units before the queue's first
                b = np.zeros(first - start, UNIT)
                b["size"] = BLANK_SIZE
                self.pending[key] = [b]
                self.blanks += len(b)
        want = np.arange(self.expect[key], self.expect[key] + len(qoff))
        bad = np.flatnonzero(qoff != want)
        if len(bad):
            k = int(bad[0])
            prev = self.last_phy.get(key) if k == 0 else int(phy[k - 1])
            what = "seen twice" if int(qoff[k]) < int(want[k]) else "skipped"
            before = f"the one before it (at {prev}) {int(want[k]) - 1}" if prev is not None else \
                f"the queue's first is {int(want[k])}"
            raise RebuildError(f"queue {topic}/{qid}: the message at commit-log offset {int(phy[k])} has queue offset "
                               f"{int(qoff[k])}, {before}: queue offsets {what} (run 'dledgerctl mq check')")
        u = np.empty(len(qoff), UNIT)
        u["offset"], u["size"], u["tags"] = phy, size, tags
        self.pending.setdefault(key, []).append(u)
        self.expect[key] += len(qoff)
        self.last_phy[key] = int(phy[-1])
        self.end = max(self.end, int(phy[-1]) + int(size[-1]))
        self.buffered += len(u)
        if self.buffered >= FLUSH_UNITS:
            self.flush()

    def flush(self) -> None:
        for key, parts in self.pending.items():
            self._write(key, np.concatenate(parts).astype(UNIT) if len(parts) > 1 else parts[0])  # (concatenate
            # gives native byte order)
        self.pending, self.buffered = {}, 0

    def _write(self, key: tuple[str, int], units: np.ndarray) -> None:
        topic, qid = key
        qdir = os.path.join(self.dir, topic, str(qid))
        os.makedirs(qdir, exist_ok=True)
        at = self.written[key] * CQ_STORE_UNIT_SIZE
        data = memoryview(units.tobytes())
        done = 0
        while done < len(data):
            fstart = at - at % self.fsize
            path = os.path.join(qdir, f"{fstart:0{FILE_NAME_DIGITS}d}")
            n = min(len(data) - done, fstart + self.fsize - at)
            with open(path, "r+b" if path in self.files else "xb", buffering=0) as fh:
                fh.seek(at - fstart)
                write_all(fh, data[done:done + n], path)
            self.files.add(path)
            done += n
            at += n
        self.written[key] += len(units)

    def close(self) -> None:
        """Flush, then give every file its full size (RocketMQ preallocates them) and sync it."""
        self.flush()
        for path in self.files:
            with open(path, "r+b") as fh:
                fh.truncate(self.fsize)
                fh.flush()
                os.fsync(fh.fileno())


def _write_queues(broker, tmp, fsize, summary, committed, delay_levels_ms, data_file_size, index_file_size,
                  progress) -> int:
    """The consume queues from the log; the latest store time of a message dispatched."""
    queues = _Queues(os.path.join(tmp, CONSUME_QUEUE_DIR), fsize)
    log, findings, file_ends, last_ts = Log(), [], {}, 0
    for b, cols in walk(broker, findings, log, data_file_size=data_file_size, index_file_size=index_file_size,
                        progress=progress, delay_levels_ms=delay_levels_ms):
        _refuse(broker, findings)
        file_ends[b.start] = max(file_ends.get(b.start, 0), int(b.pos[-1] + b.size[-1]))
        take = np.ones(len(cols["phy"]), bool)
        if committed is not None:
            take = committed.certain(cols["index"], cols["phy"] - HEADER_SIZE)
            summary.left_out += len(take) - int(np.count_nonzero(take))
        summary.messages += int(np.count_nonzero(take))
        summary.undispatched += int(np.count_nonzero(take & ~cols["dispatched"]))
        rows = np.flatnonzero(take & cols["dispatched"])
        if not len(rows):
            continue
        key = (cols["topic"][rows].astype(np.int64) << 32) | (cols["queue_id"][rows].astype(np.int64) & 0xFFFFFFFF)
        order = np.argsort(key, kind="stable")
        names = log.topic_names()
        for grp in np.split(rows[order], np.flatnonzero(np.diff(key[order])) + 1):
            queues.add(names[int(cols["topic"][grp[0]])], int(cols["queue_id"][grp[0]]), cols["queue_offset"][grp],
                       cols["phy"][grp], cols["size"][grp], cols["tags"][grp])
        last_ts = max(last_ts, int(cols["store_ts"][rows].max()))
    _refuse(broker, findings)
    if committed is not None and committed.note():
        summary.notes.append(committed.note())
        summary.committed_index = committed.highest
    if _overlaps(log, file_ends):
        raise RebuildError(f"{broker.node_dir}: a data file holds entries past where the next one begins (run "
                           f"'dledgerctl mq check')")
    queues.close()
    summary.queues, summary.units = len(queues.expect), summary.messages - summary.undispatched
    summary.queue_files, summary.blanks, summary.dispatched_until = len(queues.files), queues.blanks, queues.end
    return last_ts


def _refuse(broker, findings: list) -> None:
    """Stop at the first finding the dispatch cannot read past; the others (a body CRC that
    does not match: the dispatch does not check it) are dropped, so the list stays short."""
    for f in findings:
        if f["finding"] in _REFUSED:
            # (a commit log's files, a master-slave store's or an old one's, are named from the store root)
            base = "" if f["file"].startswith(COMMIT_LOG_DIR + "/") else f"{os.path.basename(broker.node_dir)}/"
            where = f"{base}{f['file']} offset {f['offset']}"
            raise RebuildError(f"{where}: {f['finding']}: {f['detail']} (the store was not changed; run "
                               f"'dledgerctl mq check' on it)")
    findings.clear()


def _write_index(broker, tmp, summary, slots, index_num, data_file_size, index_file_size) -> int:
    """``index/`` for the messages before the end of the furthest unit, their keys taken a batch
    at a time (index.take_keys); the latest store time of those."""
    writer = IndexWriter(tmp, slots, index_num)
    latest = 0
    try:
        for b in batches(broker.node_dir, Selection(), data_file_size=data_file_size, index_file_size=index_file_size):
            if b.damage:
                raise RebuildError(f"{b.file}: {b.damage}")
            offset = b.pos + HEADER_SIZE
            n = int(np.searchsorted(offset, summary.dispatched_until))
            normal = np.flatnonzero(b.magic[:n] == MAGIC_NORMAL)
            if len(normal):
                counts, hashes, kc = take_keys(b.buf, offset[normal] - b.start, b.bsize[normal])
                writer.add_many(counts, hashes, offset[normal], kc.store_ts)
                latest = max(latest, int(kc.store_ts.max()))
            if n < len(offset):
                break
    finally:
        writer.close()
    summary.index_files, summary.index_keys = len(writer.files), writer.keys_written
    return latest


def _write_checkpoint(root: str, tmp: str, logics_ts: int, index_ts: int) -> None:
    """The new checkpoint (RocketMQ's StoreCheckpoint file): the old one's bytes with
    logicsMsgTimestamp and indexMsgTimestamp (i64 at 8 and 16) set to the dispatch's times
    (an index file whose end time is past indexMsgTimestamp is dropped at an abnormal
    recovery); physicMsgTimestamp and what RocketMQ 5 keeps after them (masterFlushedOffset,
    confirmPhyOffset) stay. Without one, a new one (physicMsgTimestamp the last message's)."""
    try:
        with open(os.path.join(root, CHECKPOINT_FILE), "rb") as fh:
            data = bytearray(fh.read(CHECKPOINT_SIZE))
    except FileNotFoundError:
        data = bytearray()
    if len(data) < CHECKPOINT_TIMES.size:
        data = bytearray(CHECKPOINT_TIMES.pack(logics_ts, 0, 0))
    data = data.ljust(CHECKPOINT_SIZE, b"\0")
    struct.pack_into(">qq", data, 8, logics_ts, index_ts)
    path = os.path.join(tmp, CHECKPOINT_FILE)
    with open(path, "xb", buffering=0) as fh:
        write_all(fh, data, path)
        os.fsync(fh.fileno())


def _notes(old_queues, summary: Summary, tmp: str, root: str) -> None:
    """What the old queues held that the log no longer backs: their consumers' offsets past
    the new ends are reset by the broker (``mq consumers`` lists them)."""
    shorter = []
    for q in old_queues:
        if not q.files or q.damaged:
            continue
        new_dir = os.path.join(tmp, os.path.relpath(q.dir, root))
        if _queue_end(q.dir) > _queue_end(new_dir):
            shorter.append(f"{q.topic}/{q.queue_id}")
    if shorter:
        summary.notes.append(f"{len(shorter)} queues end earlier than their old files did (the log no longer holds "
                             f"their last messages: {', '.join(shorter[:5])}{' ...' if len(shorter) > 5 else ''}); "
                             f"consumers' offsets past the new ends are reset by the broker ('dledgerctl mq "
                             f"consumers' lists them)")
    if summary.left_out:
        summary.notes.append(f"{summary.left_out} messages of entries past the committed index "
                             f"{summary.committed_index} not dispatched")


def _queue_end(qdir: str) -> int:
    """The queue offset after the last unit written in ``qdir`` (0 when there is none)."""
    try:
        names = sorted(n for n in os.listdir(qdir) if n.isdigit())
    except FileNotFoundError:
        return 0
    if not names:
        return 0
    with open(os.path.join(qdir, names[-1]), "rb") as fh:
        raw = fh.read()
    units = np.frombuffer(raw, UNIT, count=len(raw) // CQ_STORE_UNIT_SIZE)  # (a torn tail: not a unit)
    used = np.flatnonzero((units["offset"] >= 0) & (units["size"] > 0))
    return int(names[-1]) // CQ_STORE_UNIT_SIZE + (int(used[-1]) + 1 if len(used) else 0)


def _swap(root: str, tmp: str, summary: Summary) -> None:
    """The old files aside, the new ones in (each a rename in the store root), then synced.
    A rename that fails puts back what was moved (RebuildError: the store as it was); when
    even that fails the error names where each file is, and nothing is deleted."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    done: list[tuple[str, str]] = []  # (from, to) of each rename made
    try:
        for name in (CONSUME_QUEUE_DIR, INDEX_DIR, CHECKPOINT_FILE):
            old = os.path.join(root, name)
            if os.path.lexists(old):
                aside = f"{old}.old-{stamp}"
                k = 1
                while os.path.lexists(aside):
                    k += 1
                    aside = f"{old}.old-{stamp}-{k}"
                os.rename(old, aside)
                done.append((old, aside))
            new = os.path.join(tmp, name)
            if os.path.lexists(new):
                os.rename(new, old)
                done.append((new, old))
    except OSError as exc:
        for src, dst in reversed(done):
            try:
                os.rename(dst, src)
            except OSError as again:
                moved = "; ".join(f"{a} is now {b}" for a, b in done)
                raise RebuildError(f"{root}: renaming the rebuilt files in failed ({exc.strerror or exc}), and "
                                   f"putting them back too ({again.strerror or again}): {moved}") from None
        shutil.rmtree(tmp, ignore_errors=True)
        raise RebuildError(f"{root}: renaming the rebuilt files in failed ({exc.strerror or exc}); the store was "
                           f"put back as it was") from None
    summary.kept_aside = [os.path.basename(b) for a, b in done if os.path.dirname(a) == root]
    shutil.rmtree(tmp)
    _sync_dir(os.path.join(root, CHECKPOINT_FILE))
