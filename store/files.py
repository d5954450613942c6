"""Fixed-size, preallocated files that together hold one logical byte stream.

A :class:`FileList` is DLedger's ``MmapFileList``: files named by their 20-digit start
offset, each exactly ``file_size`` bytes (created sparse, like a Java ``MappedByteBuffer``
of that size), mapped with ``mmap``. It knows nothing about entries.

Contract: offsets are logical (stream-wide). A write never spans two files; the caller
(the store) pads with BLANK and moves to the next file itself. Files are opened read-only
unless ``writable=True``; a read-only list never changes a byte on disk.
"""

from __future__ import annotations

import errno
import mmap
import os
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .errors import StoreCorruptError, StoreIOError
from .format import file_name, parse_file_name
from .writing import io_error, pwrite_all, reserve

try:  # sync_fds in a thread of its own that never takes the interpreter lock (store/_flusher.c)
    from ._flusher import Flusher
except ImportError:  # pragma: no cover - a build without a C compiler, or not Linux (eventfd)
    Flusher = None


@dataclass
class MappedFile:
    path: str
    start: int  # logical offset of byte 0
    size: int  # configured size
    actual_size: int  # bytes on disk (smaller when the file was truncated)
    mm: mmap.mmap | None = None
    fd: int = -1
    dirty_from: int | None = field(default=None)  # lowest relative offset written since the last flush
    dirty_to: int = 0
    reserved: bool = False  # every block allocated (fallocate): a write through the mapping cannot SIGBUS
    dropped_to: int = 0  # relative offset below which flushed pages were dropped from the cache (drop-behind)

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def view(self):
        """The mapped bytes (empty bytes for an empty file)."""
        return self.mm if self.mm is not None else b""


def list_store_files(directory: str) -> tuple[list[tuple[int, str]], list[str]]:
    """(start offset, path) of every store-named file, sorted; and the other entries' names."""
    files, others = [], []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return [], []
    for name in names:
        path = os.path.join(directory, name)
        start = parse_file_name(name)
        if start is None or not os.path.isfile(path):
            others.append(name)
        else:
            files.append((start, path))
    files.sort()
    return files, sorted(others)


