"""A broker's configs against its consume queues: what ``mq migrate`` carries over
(``config/topics.json``, ``subscriptionGroup.json``, ``consumerOffset.json``) checked against the
queues the store holds, for ``mq check`` and ``mq consumers``. Pure: files in, rows out.

Findings, in ``mq check``'s row shape (file: the config file, relative to the store root):

- ``offset-past-end``: a committed offset past its queue's max (or > 0 where the store has no
  such queue: the broker answers min = max = 0 for it) (consumers.py's ``past the end``). An
  offset below its queue's min is not a finding: the broker's retention leaves one whenever a
  group lags past the deleted files (the broker resets it to min); ``mq consumers`` shows it
  (``before min``), and ``mq migrate`` keeps every message of the source from its first, so a
  moved store has one only where its source had it;
- ``topic-queues``: a consume queue whose id is not below its topic's ``readQueueNums`` or
  ``writeQueueNums`` in topics.json: the broker refuses to serve a pull there
  (PullMessageProcessor: queueId >= readQueueNums) or to put there;
- ``topic-missing``: a topic with consume queues that topics.json does not name (the broker
  refuses pulls of a topic it has no config for: TOPIC_NOT_EXIST); system, retry and DLQ
  topics are left out: the broker makes their configs itself (TopicConfigManager,
  TopicValidator.isSystemTopic, retry topics on a consumer's send-back);
- ``group-topic-missing``: a subscription group (subscriptionGroup.json's
  ``subscriptionDataSet``) or a consumer offset (``topic@group``) naming a topic that neither
  topics.json nor the consume queues hold.

A config file that is missing, or a topics.json with an empty table (no broker writes one: its
own system topics are always there), is not checked and not a finding (a broker writes each only once it holds
something); the ``.bak`` is read where the file is missing, empty or does not decode, as
ConfigManager.load does. One that neither gives raises :class:`ConfigError`.
"""

from __future__ import annotations

import os

from .consumequeue import find_queues
from .consumers import PAST_END, TOPIC_GROUP_SEPARATOR, consumer_rows
from .jsonread import JsonError, read_json_file
from .layout import BrokerStore
from ..errors import StoreUsageError

