"""A scrub of the committed log, a bounded step at a time, and the two repairs it can make.

:class:`Scrub` remembers where a pass over ``[begin, committed]`` stands and, asked for a
step of at most about ``max_bytes``, reads on from there through the one decoder of data
bytes (store/scan.py's FileScan, both lanes): every entry's framing, its body CRC and its
link in the chain where recorded, and its index record against its header. A step ends at
the first damaged entry it finds and reports it as a :class:`Damage`; the next step goes
on after it. When the cursor passes the commit index the pass is done and the next step
starts again at the log's first entry. Nothing here writes; a node (cluster/node/scrub.py)
paces the steps and decides the repairs, which :class:`Mender` makes:

- an index record that disagrees with a healthy entry is written again from the entry's
  header (:meth:`Mender.index_record`);
- a damaged entry is overwritten, in place, by a replica's copy of it, once the copy is
  checked to be that entry and to fit its slot exactly (:meth:`Mender.entry`). Replicas
  hold every entry at the same position, so the copy's bytes are the entry's own.

Kinds of damage (``Damage.kind``): ``body-crc`` (the body's CRC is not the recorded one),
``chain-crc`` (the chain link is not what the previous entry and this one's fields give),
``header`` (no entry that parses is where the log says entry ``index`` is: a flipped magic,
size, index, term or position), ``index-record`` (the entry is whole but its 32-byte index
record says otherwise). Entries written without CRCs (Java DLedger) can only show
``header`` and ``index-record`` damage here; their bodies are compared across replicas
(``differs``: a copy no majority of the members holds, found by the node's scrub).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import StoreCorruptError
from .format import (
    CHAIN_INPUT,
    CRC_MASK,
    ENTRY_HEADER,
    ENTRY_MAGICS,
    HEADER_SIZE,
    INDEX_RECORD,
    INDEX_UNIT_SIZE,
    crc32,
)
from .scan import BAD_BODY_CRC, BAD_CHAIN_CRC, BLANK, NO_CRC, STOP_BLANK, STOP_EOF, STOP_LIMIT, FileScan, Run

BODY_CRC = "body-crc"
CHAIN_CRC = "chain-crc"
HEADER = "header"
INDEX_RECORD_KIND = "index-record"
DIFFERS = "differs"  # (found by comparing members' copies: cluster/node/scrub.py)
KINDS = (BODY_CRC, CHAIN_CRC, HEADER, INDEX_RECORD_KIND, DIFFERS)


@dataclass(frozen=True)
class Damage:
    """One damaged entry as a scrub found it. ``pos``/``size`` are where the entry's slot is
    (from the walk, else its index record; -1 when neither says), ``file``/``offset`` the
    data file (index file for ``index-record``) and the byte in it."""

    kind: str
    index: int
    pos: int
    size: int
    file: str
    offset: int
    detail: str

    def line(self) -> str:
        where = "index" if self.kind == INDEX_RECORD_KIND else "data"
        return f"entry {self.index}: {self.kind} damage in {where}/{self.file} at byte {self.offset}: {self.detail}"


@dataclass
class Step:
    """What one step read: ``entries`` and ``bytes`` checked, the damage it ended on (None
    when it found none), and whether it finished a pass."""

    entries: int = 0
    bytes: int = 0
    damage: Damage | None = None
    pass_done: bool = False
    first: int = -1  # the first entry it checked
    crc_absent: int = 0  # entries among them written without CRCs (only comparing copies checks those)


class Scrub:
    """Where a pass over a store's committed entries stands (see the module's docstring).

    ``next_index``: the next entry to check (-1: start a pass); ``next_pos``: where it starts
    when the walk knows (the end of the entry before), else -1 (its index record says);
    ``prev``: (term, chain) of the entry before when known, for the term-order and chain
    checks of the next one."""

    def __init__(self) -> None:
        self.next_index = -1
        self.next_pos = -1
        self.prev: tuple[int, int | None] | None = None
        self.passes = 0  # full passes finished

    def restart(self) -> None:
        self.next_index, self.next_pos, self.prev = -1, -1, None

    def step(self, store, max_bytes: int) -> Step:
        """Check committed entries from the cursor, about ``max_bytes`` of them (at least one
        entry), and move the cursor past them. ``store``: an open FileStore."""
        out = Step()
        begin, last = store.begin_index, store.committed_index
        if begin < 0 or last < begin:
            self.restart()
            return out
        i = self.next_index
        if i < begin or i > store.end_index + 1:  # a new pass, or the log moved under the cursor
            self.restart()
            i = begin
        if i > last:
            if self.next_index >= 0:
                self.passes += 1
                out.pass_done = True
            self.restart()
            return out
        out.first = i
        pos = self.next_pos
        if pos < 0:
            pos = _start_of(store, i)
            if pos < 0:
                try:
                    rec = store.reads.index_record(i)
                except StoreCorruptError as exc:
                    return self._skip(out, _index_damage(store, i, str(exc)))
                pos = rec[1]
                if rec[2] < HEADER_SIZE:
                    return self._skip(out, _index_damage(store, i, f"its index record gives size {rec[2]}"))
        while out.bytes < max_bytes and i <= last:
            f = store.data.find(pos)
            if f is None or f.mm is None:
                return self._skip(out, Damage(HEADER, i, pos, -1, "data", pos, "no data file holds its position"))
            prev_term, prev_chain = self.prev if self.prev is not None else (None, None)
            scan = FileScan(f.mm, f.start, start=pos - f.start, end=min(f.actual_size, pos - f.start + max_bytes
                                                                         - out.bytes),
                            prev_index=i - 1 if self.prev is not None else None, prev_term=prev_term,
                            prev_chain=prev_chain, max_entries=last - i + 1, file_size=store.data.file_size)
            for item in scan.walk(store.index):
                if type(item) is Run:
                    i = item.last_index + 1
                    out.crc_absent += item.crc_absent
                    out.entries += item.count
                    out.bytes += item.nbytes
                    pos = item.end_offset
                    self.prev = (item.last_term, item.last_chain)
                    continue
                if item.status == BLANK:
                    continue
                damage = _judged(store, f, i, item)
                if damage is not None:
                    # its end is known only when its framing is sound; what it says of its
                    # term and chain is not trusted to judge the next entry
                    self.next_index, self.prev = i + 1, None
                    self.next_pos = -1 if damage.kind == HEADER else item.offset + item.size
                    out.entries += 1
                    out.bytes += item.size
                    out.damage = damage
                    return out
                i += 1
                out.entries += 1
                out.crc_absent += item.status == NO_CRC
                out.bytes += item.size
                pos = item.offset + item.size
                self.prev = (item.term, item.chain_crc)
            stop = scan.stop
            if stop is None or stop.reason == STOP_LIMIT or i > last:
                break
            if stop.reason in (STOP_BLANK, STOP_EOF):
                pos = f.end  # the next entry starts the next file
                continue
            return self._skip(out, Damage(HEADER, i, pos, _recorded_size(store, i), f.name, stop.offset - f.start,
                                          f"{stop.reason}: {stop.detail}" if stop.detail else stop.reason))
        self.next_index, self.next_pos = i, pos
        return out

    def _skip(self, out: Step, damage: Damage) -> Step:
        """End the step on ``damage`` of entry ``damage.index``, whose end is unknown: the
        next step finds the entry after it from its index record."""
        self.next_index, self.next_pos, self.prev = damage.index + 1, -1, None
        out.entries += 1
        out.damage = damage
        return out


def _start_of(store, index: int) -> int:
    """Where entry ``index`` starts, when the walk does not know: its index record's pos, or
    (that record being damaged) the end of the entry before, or the start of the first data
    file for the log's first entry; the first place whose header is that entry's. -1 when
    none is."""
    places = []
    rec = _record_or_none(store, index)
    if rec is not None:
        places.append(rec[1])
    before = _record_or_none(store, index - 1) if index > store.begin_index else None
    if before is not None:
        end = before[1] + before[2]
        places += [end, end - end % store.data.file_size + store.data.file_size]  # (or the next file's start)
    elif index == store.begin_index and store.data.files:
        places.append(store.data.files[0].start)
    for pos in places:
        f = store.data.find(pos)
        if f is None or f.mm is None or pos - f.start + HEADER_SIZE > f.actual_size:
            continue
        magic, size, hindex, _t, hpos = ENTRY_HEADER.unpack_from(f.mm, pos - f.start)[:5]
        if magic in ENTRY_MAGICS and hindex == index and hpos == pos and size >= HEADER_SIZE:
            return pos
    return -1


def _recorded_size(store, index: int) -> int:
    try:
        return store.reads.index_record(index)[2]
    except StoreCorruptError:
        return -1


def _index_damage(store, index: int, detail: str) -> Damage:
    off = index * INDEX_UNIT_SIZE
    f = store.index.find(off)
    return Damage(INDEX_RECORD_KIND, index, -1, -1, f.name if f is not None else "index", off - (f.start if f else 0),
                  detail)


def _judged(store, f, index: int, s) -> Damage | None:
    """The damage of a record the per-entry lane yielded as entry ``index`` (None: sound)."""
    rel = s.offset - f.start
    if s.index != index or s.status not in (BAD_BODY_CRC, BAD_CHAIN_CRC) and not s.healthy:
        return Damage(HEADER, index, s.offset, s.size, f.name, rel,
                      f"its header says entry {s.index} of term {s.term} ({s.status})")
    if s.status == BAD_BODY_CRC:
        return Damage(BODY_CRC, index, s.offset, s.size, f.name, rel, "the body's CRC is not the one recorded")
    if s.status == BAD_CHAIN_CRC:
        return Damage(CHAIN_CRC, index, s.offset, s.size, f.name, rel, "its chain CRC does not follow the entry before")
    try:
        rec = store.reads.index_record(index)
    except StoreCorruptError as exc:
        d = _index_damage(store, index, str(exc))
        return Damage(d.kind, index, s.offset, s.size, d.file, d.offset, d.detail)
    if rec == (s.magic, s.offset, s.size, s.index, s.term):
        return None
    said = f"record (magic, pos, size, index, term) {rec} but the entry is {(s.magic, s.offset, s.size, s.index, s.term)}"
    if (rec[0], rec[4]) != (s.magic, s.term):
        # which of the two is right is not known here (no CRC covers the magic, and the term
        # only where the chain was checked): the entry is taken from a replica, record and all
        return Damage(HEADER, index, s.offset, s.size, f.name, rel, said)
    d = _index_damage(store, index, said)  # (its pos, size and index: the walk vouches for the header's)
    return Damage(d.kind, index, s.offset, s.size, d.file, d.offset, d.detail)


class Mender:
    """The scrub's repairs of a writable FileStore (see the module's docstring). Each writes
    the page cache; the store's next flush makes it durable (the caller flushes at once)."""

    def __init__(self, store) -> None:
        self.store = store

    def index_record(self, damage: Damage) -> None:
        """Write entry ``damage.index``'s index record again from its header at
        ``damage.pos``, after checking that entry is whole there. StoreCorruptError if not."""
        s = self.store
        index, pos, size = damage.index, damage.pos, damage.size
        if pos < 0 or size < HEADER_SIZE:
            raise StoreCorruptError(f"entry {index}: where it lies is unknown, its index record cannot be rebuilt")
        raw = s.data.read(pos, size)
        _check_entry(raw, index, pos, size, prev_chain=None)
        magic, _size, _i, term = ENTRY_HEADER.unpack_from(raw)[:4]
        off = index * INDEX_UNIT_SIZE
        f = s.index.find(off)
        if f is None:
            raise StoreCorruptError(f"entry {index}: no index file holds its record")
        if off - f.start + INDEX_UNIT_SIZE <= f.actual_size and f.mm is not None:
            old = INDEX_RECORD.unpack_from(f.mm, off - f.start)
            if (old[0], old[4]) != (magic, term):
                raise StoreCorruptError(f"entry {index}: its header and index record disagree on magic or term, "
                                        "which only a replica's copy can settle")
        s.index.write_at(f, off - f.start, INDEX_RECORD.pack(magic, pos, size, index, term))
        s.reads.forget()

    def entry(self, damage: Damage, raw: bytes) -> None:
        """Overwrite damaged entry ``damage.index`` with ``raw``, a replica's copy of it, and
        write its index record. The copy must be that entry (index, position), pass its own
        CRCs when it has them, follow the chain of the entry before when that one is sound,
        and fill the entry's slot exactly (its recorded size, and where the next entry
        starts). StoreCorruptError, and nothing written, otherwise."""
        s = self.store
        index = damage.index
        rec = _record_or_none(s, index)
        pos = damage.pos if damage.pos >= 0 else (rec[1] if rec is not None else -1)
        if pos < 0:
            raise StoreCorruptError(f"entry {index}: where it lies is unknown")
        size = len(raw)
        slots = {n for n in (damage.size, rec[2] if rec is not None and rec[1] == pos else -1) if n >= HEADER_SIZE}
        nxt = _record_or_none(s, index + 1) if index < s.end_index else None
        if nxt is not None and s.data.find(nxt[1]) is s.data.find(pos):
            slots.add(nxt[1] - pos)
        if slots != {size}:
            raise StoreCorruptError(f"entry {index}: the replica's copy is {size} bytes, its slot here "
                                    f"{' or '.join(map(str, sorted(slots))) or 'unknown'}")
        prev_chain = None
        if index > s.begin_index:
            try:
                before = s.reads.get_bytes(index - 1)
                if _crc_ok(before):
                    prev_chain = ENTRY_HEADER.unpack_from(before)[6]
            except StoreCorruptError:
                pass
        elif index == 0:
            prev_chain = 0
        _check_entry(raw, index, pos, size, prev_chain)
        magic, _size, _i, term = ENTRY_HEADER.unpack_from(raw)[:4]
        f = s.data.find(pos)
        s.data.write_at(f, pos - f.start, raw)
        off = index * INDEX_UNIT_SIZE
        fi = s.index.find(off)
        if fi is not None:
            s.index.write_at(fi, off - fi.start, INDEX_RECORD.pack(magic, pos, size, index, term))
        s.reads.forget()


