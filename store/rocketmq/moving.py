"""``mq migrate``'s pass over the log, a batch of entries at a time (migrate.py says what the
move makes; this is how its messages go across).

For each batch scan.batches yields (columns of up to 65,536 entries of one data file):

- each normal entry's own DLedger bodyCrc, where it has one, is checked (scan.crc_damaged,
  compiled): an entry whose bytes changed since it was written stops the move with
  :class:`MigrateError` naming it, or with ``skip_damaged`` is left out and listed
  (``summary.damaged``) instead of becoming a sound-looking message of the new log;
- each normal entry is judged a message as message.decode judges one, by the compiled
  columns (columns.message_columns; the few it leaves to the decoder, which says what is
  wrong, are decoded): an entry that is not a message stops the move with
  :class:`MigrateError` naming the file, the entry and its offset;
- the kept messages' new offsets follow from their sizes' running sum, broken only where
  a commit-log file rolls, and their bytes go across in bulk with PHYSICALOFFSET set
  (commitlog.CommitLogWriter.append_many);
- the index keys of those up to SRC's furthest consume-queue unit are taken a batch at a
  time (index.take_keys: the compiled key columns, Java's ``String.hashCode`` of each
  ``topic#key``) and handed to the index writer as arrays; the time this takes is the
  index step's (``key_seconds``), apart from the move's;
- with an id map, each kept message's old and new offset msgId and its UNIQ_KEY, as CSV
  rows written a batch at a time (:class:`IdMap`).

Rules kept here: what the move writes and refuses is what the message-at-a-time pass it
replaced wrote and refused, error texts included (tests/rocketmq/test_mq_moving.py holds
the new log to that pass's, kept there as the reference, byte for byte); a batch is
judged whole before any of it is written, and nothing of a batch is kept past the next one
but its messages' old and new offsets (16 bytes a message, for the consume queues).
"""

from __future__ import annotations

import csv
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from ..errors import StoreUsageError
from ..writing import write_all, write_error
from ..format import HEADER_SIZE, MAGIC_NORMAL
from .commitment import Bound
from .columns import OK, key_columns, message_columns
from .commitlog import END_FILE_MIN_BLANK_LENGTH, CommitLogWriter, too_large
from .entries import Batch
from .scan import crc_damaged, crc_note
from .index import IndexWriter, take_keys
from .message import BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, NotAMessage, decode


class MigrateError(StoreUsageError):
    """The move cannot be made (the text says why); nothing was written at DEST."""


