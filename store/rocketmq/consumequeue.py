"""Consume queues: ``<store root>/consumequeue/<topic>/<queueId>/<20-digit first byte>``.

Each file holds 20-byte units (``ConsumeQueue.CQ_STORE_UNIT_SIZE``): the message's
commit-log offset (i64: in DLedger mode the entry's pos + 48), its size (i32) and its tag
code (i64: Java's hash of its tags, or a delay message's delivery time). Unit ``k`` of the
file named ``F`` is queue offset ``F / 20 + k``. Files are preallocated (300,000 units by
default); a queue ends at its first unit whose offset is negative or whose size is not
positive (``ConsumeQueue.recover``). A queue whose first unit was written at a queue
offset past 0 has the units before it filled with ``(0, Integer.MAX_VALUE, 0)``
(``fillPreBlank``): those are not units of messages.

Read-only; the units come back as one numpy array per queue, read straight from the files.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..errors import NotAStoreError
from ..format import FILE_NAME_DIGITS

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

    topic: str
    queue_id: int
    dir: str
    files: list[CqFile]  # in order
    first: int = -1  # queue offset of the first unit that points at a message (-1: none)
    units: np.ndarray | None = None  # UNIT_NATIVE, from ``first`` on, up to the queue's end
    blanks: int = 0  # fillPreBlank units before ``first``
    damaged: str = ""  # why the files could not all be read (a gap between files, an unreadable one)

    @property
    def end(self) -> int:
        """The queue offset after the last unit (``first`` when there is none)."""
        return self.first + (0 if self.units is None else len(self.units))

    def file_of(self, queue_offset: int) -> tuple[str, int]:
        """The file that holds ``queue_offset``'s unit, and the unit's byte offset in it."""
        byte = queue_offset * CQ_STORE_UNIT_SIZE
        path, start = self.files[0].path, self.files[0].start
        for f in self.files:
            if f.start <= byte:
                path, start = f.path, f.start
        root = os.path.dirname(os.path.dirname(os.path.dirname(self.dir)))
        return os.path.relpath(path, root), byte - start


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
        for qname in sorted(os.listdir(tdir), key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0, n)):
            qdir = os.path.join(tdir, qname)
            if not (qname.isdigit() and os.path.isdir(qdir)):
                continue
            files = sorted(CqFile(int(n), os.path.join(qdir, n), os.path.getsize(os.path.join(qdir, n)))
                           for n in os.listdir(qdir) if len(n) == FILE_NAME_DIGITS and n.isdigit())
            out.append(Queue(topic, int(qname), qdir, files))
    return out


_CHUNK = CQ_STORE_UNIT_SIZE << 16  # a preallocated file (6 MB by default) is read up to the chunk holding its end


def _written(path: str) -> tuple[bytes, int]:
    """The bytes of a queue file up to (at least) its first unwritten unit, and its size."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        parts = []
        while True:
            chunk = fh.read(_CHUNK)
            parts.append(chunk)
            if len(chunk) < _CHUNK:
                break
            units = np.frombuffer(chunk, UNIT)
            if not ((units["offset"] >= 0) & (units["size"] > 0)).all():
                break
    return b"".join(parts), size


def read_units(q: Queue) -> Queue:
    """Fill ``q.first``, ``q.units`` and ``q.blanks`` from its files (as RocketMQ's recovery
    reads them: up to the first unit that is not written)."""
    parts, first, blanks, expect = [], -1, 0, None
    for start, path, _size in q.files:
        if start % CQ_STORE_UNIT_SIZE:
            q.damaged = f"{os.path.basename(path)} does not start at a unit"
            break
        if expect is not None and start != expect:
            q.damaged = f"{os.path.basename(path)} does not follow the file before it (a gap of " \
                        f"{(start - expect) // CQ_STORE_UNIT_SIZE} units)"
            break
        try:
            data, size = _written(path)
        except OSError as exc:
            q.damaged = f"{os.path.basename(path)}: {exc.strerror or exc}"
            break
        units = np.frombuffer(data, UNIT, count=len(data) // CQ_STORE_UNIT_SIZE)
        written = (units["offset"] >= 0) & (units["size"] > 0)
        stop = int(np.argmin(written)) if not written.all() else len(units)
        units = units[:stop]
        if first < 0:  # fillPreBlank units lead the queue's first file
            filler = (units["offset"] == 0) & (units["size"] == BLANK_SIZE) & (units["tags"] == 0)
            lead = int(np.argmin(filler)) if not filler.all() else len(units)
            blanks += lead
            units = units[lead:]
            if len(units):
                first = start // CQ_STORE_UNIT_SIZE + blanks
        if len(units):
            parts.append(units)
        if stop < len(written) or len(data) < size:  # the queue ends in this file
            break
        expect = start + size
    q.first = first if parts else (q.files[0][0] // CQ_STORE_UNIT_SIZE + blanks if q.files else 0)
    q.units = np.concatenate(parts, dtype=UNIT_NATIVE) if parts else np.empty(0, UNIT_NATIVE)
    q.blanks = blanks
    return q
