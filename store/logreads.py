"""The file store's read path: entries by index, through their index records.

:class:`LogReader` is the part of :class:`~store.filestore.FileStore` that reads: one entry
(``get``, ``get_bytes``, ``locate``, ``term_of``) or a run of encoded entries for a
follower (``read_entries``). Every header read is checked against its index record, so a
damaged index record cannot serve other bytes. It owns what the reads remember: the
leader's latest writes (handed to it by the append path, store/appending.py) and the last
answer. Whoever cuts the log or writes it as a follower calls :meth:`LogReader.forget`.
"""

from __future__ import annotations

import bisect
from operator import itemgetter

import numpy as np

from .base import Entry
from .batch import HEADER_DTYPE, INDEX_DTYPE, RUN_MIN, gather_headers, headers_equal_records, prefix_true
from .errors import IndexOutOfRange, StoreCorruptError
from .extent import Extent
from .files import FileList
from .format import CRC_MASK, ENTRY_HEADER, HEADER_SIZE, INDEX_RECORD, INDEX_UNIT_SIZE, crc32

TAIL_BYTES = 8 << 20  # how much of its latest appends a leader keeps for read_entries

# an index record (format.INDEX_RECORD: magic, pos, size, index, term) as numpy reads it
_INDEX_DTYPE = np.dtype([("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8")])
assert _INDEX_DTYPE.itemsize == INDEX_UNIT_SIZE


def _damaged(index: int, pos: int) -> str:
    return (f"entry {index} (pos {pos}) is damaged: its body does not match its recorded CRC "
            "(the scrub repairs it from a replica; 'store verify' names it on a stopped member)")


