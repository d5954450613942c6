"""The node directory's lock: one writer at a time.

A writable :class:`~store.filestore.FileStore` holds it for as long as it is open, so a
second writer (another node on the same directory, ``store truncate`` on a running node) is
refused instead of corrupting the files. Imports nothing of the store but its layout and
errors.
"""

from __future__ import annotations

import errno
import fcntl
import os

from .errors import StoreInUseError, StoreIOError
from .layout import NodeLayout


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


def lock_holder(layout: NodeLayout) -> str | None:
    """Who holds the directory's lock, without taking it for long or creating anything: None
    when nobody does, else the holder as its file names it ("pid N", or "another process")."""
    try:
        fd = os.open(layout.lock_path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None  # no lock file: nobody holds it (a holder keeps the file while it holds it)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            try:
                text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            except OSError:
                text = ""
            return f"pid {text}" if text.isdigit() else "another process"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class NodeLock:
    """A store's hold on its directory's lock: taken by :meth:`take` (a store whose caller
    holds the lock already never takes it, and so never lets go of it), let go by
    :meth:`release`, at most once."""

    def __init__(self, layout: NodeLayout) -> None:
        self.layout = layout
        self.fd = -1  # the lock file's fd while held
        self.owned = False  # taken by this object (and so released by it)

    def take(self) -> None:
        self.fd = lock_node_dir(self.layout)
        self.owned = True

    def release(self) -> None:
        if self.owned:
            unlock_node_dir(self.layout, self.fd)
            self.owned, self.fd = False, -1
