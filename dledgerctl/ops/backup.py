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

The state machine's latest snapshot, when the group runs one, is copied first from the same
member (SNAPSHOT_READ, chunk by chunk, into a spool file beside the backup, its crc32 checked
whole), and the backup then reaches at least to the snapshot's index: the snapshot is as of an
applied, hence committed, entry, so the entries up to it are fixed too, and the backup holds
the snapshot and every entry after it up to its last. A snapshot replaced while it is copied
(a newer one saved, the old one removed) is copied again from the newer one, a few times at
most.

What it cannot take: entries the leader no longer holds (its log's head deleted while the
backup ran: the backup fails, naming the entry).
"""

from __future__ import annotations

import asyncio
import os
import time
import zlib
from typing import Callable

import msgspec

from cluster.net.answers import NodeState
from cluster.net.client import Client, ClientError, Refused
from cluster.raft.rpc import Code
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
    snapshot_index: int | None
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


SNAPSHOT_CHUNK = 1 << 20  # what one SNAPSHOT_READ asks for
SNAPSHOT_TRIES = 3  # copies of a snapshot begun before giving up (each one replaced while copied)


class SpooledSnapshot(msgspec.Struct):
    """A member's snapshot copied into ``path``: as of entry ``index`` (``term``), ``size``
    bytes, crc32 ``crc``."""

    path: str
    index: int
    term: int
    size: int
    crc: int


def copy_snapshot(target: Target, member: str, path: str) -> SpooledSnapshot | None:
    """Copy ``member``'s latest snapshot into the new file ``path``, its crc32 checked; None
    when the member keeps none (no state machine, none saved yet, or a Java DLedger node).
    OpsError when it is replaced faster than it is copied, or its bytes do not match its crc."""

    async def work(c: Client) -> SpooledSnapshot | None:
        if (await c.metadata(member)).impl != "dledgerctl":
            return None  # (a Java DLedger node runs no state machine of ours)
        for _ in range(SNAPSHOT_TRIES):
            try:
                return await _copy(c, member, path)
            except Refused as exc:
                if exc.code == Code.UNSUPPORTED:
                    return None
                if exc.code != Code.INDEX_OUT_OF_RANGE:
                    raise
        raise OpsError(f"{member}'s snapshot was replaced {SNAPSHOT_TRIES} times while it was copied; run the "
                       "backup again (or give the group a larger --snapshot-threshold)")

    return run(target, work)


async def _copy(c: Client, member: str, path: str) -> SpooledSnapshot | None:
    chunk = await c.snapshot_chunk(member, -1, 0, SNAPSHOT_CHUNK)
    if chunk.index < 0:
        return None
    index, term, size, crc = chunk.index, chunk.term, chunk.size, chunk.crc
    got = seen = 0
    with open(path, "wb") as fh:
        while True:
            if (chunk.index, chunk.size, chunk.crc, chunk.offset) != (index, size, crc, got):
                raise OpsError(f"{member} answered for snapshot {chunk.index} at {chunk.offset}, not {index} at {got}")
            fh.write(chunk.data)
            seen = zlib.crc32(chunk.data, seen)
            got += len(chunk.data)
            if got >= size:
                break
            if not chunk.data:
                raise OpsError(f"{member} sent no bytes of snapshot {index} at {got} of {size}")
            chunk = await c.snapshot_chunk(member, index, got, SNAPSHOT_CHUNK)
    if seen != crc:
        raise OpsError(f"{member}'s snapshot {index}: its {size} bytes do not match its crc32 {crc}")
    return SpooledSnapshot(path, index, term, size, crc)


def _spooled_parts(path: str):
    with open(path, "rb") as fh:
        while block := fh.read(SNAPSHOT_CHUNK):
            yield block


def backup(target: Target, out: str, *, progress: Callable[[int], None] | None = None,
           start: Start | None = None) -> LiveBackup:
    """Back up ``target``'s committed log as of now to the new file ``out``, with the state
    machine's latest snapshot when the group runs one (see the module's docstring);
    ``progress(n)`` hears each page's bytes; ``start``: a :func:`start_point` already asked
    (to size a progress bar). A ClientError (a member unreachable, the log's head gone) or an
    OpsError stops it; the file, and the snapshot's spool, are then not left behind."""
    began = time.monotonic()
    start = start or start_point(target)
    spool = out + ".snapshot.partial"
    try:
        with BackupWriter(out) as w:  # (made first: an output that exists is refused before any copying)
            snap = copy_snapshot(target, start.leader, spool)
            last = start.last if snap is None else max(start.last, snap.index)
            return _write(w, target, out, start, last, snap, progress, began)
    finally:
        try:
            os.unlink(spool)
        except FileNotFoundError:
            pass


def _write(w: BackupWriter, target: Target, out: str, start: Start, last: int, snap: SpooledSnapshot | None,
           progress: Callable[[int], None] | None, began: float) -> LiveBackup:
    reading = Reading(target, start.first, last, consistency="serializable", node=start.leader)
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
    if w.last_index != last:
        raise OpsError(f"the leader's log gave entries up to {w.last_index}, not {last}")
    if snap is not None:
        w.add_snapshot(snap.index, snap.term, snap.size, snap.crc, _spooled_parts(snap.path))
    m = w.finish(group=target.group, source=f"live {start.leader}", members=start.members)
    members = (m.members or {}).get("voters")
    return LiveBackup(out, target.group, start.leader, m.first_index, m.last_index, m.last_term, m.entries,
                      m.entry_bytes, len(m.chunks), m.data_file_size, members,
                      None if snap is None else snap.index, round(time.monotonic() - began, 3))
