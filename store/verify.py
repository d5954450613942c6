"""Full, read-only verification of a node directory.

Checks every file: names and sizes, the framing of every record, index continuity, term
order, positions, checksums where recorded, agreement of each index record with its entry,
stale bytes after the end, extra index records, and the checkpoint/currterm files against
what the data says. Never writes; never raises on damaged content (only on an unreadable
directory). Each problem names its file and offset.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Callable

from .errors import StoreCorruptError, StoreError
from .files import FileList, list_store_files
from .filestore import FileStore
from .format import DEFAULT_DATA_FILE_SIZE, DEFAULT_INDEX_FILE_SIZE, INDEX_RECORD, INDEX_UNIT_SIZE, decode_index
from .layout import NodeLayout
from .metafiles import read_checkpoint, read_currterm
from .reading import detect_file_size
from .scan import BAD_BODY_CRC, BAD_CHAIN_CRC, INDEX_GAP, NO_CRC, OK, STOP_END, TERM_BACK, FileScan, Run

ERROR = "error"
WARNING = "warning"
MAX_PER_CODE = 20  # problems of one code listed one by one; the rest are counted


@dataclass
class Problem:
    severity: str
    code: str
    file: str  # path relative to the node directory ("" for the node itself)
    offset: int | None  # byte offset within that file
    index: int | None  # entry index concerned, if any
    message: str

    def as_row(self) -> dict:
        return asdict(self)


@dataclass
class VerifyReport:
    node_dir: str
    data_files: int = 0
    index_files: int = 0
    entries: int = 0
    bytes: int = 0
    crc_checked: int = 0
    crc_absent: int = 0
    begin_index: int = -1
    end_index: int = -1
    end_term: int = 0
    start_drops: int = 0  # entries a node's start would drop (its recovery)
    start_drops_committed: int = 0  # ... that the checkpoint had recorded as committed
    problems: list[Problem] = field(default_factory=list)
    suppressed: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return sum(1 for p in self.problems if p.severity == ERROR) + sum(self.suppressed.values())

    @property
    def ok(self) -> bool:
        return self.errors == 0

    def summary(self) -> dict:
        return {
            "node_dir": self.node_dir,
            "data_files": self.data_files,
            "index_files": self.index_files,
            "entries": self.entries,
            "bytes": self.bytes,
            "begin_index": self.begin_index,
            "end_index": self.end_index,
            "end_term": self.end_term,
            "crc_checked": self.crc_checked,
            "crc_absent": self.crc_absent,
            "errors": self.errors,
            "warnings": sum(1 for p in self.problems if p.severity == WARNING),
            "start_drops": self.start_drops,
            "start_drops_committed": self.start_drops_committed,
            "verdict": "ok" if self.ok else "damaged",
        }


class _Collector:
    def __init__(self, report: VerifyReport) -> None:
        self.report = report
        self.counts: dict[str, int] = {}

    def add(self, severity, code, file, offset, index, message) -> None:
        n = self.counts.get(code, 0) + 1
        self.counts[code] = n
        if n > MAX_PER_CODE and severity == ERROR:
            self.report.suppressed[code] = self.report.suppressed.get(code, 0) + 1
            return
        self.report.problems.append(Problem(severity, code, file, offset, index, message))


STATUS_MESSAGES = {
    BAD_BODY_CRC: "body checksum does not match bodyCrc",
    BAD_CHAIN_CRC: "chainCrc does not follow from the previous entry",
    INDEX_GAP: "index does not follow the previous entry's",
    TERM_BACK: "term is lower than the previous entry's",
}


def verify_store(
    node_dir: str,
    *,
    data_file_size: int | None = None,
    index_file_size: int | None = None,
    check_crc: bool = True,
    progress: Callable[[int], None] | None = None,
    walk: Callable | None = None,
) -> VerifyReport:
    """Check every file of ``node_dir``; never writes.

    ``walk`` replaces the walk over the data files (the Spark audit supplies entry results
    computed elsewhere by the same decoder): ``walk(data, index, check_crc, report, out,
    progress)`` fills the report's counters, calls ``out.add(severity, code, file, offset,
    index, message)`` for each problem in walk order, and returns what :func:`_walk_data`
    returns. Every other check (file names, tails, checkpoint) is this function's own."""
    layout = NodeLayout(node_dir)
    report = VerifyReport(node_dir)
    out = _Collector(report)
    if not os.path.isdir(layout.data_dir):
        out.add(ERROR, "no-data-dir", "data", None, None, "data/ directory is missing")
    data = FileList(layout.data_dir, data_file_size or DEFAULT_DATA_FILE_SIZE)
    index = FileList(layout.index_dir, index_file_size or DEFAULT_INDEX_FILE_SIZE)
    try:
        data.load()
        index.load()
        _check_file_names(data, data_file_size, DEFAULT_DATA_FILE_SIZE, "data", out)
        _check_file_names(index, index_file_size, DEFAULT_INDEX_FILE_SIZE, "index", out)
        report.data_files, report.index_files = len(data.files), len(index.files)
        end_pos = (walk or _walk_data)(data, index, check_crc, report, out, progress)
        _check_tails(data, index, end_pos, report, out)
        _check_meta(layout, report, out)
    finally:
        data.close()
        index.close()
    if check_crc and os.path.isdir(layout.data_dir):  # (recovery checks checksums: not with --no-crc)
        _check_start(node_dir, data_file_size, index_file_size, report, out)
    return report


