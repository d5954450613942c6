"""Consume queues: ``<store root>/consumequeue/<topic>/<queueId>/<20-digit first byte>``.

Each file holds 20-byte units (``ConsumeQueue.CQ_STORE_UNIT_SIZE``): the message's
commit-log offset (i64: in DLedger mode the entry's pos + 48), its size (i32) and its tag
code (i64: Java's hash of its tags, or a delay message's delivery time). Unit ``k`` of the
file named ``F`` is queue offset ``F / 20 + k``. Files are preallocated (300,000 units by
default); a queue ends at its first unit whose offset is negative or whose size is not
positive (``ConsumeQueue.recover``). A queue whose first unit was written at a queue
offset past 0 has the units before it filled with ``(0, Integer.MAX_VALUE, 0)``
(``fillPreBlank``): those are not units of messages.

Read-only: :func:`plan_units` finds where a queue's units are (one file in memory at a time),
:func:`read_piece` reads them a chunk at a time; :func:`read_units` reads them all.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..errors import NotAStoreError
from ..format import FILE_NAME_DIGITS, parse_decimal, parse_file_name, shown

CQ_STORE_UNIT_SIZE = 20  # ConsumeQueue.CQ_STORE_UNIT_SIZE
CQ_FILE_SIZE = 300000 * CQ_STORE_UNIT_SIZE  # MessageStoreConfig.mappedFileSizeConsumeQueue's default
CONSUME_QUEUE_DIR = "consumequeue"  # StorePathConfigHelper.getStorePathConsumeQueue
BLANK_SIZE = (1 << 31) - 1  # fillPreBlank's size: Integer.MAX_VALUE
UNIT = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])  # as the files hold them
UNIT_NATIVE = np.dtype([("offset", "=i8"), ("size", "=i4"), ("tags", "=i8")])  # Queue.units


class CqFile(NamedTuple):
    start: int  # the first byte (the file's name)
    path: str
    size: int


@dataclass
class Queue:
    """One consume queue's files, and the units they hold up to the queue's end."""

    topic: str  # its directory's name, bytes that are not UTF-8 escaped (format.shown)
    queue_id: int
    dir: str
    files: list[CqFile]  # in order
    first: int = -1  # queue offset of the first unit that points at a message (-1: none)
    units: np.ndarray | None = None  # UNIT_NATIVE, every segment's units, in order
    blanks: int = 0  # fillPreBlank units before ``first``
    # runs of units at consecutive queue offsets: (queue offset of the first, units); more
    # than one where a file is missing or short
    segments: list[tuple[int, np.ndarray]] = field(default_factory=list)
    damaged: list[tuple[str, int, str]] = field(default_factory=list)  # (file, byte offset in it, what is wrong)
    utf8: bool = True  # the directory's name is UTF-8 (else no topic of a message can be its)
    spans: list[tuple[int, int]] = field(default_factory=list)  # the segments as (first, count): plan_units
    count: int = 0  # units in all segments
    ascending: bool = True  # the units' commit-log offsets never go back

    @property
    def end(self) -> int:
        """The queue offset after the last unit (``first`` when there is none)."""
        return self.spans[-1][0] + self.spans[-1][1] if self.spans else self.first

    def file_of(self, queue_offset: int) -> tuple[str, int]:
        """The file that holds ``queue_offset``'s unit, and the unit's byte offset in it."""
        byte = queue_offset * CQ_STORE_UNIT_SIZE
        path, start = self.files[0].path, self.files[0].start
        for f in self.files:
            if f.start <= byte:
                path, start = f.path, f.start
        return _rel(self, path), byte - start


def expected_file(topic: str, queue_id: int, queue_offset: int, file_size: int) -> tuple[str, int]:
    """The file (relative to the store root) that holds ``queue_offset``'s unit in a queue
    of ``file_size`` files, and the unit's byte offset in it, whether the file exists or not."""
    byte = queue_offset * CQ_STORE_UNIT_SIZE
    start = byte - byte % file_size
    return os.path.join(CONSUME_QUEUE_DIR, topic, str(queue_id), f"{start:0{FILE_NAME_DIGITS}d}"), byte - start


def file_size(queues: list[Queue]) -> int:
    """The size of the store's consume-queue files: all are preallocated to the broker's
    ``mappedFileSizeConsumeQueue``, so the most common size (the default without a file)."""
    sizes = Counter(f.size for q in queues for f in q.files if f.size >= CQ_STORE_UNIT_SIZE)
    return max(sizes.items(), key=lambda kv: (kv[1], kv[0]))[0] if sizes else CQ_FILE_SIZE


