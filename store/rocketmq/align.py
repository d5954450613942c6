"""Are a broker group's replicas aligned, and what would a slave's next handshake cut?
(``mq digest``, ``mq align``; issues 60 and 61.)

A replica's commit log is compared as bytes: replicas of one master hold its messages at the
same offsets, byte for byte (a slave appends what the master sends at the master's offsets).
So the first byte at which two replicas differ, within the shorter log, is where they parted.

A digest (:func:`digest`) stands for a replica on another machine: the SHA-256 of every chunk
of CHUNK bytes of its log up to its max offset (the last chunk up to the max offset only),
per file, and of the whole (the SHA-256 of the chunk digests in order); with its epochs and
identity. Two digests locate a difference to a chunk; two directories to the byte.

A slave's next handshake (:func:`predict`) is ``epochs.handshake`` against the master's
epochs: where it truncates (nothing, when it has no epochs: it is taken for a new replica),
what that cuts (bytes, and the messages that start in the cut: topic, queue and queue
offsets), and whether the replica holds bytes below the point it keeps that differ from the
master's: a divergence no handshake repairs (the handshake only compares epochs).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import mmap
import os
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import NotAStoreError
from .commitlog import COMMIT_LOG_DIR, log_files, walk_file
from .epochs import EpochEntry, Identity, as_master, handshake, spans
from .message import NotAMessage, decode
from .replica import Replica, read_replica

CHUNK = 4 << 20  # bytes per digest chunk: a difference is located to this many bytes from digests alone
COMPARE = 1 << 20  # bytes compared at a time between two local logs
DIGEST_FORMAT = "dledgerctl-commitlog-digest/1"


@dataclass
class FileDigest:
    name: str
    start: int
    used: int  # bytes of the file within the log (up to the max offset)
    sha256: str
    chunks: list[str]


@dataclass
class Digest:
    root: str
    min_offset: int
    max_offset: int
    chunk: int
    files: list[FileDigest]
    sha256: str  # of the chunk digests, in order
    epochs: list[list[int]]
    epoch_file: str | None
    identity: list[dict]
    log_end: int = -1  # the log's own max offset (max_offset is where the digest ends: --upto)
    format: str = DIGEST_FORMAT

    def chunk_digests(self) -> dict[int, str]:
        """Offset of each chunk -> its digest."""
        return {f.start + k * self.chunk: d for f in self.files for k, d in enumerate(f.chunks)}

    def as_dict(self) -> dict:
        return asdict(self)


def hash_file(path: str, start: int, used: int, chunk: int) -> FileDigest:
    """One file's part of a digest: its first ``used`` bytes, per ``chunk`` and whole."""
    whole, chunks = hashlib.sha256(), []
    with open(path, "rb") as fh:
        left = used
        while left > 0:
            data = fh.read(min(chunk, left))
            if not data:
                break
            chunks.append(hashlib.sha256(data).hexdigest())
            whole.update(data)
            left -= len(data)
    return FileDigest(os.path.basename(path), start, used, whole.hexdigest(), chunks)


def digest(root: str, *, chunk: int = CHUNK, workers: int = 0, replica: Replica | None = None,
           upto: int | None = None) -> Digest:
    """A replica's digest (see the module doc), reading its files ``workers`` at a time
    (0: one per core; hashlib releases the GIL, so files hash in parallel). ``upto``: end
    the digest there, if the log reaches it (to compare with a replica whose log ends there)."""
    r = replica or read_replica(root)
    log_end = r.max_offset
    if upto is not None and upto < r.max_offset:
        r = Replica(r.root, r.min_offset, max(upto, 0), r.files, r.used, r.entries, r.identity, r.findings)
    d = os.path.join(r.root, COMMIT_LOG_DIR)
    try:
        files = log_files(d)
    except NotAStoreError:
        files = []
    jobs = [(p, s, max(0, min(os.path.getsize(p), r.max_offset - s))) for s, p in files if s < r.max_offset]
    n = workers or os.cpu_count() or 1
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, n)) as pool:
        done = list(pool.map(lambda job: hash_file(job[0], job[1], job[2], chunk), jobs))
    top = hashlib.sha256()
    for f in done:
        for c in f.chunks:
            top.update(bytes.fromhex(c))
    return Digest(r.root, r.min_offset, r.max_offset, chunk, done, top.hexdigest(),
                  [[e.epoch, e.start_offset] for e in r.entries], r.used,
                  [{"cluster": i.cluster, "broker": i.broker, "broker_id": i.broker_id, "path": i.path}
                   for i in r.identity if not i.problem], log_end)