def file_extents(node_dir: str) -> list[tuple[str, str, int]]:
    """The store's files as (kind, name, size), data then index, in start offset order;
    names that are not store files are left out."""
    layout = NodeLayout(node_dir)
    out = []
    for kind, directory in (("data", layout.data_dir), ("index", layout.index_dir)):
        try:
            found = list_store_files(directory)[0]
        except OSError:  # (an unreadable directory: verify itself says so)
            continue
        for _start, path in found:
            try:
                out.append((kind, os.path.basename(path), os.path.getsize(path)))
            except OSError:
                continue
    return out


def _check_start(node_dir: str, data_file_size, index_file_size, report: VerifyReport, out: _Collector) -> None:
    """What a node's start would drop (its recovery, planned read-only): said as a problem,
    an error when the checkpoint had recorded any of it as committed."""
    try:
        with FileStore.open(node_dir, read_only=True, data_file_size=data_file_size,
                            index_file_size=index_file_size) as s:
            report.start_drops, report.start_drops_committed = s.recovery_dropped()
            said = s.recovery_warning()
            held = s.recovery_held()
            holds = s.recovery_held_warning()
            first_cut = s.plan.end_index + 1
    except StoreError as exc:
        out.add(ERROR, "start-fails", "", None, None, f"a node would not start on this store: {exc}")
        return
    if holds is not None:
        out.add(WARNING, "start-holds", "", None, held[0].index,
                holds.replace("recovery kept", "a node's start would keep", 1))
    if said is not None and report.start_drops:
        said = said.replace("recovery would cut (opened read-only: nothing changed)", "a node's start would cut")
        out.add(ERROR if report.start_drops_committed else WARNING,
                "start-drops-committed" if report.start_drops_committed else "start-drops", "", None,
                first_cut, said)


