"""Run lanes of the write and replication paths: batches of entries encoded, located and
checked with numpy instead of one ``struct`` call per entry.

Everything here speeds up work a per-entry lane in :mod:`store.appending` also does, and
follows the rules of :mod:`store.scan`'s run lane:

- :func:`encode_run` produces exactly the bytes :func:`store.format.encode_entry` gives
  for each entry in turn (the tests compare them).
- The checking functions only ever *accept*: each returns the length of the longest
  prefix the per-entry lane would accept as well. The entry after that prefix goes to the
  per-entry lane, which alone decides what is wrong with it and says so.
- Nothing here reads outside the buffer it is given or raises on any byte content.

Small batches do not pay for numpy's fixed costs: callers use these lanes from
``RUN_MIN`` entries on.
"""

from __future__ import annotations

import struct

import numpy as np

from .format import (CHAIN_INPUT, CRC_MASK, ENTRY_MAGICS, HEADER_SIZE, INDEX_UNIT_SIZE, MIN_BLANK_LEN, chain_crc,
                     crc32)

RUN_MIN = 128  # entries: below this the per-entry lanes are as fast (numpy costs ~60 us a call)

INDEX_DTYPE = np.dtype([("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8")])
assert INDEX_DTYPE.itemsize == INDEX_UNIT_SIZE
HEADER_DTYPE = np.dtype([
    ("magic", ">i4"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8"), ("pos", ">i8"),
    ("channel", ">i4"), ("chain", ">i4"), ("bcrc", ">i4"), ("bsize", ">i4"),
])
assert HEADER_DTYPE.itemsize == HEADER_SIZE
MAGIC_LOW, MAGIC_HIGH = min(ENTRY_MAGICS), max(ENTRY_MAGICS)
assert set(ENTRY_MAGICS) == set(range(MAGIC_LOW, MAGIC_HIGH + 1))  # so a range check is a membership check
# 32-bit words of an index record (magic, pos:2, size, index:2, term:2) picked in the order
# of the header's first 8 words (magic, size, index:2, term:2, pos:2)
RECORD_TO_HEADER_WORDS = np.array([0, 3, 4, 5, 6, 7, 1, 2])
_SIZE_FIELD = struct.Struct(">i")  # an entry's size, 4 bytes into its header


def prefix_true(ok: np.ndarray) -> int:
    """Length of the leading run of True."""
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else len(ok)


def gather_headers(buf, offsets: np.ndarray) -> np.ndarray:
    """(n, 48) uint8 copies of the headers at ``offsets`` in ``buf``; every offset must
    leave a whole header inside ``buf`` (callers check)."""
    n = len(buf)
    if n < HEADER_SIZE:
        return np.empty((0, HEADER_SIZE), dtype=np.uint8)
    # every 48-byte window of buf, without copying (a read-only strided view)
    window = np.ndarray((n - HEADER_SIZE + 1, HEADER_SIZE), dtype=np.uint8, buffer=buf, strides=(1, 1))
    return window[offsets]


def headers_equal_records(raw: np.ndarray, records_u32: np.ndarray) -> np.ndarray:
    """Row-wise: does each gathered header (n, 48 bytes) say the same (magic, size, index,
    term, pos) as its index record ((n, 8) 32-bit words)? Both layouts are big-endian and
    4-byte aligned, only the field order differs, so words compare directly."""
    return (raw.view(np.uint32)[:, :8] == records_u32[:, RECORD_TO_HEADER_WORDS]).all(axis=1)


def walk_sizes(buf, start: int, end: int, limit: int) -> list[int]:
    """Offsets of at most ``limit`` entries laid end to end in ``buf[start:end]``, found by
    following their size fields; stops before the first whose header or claimed size does
    not fit (that one is the per-entry lane's to judge)."""
    offsets = []
    append = offsets.append
    off = start
    last = end - HEADER_SIZE
    unpack = _SIZE_FIELD.unpack_from
    for _ in range(limit):
        if off > last:
            break
        (size,) = unpack(buf, off + 4)
        if size < HEADER_SIZE or off + size > end:
            break
        append(off)
        off += size
    return offsets


def chain_crcs_after(prev_chain: int, first_index: int, term: int, body_crcs) -> list[int]:
    """The chainCrc of consecutive entries of one term (format.py's rule), each linked to
    the one before; ``prev_chain`` is the entry before the first one's."""
    out = []
    pack, crc, mask = CHAIN_INPUT.pack, crc32, CRC_MASK
    chain = prev_chain
    for idx, bcrc in enumerate(body_crcs, first_index):
        chain = crc(pack(chain, idx, term, bcrc)) & mask
        out.append(chain)
    return out


def fit_in_file(sizes: np.ndarray, room: int) -> int:
    """How many of these entries (sizes, in order) fit ``room`` bytes of a data file, each
    leaving room for a BLANK header after it (DLedger's rule); at least the first one,
    which the caller has placed already."""
    ends = np.cumsum(sizes)
    return max(1, int(np.searchsorted(ends, room - MIN_BLANK_LEN, side="right")))


def encode_run(bodies, first_index: int, term: int, magic: int, pos: int, prev_chain: int,
               with_crc: bool) -> tuple[bytes, bytes, np.ndarray, int]:
    """Encode entries laid end to end from logical offset ``pos`` (all in one data file).

    Returns (entry bytes, index records, sizes, last chainCrc)."""
    n = len(bodies)
    hdr = np.zeros(n, dtype=HEADER_DTYPE)
    bsize = np.fromiter(map(len, bodies), dtype=np.int64, count=n)
    sizes = bsize + HEADER_SIZE
    starts = np.empty(n, dtype=np.int64)
    starts[0] = pos
    np.cumsum(sizes[:-1], out=starts[1:])
    starts[1:] += pos
    index = np.arange(first_index, first_index + n, dtype=np.int64)
    hdr["magic"], hdr["size"], hdr["index"], hdr["term"], hdr["pos"] = magic, sizes, index, term, starts
    hdr["bsize"] = bsize
    last_chain = prev_chain
    if with_crc:
        bcrc = [c & CRC_MASK for c in map(crc32, bodies)]
        chains = chain_crcs_after(prev_chain, first_index, term, bcrc)
        hdr["bcrc"], hdr["chain"] = bcrc, chains
        last_chain = chains[-1]
    else:
        last_chain = 0
    rec = np.empty(n, dtype=INDEX_DTYPE)
    rec["magic"], rec["pos"], rec["size"], rec["index"], rec["term"] = magic, starts, sizes, index, term
    hb = hdr.tobytes()
    parts = [None] * (2 * n)
    parts[0::2] = [hb[k : k + HEADER_SIZE] for k in range(0, n * HEADER_SIZE, HEADER_SIZE)]  # (3x faster than views)
    parts[1::2] = bodies
    return b"".join(parts), rec.tobytes(), sizes, last_chain


class PushedRun:
    """Entries of a follower batch accepted by :func:`accept_pushed`: ``count`` entries in
    ``nbytes`` bytes, with their header fields as arrays."""

    __slots__ = ("count", "nbytes", "index", "term", "pos", "size", "magic", "last_chain")

    def __init__(self, hdr: np.ndarray, count: int, nbytes: int) -> None:
        h = hdr[:count]
        self.count, self.nbytes = count, nbytes
        self.index = h["index"].astype(np.int64)
        self.term = h["term"].astype(np.int64)
        self.pos = h["pos"].astype(np.int64)
        self.size = h["size"].astype(np.int64)
        self.magic = h["magic"].astype(np.int32)
        self.last_chain = int(h["chain"][count - 1]) if count else 0

    def index_records(self) -> bytes:
        rec = np.empty(self.count, dtype=INDEX_DTYPE)
        rec["magic"], rec["pos"], rec["size"], rec["index"], rec["term"] = (
            self.magic, self.pos, self.size, self.index, self.term)
        return rec.tobytes()


def accept_pushed(buf, start: int, end: int, *, end_index: int, end_term: int, write_pos: int,
                  file_size: int, max_term: int | None, check_crc: bool = True,
                  limit: int = 1 << 16, prev_chain: int | None = None) -> PushedRun | None:
    """The longest prefix of the leader-encoded entries in ``buf[start:end]`` that the
    follower's per-entry lane would store, stopping where the data file ends (the entry
    that starts the next file goes through the per-entry lane, which writes the BLANK).

    Checks, as the per-entry lane: framing (magic, size == 48 + bodySize, inside the
    buffer), index continuing ``end_index``, terms not below ``end_term`` nor above
    ``max_term`` and never going back, ``pos`` continuing ``write_pos`` within the current
    file, and where checksums are recorded the body checksum and the chain CRC following the
    entry before (``prev_chain``, the log's last chain, for the first; unchecked when None).
    None when the walk finds fewer than ``RUN_MIN`` entries or the first one is refused."""
    offsets = walk_sizes(buf, start, end, limit)
    if len(offsets) < RUN_MIN:
        return None
    off = np.asarray(offsets, dtype=np.int64)
    raw = gather_headers(buf, off)
    hdr = raw.view(HEADER_DTYPE)[:, 0]
    n = len(off)
    size = hdr["size"].astype(np.int64)
    bsize = hdr["bsize"].astype(np.int64)
    term = hdr["term"].astype(np.int64)
    pos = hdr["pos"].astype(np.int64)
    magic = hdr["magic"]
    ok = (magic >= MAGIC_LOW) & (magic <= MAGIC_HIGH) & (bsize >= 0) & (size == bsize + HEADER_SIZE)
    ok &= hdr["index"] == np.arange(end_index + 1, end_index + 1 + n, dtype=np.int64)
    ok[0] &= bool(term[0] >= end_term)
    ok[1:] &= term[1:] >= term[:-1]
    if max_term is not None:
        ok &= term <= max_term
    # positions: laid end to end from write_pos, all inside the current data file, each
    # leaving room for a BLANK header behind it
    rel0 = write_pos % file_size
    expect = write_pos + (off - start)
    ok &= pos == expect
    ok &= (rel0 + (off - start) + size + MIN_BLANK_LEN) <= file_size
    count = prefix_true(ok)
    if count and check_crc:
        bcrc = hdr["bcrc"][:count].astype(np.int64)
        recorded = (bcrc != 0) | (hdr["chain"][:count] != 0)
        want = np.flatnonzero(recorded)
        if len(want):
            data = memoryview(buf)
            try:
                b0 = (off[want] + HEADER_SIZE).tolist()
                b1 = (off[want] + size[want]).tolist()
                got = np.fromiter(map(crc32, map(data.__getitem__, map(slice, b0, b1))), dtype=np.uint32,
                                  count=len(want))
            finally:
                data.release()
            good = np.ones(count, dtype=bool)
            good[want] = (got & np.uint32(CRC_MASK)).astype(np.int64) == bcrc[want]
            chain = hdr["chain"][:count].astype(np.int64)
            prev = np.concatenate(([prev_chain if prev_chain is not None else 0], chain[:-1]))
            if prev_chain is None:
                want = want[want > 0]
            follows = np.fromiter(map(chain_crc, prev[want].tolist(), hdr["index"][want].tolist(),
                                      term[want].tolist(), bcrc[want].tolist()), dtype=np.int64, count=len(want))
            good[want] &= follows == chain[want]
            count = prefix_true(good)
    if count == 0:
        return None
    nbytes = int(off[count - 1] + size[count - 1] - start)
    return PushedRun(hdr, count, nbytes)
