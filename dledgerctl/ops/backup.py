"""A backup of a running group (``cluster backup``), without stopping its writes: the file
format is store/backup.py's, the same a stopped member's ``store backup`` writes.

How it is consistent. The backup is the log as of one committed index, chosen at the start:
the leader's commit index read after a linearizable read (which the leader answers only once
a majority has confirmed it still leads and an entry of its own term has committed, so every
append acknowledged before the backup began is at or below that index). Entries at or below a commit index never change
on any member, so they are then read from the leader's own log (serializable pages, no
heartbeat round per page, which keeps the backup's cost to the group's appends low), page
after page (ops/logio.py ``Reading``), encoded as the store encodes them and written chunk by
chunk: memory stays bounded by the pages in flight and one chunk, whatever the log's size.

What it cannot take: the state machine's snapshot (no request serves it; a stopped member's
``store backup`` takes it), and entries the leader no longer holds (its log's head deleted
while the backup ran: the backup fails, naming the entry).
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

import msgspec

from cluster.net.answers import NodeState
from cluster.net.client import Client, ClientError
from store.backup import BackupWriter
from store.format import CHAIN_CRC_OFFSET, encode_entry

from .logio import Reading
from .targets import OpsError, Target, run


class LiveBackup(msgspec.Struct):
    """A backup taken from a live group: the file, the group, the member read from (the
    leader at the start), the entries (first and last index, the last one's term), bytes,
    chunks, the data file size learnt (None when the log did not roll to a new data file),
    the members, and how long it took."""

    file: str
    group: str
    leader: str
    first_index: int
    last_index: int
    last_term: int
    entries: int
    entry_bytes: int
    chunks: int
    data_file_size: int | None
    members: str | None
    seconds: float


class Start(msgspec.Struct):
    """Where a live backup begins and ends, chosen before the first page is read."""

    leader: str
    first: int
    last: int
    bytes: int  # about how many bytes the entries take (positions of the first and last)
    members: dict | None


def start_point(target: Target) -> Start:
    """The leader, its log's first index, and its commit index confirmed by a linearizable read."""

    async def ask(c: Client) -> Start:
        loop = asyncio.get_running_loop()
        leader = await c.find_leader(loop.time() + target.timeout)
        first, last = _bounds(leader, await c.metadata(leader))
        if last >= max(first, 0):
            # (a linearizable read is answered once an entry of the leader's term has committed: a
            # leader elected just now has then committed all its predecessors acknowledged, and its
            # commit index, read again after it, covers every append acknowledged before the backup)
            await c.get(first, 1, peer=None, consistency="linearizable")
            leader = c.leader or leader
            md = await c.metadata(leader)
            first, last = _bounds(leader, md)
        if last < max(first, 0):
            raise OpsError(f"the group has no committed entries to back up (its leader {leader} commits up to "
                           f"{last})")
        confirmed = await c.get(last, 1, peer=leader, consistency="serializable")
        head = await c.get(first, 1, peer=leader, consistency="serializable")
        end = confirmed[0].pos + confirmed[0].size
        peers = md.peers
        voters = [p for p in (peers if md.voters is None else md.voters) if p in peers]
        learners = [p for p in md.learners or [] if p in peers]
        members = ({"voters": ";".join(f"{p}-{peers[p]}" for p in voters),
                    "learners": ";".join(f"{p}-{peers[p]}" for p in learners)} if voters else None)
        return Start(leader, first, last, max(0, end - head[0].pos), members)

    return run(target, ask)


def _bounds(leader: str, md: NodeState) -> tuple[int, int]:
    if md.begin_index is None or md.committed_index is None:
        raise ClientError(f"{leader}: its metadata names no begin and commit index")
    return md.begin_index, md.committed_index


def backup(target: Target, out: str, *, progress: Callable[[int], None] | None = None,
           start: Start | None = None) -> LiveBackup:
    """Back up ``target``'s committed log as of now to the new file ``out`` (see the module's
    docstring); ``progress(n)`` hears each page's bytes; ``start``: a :func:`start_point`
    already asked (to size a progress bar). A ClientError (a member unreachable, the log's
    head gone) or an OpsError stops it; the file is then not left behind."""
    began = time.monotonic()
    start = start or start_point(target)
    reading = Reading(target, start.first, start.last, consistency="serializable", node=start.leader)
    with BackupWriter(out) as w:
        prev_chain = 0
        for page in reading.pages():
            raw = []
            for e in page:
                b = encode_entry(e.body, index=e.index, term=e.term, pos=e.pos, magic=e.magic,
                                 prev_chain=prev_chain)
                prev_chain = int.from_bytes(b[CHAIN_CRC_OFFSET:CHAIN_CRC_OFFSET + 4], "big")
                raw.append(b)
            chunk = b"".join(raw)
            w.add(chunk)
            if progress is not None:
                progress(len(chunk))
        if w.last_index != start.last:
            raise OpsError(f"the leader's log gave entries up to {w.last_index}, not {start.last}")
        m = w.finish(group=target.group, source=f"live {start.leader}", members=start.members)
    members = (m.members or {}).get("voters")
    return LiveBackup(out, target.group, start.leader, m.first_index, m.last_index, m.last_term, m.entries,
                      m.entry_bytes, len(m.chunks), m.data_file_size, members, round(time.monotonic() - began, 3))