def _check_file_names(files: FileList, configured, default, kind: str, out: _Collector) -> None:
    for name in files.ignored:
        out.add(ERROR, "stray-file", f"{kind}/{name}", None, None, f"{name!r} is not a store file name (20 digits)")
    try:
        size = detect_file_size(files, configured, default)
    except StoreCorruptError as exc:  # pragma: no cover - detect raises usage errors only
        out.add(ERROR, "file-size", kind, None, None, str(exc))
        size = files.file_size
    except ValueError as exc:
        # Report the mismatch once and check the files against the size they were written with.
        out.add(ERROR, "file-size", kind, None, None, str(exc))
        size = detect_file_size(files, None, default)
    files.file_size = size
    prev = None
    for f in files.files:
        f.size = size
        rel = f"{kind}/{f.name}"
        if f.actual_size != size:
            out.add(ERROR, "file-size", rel, None, None, f"file is {f.actual_size} bytes, expected {size}")
        if f.start % size:
            out.add(ERROR, "file-name", rel, None, None, f"start offset {f.start} is not a multiple of the file size {size}")
        if prev is not None and f.start != prev.start + size:
            what = "overlaps" if f.start < prev.start + size else "leaves a gap after"
            out.add(ERROR, "file-sequence", rel, None, None, f"{f.name} {what} {prev.name}")
        prev = f


def _walk_data(data: FileList, index: FileList, check_crc: bool, report: VerifyReport, out: _Collector,
               progress) -> int:
    """Walk every data file; returns the logical offset just past the last entry."""
    prev_index = prev_term = prev_chain = None
    end_pos = None
    files = data.files
    pack_index = INDEX_RECORD.pack
    for fi, f in enumerate(files):
        rel_name = f"data/{f.name}"
        if fi > 0 and f.start != files[fi - 1].start + data.file_size:
            prev_index = prev_term = prev_chain = None  # a gap: continuity cannot be checked across it
        scan = FileScan(f.view(), f.start, file_size=data.file_size, check_crc=check_crc,
                        prev_index=prev_index, prev_term=prev_term, prev_chain=prev_chain, release_pages=True)
        ifile = None
        istart = iend = 0
        imm = None
        for e in scan.walk(index):
            if type(e) is Run:  # healthy entries whose index records agree (store/scan.py)
                report.entries += e.count
                report.bytes += e.nbytes
                report.crc_checked += e.crc_checked
                report.crc_absent += e.crc_absent
                if report.begin_index < 0:
                    report.begin_index = e.first_index
                report.end_index, report.end_term = e.last_index, e.last_term
                continue
            report.entries += 1
            report.bytes += e.size
            st = e.status
            if st == OK:
                report.crc_checked += 1
            elif st == NO_CRC:
                report.crc_absent += 1
            else:
                out.add(ERROR, st, rel_name, e.offset - f.start, e.index,
                        f"entry {e.index} (term {e.term}): {STATUS_MESSAGES[st]}")
            if report.begin_index < 0:
                report.begin_index = e.index
            report.end_index, report.end_term = e.index, e.term
            ioff = e.index * INDEX_UNIT_SIZE
            if not istart <= ioff < iend:
                ifile = index.find(ioff) if e.index >= 0 else None
                if ifile is not None and ifile.mm is not None:
                    istart, iend, imm = ifile.start, ifile.start + ifile.actual_size, ifile.mm
                else:
                    istart = iend = 0
                    imm = None
            if imm is None or ioff + INDEX_UNIT_SIZE > iend:
                out.add(ERROR, "index-missing", "index", None, e.index, f"no index record for entry {e.index}")
                continue
            r = ioff - istart
            if imm[r : r + INDEX_UNIT_SIZE] != pack_index(e.magic, e.pos, e.size, e.index, e.term):
                rec = decode_index(imm, r)
                if not any(rec):
                    out.add(ERROR, "index-missing", f"index/{ifile.name}", r, e.index,
                            f"index record of entry {e.index} is zero")
                else:
                    out.add(ERROR, "index-mismatch", f"index/{ifile.name}", r, e.index,
                            f"index record {tuple(rec)} disagrees with entry (magic {e.magic}, pos {e.pos}, "
                            f"size {e.size}, index {e.index}, term {e.term})")
        stop = scan.stop
        prev_index, prev_term, prev_chain = scan.prev_index, scan.prev_term, scan.prev_chain
        last_file = fi == len(files) - 1
        if stop is not None and not stop.clean:
            out.add(ERROR, stop.reason, rel_name, stop.offset - f.start, None,
                    f"unreadable record: {stop.detail or stop.reason}")
            prev_index = prev_term = prev_chain = None
        elif stop is not None and stop.reason == STOP_END and not last_file:
            out.add(ERROR, "early-end", rel_name, stop.offset - f.start, None,
                    "entries stop before the file end without BLANK padding, but later files exist")
        if last_file:
            # Where the stale-bytes check starts: after the last entry, unless the file is
            # full (BLANK) or unreadable (already reported).
            end_pos = scan.next_offset if stop is not None and stop.reason == STOP_END else None
        if progress:
            progress(f.actual_size)
    return end_pos