def digest_from_dict(o: dict) -> Digest:
    """A digest read back from its JSON (``mq digest``'s output). ValueError when it is not one."""
    if not isinstance(o, dict) or o.get("format") != DIGEST_FORMAT:
        raise ValueError(f"not a commit-log digest of this tool (format {DIGEST_FORMAT!r})")
    try:
        files = [FileDigest(str(f["name"]), int(f["start"]), int(f["used"]), str(f["sha256"]),
                            [str(c) for c in f["chunks"]]) for f in o["files"]]
        return Digest(str(o["root"]), int(o["min_offset"]), int(o["max_offset"]), int(o["chunk"]), files,
                      str(o["sha256"]), [[int(a), int(b)] for a, b in o["epochs"]], o.get("epoch_file"),
                      list(o.get("identity") or []), int(o.get("log_end", o["max_offset"])))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"a digest with a field missing or of the wrong type ({exc})") from None


# -- where two replicas part ----------------------------------------------------------------------

class _Log:
    """A local replica's commit log, read a range at a time (its files kept open)."""

    def __init__(self, root: str) -> None:
        try:
            self.files = [(start, path, os.path.getsize(path))
                          for start, path in log_files(os.path.join(root, COMMIT_LOG_DIR))]
        except NotAStoreError:
            self.files = []
        self._open: dict[str, object] = {}

    def span(self, offset: int) -> tuple[int, str, int] | None:
        """(start, path, size) of the file holding ``offset``, None when none does."""
        for start, path, size in reversed(self.files):
            if start <= offset:
                return (start, path, size) if offset < start + size else None
        return None

    def next_start(self, offset: int) -> int | None:
        return next((start for start, _p, _s in self.files if start > offset), None)

    def read(self, offset: int, n: int) -> bytes:
        got = self.span(offset)
        if got is None:
            return b""
        start, path, _size = got
        fh = self._open.get(path)
        if fh is None:
            fh = self._open[path] = open(path, "rb")
        return os.pread(fh.fileno(), n, offset - start)

    def close(self) -> None:
        for fh in self._open.values():
            fh.close()
        self._open.clear()


def first_difference(a: str, b: str, end: int) -> int | None:
    """The first offset below ``end`` where the commit logs under roots ``a`` and ``b`` hold
    different bytes (None: none). Where only one of them has a file, they differ at its first
    byte; where neither has, nothing is compared."""
    la, lb = _Log(a), _Log(b)
    try:
        at = 0
        while at < end:
            fa, fb = la.span(at), lb.span(at)
            if fa is None or fb is None:
                if fa is not None or fb is not None:
                    return at
                nxt = min((x for x in (la.next_start(at), lb.next_start(at)) if x is not None), default=None)
                if nxt is None:
                    return None
                at = nxt
                continue
            n = min(COMPARE, end - at, fa[0] + fa[2] - at, fb[0] + fb[2] - at)
            x, y = la.read(at, n), lb.read(at, n)
            if x != y:
                k = min(len(x), len(y))
                if x[:k] == y[:k]:
                    return at + k
                diff = np.flatnonzero(np.frombuffer(x[:k], np.uint8) != np.frombuffer(y[:k], np.uint8))
                return at + int(diff[0])
            if not x:
                return None
            at += len(x)
        return None
    finally:
        la.close()
        lb.close()


def _chunk_ranges(d: Digest) -> dict[int, tuple[int, str]]:
    """Offset of each chunk -> (its length, its digest)."""
    out = {}
    for f in d.files:
        for k, h in enumerate(f.chunks):
            out[f.start + k * d.chunk] = (min(d.chunk, f.used - k * d.chunk), h)
    return out


