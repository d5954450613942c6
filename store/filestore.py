"""The file store: DLedger 0.2.x ``DLedgerMmapFileStore``-compatible data and index files.

Ownership: one :class:`FileStore` owns its node directory while open (a second writer on
the same directory is refused: see store/lock.py). Not thread-safe: the caller serialises
calls, except that :meth:`flush` may run in another thread while no append or truncate is
running.

Durability: with ``flush="sync"`` every append/truncate call ends with an msync of what it
wrote (group commit is the caller batching bodies into one call); with ``flush="async"``
the caller calls :meth:`flush` periodically, as DLedger's flush service does.

Parts. FileStore is the object the rest of the code uses; the work is done by its parts,
each in its own module with its own state, all sharing one :class:`~store.extent.Extent`
(where the log begins and ends):

- ``lock`` (store/lock.py, :class:`~store.lock.NodeLock`): the directory's lock;
- opening (store/opening.py): the file lists, recovery, and what it found (``opened``);
- ``reads`` (store/logreads.py, :class:`~store.logreads.LogReader`): entries by index,
  and what the reads remember (a leader's latest writes, the last answer);
- ``appender`` (store/appending.py, :class:`~store.appending.Appender`): a leader's and a
  follower's appends, and putting back a write that failed half-way;
- ``cutter`` (store/cutting.py, :class:`~store.cutting.Cutter`): truncation, head
  deletion, reset, and a smaller data file size.
"""

from __future__ import annotations

from typing import Sequence

from .appending import Appender
from .base import Appended, Entry, Keep, LogStore
from .cutting import Cutter
from .errors import StoreUsageError
from .extent import Extent
from .files import FileList, SyncJob
from .format import MAGIC_NORMAL
from .layout import NodeLayout
from .lock import NodeLock
from .logreads import LogReader
from .metafiles import write_checkpoint
from .opening import Recovered, file_lists, recover
from .recovery import RecoveryPlan, RecoveryReport

FLUSH_POLICIES = ("async", "sync")


