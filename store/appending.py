"""The file store's append path: a leader's bodies encoded and written, a follower's pushed
entries checked and written byte for byte, and a write that fails half-way put back.

:class:`Appender` is the part of :class:`~store.filestore.FileStore` that writes entries
at the log's end. It moves the end of the shared :class:`~store.extent.Extent` and hands
what a leader wrote to the read path (store/logreads.py) to serve its followers. Entries
that go to the same data file are encoded into one buffer and written with one copy, their
index records likewise. The compiled lanes (store/_lanes.c) encode and check entries when
built; else stretches of RUN_MIN or more entries go through the run lanes (store/batch.py)
and the rest through the Python per-entry lanes below, which are what the compiled ones do.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from .base import Appended, AppendedBatch, AppendedRun
from .batch import RUN_MIN, accept_pushed, encode_run, fit_in_file
from .errors import InconsistentAppend, PositionMismatch, StoreUsageError
from .extent import Extent
from .files import FileList, MappedFile
from .format import (BLANK_HEADER, BLANK_MAGIC, CHAIN_INPUT, CRC_MASK, ENTRY_HEADER, ENTRY_MAGICS, HEADER_SIZE,
                     INDEX_RECORD, INDEX_UNIT_SIZE, MIN_BLANK_LEN, chain_crc, crc32)
from .logreads import LogReader
from .packed import PackedBodies

try:  # the per-entry lanes, compiled (store/_lanes.c); the Python lanes below when not built
    from . import _lanes
except ImportError:  # pragma: no cover - an install without a C compiler
    _lanes = None

# The messages of the checks of check_entries (and of store._lanes.check_entries, which
# names its failures the same way), by name; the values follow the name in a failure.
_CHECK_FAILURES = {
    "trailing": "{} trailing bytes are not an entry header",
    "malformed": "malformed entry at byte {} of the batch (magic {}, size {})",
    "index": "entry index {} does not follow the local end {}",
    "term_low": "entry {} has term {} below the local last term {}",
    "term_high": "entry {} has term {} above the leader's term {}",
    "crc": "entry {}: body checksum does not match",
    "chain": "entry {}: chain checksum does not follow the entry before it",
    "too_big": "entry {} of {} bytes does not fit a {}-byte data file",
    "pos": "entry {} is at pos {}, the local log continues at {}",
}


def _check_failure(kind: str, *values) -> str:
    return _CHECK_FAILURES[kind].format(*values)


def _append_error(failed: tuple) -> InconsistentAppend:
    """The error of a failed check (a position that differs has its own, with the numbers)."""
    if failed[0] == "pos":
        return PositionMismatch(_check_failure(*failed), index=failed[1], pos=failed[2], expected=failed[3])
    return InconsistentAppend(_check_failure(*failed))


def _clear(files: FileList, start: int, end: int) -> None:
    """Zeros over logical [start, end), in the files that hold it, written with pwrite."""
    pos = start
    while pos < end:
        f = files.find(pos)
        if f is None:
            pos = (pos // files.file_size + 1) * files.file_size
            continue
        rel, hi = pos - f.start, min(end - f.start, f.actual_size)
        if hi > rel:
            files.write_at(f, rel, bytes(hi - rel))
        pos = f.start + f.size


def check_entries(buf, off: int, limit: int, idx: int, last_term: int, max_term: int | None,
                  write_pos: int, fsize: int, prev_chain: int | None = None) -> tuple:
    """Check at most ``limit`` pushed entries of ``buf`` from ``off`` against a log
    ending at ``idx`` / ``last_term`` / ``write_pos``, within one data file (the
    first may start the next file; a later one that does ends the run). Returns
    (stop, ends, terms, index records, last chain CRC, first pos, failure): each
    accepted entry's end offset from ``off`` and its term, and None or the check that
    failed, (name, values...), for :func:`_check_failure`. An entry that records
    checksums must carry the chain CRC that follows the entry before it (format.chain_crc):
    ``prev_chain``, the log's last chain, for the first (unchecked when None).
    store._lanes.check_entries does the same, compiled."""
    n = len(buf)
    unpack = ENTRY_HEADER.unpack_from
    pack_index = INDEX_RECORD.pack
    crc = crc32
    seg_off, first_pos, chain, failed = off, -1, None, None
    ends: list[int] = []
    terms: list[int] = []
    records: list[bytes] = []
    while off < n and len(ends) < limit:
        if n - off < HEADER_SIZE:
            failed = ("trailing", n - off)
            break
        magic, size, eidx, term, pos, _ch, echain, bcrc, bsize = unpack(buf, off)
        if magic not in ENTRY_MAGICS or bsize < 0 or size != HEADER_SIZE + bsize or off + size > n:
            failed = ("malformed", off, magic, size)
            break
        if eidx != idx + 1:
            failed = ("index", eidx, idx)
            break
        if term < last_term:
            failed = ("term_low", eidx, term, last_term)
            break
        if max_term is not None and term > max_term:
            failed = ("term_high", eidx, term, max_term)
            break
        if (bcrc or echain) and crc(buf[off + HEADER_SIZE : off + size]) & CRC_MASK != bcrc:
            failed = ("crc", eidx)
            break
        if (bcrc or echain) and prev_chain is not None and chain_crc(prev_chain, eidx, term, bcrc) != echain:
            failed = ("chain", eidx)
            break
        if size + MIN_BLANK_LEN > fsize:
            failed = ("too_big", eidx, size, fsize)
            break
        rel = write_pos % fsize
        expected = write_pos if size + MIN_BLANK_LEN <= fsize - rel else write_pos + fsize - rel
        if pos != expected:
            failed = ("pos", eidx, pos, expected)
            break
        if ends and pos != write_pos:
            break  # the next data file: a new run
        if not ends:
            first_pos = pos
        records.append(pack_index(magic, pos, size, eidx, term))
        ends.append(off + size - seg_off)
        terms.append(term)
        idx, last_term, write_pos, chain = eidx, term, pos + size, echain
        prev_chain = echain
        off += size
    return off, ends, terms, b"".join(records), chain, first_pos, failed


class Appender:
    """Writes entries at the end of the log of ``extent`` into ``data`` and ``index``.
    With ``sync`` (the store's flush policy "sync") each call that wrote ends with a
    flush of the data and index files; ``reads`` is told what a leader wrote, and that a follower's write or a put
    back changed the log under it."""

    def __init__(self, data: FileList, index: FileList, extent: Extent, reads: LogReader, *, with_crc: bool,
                 sync: bool) -> None:
        self.data = data
        self.index = index
        self.extent = extent
        self.reads = reads
        self.with_crc = with_crc
        self.sync = sync
        self._reached = self._index_reached = 0  # how far the call under way wrote (see undo)

    def _flush(self) -> None:
        self.data.flush()
        self.index.flush()

    # -- where entries go -------------------------------------------------------------
    def place(self, size: int) -> tuple[MappedFile, int]:
        """Where an entry of ``size`` bytes goes: (file, relative offset). Writes the BLANK
        padding and moves to the next file when the entry plus a BLANK header would not fit."""
        fsize = self.data.file_size
        if size + MIN_BLANK_LEN > fsize:
            raise StoreUsageError(f"entry of {size} bytes does not fit a {fsize}-byte data file")
        x = self.extent
        pos = x.write_pos
        rel = pos % fsize
        if size + MIN_BLANK_LEN > fsize - rel:
            f = self.data.file_for_write(pos)
            self._reached = max(self._reached, pos + BLANK_HEADER.size)
            self.data.write_at(f, rel, BLANK_HEADER.pack(BLANK_MAGIC, fsize - rel))
            pos += fsize - rel
            x.write_pos = pos
            rel = 0
        return self.data.file_for_write(pos), rel

    # -- putting back a write that failed half-way ------------------------------------
    def undo_point(self) -> tuple:
        x = self.extent
        self._reached, self._index_reached = x.write_pos, (x.end_index + 1) * INDEX_UNIT_SIZE
        return (x.begin_index, x.end_index, x.end_term, x.write_pos, x.last_chain, len(self.data.files),
                len(self.index.files))

    def undo(self, point: tuple) -> None:
        """Put the log back as it was at ``point`` after a write failed part-way (a full
        disk when a new file is needed, ...): the bytes written since are zeroed, so no
        refused entry can come back when the store is opened again, and the files created
        since are removed. The zeros go where bytes were written, so they need no new
        blocks."""
        *mark, ndata, nindex = point
        _begin, end, _end_term, pos, _chain = mark
        self.reads.forget()
        _clear(self.data, pos, max(self.extent.write_pos, self._reached))
        _clear(self.index, (end + 1) * INDEX_UNIT_SIZE, self._index_reached)
        if len(self.data.files) > ndata:
            self.data.remove_from(self.data.files[ndata].start)
        if len(self.index.files) > nindex:
            self.index.remove_from(self.index.files[nindex].start)
        self.extent.restore(mark)

    # -- a leader's bodies ------------------------------------------------------------
    def append_leader(self, bodies: Sequence[bytes], term: int, magic: int) -> Sequence[Appended]:
        x = self.extent
        if term < x.end_term:
            raise StoreUsageError(f"term {term} is lower than the log's last term {x.end_term}")
        if magic not in ENTRY_MAGICS:
            raise StoreUsageError(f"magic {magic} is not an entry magic")
        # Refuse the whole batch before writing any of it: a batch is appended entirely or not at all.
        if isinstance(bodies, PackedBodies):
            largest = bodies.largest
            if _lanes is None:
                bodies = list(bodies)  # (the Python lanes take a list of views)
        else:
            largest = max(map(len, bodies), default=0)
        if HEADER_SIZE + largest + MIN_BLANK_LEN > self.data.file_size:
            raise StoreUsageError(f"entry of {HEADER_SIZE + largest} bytes does not fit a {self.data.file_size}-byte data file")
        undo = self.undo_point()
        try:
            parts = self._leader_write(bodies, term, magic)
        except BaseException:
            self.undo(undo)  # a full disk half-way: the batch is not appended at all
            raise
        if self.sync:
            self._flush()
        return parts[0] if len(parts) == 1 else AppendedBatch.of(parts)

    def _leader_write(self, bodies: Sequence[bytes], term: int, magic: int) -> list[Sequence[Appended]]:
        # Entries that go to the same data file are encoded into one buffer and written
        # with one copy; their index records likewise. The compiled lane (store/_lanes.c)
        # encodes them when it is built; else stretches of RUN_MIN or more entries are
        # encoded by the run lane (store/batch.py), the rest one by one in Python.
        parts: list[Sequence[Appended]] = []
        x = self.extent
        fsize = self.data.file_size
        nbodies = len(bodies)
        sizes = None
        i = 0
        while i < nbodies:
            dfile, seg_rel = self.place(HEADER_SIZE + len(bodies[i]))  # writes the BLANK padding if the file is full
            room = fsize - seg_rel
            if nbodies - i >= RUN_MIN and _lanes is None:  # (the compiled lane is faster at any length)
                if sizes is None:
                    sizes = np.fromiter(map(len, bodies), dtype=np.int64, count=nbodies) + HEADER_SIZE
                k = fit_in_file(sizes[i:], room)
                if k >= RUN_MIN:
                    pos, first = x.write_pos, x.end_index + 1
                    seg, records, run_sizes, chain = encode_run(bodies[i:i + k], first, term, magic, pos,
                                                                x.last_chain, self.with_crc)
                    self._write_segment(dfile, seg_rel, seg, first, records, first + k - 1, term, chain)
                    self.reads.remember(first, list(itertools.accumulate(run_sizes.tolist())), seg)
                    starts = np.empty(k, dtype=np.int64)
                    starts[0] = pos
                    np.cumsum(run_sizes[:-1], out=starts[1:])
                    starts[1:] += pos
                    parts.append(AppendedBatch(np.arange(first, first + k, dtype=np.int64),
                                               np.full(k, term, dtype=np.int64), starts, run_sizes))
                    i += k
                    continue
            i = self._append_entries(bodies, i, term, magic, dfile, seg_rel, parts)
        return parts

    def _append_entries(self, bodies, i: int, term: int, magic: int, dfile: MappedFile, seg_rel: int,
                        parts: list) -> int:
        """The per-entry lane of append_leader: bodies from ``i`` on, as far as the data file
        that holds ``seg_rel`` has room; returns the index of the first body not written.
        Compiled when store._lanes is built (the loop below is what it does)."""
        x = self.extent
        if _lanes is not None:
            pos, first = x.write_pos, x.end_index + 1
            if isinstance(bodies, PackedBodies):
                encode, bodies = _lanes.encode_packed, bodies.runs
            else:
                encode = _lanes.encode_entries
            seg, records, ends, i, chain = encode(
                bodies, i, first, term, magic, pos, x.last_chain, self.with_crc, self.data.file_size - seg_rel)
            self._write_segment(dfile, seg_rel, seg, first, records, first + len(ends) - 1, term, chain)
            self.reads.remember(first, ends, seg)
            parts.append(AppendedRun(first, pos, ends, term))
            return i
        out: list[Appended] = []
        pack_header = ENTRY_HEADER.pack
        pack_index = INDEX_RECORD.pack
        chain_pack = CHAIN_INPUT.pack
        crc = crc32
        with_crc = self.with_crc
        pos = x.write_pos
        room = self.data.file_size - seg_rel
        first_idx = idx = x.end_index + 1
        chain = x.last_chain
        seg = bytearray()
        records = []
        used = 0
        nbodies = len(bodies)
        while i < nbodies:
            body = bodies[i]
            size = HEADER_SIZE + len(body)
            if used and size + MIN_BLANK_LEN > room - used:
                break  # the next data file
            if with_crc:
                bcrc = crc(body) & CRC_MASK
                chain = crc(chain_pack(chain, idx, term, bcrc)) & CRC_MASK
            else:
                bcrc = chain = 0
            seg += pack_header(magic, size, idx, term, pos + used, 0, chain, bcrc, size - HEADER_SIZE)
            seg += body
            records.append(pack_index(magic, pos + used, size, idx, term))
            out.append(Appended(idx, term, pos + used, size))
            used += size
            idx += 1
            i += 1
        self._write_segment(dfile, seg_rel, seg, first_idx, b"".join(records), idx - 1, term, chain)
        self.reads.remember(first_idx, list(itertools.accumulate(a.size for a in out)), seg)
        parts.append(out)
        return i

    def _write_segment(self, dfile: MappedFile, seg_rel: int, seg, first: int, records: bytes, last: int,
                       last_term: int, last_chain: int) -> None:
        """Copy encoded entries ``first..last`` into ``dfile`` at ``seg_rel`` (the log's
        end), their index records after the index's end, and move the end."""
        used = len(seg)
        self._reached = max(self._reached, dfile.start + seg_rel + used)
        self.data.write_at(dfile, seg_rel, seg)
        self._write_index_records(first, records)
        x = self.extent
        x.write_pos = dfile.start + seg_rel + used
        x.end_index, x.end_term, x.last_chain = last, last_term, last_chain
        if x.begin_index < 0:
            x.begin_index = first

    def _write_index_records(self, first: int, data: bytes) -> None:
        off, done = first * INDEX_UNIT_SIZE, 0
        self._index_reached = max(self._index_reached, off + len(data))
        while done < len(data):
            f = self.index.file_for_write(off)
            rel = off - f.start
            k = min(len(data) - done, f.size - rel)
            self.index.write_at(f, rel, data[done : done + k] if k < len(data) else data)
            off += k
            done += k

    # -- a follower's pushed entries --------------------------------------------------
    def append_follower(self, raw, max_term: int | None) -> Sequence[Appended]:
        """Store entries encoded by the leader, byte for byte, at the leader's positions.

        Entries are checked (framing, index continuity, term order and at most
        ``max_term``, body checksum when recorded, pos); the ones that go to the same data
        file are then written with one copy, and their index records with one more. The
        compiled per-entry lane (store/_lanes.c) checks them when it is built; else long
        stretches are checked by the run lane (store/batch.py), which only accepts, and
        the Python per-entry lane judges the rest. When an entry fails a check, the ones before it
        are kept and InconsistentAppend is raised. When a write fails (StoreIOError: a full
        disk, ...), nothing of the call is kept."""
        self.reads.forget()
        x = self.extent
        buf = memoryview(raw)
        n = len(buf)
        off = 0
        parts: list[Sequence[Appended]] = []
        error: InconsistentAppend | None = None
        fsize = self.data.file_size
        undo = self.undo_point()
        try:
            while off < n and error is None:
                if _lanes is not None:  # the compiled lane is faster than the run lane at any length
                    off, error = self._follow_entries(buf, off, n, max_term, parts)
                    continue
                run = accept_pushed(buf, off, n, end_index=x.end_index, end_term=x.end_term,
                                    write_pos=x.write_pos, file_size=fsize, max_term=max_term,
                                    prev_chain=self._prev_chain())
                if run is not None:
                    dfile, seg_rel = self.place(int(run.size[0]))
                    self._write_segment(dfile, seg_rel, buf[off : off + run.nbytes], x.end_index + 1,
                                        run.index_records(), int(run.index[-1]), int(run.term[-1]),
                                        run.last_chain)
                    parts.append(AppendedBatch(run.index, run.term, run.pos, run.size))
                    off += run.nbytes
                    continue
                off, error = self._follow_entries(buf, off, RUN_MIN, max_term, parts)
        except BaseException:
            self.undo(undo)
            raise
        finally:
            buf.release()
        if self.sync and parts:
            self._flush()
        if error is not None:
            raise error
        return parts[0] if len(parts) == 1 else AppendedBatch.of(parts)

    def _prev_chain(self) -> int | None:
        """The chain CRC the next pushed entry must follow: the last entry's; None (not
        checked) when the log is empty, as after a reset to a leader's first entry, whose
        predecessor this log never held."""
        x = self.extent
        return x.last_chain if x.end_index >= x.begin_index >= 0 else None

    def _follow_entries(self, buf, off: int, limit: int, max_term: int | None,
                        parts: list) -> tuple[int, InconsistentAppend | None]:
        """The per-entry lane of append_follower: at most ``limit`` entries from ``off``,
        within one data file. Returns where it stopped and the error that stopped it.
        Compiled when store._lanes is built (:func:`check_entries` is what it does)."""
        x = self.extent
        first = x.end_index + 1
        check = _lanes.check_entries if _lanes is not None else check_entries
        stop, ends, terms, records, chain, first_pos, failed = check(
            buf, off, limit, x.end_index, x.end_term, max_term, x.write_pos, self.data.file_size, self._prev_chain())
        if ends:
            dfile, seg_rel = self.place(ends[0])  # writes the BLANK padding if the file is full
            self._write_segment(dfile, seg_rel, buf[off:stop], first, records, first + len(ends) - 1, terms[-1],
                                chain)
            parts.append(AppendedRun(first, first_pos, ends, terms))
        return stop, None if failed is None else _append_error(failed)
