"""The mq jobs: Spark jobs over the ``dledger`` source's RocketMQ columns (mqcolumns.py).

Jobs (each a function of a session and PATHS returning a DataFrame):

- :func:`mq_topics`: per node, topic and queue: messages, bytes, first/last queue offset
  and store time (``mq topics`` per node, for a fleet);
- :func:`mq_find`: where a message is: the nodes and indexes holding a key, a message id
  or a UNIQ_KEY (is it on every replica?);
- :func:`mq_export`: the messages to Parquet with their columns, partitioned by node.

Each reads DLedger-mode stores (a node's DLedger log) and master-slave stores (a store
root's ``commitlog/``, commitlogs.py) alike, with the rows ``mq messages`` gives for each:
on a master-slave store ``index`` is a message's ordinal in the log and ``pos`` its
commit-log offset - 48. A job first counts the messages of every commit-log file, a task
per file (a header walk: :func:`commit_log_plans`), so that each file's read knows the
ordinal of its first message.

Row field names are stable and documented in man/dledgerctl-spark.1.
"""

from __future__ import annotations

import json

from pyspark.sql import functions as F

from store.format import HEADER_SIZE
from store.rocketmq.divided import old_log_dir
from store.rocketmq.message import MAX_MESSAGE_SIZE

from .commitlogs import file_summary, log_plan, store_files
from .errors import PipelineUsageError
from .jobs import _nodes, check_output, read_entries, write_by_node
from .mqcolumns import MQ_COLUMNS

MQ_TOPICS_COLUMNS = ["node", "topic", "queue_id", "messages", "bytes", "first_queue_offset", "last_queue_offset",
                     "first_store_time", "last_store_time", "damaged"]
MQ_FIND_COLUMNS = ["node", "index", "pos", "msg_id", "topic", "queue_id", "queue_offset", "store_timestamp", "tags",
                   "keys", "uniq_key", "body_crc_ok", "entry_crc_ok"]
MQ_EXPORT_COLUMNS = (["node", "index", "term", "pos", "file"] + [name for name, _, _ in MQ_COLUMNS]
                     + ["entry_crc_ok", "msg_body"])


def commit_log_plans(spark, nodes) -> dict[str, list[tuple[int, int]]]:
    """Store root -> (file start, ordinal of its first message) of each commit-log file that
    is part of the log, for the master-slave stores among ``nodes``: one Spark task counts
    one file (commitlogs.file_summary), the driver adds the counts up (commitlogs.log_plan)."""
    files = [(n.dir, start) for n in nodes if n.commit_log for start in store_files(n.dir)]
    if not files:
        return {}
    counted = spark.sparkContext.parallelize(files, len(files)).map(lambda f: file_summary(*f)).collect()
    by_root: dict[str, list] = {}
    for (root, start), summary in zip(files, counted):
        by_root.setdefault(root, []).append((start, summary))
    return {root: log_plan(summaries) for root, summaries in by_root.items()}


def _messages(spark, paths, **options):
    nodes = _nodes(paths)
    for node in nodes:
        old = None if node.commit_log else old_log_dir(node.dir)
        if old is not None:  # (its old log's messages would be missing from the rows: refused, not half read)
            raise PipelineUsageError(f"{node.dir}: its DLedger log follows an old commit log ({old}), which the Spark "
                                     f"mq jobs do not read; 'dledgerctl mq topics' and 'mq messages' read both")
    plans = commit_log_plans(spark, nodes)
    # (the entry's own DLedger CRCs are checked too: a message whose entry fails them was changed on disk
    # after it was written, even where its BODYCRC, which leaves the properties out, still holds)
    df = read_entries(spark, nodes, rocketmq=True, checkCrc=True, firstIndexes=json.dumps(plans) if plans else None,
                      **options)
    return nodes, df.filter(F.col("topic").isNotNull()).withColumnRenamed("crc_ok", "entry_crc_ok")


def mq_topics(spark, paths):
    """One row per (node, topic, queue id), ordered so."""
    _nodes, df = _messages(spark, paths)
    return (df.groupBy("node", "topic", "queue_id")
            .agg(F.count(F.lit(1)).alias("messages"), F.sum(F.col("size") - HEADER_SIZE).alias("bytes"),
                 F.min("queue_offset").alias("first_queue_offset"), F.max("queue_offset").alias("last_queue_offset"),
                 F.min("store_timestamp").alias("first_store_time"), F.max("store_timestamp").alias("last_store_time"),
                 F.sum(F.when(F.col("entry_crc_ok") == F.lit(False), 1).otherwise(0)).alias("damaged"))
            .orderBy("node", "topic", "queue_id")
            .select(*MQ_TOPICS_COLUMNS))


def mq_find(spark, paths, *, key=None, msg_id: str | None = None, uniq_key: str | None = None):
    """Every entry, on every node, whose message has this key among its KEYS (``key``: one,
    or several: any of them), message id or UNIQ_KEY (all given must match), ordered by node
    and index. ``msg_id`` is RocketMQ's offset msgId or the producer's UNIQ_KEY, as
    ``mqadmin queryMsgById`` takes either: the rows then have ``matched`` (``msg_id`` or
    ``uniq_key``)."""
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
    check_output(to)
    nodes, df = _messages(spark, paths, body=True, maxBody=max_body)
    return write_by_node(spark, nodes, df, to, MQ_EXPORT_COLUMNS, "msg_body_size", committed_only=committed_only)
