"""``mq align`` whole: replicas of one broker group (stopped store roots, or digests of ``mq
digest`` made on their machines) compared with the one that is, or will be, master, each
slave judged by its next handshake (align.py: predict, judge), as report rows. Also the
digest file ``mq digest --out`` writes and this reads back."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ..errors import NotAStoreError
from .align import (Digest, become_master, digest, digest_difference, digest_from_dict, judge, master_order, predict,
                    replica_from_digest)
from .replica import Replica, read_replica

DIGEST_LIMIT = 256 << 20  # a digest file's bytes: a 1 PiB log in 4 MiB chunks is far below


@dataclass
class Alignment:
    """The report: one row per replica (``row`` replica; role master or slave; its max offset
    and last epoch; where it first differs from the master; what its handshake truncates to
    and cuts; the verdict) and one per topic and queue a handshake cuts messages from (``row``
    cut); ``master``: the argument that gave the master; ``bad``: how many slaves would lose,
    or keep, bytes the master does not hold."""

    master: str
    rows: list[dict] = field(default_factory=list)
    bad: int = 0


def load(path: str) -> tuple[Replica, Digest | None]:
    """A replica from a store root, or from a digest file (with the digest)."""
    if os.path.isdir(path):
        return read_replica(path), None
    try:
        with open(path, "rb") as fh:
            text = fh.read(DIGEST_LIMIT)
        d = digest_from_dict(json.loads(text))
    except FileNotFoundError:
        raise NotAStoreError(f"{path}: no such file or directory") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise NotAStoreError(f"{path}: not a store root nor a digest of mq digest: {exc}") from None
    return replica_from_digest(d), d


def write_digest(path: str, d: Digest) -> None:
    """Write a digest's JSON to ``path`` whole or not at all."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            json.dump(d.as_dict(), fh, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise NotAStoreError(f"{path}: cannot write: {exc.strerror or exc}") from None


def align(paths: list[str], master: str | None = None, master_epoch: int | None = None) -> Alignment:
    """Each replica of ``paths`` judged against the master: ``master`` (one of ``paths``), else
    the newest last epoch, then the longest log; with ``master_epoch``, the master's epochs as
    they will be once it becomes master at that epoch. Directories compare to the byte,
    digests to the chunk."""
    loaded = [(p, *load(p)) for p in paths]
    if master is not None and master not in paths:
        raise NotAStoreError(f"--master {master} is not among the replicas given")
    # (replicas are told apart by the argument that gave them: digests made on several machines
    # may all name the same store path)
    k = paths.index(master) if master is not None else max(range(len(loaded)), key=lambda i: master_order(loaded[i][1]))
    m_arg, m, mdig = loaded[k]
    if master_epoch is not None:
        m = become_master(m, master_epoch)
    out = Alignment(m_arg)
    for arg, r, d in loaded:
        if arg == m_arg:
            out.rows.append(_row(arg, "master", r, None, None, 0, "the master its slaves compare with"))
            continue
        if d is None and mdig is None:
            p = predict(m, r, local=True)
        else:
            first, unknown = digest_difference(mdig or digest(m.root, replica=m), d or digest(r.root, replica=r))
            p = judge(m, r, first, exact=False, unknown=unknown)
        out.bad += bool(p.problem or p.cut_bytes)
        out.rows.append(_row(arg, "slave", r, p.first_difference, p.truncate_to, p.cut_bytes,
                             p.verdict + (f"; {p.problem}" if p.problem and p.problem != p.verdict else "")))
        for c in p.cut:
            n = f"{c.count} message" + ("" if c.count == 1 else "s")
            out.rows.append({"row": "cut", "replica": arg, "role": None, "max_offset": None, "last_epoch": None,
                             "first_difference": None, "truncate_to": None, "cut_bytes": None,
                             "detail": f"{c.topic} queue {c.queue_id}: {n}, queue offsets "
                                       f"{c.first_queue_offset}..{c.last_queue_offset}",
                             "topic": c.topic, "queue_id": c.queue_id, "count": c.count,
                             "first_queue_offset": c.first_queue_offset, "last_queue_offset": c.last_queue_offset})
    return out


def _row(arg: str, role: str, r: Replica, first, truncate_to, cut_bytes, detail: str) -> dict:
    return {"row": "replica", "replica": arg, "role": role, "max_offset": r.max_offset,
            "last_epoch": r.entries[-1].epoch if r.entries else None, "first_difference": first,
            "truncate_to": truncate_to, "cut_bytes": cut_bytes, "detail": detail}
