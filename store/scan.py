"""The one decoder of data-file bytes.

Recovery, ``store inspect-data``, ``store verify``, ``store diff`` and the Spark source all
read entries through :class:`FileScan`; nothing else parses data-file bytes.

A scan walks one data file from a start offset. It yields one :class:`Scanned` per record
(entries, and the BLANK padding record if asked) and stops at the first place where the
bytes cannot be parsed any further; ``scan.stop`` then says why and where. Problems that
leave the framing intact (a bad checksum, an index gap, a term going back) do not stop the
scan: they are reported in ``Scanned.status`` and each consumer decides (recovery ends the
log there, verify reports and goes on).

A scan has two lanes over the same bytes. The per-entry lane (iterating a scan) decodes one
record at a time with ``struct`` and is the only judge of statuses and stops. The run lane
(:meth:`FileScan.walk`) takes the entry positions from the index file, gathers those headers
and checks a whole stretch at once (store/_lanes.c's run_headers where it was built, numpy
otherwise); it only ever *accepts* entries (the longest prefix that passes every check the
per-entry lane makes, plus equality with the index record) and hands everything else back
to the per-entry lane. Both lanes apply the rules
below, so a stretch accepted by the run lane is exactly what the per-entry lane would have
yielded as healthy; tests compare the two on damaged stores.

Invariants: the scan never reads outside ``buf``; it never raises on any byte content.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator, NamedTuple

import numpy as np

from .batch import (
    HEADER_DTYPE,
    INDEX_DTYPE,
    MAGIC_HIGH,
    MAGIC_LOW,
    gather_headers,
    headers_equal_records,
    prefix_true,
)
from .files import PAGE, release_pages
from .format import (
    BLANK_HEADER,
    BLANK_MAGIC,
    CHAIN_INPUT,
    CRC_MASK,
    ENTRY_HEADER,
    ENTRY_MAGICS,
    HEADER_SIZE,
    INDEX_UNIT_SIZE,
    crc32,
)

try:  # the run lane's framing checks, compiled (store/_lanes.c); numpy's below when not built
    from . import _lanes
except ImportError:  # pragma: no cover - an install without a C compiler
    _lanes = None

# Scanned.status values. OK and NO_CRC are healthy entries.
OK = "ok"  # checksums recorded and correct
NO_CRC = "no-crc"  # written without checksums (DLedger 0.2.7), nothing to check
BAD_BODY_CRC = "bad-body-crc"
BAD_CHAIN_CRC = "bad-chain-crc"
INDEX_GAP = "index-gap"  # index is not previous index + 1
TERM_BACK = "term-back"  # term lower than the previous entry's
BLANK = "blank"  # the BLANK padding record at the end of a file (kind == "blank")
HEALTHY = frozenset((OK, NO_CRC))

# ScanStop.reason values.
STOP_BLANK = "blank"  # a valid BLANK record: the rest of the file is padding
STOP_END = "end"  # zeros where the next header would be: nothing written past here
STOP_EOF = "eof"  # the file ends exactly at a record boundary
STOP_LIMIT = "limit"  # the caller's end offset or count was reached
STOP_TORN = "torn"  # the file ends inside a header or a body
STOP_BAD_MAGIC = "bad-magic"
STOP_BAD_SIZE = "bad-size"
STOP_BAD_POS = "bad-pos"
STOP_BAD_BLANK = "bad-blank"
CLEAN_STOPS = frozenset((STOP_BLANK, STOP_END, STOP_EOF, STOP_LIMIT))


class Scanned(NamedTuple):
    """One record as found on disk. ``offset`` is the logical (store-wide) byte offset."""

    offset: int
    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int
    status: str

    @property
    def kind(self) -> str:
        return "blank" if self.status == BLANK else "entry"

    @property
    def healthy(self) -> bool:
        return self.status in HEALTHY


@dataclass
class ScanStop:
    reason: str
    offset: int  # logical offset where the scan stopped
    detail: str = ""

    @property
    def clean(self) -> bool:
        return self.reason in CLEAN_STOPS


@dataclass
class Run:
    """A stretch of consecutive healthy entries accepted at once by the run lane.

    Every entry in it passed all per-entry checks (framing, pos, index continuity, term
    order, checksums where recorded and ``check_crc``) and its index record equals its
    header's (magic, pos, size, index, term)."""

    offset: int  # logical offset of the first entry
    end_offset: int  # logical offset just past the last entry
    count: int
    first_index: int
    first_term: int
    last_index: int
    last_term: int
    last_chain: int
    crc_checked: int  # entries with checksums recorded (and checked, when check_crc)
    crc_absent: int  # entries written without checksums
    # With FileScan(run_headers=True): the run's headers as gathered, one row per entry, in
    # a big-endian structured array (fields magic, size, index, term, pos, channel,
    # chain, bcrc, bsize). A copy: it stays valid after the scan moves on.
    headers: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return self.end_offset - self.offset


