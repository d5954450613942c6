"""Recovery on open: find where the log really ends, then make the files say so.

``plan_recovery`` only reads. It walks the data files from the third-last one (moving back
while that file's first entry is unreadable, as DLedger does) and stops at the first entry
that is not healthy: bad framing, torn, index gap, term going back, or a position that does
not match its offset. Every entry before that point is kept. Along the way it compares each
entry with its index record and notes the first one that is missing or disagrees.

Bit rot is not the end of the log. An entry whose framing is whole and agrees with its index
record but whose checksum fails (its body, or its link in the chain) is *held*: kept in
place, never served (store/logreads.py refuses its bytes), reported, and left for the node's
scrub to repair from a replica. The walk goes on past it, because the entries after it are
checked on their own (their chain links through its recorded chainCrc). Only damaged
entries at the very end of the log, after the last sound one, may still end it there: those
past the checkpoint's committed index, since nothing proves they were ever acknowledged.

``apply_recovery`` (writable stores only) then: zeroes the data after the last good entry
up to the last non-zero byte (so no stale entry can come back on a later open), deletes data
files after the end, grows a truncated last file back to its configured size, rewrites index
records from the first disagreement on, zeroes and deletes index records past the end.

Invariants: no good entry before the first bad one is ever cut; no entry known committed
(the checkpoint's committed index) and no sound entry after a held one is cut for a damaged
checksum; nothing raises on any byte content; the result is a store DLedger's own recovery
walks to the same end (it checks no checksum, so it keeps a held entry too).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from typing import Iterator

from .errors import StoreError, StoreIOError
from .files import FileList
from .format import (ENTRY_MAGICS, HEADER_SIZE, INDEX_RECORD, INDEX_UNIT_SIZE, body_crc, chain_crc, crc_recorded,
                     decode_header, decode_index)
from .scan import BAD_BODY_CRC, BAD_CHAIN_CRC, FileScan, Run, ScanStop

LOOKBACK_FILES = 3  # DLedgerMmapFileStore.recover starts at mappedFiles.size() - 3
HOLDABLE = (BAD_BODY_CRC, BAD_CHAIN_CRC)  # damage that leaves the entry's place in the log certain


@dataclass(frozen=True)
class Held:
    """A damaged entry recovery kept in the log (never served until repaired)."""

    index: int
    term: int
    pos: int
    size: int
    status: str  # scan status: bad-body-crc or bad-chain-crc


@dataclass
class RecoveryPlan:
    begin_index: int = -1
    end_index: int = -1
    end_term: int = 0
    end_pos: int = 0  # logical offset where the next entry will be written
    last_chain: int = 0
    walked_from: int = 0  # logical offset the walk started at
    entries_walked: int = 0
    stop: ScanStop | None = None  # why the walk ended
    end_reason: str = "empty store"  # human text for where and why the log ends
    stale_end: int = 0  # data: offset just past the last non-zero byte after end_pos
    index_rebuild_from: int | None = None  # first entry index whose index record is wrong or missing
    index_rebuild_pos: int = 0
    index_stale_end: int = 0  # index: offset just past the last non-zero byte after the end
    data_files_after_end: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    dropped_to: int = -1  # the last entry past the end that the index files still name (-1: none)
    dropped_bytes: int = 0  # written data past the end (what recovery cuts)
    held: list[Held] = field(default_factory=list)  # damaged entries kept in the log, in index order
    committed: int | None = None  # the committed index the walk was told (the checkpoint's)

    @property
    def cuts_data(self) -> bool:
        return self.stale_end > self.end_pos or bool(self.data_files_after_end)


@dataclass
class RecoveryReport:
    begin_index: int
    end_index: int
    end_term: int
    end_pos: int
    end_reason: str
    dropped_to: int = -1  # entries end_index + 1 .. dropped_to were in the log and are cut (-1: none known)
    dropped_bytes: int = 0  # bytes of data past the end that are cut
    cut_bytes: int = 0  # length of the data range zeroed after the end
    index_cut_bytes: int = 0  # length of the index range zeroed after the last entry's record
    removed_data_files: list[str] = field(default_factory=list)
    removed_index_files: list[str] = field(default_factory=list)
    index_records_rebuilt: int = 0
    restored_file_size: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(
            self.cut_bytes or self.index_cut_bytes or self.removed_data_files or self.removed_index_files
            or self.index_records_rebuilt or self.restored_file_size
        )


def _first_entry_ok(data: FileList, index: FileList, i: int) -> bool:
    """DLedger's pre-check of a walk start: the file's first entry is healthy and its index
    record agrees (nothing before it is checked, so a damaged index field would otherwise
    pass and end the log at the next, good, entry)."""
    f = data.files[i]
    scan = FileScan(f.view(), f.start, file_size=f.size, max_entries=1)
    got = list(scan)
    return bool(got) and got[0].healthy and index_record_matches(index, got[0])


def _predecessor(data: FileList, index: FileList, i: int) -> tuple[tuple, bool]:
    """((index, term, chainCrc) of the entry just before data file ``i``, or three Nones
    when it cannot be found or used; and whether the first entry of file ``i`` is broken).

    The link between the entry before the walk (k-1) and the first walked one (k) can fail
    for two reasons: k's chainCrc is damaged, or k-1's (outside the window, never walked).
    k's successor decides: if k's chainCrc still links to entry k+1, k is consistent with
    the log after it and the damage lies before the window, so k-1 is not used (cutting the
    whole window for it would drop good entries). Otherwise k's chainCrc agrees with
    neither neighbour: k is broken, and the walk must start earlier to cut the log at k."""
    unknown = ((None, None, None), False)
    f = data.files[i]
    head = list(FileScan(f.view(), f.start, file_size=f.size, max_entries=2))
    if not head or not head[0].healthy or head[0].index <= 0:
        return unknown
    first = head[0]
    k = first.index
    off = (k - 1) * INDEX_UNIT_SIZE
    ifile = index.find(off)
    if ifile is None or ifile.mm is None or off - ifile.start + INDEX_UNIT_SIZE > ifile.actual_size:
        return unknown
    rec = decode_index(ifile.mm, off - ifile.start)
    prev_file = data.files[i - 1]
    if (prev_file.end != f.start or rec.index != k - 1
            or not prev_file.start <= rec.pos < prev_file.start + prev_file.actual_size):
        return unknown
    got = list(FileScan(prev_file.view(), prev_file.start, start=rec.pos - prev_file.start,
                        file_size=prev_file.size, max_entries=1, check_crc=False))
    if not got or (got[0].magic, got[0].pos, got[0].size, got[0].index, got[0].term) != tuple(rec):
        return unknown
    seed = (got[0].index, got[0].term, got[0].chain_crc)
    if first.term < got[0].term:
        return seed, True  # the term goes back across the boundary: the walk must see it
    if first.body_crc == 0 and first.chain_crc == 0:
        return seed, False  # nothing to link (no checksums); term order is still checked
    if chain_crc(got[0].chain_crc, k, first.term, first.body_crc) == first.chain_crc:
        return seed, False
    if len(head) == 2 and head[1].healthy:  # the scan checked k -> k+1 from k's stored chainCrc
        return unknown
    return seed, True


def index_record_matches(index: FileList, e) -> bool:
    """Does the index record of entry ``e`` (a Scanned) say exactly what the data says?"""
    off = e.index * INDEX_UNIT_SIZE
    f = index.find(off)
    if f is None or f.mm is None:
        return False
    rel = off - f.start
    if rel + INDEX_UNIT_SIZE > f.actual_size:
        return False
    return f.mm[rel : rel + INDEX_UNIT_SIZE] == INDEX_RECORD.pack(e.magic, e.pos, e.size, e.index, e.term)


def plan_recovery(data: FileList, index: FileList, committed: int | None = None) -> RecoveryPlan:
    """Where the log ends and what recovery must change (nothing is written). ``committed``:
    the checkpoint's committed index, if known; damaged entries up to it are held, never cut."""
    plan = RecoveryPlan()
    files = data.files
    if not files:
        plan.index_stale_end = index.nonzero_end(0)
        return plan
    for i in range(1, len(files)):
        if files[i].start != files[i - 1].end:
            plan.problems.append(f"data file {files[i].name} does not follow {files[i - 1].name}")
    start = max(0, len(files) - LOOKBACK_FILES)
    prev_index = prev_term = prev_chain = None
    while start > 0:
        if not _first_entry_ok(data, index, start):
            plan.problems.append(f"first entry of data file {files[start].name} is unreadable; starting earlier")
        else:
            seed, broken = _predecessor(data, index, start)
            if not broken:
                prev_index, prev_term, prev_chain = seed
                break
            plan.problems.append(f"first entry of data file {files[start].name} does not link to the entry "
                                 f"before it; starting earlier")
        start -= 1
    plan.walked_from = files[start].start
    if files[start].start == 0:
        # Nothing precedes offset 0: the entry there is index 0 and chains from 0.
        prev_index, prev_term, prev_chain = -1, None, 0
    last = None
    first_walked = -1
    holds: list[tuple[Held, tuple | None, int]] = []  # (held entry, `last` before it, first_walked before it)
    last_sound = -1  # the last entry walked whose own checks pass
    relink = None  # the recomputed chain of the entry just walked, when it was held for its chain link
    pos = files[start].start
    check_index = True
    stop = None
    fi = start
    while fi < len(files):
        f = files[fi]
        if f.start != pos:
            stop = ScanStop("missing-file", pos, f"no data file starts at {pos}")
            break
        scan = FileScan(f.view(), f.start, file_size=f.size,
                        prev_index=prev_index, prev_term=prev_term, prev_chain=prev_chain)
        bad = None
        for e in scan.walk(index):
            if type(e) is Run:  # healthy, and the index records agree (store/scan.py)
                if last is None:
                    first_walked = e.first_index
                last = (e.last_index, e.last_term, e.last_chain)
                plan.entries_walked += e.count
                last_sound, relink = e.last_index, None
                continue
            if not e.healthy:
                before = last[2] if last is not None else prev_chain
                if _relinks(e, relink):
                    pass  # sound: it links through the held entry before it once that one's own link is recomputed
                elif e.status in HOLDABLE and index_record_matches(index, e):
                    holds.append((Held(e.index, e.term, e.pos, e.size, e.status), last, first_walked))
                    if last is None:
                        first_walked = e.index
                    # the chain the next entry links to: the recorded one, unless this entry's own
                    # link is what failed (then the recorded chainCrc may be the damaged field)
                    chain = e.chain_crc
                    relink = None
                    if e.status == BAD_CHAIN_CRC and before is not None:
                        chain = relink = chain_crc(before, e.index, e.term, e.body_crc)
                    last = (e.index, e.term, chain)
                    plan.entries_walked += 1
                    continue
                else:
                    bad = e
                    break
            relink = None
            last_sound = e.index
            if check_index and not index_record_matches(index, e):
                plan.index_rebuild_from, plan.index_rebuild_pos = e.index, e.offset
                check_index = False
            if last is None:
                first_walked = e.index
            last = (e.index, e.term, e.chain_crc)
            plan.entries_walked += 1
        if bad is not None:
            stop = ScanStop(bad.status, bad.offset, f"entry index {bad.index} term {bad.term}: {bad.status}")
            pos = bad.offset
            break
        prev_index, prev_term, prev_chain = scan.prev_index, scan.prev_term, scan.prev_chain
        stop = scan.stop
        if stop.reason == "blank":
            pos = f.end
            fi += 1
            if fi == len(files):
                stop = ScanStop("end", pos, "last data file ends with BLANK padding")
            continue
        pos = stop.offset
        break
    # Held entries after the last sound one end the log at the first of them not known
    # committed: nothing after it proves it was ever written by a leader of this log.
    plan.committed = committed
    known = -1 if committed is None else committed
    cut = next((k for k, h in enumerate(holds) if h[0].index > last_sound and h[0].index > known), None)
    if cut is not None:
        held, last, first_walked = holds[cut]
        stop = ScanStop(held.status, held.pos, f"entry index {held.index} term {held.term}: {held.status} "
                        f"(damaged, after the last sound entry and past the committed index {known})")
        pos = held.pos
        del holds[cut:]
    plan.held = [h[0] for h in holds]
    plan.stop = stop
    plan.end_pos = pos
    if last is not None:
        plan.end_index, plan.end_term, plan.last_chain = last
    elif start > 0:
        # Nothing readable from the walk start on: the log ends where the earlier files end.
        plan.problems.append("no readable entry from the recovery start; the earlier files are kept unchecked")
    where = data.find(pos)
    fname = where.name if where else "(no file)"
    plan.end_reason = f"{stop.reason} at offset {pos} in {fname}" + (f": {stop.detail}" if stop.detail else "")
    plan.stale_end = data.nonzero_end(pos)
    plan.data_files_after_end = [f.name for f in files if f.start > pos and f.start >= (where.end if where else pos)]
    # begin index: the first entry of the first data file
    if plan.end_index >= 0:
        if start == 0:
            plan.begin_index = first_walked
        else:
            first = files[0]
            head = list(FileScan(first.view(), first.start, file_size=first.size, max_entries=1, check_crc=False))
            if head and head[0].healthy and head[0].index <= plan.end_index:
                plan.begin_index = head[0].index
            else:
                plan.problems.append(f"first entry of data file {first.name} is unreadable")
                plan.begin_index = first_walked
    idx_end = (plan.end_index + 1) * INDEX_UNIT_SIZE if plan.end_index >= 0 else 0
    plan.index_stale_end = index.nonzero_end(idx_end)
    plan.dropped_bytes = max(0, plan.stale_end - pos)
    # index records of entries past the end: those are dropped. The last one whose index is
    # its unit's (a stray byte past the end makes a record of any number: never trusted)
    for unit in reversed(cut_units(plan)):
        rec = read_index_record(index, unit)
        if rec is not None and rec.index == unit:
            plan.dropped_to = unit
            break
    return plan