TOPICS_FILE = os.path.join("config", "topics.json")  # BrokerPathConfigHelper.getTopicConfigPath
GROUPS_FILE = os.path.join("config", "subscriptionGroup.json")  # getSubscriptionGroupPath
OFFSETS_FILE = os.path.join("config", "consumerOffset.json")
# TopicValidator.SYSTEM_TOPIC_SET, SYSTEM_TOPIC_PREFIX; MixAll.RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX
SYSTEM_TOPICS = frozenset({"TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
                           "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                           "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC"})
BROKER_MADE_PREFIXES = ("rmq_sys_", "%RETRY%", "%DLQ%")


class ConfigError(StoreUsageError):
    """A config file (and its .bak) cannot be read."""


def broker_makes(topic: str) -> bool:
    """Whether a broker makes this topic's config by itself (so topics.json may lack it)."""
    return topic in SYSTEM_TOPICS or topic.startswith(BROKER_MADE_PREFIXES)


def read_config(root: str, rel: str, table: str) -> tuple[dict | None, str | None]:
    """``table`` (e.g. ``topicConfigTable``) of the config file ``rel`` under ``root``, or of its
    .bak as ConfigManager.load falls back; (None, None) when neither exists or both are empty."""
    path = os.path.join(root, rel)
    errors = []
    for p in (path, path + ".bak"):
        try:
            doc = read_json_file(p)
        except JsonError as exc:
            errors.append(str(exc))
            continue
        if doc is None:
            continue
        got = doc.get(table) if isinstance(doc, dict) else None
        if not isinstance(got, dict):
            errors.append(f"{p}: no {table} object in it")
            continue
        return got, p
    if errors:
        raise ConfigError("; and ".join(errors))
    return None, None


def topic_table(root: str) -> tuple[dict[str, tuple[int, int]] | None, str | None]:
    """topics.json: topic -> (readQueueNums, writeQueueNums) (TopicConfig's defaults, 16, where a
    config leaves one out); None when there is no topics.json or its table is empty."""
    table, used = read_config(root, TOPICS_FILE, "topicConfigTable")
    if not table:  # (an empty table is no broker's: a broker's holds its own system topics, TBW102 and others)
        return None, None
    out = {}
    for name, cfg in table.items():
        cfg = cfg if isinstance(cfg, dict) else {}
        read, write = cfg.get("readQueueNums", 16), cfg.get("writeQueueNums", 16)  # TopicConfig.defaultReadQueueNums
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (read, write)):
            raise ConfigError(f"{used}: topic {name!r}: readQueueNums/writeQueueNums are not numbers")
        out[cfg.get("topicName", name) if isinstance(cfg.get("topicName"), str) else name] = (read, write)
    return out, used


def group_topics(root: str) -> tuple[dict[str, list[str]], str | None]:
    """subscriptionGroup.json: group -> the topics its ``subscriptionDataSet`` names."""
    table, used = read_config(root, GROUPS_FILE, "subscriptionGroupTable")
    out: dict[str, list[str]] = {}
    for name, cfg in (table or {}).items():
        subs = cfg.get("subscriptionDataSet") if isinstance(cfg, dict) else None
        out[name] = sorted({s["topic"] for s in subs or () if isinstance(s, dict) and isinstance(s.get("topic"), str)})
    return out, used


def _row(kind: str, file: str, detail: str, topic=None, queue_id=None) -> dict:
    return {"finding": kind, "file": file, "offset": None, "index": None, "topic": topic, "queue_id": queue_id,
            "queue_offset": None, "detail": detail}


def topic_findings(root: str) -> list[dict]:
    """``topic-queues``, ``topic-missing`` and ``group-topic-missing`` (see the module doc)."""
    queues = sorted({(q.topic, q.queue_id) for q in find_queues(root)})
    topics, _used = topic_table(root)
    groups, groups_used = group_topics(root)
    out = []
    if topics is not None:
        for topic, qid in queues:
            if topic not in topics:
                if not broker_makes(topic):
                    out.append(_row("topic-missing", TOPICS_FILE, f"consume queue {topic}/{qid} holds units, and "
                                    "topics.json has no config for its topic: the broker answers TOPIC_NOT_EXIST",
                                    topic, qid))
                continue
            read, write = topics[topic]
            if qid >= read or qid >= write:
                out.append(_row("topic-queues", TOPICS_FILE, f"consume queue {topic}/{qid} is beyond the topic's "
                                f"readQueueNums {read} / writeQueueNums {write}: the broker does not serve it",
                                topic, qid))
    known = set(topics or ()) | {t for t, _q in queues}
    for group, names in sorted(groups.items()):
        for topic in names:
            if topic not in known and not broker_makes(topic):
                out.append(_row("group-topic-missing", GROUPS_FILE, f"subscription group {group} subscribes to "
                                f"{topic}, which neither topics.json nor the consume queues hold", topic))
    return out


def offset_findings(broker: BrokerStore) -> list[dict]:
    """``offset-past-end`` and ``group-topic-missing`` of the committed
    offsets (consumers.py's rows); none when the store has no offsets file."""
    root = broker.root
    if not any(os.path.isfile(os.path.join(root, OFFSETS_FILE + s)) for s in ("", ".bak")):
        return []
    rows, used, _notes = consumer_rows(broker)
    rel = os.path.relpath(used, root)
    topics, _u = topic_table(root)
    out, unknown = [], {}
    for r in rows:
        where = f"group {r.group} at {r.committed} on {r.topic}/{r.queue_id}"
        if r.status.startswith(PAST_END):
            out.append(_row("offset-past-end", rel, f"{where}: past its queue's max {r.max}", r.topic, r.queue_id))
        if topics is not None and r.topic not in topics and not broker_makes(r.topic):
            unknown.setdefault((r.group, r.topic), []).append("no queue" in r.status)
    for (group, topic), no_queue in sorted(unknown.items()):
        if all(no_queue):  # (a topic with queues but no config is topic_findings' topic-missing)
            out.append(_row("group-topic-missing", rel, f"{topic}{TOPIC_GROUP_SEPARATOR}{group}: offsets of a "
                            "topic neither topics.json nor the consume queues hold", topic))
    return out


def config_findings(broker: BrokerStore) -> list[dict]:
    """Every finding of this module on a broker's store root; none without one."""
    if broker.root is None:
        return []
    return offset_findings(broker) + topic_findings(broker.root)