class Offsets:
    """The moved messages' old and new commit-log offsets, appended to two files of native
    int64 under ``directory`` a batch at a time and mapped back whole (:meth:`arrays`): the
    consume queues' and the timer log's rewrite look each unit's message up among them, and
    held in memory they would cost 16 bytes a message (480 MB for 30 million). The caller
    removes ``directory``."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory)
        self.paths = (os.path.join(directory, "old.i64"), os.path.join(directory, "new.i64"))
        self._files = [open(p, "xb", buffering=0) for p in self.paths]
        self.count = 0

    def add(self, old: np.ndarray, new: np.ndarray) -> None:
        write_all(self._files[0], np.ascontiguousarray(old, np.int64), self.paths[0])
        write_all(self._files[1], np.ascontiguousarray(new, np.int64), self.paths[1])
        self.count += len(old)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        for fh in self._files:
            fh.close()
        if not self.count:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return tuple(np.memmap(p, np.int64, "r", shape=(self.count,)) for p in self.paths)

    def close(self) -> None:
        for fh in self._files:
            fh.close()


class Mover:
    """Feeds batches of SRC's log (:meth:`feed`, in log order) to the new commit log, the
    index writer, the id map and ``offsets`` (the moved messages' old and new offsets,
    :class:`Offsets`). ``label``: the log's directory, as errors name it;
    ``committed``: which entries move (commitment.Bound; None: all); ``furthest``: the commit-log
    offset of SRC's furthest consume-queue unit (messages up to it are indexed here);
    ``skip_damaged``: leave entries whose bodyCrc fails out (else they stop the move)."""

    def __init__(self, label: str, log: CommitLogWriter, index: IndexWriter, ids: "IdMap", offsets: Offsets, summary,
                 committed: Bound | None, furthest: int, progress: Callable[[int], None] | None = None,
                 root: str = "", skip_damaged: bool = False) -> None:
        self.label, self.log, self.index, self.ids, self.summary = label, log, index, ids, summary
        self.root = root  # the store root, which an old commit log's file names (``commitlog/...``) are under
        self.committed, self.furthest, self.progress = committed, furthest, progress
        self.skip_damaged = skip_damaged
        self.src_first: int | None = None  # SRC's first message's offset (moved or not)
        self.last_ts = 0  # the last moved message's store time
        self.indexed_last: int | None = None  # the new offset of the last message indexed
        self.skipped_first: int | None = None  # ... of the first moved but not indexed
        self.key_seconds = 0.0  # taking the keys and handing them to the index writer
        self._spill = offsets  # the moved messages' old and new offsets

    def offsets(self) -> tuple[np.ndarray, np.ndarray]:
        """Each moved message's offset in SRC and in DEST (increasing), as two int64 arrays
        (mapped from the spill files: pages of the page cache, not of this process)."""
        return self._spill.arrays()

    def feed(self, b: Batch) -> None:
        s = self.summary
        if b.damage:
            if b.shift:  # (an old commit log's, before the DLedger log: divided.py)
                raise MigrateError(f"{os.path.join(self.root, b.file)}: damaged at offset {b.at - b.start + b.shift} "
                                   f"({b.damage}); run 'dledgerctl mq check' on SRC")
            raise MigrateError(f"{self.label}/{b.file}: damaged at offset {b.at - b.start} ({b.damage}); "
                               f"run 'dledgerctl store verify' on it")
        if self.progress is not None:
            self.progress(int(b.size.sum()))
        normal = b.magic == MAGIC_NORMAL
        idx, pos, bsize = b.index[normal], b.pos[normal], b.bsize[normal]
        s.other_entries += len(b) - len(idx)
        if not len(idx):
            return
        rows = np.flatnonzero(normal)
        damaged = crc_damaged(b, rows)  # (judged first: damage can make an entry no message too)
        at = pos - b.start + HEADER_SIZE
        cols = message_columns(b.buf, at, bsize, False)
        slow, bad, why = {}, len(idx), ""
        for k in np.flatnonzero((cols.status != OK) & ~damaged).tolist():
            try:
                m = slow[k] = decode(b.buf, int(at[k]), int(bsize[k]))
            except NotAMessage as exc:
                bad, why = k, str(exc)
                break
            cols.store_ts[k], cols.sys_flag[k], cols.phy[k] = m.store_timestamp, m.sys_flag, m.phy_offset
        # the entries before ``bad`` are messages; of those, the certainly committed ones move (a prefix)
        keep = bad if self.committed is None else int(np.count_nonzero(self.committed.certain(idx[:bad], pos[:bad])))
        hit = np.flatnonzero(damaged[:keep])
        if len(hit) and not self.skip_damaged:
            k = int(hit[0])
            raise MigrateError(f"{self.label}/{b.file} offset {int(pos[k]) - b.start}: {crc_note(b, int(rows[k]))}; "
                               f"a message moved from it would look sound. Mend it first (a running member's scrub "
                               f"takes a replica's copy; 'dledgerctl store verify' shows it), or give --skip-damaged "
                               f"to leave such entries out (listed)")
        s.damaged += [(int(idx[k]), int(pos[k]) + HEADER_SIZE) for k in hit.tolist()]
        big = np.flatnonzero(bsize[:keep] + END_FILE_MIN_BLANK_LENGTH > self.log.file_size)
        if len(big):
            k = int(big[0])
            what = (f"the message at commit-log offset {int(pos[k]) + HEADER_SIZE}" if b.shift
                    else f"entry {int(idx[k])}")
            raise MigrateError(f"{what}: {too_large(int(bsize[k]), self.log.file_size)} (give a larger "
                               f"--commitlog-file-size)")
        if bad < len(idx):
            if b.shift:
                raise MigrateError(f"{os.path.join(self.root, b.file)}: the record at offset "
                                   f"{int(pos[bad]) - b.start + b.shift} is not a RocketMQ message ({why})")
            raise MigrateError(f"{self.label}/{b.file}: entry {int(idx[bad])} at offset {int(pos[bad]) - b.start} is "
                               f"not a RocketMQ message ({why})")
        if self.src_first is None:
            self.src_first = int(pos[0]) + HEADER_SIZE
        s.left_out += len(idx) - keep
        s.left_out_bytes += int(bsize[keep:].sum())
        if not keep:
            return
        take = np.flatnonzero(~damaged[:keep])  # (the damaged ones left out: listed above)
        if len(hit):
            slow = {j: slow[k] for j, k in enumerate(take.tolist()) if k in slow}
        keep = len(take)
        if not keep:
            return
        at, bsize, old = at[take], bsize[take], pos[take] + HEADER_SIZE
        store_ts = cols.store_ts[take]
        new = self.log.append_many(b.buf, at, bsize)
        if self.ids.out is not None:
            self.ids.add(b.buf, at, bsize, cols.sys_flag[take], cols.phy[take], new, slow)
        n = int(np.searchsorted(old, self.furthest, "right"))  # (indexed here: up to the furthest unit)
        if n:
            t0 = time.perf_counter()
            counts, hashes, kc = take_keys(b.buf, at[:n], bsize[:n])
            self.index.add_many(counts, hashes, new[:n], kc.store_ts)
            self.key_seconds += time.perf_counter() - t0
            self.indexed_last = int(new[n - 1])
        if n < keep and self.skipped_first is None:
            self.skipped_first = int(new[n])
        self._spill.add(old, new)
        self.last_ts = int(store_ts[keep - 1])
        s.messages += keep
        s.bytes += int(bsize.sum())


_HEX = np.array([list(b"%02X" % i) for i in range(256)], np.uint8)


class IdMap:
    """The id map's CSV writer (nothing when no path is given): ``old_msg_id,new_msg_id,uniq_key``
    per message moved, the offset msgIds as ``MessageDecoder.createMessageId`` makes them
    (store host address and port, then the commit-log offset; upper-case hex)."""

    HEADER = ("old_msg_id", "new_msg_id", "uniq_key")

    def __init__(self, path: str | None) -> None:
        self.path, self.fh, self.out = path, None, None

    def __enter__(self) -> "IdMap":
        if self.path is not None:
            self.fh = open(self.path, "x", newline="", encoding="utf-8")
            self.out = csv.writer(self.fh)
            self.out.writerow(self.HEADER)
        return self

    def add(self, buf, at: np.ndarray, bsize: np.ndarray, sys_flag: np.ndarray, phy: np.ndarray, new: np.ndarray,
            decoded: dict) -> None:
        """Rows for the messages ``buf[at[k]:at[k] + bsize[k]]`` (their SYSFLAG and stored
        PHYSICALOFFSET given), moved to ``new``; ``decoded``: messages message.decode read."""
        host_at = at + 48 + np.where(sys_flag & BORNHOST_V6_FLAG, 20, 8) + 8  # (after STORETIMESTAMP)
        host_len = np.where(sys_flag & STOREHOSTADDRESS_V6_FLAG, 20, 8)
        data = np.frombuffer(buf, np.uint8)
        kc = key_columns(buf, at, bsize)
        uniq = []
        for k, (count, ua, ul) in enumerate(zip(kc.count.tolist(), kc.uniq_at.tolist(), kc.uniq_len.tolist())):
            if count < 0:
                m = decoded.get(k) or decode(buf, int(at[k]), int(bsize[k]))
                uniq.append(m.uniq_key or "")
            else:
                uniq.append(bytes(buf[ua:ua + ul]).decode("utf-8") if ua >= 0 else "")
        rows = list(zip(_ids(data, host_at, host_len, phy), _ids(data, host_at, host_len, new), uniq))
        try:
            self.out.writerows(rows)
        except OSError as exc:  # (a buffer's flush on a full disk: said with the file and about what it needed)
            raise write_error(self.path, sum(len(a) + len(b) + len(u) + 3 for a, b, u in rows), exc) from exc

    def __exit__(self, *exc) -> None:
        if self.fh is not None:
            try:
                if exc[0] is None:
                    try:
                        self.fh.flush()
                        os.fsync(self.fh.fileno())
                    except OSError as err:
                        raise write_error(self.path, None, err) from err
            finally:
                try:
                    self.fh.close()
                except OSError:
                    if exc[0] is None:
                        raise


def _ids(data: np.ndarray, host_at: np.ndarray, host_len: np.ndarray, offsets: np.ndarray) -> list[str]:
    """``createMessageId`` of each (store host's bytes at ``host_at``, ``host_len`` long; offset)."""
    out: list = [None] * len(offsets)
    for width in (8, 20):
        sel = np.flatnonzero(host_len == width)
        if not len(sel):
            continue
        raw = np.empty((len(sel), width + 8), np.uint8)
        raw[:, :width] = data[host_at[sel, None] + np.arange(width)]
        raw[:, width:] = offsets[sel].astype(">i8").view(np.uint8).reshape(-1, 8)
        text = _HEX[raw].tobytes().decode("ascii")
        w = 2 * (width + 8)
        for k, i in zip(sel.tolist(), range(0, len(text), w)):
            out[k] = text[i:i + w]
    return out


def sync_files(paths: list[str], workers: int = 16) -> None:
    """fsync each file, several at once: the file system commits fsyncs that wait together in
    one journal commit, where one after another each waits for its own (300 files of 20 KB
    on ext4: about 0.9 s one by one, 0.07 s from a pool; benchmarks/README.md)."""
    def one(path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    if len(paths) < 2:
        for p in paths:
            one(p)
        return
    with ThreadPoolExecutor(min(workers, len(paths))) as pool:
        for _ in pool.map(one, paths):
            pass
