"""A member's store made from a backup (store/backup.py), and a survivor's store made the
whole of a new group (force-new-group). Pure file work: no sockets.

Both end a log with one more config entry (magic 3) holding the new member list, in a term
above every term the log and the term file know (``new_term``): a group's membership lives
in its log (cluster/raft/membership.py: the last config entry in force), so a new member list
is an entry, not a file edited beside it. The member list's bytes are the caller's
(cluster/raft/membership.py ``Membership.body``), as are the term and vote file's contents
beyond the term.

- :func:`restore_store`: a new node directory holds the backup's entries as a follower
  would have them (the same positions, data and index files, the snapshot if the backup has
  one), then the config entry, all of it committed (checkpoint) and ``currterm`` at
  ``new_term``. Every member of the new group restored from the same backup with the same
  member list holds byte-identical files. Refused onto a directory that holds anything; a
  backup that fails :meth:`~store.backup.BackupReader.verify` is refused before anything is
  written; on any failure the directory made is removed.
- :func:`force_plan` / :func:`force_apply`: the survivor's log is kept whole; what lies
  after its checkpoint's commit index (uncommitted until now) is listed by the plan, and
  becomes committed by the apply, with the config entry after it. Refused while the store
  is running (its lock). A log that holds DLedger 0.2.7's own entries only (magic 1: no
  no-op, no config entry) was written in a group with Java members, which take their members
  from their start-up configuration and cannot read a config entry (DLedger's recovery stops
  at an unknown magic, a broker would read it as a message): ``java_only``; for it the apply
  writes no entry, only the commit index (checkpoint) and the new term.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

from .backup import BackupError, BackupReader
from .errors import PositionMismatch, StoreInUseError, StoreUsageError
from .filestore import FileStore
from .format import MAGIC_CONFIG, MAGIC_NOOP, decode_header
from .layout import NodeLayout
from .lock import lock_holder
from .metafiles import read_currterm, write_currterm
from .snapshot import SnapshotStore


@dataclass
class Restored:
    node_dir: str
    first_index: int
    last_index: int  # the backup's last entry
    config_index: int  # the new member list's entry (last_index + 1), committed
    term: int  # the new term: the config entry's, and currterm's
    snapshot_index: int | None
    data_file_size: int


def _empty_or_absent(path: str) -> None:
    if os.path.lexists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise StoreUsageError(f"{path} is not empty: a store is restored into a new directory only")


def restore_store(reader: BackupReader, node_dir: str, config_body: bytes, new_term: int, *,
                  data_file_size: int | None = None, index_file_size: int | None = None,
                  progress=None) -> Restored:
    """Build ``node_dir`` from the backup ``reader`` holds (see the module's docstring).
    ``data_file_size``: when the backup does not know its own (a live backup that saw no
    file roll); given with one it must be the same."""
    m = reader.manifest
    _empty_or_absent(node_dir)
    if new_term <= m.last_term:
        raise StoreUsageError(f"the new term {new_term} must be above the backup's last term {m.last_term}")
    if data_file_size is not None and m.data_file_size is not None and data_file_size != m.data_file_size:
        raise StoreUsageError(f"the backup's entries lie in data files of {m.data_file_size} bytes, not "
                              f"{data_file_size}")
    size = m.data_file_size or data_file_size
    problem = reader.verify()
    if problem is not None:
        raise BackupError(f"{reader.path}: {problem.text}; nothing restored")
    made = not os.path.lexists(node_dir)
    try:
        store = FileStore.open(node_dir, data_file_size=size, index_file_size=index_file_size)
        try:
            for _i, c, data in reader.chunks():
                _follow(store, data, c.first_index)
                if progress is not None:
                    progress(c.length)
            snap_index = None
            if m.snapshot is not None:
                s = m.snapshot
                inst = SnapshotStore(node_dir).installer(s["index"], s["term"], s["length"], s["crc"])
                off = 0
                for part in reader.snapshot_parts():
                    off = inst.write(off, part)
                inst.finish()
                snap_index = s["index"]
            appended = store.append_leader([config_body], new_term, MAGIC_CONFIG)
            config_index = appended[0].index
            store.set_committed(config_index)
            store.flush()
            store.persist_checkpoint()
            used = store.data_file_size
        finally:
            store.close()
        write_currterm(node_dir, new_term, None)
    except BaseException:
        if made:
            shutil.rmtree(node_dir, ignore_errors=True)
        else:  # (it was an empty directory: emptied again)
            for name in os.listdir(node_dir):
                p = os.path.join(node_dir, name)
                shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else os.unlink(p)
        raise
    return Restored(node_dir, m.first_index, m.last_index, config_index, new_term, snap_index, used)


def _follow(store: FileStore, data: bytes, first: int) -> None:
    """Write one chunk as a follower writes its leader's entries (their positions kept);
    a log that begins past index 0 begins with its first entry (store.reset_to)."""
    try:
        if store.end_index < 0 and first > 0:
            h = decode_header(data, 0)
            store.reset_to(data[:h.size])
            data = data[h.size:]
        if data:
            store.append_follower(data)
    except PositionMismatch as exc:
        raise StoreUsageError(f"entry {exc.index} lies at position {exc.pos}, where data files of "
                              f"{store.data_file_size} bytes cannot hold it: restore with the source's data file "
                              f"size") from None


# -- force-new-group --------------------------------------------------------------------
@dataclass
class ForcePlan:
    node_dir: str
    begin_index: int
    end_index: int
    end_term: int
    committed_index: int  # as the checkpoint says (-1: none recorded)
    term: int  # currterm's
    new_term: int
    uncommitted: list[dict] = field(default_factory=list)  # index, term, magic, size of each
    java_only: bool = False  # no no-op and no config entry in the log: written with Java members


def _refuse_running(node_dir: str) -> None:
    holder = lock_holder(NodeLayout(node_dir))
    if holder is not None:
        raise StoreInUseError(f"{node_dir} is in use by {holder} (a running node): stop it first; a group is forced "
                              f"only from a stopped survivor's files")


def force_plan(node_dir: str) -> ForcePlan:
    """What forcing ``node_dir`` into a group of its own would do (nothing is changed)."""
    if not os.path.isdir(node_dir):
        raise StoreUsageError(f"{node_dir}: no such directory")
    _refuse_running(node_dir)
    store = FileStore.open(node_dir, read_only=True)
    try:
        if store.end_index < 0:
            raise StoreUsageError(f"{node_dir}: its log is empty; nothing to keep (start a new group instead)")
        committed = store.checkpoint_committed
        committed = -1 if committed is None else min(committed, store.end_index)
        term = read_currterm(node_dir).term
        rows = []
        for i in range(max(committed + 1, store.begin_index), store.end_index + 1):
            pos, size = store.locate(i)
            rows.append({"index": i, "term": store.term_of(i), "magic": decode_header(store.get_bytes(i)).magic,
                         "size": size, "pos": pos})
        java_only = not (store.indexes_with_magic(MAGIC_NOOP) or store.indexes_with_magic(MAGIC_CONFIG))
        return ForcePlan(node_dir, store.begin_index, store.end_index, store.end_term, committed, term,
                         max(term, store.end_term) + 1, rows, java_only)
    finally:
        store.close()


def force_apply(plan: ForcePlan, config_body: bytes | None) -> int | None:
    """Force the store ``plan`` was made of: the config entry ``config_body`` appended in
    ``plan.new_term`` (none when None: a Java-only log), the whole log committed, currterm at
    the new term. The config entry's index (None without one). Refused when the store changed
    since the plan."""
    _refuse_running(plan.node_dir)
    store = FileStore.open(plan.node_dir)
    try:
        if (store.end_index, store.end_term) != (plan.end_index, plan.end_term):
            raise StoreUsageError(f"{plan.node_dir} changed since the plan (its log ends at {store.end_index}, "
                                  f"term {store.end_term}): plan again")
        index = None
        if config_body is not None:
            index = store.append_leader([config_body], plan.new_term, MAGIC_CONFIG)[0].index
        store.set_committed(store.end_index)
        store.flush()
        store.persist_checkpoint()
    finally:
        store.close()
    write_currterm(plan.node_dir, plan.new_term, None)
    return index
