"""The file store: DLedger 0.2.x ``DLedgerMmapFileStore``-compatible data and index files.

Ownership: one :class:`FileStore` owns its node directory while open (a second writer on
the same directory is not detected; the node runtime takes a lock file). Not thread-safe:
the caller serialises calls, except that :meth:`flush` may run in another thread while no
append or truncate is running.

Durability: with ``flush="sync"`` every append/truncate call ends with an msync of what it
wrote (group commit is the caller batching bodies into one call); with ``flush="async"``
the caller calls :meth:`flush` periodically, as DLedger's flush service does.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import errno
import fcntl
import itertools
import os
from operator import itemgetter
from typing import Sequence

import numpy as np

from .base import Appended, AppendedBatch, AppendedRun, Entry, LogStore
from .batch import (
    INDEX_DTYPE,
    RUN_MIN,
    accept_pushed,
    encode_run,
    fit_in_file,
    gather_headers,
    headers_equal_records,
    prefix_true,
)
from .errors import (
    StoreInUseError,
    InconsistentAppend,
    IndexOutOfRange,
    PositionMismatch,
    StoreCorruptError,
    StoreIOError,
    StoreUsageError,
)
from .files import FileList, MappedFile, SyncJob
from .format import (
    BLANK_HEADER,
    BLANK_MAGIC,
    CHAIN_INPUT,
    CRC_MASK,
    DEFAULT_DATA_FILE_SIZE,
    DEFAULT_INDEX_FILE_SIZE,
    ENTRY_HEADER,
    ENTRY_MAGICS,
    HEADER_SIZE,
    INDEX_RECORD,
    INDEX_UNIT_SIZE,
    MAGIC_NORMAL,
    MIN_BLANK_LEN,
    crc32,
)
from .layout import NodeLayout
from .metafiles import read_checkpoint, write_checkpoint
from .packed import PackedBodies
from .recovery import RecoveryPlan, RecoveryReport, apply_recovery, plan_recovery

try:  # the per-entry lanes, compiled (store/_lanes.c); the Python lanes below when not built
    from . import _lanes
except ImportError:  # pragma: no cover - an install without a C compiler
    _lanes = None

FLUSH_POLICIES = ("async", "sync")
TAIL_BYTES = 8 << 20  # how much of its latest appends a leader keeps for read_entries


def detect_file_size(files: FileList, configured: int | None, default: int) -> int:
    """The size the existing files were written with (name spacing, else on-disk size).

    A lone file shorter than the configured size is no evidence of another size: it is a
    file cut short (a crash while it was being written or sized), which recovery grows back."""
    found = files.files
    spacing = {b.start - a.start for a, b in zip(found, found[1:]) if b.start > a.start}
    if len(found) >= 2 and len(spacing) >= 1:
        detected = min(spacing)
    elif found:
        detected = found[0].actual_size or None
        if configured is not None and detected is not None and detected < configured:
            detected = None
    else:
        detected = None
    if configured is not None:
        if detected is not None and detected != configured:
            raise StoreUsageError(
                f"{files.directory}: files were written with size {detected}, not the configured {configured}"
            )
        return configured
    return detected or default


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


def load_file_lists(data: FileList, index: FileList, data_file_size: int | None,
                    index_file_size: int | None) -> None:
    """List a node's data and index files and give both lists, and every file, the size the
    files were written with (a configured size that disagrees raises StoreUsageError)."""
    data.load()
    index.load()
    data.file_size = detect_file_size(data, data_file_size, DEFAULT_DATA_FILE_SIZE)
    index.file_size = detect_file_size(index, index_file_size, DEFAULT_INDEX_FILE_SIZE)
    for f in data.files:
        f.size = data.file_size
    for f in index.files:
        f.size = index.file_size


_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _preallocate(fd: int, size: int) -> None:
    """Reserve blocks so mapped writes cannot hit a full disk (SIGBUS); sparse if unsupported."""
    fallocate = getattr(_libc, "fallocate", None)
    if fallocate is None:
        return
    fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long)
    if fallocate(fd, 0, 0, size) != 0:
        err = ctypes.get_errno()
        if err == errno.ENOSPC:
            raise StoreIOError(errno.ENOSPC, "disk full: cannot allocate a new store file")
        # EOPNOTSUPP and friends: keep the sparse file, as Java's mmap would


class _PreallocatingFileList(FileList):
    def file_for_write(self, offset: int) -> MappedFile:
        existing = self.find(offset)
        if existing is not None:
            return existing
        start = offset - offset % self.file_size
        path = os.path.join(self.directory, f"{start:020d}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _preallocate(fd, self.file_size)
        except StoreIOError:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        return super().file_for_write(offset)


def lock_node_dir(layout: NodeLayout) -> int:
    """Take the node directory's exclusive lock; returns its fd (:func:`unlock_node_dir`
    releases it).

    A writable store holds it for as long as it is open, so a second writer (another node
    on the same directory, ``store truncate`` on a running node) is refused instead of
    corrupting the files. An flock dies with its process, so a crash leaves no stale lock.
    The file holds the holder's pid, only to name it in the error; the holder removes it
    when it lets go, so a finished or refused command leaves no file behind. A lock taken
    on a file that was removed meanwhile (its holder let go between our open and our
    flock) is not the lock: that is tried again."""
    for _ in range(8):
        try:
            os.makedirs(layout.node_dir, exist_ok=True)
            fd = os.open(layout.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreIOError(f"cannot create {layout.lock_path}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = ""
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                try:
                    holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                except OSError:
                    pass
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                who = f" (pid {holder})" if holder.isdigit() else ""
                raise StoreInUseError(f"{layout.node_dir} is in use by another process{who}; stop it first") from None
            raise StoreIOError(f"cannot lock {layout.lock_path}: {exc.strerror}") from exc
        held = os.fstat(fd)
        try:
            named = os.stat(layout.lock_path)
        except OSError:
            named = None
        if named is None or (named.st_dev, named.st_ino) != (held.st_dev, held.st_ino):
            os.close(fd)  # (locked a file its holder removed as it let go)
            continue
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the pid is informational
        return fd
    raise StoreInUseError(f"{layout.node_dir}: its lock file keeps being replaced; is another process taking it?")


def unlock_node_dir(layout: NodeLayout, fd: int) -> None:
    """Let go of :func:`lock_node_dir`'s lock: remove the file while it is still held (so
    nobody can lock it after), then close it."""
    try:
        os.unlink(layout.lock_path)
    except OSError:
        pass
    os.close(fd)


# The messages of the checks of FileStore._check_entries (and of store._lanes.check_entries,
# which names its failures the same way), by name; the values follow the name in a failure.
# an index record (format.INDEX_RECORD: magic, pos, size, index, term) as numpy reads it
_INDEX_DTYPE = np.dtype([("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8")])
assert _INDEX_DTYPE.itemsize == INDEX_UNIT_SIZE

_CHECK_FAILURES = {
    "trailing": "{} trailing bytes are not an entry header",
    "malformed": "malformed entry at byte {} of the batch (magic {}, size {})",
    "index": "entry index {} does not follow the local end {}",
    "term_low": "entry {} has term {} below the local last term {}",
    "term_high": "entry {} has term {} above the leader's term {}",
    "crc": "entry {}: body checksum does not match",
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


class FileStore(LogStore):
    def __init__(self, layout: NodeLayout, data: FileList, index: FileList, *, flush: str, read_only: bool,
                 with_crc: bool = True) -> None:
        if flush not in FLUSH_POLICIES:
            raise StoreUsageError(f"flush policy must be one of {', '.join(FLUSH_POLICIES)}")
        self.layout = layout
        self.data = data
        self.index = index
        self.flush_policy = flush
        self.read_only = read_only
        self.with_crc = with_crc
        self.begin_index = -1
        self.end_index = -1
        self.end_term = 0
        self.write_pos = 0
        self.last_chain = 0
        self._committed = -1
        self.plan: RecoveryPlan | None = None
        self.recovery: RecoveryReport | None = None
        self.checkpoint_committed: int | None = None  # as the checkpoint file says, before recovery's clamp
        self.checkpoint_problem: str | None = None  # why the checkpoint (main file) was not used
        self._lock_fd = -1
        self._owns_lock = False
        self.closed = False
        self._reached = self._index_reached = 0  # how far the call under way wrote (see _undo)
        self._last_read = None  # (arguments, end_index), answer: see read_entries
        self._tail: list[tuple[int, list[int], bytes] | None] = []  # the leader's latest writes: see read_entries
        self._tail_head = 0  # _tail[:_tail_head] are dropped (deleted in bulk: dropping one at a time was O(n))
        self._tail_bytes = 0
        # remover(paths): unlinks head files deleted by delete_head, in order, elsewhere (a
        # node's thread); None unlinks them inline
        self.remover = None

    # -- opening and closing ----------------------------------------------------------
    @classmethod
    def open(
        cls,
        node_dir: str,
        *,
        data_file_size: int | None = None,
        index_file_size: int | None = None,
        flush: str = "async",
        read_only: bool = False,
        with_crc: bool = True,
        lock_fd: int | None = None,
        drop_behind: int = 0,
    ) -> "FileStore":
        """Open (creating it if writable) and recover a node directory.

        Read-only stores plan recovery but change nothing on disk; they serve reads up to
        the end the plan found. A writable store holds the directory's lock while open;
        a caller that already holds it (``lock_node_dir``) passes ``lock_fd`` and keeps
        ownership: the store then neither takes nor releases the lock. ``drop_behind``
        (bytes, 0 for none): see :meth:`take_dirty`.
        """
        layout = NodeLayout(node_dir)
        if read_only and not os.path.isdir(node_dir):
            raise StoreUsageError(f"{node_dir}: no such directory")
        if index_file_size is not None and index_file_size % INDEX_UNIT_SIZE:
            raise StoreUsageError(f"index file size must be a multiple of {INDEX_UNIT_SIZE}")
        store = None
        list_cls = FileList if read_only else _PreallocatingFileList
        data = list_cls(layout.data_dir, data_file_size or DEFAULT_DATA_FILE_SIZE, writable=not read_only)
        index = list_cls(layout.index_dir, index_file_size or DEFAULT_INDEX_FILE_SIZE, writable=not read_only)
        if drop_behind < 0:
            raise StoreUsageError("drop-behind must not be negative")
        data.drop_behind = drop_behind
        try:
            load_file_lists(data, index, data_file_size, index_file_size)
            if data.file_size < HEADER_SIZE + MIN_BLANK_LEN:
                raise StoreUsageError(f"data file size {data.file_size} is too small")
            store = cls(layout, data, index, flush=flush, read_only=read_only, with_crc=with_crc)
            if not read_only and lock_fd is None:  # before recovery writes anything
                store._lock_fd = lock_node_dir(layout)
                store._owns_lock = True
            store._recover()
            if not read_only:
                data.set_random_access()
        except BaseException:
            data.close()
            index.close()
            if store is not None and store._owns_lock:
                unlock_node_dir(layout, store._lock_fd)
            raise
        return store

    def _recover(self) -> None:
        plan = plan_recovery(self.data, self.index)
        self.plan = plan
        if not self.read_only:
            self.recovery = apply_recovery(plan, self.data, self.index)
        self.begin_index, self.end_index, self.end_term = plan.begin_index, plan.end_index, plan.end_term
        self.write_pos, self.last_chain = plan.end_pos, plan.last_chain
        if self.end_index < 0:
            self.end_term = 0
        # The committed index is an optimisation (a node re-learns it from the leader), so
        # an unreadable checkpoint is reported, not fatal: the store opens with committed
        # index -1, and a writable store rewrites the file on close.
        try:
            cp = read_checkpoint(self.layout.node_dir)
        except StoreCorruptError as exc:
            self.checkpoint_problem = str(exc)
            return
        self.checkpoint_problem = cp.problem
        self.checkpoint_committed = cp.committed_index
        if cp.committed_index is not None:
            self._committed = min(cp.committed_index, self.end_index)

    def recovery_dropped(self) -> tuple[int, int]:
        """How many entries recovery dropped at open, and how many of those the checkpoint
        had recorded as committed: (0, 0) when it dropped none."""
        plan = getattr(self, "plan", None)
        if plan is None or plan.dropped_to <= plan.end_index:
            return 0, 0
        committed = getattr(self, "checkpoint_committed", None)
        below = 0 if committed is None else max(0, min(committed, plan.dropped_to) - plan.end_index)
        return plan.dropped_to - plan.end_index, below

    def recovery_warning(self) -> str | None:
        """What recovery dropped at open, in one line for an operator (None when nothing):
        which entries, why (file, offset, the check that failed), and whether the checkpoint
        had recorded any of them as committed (those must come back from the leader)."""
        plan = getattr(self, "plan", None)
        if plan is None or (plan.dropped_to <= plan.end_index and not plan.dropped_bytes):
            return None
        what = (f"entries {plan.end_index + 1}..{plan.dropped_to}" if plan.dropped_to > plan.end_index
                else "a partial entry")
        done = "cut" if not self.read_only else "would cut (opened read-only: nothing changed)"
        out = (f"recovery {done} {what} ({plan.dropped_bytes} bytes of data after entry {plan.end_index}): "
               f"{plan.end_reason}")
        committed = getattr(self, "checkpoint_committed", None)
        if committed is not None and committed > plan.end_index:
            out += (f"; the checkpoint recorded entries up to {committed} as committed, so entries "
                    f"{plan.end_index + 1}..{committed} were committed here and must come back from the leader")
        return out

    def close(self) -> None:
        if self.closed:
            return
        try:
            if not self.read_only:
                self.flush()
                self.persist_checkpoint()
        finally:
            self.data.close()
            self.index.close()
            self.closed = True
            if self._owns_lock:
                unlock_node_dir(self.layout, self._lock_fd)
                self._owns_lock, self._lock_fd = False, -1

    def __enter__(self) -> "FileStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- committed index and checkpoint -----------------------------------------------
    @property
    def committed_index(self) -> int:
        return self._committed

    def set_committed(self, index: int) -> int:
        index = min(index, self.end_index)
        if index > self._committed:
            self._committed = index
        return self._committed

    def persist_checkpoint(self) -> None:
        self._writable()
        write_checkpoint(self.layout.node_dir, self.end_index, self._committed)

    def flush(self, *, index: bool = True) -> None:
        """Make what was written durable; with ``index=False`` only the data files.

        The entries are durable once their data files are: recovery checks every index
        record of the last files against the data and rebuilds those that are missing or
        wrong, so an acknowledgement that waits for the disk (flush=sync) need not also
        wait for the index file's own sync. The periodic flush covers the index."""
        if not self.read_only:
            self.data.flush()
            if index:
                self.index.flush()

    def take_dirty(self, *, index: bool = True) -> list[SyncJob]:
        """For a background flush: jobs to hand to :func:`store.files.sync_fds` in a thread
        (data files first; index files too unless ``index=False``, see :meth:`flush`).
        Data files drop flushed pages from the page cache behind the last ``drop_behind``
        bytes written (:meth:`store.files.FileList.take_dirty`); index files keep theirs
        (32 bytes an entry, read at random by GETs)."""
        if self.read_only:
            return []
        return self.data.take_dirty() + (self.index.take_dirty() if index else [])

    # -- appending --------------------------------------------------------------------
    def _writable(self) -> None:
        if self.read_only:
            raise StoreUsageError(f"{self.layout.node_dir} is open read-only")
        if self.closed:
            raise StoreUsageError("store is closed")

    def _place(self, size: int) -> tuple[MappedFile, int]:
        """Where an entry of ``size`` bytes goes: (file, relative offset). Writes the BLANK
        padding and moves to the next file when the entry plus a BLANK header would not fit."""
        fsize = self.data.file_size
        if size + MIN_BLANK_LEN > fsize:
            raise StoreUsageError(f"entry of {size} bytes does not fit a {fsize}-byte data file")
        pos = self.write_pos
        rel = pos % fsize
        if size + MIN_BLANK_LEN > fsize - rel:
            f = self.data.file_for_write(pos)
            self._reached = max(self._reached, pos + BLANK_HEADER.size)
            self.data.write_at(f, rel, BLANK_HEADER.pack(BLANK_MAGIC, fsize - rel))
            pos += fsize - rel
            self.write_pos = pos
            rel = 0
        return self.data.file_for_write(pos), rel

    def _index_file(self, index: int) -> tuple[MappedFile, int]:
        off = index * INDEX_UNIT_SIZE
        f = self.index.file_for_write(off)
        return f, off - f.start

    # -- putting back a write that failed half-way ----------------------------------------
    def _undo_point(self) -> tuple:
        self._reached, self._index_reached = self.write_pos, (self.end_index + 1) * INDEX_UNIT_SIZE
        return (self.begin_index, self.end_index, self.end_term, self.write_pos, self.last_chain,
                len(self.data.files), len(self.index.files))

    def _undo(self, point: tuple) -> None:
        """Put the log back as it was at ``point`` after a write failed part-way (a full
        disk when a new file is needed, ...): the bytes written since are zeroed, so no
        refused entry can come back when the store is opened again, and the files created
        since are removed. The zeros go where bytes were written, so they need no new
        blocks."""
        begin, end, end_term, pos, chain, ndata, nindex = point
        self._forget_reads()
        _clear(self.data, pos, max(self.write_pos, self._reached))
        _clear(self.index, (end + 1) * INDEX_UNIT_SIZE, self._index_reached)
        if len(self.data.files) > ndata:
            self.data.remove_from(self.data.files[ndata].start)
        if len(self.index.files) > nindex:
            self.index.remove_from(self.index.files[nindex].start)
        self.begin_index, self.end_index, self.end_term, self.write_pos, self.last_chain = begin, end, end_term, pos, chain

    def append_leader(self, bodies: Sequence[bytes], term: int, magic: int = MAGIC_NORMAL) -> Sequence[Appended]:
        self._writable()
        if term < self.end_term:
            raise StoreUsageError(f"term {term} is lower than the log's last term {self.end_term}")
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
        undo = self._undo_point()
        try:
            parts = self._leader_write(bodies, term, magic)
        except BaseException:
            self._undo(undo)  # a full disk half-way: the batch is not appended at all
            raise
        if self.flush_policy == "sync":
            self.flush()
        return parts[0] if len(parts) == 1 else AppendedBatch.of(parts)

    def _leader_write(self, bodies: Sequence[bytes], term: int, magic: int) -> list[Sequence[Appended]]:
        # Entries that go to the same data file are encoded into one buffer and written
        # with one copy; their index records likewise. The compiled lane (store/_lanes.c)
        # encodes them when it is built; else stretches of RUN_MIN or more entries are
        # encoded by the run lane (store/batch.py), the rest one by one in Python.
        parts: list[Sequence[Appended]] = []
        fsize = self.data.file_size
        nbodies = len(bodies)
        sizes = None
        i = 0
        while i < nbodies:
            dfile, seg_rel = self._place(HEADER_SIZE + len(bodies[i]))  # writes the BLANK padding if the file is full
            room = fsize - seg_rel
            if nbodies - i >= RUN_MIN and _lanes is None:  # (the compiled lane is faster at any length)
                if sizes is None:
                    sizes = np.fromiter(map(len, bodies), dtype=np.int64, count=nbodies) + HEADER_SIZE
                k = fit_in_file(sizes[i:], room)
                if k >= RUN_MIN:
                    pos, first = self.write_pos, self.end_index + 1
                    seg, records, run_sizes, chain = encode_run(bodies[i:i + k], first, term, magic, pos,
                                                                self.last_chain, self.with_crc)
                    self._write_segment(dfile, seg_rel, seg, first, records, first + k - 1, term, chain)
                    self._remember(first, list(itertools.accumulate(run_sizes.tolist())), seg)
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
        if _lanes is not None:
            pos, first = self.write_pos, self.end_index + 1
            if isinstance(bodies, PackedBodies):
                encode, bodies = _lanes.encode_packed, bodies.runs
            else:
                encode = _lanes.encode_entries
            seg, records, ends, i, chain = encode(
                bodies, i, first, term, magic, pos, self.last_chain, self.with_crc, self.data.file_size - seg_rel)
            self._write_segment(dfile, seg_rel, seg, first, records, first + len(ends) - 1, term, chain)
            self._remember(first, ends, seg)
            parts.append(AppendedRun(first, pos, ends, term))
            return i
        out: list[Appended] = []
        pack_header = ENTRY_HEADER.pack
        pack_index = INDEX_RECORD.pack
        chain_pack = CHAIN_INPUT.pack
        crc = crc32
        with_crc = self.with_crc
        pos = self.write_pos
        room = self.data.file_size - seg_rel
        first_idx = idx = self.end_index + 1
        chain = self.last_chain
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
        self._remember(first_idx, list(itertools.accumulate(a.size for a in out)), seg)
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
        self.write_pos = dfile.start + seg_rel + used
        self.end_index, self.end_term, self.last_chain = last, last_term, last_chain
        if self.begin_index < 0:
            self.begin_index = first

    def append_follower(self, raw, *, max_term: int | None = None) -> Sequence[Appended]:
        """Store entries encoded by the leader, byte for byte, at the leader's positions.

        Entries are checked (framing, index continuity, term order and at most
        ``max_term``, body checksum when recorded, pos); the ones that go to the same data
        file are then written with one copy, and their index records with one more. The
        compiled per-entry lane (store/_lanes.c) checks them when it is built; else long
        stretches are checked by the run lane (store/batch.py), which only accepts, and
        the Python per-entry lane judges the rest. When an entry fails a check, the ones before it
        are kept and InconsistentAppend is raised. When a write fails (StoreIOError: a full
        disk, ...), nothing of the call is kept."""
        self._writable()
        self._forget_reads()
        buf = memoryview(raw)
        n = len(buf)
        off = 0
        parts: list[Sequence[Appended]] = []
        error: InconsistentAppend | None = None
        fsize = self.data.file_size
        undo = self._undo_point()
        try:
            while off < n and error is None:
                if _lanes is not None:  # the compiled lane is faster than the run lane at any length
                    off, error = self._follow_entries(buf, off, n, max_term, parts)
                    continue
                run = accept_pushed(buf, off, n, end_index=self.end_index, end_term=self.end_term,
                                    write_pos=self.write_pos, file_size=fsize, max_term=max_term)
                if run is not None:
                    dfile, seg_rel = self._place(int(run.size[0]))
                    self._write_segment(dfile, seg_rel, buf[off : off + run.nbytes], self.end_index + 1,
                                        run.index_records(), int(run.index[-1]), int(run.term[-1]),
                                        run.last_chain)
                    parts.append(AppendedBatch(run.index, run.term, run.pos, run.size))
                    off += run.nbytes
                    continue
                off, error = self._follow_entries(buf, off, RUN_MIN, max_term, parts)
        except BaseException:
            self._undo(undo)
            raise
        finally:
            buf.release()
        if self.flush_policy == "sync" and parts:
            self.flush()
        if error is not None:
            raise error
        return parts[0] if len(parts) == 1 else AppendedBatch.of(parts)

    def _follow_entries(self, buf, off: int, limit: int, max_term: int | None,
                        parts: list) -> tuple[int, InconsistentAppend | None]:
        """The per-entry lane of append_follower: at most ``limit`` entries from ``off``,
        within one data file. Returns where it stopped and the error that stopped it.
        Compiled when store._lanes is built (``_check_entries`` is what it does)."""
        first = self.end_index + 1
        check = _lanes.check_entries if _lanes is not None else self._check_entries
        stop, ends, terms, records, chain, first_pos, failed = check(
            buf, off, limit, self.end_index, self.end_term, max_term, self.write_pos, self.data.file_size)
        if ends:
            dfile, seg_rel = self._place(ends[0])  # writes the BLANK padding if the file is full
            self._write_segment(dfile, seg_rel, buf[off:stop], first, records, first + len(ends) - 1, terms[-1],
                                chain)
            parts.append(AppendedRun(first, first_pos, ends, terms))
        return stop, None if failed is None else _append_error(failed)

    @staticmethod
    def _check_entries(buf, off: int, limit: int, idx: int, last_term: int, max_term: int | None,
                       write_pos: int, fsize: int) -> tuple:
        """Check at most ``limit`` pushed entries of ``buf`` from ``off`` against a log
        ending at ``idx`` / ``last_term`` / ``write_pos``, within one data file (the
        first may start the next file; a later one that does ends the run). Returns
        (stop, ends, terms, index records, last chain CRC, first pos, failure): each
        accepted entry's end offset from ``off`` and its term, and None or the check that
        failed, (name, values...), for :func:`_check_failure`. store._lanes.check_entries
        does the same, compiled."""
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
            off += size
        return off, ends, terms, b"".join(records), chain, first_pos, failed

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

    # -- reading ----------------------------------------------------------------------
    def indexes_with_magic(self, magic: int) -> list[int]:
        """The indexes of the entries of ``magic`` (config entries are few: found from the
        index files, 32 bytes an entry, a file's worth at a time)."""
        if self.begin_index < 0:
            return []
        out: list[int] = []
        lo, hi = self.begin_index * INDEX_UNIT_SIZE, (self.end_index + 1) * INDEX_UNIT_SIZE
        for f in self.index.files:
            a, b = max(lo, f.start), min(hi, f.start + f.actual_size)
            if a >= b or f.mm is None:
                continue
            recs = np.frombuffer(f.mm, dtype=_INDEX_DTYPE, count=(b - a) // INDEX_UNIT_SIZE, offset=a - f.start)
            out.extend(int(i) for i in recs["index"][recs["magic"] == magic])
        return out

    def _index_record(self, index: int) -> tuple[int, int, int, int, int]:
        self.check_range(index)
        off = index * INDEX_UNIT_SIZE
        f = self.index.find(off)
        if f is None or f.mm is None or off - f.start + INDEX_UNIT_SIZE > f.actual_size:
            raise StoreCorruptError(f"index record of entry {index} is missing")
        rec = INDEX_RECORD.unpack_from(f.mm, off - f.start)
        if rec[3] != index:
            raise StoreCorruptError(f"index record at {off} is for entry {rec[3]}, not {index}")
        return rec

    def locate(self, index: int) -> tuple[int, int]:
        """(pos, size) of an entry, from its index record."""
        _m, pos, size, _i, _t = self._index_record(index)
        return pos, size

    def term_of(self, index: int) -> int:
        return self._index_record(index)[4]

    def get_bytes(self, index: int) -> bytes:
        pos, size = self.locate(index)
        # A damaged index record (read-only stores, or before recovery's window) must not
        # serve other bytes: the header found there must say this index, size and pos.
        if size < HEADER_SIZE:
            raise StoreCorruptError(f"index record of entry {index} gives size {size}")
        raw = self.data.read(pos, size)
        _magic, hsize, hindex, _term, hpos = ENTRY_HEADER.unpack_from(raw)[:5]
        if (hindex, hsize, hpos) != (index, size, pos):
            raise StoreCorruptError(f"data at pos {pos} is not entry {index} of {size} bytes")
        return raw

    def get(self, index: int) -> Entry:
        raw = self.get_bytes(index)
        magic, size, idx, term, pos, channel, chain, bcrc, bsize = ENTRY_HEADER.unpack_from(raw)
        return Entry(idx, term, pos, magic, raw[HEADER_SIZE:size], bcrc, chain, channel)

    def _forget_reads(self) -> None:
        """The log was cut or written by someone other than the leader's own appends: what
        read_entries remembers no longer holds."""
        self._last_read = None
        self._tail, self._tail_head, self._tail_bytes = [], 0, 0

    def _remember(self, first: int, ends: list[int], data) -> None:
        """Keep the encoded entries a leader append just wrote (``first`` on, laid end to
        end in ``data``, entry k ending at ``ends[k]``, all in one data file): its
        followers are about to ask for exactly these, and read_entries serves them from
        here instead of reading back what it wrote. The newest TAIL_BYTES are kept (with
        single-entry appends of 100 bytes, some 56,000 writes: dropping the oldest and
        finding one are O(1) and O(log n), not a list's pop(0) and a walk)."""
        tail = self._tail
        tail.append((first, ends, data if isinstance(data, bytes) else bytes(data)))
        self._tail_bytes += ends[-1]
        head = self._tail_head
        while self._tail_bytes > TAIL_BYTES and len(tail) - head > 1:
            self._tail_bytes -= tail[head][1][-1]
            tail[head] = None  # its bytes go now (bisection never looks before the head)
            head += 1
        if head > 1024 and head * 2 > len(tail):
            del tail[:head]
            head = 0
        self._tail_head = head

    def _from_tail(self, first: int, max_count: int, max_bytes: int) -> tuple[bytes | memoryview, int] | None:
        """read_entries' answer from the remembered writes, when one of them holds it
        whole: ``first`` is in it, and the answer stops inside it or at the log's end.
        None otherwise (the files answer)."""
        k = bisect.bisect_right(self._tail, first, self._tail_head, key=itemgetter(0)) - 1
        if k < self._tail_head:
            return None
        f0, ends, data = self._tail[k]
        i = first - f0
        if i >= len(ends):
            return None
        start = ends[i - 1] if i else 0
        stop = min(len(ends), i + max(1, max_count))
        j = max(i + 1, bisect.bisect_right(ends, start + max_bytes, i + 1, stop))
        if j == len(ends) and j - i < max_count and f0 + j - 1 < self.end_index:
            return None  # it may go on into the next write: one read from the files says
        if start == 0 and j == len(ends):
            return data, j - i
        # a view, not a copy: with batches of 1,024 entries of 1 KiB, the copies of the
        # pushes' megabytes were a tenth of a leader's CPU per entry (the bytes are immutable)
        return memoryview(data)[start : ends[j - 1]], j - i

    def read_entries(self, first: int, max_count: int, max_bytes: int) -> tuple[bytes | memoryview, int]:
        """Encoded entries from ``first`` on: at least one entry, at most ``max_count``
        entries and (beyond the first) ``max_bytes`` bytes, with their count. Entries within
        one data file are contiguous, so each file's share is one read; every header read
        is checked against its index record, so a damaged index record cannot serve other
        bytes.

        Entries a leader has just appended are not read back: they are served from the
        bytes it wrote (``_remember``), up to the end of the append that holds ``first``.
        The last answer is kept too: a leader's followers usually ask for the same entries
        one right after the other. Both are forgotten when the log is cut or written by a
        follower's append; the last answer is reused only while the log ends where it did
        (a leader's own appends only add entries after the end)."""
        key = (first, max_count, max_bytes, self.end_index)
        last = self._last_read
        if last is not None and last[0] == key:
            return last[1]
        self.check_range(first)
        answer = self._from_tail(first, max_count, max_bytes) if self._tail else None
        if answer is not None:
            self._last_read = key, answer
            return answer
        parts: list[bytes] = []
        budget = max_bytes
        count = max(1, max_count)
        idx = first
        while count > 0 and idx <= self.end_index:
            got = self._raw_in_file(idx, count, budget, first_part=not parts)
            if not got:
                break
            parts.append(got[0])
            idx += got[1]
            count -= got[1]
            budget -= len(got[0])
        answer = (parts[0] if len(parts) == 1 else b"".join(parts)), idx - first
        self._last_read = key, answer
        return answer

    def _raw_in_file(self, first: int, max_count: int, budget: int, first_part: bool):
        """(bytes, entry count) of entries from ``first`` within its data file, or None when
        not even one fits ``budget`` (the very first entry of a call always fits)."""
        pos0, size0 = self.locate(first)
        if size0 > budget and not first_part:
            return None
        fsize = self.data.file_size
        limit = min(pos0 + max(budget, size0), pos0 - pos0 % fsize + fsize)
        if max_count >= RUN_MIN and self.end_index - first + 1 >= RUN_MIN:
            got = self._raw_run(first, max_count, pos0, limit)
            if got is not None:
                return got
        lo, hi = first, min(self.end_index, first + max_count - 1)

        def end_of(k: int) -> int:
            p, n = self.locate(k)
            return p + n

        if end_of(hi) > limit:  # the largest k whose end stays within limit (first always does)
            hi -= 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if end_of(mid) <= limit:
                    lo = mid
                else:
                    hi = mid - 1
        total = end_of(hi) - pos0
        if total < HEADER_SIZE:
            raise StoreCorruptError(f"index records from entry {first} do not describe contiguous entries")
        raw = self.data.read(pos0, total)
        off, idx, unpack = 0, first, ENTRY_HEADER.unpack_from
        while off < total:
            if total - off < HEADER_SIZE:
                raise StoreCorruptError(f"entries from {first}: {total - off} stray bytes at pos {pos0 + off}")
            _m, size, hindex, _t, hpos = unpack(raw, off)[:5]
            if hindex != idx or hpos != pos0 + off or size < HEADER_SIZE or off + size > total:
                raise StoreCorruptError(f"data at pos {pos0 + off} is not entry {idx} (index records disagree)")
            off += size
            idx += 1
        return raw, idx - first

    def _raw_run(self, first: int, max_count: int, pos0: int, limit: int):
        """The run lane of :meth:`_raw_in_file`: the index records of up to ``max_count``
        entries from ``first`` read at once (the same range the per-entry lane searches);
        when all of them are contiguous, the ones that end by ``limit``, if their headers
        equal their records. None otherwise: the per-entry lane then serves the call or
        names the problem, so both lanes answer alike."""
        off = first * INDEX_UNIT_SIZE
        ifile = self.index.find(off)
        if ifile is None or ifile.mm is None:
            return None
        r = off - ifile.start
        n = min(max_count, self.end_index - first + 1, (ifile.actual_size - r) // INDEX_UNIT_SIZE)
        if n < RUN_MIN:
            return None
        rec = np.frombuffer(ifile.mm, dtype=INDEX_DTYPE, count=n, offset=r)
        pos = rec["pos"].astype(np.int64)
        ends = pos + rec["size"].astype(np.int64)
        ok = (rec["index"] == np.arange(first, first + n, dtype=np.int64)) & (ends - pos >= HEADER_SIZE)
        ok[0] &= bool(pos[0] == pos0)
        ok[1:] &= pos[1:] == ends[:-1]
        if prefix_true(ok) < n:
            return None  # a record that disagrees: the per-entry lane decides what that means
        take = prefix_true(ends <= limit)
        if take == 0:
            return None
        total = int(ends[take - 1]) - pos0
        raw = self.data.read(pos0, total)
        words = np.frombuffer(ifile.mm, dtype=np.uint32, count=take * 8, offset=r).reshape(take, 8)
        if prefix_true(headers_equal_records(gather_headers(raw, pos[:take] - pos0), words)) < take:
            return None
        return raw, take

    # -- truncating -------------------------------------------------------------------
    def delete_head(self, count: int) -> tuple[list[str], list[str]]:
        """Delete the first ``count`` data files (never the last one, never one holding an
        entry past the commit index) and then the index files wholly below the new first
        entry's record, as DLedger's clean-space service does; the log then begins at the
        first entry of the new first data file. Returns (data files, index files) deleted.
        The rules of which files may go are store.retention's; this only checks the two
        that keep the log whole."""
        self._writable()
        files = self.data.files
        if count <= 0:
            return [], []
        if count >= len(files):
            raise StoreUsageError(f"cannot delete {count} data files of {len(files)}: the last one is being written")
        nxt = files[count]
        if nxt.mm is None or nxt.actual_size < HEADER_SIZE:
            raise StoreCorruptError(f"data file {nxt.name} has no entry to begin the log at")
        magic, size, new_begin = ENTRY_HEADER.unpack_from(nxt.mm, 0)[:3]
        if magic <= 0 or size < HEADER_SIZE or not self.begin_index < new_begin <= self.end_index + 1:
            raise StoreCorruptError(f"data file {nxt.name} does not begin with an entry of this log")
        if new_begin - 1 > self._committed:
            raise StoreUsageError(f"cannot delete entries up to {new_begin - 1}: the commit index is {self._committed}")
        # data files first, then the index files below: a crash between them (or before a
        # remover got to them) leaves a store that opens at one of the two beginnings
        removed = self.data.remove_head(count, self.remover)
        self.begin_index = new_begin
        below = new_begin * INDEX_UNIT_SIZE
        index_removed = self.index.remove_head(sum(1 for f in self.index.files if f.end <= below), self.remover)
        self._last_read = None
        return removed, index_removed

    def reset_to(self, raw) -> Sequence[Appended]:
        """Drop the whole log and begin it again with the one encoded entry ``raw`` at its
        own index and position: a follower whose log no longer meets its leader's (all of it
        lies before the leader's first entry, or after its last) is cut back to the leader's
        first entry, as DLedger's TRUNCATE does (DLedgerMmapFileStore.rebuildWithPos). The
        entry must start a data file, as every log's first entry does (head deletion removes
        whole files; a reset log begins where its leader's begins), so a later recovery
        finds it. Committed entries are the caller's to check; afterwards the commit index is
        just below the new entry."""
        self._writable()
        self._forget_reads()
        magic, size, idx, _term, pos = ENTRY_HEADER.unpack_from(raw)[:5]
        if size != len(raw) or idx < 0 or pos < 0:
            raise StoreUsageError(f"reset needs exactly one encoded entry (got {len(raw)} bytes, size {size})")
        if pos % self.data.file_size:
            raise PositionMismatch(f"entry {idx} at pos {pos} does not start a data file of {self.data.file_size} "
                                   "bytes: a log cannot begin there", index=idx, pos=pos, expected=None)
        if self.end_index >= self.begin_index >= 0:  # (committed entries are the group's: only the rest is kept)
            first = max(self.begin_index, self._committed + 1)
            if first <= self.end_index:
                self._keep(first, self.end_index)
        self.data.remove_head(len(self.data.files), self.remover)
        self.index.remove_head(len(self.index.files), self.remover)
        self.begin_index, self.end_index, self.end_term, self.write_pos, self.last_chain = -1, idx - 1, 0, pos, 0
        self._committed = idx - 1
        try:
            out = self.append_follower(raw)
        finally:
            self.flush()  # like a truncation, a reset is made durable at once
        return out

    @property
    def data_file_size(self) -> int:
        return self.data.file_size

    def adopt_data_file_size(self, size: int) -> None:
        """Write data files of ``size`` bytes from now on, smaller than the size the store was
        opened with: the group's leader writes such files (cluster/raft/filesize.py). Allowed
        only while that changes no entry's position: the log is empty, or it lies in one data
        file whose start is a multiple of ``size`` and whose first entry begins it, and it
        ends at least a BLANK header short of ``start + size``. That file is then cut to
        ``size`` bytes (past the log it holds zeros only) and made durable, so a restart
        without a configured size finds ``size`` (detect_file_size). StoreUsageError, with
        the reason, when not allowed; nothing changes then."""
        self._writable()
        files, old = self.data.files, self.data.file_size
        if size == old:
            return
        if not HEADER_SIZE + MIN_BLANK_LEN <= size < old:
            raise StoreUsageError(f"the data file size can only go down from {old} bytes (to {size})")
        if len(files) > 1:
            raise StoreUsageError(f"the log spans {len(files)} data files of {old} bytes already")
        if files:
            f = files[0]
            first_pos = self.locate(self.begin_index)[0] if self.end_index >= self.begin_index >= 0 else f.start
            if f.start % size or first_pos != f.start or self.write_pos + MIN_BLANK_LEN > f.start + size:
                raise StoreUsageError(f"the log's data file {f.name} (entries at {first_pos}..{self.write_pos}) "
                                      f"does not fit one data file of {size} bytes")
            self._forget_reads()
            self.data.flush()
            self.data.cut_file(f, size)
        self.data.file_size = size

    def truncate(self, from_index: int, *, force: bool = False) -> int:
        self._writable()
        self._forget_reads()
        if from_index > self.end_index:
            return 0
        if from_index < self.begin_index or from_index < 0:
            raise IndexOutOfRange(f"cannot truncate from {from_index}: the log begins at {self.begin_index}")
        if from_index <= self._committed and not force:
            raise StoreUsageError(
                f"cannot truncate from {from_index}: entries up to {self._committed} are committed"
            )
        self._keep(from_index, self.end_index)
        cut_pos, _ = self.locate(from_index)
        dropped = self.end_index - from_index + 1
        old_end_pos = self.write_pos
        self.data.zero(cut_pos, old_end_pos)
        holder = self.data.find(cut_pos)
        self.data.remove_from(cut_pos if holder is None or cut_pos == holder.start else holder.end)
        idx_cut = from_index * INDEX_UNIT_SIZE
        self.index.zero(idx_cut, (self.end_index + 1) * INDEX_UNIT_SIZE)
        iholder = self.index.find(idx_cut)
        self.index.remove_from(idx_cut if iholder is None or idx_cut == iholder.start else iholder.end)
        self.write_pos = cut_pos
        if from_index > self.begin_index:
            prev = self.get(from_index - 1)
            self.end_index, self.end_term, self.last_chain = prev.index, prev.term, prev.chain_crc
        else:  # the log becomes empty; the next entry keeps index from_index
            self.end_index, self.end_term, self.last_chain = from_index - 1, 0, 0
        if self._committed > self.end_index:
            self._committed = self.end_index
        self.flush()  # a truncation is always made durable at once
        return dropped