def _check_tails(data: FileList, index: FileList, end_pos, report: VerifyReport, out: _Collector) -> None:
    if data.files and end_pos is not None:
        last = data.files[-1]
        stale = data.nonzero_end(end_pos)
        if stale > end_pos:
            out.add(ERROR, "stale-bytes", f"data/{last.name}", end_pos - last.start, None,
                    f"{stale - end_pos} bytes after the last entry are not zero (stale or damaged data)")
    idx_end = (report.end_index + 1) * INDEX_UNIT_SIZE if report.end_index >= 0 else 0
    extra_end = index.nonzero_end(idx_end)
    if extra_end <= idx_end:
        return
    extra, first = 0, None
    for slot in range(idx_end, extra_end, INDEX_UNIT_SIZE):
        f = index.find(slot)
        if f is None or f.mm is None or slot - f.start + INDEX_UNIT_SIZE > f.actual_size:
            continue
        block = f.mm[slot - f.start : slot - f.start + INDEX_UNIT_SIZE]
        if block.count(0) != INDEX_UNIT_SIZE:
            extra += 1
            first = first or (f, slot - f.start, decode_index(block))
    if first is not None:
        f, r, rec = first
        out.add(ERROR, "index-extra", f"index/{f.name}", r, rec.index,
                f"{extra} index record(s) past the last entry {report.end_index}, first says index {rec.index}")


def _check_meta(layout: NodeLayout, report: VerifyReport, out: _Collector) -> None:
    try:
        cp = read_checkpoint(layout.node_dir)
    except StoreCorruptError as exc:
        out.add(ERROR, "checkpoint", "checkpoint", None, None, str(exc))
        cp = None
    if cp is not None:
        if cp.source is None:
            out.add(WARNING, "checkpoint-missing", "checkpoint", None, None, "no checkpoint file (nor .bak)")
        else:
            if cp.problem:
                out.add(WARNING, "checkpoint-bak", "checkpoint", None, None, f"read from .bak: {cp.problem}")
            c, e = cp.committed_index, cp.end_index
            if c is not None and e is not None and c > e:
                out.add(ERROR, "checkpoint", "checkpoint", None, c, f"committedIndex {c} > endIndex {e}")
            if c is not None and c > report.end_index:
                out.add(ERROR, "committed-lost", "checkpoint", None, c,
                        f"committedIndex {c} is past the data's last entry {report.end_index}: committed entries are missing")
            if e is not None and e > report.end_index:
                out.add(ERROR, "checkpoint-end", "checkpoint", None, e,
                        f"endIndex {e} is past the data's last entry {report.end_index}")
            elif e is not None and e < report.end_index:
                out.add(WARNING, "checkpoint-behind", "checkpoint", None, e,
                        f"endIndex {e} is behind the data's last entry {report.end_index} (written before the last appends)")
    try:
        ts = read_currterm(layout.node_dir)
    except StoreCorruptError as exc:
        out.add(ERROR, "currterm", "currterm", None, None, str(exc))
        return
    if ts.source is not None and ts.term < report.end_term:
        out.add(ERROR, "currterm", "currterm", None, None,
                f"currTerm {ts.term} is lower than the last entry's term {report.end_term}")