def digest_difference(a: Digest, b: Digest) -> tuple[int | None, int | None]:
    """(the start of the first chunk that covers the same bytes in both and whose digests
    differ, or None; the start of the first chunk the two cover differently (one log ends
    inside it), from which nothing is compared, or None). ``mq digest --upto`` makes a digest
    that ends where the other log does, so that every chunk compares."""
    if a.chunk != b.chunk:
        raise ValueError(f"digests of different chunk sizes ({a.chunk} and {b.chunk}): make them with one")
    ra, rb = _chunk_ranges(a), _chunk_ranges(b)
    end = min(a.max_offset, b.max_offset)
    for off in sorted(set(ra) | set(rb)):
        if off >= end:
            break
        x, y = ra.get(off), rb.get(off)
        if x is None or y is None:
            return off, None
        if x[0] != y[0]:
            return None, off
        if x[1] != y[1]:
            return off, None
    return None, None


# -- what a handshake cuts --------------------------------------------------------------------------

@dataclass
class Cut:
    """Messages a truncation removes: per topic and queue, how many and the queue offsets."""

    topic: str
    queue_id: int
    count: int
    first_queue_offset: int
    last_queue_offset: int


@dataclass
class Prediction:
    replica: str
    role: str  # master or slave
    max_offset: int
    last_epoch: int | None
    truncate_to: int | None  # None: nothing (a master, or a slave without epochs)
    cut_bytes: int = 0
    cut: list[Cut] = field(default_factory=list)
    first_difference: int | None = None  # with the master, within the shorter log (None: none found)
    verdict: str = ""
    problem: str = ""  # an error finding (refused handshake, divergence kept), "" when none


def messages_between(root: str, lo: int, hi: int) -> list[Cut]:
    """The messages of the commit log under ``root`` that start at offsets lo .. hi - 1, per
    topic and queue (walking from the start of the file holding ``lo``)."""
    log, out = _Log(root), {}
    at = lo
    while at < hi:
        got = log.span(at)
        if got is None:
            break
        start, path, size = got
        with open(path, "rb") as fh:
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        try:
            offs, _sizes, p, end = walk_file(buf, size)
            for o in offs:
                if not lo <= start + o < hi:
                    continue
                try:
                    m = decode(buf, o)
                except NotAMessage:
                    continue
                c = out.get((m.topic, m.queue_id))
                if c is None:
                    out[(m.topic, m.queue_id)] = Cut(m.topic, m.queue_id, 1, m.queue_offset, m.queue_offset)
                else:
                    c.count += 1
                    c.first_queue_offset = min(c.first_queue_offset, m.queue_offset)
                    c.last_queue_offset = max(c.last_queue_offset, m.queue_offset)
        finally:
            if size:
                buf.close()
        nxt = start + size
        if nxt <= at:
            break
        at = nxt
    return sorted(out.values(), key=lambda c: (c.topic, c.queue_id))


def predict(master: Replica, slave: Replica, *, local: bool = True) -> Prediction:
    """What ``slave``'s next handshake with ``master`` does (see the module doc). ``local``:
    both are directories here (the cut's messages and the first differing byte are read)."""
    entries = slave.entries
    last = entries[-1].epoch if entries else None
    p = Prediction(slave.root, "slave", slave.max_offset, last, None)
    point = handshake(entries, slave.max_offset, master.entries, master.max_offset)
    common = min(slave.max_offset, master.max_offset)
    if local:
        p.first_difference = first_difference(master.root, slave.root, common)
    if point is None:
        p.verdict = ("no epochs: taken for a new replica, nothing truncated; it reports offset 0 to the master, "
                     "which sends from there (see docs/rocketmq.md: give the replicas epochs first)")
        if slave.max_offset:
            p.problem = (f"holds {slave.max_offset} bytes but no epoch: the handshake takes it for an empty new "
                         "replica")
        return p
    if point < 0:
        p.verdict = "no consistent point with the master's epochs: the slave refuses the handshake"
        p.problem = p.verdict
        return p
    if point < slave.max_offset:
        p.truncate_to, p.cut_bytes = point, slave.max_offset - point
        if local:
            p.cut = messages_between(slave.root, point, slave.max_offset)
        n = sum(c.count for c in p.cut)
        p.verdict = f"truncates to {point}: {p.cut_bytes} bytes" + (f", {n} messages" if local else "")
    else:
        p.verdict = (f"keeps all {slave.max_offset} bytes" + (f"; catches up from there to {master.max_offset}"
                                                                if master.max_offset > slave.max_offset else ""))
    kept = min(point, common)
    if p.first_difference is not None and p.first_difference < kept:
        p.problem = (f"differs from the master at offset {p.first_difference}, below the {kept} bytes the "
                     "handshake keeps: a divergence no handshake repairs")
    return p


