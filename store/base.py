"""The narrow store interface the node runtime uses, shared by the file and memory stores.

Rules every implementation keeps (the conformance suite in tests/ checks both):

- Indexes are contiguous from ``begin_index`` to ``end_index``; a new log has both -1, a
  log truncated to nothing keeps its ``begin_index`` and has ``end_index = begin - 1``.
- ``append_leader`` assigns indexes ``end_index + 1 ...`` in the given term, which must
  not be lower than ``end_term``.
- ``append_follower`` takes entries already encoded by a leader and stores them byte for
  byte at the leader's ``pos``; the first must be ``end_index + 1``.
- ``committed_index`` never exceeds ``end_index`` and never goes back, except through an
  explicit ``truncate(..., force=True)`` below it.
- Errors: :class:`~store.errors.IndexOutOfRange` for indexes outside the log,
  :class:`~store.errors.InconsistentAppend` for a follower batch that does not continue
  the log, :class:`~store.errors.StoreUsageError` for other misuse.
"""

from __future__ import annotations

import abc
import itertools
import operator
from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple, Sequence

from .errors import IndexOutOfRange, StoreUsageError
from .format import HEADER_SIZE, MAGIC_NORMAL


Keep = Callable[[int, int], None]  # keep(first, last): the entries about to be cut


class Appended(NamedTuple):
    index: int
    term: int
    pos: int
    size: int


class _AppendedColumns(Sequence):
    """What AppendedBatch and AppendedRun share: each is a read-only sequence of
    :class:`Appended` without a tuple per entry, equal to any sequence of the same entries,
    and ``rows()`` gives ``(index, term, pos, size)`` tuples for answers to clients."""

    __slots__ = ()

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    __hash__ = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"


class AppendedBatch(_AppendedColumns):
    """What one append stored, as columns (int64 arrays): the run lanes return it."""

    __slots__ = ("index", "term", "pos", "size")

    def __init__(self, index, term, pos, size) -> None:
        self.index, self.term, self.pos, self.size = index, term, pos, size

    @classmethod
    def of(cls, parts: Sequence[Sequence[Appended]]) -> "Sequence[Appended]":
        """Concatenate what successive appends stored; a plain list when no part is a batch."""
        if not any(isinstance(p, AppendedBatch) for p in parts):
            return [a for p in parts for a in p]
        # (numpy imported here, not at the top: a batch's columns are numpy arrays, so it is
        # loaded already whenever one exists, and a client, which reaches this module through
        # the wire types, starts without it)
        import numpy as np

        cols = [[], [], [], []]
        for p in parts:
            if isinstance(p, AppendedBatch):
                arrays = (p.index, p.term, p.pos, p.size)
            else:
                arrays = [np.array(c, dtype=np.int64) for c in zip(*p)] if p else [np.empty(0, np.int64)] * 4
            for col, a in zip(cols, arrays):
                col.append(a)
        return cls(*(np.concatenate(c) for c in cols))

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return AppendedBatch(self.index[i], self.term[i], self.pos[i], self.size[i])
        return Appended(int(self.index[i]), int(self.term[i]), int(self.pos[i]), int(self.size[i]))

    def rows(self) -> list[tuple[int, int, int, int]]:
        return list(zip(self.index.tolist(), self.term.tolist(), self.pos.tolist(), self.size.tolist()))



