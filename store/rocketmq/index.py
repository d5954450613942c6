"""The broker's ``index/`` files, written: RocketMQ's hash index of message keys, rebuilt
from a commit log (``mq migrate``). The layout is lookup.py's reader's (``IndexFile``,
``IndexHeader`` of RocketMQ 4.9.4; 4.9.8 has the same files):

- a 40-byte header: begin/end store timestamp, begin/end commit-log offset (i64), hash
  slot count, index count (i32; the count starts at 1, entry 0 is never used);
- ``maxHashSlotNum`` i32 slots (5,000,000 by default): each holds the newest entry whose
  key hash falls in it (``hash % slots``);
- ``maxIndexNum`` 20-byte entries (20,000,000 by default): key hash i32, commit-log offset
  i64, seconds since the file's begin timestamp i32, the previous entry of the slot i32.

What ``IndexService.buildIndex`` puts, for each message it dispatches, in log order: the
key ``topic#UNIQ_KEY`` when the message has a UNIQ_KEY, then ``topic#k`` for each non-empty
``k`` of KEYS split at spaces; nothing for a transaction rollback message (prepared and
commit ones are indexed). ``IndexFile.putKey``: a file takes ``maxIndexNum - 1`` entries,
then a new one starts whose header begins at the full one's end offset and timestamp (the
first entry's time is counted from there); a file's name is its creation time
(``UtilAll.timeMillisToHumanString``: yyyyMMddHHmmssSSS, local time), so files sort by age.

Rules kept here: a file is made full length and sparse (420 MB by default, mostly holes);
entries are appended in order with pwrite, and the slot table is kept in memory (4 bytes a
slot: 20 MB by default) and written when the file is finished, only its pages that hold a
slot (the rest stay holes). Nothing is written through a memory map: on a full disk a store
into a mapped hole is SIGBUS, which kills the process with no word and leaves its files
behind, where pwrite is an error naming the file and the bytes (files.write_error). Memory
stays bounded by the slot table and one batch of keys, never the file. Hashes are computed for
a batch at once (Java's ``String.hashCode`` over UTF-16 units, ``Math.abs``, as
``indexKeyHashMethod``): from the messages' bytes by the compiled key columns
(:func:`take_keys`), or from key strings (:meth:`IndexWriter.add`). A batch's entries are
chained into the slots one key after another as ``putKey`` does (_placing.c's ``put_keys``;
without it, with whole arrays: ``_entries_numpy``, which the tests hold it to).
"""

from __future__ import annotations

import os
import sys
import time
from operator import itemgetter

import numpy as np

from ..writing import pwrite_all, write_error
from ..format import HEADER_SIZE
from .columns import KeyColumns, key_columns
from .commitlog import COMMIT_LOG_DIR, batches
from .lookup import HASH_SLOT_SIZE, INDEX_DIR, INDEX_HEADER_SIZE, INDEX_SIZE, _HEADER
from .message import PROPERTY_KEYS, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, TRANSACTION_ROLLBACK_TYPE, decode

try:  # the compiled key placing (store/rocketmq/_placing.c), when built
    from . import _placing
except ImportError:  # pragma: no cover - a build without a C compiler
    _placing = None

MAX_HASH_SLOT_NUM = 5_000_000  # MessageStoreConfig.maxHashSlotNum
MAX_INDEX_NUM = 5_000_000 * 4  # MessageStoreConfig.maxIndexNum
KEY_SEPARATOR = " "  # MessageConst.KEY_SEPARATOR
ENTRY = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
INT_MAX = (1 << 31) - 1
BATCH = 1 << 18  # keys hashed and written at once


def message_keys(topic: str, sys_flag: int, uniq_key: str | None, keys: str | None) -> list[str]:
    """The index keys ``IndexService.buildIndex`` puts for one message (none for a rollback)."""
    if sys_flag & TRANSACTION_ROLLBACK_TYPE == TRANSACTION_ROLLBACK_TYPE:
        return []
    out = [f"{topic}#{uniq_key}"] if uniq_key is not None else []
    if keys:
        out += [f"{topic}#{k}" for k in keys.split(KEY_SEPARATOR) if k]
    return out


