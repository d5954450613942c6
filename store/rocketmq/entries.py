"""One entry of a log as the mq commands read it (:class:`Item`), and a run of them as columns
(:class:`Batch`): what scan.py makes of a DLedger log and commitlog.py of a master-slave
commit log (where each message stands as an entry whose body is the message)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .message import Message


@dataclass(slots=True)
class Item:
    """One entry: ``message`` when its body decoded, else ``note`` says what it is."""

    kind: str  # message | no-op | config | not-a-message | damage
    index: int
    term: int
    pos: int  # the entry's logical offset
    size: int  # the entry's size
    file: str  # data/<name>
    buf: object  # the data file's bytes (the message's offsets are within it)
    message: Message | None = None
    note: str = ""
    crc_note: str = ""  # the entry's own DLedger bodyCrc fails: what scan.crc_damaged says (else empty)


@dataclass(slots=True)
class Batch:
    """Consecutive entries of one data file (columns), or a place where it is damaged."""

    file: str  # data/<name>
    start: int  # the file's first logical offset
    buf: object  # the file's bytes
    magic: np.ndarray | None = None
    size: np.ndarray | None = None
    index: np.ndarray | None = None
    term: np.ndarray | None = None
    pos: np.ndarray | None = None
    bsize: np.ndarray | None = None
    damage: str = ""  # set for a damage batch (its ``at``: the logical offset)
    at: int = -1
    shift: int = 0  # added to ``pos - start`` for the byte a finding names (a commit log's: commitlog.batches)
    # a DLedger log's: each entry's bodyCrc and chainCrc as stored (None: a commit log's, which has none;
    # both 0: none recorded, as DLedger 0.2.7 and Java write them). scan.crc_damaged checks them.
    bcrc: np.ndarray | None = None
    chain: np.ndarray | None = None

    def take(self, keep) -> "Batch":
        """The entries ``keep`` (a mask, index array or slice) selects, as a batch of their own."""
        return Batch(self.file, self.start, self.buf, self.magic[keep], self.size[keep], self.index[keep],
                     self.term[keep], self.pos[keep], self.bsize[keep], shift=self.shift,
                     bcrc=None if self.bcrc is None else self.bcrc[keep],
                     chain=None if self.chain is None else self.chain[keep])

    def __len__(self) -> int:
        return 0 if self.index is None else len(self.index)
