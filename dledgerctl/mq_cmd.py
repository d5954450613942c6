"""``dledgerctl mq messages | topics | check``: the RocketMQ messages in a broker's DLedger
log and the consume queues beside it, offline (store/rocketmq/)."""

from __future__ import annotations

import datetime
import json
import os
import re
from typing import Annotated, Optional

import typer

from store.reading import render_body
from store.rocketmq.check import check_broker, topic_rows
from store.rocketmq.divided import log_bytes
from store.rocketmq.layout import resolve_broker
from store.rocketmq.message import MAX_MESSAGE_SIZE
from store.rocketmq.scan import MESSAGE_FIELDS, Filter, message_rows, msg_id_pos, queue_offset_rows, tag_set

from .common import (BodyFormat, DataSizeOpt, FormatOpt, IndexSizeOpt, MaxBodyOpt, SelfIdOpt,
                     errors_as_exit, fail, plural, progress_bar)
from .render import Format, render
from .selection_options import FromOpt, ToOpt, selection

app = typer.Typer(help="RocketMQ messages in a broker's DLedger log, and its consume queues (offline).",
                  no_args_is_help=True)

DirArg = Annotated[str, typer.Argument(help="A broker's store root (holding dledger-<id>/ and consumequeue/), or a "
                                            "node directory.", show_default=False)]

TABLE_COLUMNS = ["kind", "index", "msg_id", "topic", "queue_id", "queue_offset", "store_timestamp", "body_size",
                 "body_crc_ok", "tags", "keys", "note"]


_EPOCH_MS = re.compile(r"-?[0-9]+")


def _millis(text: str | None, name: str) -> int | None:
    """Epoch milliseconds, or an ISO 8601 time (UTC unless it says otherwise)."""
    if text is None:
        return None
    if _EPOCH_MS.fullmatch(text.strip()):  # (ASCII digits only: '²'.isdigit() holds, int('²') fails)
        return int(text)
    try:
        t = datetime.datetime.fromisoformat(text.strip())
        if t.tzinfo is None:
            t = t.replace(tzinfo=datetime.timezone.utc)
        return int(t.timestamp() * 1000)
    except (ValueError, OverflowError, OSError):
        raise typer.BadParameter(f"{text!r} is neither epoch milliseconds nor an ISO 8601 time",
                                 param_hint=name) from None


def _render_body(kind: BodyFormat):
    if kind == BodyFormat.none:
        return None
    return lambda raw: render_body(raw, kind.value)


@app.command("messages")
def messages_cmd(
    dir: DirArg,
    from_index: FromOpt = None,
    to_index: ToOpt = None,
    topic: Annotated[Optional[list[str]], typer.Option("--topic", help="Only this topic (repeat: any of them).")]
    = None,
    queue_id: Annotated[Optional[int], typer.Option("--queue-id", min=0, help="Only this queue id.")] = None,
    queue_offset: Annotated[Optional[int], typer.Option("--queue-offset", min=0, help="With one --topic and "
                                                        "--queue-id: the message at this queue offset, found "
                                                        "through the consume queue as mqadmin queryMsgByOffset "
                                                        "does (no scan).")] = None,
    tag: Annotated[Optional[list[str]], typer.Option("--tag", help="Only messages with these tags, as a consumer "
                                                                   "subscribes: TAG, 'tag1||tag2', or '*' (repeat: "
                                                                   "any of them).")] = None,
    key: Annotated[Optional[list[str]], typer.Option("--key", help="Only messages with this key among their KEYS "
                                                                   "(repeat: any of them).")] = None,
    msg_id: Annotated[Optional[str], typer.Option("--msg-id", help="Only the message with this id: RocketMQ's "
                                                                    "offset msgId (read at the offset it holds, "
                                                                    "without a scan), else the producer's UNIQ_KEY "
                                                                    "(what SendResult.getMsgId() shows); the "
                                                                    "'matched' column says which.")] = None,
    uniq_key: Annotated[Optional[str], typer.Option("--uniq-key", help="Only the message with this UNIQ_KEY (the "
                                                                        "id a producer gives it).")] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Stored at or after: epoch ms or ISO 8601 "
                                                                 "(UTC unless it says).")] = None,
    until: Annotated[Optional[str], typer.Option("--until", help="Stored at or before, likewise.")] = None,
    body: Annotated[BodyFormat, typer.Option("--body", help="Show bodies (uncompressed) as none, utf8, hex or base64.",
                                             case_sensitive=False)] = BodyFormat.none,
    max_body: MaxBodyOpt = None,
    scan: Annotated[bool, typer.Option("--scan", help="Read every message to find keys and UNIQ_KEYs, instead of "
                                                      "looking them up in the broker's index/ files (used, with "
                                                      "--topic, when they are there).")] = False,
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """One row per message: index, pos, msg id, topic, queue, queue offset, times, hosts, tags, keys, properties.

    Entries that are not messages (a no-op, a config entry, another kind of body) are listed as such, unless a
    filter is given."""
    sel = selection(None, from_index, to_index, None)
    if max_body is not None and body == BodyFormat.none:
        raise typer.BadParameter("it bounds the bodies --body shows: give --body too", param_hint="--max-body")
    try:
        tags = tag_set(tag)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--tag") from None
    if uniq_key is not None and re.fullmatch(r"[0-9a-fA-F]+", uniq_key):
        uniq_key = uniq_key.upper()  # (RocketMQ's clients write it in upper-case hex: as --msg-id is read)
    flt = Filter(tuple(topic or ()), queue_id, tags, tuple(key or ()), msg_id, uniq_key, _millis(since, "--since"),
                 _millis(until, "--until"))
    if msg_id is not None:
        try:
            msg_id_pos(msg_id)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--msg-id") from None
    if queue_offset is not None:
        others = [name for name, v in (("--msg-id", msg_id), ("--uniq-key", uniq_key), ("--tag", tag), ("--key", key),
                                       ("--since", since), ("--until", until), ("--from-index", from_index),
                                       ("--to-index", to_index)) if v is not None and v != []]
        if len(topic or ()) != 1 or queue_id is None or others:
            raise typer.BadParameter("give it with exactly one --topic and a --queue-id (the queue it is an offset "
                                     "in), and no other filter" + (f" (not {', '.join(others)})" if others else ""),
                                     param_hint="--queue-offset")
    extra = (["matched"] if msg_id is not None else []) + (["body"] if body != BodyFormat.none else [])
    with errors_as_exit():
        broker = resolve_broker(dir, self_id)
        opts = dict(body=_render_body(body), max_body=max_body or MAX_MESSAGE_SIZE, data_file_size=data_file_size,
                    index_file_size=index_file_size)
        if queue_offset is None:
            rows = message_rows(broker.node_dir, sel, flt, **opts,
                                index_root=None if scan else os.path.dirname(os.path.abspath(broker.node_dir)))
        elif broker.root is None:
            raise fail(f"{broker.node_dir}: no consume queues beside it ({os.path.dirname(broker.node_dir)} has no "
                       "consumequeue/): --queue-offset reads through them", 1)
        else:
            rows = queue_offset_rows(broker.root, broker.node_dir, topic[0], queue_id, queue_offset, **opts)
        if fmt == Format.csv:
            rows = _json_properties(rows)
        shown = render(rows, fmt, columns=TABLE_COLUMNS + extra if fmt == Format.table else
                       MESSAGE_FIELDS + extra if fmt == Format.csv else None)
    if not shown and (msg_id is not None or uniq_key is not None or key):
        typer.echo("Note: no message matches", err=True)
        raise typer.Exit(1)  # (a search that finds nothing: exit 1, as grep does)


