"""``mq migrate``'s consume queues: where the new commit log must start for them
(:func:`log_start`) and each source queue rewritten at the same queue offsets, its units
pointing at the messages' new offsets (:func:`write_queues`; migrate.py says what the move
makes and why).

Rules kept here: a queue's units are read :data:`CHUNK` at a time (consumequeue.plan_units
finds where they are, read_piece reads a chunk), never a whole queue at once: a queue of a
30-million-message store holds about a million units, one of a billion-message store tens
of millions. Each queue is read twice, once to find where its kept units begin and end (and
whether one between them points where no message starts, which stops the move before the
queue is written) and once to write them; what is written is what the whole-queue rewrite
this replaced wrote (tests/rocketmq/test_mq_migrate_chunks.py holds them to each other).
"""

from __future__ import annotations

import os

import numpy as np

from ..writing import write_all
from .commitlog import file_name
from .consumequeue import BLANK_SIZE, CQ_STORE_UNIT_SIZE, UNIT, Piece, Queue, find_queues, plan_units, read_piece
from .consumequeue import file_size as file_size_of
from .moving import MigrateError, sync_files

CHUNK = 1 << 16  # units read (and written) at a time: 1.3 MB
# the blank unit (commit-log offset, size) of a queue left with no unit: see QueueFiles
LOW_BLANK = (1, 1)


def chunks(pieces: list[Piece]):
    """(position among the queue's units, units) of ``pieces``, at most CHUNK units at a time."""
    at = 0
    for p in pieces:
        for skip in range(0, p.count, CHUNK):
            units = read_piece(p, skip, min(CHUNK, p.count - skip))
            yield at, units
            at += len(units)
            if len(units) < min(CHUNK, p.count - skip):
                return  # (the file shrank: the queue ends here)


def _planned(q: Queue, fsize: int) -> list[Piece]:
    pieces = plan_units(q, fsize)
    if q.damaged:
        where, off, what = q.damaged[0]
        raise MigrateError(f"{where} (offset {off}): {what} (run 'dledgerctl mq check' on SRC)")
    return pieces


def _unit_at(pieces: list[Piece], k: int) -> np.ndarray | None:
    """The queue's unit at position ``k`` (None: it has fewer)."""
    for p in pieces:
        if k < p.count:
            got = read_piece(p, k, 1)
            return got[0] if len(got) else None
        k -= p.count
    return None


def log_start(src_root: str, src_first: int | None, file_size: int, cut: int | None = None) -> tuple[int, int]:
    """Where the new commit log starts: 0, or one file in when a queue will lead with
    fillPreBlank units (0, Integer.MAX_VALUE, 0), or be blank units only (see
    :class:`QueueFiles`); and the furthest unit's commit-log offset (-1: no unit).
    ``ConsumeQueue.correctMinOffset`` takes a queue's first unit whose offset is at or past
    the log's first as the queue's minimum; from a log at 0 that would be a blank, and
    ``getMessage`` reading from there rolls past the first commit-log file's messages
    (``rollNextFile``). Past the log's start, the blanks are below every message, as after
    RocketMQ deletes a log's head files. ``cut``: SRC's offset of the first message left out
    (past the committed index), None when none is. Fails on a damaged queue before anything
    is written."""
    queues = find_queues(src_root)
    fsize = file_size_of(queues)
    per_file = fsize // CQ_STORE_UNIT_SIZE
    start, furthest = 0, -1
    for q in queues:
        pieces = _planned(q, fsize)
        lead = 0  # units before src_first (all of them when there is no message)
        for _at, units in chunks(pieces):
            if len(units):
                furthest = max(furthest, int(units["offset"].max()))
            lead += len(units) if src_first is None else int(np.count_nonzero(units["offset"] < src_first))
        unit = _unit_at(pieces, lead)
        kept = unit is not None and (cut is None or int(unit["offset"]) < cut)
        # blanks lead the file of the queue's first kept unit unless that is the file's first;
        # a queue of blanks only gets its own, which must lie below the log (QueueFiles)
        if (q.first + lead) % per_file and kept or not kept and (q.count or q.blanks) and q.first + lead > 0:
            start = file_size
    return start, furthest