class FileScan:
    """Iterate the records of one data file.

    ``buf`` holds the file's bytes (an mmap or bytes; may be shorter than the configured
    file size when the file was truncated); ``file_start`` is the file's logical start
    offset. ``prev_index``/``prev_term``/``prev_chain`` describe the entry before the first
    one scanned, when known (None: unknown, the corresponding check is skipped for the
    first entry). ``file_size`` is the configured size (a BLANK record must reach it);
    it defaults to ``len(buf)``. ``check_crc=False`` skips checksum work (status is then OK
    or NO_CRC from the recorded fields alone). ``release_pages=True`` (read-only mmaps
    only) drops the mapping of pages behind the cursor so a long walk keeps a flat RSS.
    ``run_headers=True`` makes :meth:`walk` attach each Run's decoded headers
    (``Run.headers``) for callers that need per-entry columns (the Spark source).
    """

    def __init__(
        self,
        buf,
        file_start: int,
        *,
        start: int = 0,
        end: int | None = None,
        prev_index: int | None = None,
        prev_term: int | None = None,
        prev_chain: int | None = None,
        check_crc: bool = True,
        include_blank: bool = False,
        max_entries: int | None = None,
        file_size: int | None = None,
        release_pages: bool = False,
        run_headers: bool = False,
    ) -> None:
        self.buf = buf
        self.file_size = len(buf) if file_size is None else file_size
        self.file_start = file_start
        self.start = start
        self.end = len(buf) if end is None else min(end, len(buf))
        self.prev_index = prev_index
        self.prev_term = prev_term
        self.prev_chain = prev_chain
        self.check_crc = check_crc
        self.include_blank = include_blank
        self.max_entries = max_entries
        self.release_pages = release_pages
        self.run_headers = run_headers
        self.stop: ScanStop | None = None
        self.next_offset = file_start + start  # logical offset just past the last record
        self._off = start  # cursor: offset in buf of the next record
        self._remaining = max_entries
        self._released = 0  # pages below this offset were released (release_pages)

    def __iter__(self) -> Iterator[Scanned]:
        """Every record, one :class:`Scanned` each (the per-entry lane only)."""
        return self._entries(None)

    def walk(self, index_files) -> Iterator[Scanned | Run]:
        """Like iterating, but healthy stretches come as :class:`Run` summaries.

        ``index_files`` is the store's index :class:`~store.files.FileList` (anything with
        ``find(offset)`` returning a file with ``mm``, ``start``, ``actual_size``). Where
        the index records and the data agree, whole stretches are checked at once (see
        :func:`_fast_run`); everything else -- the first entry that fails any check, the
        end of the data, a damaged or missing index -- goes through the per-entry lane,
        which alone decides statuses and stops. A Run therefore only ever stands for
        entries the per-entry lane would have yielded as healthy, each with an index
        record equal to its header.
        """
        stride = 0  # entries to take through the per-entry lane before trying a run again
        fails = 0
        while self.stop is None:
            if stride <= 0:
                run = _fast_run(self, index_files)
                if run is not None:
                    fails = 0
                    if self.release_pages:
                        self._release()
                    yield run
                    continue
                stride = SLOW_STRIDE_MIN << min(fails, SLOW_STRIDE_DOUBLINGS)
                fails += 1
            yield from self._entries(stride)
            stride = 0
            if self.release_pages:
                self._release()

    def _release(self) -> None:
        """Drop the mapping of pages wholly behind the cursor (page cache keeps them)."""
        if self._off - self._released >= PAGE:
            release_pages(self.buf, self._released, self._off)
            self._released = self._off - self._off % PAGE

    def _entries(self, limit: int | None) -> Iterator[Scanned]:
        """The per-entry lane: from the cursor, at most ``limit`` records (None: no limit).

        Returns without setting ``stop`` when ``limit`` records were taken."""
        buf = self.buf
        base = self.file_start
        end = self.end
        buflen = len(buf)
        off = self._off
        taken = 0
        unpack = ENTRY_HEADER.unpack_from
        prev_index = self.prev_index
        prev_term = self.prev_term
        prev_chain = self.prev_chain
        check_crc = self.check_crc
        crc = crc32
        chain_pack = CHAIN_INPUT.pack
        remaining_entries = self._remaining
        try:
            while True:
                if limit is not None and taken >= limit:
                    return
                if off >= end:
                    self._stop(STOP_EOF if end == buflen else STOP_LIMIT, base + off)
                    return
                if remaining_entries is not None and remaining_entries <= 0:
                    self._stop(STOP_LIMIT, base + off)
                    return
                room = buflen - off
                if room < 8:
                    tail = bytes(buf[off:buflen])
                    if tail.count(0) == len(tail):
                        self._stop(STOP_END, base + off)
                    else:
                        self._stop(STOP_TORN, base + off, f"{room} bytes left, too few for a header")
                    return
                magic, size = BLANK_HEADER.unpack_from(buf, off)
                if magic == BLANK_MAGIC:
                    if size != self.file_size - off:
                        self._stop(STOP_BAD_BLANK, base + off, f"BLANK size {size} but {self.file_size - off} bytes left in file")
                        return
                    if self.include_blank:
                        yield Scanned(base + off, magic, size, -1, -1, -1, 0, 0, 0, 0, BLANK)
                    self.next_offset = base + off + size
                    self._stop(STOP_BLANK, base + off)
                    return
                if magic == 0 and size == 0:
                    self._stop(STOP_END, base + off)
                    return
                if magic not in ENTRY_MAGICS:
                    self._stop(STOP_BAD_MAGIC, base + off, f"magic {magic}")
                    return
                if room < HEADER_SIZE:
                    self._stop(STOP_TORN, base + off, f"file ends {room} bytes into a {HEADER_SIZE}-byte header")
                    return
                _, _, index, term, pos, channel, chain, bcrc, bsize = unpack(buf, off)
                if bsize < 0 or size != HEADER_SIZE + bsize:
                    self._stop(STOP_BAD_SIZE, base + off, f"size {size} != {HEADER_SIZE} + bodySize {bsize}")
                    return
                if pos != base + off:
                    self._stop(STOP_BAD_POS, base + off, f"pos field {pos} != offset {base + off}")
                    return
                if size > room:
                    self._stop(STOP_TORN, base + off, f"entry of {size} bytes runs past the file end ({room} left)")
                    return
                if prev_index is not None and index != prev_index + 1:
                    status = INDEX_GAP
                elif prev_term is not None and term < prev_term:
                    status = TERM_BACK
                elif bcrc == 0 and chain == 0:
                    status = NO_CRC
                elif not check_crc:
                    status = OK
                elif crc(buf[off + HEADER_SIZE : off + size]) & CRC_MASK != bcrc:
                    status = BAD_BODY_CRC
                elif (prev_chain is not None or index == 0) and crc(
                        chain_pack(prev_chain or 0, index, term, bcrc)) & CRC_MASK != chain:
                    # Entry 0 has no predecessor: its chain input is 0 (store/format.py), so it is
                    # checkable even when the scan does not know what came before.
                    status = BAD_CHAIN_CRC
                else:
                    status = OK
                yield Scanned(base + off, magic, size, index, term, pos, channel, chain, bcrc, bsize, status)
                if remaining_entries is not None:
                    remaining_entries -= 1
                taken += 1
                prev_index, prev_term, prev_chain = index, term, chain
                off += size
        finally:
            self._off = off
            self._remaining = remaining_entries
            self.next_offset = base + off if self.stop is None or self.stop.reason != STOP_BLANK else self.next_offset
            self.prev_index, self.prev_term, self.prev_chain = prev_index, prev_term, prev_chain

    def _stop(self, reason: str, offset: int, detail: str = "") -> None:
        self.stop = ScanStop(reason, offset, detail)


