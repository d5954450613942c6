"""``dledgerctl mq digest`` and ``mq align``: whether a broker group's replicas hold the same
commit log, and what each slave's next handshake would cut (store/rocketmq/align.py).
Registered on the ``mq`` sub-app by mq_app.py."""

from __future__ import annotations

import json
from typing import Annotated, List, Optional

import typer

from store.rocketmq.align import digest
from store.rocketmq.alignment import align, write_digest

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
            write_digest(out, d)
    if fmt == Format.json and out is None:
        typer.echo(json.dumps(d.as_dict(), separators=(",", ":")))
    else:
        render([{"file": f.name, "start": f.start, "used": f.used, "chunks": len(f.chunks), "sha256": f.sha256}
                for f in d.files], fmt, columns=DIGEST_COLUMNS if fmt in (Format.table, Format.csv) else None)
    typer.echo(f"{d.root}: {plural(len(d.files), 'file')}, offsets {d.min_offset}..{d.max_offset}, sha256 "
               f"{d.sha256}" + (f"; written to {out}" if out else ""), err=True)


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
        report = align(replicas, master, master_epoch)
    rows, bad, m_arg = report.rows, report.bad, report.master
    render(rows, fmt, columns=ALIGN_COLUMNS if fmt in (Format.table, Format.csv) else None)
    if bad:
        raise fail(f"{plural(bad, 'slave')} of {len(replicas) - 1} would lose or keep bytes the master does not hold: "
                   "not aligned")
    typer.echo(f"aligned: every slave's handshake with {m_arg} keeps what it holds", err=True)
