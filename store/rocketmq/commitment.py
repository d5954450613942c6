"""Which entries of a DLedger-mode broker store are certainly committed, and whether a broker
is writing the store now.

A DLedger member writes its ``checkpoint`` (committedIndex) every few seconds
(``DLedgerMmapFileStore``'s flush service, checkPointInterval), while the broker dispatches
(``ReputMessageService``) up to the committed position as it moves
(``DLedgerCommitLog.getConfirmOffset``: reads past ``getCommittedPos`` are cut). A broker
killed with -9 can so leave a checkpoint far behind its consume queues: every message a
consume queue (or the key index, built by the same dispatch) points at was committed, and
may have been given to consumers already. :func:`commit_bound` takes the furthest of those
proofs; :class:`Bound` says of each entry whether it is certain:
``index <= checkpoint's committed index`` or ``pos + 48 <= the furthest offset a queue or the
index points at``. Both sides only grow along the log, so the certain entries are a prefix of
it, and a proof pointing past the log's end makes the whole log certain (clamped to its end).

Rules kept here: only read; a damaged queue or index file proves only what reads soundly
from it (units with a negative offset or size are not units; fillPreBlank units prove
nothing), never raises on what the files hold.
"""

from __future__ import annotations

import fcntl
import os
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import StoreError
from ..format import HEADER_SIZE
from ..metafiles import read_checkpoint
from .consumequeue import BLANK_SIZE, CONSUME_QUEUE_DIR, Queue, file_size, find_queues, plan_units, read_piece
from .lookup import INDEX_DIR

LOCK_FILE = "lock"  # StorePathConfigHelper.getLockFile
_INDEX_HEADER = struct.Struct(">qqqqii")  # IndexHeader: begin/end timestamp, begin/end phy offset, slots, count
_END_PHY_AT = 24  # IndexHeader.endPhyOffsetIndex


@dataclass
class Bound:
    """The committed bound of a DLedger log: ``checkpoint`` (the checkpoint's committedIndex,
    None when it holds none) and ``proven`` (the furthest commit-log offset a message a
    consume queue or the key index points at starts at, -1 when none does; ``proof`` names
    where). ``highest``: the highest entry index :meth:`certain` has judged certain so far."""

    checkpoint: int | None
    proven: int = -1
    proof: str = ""
    highest: int | None = None

    @property
    def known(self) -> bool:
        """Whether anything says which entries are committed."""
        return self.checkpoint is not None or self.proven >= 0

    def certain(self, index: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Per entry (its index, and its pos: the message's offset - 48), whether it is
        certainly committed. An old commit log's messages (index -1) always are."""
        index = np.asarray(index, np.int64)
        cp = -1 if self.checkpoint is None else self.checkpoint
        out = (index <= cp) | (np.asarray(pos, np.int64) + HEADER_SIZE <= self.proven)
        if out.any():
            top = int(index[out].max())
            self.highest = top if self.highest is None else max(self.highest, top)
        return out

    def note(self) -> str:
        """Why entries past the checkpoint's committed index are taken (empty when none were)."""
        if self.highest is None or (self.checkpoint is not None and self.highest <= self.checkpoint):
            return ""
        was = "holds no committed index" if self.checkpoint is None else \
            f"says committed index {self.checkpoint}"
        return (f"the checkpoint {was}, but {self.proof} points at commit-log offset {self.proven}, at or past entry "
                f"{self.highest}'s message: the broker dispatches only committed entries, so the entries up to "
                f"{self.highest} are committed (a checkpoint lags after a crash)")


def commit_bound(node_dir: str, root: str | None) -> Bound:
    """The bound of the DLedger log in ``node_dir`` whose broker store root is ``root``
    (None: no consume queues or index beside it, the checkpoint alone)."""
    b = Bound(read_checkpoint(node_dir).committed_index)
    if root is not None:
        b.proven, b.proof = _furthest_proof(root)
    return b


def _furthest_proof(root: str) -> tuple[int, str]:
    """(the furthest message offset a consume queue's unit or the index's header points at,
    what says so); (-1, "") when none does."""
    best, what = -1, ""
    try:
        queues = find_queues(root)
    except StoreError:
        queues = []
    fsize = file_size(queues)
    for q in queues:
        # a queue's units go up with its queue offsets: its last file that holds a unit holds
        # the furthest (only that file is read, from the last back past empty ones)
        for f in reversed(q.files):
            try:
                pieces = plan_units(Queue(q.topic, q.queue_id, q.dir, [f]), fsize)
                u = read_piece(pieces[-1], pieces[-1].count - 1, 1) if pieces and pieces[-1].count else ()
            except (OSError, ValueError):
                continue
            if not len(u):
                continue
            if int(u["size"][0]) != BLANK_SIZE and int(u["offset"][0]) > best:
                best = int(u["offset"][0])
                what = f"{CONSUME_QUEUE_DIR}/{q.topic}/{q.queue_id}"
            break
    d = os.path.join(root, INDEX_DIR)
    try:
        names = sorted(e.name for e in os.scandir(d) if e.is_file(follow_symlinks=False))
    except OSError:
        names = []
    for name in names:
        try:
            fd = os.open(os.path.join(d, name), os.O_RDONLY | os.O_NONBLOCK)
            try:
                head = os.pread(fd, _INDEX_HEADER.size, 0)
            finally:
                os.close(fd)
        except OSError:
            continue
        if len(head) < _INDEX_HEADER.size:
            continue
        *_, end_phy, _slots, count = _INDEX_HEADER.unpack(head)
        if count > 1 and end_phy > best:  # (the count starts at 1: a file with no key proves nothing)
            best, what = end_phy, f"{INDEX_DIR}/{name}"
    return best, what


def broker_holds(root: str | None) -> bool:
    """Whether a running message store holds ``root``'s ``lock`` file (``DefaultMessageStore.start``:
    ``FileChannel.tryLock(0, 1, false)``, a POSIX record lock, which fcntl sees). Only asks:
    the file is opened for the lock, never written."""
    if root is None:
        return False
    try:
        fd = os.open(os.path.join(root, LOCK_FILE), os.O_RDWR | os.O_NONBLOCK)
    except OSError:
        return False  # (none, or not ours to open: nothing to ask)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
        return False
    finally:
        os.close(fd)