def bodies_match(raw, headers: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per entry of ``raw`` (headers gathered as (n, 48) bytes, entry k at starts[k] ..
    ends[k]): True where no CRC is recorded or the body matches it."""
    hdr = headers.view(HEADER_DTYPE)[:, 0]
    bcrc = hdr["bcrc"].astype(np.int64)
    want = np.flatnonzero((bcrc != 0) | (hdr["chain"] != 0))
    ok = np.ones(len(hdr), dtype=bool)
    if len(want):
        view = memoryview(raw)
        try:
            got = np.fromiter(map(crc32, map(view.__getitem__, map(slice, (starts[want] + HEADER_SIZE).tolist(),
                                                                  ends[want].tolist()))),
                              dtype=np.int64, count=len(want))
        finally:
            view.release()
        ok[want] = (got & CRC_MASK) == bcrc[want]
    return ok


class LogReader:
    def __init__(self, data: FileList, index: FileList, extent: Extent) -> None:
        self.data = data
        self.index = index
        self.extent = extent
        self._last_read = None  # (arguments, end_index), answer: see read_entries
        self._tail: list[tuple[int, list[int], bytes] | None] = []  # the leader's latest writes: see read_entries
        self._tail_head = 0  # _tail[:_tail_head] are dropped (deleted in bulk: dropping one at a time was O(n))
        self._tail_bytes = 0

    def check_range(self, index: int) -> None:
        x = self.extent
        if not 0 <= x.begin_index <= index <= x.end_index:
            raise IndexOutOfRange(f"index {index} is outside the log [{x.begin_index}, {x.end_index}]")

    # -- one entry --------------------------------------------------------------------
    def indexes_with_magic(self, magic: int) -> list[int]:
        """The indexes of the entries of ``magic`` (config entries are few: found from the
        index files, 32 bytes an entry, a file's worth at a time)."""
        x = self.extent
        if x.begin_index < 0:
            return []
        out: list[int] = []
        lo, hi = x.begin_index * INDEX_UNIT_SIZE, (x.end_index + 1) * INDEX_UNIT_SIZE
        for f in self.index.files:
            a, b = max(lo, f.start), min(hi, f.start + f.actual_size)
            if a >= b or f.mm is None:
                continue
            recs = np.frombuffer(f.mm, dtype=_INDEX_DTYPE, count=(b - a) // INDEX_UNIT_SIZE, offset=a - f.start)
            out.extend(int(i) for i in recs["index"][recs["magic"] == magic])
        return out

    def index_record(self, index: int) -> tuple[int, int, int, int, int]:
        self.check_range(index)
        off = index * INDEX_UNIT_SIZE
        f = self.index.find(off)
        if f is None or f.mm is None or off - f.start + INDEX_UNIT_SIZE > f.actual_size:
            raise StoreCorruptError(f"index record of entry {index} is missing")
        rec = INDEX_RECORD.unpack_from(f.mm, off - f.start)
        if rec[3] != index:
            raise StoreCorruptError(f"index record at {off} is for entry {rec[3]}, not {index}")
        return rec

    def locate(self, index: int) -> tuple[int, int]:
        """(pos, size) of an entry, from its index record."""
        _m, pos, size, _i, _t = self.index_record(index)
        return pos, size

    def term_of(self, index: int) -> int:
        return self.index_record(index)[4]

    def get_bytes(self, index: int, *, checked: bool = False) -> bytes:
        """Entry ``index``'s bytes as they lie; ``checked``: StoreCorruptError when its body
        fails its recorded CRC (what a node serves; comparing, keeping and cutting read the
        bytes as they are)."""
        magic, pos, size, _i, term = self.index_record(index)
        # A damaged index record (read-only stores, or before recovery's window) must not
        # serve other bytes: the header found there must say this index, size and pos, and
        # its magic and term (which no CRC covers, or not always) must be the record's.
        if size < HEADER_SIZE:
            raise StoreCorruptError(f"index record of entry {index} gives size {size}")
        raw = self.data.read(pos, size)
        hmagic, hsize, hindex, hterm, hpos, _ch, chain, bcrc, bsize = ENTRY_HEADER.unpack_from(raw)
        if (hindex, hsize, hpos) != (index, size, pos) or bsize != size - HEADER_SIZE:
            raise StoreCorruptError(f"data at pos {pos} is not entry {index} of {size} bytes")
        if checked and (hmagic, hterm) != (magic, term):
            raise StoreCorruptError(f"entry {index} (pos {pos}) is damaged: its header says magic {hmagic} term "
                                    f"{hterm}, its index record magic {magic} term {term}")
        if checked and (bcrc or chain) and crc32(memoryview(raw)[HEADER_SIZE:]) & CRC_MASK != bcrc:
            raise StoreCorruptError(_damaged(index, pos))
        return raw

    def get(self, index: int, *, checked: bool = False) -> Entry:
        raw = self.get_bytes(index, checked=checked)
        magic, size, idx, term, pos, channel, chain, bcrc, bsize = ENTRY_HEADER.unpack_from(raw)
        return Entry(idx, term, pos, magic, raw[HEADER_SIZE:size], bcrc, chain, channel)

    # -- what the reads remember ------------------------------------------------------
    def forget(self) -> None:
        """The log was cut or written by someone other than the leader's own appends: what
        read_entries remembers no longer holds."""
        self._last_read = None
        self._tail, self._tail_head, self._tail_bytes = [], 0, 0

    def forget_last(self) -> None:
        """The log's beginning moved: the last answer no longer holds (the writes do)."""
        self._last_read = None

    def remember(self, first: int, ends: list[int], data) -> None:
        """Keep the encoded entries a leader append just wrote (``first`` on, laid end to
        end in ``data``, entry k ending at ``ends[k]``, all in one data file): its
        followers are about to ask for exactly these, and read_entries serves them from
        here instead of reading back what it wrote. The newest TAIL_BYTES are kept (with
        single-entry appends of 100 bytes, some 56,000 writes: dropping the oldest and
        finding one are O(1) and O(log n), not a list's pop(0) and a walk)."""
        tail = self._tail
        tail.append((first, ends, data if isinstance(data, bytes) else bytes(data)))
        self._tail_bytes += ends[-1]
        head = self._tail_head
        while self._tail_bytes > TAIL_BYTES and len(tail) - head > 1:
            self._tail_bytes -= tail[head][1][-1]
            tail[head] = None  # its bytes go now (bisection never looks before the head)
            head += 1
        if head > 1024 and head * 2 > len(tail):
            del tail[:head]
            head = 0
        self._tail_head = head

    def from_tail(self, first: int, max_count: int, max_bytes: int) -> tuple[bytes | memoryview, int] | None:
        """read_entries' answer from the remembered writes, when one of them holds it
        whole: ``first`` is in it, and the answer stops inside it or at the log's end.
        None otherwise (the files answer)."""
        k = bisect.bisect_right(self._tail, first, self._tail_head, key=itemgetter(0)) - 1
        if k < self._tail_head:
            return None
        f0, ends, data = self._tail[k]
        i = first - f0
        if i >= len(ends):
            return None
        start = ends[i - 1] if i else 0
        stop = min(len(ends), i + max(1, max_count))
        j = max(i + 1, bisect.bisect_right(ends, start + max_bytes, i + 1, stop))
        if j == len(ends) and j - i < max_count and f0 + j - 1 < self.extent.end_index:
            return None  # it may go on into the next write: one read from the files says
        if start == 0 and j == len(ends):
            return data, j - i
        # a view, not a copy: with batches of 1,024 entries of 1 KiB, the copies of the
        # pushes' megabytes were a tenth of a leader's CPU per entry (the bytes are immutable)
        return memoryview(data)[start : ends[j - 1]], j - i

    # -- runs of entries --------------------------------------------------------------
    def read_entries(self, first: int, max_count: int, max_bytes: int, *,
                     as_stored: bool = False) -> tuple[bytes | memoryview, int]:
        """Encoded entries from ``first`` on: at least one entry, at most ``max_count``
        entries and (beyond the first) ``max_bytes`` bytes, with their count. Entries within
        one data file are contiguous, so each file's share is one read; every header read
        is checked against its index record, so a damaged index record cannot serve other
        bytes.

        Entries a leader has just appended are not read back: they are served from the
        bytes it wrote (:meth:`remember`), up to the end of the append that holds ``first``.
        The last answer is kept too: a leader's followers usually ask for the same entries
        one right after the other. Both are forgotten when the log is cut or written by a
        follower's append; the last answer is reused only while the log ends where it did
        (a leader's own appends only add entries after the end).

        Bodies whose recorded CRC fails are never returned: the answer stops before the
        first one, or is StoreCorruptError naming it when it is ``first``. ``as_stored``:
        the bytes as they lie, bodies unchecked (fingerprints, which must show damage)."""
        end_index = self.extent.end_index
        key = (first, max_count, max_bytes, end_index, as_stored)
        last = self._last_read
        if last is not None and last[0] == key:
            return last[1]
        self.check_range(first)
        answer = self.from_tail(first, max_count, max_bytes) if self._tail else None
        if answer is not None:
            self._last_read = key, answer
            return answer
        parts: list[bytes] = []
        budget = max_bytes
        count = max(1, max_count)
        idx = first
        while count > 0 and idx <= end_index:
            try:
                got = self._raw_in_file(idx, count, budget, not parts, not as_stored)
            except StoreCorruptError:
                if not parts:
                    raise
                break  # the entries before it are answered; the next read names what is wrong
            if not got:
                break
            parts.append(got[0])
            idx += got[1]
            count -= got[1]
            budget -= len(got[0])
        answer = (parts[0] if len(parts) == 1 else b"".join(parts)), idx - first
        self._last_read = key, answer
        return answer

    def _raw_in_file(self, first: int, max_count: int, budget: int, first_part: bool, check: bool = True):
        """(bytes, entry count) of entries from ``first`` within its data file, or None when
        not even one fits ``budget`` (the very first entry of a call always fits)."""
        pos0, size0 = self.locate(first)
        if size0 > budget and not first_part:
            return None
        fsize = self.data.file_size
        limit = min(pos0 + max(budget, size0), pos0 - pos0 % fsize + fsize)
        end_index = self.extent.end_index
        if max_count >= RUN_MIN and end_index - first + 1 >= RUN_MIN:
            got = self._raw_run(first, max_count, pos0, limit, check)
            if got is not None:
                return got
        lo, hi = first, min(end_index, first + max_count - 1)

        def end_of(k: int) -> int:
            p, n = self.locate(k)
            return p + n

        if end_of(hi) > limit:  # the largest k whose end stays within limit (first always does)
            hi -= 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if end_of(mid) <= limit:
                    lo = mid
                else:
                    hi = mid - 1
        total = end_of(hi) - pos0
        if total < HEADER_SIZE:
            raise StoreCorruptError(f"index records from entry {first} do not describe contiguous entries")
        raw = self.data.read(pos0, total)
        off, idx, unpack = 0, first, ENTRY_HEADER.unpack_from
        view = memoryview(raw)
        while off < total:
            if total - off < HEADER_SIZE:
                raise StoreCorruptError(f"entries from {first}: {total - off} stray bytes at pos {pos0 + off}")
            hmagic, size, hindex, hterm, hpos, _ch, chain, bcrc, bsize = unpack(raw, off)
            if hindex != idx or hpos != pos0 + off or size < HEADER_SIZE or off + size > total \
                    or bsize != size - HEADER_SIZE:
                raise StoreCorruptError(f"data at pos {pos0 + off} is not entry {idx} (index records disagree)")
            rec = self.index_record(idx) if check else None
            if rec is not None and (hmagic, hterm) != (rec[0], rec[4]):  # (no CRC covers them; the run lane compares them too)
                if idx == first:
                    raise StoreCorruptError(f"entry {idx} (pos {hpos}) is damaged: its header says magic {hmagic} "
                                            f"term {hterm}, its index record magic {rec[0]} term {rec[4]}")
                return raw[:off], idx - first
            if check and (bcrc or chain) and crc32(view[off + HEADER_SIZE : off + size]) & CRC_MASK != bcrc:
                if idx == first:
                    raise StoreCorruptError(_damaged(idx, pos0 + off))
                return raw[:off], idx - first  # the sound entries before it; the next read names it
            off += size
            idx += 1
        return raw, idx - first

    def _raw_run(self, first: int, max_count: int, pos0: int, limit: int, check: bool = True):
        """The run lane of :meth:`_raw_in_file`: the index records of up to ``max_count``
        entries from ``first`` read at once (the same range the per-entry lane searches);
        when all of them are contiguous, the ones that end by ``limit``, if their headers
        equal their records. None otherwise: the per-entry lane then serves the call or
        names the problem, so both lanes answer alike."""
        off = first * INDEX_UNIT_SIZE
        ifile = self.index.find(off)
        if ifile is None or ifile.mm is None:
            return None
        r = off - ifile.start
        n = min(max_count, self.extent.end_index - first + 1, (ifile.actual_size - r) // INDEX_UNIT_SIZE)
        if n < RUN_MIN:
            return None
        rec = np.frombuffer(ifile.mm, dtype=INDEX_DTYPE, count=n, offset=r)
        pos = rec["pos"].astype(np.int64)
        ends = pos + rec["size"].astype(np.int64)
        ok = (rec["index"] == np.arange(first, first + n, dtype=np.int64)) & (ends - pos >= HEADER_SIZE)
        ok[0] &= bool(pos[0] == pos0)
        ok[1:] &= pos[1:] == ends[:-1]
        if prefix_true(ok) < n:
            return None  # a record that disagrees: the per-entry lane decides what that means
        take = prefix_true(ends <= limit)
        if take == 0:
            return None
        total = int(ends[take - 1]) - pos0
        raw = self.data.read(pos0, total)
        words = np.frombuffer(ifile.mm, dtype=np.uint32, count=take * 8, offset=r).reshape(take, 8)
        headers = gather_headers(raw, pos[:take] - pos0)
        if prefix_true(headers_equal_records(headers, words)) < take:
            return None
        if check and prefix_true(bodies_match(raw, headers, pos[:take] - pos0, ends[:take] - pos0)) < take:
            return None  # a damaged body: the per-entry lane serves the entries before it, or names it
        return raw, take