class AppendedRun(_AppendedColumns):
    """What one append stored in one data file, without a tuple per entry: entries
    ``first``, ``first + 1``, ... laid end to end from ``pos``, entry k ending ``ends[k]``
    bytes after ``pos``, of term ``terms`` (one int for all, or a list with one per
    entry). The compiled lanes (store/_lanes.c) give what they store as one."""

    __slots__ = ("first", "pos", "ends", "terms")

    def __init__(self, first: int, pos: int, ends: list[int], terms: int | list[int]) -> None:
        self.first, self.pos, self.ends, self.terms = first, pos, ends, terms

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self.ends)))]
        n = len(self.ends)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("AppendedRun index out of range")
        start = self.ends[i - 1] if i else 0
        term = self.terms if isinstance(self.terms, int) else self.terms[i]
        return Appended(self.first + i, term, self.pos + start, self.ends[i] - start)

    def rows(self) -> list[tuple[int, int, int, int]]:
        # (every loop here runs in C: a batched append answers for a thousand entries at a time)
        starts = [0, *self.ends[:-1]]
        terms = itertools.repeat(self.terms) if isinstance(self.terms, int) else self.terms
        return list(zip(range(self.first, self.first + len(self.ends)), terms, map(self.pos.__add__, starts),
                        map(operator.sub, self.ends, starts)))



def appended_rows(appended: Sequence[Appended]) -> list[tuple[int, int, int, int]]:
    """``(index, term, pos, size)`` per entry (plain tuples), for answers to clients."""
    if isinstance(appended, _AppendedColumns):
        return appended.rows()
    return [tuple(a) for a in appended]


@dataclass(frozen=True, slots=True)
class Entry:
    index: int
    term: int
    pos: int
    magic: int
    body: bytes
    body_crc: int = 0
    chain_crc: int = 0
    channel: int = 0

    @property
    def size(self) -> int:
        return HEADER_SIZE + len(self.body)


