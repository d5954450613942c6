"""One data file as Arrow record batches: what a Spark task of the ``dledger`` source runs.

No Spark here (pyarrow, numpy and the store only), so the reader can be tested and timed
without a JVM. Entries are decoded by the store's one decoder, :class:`store.scan.FileScan`:
healthy stretches come from its run lane (``walk``) as header arrays and become columns
without a Python loop; everything the run lane hands back (damage, the end of the data)
comes from its per-entry lane, one :class:`~store.scan.Scanned` at a time. Nothing here
parses entry bytes itself.

Two shapes: a row per entry (the default; ``records=all`` adds a row per file saying where
its entries end), or ``records=runs``, a row per healthy stretch as the run lane sees it
(see :class:`_RunRows`), which is what the audit and stats jobs read. The options and the
columns of each shape are options.py's.

Contracts:

- Read-only: files are mapped read-only, nothing is written, no recovery is applied.
- Memory: one task holds at most one batch being built (``batch_rows`` rows and, with
  bodies, about ``batch_bytes`` bytes of them) plus the pages of the mapped files it is
  reading; pages behind the scan are released (``release_pages``), so a task's memory is
  bounded by its file's batches, not by the size of the file or the store.
- Each file is scanned on its own. The first entry of a file is judged against the last
  entry of the previous file when the index locates that entry and it ends the previous
  file cleanly (:func:`file_predecessor`); otherwise its index, term and chain link are
  not checked against a predecessor, exactly as ``store verify`` does after damage.
- Row order within a file is log order (by ``pos``); with ``records=runs``, the rows
  that count problem entries and the stop row come last.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa

from store.errors import StoreIOError
from store.files import MappedFile
from store.format import HEADER_SIZE, INDEX_RECORD, INDEX_UNIT_SIZE, MAGIC_NOOP, crc32
from store.layout import NodeLayout
from store.reading import LazyFileList
from store.recovery import read_index_record
from store.scan import BAD_BODY_CRC, BAD_CHAIN_CRC, NO_CRC, OK, STOP_BLANK, STOP_LIMIT, FileScan, Run, Scanned

from .mqcolumns import message_arrays
from .options import (IDX_OK, INDEX_PROBLEM_CODES, INDEX_RECORD_STATES, KIND_ENTRY, KIND_PROBLEMS, KIND_RUN, KIND_STOP,
                      RECORDS_ALL, RECORDS_RUNS, RUN_COLUMNS, STATUSES, FilePart, ReadOptions)

_STATUS_CODE = {s: i for i, s in enumerate(STATUSES)}
_STATUS_ARRAY = pa.array(STATUSES, pa.string())
_INDEX_STATE_ARRAY = pa.array(INDEX_RECORD_STATES, pa.string())

# --- predecessor of a file -----------------------------------------------------------------

UNKNOWN = (None, None, None)


def file_predecessor(data, index, f: MappedFile) -> tuple:
    """(index, term, chainCrc) of the entry before data file ``f``'s first entry, or three
    Nones when it cannot be told from the files without walking the previous file.

    The index record of (first index - 1) must point into the previous (adjacent) file,
    the entry there must equal that record, and the previous file must end cleanly right
    after it (BLANK padding, zeros, or its end). Reads a few hundred bytes. ``data`` is a
    FileList (a LazyFileList maps what it reads), ``f`` one of its files, already mapped."""
    files = data.files
    i = next((k for k, g in enumerate(files) if g is f), None)
    if not i:
        return UNKNOWN
    prev = files[i - 1]
    if prev.start + data.file_size != f.start:
        return UNKNOWN
    head = next(iter(FileScan(f.view(), f.start, file_size=data.file_size, max_entries=1, check_crc=False)), None)
    if head is None or head.index <= 0:
        return UNKNOWN
    rec = read_index_record(index, head.index - 1)
    if rec is None or rec.index != head.index - 1 or not prev.start <= rec.pos < prev.start + prev.actual_size:
        return UNKNOWN
    if isinstance(data, LazyFileList):
        data.mapped(prev)
    scan = FileScan(prev.view(), prev.start, start=rec.pos - prev.start, file_size=data.file_size,
                    max_entries=2, check_crc=False)
    got = list(scan)
    if len(got) != 1 or scan.stop is None or not scan.stop.clean or scan.stop.reason == STOP_LIMIT:
        return UNKNOWN
    g = got[0]
    if (g.magic, g.pos, g.size, g.index, g.term) != tuple(rec):
        return UNKNOWN
    return g.index, g.term, g.chain_crc


def index_record_state(index, e: Scanned) -> int:
    """Position in INDEX_RECORD_STATES of what entry ``e``'s index record says (the same
    comparison ``store verify`` makes)."""
    if e.index < 0:
        return 1
    off = e.index * INDEX_UNIT_SIZE
    f = index.find(off)
    if f is None or f.mm is None or off - f.start + INDEX_UNIT_SIZE > f.actual_size:
        return 1
    r = off - f.start
    rec = f.mm[r : r + INDEX_UNIT_SIZE]
    if rec == INDEX_RECORD.pack(e.magic, e.pos, e.size, e.index, e.term):
        return 0
    return 2 if rec.count(0) == INDEX_UNIT_SIZE else 3


# --- building batches ------------------------------------------------------------------------

def const_strings(value: str, n: int) -> pa.Array:
    """A string array of ``n`` copies of ``value``, built from buffers (no Python loop)."""
    raw = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def bodies_array(buf, rel: np.ndarray, size: np.ndarray, header: int = HEADER_SIZE) -> pa.Array:
    """Binary array of the bodies of the entries at relative offsets ``rel`` (sizes ``size``,
    ``header`` bytes of them before the body), copied out of ``buf`` in one gather when they
    are contiguous (a run)."""
    n = len(rel)
    lens = size - header
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lens, out=offsets[1:])
    if n == 0:
        return pa.array([], pa.binary())
    lo, hi = int(rel[0]), int(rel[-1] + size[-1])
    u8 = np.frombuffer(buf, dtype=np.uint8, count=hi - lo, offset=lo)
    if hi - lo == int(size.sum()):  # back to back: drop the headers with one mask
        keep = np.ones(hi - lo, dtype=bool)
        keep[((rel - lo)[:, None] + np.arange(header)).ravel()] = False
        values = u8[keep]
    else:
        values = np.concatenate([u8[s - lo + header : s - lo + z] for s, z in zip(rel.tolist(), size.tolist())])
    del u8
    return pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(values)])


def digests(buf, rel: np.ndarray, size: np.ndarray, header: int = HEADER_SIZE) -> np.ndarray:
    """crc32 of each body (not masked; ``header`` bytes of each entry before it), as int64."""
    data = memoryview(buf)
    try:
        starts = (rel + header).tolist()
        ends = (rel + size).tolist()
        return np.fromiter(map(crc32, map(data.__getitem__, map(slice, starts, ends))), dtype=np.int64,
                           count=len(starts))
    finally:
        data.release()


@dataclass
class _Pending:
    """Entries from the per-entry lane, gathered until they make a batch segment."""

    pos: list = field(default_factory=list)
    index: list = field(default_factory=list)
    term: list = field(default_factory=list)
    magic: list = field(default_factory=list)
    size: list = field(default_factory=list)
    body_crc: list = field(default_factory=list)
    chain_crc: list = field(default_factory=list)
    crc_ok: list = field(default_factory=list)
    status: list = field(default_factory=list)
    index_record: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.pos)


class _Batcher:
    """Joins segments into batches of at most ``batch_rows`` rows and, with bodies, about
    ``batch_bytes`` body bytes (a segment is never split here; it is made small enough)."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.held: list[pa.RecordBatch] = []
        self.rows = 0
        self.bytes = 0

    def _size(self, seg: pa.RecordBatch) -> int:
        return seg.column(seg.num_columns - 1).nbytes if self.opts.body else 0

    def push(self, seg: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        size = self._size(seg)
        if self.held and (self.rows + seg.num_rows > self.opts.batch_rows
                          or self.bytes + size > self.opts.batch_bytes):
            yield from self.flush()
        self.held.append(seg)
        self.rows += seg.num_rows
        self.bytes += size
        if self.rows >= self.opts.batch_rows or self.bytes >= self.opts.batch_bytes:
            yield from self.flush()

    def flush(self) -> Iterator[pa.RecordBatch]:
        if self.held:
            held, self.held, self.rows, self.bytes = self.held, [], 0, 0
            yield held[0] if len(held) == 1 else pa.concat_batches(held)


class FileReader:
    """Reads one data file (a :class:`FilePart`) into Arrow record batches."""

    def __init__(self, part: FilePart, opts: ReadOptions) -> None:
        self.part = part
        self.opts = opts
        self.schema = opts.arrow_schema()
        self.stop = None  # the scan's ScanStop once read() is exhausted

    def read(self) -> Iterator[pa.RecordBatch]:
        part = self.part
        layout = NodeLayout(part.node_dir)
        data = LazyFileList(layout.data_dir, part.data_file_size)
        index = LazyFileList(layout.index_dir, part.index_file_size)
        try:
            data.load()
            index.load()
            f = next((g for g in data.files if g.start == part.file_start), None)
            if f is None:
                raise StoreIOError(f"{part.node_dir}/{part.file}: no such data file (removed after the job was planned?)")
            data.mapped(f)
            prev = file_predecessor(data, index, f)
            if self.opts.records == RECORDS_RUNS:
                yield from _RunRows(self, f, index, prev).batches()
            else:
                yield from self._scan(f, index, prev)
        finally:
            data.close()
            index.close()

    def _scan(self, f: MappedFile, index, prev) -> Iterator[pa.RecordBatch]:
        opts = self.opts
        scan = FileScan(f.view(), f.start, file_size=self.part.data_file_size, check_crc=opts.check_crc,
                        prev_index=prev[0], prev_term=prev[1], prev_chain=prev[2], release_pages=True,
                        run_headers=True)
        out = _Batcher(opts)
        pending = _Pending()
        buf = f.view()
        for e in scan.walk(index):
            if type(e) is Run:
                if pending:
                    yield from out.push(self._pending_batch(buf, f, pending))
                    pending = _Pending()
                for seg in self._run_batches(buf, f, e):
                    yield from out.push(seg)
            else:
                self._add_scanned(pending, index, e)
                if len(pending) >= opts.batch_rows:
                    yield from out.push(self._pending_batch(buf, f, pending))
                    pending = _Pending()
        if pending:
            yield from out.push(self._pending_batch(buf, f, pending))
        self.stop = scan.stop
        if opts.records == RECORDS_ALL and scan.stop is not None:
            yield from out.push(self._stop_batch(f, scan.stop))
        yield from out.flush()

    # -- segments ------------------------------------------------------------------------
    def _finish(self, n: int, cols: dict, f: MappedFile, buf, rel, size) -> pa.RecordBatch:
        part = self.part
        cols["node"] = const_strings(part.node, n)
        cols["file"] = const_strings(part.file, n)
        if self.opts.records == RECORDS_ALL:
            cols.setdefault("kind", const_strings(KIND_ENTRY, n))
            cols.setdefault("detail", pa.nulls(n, pa.string()))
        if self.opts.digest and "body_digest" not in cols:
            cols["body_digest"] = pa.array(digests(buf, rel, size), pa.int64())
        if self.opts.body and "body" not in cols:
            cols["body"] = bodies_array(buf, rel, size)
        if self.opts.rocketmq and "topic" not in cols:
            cols.update(message_arrays(buf, rel, size, cols["magic"], n, self.opts.body,
                                       self.opts.max_body))
        return pa.RecordBatch.from_arrays([cols[name] for name in self.schema.names], schema=self.schema)

    def _run_batches(self, buf, f: MappedFile, run: Run) -> Iterator[pa.RecordBatch]:
        hdr = run.headers
        step = self.opts.batch_rows
        if self.opts.body:  # keep each batch's bodies near batch_bytes
            mean = max(1, run.nbytes // max(run.count, 1))
            step = max(1, min(step, self.opts.batch_bytes // mean))
        for lo in range(0, run.count, step):
            h = hdr[lo : lo + step]
            n = len(h)
            pos = h["pos"].astype(np.int64)
            size = h["size"].astype(np.int32)
            bcrc = h["bcrc"].astype(np.int32)
            chain = h["chain"].astype(np.int32)
            absent = (bcrc == 0) & (chain == 0)
            if self.opts.check_crc:
                crc_ok = pa.array(np.ones(n, dtype=bool), mask=absent)
            else:
                crc_ok = pa.nulls(n, pa.bool_())
            cols = {
                "pos": pa.array(pos), "index": pa.array(h["index"].astype(np.int64)),
                "term": pa.array(h["term"].astype(np.int64)), "magic": pa.array(h["magic"].astype(np.int32)),
                "size": pa.array(size), "body_crc": pa.array(bcrc), "chain_crc": pa.array(chain), "crc_ok": crc_ok,
                "status": _STATUS_ARRAY.take(pa.array(absent.view(np.int8))),
                "index_record": const_strings(IDX_OK, n),
            }
            yield self._finish(n, cols, f, buf, pos - f.start, size.astype(np.int64))

    def _add_scanned(self, p: _Pending, index, e: Scanned) -> None:
        p.pos.append(e.offset)
        p.index.append(e.index)
        p.term.append(e.term)
        p.magic.append(e.magic)
        p.size.append(e.size)
        p.body_crc.append(e.body_crc)
        p.chain_crc.append(e.chain_crc)
        st = e.status
        p.status.append(_STATUS_CODE[st])
        if st in (BAD_BODY_CRC, BAD_CHAIN_CRC):
            p.crc_ok.append(False)
        elif st == OK and self.opts.check_crc:
            p.crc_ok.append(True)
        else:  # not recorded, not checked, or judged on index/term first
            p.crc_ok.append(None)
        p.index_record.append(index_record_state(index, e))

    def _pending_batch(self, buf, f: MappedFile, p: _Pending) -> pa.RecordBatch:
        n = len(p)
        pos = np.array(p.pos, dtype=np.int64)
        size = np.array(p.size, dtype=np.int64)
        cols = {
            "pos": pa.array(pos), "index": pa.array(p.index, pa.int64()), "term": pa.array(p.term, pa.int64()),
            "magic": pa.array(p.magic, pa.int32()), "size": pa.array(p.size, pa.int32()),
            "body_crc": pa.array(p.body_crc, pa.int32()), "chain_crc": pa.array(p.chain_crc, pa.int32()),
            "crc_ok": pa.array(p.crc_ok, pa.bool_()),
            "status": _STATUS_ARRAY.take(pa.array(p.status, pa.int8())),
            "index_record": _INDEX_STATE_ARRAY.take(pa.array(p.index_record, pa.int8())),
        }
        return self._finish(n, cols, f, buf, pos - f.start, size)

    def _stop_batch(self, f: MappedFile, stop) -> pa.RecordBatch:
        blank = stop.reason == STOP_BLANK
        cols = {
            "pos": pa.array([stop.offset], pa.int64()), "index": pa.nulls(1, pa.int64()),
            "term": pa.nulls(1, pa.int64()), "magic": pa.array([-1 if blank else None], pa.int32()),
            "size": pa.array([self.part.data_file_size - (stop.offset - f.start) if blank else None], pa.int32()),
            "body_crc": pa.nulls(1, pa.int32()), "chain_crc": pa.nulls(1, pa.int32()),
            "crc_ok": pa.nulls(1, pa.bool_()), "status": pa.array([stop.reason], pa.string()),
            "index_record": pa.nulls(1, pa.string()), "kind": pa.array([KIND_STOP], pa.string()),
            "detail": pa.array([stop.detail or None], pa.string()),
            "body_digest": pa.nulls(1, pa.int64()), "body": pa.nulls(1, pa.binary()),
        }
        return self._finish(1, cols, f, None, None, None)


class _RunRows:
    """records=runs, the shape a file has for the decoder's run lane (store verify's view):

    - ``run``: a stretch of consecutive healthy entries of one term whose index records
      agree (whichever lane judged them; adjacent stretches are merged);
    - ``entry``: an entry with a problem (its status, or its index record), for the first
      ``problem_rows`` entries of each problem code in the file;
    - ``problems``: the file's further entries of one term, status and index state,
      counted in one row (their pos/end_pos/index/last_index span the first and last);
    - ``stop``: where and why the file's entries end.

    So a file is a few dozen rows however many entries it has, and however damaged:
    run and entry rows come in log order, then problems and stop rows."""

    def __init__(self, reader: FileReader, f: MappedFile, index, prev) -> None:
        self.reader = reader
        self.f = f
        self.index = index
        self.prev = prev
        self.node, self.file = reader.part.node, reader.part.file
        self.rows: dict[str, list] = {name: [] for name, _, _ in RUN_COLUMNS}
        self.stretch: dict | None = None  # the run being extended
        self.seen: dict[str, int] = {}  # problem code -> entries with it so far
        self.folded: dict[tuple, dict] = {}  # (term, status, index_record) -> problems row

    def _add(self, row: dict) -> None:
        row.setdefault("node", self.node)
        row.setdefault("file", self.file)
        for name, values in self.rows.items():
            values.append(row.get(name))

    def _batch(self) -> pa.RecordBatch:
        schema = self.reader.schema
        rows, self.rows = self.rows, {name: [] for name, _, _ in RUN_COLUMNS}
        return pa.RecordBatch.from_arrays([pa.array(rows[f.name], f.type) for f in schema], schema=schema)

    def batches(self) -> Iterator[pa.RecordBatch]:
        reader, f, opts = self.reader, self.f, self.reader.opts
        scan = FileScan(f.view(), f.start, file_size=reader.part.data_file_size, check_crc=opts.check_crc,
                        prev_index=self.prev[0], prev_term=self.prev[1], prev_chain=self.prev[2],
                        release_pages=True, run_headers=True)
        for e in scan.walk(self.index):
            if type(e) is Run:
                self._add_run(e)
            else:
                self._add_scanned(e)
            if len(self.rows["pos"]) >= opts.batch_rows:
                yield self._batch()
        self._flush_stretch()
        for row in self.folded.values():
            self._add(row)
        reader.stop = stop = scan.stop
        if stop is not None:
            blank = stop.reason == STOP_BLANK
            self._add({"kind": KIND_STOP, "pos": stop.offset, "status": stop.reason, "magic": -1 if blank else None,
                       "detail": stop.detail or None,
                       "bytes": reader.part.data_file_size - (stop.offset - f.start) if blank else None})
        if self.rows["pos"]:
            yield self._batch()

    # -- healthy stretches ------------------------------------------------------------------
    def _healthy(self, seg: dict) -> None:
        s = self.stretch
        if s is not None and s["term"] == seg["term"] and s["end_pos"] == seg["pos"] and s["last_index"] + 1 == seg["index"]:
            for k in ("entries", "bytes", "crc_checked", "crc_absent", "noops"):
                s[k] += seg[k]
            s["end_pos"], s["last_index"], s["chain_crc"] = seg["end_pos"], seg["last_index"], seg["chain_crc"]
            return
        self._flush_stretch()
        self.stretch = dict(seg, kind=KIND_RUN)

    def _flush_stretch(self) -> None:
        if self.stretch is not None:
            self._add(self.stretch)
            self.stretch = None

    def _add_run(self, run: Run) -> None:
        h = run.headers
        term = h["term"].astype(np.int64)
        cuts = [0, *(np.flatnonzero(term[1:] != term[:-1]) + 1).tolist(), run.count]
        pos = h["pos"].astype(np.int64)
        size = h["size"].astype(np.int64)
        absent = (h["bcrc"] == 0) & (h["chain"] == 0)
        index = h["index"].astype(np.int64)
        noop = h["magic"] == MAGIC_NOOP
        for lo, hi in zip(cuts, cuts[1:]):
            n_absent = int(absent[lo:hi].sum())
            self._healthy({"pos": int(pos[lo]), "end_pos": int(pos[hi - 1] + size[hi - 1]), "index": int(index[lo]),
                           "last_index": int(index[hi - 1]), "term": int(term[lo]), "entries": hi - lo,
                           "bytes": int(size[lo:hi].sum()), "crc_checked": hi - lo - n_absent, "crc_absent": n_absent,
                           "noops": int(noop[lo:hi].sum()), "chain_crc": int(h["chain"][hi - 1])})

    # -- entries judged one by one --------------------------------------------------------------
    def _add_scanned(self, e: Scanned) -> None:
        st = e.status
        record = INDEX_RECORD_STATES[index_record_state(self.index, e)]
        row = {"pos": e.offset, "end_pos": e.offset + e.size, "index": e.index, "last_index": e.index, "term": e.term,
               "entries": 1, "bytes": e.size, "crc_checked": int(st == OK), "crc_absent": int(st == NO_CRC),
               "noops": int(e.magic == MAGIC_NOOP), "chain_crc": e.chain_crc}
        codes = ([] if st in (OK, NO_CRC) else [st]) + ([] if record == IDX_OK else [INDEX_PROBLEM_CODES[record]])
        if not codes:
            self._healthy(row)
            return
        listed = any(self.seen.get(c, 0) < self.reader.opts.problem_rows for c in codes)
        for c in codes:
            self.seen[c] = self.seen.get(c, 0) + 1
        if listed:
            self._flush_stretch()
            self._add(dict(row, kind=KIND_ENTRY, magic=e.magic, status=st, index_record=record))
            return
        key = (e.term, st, record)
        p = self.folded.get(key)
        if p is None:
            self.folded[key] = dict(row, kind=KIND_PROBLEMS, status=st, index_record=record)
            return
        for k in ("entries", "bytes", "crc_checked", "crc_absent", "noops"):
            p[k] += row[k]
        p["end_pos"], p["last_index"], p["chain_crc"] = row["end_pos"], row["last_index"], row["chain_crc"]


def read_file(part: FilePart, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The record batches of one data file (see the module's contracts)."""
    return FileReader(part, opts).read()