def _relinks(e, relink: int | None) -> bool:
    """Is ``e`` (failing only its chain link) sound once the held entry before it is taken at
    its recomputed chain? Then that entry's recorded chainCrc was the damaged field."""
    return (relink is not None and e.status == BAD_CHAIN_CRC
            and chain_crc(relink, e.index, e.term, e.body_crc) == e.chain_crc)


def cut_units(plan: RecoveryPlan) -> range:
    """The index units past the log's end that hold something (up to the last non-zero byte
    of the index files): where the entries recovery cuts are recorded, if anywhere."""
    first = plan.end_index + 1
    return range(first, max(first, -(-plan.index_stale_end // INDEX_UNIT_SIZE)))


def apply_recovery(plan: RecoveryPlan, data: FileList, index: FileList) -> RecoveryReport:
    rep = RecoveryReport(plan.begin_index, plan.end_index, plan.end_term, plan.end_pos, plan.end_reason,
                         plan.dropped_to, plan.dropped_bytes, problems=list(plan.problems))
    end_pos = plan.end_pos
    holder = data.find(end_pos)
    # Files wholly after the end go; the file holding the end keeps its head.
    cut_from = holder.end if holder is not None else end_pos
    if plan.stale_end > end_pos:
        rep.cut_bytes = data.zero(end_pos, min(plan.stale_end, cut_from))
    rep.removed_data_files = data.remove_from(cut_from)
    for f in data.files:
        if f.actual_size < f.size:
            data.restore_size(f)
            rep.restored_file_size.append(f.name)
    # Index: rebuild from the first bad record, then clear what lies past the end.
    if plan.index_rebuild_from is not None:
        rep.index_records_rebuilt = rebuild_index(data, index, plan.index_rebuild_pos, plan.index_rebuild_from, plan.end_index)
    idx_end = (plan.end_index + 1) * INDEX_UNIT_SIZE if plan.end_index >= 0 else 0
    iholder = index.find(idx_end)
    icut_from = iholder.end if iholder is not None else idx_end
    if plan.index_stale_end > idx_end:
        rep.index_cut_bytes = index.zero(idx_end, min(plan.index_stale_end, icut_from))
    rep.removed_index_files = index.remove_from(icut_from if idx_end % index.file_size else idx_end)
    for f in index.files:
        if f.actual_size < f.size:
            index.restore_size(f)
    data.flush()
    index.flush()
    return rep


def rebuild_index(data: FileList, index: FileList, from_pos: int, from_index: int, end_index: int) -> int:
    """Rewrite index records for entries ``from_index..end_index`` from the data files."""
    written = 0
    pos = from_pos
    fi = next((i for i, f in enumerate(data.files) if f.start <= pos < f.end), None)
    while fi is not None and fi < len(data.files) and written <= end_index - from_index:
        f = data.files[fi]
        scan = FileScan(f.view(), f.start, start=pos - f.start, file_size=f.size, check_crc=False)
        for e in scan:
            if e.index > end_index:
                break
            index.write(e.index * INDEX_UNIT_SIZE, INDEX_RECORD.pack(e.magic, e.pos, e.size, e.index, e.term))
            written += 1
        fi += 1
        pos = f.end
    return written


def read_index_record(index: FileList, i: int):
    off = i * INDEX_UNIT_SIZE
    f = index.find(off)
    if f is None or f.mm is None or off - f.start + INDEX_UNIT_SIZE > f.actual_size:
        return None
    return decode_index(f.mm, off - f.start)


def cut_runs(plan: RecoveryPlan, data: FileList, index: FileList) -> Iterator[Iterator[tuple[int, bytes]]]:
    """The whole entries recovery is about to cut (found by the index records past the end,
    :func:`cut_units`), as runs of consecutive indexes, each an iterator of (index, encoded
    entry) read one entry at a time (a cut may be gigabytes). An entry is whole when the bytes
    its record points at hold a header of its index, size and position and a body matching
    its recorded CRC; the others (the damage that ended the log, for one) split the runs. A
    run must be used up (or dropped) before the next is asked for. Read before
    :func:`apply_recovery` zeroes them."""
    units = cut_units(plan)
    at = [units.start]  # the next unit to look at

    def run(first: int, raw: bytes) -> Iterator[tuple[int, bytes]]:
        yield first, raw
        for i in range(first + 1, units.stop):
            at[0] = i + 1
            got = _whole_entry(data, index, i)
            if got is None:
                return
            yield i, got

    while at[0] < units.stop:
        i = at[0]
        at[0] = i + 1
        raw = _whole_entry(data, index, i)
        if raw is not None:
            yield run(i, raw)


def _whole_entry(data: FileList, index: FileList, i: int) -> bytes | None:
    rec = read_index_record(index, i)
    if rec is None or rec.index != i or rec.magic not in ENTRY_MAGICS or rec.size < HEADER_SIZE or rec.pos < 0:
        return None
    try:
        raw = data.read(rec.pos, rec.size)
    except StoreIOError:
        raise
    except StoreError:
        return None
    h = decode_header(raw)
    if (h.magic, h.index, h.size, h.pos) != (rec.magic, i, rec.size, rec.pos) or \
            h.body_size != h.size - HEADER_SIZE:
        return None
    if crc_recorded(h) and body_crc(raw[HEADER_SIZE:]) != h.body_crc:
        return None
    return raw
