"""Errors raised by the store.

Three kinds, so callers can tell them apart: the caller misused the API
(:class:`StoreUsageError`), the files on disk are damaged or not a store
(:class:`StoreCorruptError`), or the operating system refused (:class:`StoreIOError`).
Only the command line turns them into ``Error: ...`` and an exit code.
"""

import errno


class StoreError(Exception):
    """Base of every error the store raises."""


class StoreUsageError(StoreError, ValueError):
    """The request cannot be served as asked (index out of range, entry too large, ...)."""


class IndexOutOfRange(StoreUsageError):
    pass


class InconsistentAppend(StoreUsageError):
    """A follower append does not continue the local log (wrong index or position)."""


class PositionMismatch(InconsistentAppend):
    """A pushed entry is not where this log would put it: the leader's ``pos`` differs from
    ``expected``, the local log's next position (None: the log cannot begin at ``pos``).
    Entries before it are in order, so the two logs place entries differently: most often
    they were written with different data file sizes (cluster/raft/filesize.py)."""

    def __init__(self, message: str, *, index: int, pos: int, expected: int | None) -> None:
        super().__init__(message)
        self.index, self.pos, self.expected = index, pos, expected


class StoreInUseError(StoreUsageError):
    """Another process (a running node, another repair) holds the node directory's lock."""


class StoreCorruptError(StoreError):
    """The bytes on disk are not what a store holds."""


class NotAStoreError(StoreCorruptError):
    """The path is not a node directory."""


class StoreIOError(StoreError, OSError):
    """An operating-system call on a store file failed (disk full, permissions, ...)."""


def is_disk_full(exc: BaseException) -> bool:
    """Is ``exc``, or the operating-system error it was raised from, ENOSPC (a full disk)?"""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        exc = exc.__cause__
    return False
