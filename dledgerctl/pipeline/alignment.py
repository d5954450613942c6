"""``spark mq-align``: which broker groups of a fleet are not aligned, and where (issue 60).

What ``mq align`` says of one group (store/rocketmq/align.py), for many groups at once, with
the reading spread over Spark tasks: a replica is a store root (on storage the executors
share) or a digest file (``mq digest --out``, made on the replica's machine).

Contracts:

- Planning (:func:`plan_groups`) runs on the driver before Spark starts: every replica is
  read there (its epochs, identity and the log's extent: store/rocketmq/replica.py, a walk of
  its last file) and grouped by the brokerName of its ``brokerIdentity`` or by an explicit
  group; the master is ``mq align``'s (``choose_master``: the newest last epoch, then the
  longest log) unless named, and with ``master_epoch`` becomes master as ``mq align
  --master-epoch`` has it. A bad path, a replica without a group or a master RocketMQ
  refuses is an error here, before a JVM starts.
- The reading is one Spark job (:func:`align_rows`), a task per commit-log file:
  ``bytes`` compares one file's range of the master and of a slave (both store roots) and
  returns the first differing byte; ``hash`` hashes one file of a store root in digest chunks
  (when the other side of a pair is a digest); ``cut`` counts, per topic and queue, the
  messages of one slave file that its handshake would cut. Nothing is written.
- Each row is what ``mq align`` prints for the same slave (the tests compare them): the
  first difference as ``first_difference`` would find it (the log's files cut into pieces
  at every file start of either replica: the first difference is the first piece's), and
  the handshake's prediction as ``predict`` makes it. Replicas are told apart by the
  argument that named them, not by the root a digest records (every machine's may be the
  same path).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field

import numpy as np
from pyspark.sql.types import (ArrayType, BooleanType, IntegerType, LongType, StringType, StructField,
                               StructType)

from store.errors import NotAStoreError
from store.rocketmq.align import (COMPARE, Cut, Digest, FileDigest, become_master, choose_master,
                                  digest_difference, digest_from_dict, hash_file, judge, messages_between,
                                  replica_from_digest)
from store.rocketmq.commitlog import COMMIT_LOG_DIR, log_files
from store.rocketmq.epochs import handshake
from store.rocketmq.replica import Replica, read_replica

from .errors import PipelineUsageError

DIGEST_LIMIT = 256 << 20  # bytes of a digest file read (mq align reads as many)
GLOB_CHARS = "*?["

MQ_ALIGN_COLUMNS = ["group", "master", "replica", "compared", "max_offset", "master_max_offset", "last_epoch",
                    "first_difference", "truncate_to", "cut_bytes", "cut_messages", "aligned", "detail", "cuts"]
MQ_ALIGN_TABLE = ["group", "master", "replica", "aligned", "max_offset", "first_difference", "truncate_to",
                  "cut_bytes", "detail"]


@dataclass
class Input:
    """One replica as given: the argument, the replica read from it, its digest if it is one."""

    arg: str
    replica: Replica
    digest: Digest | None = None

    @property
    def local(self) -> bool:
        return self.digest is None


@dataclass
class Group:
    """One broker group's replicas; ``master``: the index of its master among them."""

    name: str
    inputs: list[Input] = field(default_factory=list)
    master: int = 0


# -- planning (driver, no Spark) ---------------------------------------------------------------

def load_input(path: str) -> Input:
    """A replica from a store root, or from a digest file (``mq digest --out``); NotAStoreError
    in one line when it is neither."""
    if os.path.isdir(path):
        return Input(path, read_replica(path))
    try:
        with open(path, "rb") as fh:
            d = digest_from_dict(json.loads(fh.read(DIGEST_LIMIT)))
    except FileNotFoundError:
        raise NotAStoreError(f"{path}: no such file or directory") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise NotAStoreError(f"{path}: not a store root nor a digest of mq digest: {exc}") from None
    return Input(path, replica_from_digest(d), d)


