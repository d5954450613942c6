"""``dledgerctl mq digest`` and ``mq align``: whether a broker group's replicas hold the same
commit log, and what each slave's next handshake would cut (store/rocketmq/align.py).
Registered on the ``mq`` sub-app by mq_app.py."""

from __future__ import annotations

import json
import os
from typing import Annotated, List, Optional

import typer

from store.errors import NotAStoreError
from store.rocketmq.align import (Digest, become_master, digest, digest_difference, digest_from_dict, judge,
                                  master_order, predict, replica_from_digest)
from store.rocketmq.replica import read_replica

from .common import FormatOpt, errors_as_exit, fail, plural
from .render import Format, render

DIGEST_COLUMNS = ["file", "start", "used", "chunks", "sha256"]
ALIGN_COLUMNS = ["row", "replica", "role", "max_offset", "last_epoch", "first_difference", "truncate_to", "cut_bytes",
                 "detail"]


def digest_cmd(
    dir: Annotated[str, typer.Argument(help="A controller-mode or master-slave broker's store root. Only read.",
                                       show_default=False)],
    out: Annotated[Optional[str], typer.Option("--out", "-o", help="Write the digest's JSON to this file (what mq "
                                                                    "align reads in place of a store root).")]
    = None,
    upto: Annotated[Optional[int], typer.Option("--upto", min=0, help="End the digest at this offset (another "
                                                                       "replica's max offset, so that every chunk "
                                                                       "compares with its digest).")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """SHA-256 digests of a replica's commit log up to its max offset: per 4 MiB chunk, per file and whole, with
    its epochs and identity, so that replicas on different machines can be compared without copying their logs
    (mq align --digests). Files are hashed in parallel."""
    with errors_as_exit():
        d = digest(dir, upto=upto)
        if out is not None:
            _write_json(out, d.as_dict())
    if fmt == Format.json and out is None:
        typer.echo(json.dumps(d.as_dict(), separators=(",", ":")))
    else:
        render([{"file": f.name, "start": f.start, "used": f.used, "chunks": len(f.chunks), "sha256": f.sha256}
                for f in d.files], fmt, columns=DIGEST_COLUMNS if fmt in (Format.table, Format.csv) else None)
    typer.echo(f"{d.root}: {plural(len(d.files), 'file')}, offsets {d.min_offset}..{d.max_offset}, sha256 "
               f"{d.sha256}" + (f"; written to {out}" if out else ""), err=True)


def _write_json(path: str, obj: dict) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            json.dump(obj, fh, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise NotAStoreError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _load(path: str):
    """A replica from a store root, or from a digest file (mq digest --out)."""
    if os.path.isdir(path):
        return read_replica(path), None
    try:
        with open(path, "rb") as fh:
            text = fh.read(256 << 20)
        d = digest_from_dict(json.loads(text))
    except FileNotFoundError:
        raise NotAStoreError(f"{path}: no such file or directory") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise NotAStoreError(f"{path}: not a store root nor a digest of mq digest: {exc}") from None
    return replica_from_digest(d), d


def align_cmd(
    replicas: Annotated[List[str], typer.Argument(help="Each replica: its store root (stopped), or its digest file "
                                                       "(mq digest --out, made on its machine).", show_default=False)],
    master: Annotated[Optional[str], typer.Option("--master", help="The replica that is (or will be) master, as "
                                                                   "given among REPLICAS; default: the newest last "
                                                                   "epoch, then the longest log.")] = None,
    master_epoch: Annotated[Optional[int], typer.Option("--master-epoch", min=0, help="Predict with the master's "
                                                                                 "epochs after it becomes master at "
                                                                                 "this epoch (the controller's next "
                                                                                 "masterEpoch: 1 for a new broker "
                                                                                 "set).")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Whether a group's replicas hold the same commit log, where each first differs from the master, and what each
    slave's next handshake with it does by RocketMQ's rules (its epochs against the master's: findConsistentPoint):
    nothing, a truncation (bytes, and the messages cut per topic and queue with their queue offsets), or a refusal
    (no consistent point); and bytes that differ below what the handshake keeps, which no handshake repairs.
    Directories are compared to the byte, digests to the 4 MiB chunk. Exits 1 when a handshake would cut or refuse,
    or replicas differ where they are kept."""
    if len(replicas) < 2:
        raise typer.BadParameter("give two replicas or more", param_hint="REPLICAS")
    with errors_as_exit():
        loaded = [(p, *_load(p)) for p in replicas]
        args = [p for p, _r, _d in loaded]
        if master is not None and master not in args:
            raise NotAStoreError(f"--master {master} is not among the replicas given")
        # (replicas are told apart by the argument that gave them: digests made on several machines
        # may all name the same store path)
        k = args.index(master) if master is not None else \
            max(range(len(loaded)), key=lambda i: master_order(loaded[i][1]))
        m_arg, m, mdig = loaded[k]
        rows, bad = [], 0
        if master_epoch is not None:
            m = become_master(m, master_epoch)
        for arg, r, d in loaded:
            if arg == m_arg:
                rows.append(_row("replica", arg, "master", r, None, None, 0, "the master its slaves compare with"))
                continue
            if d is None and mdig is None:
                p = predict(m, r, local=True)
            else:
                first, unknown = digest_difference(mdig or _digest_of(m), d or _digest_of(r))
                p = judge(m, r, first, exact=False, unknown=unknown)
            bad += bool(p.problem or p.cut_bytes)
            rows.append(_row("replica", arg, "slave", r, p.first_difference, p.truncate_to, p.cut_bytes,
                             p.verdict + (f"; {p.problem}" if p.problem and p.problem != p.verdict else "")))
            for c in p.cut:
                rows.append({"row": "cut", "replica": arg, "role": None, "max_offset": None, "last_epoch": None,
                             "first_difference": None, "truncate_to": None, "cut_bytes": None,
                             "detail": f"{c.topic} queue {c.queue_id}: {plural(c.count, 'message')}, queue offsets "
                                       f"{c.first_queue_offset}..{c.last_queue_offset}",
                             "topic": c.topic, "queue_id": c.queue_id, "count": c.count,
                             "first_queue_offset": c.first_queue_offset, "last_queue_offset": c.last_queue_offset})
    render(rows, fmt, columns=ALIGN_COLUMNS if fmt in (Format.table, Format.csv) else None)
    if bad:
        raise fail(f"{plural(bad, 'slave')} of {len(replicas) - 1} would lose or keep bytes the master does not hold: "
                   "not aligned")
    typer.echo(f"aligned: every slave's handshake with {m_arg} keeps what it holds", err=True)


def _digest_of(r) -> Digest:
    return digest(r.root, replica=r)


def _row(kind, arg, role, r, first, truncate_to, cut_bytes, detail) -> dict:
    return {"row": kind, "replica": arg, "role": role, "max_offset": r.max_offset,
            "last_epoch": r.entries[-1].epoch if r.entries else None, "first_difference": first,
            "truncate_to": truncate_to, "cut_bytes": cut_bytes, "detail": detail}