def find_queues(root: str) -> list[Queue]:
    """Every consume queue under ``root/consumequeue`` (no units read yet), by topic and id."""
    base = os.path.join(root, CONSUME_QUEUE_DIR)
    out = []
    try:
        topics = sorted(os.listdir(base))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise NotAStoreError(f"{base}: {exc.strerror or exc}") from None
    for topic in topics:
        tdir = os.path.join(base, topic)
        if not os.path.isdir(tdir):
            continue
        ids = {qname: queue_id(qname) for qname in os.listdir(tdir)}
        for qname in sorted((n for n, i in ids.items() if i is not None), key=ids.__getitem__):
            qdir = os.path.join(tdir, qname)
            if not os.path.isdir(qdir):
                continue
            q = Queue(shown(topic), ids[qname], qdir, [], utf8=shown(topic) == topic)
            for n in sorted(os.listdir(qdir)):
                path = os.path.join(qdir, n)
                start = parse_file_name(n)
                if start is None:
                    q.damaged.append((_rel(q, path), 0, "its name is not a file's first byte (20 digits): not read"))
                    continue
                try:
                    st = os.stat(path)
                except OSError as exc:
                    q.damaged.append((_rel(q, path), 0, f"cannot be read: {exc.strerror or exc}"))
                    continue
                if stat.S_ISREG(st.st_mode):
                    q.files.append(CqFile(start, path, st.st_size))
                else:  # (opening a FIFO would wait for a writer forever)
                    q.damaged.append((_rel(q, path), 0, f"is {file_kind(st.st_mode)}, not a file: not read"))
            q.files.sort()
            out.append(q)
    return out


def queue_id(name: str) -> int | None:
    """The queue id a directory's name spells (as ``DefaultMessageStore.loadConsumeQueue``
    reads it: an int; ASCII digits only here), or None: the broker skips such a directory."""
    return parse_decimal(name, limit=(1 << 31) - 1)


