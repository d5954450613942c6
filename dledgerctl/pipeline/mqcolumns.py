"""The ``dledger`` source's RocketMQ columns (option ``rocketmq``).

With ``rocketmq=true`` each entry row also holds the RocketMQ message its body is, read by
store/rocketmq's decoder (the one ``mq messages`` uses): an entry that is no message (a
no-op, a config entry, another kind of body) has null message columns and ``msg_note``
says why. With ``body=true`` too, ``msg_body`` holds the message's body, uncompressed.
No Spark here (pyarrow, numpy and the store): the reader (batches.py) builds these columns
in a task; the mq jobs on them are in messages.py.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from store.format import HEADER_SIZE, MAGIC_NORMAL
from store.rocketmq.message import MAX_MESSAGE_SIZE, NotAMessage, decode
from store.rocketmq.scan import message_fields

# (name, Arrow type, Spark SQL type), after the entry columns
MQ_COLUMNS = [
    ("msg_id", pa.string(), "string"),
    ("topic", pa.string(), "string"),
    ("queue_id", pa.int32(), "int"),
    ("queue_offset", pa.int64(), "bigint"),
    ("phy_offset", pa.int64(), "bigint"),
    ("sys_flag", pa.int32(), "int"),
    ("flag", pa.int32(), "int"),
    ("born_timestamp", pa.int64(), "bigint"),
    ("born_host", pa.string(), "string"),
    ("store_timestamp", pa.int64(), "bigint"),
    ("store_host", pa.string(), "string"),
    ("reconsume_times", pa.int32(), "int"),
    ("prepared_tx_offset", pa.int64(), "bigint"),
    ("msg_body_size", pa.int32(), "int"),
    ("body_crc_ok", pa.bool_(), "boolean"),
    ("tags", pa.string(), "string"),
    ("keys", pa.string(), "string"),
    ("uniq_key", pa.string(), "string"),
    ("properties", pa.map_(pa.string(), pa.string()), "map<string,string>"),
    ("msg_note", pa.string(), "string"),
]
MSG_BODY_COLUMN = ("msg_body", pa.binary(), "binary")
_FIELDS = [name for name, _, _ in MQ_COLUMNS]
_AS = {"msg_body_size": "body_size"}  # column -> message_fields' name, where they differ


def message_arrays(buf, rel: np.ndarray | None, size: np.ndarray | None, magic, n: int, body: bool,
                   max_body: int = MAX_MESSAGE_SIZE) -> dict:
    """The RocketMQ columns of ``n`` entries at relative offsets ``rel`` of ``buf`` (entry
    sizes ``size``, DLedger magics ``magic``); all null when ``rel`` is None (a stop row).
    Bodies are inflated as ``mq messages`` inflates them, to at most ``max_body`` bytes."""
    cols = {name: [None] * n for name in _FIELDS}
    bodies = [None] * n if body else None
    if rel is not None:
        magics = magic.to_numpy(zero_copy_only=False) if hasattr(magic, "to_numpy") else magic
        for k, (off, sz, mg) in enumerate(zip(rel.tolist(), size.tolist(), np.asarray(magics).tolist())):
            if mg != MAGIC_NORMAL:
                cols["msg_note"][k] = {2: "no-op entry", 3: "config entry"}.get(mg, f"DLedger magic {mg}")
                continue
            try:
                m = decode(buf, off + HEADER_SIZE, sz - HEADER_SIZE)
            except NotAMessage as exc:
                cols["msg_note"][k] = str(exc)
                continue
            fields = message_fields(buf, m, (lambda b: b) if body else None, max_body=max_body)  # (mq messages')
            for name in _FIELDS[:-1]:
                cols[name][k] = fields[_AS.get(name, name)]
            cols["properties"][k] = list(m.properties.items())
            if body:
                bodies[k] = fields["body"]
                if bodies[k] is None:  # (a compressed body that does not inflate: the note says why)
                    cols["msg_note"][k] = fields["note"]
    out = {name: pa.array(cols[name], typ) for name, typ, _ in MQ_COLUMNS}
    if body:
        out["msg_body"] = pa.array(bodies, pa.binary())
    return out