# --- the run lane ------------------------------------------------------------------------

INT64_MIN = -(1 << 63)  # (for run_headers: no term before the first)
RUN_MAX = 1 << 16  # entries checked per run: bounds the temporary arrays (a few MiB)
SLOW_STRIDE_MIN = 64  # after a refused run, this many entries go through the per-entry lane
SLOW_STRIDE_DOUBLINGS = 10  # ... doubling with each consecutive refusal (a damaged index)

_PREV_CHAIN = struct.Struct(">i")
_chain_tables = None


def _chain_table() -> np.ndarray:
    """Per-byte contribution tables for the chain checksum of CHAIN_INPUT (24 bytes).

    crc32 is affine over GF(2) for inputs of one length: crc(m) = crc(0...0) ^ XOR_j T[j][m_j]
    with T[j][b] = crc(b at byte j, zeros elsewhere) ^ crc(0...0) (the constant cancels in
    pairs because 24 is even). This turns the chain check of a whole run into 24 table
    gathers instead of one crc32 call per entry."""
    global _chain_tables
    if _chain_tables is None:
        width = CHAIN_INPUT.size
        zero = crc32(bytes(width))
        table = np.zeros((width + 1, 256), dtype=np.uint32)
        probe = bytearray(width)
        for j in range(width):
            for b in range(256):
                probe[j] = b
                table[j, b] = crc32(probe) ^ zero
            probe[j] = 0
        table[width, 0] = zero  # row `width` holds the constant
        _chain_tables = table
    return _chain_tables


