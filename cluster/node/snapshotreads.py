"""SNAPSHOT_READ: a chunk of this member's state-machine snapshot, for a client that copies it
(a live backup, dledgerctl/ops/backup.py). Read-only; the files are read in the loop's pool
thread, so a snapshot's first read (its crc checked whole, store/snapshot.py ``latest``) does
not hold up the member's replication.

- No state machine here: UNSUPPORTED (nothing keeps snapshots).
- ``index`` -1: the latest snapshot that checks out; none yet: an answer with index -1 and no
  data. A given ``index``: that snapshot, read without checking it whole again (the client
  checks the crc at the end); gone (a newer one was saved and it removed): INDEX_OUT_OF_RANGE,
  so the client starts again with the latest.
- An ``offset`` past the snapshot's size: UNEXPECTED_ARGUMENT; the chunk is at most
  ``length`` bytes, fewer at the snapshot's end.
"""

from __future__ import annotations

import asyncio

from store.errors import StoreError

from ..net import api
from ..net.frames import Frame
from ..raft.rpc import Code


def snapshot_read(node, req: api.SnapshotRead, f: Frame, refusal):
    """The answer to ``req`` (decoded from ``f``): a refusal Frame now, or an awaitable of the
    answer. ``refusal(f, code, remark)`` makes a refusal (Requests.refusal)."""
    applier = node.applier
    if applier is None:
        return refusal(f, Code.UNSUPPORTED, "no state machine here: this member keeps no snapshots")
    return _read(applier.snapshots, req, f, refusal)


async def _read(snaps, req: api.SnapshotRead, f: Frame, refusal) -> Frame:
    def read():
        if req.index < 0:
            info = snaps.latest()
        else:
            info = next((s for s in snaps.list(check_data=False) if s.index == req.index and s.problem is None), None)
            if info is None:
                return None, f"snapshot {req.index} is not here (a newer one replaced it): ask for the latest"
        if info is None:
            return None, None
        if req.offset > info.size:
            return info, f"offset {req.offset} is past the end of snapshot {info.index} ({info.size} bytes)"
        n = min(req.length, info.size - req.offset)
        return info, snaps.read_chunk(info, req.offset, n) if n else b""

    try:
        info, got = await asyncio.get_running_loop().run_in_executor(None, read)
    except (OSError, StoreError) as exc:  # (removed while it was read: as gone)
        return refusal(f, Code.INDEX_OUT_OF_RANGE, f"snapshot {req.index} could not be read ({exc}): ask for the "
                                                   "latest")
    if isinstance(got, str):
        return refusal(f, Code.INDEX_OUT_OF_RANGE if info is None else Code.UNEXPECTED_ARGUMENT, got)
    if info is None:
        return api.snapshot_chunk_frame(f.opaque, -1, -1, 0, 0, 0, b"")
    term = info.term if info.term is not None else -1
    return api.snapshot_chunk_frame(f.opaque, info.index, term, info.size, info.crc, req.offset, got)
