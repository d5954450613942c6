"""The file store's cuts: the log's end cut back (truncate), its head files deleted
(retention), the whole log begun again (reset), and the data file size lowered.

:class:`Cutter` is the part of :class:`~store.filestore.FileStore` that removes entries.
It moves the shared :class:`~store.extent.Extent` back (or its beginning forward), tells
the read path (store/logreads.py) to forget what it remembers, and makes every cut durable
at once. Which head files may go is store/retention.py's to decide; this only checks the
rules that keep the log whole. ``keep`` (the store's keeper, see LogStore._keep, or an
operator's cut's, LogStore.cut_ordered) is called with the entries about to be cut, before
any of them is.
"""

from __future__ import annotations

from .base import Keep
from .errors import IndexOutOfRange, PositionMismatch, StoreCorruptError, StoreUsageError
from .extent import Extent
from .files import FileList
from .format import ENTRY_HEADER, HEADER_SIZE, INDEX_UNIT_SIZE, MIN_BLANK_LEN
from .logreads import LogReader


class Cutter:
    def __init__(self, data: FileList, index: FileList, extent: Extent, reads: LogReader) -> None:
        self.data = data
        self.index = index
        self.extent = extent
        self.reads = reads

    def _flush(self) -> None:
        self.data.flush()
        self.index.flush()

    def truncate(self, from_index: int, force: bool, keep: Keep) -> int:
        """Drop entries ``from_index..end`` (committed ones only with ``force``); returns how
        many were dropped. The cut region is zeroed, so no dropped entry can come back."""
        x = self.extent
        self.reads.forget()
        if from_index > x.end_index:
            return 0
        if from_index < x.begin_index or from_index < 0:
            raise IndexOutOfRange(f"cannot truncate from {from_index}: the log begins at {x.begin_index}")
        if from_index <= x.committed and not force:
            raise StoreUsageError(
                f"cannot truncate from {from_index}: entries up to {x.committed} are committed"
            )
        keep(from_index, x.end_index)
        cut_pos, _ = self.reads.locate(from_index)
        dropped = x.end_index - from_index + 1
        old_end_pos = x.write_pos
        self.data.zero(cut_pos, old_end_pos)
        holder = self.data.find(cut_pos)
        self.data.remove_from(cut_pos if holder is None or cut_pos == holder.start else holder.end)
        idx_cut = from_index * INDEX_UNIT_SIZE
        self.index.zero(idx_cut, (x.end_index + 1) * INDEX_UNIT_SIZE)
        iholder = self.index.find(idx_cut)
        self.index.remove_from(idx_cut if iholder is None or idx_cut == iholder.start else iholder.end)
        x.write_pos = cut_pos
        if from_index > x.begin_index:
            prev = self.reads.get(from_index - 1)
            x.end_index, x.end_term, x.last_chain = prev.index, prev.term, prev.chain_crc
        else:  # the log becomes empty; the next entry keeps index from_index
            x.end_index, x.end_term, x.last_chain = from_index - 1, 0, 0
        if x.committed > x.end_index:
            x.committed = x.end_index
        self._flush()  # a truncation is always made durable at once
        return dropped

    def delete_head(self, count: int, remover) -> tuple[list[str], list[str]]:
        """See FileStore.delete_head; ``remover`` unlinks the files elsewhere (None: here)."""
        x = self.extent
        files = self.data.files
        if count <= 0:
            return [], []
        if count >= len(files):
            raise StoreUsageError(f"cannot delete {count} data files of {len(files)}: the last one is being written")
        nxt = files[count]
        if nxt.mm is None or nxt.actual_size < HEADER_SIZE:
            raise StoreCorruptError(f"data file {nxt.name} has no entry to begin the log at")
        magic, size, new_begin = ENTRY_HEADER.unpack_from(nxt.mm, 0)[:3]
        if magic <= 0 or size < HEADER_SIZE or not x.begin_index < new_begin <= x.end_index + 1:
            raise StoreCorruptError(f"data file {nxt.name} does not begin with an entry of this log")
        if new_begin - 1 > x.committed:
            raise StoreUsageError(f"cannot delete entries up to {new_begin - 1}: the commit index is {x.committed}")
        # data files first, then the index files below: a crash between them (or before a
        # remover got to them) leaves a store that opens at one of the two beginnings
        removed = self.data.remove_head(count, remover)
        x.begin_index = new_begin
        below = new_begin * INDEX_UNIT_SIZE
        index_removed = self.index.remove_head(sum(1 for f in self.index.files if f.end <= below), remover)
        self.reads.forget_last()
        return removed, index_removed

    def clear_for(self, raw, remover, keep: Keep) -> None:
        """The first half of FileStore.reset_to: check that ``raw`` is one encoded entry
        that can begin a log, keep the uncommitted entries, remove every file, and leave the
        log empty, ending just before ``raw``'s index and position (its commit index too)."""
        x = self.extent
        self.reads.forget()
        magic, size, idx, _term, pos = ENTRY_HEADER.unpack_from(raw)[:5]
        if size != len(raw) or idx < 0 or pos < 0:
            raise StoreUsageError(f"reset needs exactly one encoded entry (got {len(raw)} bytes, size {size})")
        if pos % self.data.file_size:
            raise PositionMismatch(f"entry {idx} at pos {pos} does not start a data file of {self.data.file_size} "
                                   "bytes: a log cannot begin there", index=idx, pos=pos, expected=None)
        if x.end_index >= x.begin_index >= 0:  # (committed entries are the group's: only the rest is kept)
            first = max(x.begin_index, x.committed + 1)
            if first <= x.end_index:
                keep(first, x.end_index)
        self.data.remove_head(len(self.data.files), remover)
        self.index.remove_head(len(self.index.files), remover)
        x.restore((-1, idx - 1, 0, pos, 0))
        x.committed = idx - 1

    def adopt_data_file_size(self, size: int) -> None:
        """See FileStore.adopt_data_file_size."""
        x = self.extent
        files, old = self.data.files, self.data.file_size
        if size == old:
            return
        if not HEADER_SIZE + MIN_BLANK_LEN <= size < old:
            raise StoreUsageError(f"the data file size can only go down from {old} bytes (to {size})")
        if len(files) > 1:
            raise StoreUsageError(f"the log spans {len(files)} data files of {old} bytes already")
        if files:
            f = files[0]
            first_pos = self.reads.locate(x.begin_index)[0] if x.end_index >= x.begin_index >= 0 else f.start
            if f.start % size or first_pos != f.start or x.write_pos + MIN_BLANK_LEN > f.start + size:
                raise StoreUsageError(f"the log's data file {f.name} (entries at {first_pos}..{x.write_pos}) "
                                      f"does not fit one data file of {size} bytes")
            self.reads.forget()
            self.data.flush()
            self.data.cut_file(f, size)
        self.data.file_size = size
