"""``get --decode``: an entry read from a group, as a RocketMQ message or a RocketMQ 5
controller's event (store/rocketmq). log_cmd.py loads it only when ``--decode`` is given:
the decoders pull in numpy and the message codec, which a plain ``get`` does without."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from store.format import MAGIC_NORMAL
from store.rocketmq.controller import DECODED_COLUMNS, decoded_columns
from store.rocketmq.message import MAX_MESSAGE_SIZE, NotAMessage
from store.rocketmq.message import decode as decode_message
from store.rocketmq.scan import KINDS, message_fields

from .render import Format

if TYPE_CHECKING:
    from cluster.net.answers import EntryRow

MESSAGE_COLUMNS = ["kind", "msg_id", "topic", "queue_id", "queue_offset", "store_timestamp", "tags", "keys",
                   "body_crc_ok"]
CONTROLLER_COLUMNS = DECODED_COLUMNS


def controller_row(e: EntryRow, fmt: Format) -> dict:
    """An entry of ``get --decode rocketmq-controller``: its event's columns."""
    return {"index": e.index, "term": e.term, "pos": e.pos, "size": e.size, "magic": e.magic,
            **decoded_columns(e.magic, e.body, text=fmt in (Format.table, Format.csv))}


def message_row(e: EntryRow, show, fmt: Format, max_body: int = MAX_MESSAGE_SIZE) -> dict:
    """An entry of ``get --decode rocketmq``: its message's fields (store/rocketmq), or why it is none."""
    row = {"index": e.index, "term": e.term, "pos": e.pos, "size": e.size, "magic": e.magic,
           "kind": KINDS.get(e.magic, "not-a-message")}
    raw = e.body
    fields = None
    if e.magic == MAGIC_NORMAL:
        try:
            fields = message_fields(raw, decode_message(raw, 0, len(raw)), show, max_body=max_body)
        except NotAMessage as exc:
            row.update(kind="not-a-message", note=str(exc))
    if fields is None:
        fields = {k: None for k in ("phy_offset", "msg_id", "topic", "queue_id", "queue_offset", "store_timestamp",
                                    "tags", "keys", "body_crc_ok")}
        if show is not None:
            fields["body"] = None
        fields.setdefault("note", row.pop("note", ""))
    row.update(fields)
    if fmt in (Format.table, Format.csv) and isinstance(row.get("properties"), dict):
        row["properties"] = json.dumps(row["properties"], ensure_ascii=False)
    return row
