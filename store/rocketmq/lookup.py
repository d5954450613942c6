"""Finding messages without a scan of the log, the ways a broker (and ``mqadmin``) does.

- :func:`queue_unit`: a topic, queue id and queue offset to the consume-queue unit that
  points at the message (``mqadmin queryMsgByOffset``, ``ConsumeQueue.getIndexBuffer``):
  one 20-byte read from the file that holds it.
- :func:`index_offsets`: a key to the commit-log offsets of the messages indexed under it
  in the broker's ``index/`` files (``mqadmin queryMsgByKey``, ``IndexFile.selectPhyOffset``;
  see the layout there).

Both only point: the caller reads the message at the offset and checks it is the one
asked for (an index slot holds a hash, not the key). Read-only; nothing here scans the log.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import StoreUsageError
from ..format import parse_file_name
from .consumequeue import BLANK_SIZE, CONSUME_QUEUE_DIR, CQ_STORE_UNIT_SIZE
from .message import tags_code

_UNIT = struct.Struct(">qiq")  # commit-log offset, size, tag code (ConsumeQueue.CQ_STORE_UNIT_SIZE)


class NotFound(StoreUsageError):
    """What was asked for is not where it would be (the text says why)."""


@dataclass(frozen=True)
class Unit:
    """A consume-queue unit: where its message is (commit-log offset), its size and tag code."""

    file: str  # consumequeue/<topic>/<queueId>/<name>, relative to the store root
    offset: int  # byte offset of the unit in that file
    phy_offset: int
    size: int
    tags_code: int


def _numbered(names) -> list[tuple[int, str]]:
    # (store/format.py reads every number in a name: ASCII digits only)
    return sorted((start, n) for n in names if (start := parse_file_name(n)) is not None)


def queue_unit(root: str, topic: str, queue_id: int, queue_offset: int) -> Unit:
    """The unit of ``queue_offset`` in the consume queue ``topic``/``queue_id`` under the
    store root ``root``. NotFound when the queue has no such unit (no such queue, an
    offset before its first file or past its last written unit, a fillPreBlank unit)."""
    qdir = os.path.join(root, CONSUME_QUEUE_DIR, topic, str(queue_id))
    where = f"consume queue {topic}/{queue_id}"
    try:
        files = _numbered(e.name for e in os.scandir(qdir) if e.is_file(follow_symlinks=False))
    except FileNotFoundError:
        raise NotFound(f"{where}: no such queue ({os.path.join(CONSUME_QUEUE_DIR, topic, str(queue_id))} does "
                       "not exist)") from None
    except OSError as exc:
        raise NotFound(f"{qdir}: {exc.strerror or exc}") from None
    if queue_offset < 0:
        raise NotFound(f"{where}: queue offset {queue_offset} is negative")
    byte = queue_offset * CQ_STORE_UNIT_SIZE
    held = [(start, name) for start, name in files if start <= byte]
    if not held:
        first = files[0][0] // CQ_STORE_UNIT_SIZE if files else None
        raise NotFound(f"{where}: queue offset {queue_offset} is before its first file"
                       + (f" (which starts at queue offset {first})" if first is not None else " (it has none)"))
    start, name = held[-1]
    rel = os.path.join(CONSUME_QUEUE_DIR, topic, str(queue_id), name)
    with open(os.path.join(qdir, name), "rb") as fh:
        fh.seek(byte - start)
        raw = fh.read(CQ_STORE_UNIT_SIZE)
    if len(raw) < CQ_STORE_UNIT_SIZE:
        raise NotFound(f"{where}: queue offset {queue_offset} is past the end of {rel}")
    phy, size, code = _UNIT.unpack(raw)
    if phy < 0 or size <= 0:
        raise NotFound(f"{where}: queue offset {queue_offset} is not written yet ({rel} at byte {byte - start})")
    if (phy, size, code) == (0, BLANK_SIZE, 0):
        raise NotFound(f"{where}: queue offset {queue_offset} is a blank before the queue's first message "
                       "(fillPreBlank)")
    return Unit(rel, byte - start, phy, size, code)


# --- the broker's index/ files (IndexFile, IndexHeader, IndexService of RocketMQ 4.9.4) -------------

INDEX_DIR = "index"  # StorePathConfigHelper.getStorePathIndex
INDEX_HEADER_SIZE = 40  # IndexHeader.INDEX_HEADER_SIZE
HASH_SLOT_SIZE = 4  # IndexFile.hashSlotSize
INDEX_SIZE = 20  # IndexFile.indexSize
INDEX_PER_SLOT = 4  # MessageStoreConfig: maxIndexNum = maxHashSlotNum * 4 (5,000,000 and 20,000,000)
_HEADER = struct.Struct(">qqqqii")  # begin/end timestamp, begin/end phy offset, hashSlotCount, indexCount
_ENTRY = struct.Struct(">iqii")  # key hash, phy offset, time diff (s), previous index in the slot's chain


@dataclass
class IndexFile:
    """One file of the broker's hash index of keys: a 40-byte header, ``slots`` i32 slots
    (the newest entry of each hash), then 20-byte entries chained newest to oldest.
    An entry's key is ``topic#key`` (IndexService.buildKey) for each of a message's KEYS
    and for its UNIQ_KEY; entry 0 is never used (IndexHeader's indexCount starts at 1)."""

    name: str
    data: mmap.mmap
    slots: int
    begin_phy: int
    end_phy: int
    index_count: int

    @property
    def capacity(self) -> int:
        """The entries the file's length holds past its slot table (entry 0 included)."""
        return max(0, (len(self.data) - INDEX_HEADER_SIZE - self.slots * HASH_SLOT_SIZE) // INDEX_SIZE)

    @property
    def last_entry(self) -> int:
        """The highest entry a chain may lead to: the header's index count (``selectPhyOffset``
        reads a link up to it), bounded by what the file holds (a damaged header may say 2^31-1)."""
        return min(self.index_count, self.capacity - 1)

    def offsets(self, key: str) -> list[int]:
        """The commit-log offsets of the entries whose hash is ``key``'s, newest first
        (``IndexFile.selectPhyOffset`` without its time bounds); the caller checks each
        message really has the key. A chain is followed as RocketMQ follows it, and at most
        once through each entry: one that loops (a damaged file; ``mq check`` reports it,
        :func:`chain_loops`) ends where it comes back, one that points past the file's
        entries ends there."""
        return self.offsets_of_hash(index_key_hash(key))

    def offsets_of_hash(self, h: int) -> list[int]:
        """:meth:`offsets` of a key whose ``indexKeyHashMethod`` hash is ``h``."""
        (v,) = struct.unpack_from(">i", self.data, INDEX_HEADER_SIZE + (h % self.slots) * HASH_SLOT_SIZE)
        out: list[int] = []
        last = self.last_entry
        if v <= 0 or v > last or self.index_count <= 1:
            return out
        base = INDEX_HEADER_SIZE + self.slots * HASH_SLOT_SIZE
        n, seen = v, set()
        while n not in seen:  # (at most last_entry entries: each is seen once)
            seen.add(n)
            kh, phy, tdiff, prev = _ENTRY.unpack_from(self.data, base + n * INDEX_SIZE)
            if tdiff < 0:
                break
            if kh == h:
                out.append(phy)
            if prev <= 0 or prev > last or prev == n:
                break
            n = prev
        return out

    def next_entries(self) -> np.ndarray:
        """Where each entry's chain goes on to, as :meth:`offsets` follows it (int32, entries
        0..last_entry; 0: the chain ends there)."""
        last = self.last_entry
        out = np.zeros(max(last + 1, 0), np.int32)
        for lo, links in self._links():
            out[lo:lo + len(links)] = links
        return out

    def links_forward(self) -> bool:
        """Whether some entry's chain goes on to a newer entry (a sound file's never does:
        putKey links each entry to the slot's newest before it). Read a chunk at a time."""
        return any(bool((links > np.arange(lo, lo + len(links))).any()) for lo, links in self._links())

    def _links(self):
        """(first entry, the next entries of a chunk of entries), in order: what
        :meth:`next_entries` holds, :data:`_CHAIN_CHUNK` entries at a time (20 bytes each: a
        full default file's entries are 400 MB)."""
        last = self.last_entry
        base = INDEX_HEADER_SIZE + self.slots * HASH_SLOT_SIZE
        for lo in range(0, last + 1, _CHAIN_CHUNK):
            e = np.frombuffer(self.data, _ENTRIES, count=min(_CHAIN_CHUNK, last + 1 - lo), offset=base + lo * INDEX_SIZE)
            prev = e["prev"].astype(np.int64)
            n = np.arange(lo, lo + len(e))
            links = np.where((e["diff"] >= 0) & (prev > 0) & (prev <= last) & (prev != n), prev, 0).astype(np.int32)
            if lo == 0:
                links[0] = 0  # (entry 0 is never used)
            yield lo, links

    def heads(self) -> np.ndarray:
        """Each slot's newest entry as :meth:`offsets` takes it (int32; 0: the slot is empty)."""
        v = np.frombuffer(self.data, ">i4", count=self.slots, offset=INDEX_HEADER_SIZE).astype(np.int64)
        if self.index_count <= 1:
            return np.zeros(self.slots, np.int32)
        return np.where((v > 0) & (v <= self.last_entry), v, 0).astype(np.int32)


_ENTRIES = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
_CHAIN_CHUNK = 1 << 20


@dataclass(frozen=True)
class ChainLoops:
    """The hash chains of one index file that loop (:func:`chain_loops`)."""

    slots: int  # how many slots' chains loop
    first_slot: int  # the first of them
    cycle: list[int]  # the entries of the loop its chain enters, in the order followed


def chain_loops(f: IndexFile) -> ChainLoops | None:
    """The slots whose chains loop in ``f`` (None when none does). A chain of a sound file
    only goes back (each entry's previous is older), so only a file with a link that goes
    forward is searched: each entry's link is followed by doubling (a link of 2^k steps from
    two of 2^(k-1)) until the longest chain the file can hold is covered; an entry from which
    that many steps do not reach a chain's end is on a loop or leads into one."""
    if not f.links_forward():  # (the usual case: read a chunk at a time, nothing held)
        return None
    nxt = f.next_entries()
    jump = nxt.copy()
    steps = 1
    while steps < len(nxt):
        jump = jump[jump]
        steps *= 2
    heads = f.heads()
    looping = np.flatnonzero(jump[heads] != 0)
    if not len(looping):
        return None
    first = int(looping[0])
    path, at, n = [], {}, int(heads[first])
    while n not in at:  # (the first chain, followed to where it comes back)
        at[n] = len(path)
        path.append(n)
        n = int(nxt[n])
    return ChainLoops(len(looping), first, path[at[n]:])


def index_findings(root: str) -> list[dict]:
    """``mq check``'s findings on ``root/index``: an ``index-loop`` per file whose hash chains
    loop (a look-up by key walked such a loop without end before; :meth:`IndexFile.offsets`
    now stops where it comes back), with the file and the byte offset of the first such
    slot. Files of a shape their length does not tell (not the broker's default ratio of
    entries to slots) are not read."""
    out = []
    d = os.path.join(root, INDEX_DIR)
    for name in sorted(_index_file_sizes(root)):
        f = _open_index_file(os.path.join(d, name), name)
        if f is None:
            continue
        try:
            loops, capacity = chain_loops(f), f.capacity
        finally:
            f.data.close()
        if loops is None:
            continue
        shown = " -> ".join(map(str, loops.cycle[:6] + [loops.cycle[0]])) if len(loops.cycle) <= 6 else \
            " -> ".join(map(str, loops.cycle[:5])) + f" -> ... ({len(loops.cycle)} entries) -> {loops.cycle[0]}"
        count = (f"; its header's index count {f.index_count} is past the {capacity - 1} entries the file holds"
                 if f.index_count > capacity - 1 else "")
        more = f" (and {loops.slots - 1} more slots' chains)" if loops.slots > 1 else ""
        out.append({"finding": "index-loop", "file": f"{INDEX_DIR}/{name}",
                    "offset": INDEX_HEADER_SIZE + loops.first_slot * HASH_SLOT_SIZE, "index": None, "topic": None,
                    "queue_id": None, "queue_offset": None,
                    "detail": f"the hash chain of slot {loops.first_slot}{more} loops: entries {shown}{count}; a "
                              f"look-up by key stops where it comes back, RocketMQ's walks it up to its result bound "
                              f"(rebuild the index: 'dledgerctl mq rebuild')"})
    return out


def index_key_hash(key: str) -> int:
    """``IndexFile.indexKeyHashMethod``: Java's ``String.hashCode()``, made non-negative with
    ``Math.abs`` (whose answer for Integer.MIN_VALUE stays negative: then 0)."""
    h = tags_code(key)  # (Java's String.hashCode, as the consume queue's tag code is)
    return 0 if h == -(1 << 31) else abs(h)


def index_file_bytes(slots: int, index_num: int) -> int:
    """The length of an index file of ``slots`` hash slots and ``index_num`` entries."""
    return INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE + index_num * INDEX_SIZE


@dataclass(frozen=True)
class IndexShape:
    """The shape new index files get (the broker's maxHashSlotNum and maxIndexNum), and what
    the caller should say about how it was chosen (None: nothing to say)."""

    slots: int
    index_num: int
    note: str | None = None


class IndexShapeUnknown(StoreUsageError):
    """The existing index files are not of the default shape, nor of one their length tells."""


def index_shape(root: str, slots: int | None, index_num: int | None, defaults: tuple[int, int]) -> IndexShape:
    """The shape of index files to write for the broker whose store root is ``root``.

    The broker maps its ``index/`` files by its own settings (``IndexFile``: a file of another
    length is read at the wrong places, not refused), so a shape that is not the broker's
    makes every look-up by key miss. Given (``slots`` or ``index_num`` not None; one alone
    takes the other from the files' length when they are all of one, else its default), it
    is used, with a note when the files already under ``index/`` are of another length. Not given, it is read off those files: the defaults when they
    fit them (or there are none), else the shape of the broker's own ratio (maxIndexNum =
    4 x maxHashSlotNum) that their length tells, said in the note; a length that fits
    neither raises IndexShapeUnknown (nothing is written: the options must be given)."""
    sizes = _index_file_sizes(root)
    lengths = sorted(set(sizes.values()))
    if (slots is None) != (index_num is None) and len(lengths) == 1:  # one given: the other from the files' length
        rest = lengths[0] - INDEX_HEADER_SIZE - (slots or 0) * HASH_SLOT_SIZE - (index_num or 0) * INDEX_SIZE
        unit = INDEX_SIZE if index_num is None else HASH_SLOT_SIZE
        if rest > 0 and rest % unit == 0:
            slots, index_num = (slots, rest // unit) if index_num is None else (rest // unit, index_num)
    if slots is not None or index_num is not None:
        shape = IndexShape(defaults[0] if slots is None else slots, defaults[1] if index_num is None else index_num)
        other = sorted({s for s in sizes.values() if s != index_file_bytes(shape.slots, shape.index_num)})
        if not other:
            return shape
        return IndexShape(shape.slots, shape.index_num,
                          f"{os.path.join(root, INDEX_DIR)} holds files of {', '.join(map(str, other))} bytes; the "
                          f"new ones have {shape.slots} slots and {shape.index_num} entries as given "
                          f"({index_file_bytes(shape.slots, shape.index_num)} bytes)")
    if not lengths or lengths == [index_file_bytes(*defaults)]:
        return IndexShape(*defaults)
    n = _one_to_four_slots(lengths[0]) if len(lengths) == 1 else None
    if n is not None:
        return IndexShape(n, INDEX_PER_SLOT * n, f"index files of {n} slots and {INDEX_PER_SLOT * n} entries, the "
                                                 f"shape of the {lengths[0]}-byte files in "
                                                 f"{os.path.join(root, INDEX_DIR)}")
    ask = "give --max-hash-slot-num and --max-index-num as the broker's maxHashSlotNum and maxIndexNum"
    if len(lengths) > 1:
        raise IndexShapeUnknown(f"{os.path.join(root, INDEX_DIR)}: files of {len(lengths)} lengths "
                                f"({', '.join(map(str, lengths))} bytes), so no one shape of the broker's: {ask}")
    name = min(sizes)
    raise IndexShapeUnknown(f"{os.path.join(root, INDEX_DIR, name)}: {sizes[name]} bytes, the length of no index file "
                            f"of RocketMQ's default shape ({defaults[0]} slots, {defaults[1]} entries: "
                            f"{index_file_bytes(*defaults)} bytes) nor of maxIndexNum = 4 x maxHashSlotNum: {ask}")


def _one_to_four_slots(length: int) -> int | None:
    """The slots of an index file ``length`` bytes long when it has the broker's default
    ratio of entries to slots (maxIndexNum = 4 x maxHashSlotNum); None when no such shape
    makes that length."""
    body, per_slot = length - INDEX_HEADER_SIZE, HASH_SLOT_SIZE + INDEX_PER_SLOT * INDEX_SIZE
    return body // per_slot if body > 0 and body % per_slot == 0 else None


def _index_file_sizes(root: str) -> dict[str, int]:
    """The index files under ``root/index`` (named by creation time: digits only) and their lengths."""
    try:
        with os.scandir(os.path.join(root, INDEX_DIR)) as it:
            return {e.name: e.stat().st_size for e in it if e.name.isdigit() and e.is_file(follow_symlinks=False)}
    except FileNotFoundError:
        return {}


def open_index(root: str) -> list[IndexFile] | None:
    """The index files under ``root/index``, oldest first (their names are creation times),
    or None when there are none or one is not of the shape the broker's settings make by
    default (maxIndexNum = 4 x maxHashSlotNum, which the file size then tells): the caller
    scans instead."""
    d = os.path.join(root, INDEX_DIR)
    try:
        names = sorted(e.name for e in os.scandir(d) if e.is_file(follow_symlinks=False))
    except OSError:
        return None
    out = []
    for name in names:
        f = _open_index_file(os.path.join(d, name), name)
        if f is None:
            for g in out:
                g.data.close()
            return None
        out.append(f)
    return out or None


def _open_index_file(path: str, name: str) -> IndexFile | None:
    """One index file, mapped (a default file is 420 MB, most of it never touched by a
    look-up), when its length is of the broker's default ratio of entries to slots; else None."""
    try:
        with open(path, "rb") as fh:
            data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # (ValueError: an empty file cannot be mapped)
        return None
    slots = _one_to_four_slots(len(data))
    if slots is None:
        data.close()
        return None
    _bts, _ets, begin_phy, end_phy, _slot_count, index_count = _HEADER.unpack_from(data)
    return IndexFile(name, data, slots, begin_phy, end_phy, index_count)