def java_hashes(keys: list[str]) -> np.ndarray:
    """``String.hashCode()`` of each key (over its UTF-16 units), as int32: keys of one length
    at a time, as a matrix whose rows are summed against the powers of 31 (mod 2^32)."""
    if "".join(keys).isascii():
        enc, dtype, lengths = keys, np.uint8, np.fromiter(map(len, keys), np.int64, len(keys))
    else:
        enc = [k.encode("utf-16-be", "surrogatepass") for k in keys]
        dtype, lengths = ">u2", np.fromiter(map(len, enc), np.int64, len(enc)) // 2
    out = np.zeros(len(keys), np.uint32)
    order = np.argsort(lengths, kind="stable")
    by_len = lengths[order]
    cuts = np.flatnonzero(by_len[1:] != by_len[:-1]) + 1
    pow31 = _powers(int(by_len[-1]) if len(by_len) else 0)
    for idx in np.split(order, cuts):
        n = int(lengths[idx[0]]) if len(idx) else 0
        if not n:
            continue
        parts = itemgetter(*idx.tolist())(enc) if len(idx) > 1 else (enc[int(idx[0])],)
        joined = "".join(parts).encode("ascii") if dtype is np.uint8 else b"".join(parts)
        m = np.frombuffer(joined, dtype).reshape(len(idx), n).astype(np.uint32)
        out[idx] = (m * pow31[n - 1::-1]).sum(axis=1, dtype=np.uint32)
    return out.view(np.int32)


def _powers(n: int) -> np.ndarray:
    """31^i mod 2^32 for i < n."""
    out = np.ones(max(n, 1), np.uint32)
    for i in range(1, n):
        out[i] = np.uint32((int(out[i - 1]) * 31) & 0xFFFFFFFF)
    return out


def index_hashes(keys: list[str]) -> np.ndarray:
    """``IndexFile.indexKeyHashMethod``: |hashCode|, Integer.MIN_VALUE's as 0."""
    return index_form(java_hashes(keys))


def index_form(hashes: np.ndarray) -> np.ndarray:
    """``indexKeyHashMethod`` of ``String.hashCode()`` values (int32): |h|, Integer.MIN_VALUE's as 0."""
    h = np.abs(hashes.astype(np.int64))
    return np.where(h > INT_MAX, 0, h)


def take_keys(buf, offsets: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, KeyColumns]:
    """The index keys of the messages at ``buf[offsets[k]:offsets[k] + lengths[k]]`` (each
    must be a message): (keys per message, int64; their hashes in ``indexKeyHashMethod``'s
    form, the messages' in order; the key columns, whose ``store_ts`` and ``count`` are
    complete). Read a batch at a time (columns.key_columns); a message whose topic or keys
    are not plain UTF-8 is decoded by message.decode, as Java would read it (NotAMessage if
    it is not a message)."""
    kc = key_columns(buf, offsets, lengths)
    slow = np.flatnonzero(kc.count < 0)
    if not len(slow):
        return kc.count.astype(np.int64), index_form(kc.hashes), kc
    counts = np.maximum(kc.count, 0).astype(np.int64)
    ends = np.cumsum(counts)
    pieces, at = [], 0
    for k in slow.tolist():
        m = decode(buf, int(offsets[k]), int(lengths[k]))
        p = m.properties
        keys = message_keys(m.topic, m.sys_flag, p.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), p.get(PROPERTY_KEYS))
        pieces += [kc.hashes[at:ends[k]], java_hashes(keys) if keys else np.zeros(0, np.int32)]
        at = int(ends[k])
        counts[k], kc.store_ts[k] = len(keys), m.store_timestamp
    pieces.append(kc.hashes[at:])
    kc.count[slow] = counts[slow]
    return counts, index_form(np.concatenate(pieces)), kc


