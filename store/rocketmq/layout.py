"""Where a broker's files are, from a path an operator gives: a broker store root
(``storePathRootDir``: ``dledger-<selfId>/``, ``consumequeue/``, ``index/``, ``config/``,
``checkpoint``) or one of its node directories (the consume queues are then beside it); or
a master-slave broker's store root (``commitlog/`` instead of ``dledger-<selfId>/``)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import NotAStoreError
from ..kinds import CONTROLLER_MODE, EVENTS, MASTER_SLAVE, detect, log_content
from ..layout import resolve_node_dir
from .commitlog import COMMIT_LOG_DIR
from .consumequeue import CONSUME_QUEUE_DIR

# RocketMQ 5 (StorePathConfigHelper.getStorePathBatchConsumeQueue): the queues of topics whose
# queue.type is BatchCQ, 46-byte units (commit-log offset, size, tag code, store time, base
# queue offset, batch size, compacted offset, reserved) counting a batch's messages
BATCH_CONSUME_QUEUE_DIR = "batchconsumequeue"


@dataclass(frozen=True)
class BrokerStore:
    node_dir: str  # DLedger's files: dledger-<selfId> (a master-slave store's: its commitlog/)
    root: str | None  # the store root holding consumequeue/, when there is one
    commit_log: bool = False  # a master-slave store: messages in commitlog/ (commitlog.batches)

    @property
    def has_consume_queues(self) -> bool:
        return self.root is not None


def resolve_broker(path: str, self_id: str | None = None) -> BrokerStore:
    """store.errors.NotAStoreError (from store.layout) when ``path`` holds no node directory (nor, without
    ``self_id``, a master-slave commit log), or when its log is a RocketMQ 5 controller's
    (store/kinds.py tells the kinds of directory apart)."""
    if self_id is None and detect(path).kind in (MASTER_SLAVE, CONTROLLER_MODE):
        root = os.path.abspath(path)
        return BrokerStore(os.path.join(root, COMMIT_LOG_DIR), root if os.path.isdir(
            os.path.join(root, CONSUME_QUEUE_DIR)) else None, commit_log=True)
    node = resolve_node_dir(path, self_id).node_dir
    if log_content(node) == EVENTS:
        raise NotAStoreError(f"{node}: a RocketMQ 5 controller's DLedger log (its entries are controller events), "
                             "not a broker's: the controller commands read it")
    parent = os.path.dirname(os.path.abspath(node))
    root = parent if os.path.isdir(os.path.join(parent, CONSUME_QUEUE_DIR)) else None
    return BrokerStore(node, root)


def batch_queue_files(root: str | None) -> list[str]:
    """The files under ``root``'s ``batchconsumequeue/`` (RocketMQ 5's BatchCQ topics), sorted;
    [] when it has none. Their messages have no unit in ``consumequeue/``."""
    if root is None:
        return []
    base = os.path.join(root, BATCH_CONSUME_QUEUE_DIR)
    return sorted(os.path.join(d, n) for d, _, names in os.walk(base) for n in names)


def rocksdb_queues(root: str | None) -> str | None:
    """``root/consumequeue/CURRENT`` when the consume queues are a RocksDB database (RocketMQ
    5's ``storeType=defaultRocksDB``: ``RocksDBConsumeQueueStore`` keeps it where the files
    would be), else None."""
    if root is None:
        return None
    current = os.path.join(root, CONSUME_QUEUE_DIR, "CURRENT")
    return current if os.path.isfile(current) else None


def batch_queue_keys(root: str | None) -> frozenset:
    """(topic, queue id) of each queue under ``root``'s ``batchconsumequeue/`` (RocketMQ 5's
    BatchCQ topics; directories named as in ``consumequeue/``)."""
    base = os.path.join(root, BATCH_CONSUME_QUEUE_DIR) if root is not None else None
    if base is None or not os.path.isdir(base):
        return frozenset()
    return frozenset((t, int(q)) for t in os.listdir(base) if os.path.isdir(os.path.join(base, t))
                     for q in os.listdir(os.path.join(base, t)) if q.isdigit())