def _json_properties(rows):
    """csv: the properties as a JSON object (as ``get --decode rocketmq -f csv`` writes them)."""
    for row in rows:
        if isinstance(row.get("properties"), dict):
            row["properties"] = json.dumps(row["properties"], ensure_ascii=False)
        yield row


@app.command("topics")
def topics_cmd(
    dir: DirArg,
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Per topic and queue: messages, bytes, first/last queue offset and store time in the log, and the consume
    queue's own range (cq_first, cq_last, cq_units) beside them."""
    notes: list[str] = []
    with errors_as_exit():
        broker = resolve_broker(dir, self_id)
        with progress_bar("reading messages", log_bytes(broker.node_dir)) as advance:
            rows = topic_rows(broker, data_file_size=data_file_size, index_file_size=index_file_size,
                              progress=advance, notes=notes)
    render(rows, fmt)
    for note in notes:
        typer.echo(f"Note: {note} (mq check says more)", err=True)


FINDING_COLUMNS = ["finding", "file", "offset", "index", "topic", "queue_id", "queue_offset", "detail"]


@app.command("check")
def check_cmd(
    dir: DirArg,
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    max_findings: Annotated[Optional[int], typer.Option("--max-findings", min=0, metavar="N",
                                                        help="Show the first N findings only (all are still counted "
                                                             "and the total said; the exit code is the same).")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Check every message (framing, BODYCRC, PHYSICALOFFSET = pos + 48, queue offsets in order) and every
    consume-queue unit (it points at a message of its topic and queue, with its size and tag code).

    One row per finding, with the file and the byte offset in it; exit 1 when there is any. Units past the log's
    end (a follower truncated since the broker built them) are findings: the broker must rebuild its queues."""
    with errors_as_exit():
        broker = resolve_broker(dir, self_id)
        with progress_bar("checking messages", log_bytes(broker.node_dir)) as advance:
            findings, summary = check_broker(broker, data_file_size=data_file_size, index_file_size=index_file_size,
                                             progress=advance, max_findings=max_findings)
    if summary.get("in_use"):
        flying = summary.get("in_flight") or 0
        typer.echo(f"note: a running broker holds {broker.root}/lock: the store is in use, read as it is being "
                   f"written; what its dispatch has not reached yet is in flight, not a finding"
                   + (f" ({flying} messages and units taken so)" if flying else ""), err=True)
    if findings or fmt != Format.table:
        render(findings, fmt, columns=FINDING_COLUMNS if fmt in (Format.table, Format.csv) else None)
    queues = ("no consume queues beside it" if summary["consume_queues"] is None else
              f"{plural(summary['units'], 'unit')} in {plural(summary['consume_queues'], 'consume queue')}"
              + (f" ({summary['units_before_log']} before the log's first message)"
                 if summary["units_before_log"] else "")
              + (f"; {plural(summary['undispatched'], 'message')} not in a queue yet" if summary["undispatched"]
                 else ""))
    typer.echo(f"{summary['node_dir']}: {plural(summary['messages'], 'message')} of "
               f"{plural(summary['topics'], 'topic')} in {plural(summary['entries'], 'entry', 'entries')}"
               f"{' (none is a RocketMQ message: not a broker log)' if summary['no_messages'] else ''}, "
               f"{queues}: {plural(summary['findings'], 'finding')}"
               f"{f' (the first {len(findings)} shown: --max-findings)' if summary['findings'] > len(findings) else ''}",
               err=True)
    if summary["findings"]:
        raise typer.Exit(1)
