"""``dledgerctl mq consumers``: each consumer group's committed offsets against the consume
queues (store/rocketmq/consumers.py). Registered on the ``mq`` sub-app by app.py."""

from __future__ import annotations

from typing import Annotated

import typer

from store.rocketmq.configcheck import topic_findings
from store.rocketmq.consumers import PAST_END, consumer_rows
from store.rocketmq.layout import resolve_broker

from .common import FormatOpt, SelfIdOpt, errors_as_exit, plural
from .render import Format, render

COLUMNS = ["group", "topic", "queue_id", "committed", "min", "max", "backlog", "status"]


def consumers_cmd(
    dir: Annotated[str, typer.Argument(help="A broker's store root (DLedger mode or master-slave, "
                                                            "holding consumequeue/ and config/), or a node directory "
                                                            "of one. Only read.", show_default=False)],
    self_id: SelfIdOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Committed consumer offsets (config/consumerOffset.json, or its .bak as the broker falls back to it) against
    the consume queues: per group, topic and queue the committed offset, the queue's min and max, the backlog, and
    a status (ok, before min, no queue, past the end).

    An offset past the end of its queue (what a truncation or a failover leaves behind; the broker resets it) is a
    finding: exit 1. So are the configs that do not cover the queues (a "Finding:" line each on stderr):
    a queue beyond its topic's readQueueNums/writeQueueNums in config/topics.json, a topic with queues and no
    config, a subscription group's topic that does not exist."""
    with errors_as_exit():
        broker = resolve_broker(dir, self_id)
        rows, used, notes = consumer_rows(broker)
        configs = topic_findings(broker.root)
    render([r.as_dict() for r in rows], fmt, columns=COLUMNS if fmt in (Format.table, Format.csv) else None)
    for note in notes:
        typer.echo(f"Note: {note}", err=True)
    past = [r for r in rows if r.status.startswith(PAST_END)]
    groups = len({r.group for r in rows})
    typer.echo(f"{used}: {plural(groups, 'group')}, {plural(len(rows), 'committed offset')}, "
               f"{plural(len(past), 'offset')} past the end of {'its queue' if len(past) == 1 else 'their queues'}",
               err=True)
    for f in configs:
        typer.echo(f"Finding: {f['finding']}: {f['file']}: {f['detail']}", err=True)
    if past or configs:
        raise typer.Exit(1)
