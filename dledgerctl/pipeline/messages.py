"""The ``dledger`` source's RocketMQ columns (option ``rocketmq``), and the mq jobs on them.

With ``rocketmq=true`` each entry row also holds the RocketMQ message its body is, read by
store/rocketmq's decoder (the one ``mq messages`` uses): an entry that is no message (a
no-op, a config entry, another kind of body) has null message columns and ``msg_note``
says why. With ``body=true`` too, ``msg_body`` holds the message's body, uncompressed.

Jobs (each a function of a session and PATHS returning a DataFrame):

- :func:`mq_topics`: per node, topic and queue: messages, bytes, first/last queue offset
  and store time (``mq topics`` per node, for a fleet);
- :func:`mq_find`: where a message is: the nodes and indexes holding a key, a message id
  or a UNIQ_KEY (is it on every replica?);
- :func:`mq_export`: the messages to Parquet with their columns, partitioned by node.

Row field names are stable and documented in man/dledgerctl-spark.1.
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


# --- jobs -----------------------------------------------------------------------------------

MQ_TOPICS_COLUMNS = ["node", "topic", "queue_id", "messages", "bytes", "first_queue_offset", "last_queue_offset",
                     "first_store_time", "last_store_time"]
MQ_FIND_COLUMNS = ["node", "index", "pos", "msg_id", "topic", "queue_id", "queue_offset", "store_timestamp", "tags",
                   "keys", "uniq_key", "body_crc_ok"]
MQ_EXPORT_COLUMNS = ["node", "index", "term", "pos", "file"] + _FIELDS + ["msg_body"]


def _messages(spark, paths, **options):
    from .jobs import _nodes, read_entries
    nodes = _nodes(paths)
    df = read_entries(spark, nodes, rocketmq=True, checkCrc=False, **options)
    from pyspark.sql import functions as F
    return nodes, df.filter(F.col("topic").isNotNull())


def mq_topics(spark, paths):
    """One row per (node, topic, queue id), ordered so."""
    from pyspark.sql import functions as F
    _nodes, df = _messages(spark, paths)
    return (df.groupBy("node", "topic", "queue_id")
            .agg(F.count(F.lit(1)).alias("messages"), F.sum(F.col("size") - HEADER_SIZE).alias("bytes"),
                 F.min("queue_offset").alias("first_queue_offset"), F.max("queue_offset").alias("last_queue_offset"),
                 F.min("store_timestamp").alias("first_store_time"), F.max("store_timestamp").alias("last_store_time"))
            .orderBy("node", "topic", "queue_id")
            .select(*MQ_TOPICS_COLUMNS))


def mq_find(spark, paths, *, key=None, msg_id: str | None = None, uniq_key: str | None = None):
    """Every entry, on every node, whose message has this key among its KEYS (``key``: one,
    or several: any of them), message id or UNIQ_KEY (all given must match), ordered by node
    and index. ``msg_id`` is RocketMQ's offset msgId or the producer's UNIQ_KEY, as
    ``mqadmin queryMsgById`` takes either: the rows then have ``matched`` (``msg_id`` or
    ``uniq_key``)."""
    from pyspark.sql import functions as F

    from .errors import PipelineUsageError
    if key is None and msg_id is None and uniq_key is None:
        raise PipelineUsageError("say what to find: --key, --msg-id or --uniq-key")
    _nodes, df = _messages(spark, paths)
    keys = [key] if isinstance(key, str) else list(key or ())
    if keys:
        df = df.filter(F.arrays_overlap(F.split(F.coalesce(F.col("keys"), F.lit("")), " "),
                                        F.array(*[F.lit(k) for k in keys])))
    columns = list(MQ_FIND_COLUMNS)
    if msg_id is not None:
        by_id, by_uniq = F.col("msg_id") == msg_id.upper(), F.col("uniq_key") == msg_id.upper()
        df = df.filter(by_id | by_uniq).withColumn("matched", F.when(by_id, "msg_id").otherwise("uniq_key"))
        columns.append("matched")
    if uniq_key is not None:
        df = df.filter(F.col("uniq_key") == uniq_key)
    return df.select(*columns).orderBy("node", "index")


def mq_export(spark, paths, to: str, *, committed_only: bool = False, max_body: int = MAX_MESSAGE_SIZE):
    """The messages of every node to Parquet under ``to``/node=NAME/, with their columns and
    bodies (uncompressed, to at most ``max_body`` bytes: past it ``msg_body`` is null and
    ``msg_note`` says so); one summary row per node, as ``export`` gives."""
    from .jobs import check_output, write_by_node
    check_output(to)
    nodes, df = _messages(spark, paths, body=True, maxBody=max_body)
    return write_by_node(spark, nodes, df, to, MQ_EXPORT_COLUMNS, "msg_body_size", committed_only=committed_only)
