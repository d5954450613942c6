"""Finding messages without a scan of the log, the ways a broker (and ``mqadmin``) does.

- :func:`queue_unit`: a topic, queue id and queue offset to the consume-queue unit that
  points at the message (``mqadmin queryMsgByOffset``, ``ConsumeQueue.getIndexBuffer``):
  one 20-byte read from the file that holds it.
- :func:`index_offsets`: a key to the commit-log offsets of the messages indexed under it
  in the broker's ``index/`` files (``mqadmin queryMsgByKey``, ``IndexFile.selectPhyOffset``;
  see the layout there).

Both only point: the caller reads the message at the offset and checks it is the one
asked for (an index slot holds a hash, not the key). Read-only; nothing here scans the log.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from ..errors import StoreUsageError
from ..format import FILE_NAME_DIGITS
from .consumequeue import BLANK_SIZE, CONSUME_QUEUE_DIR, CQ_STORE_UNIT_SIZE

_UNIT = struct.Struct(">qiq")  # commit-log offset, size, tag code (ConsumeQueue.CQ_STORE_UNIT_SIZE)


class NotFound(StoreUsageError):
    """What was asked for is not where it would be (the text says why)."""


@dataclass(frozen=True)
class Unit:
    """A consume-queue unit: where its message is (commit-log offset), its size and tag code."""

    file: str  # consumequeue/<topic>/<queueId>/<name>, relative to the store root
    offset: int  # byte offset of the unit in that file
    phy_offset: int
    size: int
    tags_code: int


def _numbered(names) -> list[tuple[int, str]]:
    # (ASCII digits only: '²'.isdigit() holds, int('²') fails)
    return sorted((int(n), n) for n in names if len(n) == FILE_NAME_DIGITS and n.isascii() and n.isdigit())


def queue_unit(root: str, topic: str, queue_id: int, queue_offset: int) -> Unit:
    """The unit of ``queue_offset`` in the consume queue ``topic``/``queue_id`` under the
    store root ``root``. NotFound when the queue has no such unit (no such queue, an
    offset before its first file or past its last written unit, a fillPreBlank unit)."""
    qdir = os.path.join(root, CONSUME_QUEUE_DIR, topic, str(queue_id))
    where = f"consume queue {topic}/{queue_id}"
    try:
        files = _numbered(e.name for e in os.scandir(qdir) if e.is_file(follow_symlinks=False))
    except FileNotFoundError:
        raise NotFound(f"{where}: no such queue ({os.path.join(CONSUME_QUEUE_DIR, topic, str(queue_id))} does "
                       "not exist)") from None
    except OSError as exc:
        raise NotFound(f"{qdir}: {exc.strerror or exc}") from None
    if queue_offset < 0:
        raise NotFound(f"{where}: queue offset {queue_offset} is negative")
    byte = queue_offset * CQ_STORE_UNIT_SIZE
    held = [(start, name) for start, name in files if start <= byte]
    if not held:
        first = files[0][0] // CQ_STORE_UNIT_SIZE if files else None
        raise NotFound(f"{where}: queue offset {queue_offset} is before its first file"
                       + (f" (which starts at queue offset {first})" if first is not None else " (it has none)"))
    start, name = held[-1]
    rel = os.path.join(CONSUME_QUEUE_DIR, topic, str(queue_id), name)
    with open(os.path.join(qdir, name), "rb") as fh:
        fh.seek(byte - start)
        raw = fh.read(CQ_STORE_UNIT_SIZE)
    if len(raw) < CQ_STORE_UNIT_SIZE:
        raise NotFound(f"{where}: queue offset {queue_offset} is past the end of {rel}")
    phy, size, code = _UNIT.unpack(raw)
    if phy < 0 or size <= 0:
        raise NotFound(f"{where}: queue offset {queue_offset} is not written yet ({rel} at byte {byte - start})")
    if (phy, size, code) == (0, BLANK_SIZE, 0):
        raise NotFound(f"{where}: queue offset {queue_offset} is a blank before the queue's first message "
                       "(fillPreBlank)")
    return Unit(rel, byte - start, phy, size, code)
