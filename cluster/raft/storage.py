"""The one interface through which the deciding logic reads and writes its log.

Every part of the core (core.py and the parts it makes: leading.py, dispatcher.py,
follower.py, install.py, compaction.py, reconfig.py, elections.py, reads.py) is given the
log as a ``RaftLog`` and calls nothing else of it. The node's ``store.filestore.FileStore``
and the simulator's ``store.memstore.MemoryStore`` (tests/support/sim.py ``SimStore``)
both are one; store/base.py ``LogStore`` documents each call's errors.

Why the core calls its log, and does not hand its writes out (etcd's ``Ready``, persisted
by the node before it sends): a leader's dispatchers read the entries they push from the
log in the same step that appended them, a follower answers a push with the end its log
has after the write, and a deposed leader's entries are cut before the answer that says
so. Handing writes out would put a second, unpersisted log in the core (etcd's
``unstable``) and a loop turn between an append and its pushes; docs/architecture.md has
the measurement and the choice.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from store.base import Appended, Entry


class RaftLog(Protocol):
    """The log as the rules use it: where it begins and ends, what it holds, and the writes
    a leader, a follower, retention and snapshots make. Errors are store.errors': a full or
    failing disk (StoreIOError, nothing written), an entry that fails its checks
    (StoreCorruptError), a call the log cannot take (StoreUsageError, PositionMismatch)."""

    begin_index: int  # -1 while the log is empty
    end_index: int
    end_term: int
    write_pos: int  # the logical byte offset just past the last entry
    data_file_size: int

    @property
    def committed_index(self) -> int: ...

    # -- reads ---------------------------------------------------------------------------
    def get(self, index: int) -> Entry: ...

    def get_bytes(self, index: int) -> bytes: ...

    def get_raw(self, first: int, max_count: int, max_bytes: int) -> bytes | memoryview: ...

    def read_entries(self, first: int, max_count: int, max_bytes: int, *,
                     as_stored: bool = False) -> tuple[bytes | memoryview, int]: ...

    def term_of(self, index: int) -> int: ...

    def first_index_of_term(self, index: int) -> int: ...

    def locate(self, index: int) -> tuple[int, int]: ...

    def indexes_with_magic(self, magic: int) -> list[int]: ...

    # -- writes --------------------------------------------------------------------------
    def append_leader(self, bodies: Sequence[bytes], term: int, magic: int = 1) -> Sequence[Appended]: ...

    def append_follower(self, raw, *, max_term: int | None = None) -> Sequence[Appended]: ...

    def truncate(self, from_index: int, *, force: bool = False) -> int: ...

    def cut_ordered(self, from_index: int) -> tuple[int, str | None]:
        """An operator's cut (REPAIR): ``truncate(force=True)``, always kept where the store
        keeps such cuts; (entries dropped, the file that keeps them or None)."""

    def reset_to(self, raw) -> Sequence[Appended]: ...

    def delete_head(self, count: int) -> tuple[list[str], list[str]]: ...

    def set_committed(self, index: int) -> int: ...

    def adopt_data_file_size(self, size: int) -> None: ...

    def flush(self, *, index: bool = True) -> None: ...

    def persist_checkpoint(self) -> None: ...