def file_kind(mode: int) -> str:
    """'a FIFO', 'a directory', ... of a stat mode that is not a regular file's."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


_CHUNK = CQ_STORE_UNIT_SIZE << 16  # a preallocated file (6 MB by default) is read up to the chunk holding its end


def _file_units(path: str, limit: int, leading: bool) -> tuple:
    """A queue file's written units up to byte ``limit``, read a chunk at a time (as
    RocketMQ's recovery reads them: up to the first unit that is not written); with
    ``leading``, the fillPreBlank units it begins with are not counted as units. Returns
    (fillPreBlank units, units, first unit's offset, last unit's offset, whether their
    offsets never go back, whether an unwritten unit ended them, bytes read, file size)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # (never waits, should it no longer be a file)
    with open(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{file_kind(st.st_mode)}, not a file")
        lead = count = dlen = 0
        lo = hi = None
        asc, ended = True, False
        while dlen < limit:
            want = min(_CHUNK, limit - dlen)
            chunk = fh.read(want)
            dlen += len(chunk)
            units = np.frombuffer(chunk, UNIT, count=len(chunk) // CQ_STORE_UNIT_SIZE)
            written = (units["offset"] >= 0) & (units["size"] > 0)
            stop = int(np.argmin(written)) if not written.all() else len(units)
            units = units[:stop]
            if leading and not count:  # fillPreBlank units lead the queue's first file
                filler = (units["offset"] == 0) & (units["size"] == BLANK_SIZE) & (units["tags"] == 0)
                skip = int(np.argmin(filler)) if not filler.all() else len(units)
                lead += skip
                units = units[skip:]
            if len(units):
                offs = units["offset"]
                asc = asc and (hi is None or int(offs[0]) >= hi) and bool((offs[1:] >= offs[:-1]).all())
                lo = int(offs[0]) if lo is None else lo
                hi = int(offs[-1])
                count += len(units)
            if stop < len(written):
                ended = True
                break
            if len(chunk) < want:
                break
    return lead, count, lo, hi, asc, ended, dlen, st.st_size


class Piece(NamedTuple):
    """Units of one file to read: ``count`` from byte ``byte`` of ``path``, the first at queue offset ``at``."""

    at: int
    path: str
    byte: int
    count: int


def plan_units(q: Queue, fsize: int | None = None) -> list[Piece]:
    """Where ``q``'s units are (as RocketMQ's recovery reads them: up to the first unit that
    is not written), without keeping them: fills ``q.first``, ``q.blanks``, ``q.spans`` (runs
    of units at consecutive queue offsets: (first, count)), ``q.count``, ``q.ascending``
    (whether the units' commit-log offsets never go back) and ``q.damaged`` with each file
    that is missing between two others, of another size than ``fsize`` (the store's queue
    files', :func:`file_size`), overlapping the next, or unreadable. The files after such a
    one are read on (their names say their offsets). One file's units are in memory at a time."""
    fsize = fsize or file_size([q])
    pieces, first, blanks, expect, last = [], -1, 0, None, None
    ascending = True
    files = []
    for f in q.files:
        if f.start % CQ_STORE_UNIT_SIZE:
            q.damaged.append((_rel(q, f.path), 0, f"its name ({f.start}) is not a multiple of the "
                                                  f"{CQ_STORE_UNIT_SIZE}-byte unit: the file is not read"))
        else:
            files.append(f)
    for n, (start, path, size) in enumerate(files):
        gap = _rel(q, os.path.join(q.dir, f"{expect:0{FILE_NAME_DIGITS}d}")) if expect is not None else ""
        if expect is not None and start > expect and not any(d[0] == gap for d in q.damaged):
            more = -(-(start - expect) // fsize) - 1  # files missing after the first
            q.damaged.append((gap, 0,
                              f"is missing{f' (and {more} files after it)' if more > 0 else ''}, between "
                              f"{os.path.basename(files[n - 1].path)} and {os.path.basename(path)}: "
                              f"{_none(expect // CQ_STORE_UNIT_SIZE, start // CQ_STORE_UNIT_SIZE - 1)}"))
        # (a file's units past the next file's name are that file's: RocketMQ finds a unit's
        # file by name, findMappedFileByOffset)
        limit = files[n + 1].start - start if n + 1 < len(files) else size
        if size != fsize:
            what = f"holds {size} bytes, not {fsize} as the queue files do (RocketMQ's load refuses it)"
            if size > limit:
                what += f"; from byte {limit} on it overlaps {os.path.basename(files[n + 1].path)}, whose " \
                        "units are read there"
            elif n + 1 < len(files) and size < min(fsize, limit):
                lo = (start + size) // CQ_STORE_UNIT_SIZE
                hi = start // CQ_STORE_UNIT_SIZE + min(fsize, limit) // CQ_STORE_UNIT_SIZE - 1
                what += f": {_none(lo, hi)}"
            q.damaged.append((_rel(q, path), min(size, limit), what))
        try:
            got = _file_units(path, limit, first < 0)
        except OSError as exc:
            q.damaged.append((_rel(q, path), 0, f"cannot be read: {exc.strerror or exc}"))
            expect = start + fsize
            continue
        lead, count, lo, hi, asc, ended, dlen, size = got
        blanks += lead
        at = start // CQ_STORE_UNIT_SIZE + lead
        if count:
            if first < 0:
                first = at
            ascending = ascending and asc and (last is None or lo >= last)
            last = hi
            pieces.append(Piece(at, path, lead * CQ_STORE_UNIT_SIZE, count))
        if ended or dlen < min(size, limit):  # the queue ends in this file
            break
        expect = start + max(fsize, min(size, limit))
    spans: list[list] = []  # [first, end] of runs at consecutive offsets
    for p in pieces:
        if spans and spans[-1][1] == p.at:
            spans[-1][1] += p.count
        else:
            spans.append([p.at, p.at + p.count])
    q.spans = [(a, e - a) for a, e in spans]
    q.count = sum(p.count for p in pieces)
    q.first = first if pieces else (q.files[0].start // CQ_STORE_UNIT_SIZE + blanks if q.files else 0)
    q.blanks = blanks
    q.ascending = ascending
    return pieces


def read_piece(p: Piece, skip: int = 0, count: int | None = None) -> np.ndarray:
    """Units ``skip`` to ``skip + count`` of a piece (UNIT_NATIVE; fewer should the file have shrunk)."""
    count = p.count - skip if count is None else count
    fd = os.open(p.path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        data = os.pread(fd, count * CQ_STORE_UNIT_SIZE, p.byte + skip * CQ_STORE_UNIT_SIZE)
    finally:
        os.close(fd)
    return np.frombuffer(data, UNIT, count=len(data) // CQ_STORE_UNIT_SIZE).astype(UNIT_NATIVE)


def read_units(q: Queue, fsize: int | None = None) -> Queue:
    """:func:`plan_units`, and ``q.units`` and ``q.segments`` (the spans' units) read into memory."""
    pieces = plan_units(q, fsize)
    segments: list[tuple[int, list]] = []
    for p in pieces:
        u = read_piece(p)
        if segments and segments[-1][0] + sum(len(x) for x in segments[-1][1]) == p.at:
            segments[-1][1].append(u)
        else:
            segments.append((p.at, [u]))
    q.segments = [(at, np.concatenate(us, dtype=UNIT_NATIVE)) for at, us in segments]
    q.units = np.concatenate([u for _a, u in q.segments], dtype=UNIT_NATIVE) if pieces else np.empty(0, UNIT_NATIVE)
    return q


def offsets(lo: int, hi: int, word: str = "queue offset", words: str = "queue offsets") -> str:
    """'queue offset 3', 'queue offsets 2-3'."""
    return f"{word} {lo}" if lo == hi else f"{words} {lo}-{hi}"


def _none(lo: int, hi: int) -> str:
    return f"{offsets(lo, hi)} {'is' if lo == hi else 'are'} in no file"


def _rel(q: Queue, path: str) -> str:
    """``path`` relative to the store root (consumequeue/TOPIC/QUEUE/NAME)."""
    return shown(os.path.relpath(path, os.path.dirname(os.path.dirname(os.path.dirname(q.dir)))))
