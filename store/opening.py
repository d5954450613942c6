"""Opening a node directory for the file store: its file lists, and recovery.

Two steps of :meth:`store.filestore.FileStore.open`, each a function: :func:`file_lists`
lists (and, for a writer, creates) the data and index files with the sizes they were
written with; :func:`recover` plans recovery (store/recovery.py), applies it unless
read-only, sets the log's :class:`~store.extent.Extent` from it and reads the checkpoint.
What it found stays in a :class:`Recovered`, which says in one line what was dropped.
"""

from __future__ import annotations

import errno
import os

from .errors import StoreCorruptError, StoreIOError, StoreUsageError
from .extent import Extent
from .files import FileList, MappedFile
from .format import DEFAULT_DATA_FILE_SIZE, DEFAULT_INDEX_FILE_SIZE, HEADER_SIZE, INDEX_UNIT_SIZE, MIN_BLANK_LEN
from .layout import NodeLayout
from .metafiles import read_checkpoint
from .reading import load_file_lists
from .recovery import RecoveryPlan, RecoveryReport, apply_recovery, cut_runs, cut_units, plan_recovery
from .writing import free_bytes, io_error, reserve, write_error

def _preallocate(fd: int, size: int) -> None:
    """Reserve blocks so mapped writes cannot hit a full disk (SIGBUS); sparse if unsupported.
    StoreIOError with errno ENOSPC when the disk has no room (the caller names the file)."""
    reserve(fd, size, "a new store file")


class _PreallocatingFileList(FileList):
    def file_for_write(self, offset: int) -> MappedFile:
        existing = self.find(offset)
        if existing is not None:
            return existing
        start = offset - offset % self.file_size
        path = os.path.join(self.directory, f"{start:020d}")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise write_error(path, self.file_size, exc) from exc
        try:
            _preallocate(fd, self.file_size)
        except StoreIOError as exc:
            os.close(fd)
            os.unlink(path)
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            free = free_bytes(path)
            raise io_error(exc.errno, f"{path}: disk full: a new store file needs {self.file_size} bytes"
                                      + (f", {free} free there" if free is not None else "")) from exc
        os.close(fd)
        return super().file_for_write(offset)


def file_lists(layout: NodeLayout, data_file_size: int | None, index_file_size: int | None, *, read_only: bool,
               drop_behind: int) -> tuple[FileList, FileList]:
    """A node's data and index files, listed with the sizes they were written with; a
    writer's lists create (and preallocate) the files it needs. StoreUsageError for sizes
    or a ``drop_behind`` that cannot be; the caller closes both lists."""
    if read_only and not os.path.isdir(layout.node_dir):
        raise StoreUsageError(f"{layout.node_dir}: no such directory")
    if index_file_size is not None and index_file_size % INDEX_UNIT_SIZE:
        raise StoreUsageError(f"index file size must be a multiple of {INDEX_UNIT_SIZE}")
    list_cls = FileList if read_only else _PreallocatingFileList
    data = list_cls(layout.data_dir, data_file_size or DEFAULT_DATA_FILE_SIZE, writable=not read_only)
    index = list_cls(layout.index_dir, index_file_size or DEFAULT_INDEX_FILE_SIZE, writable=not read_only)
    if drop_behind < 0:
        raise StoreUsageError("drop-behind must not be negative")
    data.drop_behind = drop_behind
    try:
        load_file_lists(data, index, data_file_size, index_file_size)
        if data.file_size < HEADER_SIZE + MIN_BLANK_LEN:
            raise StoreUsageError(f"data file size {data.file_size} is too small")
    except BaseException:
        data.close()
        index.close()
        raise
    return data, index