def judge(master: Replica, slave: Replica, first_difference: int | None, *, exact: bool,
          unknown: int | None = None, cut: list[Cut] | None = None) -> Prediction:
    """:func:`predict` from what was compared elsewhere (files compared in tasks, or digests):
    ``first_difference`` (to the byte when ``exact``, else the start of the first chunk that
    differs), ``unknown`` (digests: the chunk from which nothing was compared, one log ending
    inside it), ``cut`` (the messages the truncation removes, counted where the files are).
    One judgement for ``mq align`` and ``spark mq-align``."""
    q = predict(master, slave, local=False)
    q.first_difference = first_difference
    if cut is not None and q.truncate_to is not None:
        q.cut = cut
        q.verdict += f", {sum(c.count for c in cut)} messages"
    kept = min(q.truncate_to if q.truncate_to is not None else slave.max_offset, master.max_offset, slave.max_offset)
    if q.truncate_to is None and handshake(slave.entries, slave.max_offset, master.entries, master.max_offset) == -1:
        kept = -1  # (a refusal keeps nothing it could be judged on)
    if first_difference is not None and first_difference < kept and not q.problem:
        where = f"at offset {first_difference}" if exact else f"in the chunk at offset {first_difference}"
        q.problem = (f"differs from the master {where}, below the {kept} bytes the handshake keeps: a divergence "
                     "no handshake repairs")
    if unknown is not None and first_difference is None:
        common = min(master.max_offset, slave.max_offset)
        q.problem = q.problem or (f"identical up to {unknown}; bytes from there to {common} are not compared (one log "
                                  f"ends inside that chunk): make the longer one's digest with --upto {common}")
    return q


def become_master(r: Replica, epoch: int) -> Replica:
    """``r`` as it is once it has become master at ``epoch`` (epochs.as_master: its epochs at
    or above ``epoch`` dropped, ``epoch`` appended at its max offset). NotAStoreError when
    RocketMQ refuses (``epoch`` below its last epoch)."""
    got = as_master(r.entries, epoch, r.max_offset)
    if got is None:
        raise NotAStoreError(f"{r.root}: would not become master at epoch {epoch}: its epochs reach "
                             f"{r.entries[-1].epoch} (changeToMaster refuses an epoch below its last)")
    return Replica(r.root, r.min_offset, r.max_offset, r.files, r.used, got, r.identity, r.findings)


def master_order(r: Replica) -> tuple:
    """How :func:`choose_master` ranks a replica: its newest last epoch, then its longest log."""
    return (r.entries[-1].epoch if r.entries else -1), r.max_offset


def choose_master(replicas: list[Replica]) -> Replica:
    """The replica a controller would most likely have made master: the newest last epoch,
    then the longest log."""
    return max(replicas, key=master_order)


def replica_from_digest(d: Digest) -> Replica:
    """A Replica standing for a digest (no files here)."""
    return Replica(d.root, d.min_offset, d.log_end if d.log_end >= 0 else d.max_offset, [], d.epoch_file,
                   [EpochEntry(a, b) for a, b in d.epochs],
                   [Identity(i.get("cluster", ""), i.get("broker", ""), i.get("broker_id"), None, i.get("path", ""))
                    for i in d.identity])


__all__ = ["CHUNK", "Cut", "Digest", "Prediction", "choose_master", "digest", "digest_difference", "hash_file",
           "digest_from_dict", "first_difference", "messages_between", "predict", "replica_from_digest", "spans"]