class FileStore(LogStore):
    def __init__(self, layout: NodeLayout, data: FileList, index: FileList, *, flush: str, read_only: bool,
                 with_crc: bool = True) -> None:
        if flush not in FLUSH_POLICIES:
            raise StoreUsageError(f"flush policy must be one of {', '.join(FLUSH_POLICIES)}")
        self.layout = layout
        self.data = data
        self.index = index
        self.read_only = read_only
        self.extent = Extent()
        self.lock = NodeLock(layout)
        self.opened: Recovered | None = None  # set by open (recovery's findings)
        self.closed = False
        self.reads = LogReader(data, index, self.extent)
        self.appender = Appender(data, index, self.extent, self.reads, with_crc=with_crc, sync=flush == "sync")
        self.cutter = Cutter(data, index, self.extent, self.reads)
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
        keeper=None,
        operator_keeper=None,
    ) -> "FileStore":
        """Open (creating it if writable) and recover a node directory.

        Read-only stores plan recovery but change nothing on disk; they serve reads up to
        the end the plan found. A writable store holds the directory's lock while open;
        a caller that already holds it (``lock_node_dir``) passes ``lock_fd`` and keeps
        ownership: the store then neither takes nor releases the lock. ``drop_behind``
        (bytes, 0 for none): see :meth:`take_dirty`. ``keeper`` (kept.py's Keeper) keeps
        the whole entries recovery cuts before it cuts them, and stays the store's keeper;
        ``operator_keeper`` keeps an operator's cut when there is none (see LogStore.cut_ordered).
        """
        layout = NodeLayout(node_dir)
        data, index = file_lists(layout, data_file_size, index_file_size, read_only=read_only,
                                 drop_behind=drop_behind)
        store = None
        try:
            store = cls(layout, data, index, flush=flush, read_only=read_only, with_crc=with_crc)
            if not read_only and lock_fd is None:  # before recovery writes anything
                store.lock.take()
            store.opened = recover(layout, data, index, store.extent, read_only=read_only, keeper=keeper)
            store.keeper, store.operator_keeper = keeper, operator_keeper
            if not read_only:
                data.set_random_access()
        except BaseException:
            data.close()
            index.close()
            if store is not None:
                store.lock.release()
            raise
        return store

    @property
    def plan(self) -> RecoveryPlan | None:
        """What recovery found at open (read-only stores: what it would do)."""
        return self.opened.plan if self.opened is not None else None

    @property
    def recovery(self) -> RecoveryReport | None:
        """What recovery changed at open (None when opened read-only)."""
        return self.opened.report if self.opened is not None else None

    @property
    def checkpoint_committed(self) -> int | None:
        """The committed index as the checkpoint file says, before recovery's clamp."""
        return self.opened.checkpoint_committed if self.opened is not None else None

    @property
    def checkpoint_problem(self) -> str | None:
        """Why the checkpoint (main file) was not used, if it was not."""
        return self.opened.checkpoint_problem if self.opened is not None else None

    def recovery_dropped(self) -> tuple[int, int]:
        """How many entries recovery dropped at open, and how many of those the checkpoint
        had recorded as committed: (0, 0) when it dropped none."""
        return self.opened.dropped() if self.opened is not None else (0, 0)

    def recovery_warning(self) -> str | None:
        """What recovery dropped at open, in one line (see :meth:`Recovered.warning`)."""
        return self.opened.warning() if self.opened is not None else None

    def recovery_held(self) -> list:
        """The damaged entries recovery kept in the log at open (recovery.Held, index order)."""
        return list(self.opened.plan.held) if self.opened is not None else []

    def recovery_held_warning(self) -> str | None:
        """Those entries in one line (see :meth:`Recovered.held_warning`); None when none."""
        return self.opened.held_warning() if self.opened is not None else None

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
            self.lock.release()

    def __enter__(self) -> "FileStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- where the log begins and ends ------------------------------------------------
    @property
    def begin_index(self) -> int:
        return self.extent.begin_index

    @property
    def end_index(self) -> int:
        return self.extent.end_index

    @property
    def end_term(self) -> int:
        return self.extent.end_term

    @property
    def write_pos(self) -> int:
        return self.extent.write_pos

    @property
    def last_chain(self) -> int:
        return self.extent.last_chain

    @property
    def data_file_size(self) -> int:
        return self.data.file_size

    @property
    def with_crc(self) -> bool:
        """Whether appends record checksums (bodyCrc and the chain): the append path's."""
        return self.appender.with_crc

    # -- committed index and checkpoint -----------------------------------------------
    @property
    def committed_index(self) -> int:
        return self.extent.committed

    def set_committed(self, index: int) -> int:
        x = self.extent
        index = min(index, x.end_index)
        if index > x.committed:
            x.committed = index
        return x.committed

    def persist_checkpoint(self) -> None:
        self._writable()
        write_checkpoint(self.layout.node_dir, self.extent.end_index, self.extent.committed)

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

    def _writable(self) -> None:
        if self.read_only:
            raise StoreUsageError(f"{self.layout.node_dir} is open read-only")
        if self.closed:
            raise StoreUsageError("store is closed")

    # -- appending (store/appending.py) -----------------------------------------------
    def append_leader(self, bodies: Sequence[bytes], term: int, magic: int = MAGIC_NORMAL) -> Sequence[Appended]:
        self._writable()
        return self.appender.append_leader(bodies, term, magic)

    def append_follower(self, raw, *, max_term: int | None = None) -> Sequence[Appended]:
        """Store entries encoded by the leader, byte for byte, at the leader's positions
        (see :meth:`store.appending.Appender.append_follower`)."""
        self._writable()
        return self.appender.append_follower(raw, max_term)

    # -- reading (store/logreads.py) --------------------------------------------------
    def check_range(self, index: int) -> None:
        self.reads.check_range(index)

    def indexes_with_magic(self, magic: int) -> list[int]:
        """The indexes of the entries of ``magic`` (found from the index files)."""
        return self.reads.indexes_with_magic(magic)

    def locate(self, index: int) -> tuple[int, int]:
        """(pos, size) of an entry, from its index record."""
        return self.reads.locate(index)

    def term_of(self, index: int) -> int:
        return self.reads.term_of(index)

    def get_bytes(self, index: int, *, checked: bool = False) -> bytes:
        return self.reads.get_bytes(index, checked=checked)

    def get(self, index: int, *, checked: bool = False) -> Entry:
        """Entry ``index`` (``checked``: StoreCorruptError when its body fails its recorded CRC)."""
        return self.reads.get(index, checked=checked)

    def read_entries(self, first: int, max_count: int, max_bytes: int, *,
                     as_stored: bool = False) -> tuple[bytes | memoryview, int]:
        """Encoded entries from ``first`` on, with their count (see
        :meth:`store.logreads.LogReader.read_entries`)."""
        return self.reads.read_entries(first, max_count, max_bytes, as_stored=as_stored)

    # -- cutting (store/cutting.py) ---------------------------------------------------
    def truncate(self, from_index: int, *, force: bool = False, keep: Keep | None = None) -> int:
        self._writable()
        return self.cutter.truncate(from_index, force, self._keep if keep is None else keep)

    def delete_head(self, count: int) -> tuple[list[str], list[str]]:
        """Delete the first ``count`` data files (never the last one, never one holding an
        entry past the commit index) and then the index files wholly below the new first
        entry's record, as DLedger's clean-space service does; the log then begins at the
        first entry of the new first data file. Returns (data files, index files) deleted.
        The rules of which files may go are store.retention's; this only checks the two
        that keep the log whole."""
        self._writable()
        return self.cutter.delete_head(count, self.remover)

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
        self.cutter.clear_for(raw, self.remover, self._keep)
        try:
            out = self.append_follower(raw)
        finally:
            self.flush()  # like a truncation, a reset is made durable at once
        return out

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
        self.cutter.adopt_data_file_size(size)