def _expand(path: str) -> list[str]:
    if not any(c in path for c in GLOB_CHARS):
        return [path]
    found = sorted(glob.glob(os.path.expanduser(path)))
    if not found:
        raise NotAStoreError(f"{path}: matches nothing")
    return found


def _key(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def broker_of(inp: Input) -> str:
    """The brokerName its identity gives (the registered file first, then the -temp one)."""
    named = sorted((i for i in inp.replica.identity if not i.problem and i.broker),
                   key=lambda i: i.register_check_code is not None)
    if not named:
        raise PipelineUsageError(f"{inp.arg}: no brokerIdentity names its broker group: give its group with "
                                 f"--group NAME={inp.arg},...")
    return named[0].broker


def plan_groups(paths: list[str], groups: list[tuple[str, list[str]]], masters: list[str] = (),
                master_epoch: int | None = None) -> list[Group]:
    """The groups to align (see the module's contracts), ordered by name. ``paths``: replicas
    (or globs) grouped by their identity; ``groups``: (name, paths) given explicitly, which
    win over an identity; ``masters``: a replica that is master of its group."""
    if not paths and not groups:
        raise PipelineUsageError("give replicas (store roots or digest files) or --group NAME=PATH,PATH")
    where: dict[str, str] = {}  # replica key -> its group
    out: dict[str, Group] = {}
    for name, members in groups:
        for p in members:
            k = _key(p)
            if where.get(k, name) != name:
                raise PipelineUsageError(f"{p} is given in groups {where[k]} and {name}")
            if k not in where:
                where[k] = name
                out.setdefault(name, Group(name)).inputs.append(load_input(p))
    for arg in paths:
        for p in _expand(arg):
            k = _key(p)
            if k in where:
                continue  # (named by a --group, or given twice)
            inp = load_input(p)
            name = broker_of(inp)
            where[k] = name
            out.setdefault(name, Group(name)).inputs.append(inp)
    named_masters: dict[str, str] = {}
    for p in masters:
        k = _key(p)
        if k not in where:
            raise PipelineUsageError(f"--master-replica {p} is not among the replicas given")
        g = out[where[k]]
        if g.name in named_masters:
            raise PipelineUsageError(f"group {g.name} is given two masters: {named_masters[g.name]} and {p}")
        named_masters[g.name] = p
        g.master = next(i for i, x in enumerate(g.inputs) if _key(x.arg) == k)
    for g in out.values():
        if g.name not in named_masters:
            m = choose_master([x.replica for x in g.inputs])
            g.master = next(i for i, x in enumerate(g.inputs) if x.replica is m)
        if master_epoch is not None:
            g.inputs[g.master].replica = become_master(g.inputs[g.master].replica, master_epoch)
        _check_chunks(g)
    return [out[name] for name in sorted(out)]


def _check_chunks(g: Group) -> None:
    m = g.inputs[g.master]
    for s in g.inputs:
        if m.digest is not None and s.digest is not None and m.digest.chunk != s.digest.chunk:
            raise PipelineUsageError(f"{m.arg} and {s.arg}: digests of different chunk sizes ({m.digest.chunk} and "
                                     f"{s.digest.chunk}): make them with one")


# -- the tasks (run on executors) ----------------------------------------------------------------

def _files(root: str) -> list[tuple[int, str, int]]:
    """(start, path, size) of each commit-log file of store ``root`` (none: [])."""
    try:
        return [(s, p, os.path.getsize(p)) for s, p in log_files(os.path.join(root, COMMIT_LOG_DIR))]
    except NotAStoreError:
        return []


def _holder(files, lo: int, hi: int):
    """(path, start, end) of what ``files`` hold of [lo, hi): the last file starting at or
    before ``lo`` (as align's reader finds a span); end == lo when it holds nothing there."""
    f = next((f for f in reversed(files) if f[0] <= lo), None)
    if f is None or f[0] + f[2] <= lo:
        return None, 0, lo
    return f[1], f[0], min(hi, f[0] + f[2])


def compare_range(a: tuple, b: tuple, lo: int, hi: int) -> int | None:
    """The first offset in [lo, hi) where two files' bytes differ (each ``(path, start)``),
    None when none does."""
    with open(a[0], "rb") as fa, open(b[0], "rb") as fb:
        at = lo
        while at < hi:
            n = min(COMPARE, hi - at)
            x, y = os.pread(fa.fileno(), n, at - a[1]), os.pread(fb.fileno(), n, at - b[1])
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


def run_task(task: tuple) -> tuple:
    """One task's (kind, key, result); see the module's contracts."""
    kind, key, args = task
    if kind == "bytes":
        return kind, key, compare_range(*args)
    if kind == "hash":
        return kind, key, hash_file(*args)
    return kind, key, messages_between(*args)


# -- the job -------------------------------------------------------------------------------------

@dataclass
class _Pair:
    group: Group
    slave: int
    bytes_first: list = field(default_factory=list)  # first differences found, per piece
    cuts: list[Cut] = field(default_factory=list)

    @property
    def m(self) -> Input:
        return self.group.inputs[self.group.master]

    @property
    def s(self) -> Input:
        return self.group.inputs[self.slave]

    @property
    def local(self) -> bool:
        return self.m.local and self.s.local


def _byte_tasks(pid: int, p: _Pair, out: list) -> None:
    """A task per piece of the common range (cut at every file start of either log); what
    needs no reading (one side holds nothing) is decided here."""
    end = min(p.m.replica.max_offset, p.s.replica.max_offset)
    fa, fb = _files(p.m.replica.root), _files(p.s.replica.root)
    bounds = sorted({0, *(s for s, _p, _n in fa + fb if s < end)}) + [end]
    for lo, hi in zip(bounds, bounds[1:]):
        if lo >= hi:
            continue
        (pa, sa, ea), (pb, sb, eb) = _holder(fa, lo, hi), _holder(fb, lo, hi)
        if min(ea, eb) > lo:
            out.append(("bytes", ("pair", pid, lo), ((pa, sa), (pb, sb), lo, min(ea, eb))))
        if ea != eb:
            p.bytes_first.append(min(ea, eb))


def _cut_tasks(pid: int, p: _Pair, point: int, out: list) -> None:
    """A task per slave file from ``point`` on, as messages_between walks them (it stops
    where no file holds the offset)."""
    files, at, hi = _files(p.s.replica.root), point, p.s.replica.max_offset
    while at < hi:
        path, start, end = _holder(files, at, hi)
        if path is None:
            break
        out.append(("cut", ("pair", pid, at), (p.s.replica.root, at, end)))
        nxt = next(f[0] + f[2] for f in files if f[1] == path)
        if nxt <= at:
            break
        at = nxt


def _hash_tasks(key: tuple, r: Replica, chunk: int, out: list) -> None:
    for start, path, size in _files(r.root):
        if start < r.max_offset:
            out.append(("hash", key, (path, start, max(0, min(size, r.max_offset - start)), chunk)))


def _assemble(r: Replica, chunk: int, files: list[FileDigest]) -> Digest:
    files = sorted(files, key=lambda f: f.start)
    top = hashlib.sha256()
    for f in files:
        for c in f.chunks:
            top.update(bytes.fromhex(c))
    return Digest(r.root, r.min_offset, r.max_offset, chunk, files, top.hexdigest(),
                  [[e.epoch, e.start_offset] for e in r.entries], r.used, [], r.max_offset)


def align_rows(spark, groups: list[Group]) -> list[dict]:
    """One row per (group, slave), groups in order, slaves as given (see the module's contracts)."""
    pairs = [_Pair(g, i) for g in groups for i in range(len(g.inputs)) if i != g.master]
    tasks: list[tuple] = []
    for pid, p in enumerate(pairs):
        m, s = p.m.replica, p.s.replica
        if p.local:
            _byte_tasks(pid, p, tasks)
            point = handshake(s.entries, s.max_offset, m.entries, m.max_offset)
            if point is not None and 0 <= point < s.max_offset:
                _cut_tasks(pid, p, point, tasks)
        else:
            chunk = (p.m.digest or p.s.digest).chunk
            for inp in (p.m, p.s):
                if inp.local:
                    _hash_tasks(("hash", id(inp), chunk), inp.replica, chunk, tasks)
    tasks = list({(kind, key, args): None for kind, key, args in tasks})  # (a master hashed once)
    done = spark.sparkContext.parallelize(tasks, len(tasks)).map(run_task).collect() if tasks else []
    hashed: dict[tuple, list[FileDigest]] = {}
    for kind, key, got in done:
        if kind == "hash":
            hashed.setdefault(key, []).append(got)
        elif kind == "bytes":
            if got is not None:
                pairs[key[1]].bytes_first.append(got)
        else:
            pairs[key[1]].cuts.extend(got)
    return [_row(p, hashed) for p in pairs]


def _digest_of(inp: Input, chunk: int, hashed: dict) -> Digest:
    if inp.digest is not None:
        return inp.digest
    return _assemble(inp.replica, chunk, hashed.get(("hash", id(inp), chunk), []))


def _merge(cuts: list[Cut]) -> list[Cut]:
    out: dict[tuple, Cut] = {}
    for c in cuts:
        o = out.get((c.topic, c.queue_id))
        if o is None:
            out[(c.topic, c.queue_id)] = Cut(c.topic, c.queue_id, c.count, c.first_queue_offset, c.last_queue_offset)
        else:
            o.count += c.count
            o.first_queue_offset = min(o.first_queue_offset, c.first_queue_offset)
            o.last_queue_offset = max(o.last_queue_offset, c.last_queue_offset)
    return sorted(out.values(), key=lambda c: (c.topic, c.queue_id))


def _row(p: _Pair, hashed: dict) -> dict:
    """``mq align``'s row for this slave (align.judge: the one judgement both make)."""
    m, r = p.m.replica, p.s.replica
    if p.local:
        q = judge(m, r, min(p.bytes_first, default=None), exact=True, cut=_merge(p.cuts))
    else:
        chunk = (p.m.digest or p.s.digest).chunk
        first, unknown = digest_difference(_digest_of(p.m, chunk, hashed), _digest_of(p.s, chunk, hashed))
        q = judge(m, r, first, exact=False, unknown=unknown)
    return {"group": p.group.name, "master": p.m.arg, "replica": p.s.arg, "compared": "bytes" if p.local else "chunks",
            "max_offset": r.max_offset, "master_max_offset": m.max_offset,
            "last_epoch": r.entries[-1].epoch if r.entries else None, "first_difference": q.first_difference,
            "truncate_to": q.truncate_to, "cut_bytes": q.cut_bytes,
            "cut_messages": sum(c.count for c in q.cut) if p.local else None,
            "aligned": not (q.problem or q.cut_bytes),
            "detail": q.verdict + (f"; {q.problem}" if q.problem and q.problem != q.verdict else ""),
            "cuts": [asdict(c) for c in q.cut]}


MQ_ALIGN_SCHEMA = StructType([
    StructField("group", StringType()), StructField("master", StringType()), StructField("replica", StringType()),
    StructField("compared", StringType()), StructField("max_offset", LongType()),
    StructField("master_max_offset", LongType()), StructField("last_epoch", IntegerType()),
    StructField("first_difference", LongType()), StructField("truncate_to", LongType()),
    StructField("cut_bytes", LongType()), StructField("cut_messages", LongType()), StructField("aligned", BooleanType()),
    StructField("detail", StringType()),
    StructField("cuts", ArrayType(StructType([
        StructField("topic", StringType()), StructField("queue_id", IntegerType()), StructField("count", LongType()),
        StructField("first_queue_offset", LongType()), StructField("last_queue_offset", LongType())]))),
])


def as_dataframe(spark, rows: list[dict]):
    """The rows as a DataFrame (``--output``)."""
    return spark.createDataFrame([tuple(r[c] for c in MQ_ALIGN_COLUMNS) for r in rows], MQ_ALIGN_SCHEMA)