class Recovered:
    """What recovery found at open: its plan, what it changed (None when read-only), and
    the checkpoint as read."""

    def __init__(self, plan: RecoveryPlan, report: RecoveryReport | None, read_only: bool) -> None:
        self.plan = plan
        self.report = report
        self.read_only = read_only
        self.checkpoint_committed: int | None = None  # as the checkpoint file says, before recovery's clamp
        self.checkpoint_problem: str | None = None  # why the checkpoint (main file) was not used

    def dropped(self) -> tuple[int, int]:
        """How many entries recovery dropped at open, and how many of those the checkpoint
        had recorded as committed: (0, 0) when it dropped none."""
        plan = self.plan
        if plan.dropped_to <= plan.end_index:
            return 0, 0
        committed = self.checkpoint_committed
        below = 0 if committed is None else max(0, min(committed, plan.dropped_to) - plan.end_index)
        return plan.dropped_to - plan.end_index, below

    def held_warning(self) -> str | None:
        """The damaged entries recovery kept in the log, in one line (None when none): they
        are never served, and the node's scrub repairs them from a replica's sound copy."""
        held = self.plan.held
        if not held:
            return None
        first = held[0]
        more = f" and {len(held) - 1} more up to entry {held[-1].index}" if len(held) > 1 else ""
        after = self.plan.end_index - first.index
        return (f"recovery kept {len(held)} damaged entr{'y' if len(held) == 1 else 'ies'} in the log: entry "
                f"{first.index} ({first.status} at pos {first.pos}){more}; the {after} entries after it are "
                f"kept. A damaged entry is never served; the scrub repairs it from a member holding a sound copy")

    def warning(self) -> str | None:
        """What recovery dropped at open, in one line for an operator (None when nothing):
        which entries, why (file, offset, the check that failed), and whether the checkpoint
        had recorded any of them as committed (those must come back from the leader)."""
        plan = self.plan
        if plan.dropped_to <= plan.end_index and not plan.dropped_bytes:
            return None
        what = (f"entries {plan.end_index + 1}..{plan.dropped_to}" if plan.dropped_to > plan.end_index
                else "a partial entry")
        done = "cut" if not self.read_only else "would cut (opened read-only: nothing changed)"
        out = (f"recovery {done} {what} ({plan.dropped_bytes} bytes of data after entry {plan.end_index}): "
               f"{plan.end_reason}")
        committed = self.checkpoint_committed
        if committed is not None and committed > plan.end_index:
            out += (f"; the checkpoint recorded entries up to {committed} as committed, so entries "
                    f"{plan.end_index + 1}..{committed} were committed here and must come back from the leader")
        return out


def recover(layout: NodeLayout, data: FileList, index: FileList, extent: Extent, *, read_only: bool,
            keeper=None) -> Recovered:
    """Plan recovery, apply it unless ``read_only``, and set ``extent`` from it and from
    the checkpoint's committed index (clamped to the end). ``keeper`` (kept.py's Keeper, for
    ``--keep-truncated``): the whole entries recovery cuts are kept first, a file per run of
    consecutive ones (recovery.cut_runs); a keep that fails raises and nothing is cut."""
    # The checkpoint first: recovery holds (never cuts) damaged entries it says were committed.
    try:
        cp = read_checkpoint(layout.node_dir)
    except StoreCorruptError as exc:
        cp, cp_error = None, str(exc)
    plan = plan_recovery(data, index, None if cp is None else cp.committed_index)
    if keeper is not None and not read_only and cut_units(plan):
        _keep_cut(plan, data, index, keeper)
    found = Recovered(plan, None if read_only else apply_recovery(plan, data, index), read_only)
    extent.begin_index, extent.end_index, extent.end_term = plan.begin_index, plan.end_index, plan.end_term
    extent.write_pos, extent.last_chain = plan.end_pos, plan.last_chain
    if extent.end_index < 0:
        extent.end_term = 0
    # The committed index is an optimisation (a node re-learns it from the leader), so
    # an unreadable checkpoint is reported, not fatal: the store opens with committed
    # index -1, and a writable store rewrites the file on close.
    if cp is None:
        found.checkpoint_problem = cp_error
        return found
    found.checkpoint_problem = cp.problem
    found.checkpoint_committed = cp.committed_index
    if cp.committed_index is not None:
        extent.committed = min(cp.committed_index, extent.end_index)
    return found


def _keep_cut(plan: RecoveryPlan, data: FileList, index: FileList, keeper) -> None:
    """Keep the whole entries recovery cuts, a file per run (recovery.cut_runs); when one
    keep fails, the files this open kept are removed again and the error raised (nothing is
    cut: the next start keeps them anew)."""
    units = cut_units(plan)
    kept, written = 0, []
    try:
        for run in cut_runs(plan, data, index):
            counted = _Counted(run)
            path = keeper.keep(counted.first, None, counted, what="recovery at open")
            if path is None or counted.left_behind:  # (the bound: no room for more)
                break
            written.append(path)
            kept += counted.n
    except BaseException:
        for path in written:
            try:
                os.unlink(path)
            except OSError:
                pass
        raise
    if kept < len(units):
        keeper.say(f"recovery at open cuts what index units {units.start}..{units.stop - 1} record: "
                   f"{len(units) - kept} of them are not whole entries (damaged, or their index records are) "
                   f"or found no room, and were not kept",
                   {"event": "keep_truncated", "from_index": units.start, "to_index": units.stop - 1,
                    "not_kept": len(units) - kept})


class _Counted:
    """A run of entries, counted as the keeper takes them; ``left_behind``: it stopped taking
    them before the run ended (its bound)."""

    def __init__(self, run) -> None:
        self._run, self.n, self.left_behind = run, 0, True
        self._head = next(run)
        self.first = self._head[0]

    def __iter__(self):
        yield self._head
        self.n = 1
        for got in self._run:
            yield got
            self.n += 1
        self.left_behind = False