def _record_or_none(store, index: int):
    try:
        return store.reads.index_record(index)
    except StoreCorruptError:
        return None


def _crc_ok(raw) -> bool:
    bcrc, bsize = ENTRY_HEADER.unpack_from(raw)[7:9]
    chain = ENTRY_HEADER.unpack_from(raw)[6]
    return (bcrc == 0 and chain == 0) or crc32(memoryview(raw)[HEADER_SIZE:HEADER_SIZE + bsize]) & CRC_MASK == bcrc


def _check_entry(raw, index: int, pos: int, size: int, prev_chain: int | None) -> None:
    """StoreCorruptError unless ``raw`` is entry ``index`` of ``size`` bytes at ``pos`` whose
    recorded CRCs hold (the chain only when ``prev_chain`` is known)."""
    if len(raw) < HEADER_SIZE:
        raise StoreCorruptError(f"entry {index}: {len(raw)} bytes are too few for an entry")
    magic, hsize, hindex, term, hpos, _ch, chain, bcrc, bsize = ENTRY_HEADER.unpack_from(raw)
    if magic not in ENTRY_MAGICS or hsize != size or hsize != HEADER_SIZE + bsize or len(raw) != size:
        raise StoreCorruptError(f"entry {index}: the bytes are no whole entry of {size} bytes "
                                f"(magic {magic}, size {hsize}, bodySize {bsize})")
    if (hindex, hpos) != (index, pos):
        raise StoreCorruptError(f"entry {index}: the bytes are entry {hindex} at pos {hpos}, not at {pos}")
    if bcrc == 0 and chain == 0:
        return
    if crc32(memoryview(raw)[HEADER_SIZE:]) & CRC_MASK != bcrc:
        raise StoreCorruptError(f"entry {index}: the copy's body does not match its own CRC")
    if prev_chain is not None and crc32(CHAIN_INPUT.pack(prev_chain, index, term, bcrc)) & CRC_MASK != chain:
        raise StoreCorruptError(f"entry {index}: the copy's chain CRC does not follow the entry before")
