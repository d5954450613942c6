"""Where a log in files begins and ends: the one piece of state the file store's parts share.

:class:`~store.filestore.FileStore` creates one :class:`Extent` and hands it to each of its
parts (store/appending.py moves the end forward, store/cutting.py moves it back or the
beginning forward, store/opening.py sets both from recovery, store/logreads.py reads
within them). Every writer of these fields is one of those parts.
"""

from __future__ import annotations


class Extent:
    __slots__ = ("begin_index", "end_index", "end_term", "write_pos", "last_chain", "committed")

    def __init__(self) -> None:
        self.begin_index = -1  # first entry held; -1 while the log has none
        self.end_index = -1  # last entry held (begin_index - 1 ... when empty: see FileStore.truncate)
        self.end_term = 0  # term of the last entry; 0 when empty
        self.write_pos = 0  # logical byte offset just past the last entry
        self.last_chain = 0  # chain CRC of the last entry (format.CHAIN_INPUT)
        self.committed = -1  # committed index, never past end_index

    def restore(self, mark) -> None:
        """Set (begin_index, end_index, end_term, write_pos, last_chain) at once."""
        self.begin_index, self.end_index, self.end_term, self.write_pos, self.last_chain = mark