def _found(old: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(where each of ``offsets`` is among ``old``, whether it is there)."""
    if not len(old):
        return np.zeros(len(offsets), np.int64), np.zeros(len(offsets), bool)
    k = np.minimum(np.searchsorted(old, offsets), len(old) - 1)
    return k, old[k] == offsets


def write_queues(src_root: str, tmp: str, old: np.ndarray, new: np.ndarray, src_first: int, summary,
                 skipped: np.ndarray | None = None) -> None:
    """Every queue of SRC rewritten under ``tmp`` (migrate.Summary ``summary`` counts them).
    ``old``/``new``: each moved message's commit-log offset in SRC and in DEST (increasing);
    ``src_first``: the offset of SRC's first message (moved or not). ``skipped``: the SRC
    offsets (increasing) of damaged messages left out (``--skip-damaged``): their units keep
    their queue offsets as LOW_BLANK units, which a pull rolls past (the new log then starts
    one file in: migrate.py), so consumers' offsets stay valid."""
    queues = find_queues(src_root)
    fsize = file_size_of(queues)
    in_queue = 0
    written: list[str] = []
    for q in queues:
        pieces = _planned(q, fsize)
        if not q.count and not q.blanks:
            continue
        # leading units of messages no longer in the log become blanks, trailing ones of
        # left-out messages go; the kept ones between must all point at moved messages
        lead = stop = miss = None
        for at, units in chunks(pieces):
            if lead is None:
                after = np.flatnonzero(units["offset"] >= src_first)
                if len(after):
                    lead = at + int(after[0])
            found = _found(old, units["offset"])[1]
            if skipped is not None:
                found |= _found(skipped, units["offset"])[1]
            hits = np.flatnonzero(found)
            if len(hits):
                stop = at + int(hits[-1]) + 1
            if lead is not None and miss is None:
                misses = np.flatnonzero(~found[max(0, lead - at):])
                miss = at + max(0, lead - at) + int(misses[0]) if len(misses) else None
            if miss is not None and stop is not None and miss < stop:
                break  # (a unit between two kept ones points nowhere: the move stops)
        lead = q.count if lead is None else lead
        stop = lead if stop is None else max(stop, lead)
        if miss is not None and miss < stop:
            unit = _unit_at(pieces, miss)
            path, off = q.file_of(q.first + miss)
            raise MigrateError(f"{path} offset {off}: unit of queue offset {q.first + miss} points at "
                               f"{int(unit['offset'])}, where no message of the log starts (run 'dledgerctl mq "
                               f"check' on SRC)")
        summary.left_out_units += q.count - stop
        first_kept = q.first + lead
        if stop == lead and not first_kept:
            continue  # nothing of it stays: RocketMQ makes the queue again for its next message
        out = QueueFiles(os.path.join(tmp, os.path.relpath(q.dir, src_root)), first_kept, stop > lead, fsize)
        last = None
        for at, units in chunks(pieces):
            lo, hi = max(lead, at), min(stop, at + len(units))
            if lo < hi:
                kept = units[lo - at:hi - at].astype(UNIT)
                at_new, moved = _found(old, units["offset"][lo - at:hi - at])
                kept["offset"] = new[at_new] if len(new) else 0
                if not moved.all():  # (a damaged message left out: skipped)
                    kept["offset"][~moved], kept["size"][~moved], kept["tags"][~moved] = *LOW_BLANK, 0
                out.write(kept)
                last = kept[-1]
            if at + len(units) >= stop:
                break
        written += out.close()
        # ConsumeQueue.recover: the queue's maxPhysicOffset (offset + size of its last unit, a
        # blank one's too); DefaultMessageStore.start resumes dispatch at the largest, or at
        # the log's first offset when that is further (a blank-only queue's LOW_BLANK end is)
        end = int(last["offset"]) + int(last["size"]) if last is not None else sum(LOW_BLANK)
        summary.dispatched_until = max(summary.dispatched_until, end)
        summary.queues += 1
        summary.units += stop - lead
        in_queue += stop - lead
    sync_files(written)
    summary.undispatched = max(0, summary.messages - in_queue)


class QueueFiles:
    """One queue's new files: units from queue offset ``first`` on (:meth:`write`, in order),
    in files of ``fsize`` bytes named by first byte; the first file's units before ``first``
    are fillPreBlank units (0, Integer.MAX_VALUE, 0). A queue of no units (``units`` false)
    gets LOW_BLANK units instead (its max offset stays ``first``, so consumers' offsets stay
    valid): ``ConsumeQueue.recover`` takes every unit with offset >= 0 and size > 0 as
    written and the last one's offset + size as the queue's maxPhysicOffset, and
    ``DefaultMessageStore.start`` resumes dispatch at the largest of those: a fillPreBlank
    unit's would be 2 GiB, past anything the broker stores next. A LOW_BLANK unit's is 2,
    below the new log (which then starts one file in, :func:`log_start`), and a pull reading
    one finds no message there (``CommitLog.getMessage``: offset 1 lies before the log's
    first file; offset 0 would be served from the first file) and rolls on. Such a queue
    that ends at a file boundary gets the file before it, full of them (RocketMQ serves an
    empty file as a queue of one unit at offset 0). :meth:`close` returns the files' paths,
    written but not synced yet (moving.sync_files syncs them all at once)."""

    def __init__(self, qdir: str, first: int, units: bool, fsize: int) -> None:
        os.makedirs(qdir)
        self.dir, self.fsize = qdir, fsize
        start = first * CQ_STORE_UNIT_SIZE
        self.next = start - start % fsize  # the next file's first byte
        if not units and start == self.next:
            self.next -= fsize
        self.paths: list[str] = []
        self.fh = None
        self.room = 0  # bytes the open file takes yet
        blanks = (start - self.next) // CQ_STORE_UNIT_SIZE
        for lo in range(0, blanks, CHUNK):
            blank = np.zeros(min(CHUNK, blanks - lo), UNIT)
            blank["offset"], blank["size"] = LOW_BLANK if not units else (0, BLANK_SIZE)
            self.write(blank)

    def write(self, units: np.ndarray) -> None:
        data = memoryview(units.tobytes())
        while len(data):
            if not self.room:
                self._roll()
            take = min(self.room, len(data))
            write_all(self.fh, data[:take], self.paths[-1])
            self.room -= take
            data = data[take:]

    def _roll(self) -> None:
        self._end()
        self.paths.append(os.path.join(self.dir, file_name(self.next)))
        self.fh = open(self.paths[-1], "xb", buffering=0)
        self.room, self.next = self.fsize, self.next + self.fsize

    def _end(self) -> None:
        if self.fh is not None:
            fh, self.fh = self.fh, None
            with fh:
                fh.truncate(self.fsize)  # (sparse: no block is needed for the rest)

    def close(self) -> list[str]:
        self._end()
        return self.paths