class LogStore(abc.ABC):
    begin_index: int
    end_index: int
    end_term: int
    write_pos: int  # logical byte offset just past the last entry
    data_file_size: int  # bytes of each data file: an entry that does not fit starts the next one

    def adopt_data_file_size(self, size: int) -> None:
        """Write data files of ``size`` bytes from now on (smaller than now), as the group's
        leader does, if that moves no entry (see FileStore.adopt_data_file_size);
        StoreUsageError with the reason otherwise."""
        raise StoreUsageError(f"{type(self).__name__} cannot change its data file size")

    @property
    @abc.abstractmethod
    def committed_index(self) -> int: ...

    @abc.abstractmethod
    def append_leader(self, bodies: Sequence[bytes], term: int, magic: int = MAGIC_NORMAL) -> Sequence[Appended]: ...

    def append(self, body: bytes, term: int, magic: int = MAGIC_NORMAL) -> Appended:
        return self.append_leader((body,), term, magic)[0]

    @abc.abstractmethod
    def append_follower(self, raw, *, max_term: int | None = None) -> Sequence[Appended]:
        """Store leader-encoded entries; ``max_term``: refuse entries of a higher term."""

    @abc.abstractmethod
    def get(self, index: int) -> Entry: ...

    def get_range(self, first: int, count: int) -> list[Entry]:
        self.check_range(first)
        last = min(self.end_index, first + count - 1)
        return [self.get(i) for i in range(first, last + 1)]

    def get_raw(self, first: int, max_count: int, max_bytes: int) -> bytes | memoryview:
        """Encoded entries from ``first`` on, at least one, at most max_count/max_bytes:
        bytes, or a read-only view of bytes (entries a leader has just written)."""
        return self.read_entries(first, max_count, max_bytes)[0]

    @abc.abstractmethod
    def read_entries(self, first: int, max_count: int, max_bytes: int, *,
                     as_stored: bool = False) -> tuple[bytes | memoryview, int]:
        """Like :meth:`get_raw`, with the number of entries read; a body failing its recorded
        CRC is never returned, unless ``as_stored`` (the bytes as they lie, for fingerprints)."""

    @abc.abstractmethod
    def term_of(self, index: int) -> int: ...

    def locate(self, index: int) -> tuple[int, int]:
        """(pos, size) of an entry without reading its body."""
        e = self.get(index)
        return e.pos, e.size

    def first_index_of_term(self, index: int) -> int:
        """The lowest index j <= ``index`` whose term equals term_of(index) (terms never go
        down along the log, so this is a binary search)."""
        term = self.term_of(index)
        lo, hi = self.begin_index, index
        while lo < hi:
            mid = (lo + hi) // 2
            if self.term_of(mid) < term:
                lo = mid + 1
            else:
                hi = mid
        return lo

    @abc.abstractmethod
    def truncate(self, from_index: int, *, force: bool = False, keep: Keep | None = None) -> int:
        """Drop entries ``from_index..end``; returns how many were dropped. With a
        ``keeper``, the entries are kept first (a keep that fails raises; nothing is cut).
        ``keep(first, last)``, when given, is called for that in place of the store's keeper
        (:meth:`cut_ordered` gives one)."""

    # Both fixed when the store is opened (FileStore.open), each called as
    # keeper(store, first, last) -> the file written (or None), before entries first..last
    # are cut: kept.py's Keeper. ``keeper`` keeps every cut (truncate, reset_to): the node's
    # --keep-truncated; None keeps nothing. ``operator_keeper`` keeps an operator's cut
    # (cut_ordered) when there is no ``keeper``: the node's, into its own directory.
    keeper = None
    operator_keeper = None

    def _keep(self, first: int, last: int) -> None:
        if self.keeper is not None and 0 <= first <= last:
            self.keeper(self, first, last)

    def cut_ordered(self, from_index: int) -> tuple[int, str | None]:
        """An operator's cut (a REPAIR: ``peer truncate``, ``peer compare``'s repair): entries
        ``from_index..end`` dropped, committed ones included, as ``truncate(force=True)``, and
        kept first by the ``keeper``, else by the ``operator_keeper`` (a keep that fails
        raises; nothing is cut). Returns (how many were dropped, the file that keeps them, or
        None when nothing was kept)."""
        keeper = self.keeper if self.keeper is not None else self.operator_keeper
        kept: list[str | None] = []

        def keep(first: int, last: int) -> None:
            if keeper is not None and 0 <= first <= last:
                kept.append(keeper(self, first, last))

        dropped = self.truncate(from_index, force=True, keep=keep)
        return dropped, (kept[0] if kept else None)

    @abc.abstractmethod
    def set_committed(self, index: int) -> int:
        """Raise the committed index to min(index, end_index); returns the committed index."""

    @abc.abstractmethod
    def persist_checkpoint(self) -> None:
        """Keep the end and commit index where a restart finds them (the file store's
        checkpoint file; a memory store, which does not outlive its process, keeps them)."""

    # -- the log's beginning moves (retention, snapshots, a follower cut back) ------------
    @abc.abstractmethod
    def delete_head(self, count: int) -> tuple[list[str], list[str]]:
        """Delete the entries of the first ``count`` data files (never the last one, never
        an entry past the commit index): the log then begins at the next file's first entry.
        Returns the names of the (data files, index files) deleted."""

    @abc.abstractmethod
    def reset_to(self, raw) -> Sequence[Appended]:
        """Drop the whole log and begin it again with the one encoded entry ``raw`` at its
        own index and position (which must start a data file)."""

    # -- reads by entry -------------------------------------------------------------------
    @abc.abstractmethod
    def get_bytes(self, index: int) -> bytes:
        """Entry ``index`` as encoded (header and body), as a follower compares it."""

    @abc.abstractmethod
    def indexes_with_magic(self, magic: int) -> list[int]:
        """The indexes of the entries of magic ``magic`` in the log, in order."""

    def flush(self, *, index: bool = True) -> None:  # pragma: no cover - memory store has nothing to flush
        pass

    def close(self) -> None:
        pass

    def check_range(self, index: int) -> None:
        if not 0 <= self.begin_index <= index <= self.end_index:
            raise IndexOutOfRange(f"index {index} is outside the log [{self.begin_index}, {self.end_index}]")

    def entries(self) -> Iterable[Entry]:
        if self.begin_index < 0:  # a new log: begin and end are both -1, nothing to yield
            return
        for i in range(self.begin_index, self.end_index + 1):
            yield self.get(i)