def chain_crcs(inputs: np.ndarray) -> np.ndarray:
    """crc32 of each row of an (n, 24) uint8 array, masked like chainCrc."""
    table = _chain_table()
    width = CHAIN_INPUT.size
    acc = np.full(len(inputs), table[width, 0], dtype=np.uint32)
    for j in range(width):
        acc ^= table[j][inputs[:, j]]
    return acc & np.uint32(CRC_MASK)


def _fast_run(scan: FileScan, index_files) -> Run | None:
    """Check up to RUN_MAX entries from the scan's cursor at once; None if not even one.

    Positions come from the index records; they are only trusted where the data agrees:
    the first one must be the cursor, each next one must be the previous one's end, and
    each header gathered there must equal its index record. So the walk is the same one
    the per-entry lane would make by following ``size`` fields."""
    buf = scan.buf
    off = scan._off
    if off >= scan.end or len(buf) - off < HEADER_SIZE:
        return None
    limit = RUN_MAX if scan._remaining is None else min(RUN_MAX, scan._remaining)
    if limit <= 0:
        return None
    if scan.prev_index is not None:
        first = scan.prev_index + 1
    else:
        first = ENTRY_HEADER.unpack_from(buf, off)[2]  # unknown predecessor: trust the header
    if first < 0:
        return None
    ifile = index_files.find(first * INDEX_UNIT_SIZE)
    if ifile is None or ifile.mm is None:
        return None
    r = first * INDEX_UNIT_SIZE - ifile.start
    n = min(limit, (ifile.actual_size - r) // INDEX_UNIT_SIZE)
    if n <= 0:
        return None
    base = scan.file_start
    if _lanes is not None:
        raw = np.empty((n, HEADER_SIZE), dtype=np.uint8)
        n = _lanes.run_headers(buf, off, scan.end, ifile.mm, r, n, first, base,
                               INT64_MIN if scan.prev_term is None else scan.prev_term, raw)
        raw = raw[:n]
    else:
        raw = _run_headers(scan, ifile, r, n, first, base, off)
        n = len(raw)
    if scan.release_pages:
        release_pages(ifile.mm, r, r + n * INDEX_UNIT_SIZE)
    if n == 0:
        return None
    hdr = raw.view(HEADER_DTYPE)[:, 0]
    term = hdr["term"]
    bcrc = hdr["bcrc"].astype(np.int64)
    chain = hdr["chain"].astype(np.int64)
    absent = (bcrc == 0) & (chain == 0)
    if scan.check_crc and not absent.all():
        rel = hdr["pos"].astype(np.int64) - base
        size = hdr["size"].astype(np.int64)
        ok = absent.copy()
        want = np.flatnonzero(~absent)
        data = memoryview(buf)
        try:
            starts = (rel[want] + HEADER_SIZE).tolist()
            ends = (rel[want] + size[want]).tolist()
            body = np.fromiter(map(crc32, map(data.__getitem__, map(slice, starts, ends))),
                               dtype=np.uint32, count=len(want))
        finally:
            data.release()
        good = (body & np.uint32(CRC_MASK)).astype(np.int64) == bcrc[want]
        # chain input: prevChainCrc, index, term, bodyCrc, as the stored fields' bytes
        inputs = np.empty((n, CHAIN_INPUT.size), dtype=np.uint8)
        inputs[1:, 0:4] = raw[:-1, 36:40]
        inputs[0, 0:4] = np.frombuffer(_PREV_CHAIN.pack(scan.prev_chain or 0), dtype=np.uint8)
        inputs[:, 4:20] = raw[:, 8:24]
        inputs[:, 20:24] = raw[:, 40:44]
        chain_ok = chain_crcs(inputs[want]).astype(np.int64) == chain[want]
        if len(want) and want[0] == 0 and scan.prev_chain is None and first != 0:
            chain_ok[0] = True  # the predecessor is unknown: its link cannot be checked
        ok[want] = good & chain_ok
        n = prefix_true(ok)
    if n == 0:
        return None
    last = n - 1
    end_rel = int(hdr["pos"][last]) - base + int(hdr["size"][last])
    crc_absent = int(absent[:n].sum())
    run = Run(base + off, base + end_rel, n, first, int(term[0]), first + last, int(term[last]),
              int(chain[last]), n - crc_absent, crc_absent, hdr[:n] if scan.run_headers else None)
    scan._off = end_rel
    scan.next_offset = base + end_rel
    scan.prev_index, scan.prev_term, scan.prev_chain = run.last_index, run.last_term, run.last_chain
    if scan._remaining is not None:
        scan._remaining -= n
    return run


def _run_headers(scan: FileScan, ifile, r: int, n: int, first: int, base: int, off: int) -> np.ndarray:
    """The run lane's framing checks with numpy (store._lanes.run_headers when built): the
    headers, (k, 48) bytes, of the longest prefix of the ``n`` index records from ``r`` that
    passes them."""
    buf = scan.buf
    buflen = len(buf)
    rec = np.frombuffer(ifile.mm, dtype=INDEX_DTYPE, count=n, offset=r)
    pos = rec["pos"].astype(np.int64)
    if pos[0] != base + off:
        return np.empty((0, HEADER_SIZE), dtype=np.uint8)
    rel = pos - base
    size = rec["size"].astype(np.int64)
    # Framing from the index records alone, so every gather below stays inside buf.
    ok = (size >= HEADER_SIZE) & (rel < scan.end) & (rel + size <= buflen)
    ok[1:] &= rel[1:] == rel[:-1] + size[:-1]
    ok &= rec["index"] == np.arange(first, first + n, dtype=np.int64)
    ok &= (rec["magic"] >= MAGIC_LOW) & (rec["magic"] <= MAGIC_HIGH)
    n = prefix_true(ok)
    if n == 0:
        return np.empty((0, HEADER_SIZE), dtype=np.uint8)
    rel, size = rel[:n], size[:n]
    raw = gather_headers(buf, rel)  # (n, 48) copies of the headers
    # Header == index record on (magic, size, index, term, pos), compared as 32-bit words:
    # both layouts are big-endian and 4-byte aligned, only the field order differs.
    words = np.frombuffer(ifile.mm, dtype=np.uint32, count=n * 8, offset=r).reshape(n, 8)
    ok = headers_equal_records(raw, words)
    hdr = raw.view(HEADER_DTYPE)[:, 0]
    term = hdr["term"].astype(np.int64)
    bsize = hdr["bsize"].astype(np.int64)
    ok &= (bsize >= 0) & (size == bsize + HEADER_SIZE)
    ok[1:] &= term[1:] >= term[:-1]
    if scan.prev_term is not None:
        ok[0] &= bool(term[0] >= scan.prev_term)
    return raw[:prefix_true(ok)]
