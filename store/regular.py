"""Reading a small file a store keeps beside its log (a checkpoint, a config JSON file, an
epoch file) without trusting what its path names.

Contract of :func:`read_regular`: only a regular file is read (a symlink is followed to
what it names); a FIFO, a device, a socket or a directory is refused at once, never
waited on: the file is opened with O_NONBLOCK, so opening a FIFO with no writer does not
block, and nothing is read before ``fstat`` on the opened descriptor says what it is (no
race between a check and the open). The bytes are read in chunks and never more than
``limit`` of them: a file larger than that (or one that grows past it while read) is
refused, so a sparse 1 TB file costs no memory.
"""

from __future__ import annotations

import errno
import os
import stat

from .errors import StoreCorruptError

CHUNK = 1 << 20  # bytes read at a time


class UnreadableFile(StoreCorruptError):
    """The path names something that is no regular file, or a file above the limit (the
    text says which and where)."""


def file_kind(mode: int) -> str:
    """What a ``st_mode`` names, in words (for messages)."""
    for test, what in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return what
    return "no regular file"


def read_regular(path: str, limit: int) -> bytes:
    """The whole content of the regular file at ``path``, at most ``limit`` bytes.

    Raises FileNotFoundError when nothing is there (callers fall back on that, as RocketMQ
    falls back to a ``.bak``); UnreadableFile when ``path`` is a FIFO, device, socket or
    directory, or holds more than ``limit`` bytes; OSError for what the system refuses
    (permissions, I/O errors)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # (a socket, or a FIFO on some systems: nothing to read from)
            raise UnreadableFile(f"{path}: not a regular file (a socket or FIFO)") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFile(f"{path}: not a regular file ({file_kind(st.st_mode)})")
        if st.st_size > limit:
            raise UnreadableFile(f"{path}: {st.st_size} bytes, more than the {limit} a file of this kind may hold")
        parts, total = [], 0
        while True:
            chunk = os.read(fd, min(CHUNK, limit + 1 - total))
            if not chunk:
                break
            total += len(chunk)
            if total > limit:  # (it grew while read)
                raise UnreadableFile(f"{path}: more than the {limit} bytes a file of this kind may hold")
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)