def file_name_at(millis: int) -> str:
    """``UtilAll.timeMillisToHumanString``: the local time of ``millis`` as yyyyMMddHHmmssSSS."""
    t = time.localtime(millis // 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{millis % 1000:03d}"


class IndexWriter:
    """Builds ``<root>/index/``: :meth:`add` each message's keys in log order, then :meth:`close`."""

    def __init__(self, root: str, slots: int = MAX_HASH_SLOT_NUM, index_num: int = MAX_INDEX_NUM,
                 now_millis: int | None = None) -> None:
        self.dir = os.path.join(root, INDEX_DIR)
        self.slots, self.index_num = slots, index_num
        self.size = INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE + index_num * INDEX_SIZE
        self.now = int(time.time() * 1000) if now_millis is None else now_millis
        self.files: list[str] = []
        self.keys_written = 0
        self.indexed = 0  # messages added (with keys or not)
        self.last_ts = 0  # the store time of the last one
        self.seconds = 0.0  # time spent hashing and writing (the index's own cost)
        self._keys: list[str] = []
        self._phy: list[int] = []  # per message added: its offset, store time and number of keys
        self._ts: list[int] = []
        self._n: list[int] = []
        self._held: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (hashes, phy, ts) per key, in order
        self._held_n = 0
        self._fh = None
        self._slot_map = None
        self._failed = False  # a write failed: close() writes nothing more
        # the current file's header as IndexHeader holds it
        self._count = 1
        self._begin_ts = self._end_ts = self._begin_phy = self._end_phy = 0
        self._slot_count = 0

    def add(self, keys: list[str], phy: int, store_ts: int) -> None:
        self.indexed += 1
        self.last_ts = store_ts
        if keys:
            self._keys += keys
            self._phy.append(phy)
            self._ts.append(store_ts)
            self._n.append(len(keys))
            if len(self._keys) >= BATCH:
                self._flush()

    def add_many(self, counts: np.ndarray, hashes: np.ndarray, phy: np.ndarray, store_ts: np.ndarray) -> None:
        """Messages in log order, as :meth:`add` each: message k's keys are ``counts[k]`` of
        ``hashes`` (``indexKeyHashMethod``'s form: :func:`take_keys`), after those of the
        messages before it; ``phy`` and ``store_ts`` are the messages' (int64 arrays)."""
        if not len(counts):
            return
        self.indexed += len(counts)
        self.last_ts = int(store_ts[-1])
        if not len(hashes):
            return
        t0 = time.perf_counter()
        self._hold()
        self._held.append((np.asarray(hashes, np.int64), np.repeat(phy, counts), np.repeat(store_ts, counts)))
        self._held_n += len(hashes)
        self.seconds += time.perf_counter() - t0
        if self._held_n >= BATCH:
            self._flush()

    def close(self) -> None:
        """Write what is held and finish the current file. After a write failed (a full disk),
        or when called while an exception propagates (a caller's ``finally``: the commit log's
        write failed, say), it only closes the file: what is written is the caller's to
        remove, and the error the caller sees stays the first one."""
        if self._failed or sys.exc_info()[1] is not None:
            if self._fh is not None:
                self._fh.close()
                self._fh = self._slot_map = None
            return
        self._flush()
        self._finish_file()

    # -- internals ---------------------------------------------------------------------------

    def _hold(self) -> None:
        """The keys :meth:`add` gathered, hashed and held with :meth:`add_many`'s (in order)."""
        if not self._keys:
            return
        per = np.array(self._n, np.int64)
        self._held.append((index_hashes(self._keys), np.repeat(np.array(self._phy, np.int64), per),
                           np.repeat(np.array(self._ts, np.int64), per)))
        self._held_n += len(self._keys)
        self._keys, self._phy, self._ts, self._n = [], [], [], []

    def _flush(self) -> None:
        t0 = time.perf_counter()
        self._hold()
        if not self._held:
            return
        hashes, phy, ts = (np.concatenate(c) for c in zip(*self._held))
        self._held, self._held_n = [], 0
        self.keys_written += len(hashes)
        at = 0
        try:
            while at < len(hashes):
                if self._fh is None or self._count >= self.index_num:
                    self._next_file()
                n = min(len(hashes) - at, self.index_num - self._count, BATCH)
                self._put(hashes[at:at + n], phy[at:at + n], ts[at:at + n])
                at += n
        except BaseException:
            self._failed = True
            raise
        self.seconds += time.perf_counter() - t0

    def _next_file(self) -> None:
        prev_end_phy, prev_end_ts = self._end_phy, self._end_ts
        self._finish_file()
        if not self.files:
            os.makedirs(self.dir, exist_ok=True)
        name = file_name_at(self.now + len(self.files))
        path = os.path.join(self.dir, name)
        try:
            self._fh = open(path, "xb+")
        except OSError as exc:
            raise write_error(path, self.size, exc) from exc
        self.files.append(path)
        try:
            self._fh.truncate(self.size)  # (sparse: the holes read as the zeros RocketMQ starts from)
        except OSError as exc:
            raise write_error(path, self.size, exc) from exc
        self._slot_map = np.zeros(self.slots, ">i4")
        # IndexFile's constructor: a file after a full one begins where that one ended
        self._count, self._slot_count = 1, 0
        self._begin_phy = self._end_phy = prev_end_phy if prev_end_phy > 0 else 0
        self._begin_ts = self._end_ts = prev_end_ts if prev_end_ts > 0 else 0

    def _put(self, hashes: np.ndarray, phy: np.ndarray, ts: np.ndarray) -> None:
        """Entries ``self._count ..`` of the current file (they fit)."""
        n = len(hashes)
        if _placing is not None:
            entries = bytearray(n * INDEX_SIZE)
            self._slot_count += _placing.put_keys(np.ascontiguousarray(hashes, np.int64),
                                                  np.ascontiguousarray(phy, np.int64),
                                                  np.ascontiguousarray(ts, np.int64), self._slot_map, entries,
                                                  self._count, self._begin_ts)
        else:
            entries = self._entries_numpy(hashes, phy, ts)
        base = INDEX_HEADER_SIZE + self.slots * HASH_SLOT_SIZE
        pwrite_all(self._fh.fileno(), entries, base + self._count * INDEX_SIZE, self.files[-1])
        if self._count <= 1:
            self._begin_phy, self._begin_ts = int(phy[0]), int(ts[0])
        self._end_phy, self._end_ts = int(phy[-1]), int(ts[-1])
        self._count += n

    def _entries_numpy(self, hashes: np.ndarray, phy: np.ndarray, ts: np.ndarray) -> bytes:
        """_placing.put_keys with whole arrays (without the compiled module; the tests'
        reference): the entries' bytes, the slot table and its count updated."""
        n = len(hashes)
        # time diff (IndexFile.putKey): from the begin timestamp as it is when each is put;
        # the file's first entry (count 1) sets the begin timestamp for those after it
        begin = np.full(n, self._begin_ts, np.int64)
        if self._count <= 1:
            begin[1:] = ts[0]
        diff = np.where(begin <= 0, 0, np.clip((ts - begin) // 1000, 0, INT_MAX))  # (a negative one: 0)
        # by slot, and in order within a slot: one sort of slot * n + k (no two alike), faster
        # than a stable argsort of the slots
        keyed = (hashes % self.slots) * n + np.arange(n, dtype=np.int64)
        keyed.sort()
        s_sorted, order = np.divmod(keyed, n)
        i_sorted = order + self._count
        first = np.ones(n, bool)
        first[1:] = s_sorted[1:] != s_sorted[:-1]
        last = np.ones(n, bool)
        last[:-1] = first[1:]
        prev_sorted = np.empty(n, np.int64)
        prev_sorted[1:] = i_sorted[:-1]
        current = self._slot_map[s_sorted[first]].astype(np.int64)
        current[(current <= 0) | (current > self._count)] = 0  # (putKey's invalidIndex)
        prev_sorted[first] = current
        self._slot_count += int(np.count_nonzero(current == 0))
        prev = np.empty(n, np.int64)
        prev[order] = prev_sorted
        entries = np.empty(n, ENTRY)
        entries["hash"], entries["phy"], entries["diff"], entries["prev"] = hashes, phy, diff, prev
        self._slot_map[s_sorted[last]] = i_sorted[last]
        return entries.tobytes()

    def _finish_file(self) -> None:
        if self._fh is None:
            return
        fh, path, slots = self._fh, self.files[-1], self._slot_map
        self._fh = self._slot_map = None
        try:
            _write_slots(fh.fileno(), slots, path)
            pwrite_all(fh.fileno(), _HEADER.pack(self._begin_ts, self._end_ts, self._begin_phy, self._end_phy,
                                                 self._slot_count, self._count), 0, path)
            os.fsync(fh.fileno())
        finally:
            fh.close()


SLOT_PAGE = 4096 // HASH_SLOT_SIZE  # slots per page of the table: a page none is set in stays a hole


def _write_slots(fd: int, slots: np.ndarray, path: str) -> None:
    """The slot table at its place in the file: each run of pages that holds a set slot, with
    pwrite (files.pwrite_all: an error naming ``path`` and the bytes on a full disk)."""
    n = len(slots)
    pages = -(-n // SLOT_PAGE)
    padded = np.zeros(pages * SLOT_PAGE, ">i4")
    padded[:n] = slots
    used = padded.reshape(pages, SLOT_PAGE).any(axis=1)
    edges = np.flatnonzero(np.diff(np.r_[0, used.view(np.int8), 0]))
    raw = slots.view(np.uint8)
    for lo, hi in zip(edges[::2].tolist(), edges[1::2].tolist()):
        a, b = lo * SLOT_PAGE * HASH_SLOT_SIZE, min(hi * SLOT_PAGE, n) * HASH_SLOT_SIZE
        pwrite_all(fd, raw[a:b], INDEX_HEADER_SIZE + a, path)


def build_index(root: str, until: int, *, slots: int = MAX_HASH_SLOT_NUM, index_num: int = MAX_INDEX_NUM,
                now_millis: int | None = None) -> IndexWriter:
    """Write ``root/index/`` from ``root/commitlog/``: the keys of every message before the
    commit-log offset ``until`` (where the broker's dispatch resumes at start: the end of the
    furthest consume-queue unit; the broker indexes the messages from there itself when it
    re-dispatches them). The writer, closed (its counts and time)."""
    writer = IndexWriter(root, slots, index_num, now_millis)
    try:
        for b in batches(os.path.join(root, COMMIT_LOG_DIR)):
            if b.damage:
                raise ValueError(f"{b.file}: {b.damage}")
            offset = b.pos + HEADER_SIZE
            n = int(np.searchsorted(offset, until))
            if n:
                counts, hashes, kc = take_keys(b.buf, offset[:n] - b.start, b.bsize[:n])
                writer.add_many(counts, hashes, offset[:n], kc.store_ts)
            if n < len(offset):
                return writer
        return writer
    finally:
        writer.close()
