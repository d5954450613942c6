"""``dledgerctl mq rebuild``: a stopped broker's consume queues and index made again from its
log, in place (store/rocketmq/rebuild.py). Registered on the ``mq`` sub-app by app.py."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from store.rocketmq.divided import log_bytes
from store.rocketmq.index import MAX_HASH_SLOT_NUM, MAX_INDEX_NUM
from store.rocketmq.layout import resolve_broker
from store.rocketmq.rebuild import RebuildInterrupted, rebuild, store_root

from .common import DataSizeOpt, FormatOpt, IndexSizeOpt, SelfIdOpt, errors_as_exit, parse_size, plural, progress_bar
from .mq_options import MAX_FILE_SIZE, MaxHashSlotOpt, MaxIndexNumOpt, check_index_shape, index_shape_for
from .render import Format, render

SUMMARY_COLUMNS = ["root", "messages", "queues", "units", "blanks", "index_keys", "left_out", "kept_aside", "note"]
# ScheduleMessageService.parseDelayLevel's units
_UNIT_MS = {"s": 1000, "m": 60 * 1000, "h": 60 * 60 * 1000, "d": 24 * 60 * 60 * 1000}


def parse_delay_levels(text: str) -> list[int]:
    """A broker's messageDelayLevel ("1s 5s 10s 30s 1m ... 2h"): each level's delay in ms."""
    out = []
    for word in text.split():
        m = re.fullmatch(r"(\d{1,9})([smhd])", word)
        if m is None:
            raise typer.BadParameter(f"{word!r} is not a delay level (a number and one of s, m, h, d; levels "
                                     f"separated by spaces, as the broker's messageDelayLevel)",
                                     param_hint="--delay-levels")
        out.append(int(m.group(1)) * _UNIT_MS[m.group(2)])
    if not out:
        raise typer.BadParameter("no delay level given", param_hint="--delay-levels")
    return out


def _log_bytes(broker) -> int:
    """The log's size on disk (for the progress bar)."""
    return log_bytes(broker.node_dir)


def rebuild_cmd(
    dir: Annotated[str, typer.Argument(help="A stopped broker's store root (DLedger mode: holding dledger-<id>/; "
                                            "master-slave: holding commitlog/), or its node directory.",
                                       show_default=False)],
    include_uncommitted: Annotated[bool, typer.Option(
        "--include-uncommitted", help="DLedger mode: dispatch the entries past the committed index too (a "
                                      "follower's may be cut by the leader; the broker dispatches only committed "
                                      "ones).")] = False,
    queue_file_size: Annotated[int | None, typer.Option(
        "--queue-file-size", parser=parse_size, metavar="SIZE",
        help="Consume-queue file size: the broker's mappedFileSizeConsumeQueue (default: the one the broker's "
             "configuration sets, see --broker-conf; else the old files' size; else RocketMQ's 6000000, said in a "
             "note).", show_default=False)] = None,
    broker_conf: Annotated[str | None, typer.Option(
        "--broker-conf", metavar="FILE",
        help="The broker's configuration file (its -c FILE, Java properties), read for mappedFileSizeConsumeQueue "
             "(rounded up to 20-byte units, as the broker does). Default: config/broker.properties in the store "
             "root, where a broker started without -c keeps its settings.", show_default=False)] = None,
    delay_levels: Annotated[str | None, typer.Option(
        "--delay-levels", metavar="LEVELS", help="The broker's messageDelayLevel, when it is not RocketMQ's default "
                                                 "\"1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h\" "
                                                 "(delayed messages' tag codes are their delivery times).",
        show_default=False)] = None,
    max_hash_slot_num: MaxHashSlotOpt = None,
    max_index_num: MaxIndexNumOpt = None,
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Rebuild a stopped broker's consumequeue/ and index/ from its log, in place: each message the broker
    dispatches gets its unit at its own queue offset, as the broker's dispatch writes them; the old consumequeue/,
    index/ and checkpoint are renamed aside (NAME.old-TIME), never deleted.

    For a lost or damaged consumequeue/, or queues left pointing past a truncated log. Nothing changes when the
    log cannot be read as it stands (the error names the place; 'mq check' tells more). One summary row."""
    levels = None if delay_levels is None else parse_delay_levels(delay_levels)
    if max_hash_slot_num is not None or max_index_num is not None:
        check_index_shape(max_hash_slot_num or MAX_HASH_SLOT_NUM, max_index_num or MAX_INDEX_NUM)
    if queue_file_size is not None and not 20 <= queue_file_size <= MAX_FILE_SIZE or (queue_file_size or 0) % 20:
        raise typer.BadParameter(f"{queue_file_size} bytes: a whole number of 20-byte units, at most "
                                 f"{MAX_FILE_SIZE}", param_hint="--queue-file-size")
    with errors_as_exit():
        broker = resolve_broker(dir, self_id)
        shape = index_shape_for(store_root(broker), max_hash_slot_num, max_index_num)
        try:
            with progress_bar("reading the log", _log_bytes(broker)) as advance:
                summary = rebuild(broker, include_uncommitted=include_uncommitted, queue_file_size=queue_file_size,
                                  delay_levels_ms=levels, max_hash_slot_num=shape.slots,
                                  max_index_num=shape.index_num, data_file_size=data_file_size,
                                  index_file_size=index_file_size, progress=advance, broker_conf=broker_conf)
        except RebuildInterrupted as exc:  # (what it left: nothing changed, or the renames finished)
            typer.echo(str(exc), err=True)
            raise typer.Exit(128 + exc.signum) from None
    render([summary.row()], fmt, columns=SUMMARY_COLUMNS if fmt in (Format.table, Format.csv) else None)
    aside = f"; the old files are {', '.join(summary.kept_aside)}" if summary.kept_aside else ""
    typer.echo(f"{summary.root}: {plural(summary.units, 'unit')} in {plural(summary.queues, 'consume queue')}, "
               f"{plural(summary.index_keys, 'key')} in {plural(summary.index_files, 'index file')}{aside}", err=True)
    for note in summary.notes:
        typer.echo(f"note: {note}", err=True)
