"""Writes that fail in words: a full disk (or any refused write) is one StoreIOError naming the
file and the bytes, never a SIGBUS.

A store into a page of a memory-mapped file that has no block behind it (a hole of a sparse
file) needs a block at that moment; when the disk has none, the kernel sends SIGBUS, which
kills the process with no word ("Bus error", exit 135) and leaves whatever it was writing
behind. So a mapped file is written through its mapping only once :func:`reserve` has
allocated its blocks, and everything else is written with :func:`pwrite_all` or
:func:`write_all`, whose failure is an error the command line turns into one line and after
which the command removes what it wrote.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shutil

from .errors import StoreIOError


def free_bytes(path: str) -> int | None:
    """Bytes free to this user on the filesystem holding ``path`` (or its nearest existing
    parent); None when the system cannot tell."""
    probe = os.path.abspath(path)
    while True:
        try:
            st = os.statvfs(probe)
            return st.f_bavail * st.f_frsize
        except FileNotFoundError:
            parent = os.path.dirname(probe)
            if parent == probe:
                return None
            probe = parent
        except OSError:
            return None


def write_error(path: str, nbytes: int | None, exc: OSError) -> StoreIOError:
    """The error for a write of ``nbytes`` (None: not known, a buffer's flush) to ``path``
    that failed with ``exc``: one line naming the file and the bytes, and on a full disk
    what its filesystem has free."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        free = free_bytes(path)
        room = f", {free} free there" if free is not None else ""
        what = "disk full" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        need = f"{nbytes} more bytes needed for this write" if nbytes is not None else "the write did not fit"
        return io_error(exc.errno, f"{path}: {what}: {need}{room}")
    size = f" of {nbytes} bytes" if nbytes is not None else ""
    return io_error(exc.errno, f"{path}: write{size} failed: {exc.strerror or exc}")


def io_error(code: int | None, text: str) -> StoreIOError:
    """StoreIOError whose text is ``text`` alone (OSError's two-argument form would put
    "[Errno N]" before it) and whose ``errno`` is ``code`` (errors.is_disk_full reads it)."""
    exc = StoreIOError(text)
    exc.errno = code
    return exc


def pwrite_all(fd: int, data, offset: int, path: str) -> None:
    """Write all of ``data`` at ``offset`` of ``fd`` (short writes continued);
    :func:`write_error` when the system refuses."""
    with memoryview(data) as view:
        done = 0
        try:
            while done < len(view):
                done += os.pwrite(fd, view[done:], offset + done)
        except OSError as exc:
            raise write_error(path, len(view) - done, exc) from exc


def write_all(fh, data, path: str) -> None:
    """Write all of ``data`` to the unbuffered file ``fh`` (``open(..., buffering=0)``: a
    full disk is met by this write, not by a later flush) at its position;
    :func:`write_error` when the system refuses."""
    with memoryview(data) as view:
        view = view.cast("B")
        done = 0
        try:
            while done < len(view):
                done += fh.write(view[done:])
        except OSError as exc:
            raise write_error(path, len(view) - done, exc) from exc


def reserve(fd: int, size: int, path: str) -> None:
    """Allocate every block of the first ``size`` bytes of ``fd`` (fallocate, keeping the
    length), so writes through a mapping of them cannot meet a full disk: that is SIGBUS,
    which kills the process with no word and leaves its files behind. StoreIOError naming
    ``path`` and the bytes when the disk has no room; a filesystem that cannot allocate
    ahead (EOPNOTSUPP) keeps the file sparse, and writers must then not write it through a
    mapping (:attr:`MappedFile.reserved`)."""
    if _fallocate is None or size <= 0:
        return
    if _fallocate(fd, 0, 0, size) != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSPC, errno.EDQUOT):
            try:
                have = os.fstat(fd).st_blocks * 512
            except OSError:
                have = 0
            raise write_error(path, max(0, size - have), OSError(err, os.strerror(err)))
        # EOPNOTSUPP and friends: sparse, as Java's mapping of a new file is


def _libc_fallocate():
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    fn = getattr(libc, "fallocate", None)
    if fn is not None:
        fn.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long)
    return fn


_fallocate = _libc_fallocate()


def write_file(path: str, data) -> None:
    """A new file ``path`` (it must not exist) holding ``data``, synced; :func:`write_error`
    when it does not fit."""
    with open(path, "xb", buffering=0) as fh:
        write_all(fh, data, path)
        try:
            os.fsync(fh.fileno())
        except OSError as exc:
            raise write_error(path, None, exc) from exc


def copy_file(src: str, dst: str) -> None:
    """``shutil.copyfile``, whose failure to write names ``dst`` (:func:`write_error`)."""
    try:
        shutil.copyfile(src, dst)
    except OSError as exc:
        if exc.filename is not None or exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise write_error(dst, os.path.getsize(src), exc) from exc


def copy_tree(src: str, dst: str) -> None:
    """``shutil.copytree`` (symbolic links kept as links), whose failure is one error naming
    the first file that could not be copied (shutil.Error lists every one)."""
    try:
        shutil.copytree(src, dst, symlinks=True)
    except shutil.Error as exc:
        failed = exc.args[0][0] if exc.args and exc.args[0] else (src, dst, "failed")
        s, d, why = failed[0], failed[1], str(failed[2])
        if "No space left" not in why:
            raise io_error(None, f"{d}: copy of {s} failed: {why}") from None
        try:
            need = f"{os.path.getsize(s)} bytes needed to copy {s}"
        except OSError:
            need = f"copying {s}"
        free = free_bytes(d)
        raise io_error(errno.ENOSPC, f"{d}: disk full: {need}" + (f", {free} free there" if free is not None else "")) \
            from None
