"""``dledgerctl mq epochs``: a controller-mode broker's epoch file and identity against its
commit log (store/rocketmq/replica.py). Registered on the ``mq`` sub-app by mq_app.py."""

from __future__ import annotations

from typing import Annotated

import typer

from store.rocketmq.replica import ERROR, read_replica

from .common import FormatOpt, errors_as_exit, plural
from .render import Format, render

COLUMNS = ["row", "epoch", "start_offset", "end_offset", "detail"]


def epochs_cmd(
    dir: Annotated[str, typer.Argument(help="A controller-mode (or master-slave) broker's store root: commitlog/, "
                                            "epochFileCheckpoint and its .bak, brokerIdentity. Only read.",
                                       show_default=False)],
    fmt: FormatOpt = Format.table,
) -> None:
    """A controller-mode broker's epochs, as RocketMQ 5 reads them: each epoch file (epochFileCheckpoint and its
    .bak: entries, count and CRC) and which one RocketMQ uses, each epoch's start and end against the commit log
    (the last ends at the log's max offset), the broker identity files, and what is wrong among them (an epoch out
    of order or past the log, a file RocketMQ falls back from or cannot load). Exits 1 on an error finding."""
    with errors_as_exit():
        r = read_replica(dir)
    render(list(_rows(r)), fmt, columns=COLUMNS if fmt in (Format.table, Format.csv) else None)
    errors = [f for f in r.findings if f.severity == ERROR]
    typer.echo(f"{r.root}: {plural(len(r.entries), 'epoch')} from {r.used or 'no epoch file'}; commit log "
               + (f"{r.min_offset}..{r.max_offset}" if r.min_offset >= 0 else "absent")
               + f"; {plural(len(r.findings), 'finding')}", err=True)
    if errors:
        raise typer.Exit(1)


def _rows(r):
    for f in r.files:
        state = ("missing" if not f.exists else f"{len(f.entries)} entries" if f.entries is not None
                 else f"broken: {f.problem}")
        yield {"row": "file", "epoch": None, "start_offset": None, "end_offset": None,
               "detail": f"{f.path}: {state}" + ("; RocketMQ reads this one" if f.path == r.used else ""),
               "path": f.path, "exists": f.exists, "used": f.path == r.used,
               "entries": None if f.entries is None else [list(e) for e in f.entries], "problem": f.problem or None}
    yield {"row": "log", "epoch": None, "start_offset": r.min_offset, "end_offset": r.max_offset,
           "detail": "commit log: first byte and max offset" if r.min_offset >= 0 else "no commit-log file"}
    for s in r.spans:
        yield {"row": "epoch", "epoch": s.epoch, "start_offset": s.start, "end_offset": s.end,
               "detail": f"{s.end - s.start} bytes" if s.end >= s.start else "ends before it starts"}
    for i in r.identity:
        yield {"row": "identity", "epoch": None, "start_offset": None, "end_offset": None,
               "detail": i.problem or f"{i.path}: {i.cluster}#{i.broker}#{i.broker_id}"
               + (f" (registering, check code {i.register_check_code})" if i.register_check_code else ""),
               "path": i.path, "cluster": i.cluster or None, "broker": i.broker or None, "broker_id": i.broker_id}
    for f in r.findings:
        yield {"row": f.severity, "epoch": f.epoch, "start_offset": f.offset, "end_offset": None,
               "detail": f"{f.code}: {f.detail}", "code": f.code}