class FileList:
    def __init__(self, directory: str, file_size: int, *, writable: bool = False) -> None:
        if file_size <= 0:
            raise ValueError("file size must be positive")
        self.directory = directory
        self.file_size = file_size
        self.writable = writable
        self.files: list[MappedFile] = []
        self.ignored: list[str] = []  # names in the directory that are not store files
        self.random_access = False  # see set_random_access
        self.drop_behind = 0  # see take_dirty

    def set_random_access(self) -> None:
        """No read-ahead on these files from now on (for a store being written, once
        recovery has read what it needs sequentially).

        A writer's files are sparse past the write position. Once one read of a page near
        that position has read ahead (a fault on the mapping does, whatever the pattern),
        the pages ahead carry read-ahead marks; every later read of freshly written data
        (a leader feeding its followers) reaches a mark and reads further ahead into the
        hole, zero-filling each page there before the writer gets to it, for good. That was
        a sixth of a leader's CPU. Reads here are whole ranges (:meth:`read`), which the
        kernel still reads in one go when they miss the page cache."""
        self.random_access = True
        for f in self.files:
            if f.mm is not None and hasattr(mmap, "MADV_RANDOM"):
                f.mm.madvise(mmap.MADV_RANDOM)
            if f.fd >= 0 and hasattr(os, "posix_fadvise"):
                os.posix_fadvise(f.fd, 0, 0, os.POSIX_FADV_RANDOM)

    # -- opening ----------------------------------------------------------------------
    def load(self) -> None:
        if self.writable:
            os.makedirs(self.directory, exist_ok=True)
        found, self.ignored = list_store_files(self.directory)
        if self.writable:  # files a remover had not unlinked when the last process ended
            swept = [n for n in self.ignored if n.endswith(TRASH_SUFFIX) and parse_file_name(n[:-len(TRASH_SUFFIX)])
                     is not None]
            unlink_all([os.path.join(self.directory, n) for n in swept])
            self.ignored = [n for n in self.ignored if n not in swept]
        for start, path in found:
            self.files.append(self._map(path, start))

    def _map(self, path: str, start: int) -> MappedFile:
        flags = os.O_RDWR if self.writable else os.O_RDONLY
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            raise StoreIOError(f"cannot open {path}: {exc.strerror}") from exc
        try:
            st = os.fstat(fd)
            actual = st.st_size
            if self.random_access and hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            mm = None
            if actual > 0:
                access = mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ
                mm = mmap.mmap(fd, actual, access=access)
                if self.random_access and hasattr(mmap, "MADV_RANDOM"):
                    mm.madvise(mmap.MADV_RANDOM)
        except OSError as exc:
            os.close(fd)
            raise StoreIOError(f"cannot map {path}: {exc.strerror}") from exc
        return MappedFile(path, start, self.file_size, actual, mm, fd, reserved=st.st_blocks * 512 >= actual)

    def close(self) -> None:
        for f in self.files:
            self._unmap(f)
        self.files = []

    @staticmethod
    def _unmap(f: MappedFile) -> None:
        if f.mm is not None:
            try:
                f.mm.close()
            except BufferError:
                pass  # a view of it is still alive somewhere: the mapping goes with the last one
            f.mm = None
        if f.fd >= 0:
            os.close(f.fd)
            f.fd = -1

    # -- lookup -----------------------------------------------------------------------
    @property
    def first(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def find(self, offset: int) -> MappedFile | None:
        """The file holding logical ``offset``, or None."""
        files = self.files
        if not files:
            return None
        i = (offset - files[0].start) // self.file_size
        if 0 <= i < len(files) and files[i].start <= offset < files[i].end:
            return files[i]
        for f in files:  # only when the list has holes (a damaged store)
            if f.start <= offset < f.end:
                return f
        return None

    def read(self, offset: int, size: int) -> bytes:
        f = self.find(offset)
        if f is None:
            raise StoreCorruptError(f"no file in {self.directory} holds offset {offset}")
        rel = offset - f.start
        if rel + size > f.actual_size:
            raise StoreCorruptError(f"{f.path}: {size} bytes at {rel} run past the file's {f.actual_size} bytes")
        # pread, not a slice of the mapping: no page faults and page-table entries for
        # pages read once, and no read-ahead once set_random_access has been called
        try:
            data = os.pread(f.fd, size, rel)
        except OSError as exc:
            raise StoreIOError(exc.errno, f"read from {f.path} failed: {exc.strerror}") from exc
        if len(data) != size:
            raise StoreCorruptError(f"{f.path}: {size} bytes at {rel}: the file ends after {len(data)}")
        return data

    # -- writing ----------------------------------------------------------------------
    def file_for_write(self, offset: int) -> MappedFile:
        """The file holding ``offset``, created (sparse, full size) if it does not exist."""
        f = self.find(offset)
        if f is not None:
            return f
        start = offset - offset % self.file_size
        if self.files and start != self.files[-1].end:
            raise StoreCorruptError(f"{self.directory}: new file at {start} would not follow {self.files[-1].name}")
        path = os.path.join(self.directory, file_name(start))
        created = not os.path.lexists(path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, self.file_size)
                reserve(fd, self.file_size, path)
            finally:
                os.close(fd)
        except OSError as exc:
            if created:  # (a full disk leaves no file of ours behind)
                try:
                    os.unlink(path)
                except OSError:
                    pass
            if isinstance(exc, StoreIOError):
                raise
            raise io_error(exc.errno, f"cannot create {path}: {exc.strerror}") from exc
        f = self._map(path, start)
        self.files.append(f)
        return f

    def write(self, offset: int, data) -> None:
        f = self.file_for_write(offset)
        self.write_at(f, offset - f.start, data)

    def write_at(self, f: MappedFile, rel: int, data) -> None:
        """Write ``data`` at ``rel`` in ``f``: small writes through the mapping, the rest
        with pwrite.

        Both go to the same page cache, so readers see the bytes at once. A store through
        the mapping costs no syscall, which single small appends feel, but faults once per
        page (and again after every flush cleans the page) and has fresh pages zeroed first;
        pwrite takes no faults and zeroes nothing it fills whole, which large batches feel.
        The mapping is only written where every block is allocated, so a full disk is an
        error here, never a SIGBUS."""
        end = rel + len(data)
        if end > f.actual_size:
            raise StoreCorruptError(f"{f.path}: write of {len(data)} bytes at {rel} past the file end")
        if len(data) <= MAPPED_WRITE_MAX and f.reserved and f.mm is not None:
            f.mm[rel:end] = data
            self.mark_dirty(f, rel, end)
            return
        pwrite_all(f.fd, data, rel, f.path)
        self.mark_dirty(f, rel, end)

    @staticmethod
    def mark_dirty(f: MappedFile, rel: int, end: int) -> None:
        if f.dirty_from is None or rel < f.dirty_from:
            f.dirty_from = rel
        if end > f.dirty_to:
            f.dirty_to = end

    def zero(self, start: int, end: int) -> int:
        """Write zeros over logical [start, end) in existing files; returns bytes zeroed.

        Only where a byte is not zero yet: holes read as zeros already and are skipped, and
        a file whose blocks are not all allocated is written with pwrite, not through its
        mapping (a store into a hole needs a block: on a full disk that is SIGBUS). So
        zeroing needs no new block, and works on a full disk."""
        done = 0
        chunk = 1 << 20
        zeros = bytes(chunk)
        for f in self.files:
            lo, hi = max(start, f.start), min(end, f.start + f.actual_size)
            if lo >= hi:
                continue
            rel, rel_end = lo - f.start, hi - f.start
            for a, b in [(rel, rel_end)] if f.reserved else data_extents(f.fd, rel, rel_end):
                pos = a
                while pos < b:
                    n = min(chunk, b - pos)
                    if f.mm[pos : pos + n] != zeros[:n]:
                        if f.reserved:
                            f.mm[pos : pos + n] = zeros[:n]
                        else:
                            pwrite_all(f.fd, zeros[:n], pos, f.path)
                        self.mark_dirty(f, pos, pos + n)
                    pos += n
            done += rel_end - rel
        return done

    def nonzero_end(self, start: int) -> int:
        """Logical offset just past the last non-zero byte at or after ``start`` (``start`` if none).

        Holes (per SEEK_DATA/SEEK_HOLE) read as zeros by definition and are skipped, so an
        almost empty 1 GiB file costs a few system calls, not a 1 GiB read."""
        last = start
        for f in self.files:
            if f.start + f.actual_size <= start or f.mm is None:
                continue
            end = _last_nonzero(f, max(0, start - f.start))
            if end is not None:
                last = max(last, f.start + end)
        return last

    def remove_from(self, offset: int) -> list[str]:
        """Delete every file that starts at or after ``offset``; returns their names."""
        removed = []
        keep = []
        for f in self.files:
            if f.start >= offset:
                self._unmap(f)
                try:
                    os.unlink(f.path)
                except OSError as exc:
                    raise StoreIOError(f"cannot remove {f.path}: {exc.strerror}") from exc
                removed.append(f.name)
            else:
                keep.append(f)
        self.files = keep
        return removed

    def remove_head(self, count: int, remover=None) -> list[str]:
        """Delete the first ``count`` files, oldest first (a crash part way leaves the later
        ones, still a contiguous list); returns their names. A sync job under way keeps
        its own duplicate descriptor, so deleting a file it syncs is safe. ``remover(paths)``,
        when given, unlinks the unmapped files elsewhere, in order (unlinking a 1 GiB file
        whose pages are cached took half a second here: a node hands it to a thread)."""
        gone = list(self.files[:count])
        for f in gone:
            self._unmap(f)
            self.files.remove(f)
        paths = [f.path for f in gone]
        if remover is not None:
            # Renamed first (cheap, and at once): the name is free for a new file right away
            # (a log cut back to a leader's first entry may reuse it), and what the remover
            # has not unlinked yet when the process dies is swept at the next open.
            trash = []
            for path in paths:
                try:
                    os.rename(path, path + TRASH_SUFFIX)
                except OSError as exc:
                    raise StoreIOError(f"cannot remove {path}: {exc.strerror}") from exc
                trash.append(path + TRASH_SUFFIX)
            remover(trash)
        else:
            unlink_all(paths)
        return [f.name for f in gone]

    def restore_size(self, f: MappedFile) -> None:
        """Grow a truncated file back to the configured size (the gap reads as zeros)."""
        if f.actual_size == f.size:
            return
        self._unmap(f)
        try:
            fd = os.open(f.path, os.O_RDWR)
            try:
                os.ftruncate(fd, f.size)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StoreIOError(f"cannot resize {f.path}: {exc.strerror}") from exc
        g = self._map(f.path, f.start)
        f.mm, f.fd, f.actual_size = g.mm, g.fd, g.actual_size

    def cut_file(self, f: MappedFile, size: int) -> None:
        """Make ``f`` a file of ``size`` bytes, shorter than it is (what lies past ``size``
        is lost), durably: for a store that takes a smaller file size (FileStore.adopt_data_file_size)."""
        self._unmap(f)
        try:
            fd = os.open(f.path, os.O_RDWR)
            try:
                os.ftruncate(fd, size)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StoreIOError(exc.errno, f"cannot cut {f.path} to {size} bytes: {exc.strerror}") from exc
        g = self._map(f.path, f.start)
        f.mm, f.fd, f.actual_size, f.size, f.reserved = g.mm, g.fd, g.actual_size, size, g.reserved
        f.dirty_from, f.dirty_to, f.dropped_to = None, 0, min(f.dropped_to, size)

    def take_dirty(self) -> list[SyncJob]:
        """Forget the dirty marks and return a job for every file that had one, for
        :func:`sync_fds` to run elsewhere (a thread) while writing goes on: a duplicate fd
        to fdatasync. Marks made after this call belong to the next flush.

        With ``drop_behind`` set (bytes), a job also names the pages of its file that now
        lie more than that far behind the newest byte written: once synced they are clean,
        and sync_fds asks the kernel to drop them from the page cache (drop-behind). A log
        is written once and read near its end (pushes, recent GETs), so without this every
        byte ever written stays cached until memory runs short and the cache grows over
        everything else on the machine. With it, the same few hundred MiB of page cache are
        reused. On a virtual machine whose host backs guest memory lazily (the 2-core test
        machine of benchmarks/: about 2.5 ns per byte, in pwrite's copy, for memory not
        touched lately) that keeps a node's write cost flat instead of rising several-fold
        once its first gigabytes are cached."""
        jobs = []
        window = self.drop_behind if hasattr(os, "posix_fadvise") else 0
        front = max((f.start + f.dirty_to for f in self.files if f.dirty_from is not None), default=None)
        for f in self.files:
            drop_lo = drop_hi = 0
            if window > 0 and front is not None and f.fd >= 0:
                if f.dirty_from is not None and f.dirty_from < f.dropped_to:  # rewritten below the mark
                    f.dropped_to = f.dirty_from - f.dirty_from % PAGE
                hi = min(f.actual_size, front - window - f.start)
                hi -= hi % PAGE
                if hi > f.dropped_to:
                    # From the last mark rounded down to DROP_ALIGN: the kernel drops a
                    # large folio only when the range covers all of it, so one that
                    # straddled the last mark goes now.
                    drop_lo, drop_hi = f.dropped_to - f.dropped_to % DROP_ALIGN, hi
                    release_pages(f.mm, drop_lo, drop_hi)  # (pages mapped here are not dropped)
                    f.dropped_to = hi
            if f.dirty_from is not None and f.fd >= 0:
                jobs.append(SyncJob(os.dup(f.fd), True, drop_lo, drop_hi))
                f.dirty_from, f.dirty_to = None, 0
            elif drop_hi > drop_lo:  # an older file, synced by an earlier flush
                jobs.append(SyncJob(os.dup(f.fd), False, drop_lo, drop_hi))
        return jobs

    def flush(self) -> None:
        """msync every range written since the last flush (fdatasync for mapped pages)."""
        page = mmap.PAGESIZE
        for f in self.files:
            if f.dirty_from is None or f.mm is None:
                continue
            lo = f.dirty_from - f.dirty_from % page
            try:
                f.mm.flush(lo, f.dirty_to - lo)
            except OSError as exc:
                raise StoreIOError(f"flush of {f.path} failed: {exc.strerror}") from exc
            f.dirty_from, f.dirty_to = None, 0


SCAN_CHUNK = 1 << 20
DROP_ALIGN = 2 << 20  # the largest page-cache folio on x86-64 (PMD order); see FileList.take_dirty
MAPPED_WRITE_MAX = 8 << 10  # bytes: smaller writes go through the mapping (see FileList.write_at)
PAGE = mmap.PAGESIZE
MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", 4)


TRASH_SUFFIX = ".deleted"  # a head file renamed for unlinking elsewhere (FileList.remove_head)


def unlink_all(paths: list[str]) -> None:
    """Unlink ``paths`` in order; one already gone is fine."""
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreIOError(f"cannot remove {path}: {exc.strerror}") from exc


def release_pages(buf, lo: int, hi: int) -> None:
    """MADV_DONTNEED on the whole pages inside [lo, hi) of an mmap (a no-op for bytes).

    For a file mapping this only drops page-table entries: the data stays in the page
    cache (dirty shared pages included), so it is safe on writable maps too; it keeps a
    long read-only walk from growing the process's resident set."""
    lo = -(-lo // PAGE) * PAGE
    hi -= hi % PAGE
    if hi > lo and hasattr(buf, "madvise"):
        try:
            buf.madvise(MADV_DONTNEED, lo, hi - lo)
        except (OSError, ValueError):  # pragma: no cover - advisory only
            pass




def data_extents(fd: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """The ranges of [lo, hi) that may hold data (not holes); all of it if the
    filesystem cannot tell."""
    out = []
    pos = lo
    try:
        while pos < hi:
            try:
                d = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # only a hole from pos to the end of the file
                    break
                raise
            if d >= hi:
                break
            h = min(os.lseek(fd, d, os.SEEK_HOLE), hi)
            out.append((d, h))
            pos = h
    except (OSError, AttributeError):  # no SEEK_DATA support: treat everything as data
        return [(lo, hi)]
    return out


def _last_nonzero(f: MappedFile, rel: int) -> int | None:
    """Offset in ``f`` just past its last non-zero byte at or after ``rel``; None if none."""
    for lo, hi in reversed(data_extents(f.fd, rel, f.actual_size)):
        pos = hi
        while pos > lo:
            chunk_lo = max(lo, pos - SCAN_CHUNK)
            if np.frombuffer(f.mm, dtype=np.uint8, count=pos - chunk_lo, offset=chunk_lo).any():
                return chunk_lo + len(f.mm[chunk_lo:pos].rstrip(b"\0"))
            release_pages(f.mm, chunk_lo, pos)
            pos = chunk_lo
    return None


class SyncJob(NamedTuple):
    """What :func:`sync_fds` does with one file (:meth:`FileList.take_dirty`): fdatasync
    ``fd`` if ``sync``, then drop the page-cache pages of [drop_lo, drop_hi) (none when
    empty), then close ``fd``."""

    fd: int
    sync: bool
    drop_lo: int = 0
    drop_hi: int = 0


def sync_fds(jobs: list[SyncJob]) -> None:
    """Run the jobs of :meth:`FileList.take_dirty` (releases the GIL, so it can run in a
    thread). Pages written through a shared mapping are dirty in the page cache, so
    fdatasync writes them as msync would. Dropping is advice: the kernel drops only clean
    pages that no process maps, so it can never lose a byte, and it is skipped for a file
    whose sync failed."""
    error = None
    for fd, sync, lo, hi in jobs:
        try:
            if sync:
                os.fdatasync(fd)
            if hi > lo:
                try:
                    os.posix_fadvise(fd, lo, hi - lo, os.POSIX_FADV_DONTNEED)
                except OSError:  # pragma: no cover - advice only
                    pass
        except OSError as exc:
            error = error or exc
        finally:
            os.close(fd)
    if error is not None:
        raise flush_error(error.errno or errno.EIO) from error


def flush_error(code: int) -> StoreIOError:
    """What a flush that failed with errno ``code`` raises: from sync_fds, and from a
    node whose store._flusher reported ``code``."""
    return StoreIOError(f"flush failed: {os.strerror(code)}")
