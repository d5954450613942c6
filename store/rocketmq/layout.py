"""Where a broker's files are, from a path an operator gives: a broker store root
(``storePathRootDir``: ``dledger-<selfId>/``, ``consumequeue/``, ``index/``, ``config/``,
``checkpoint``) or one of its node directories (the consume queues are then beside it)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..layout import resolve_node_dir
from .consumequeue import CONSUME_QUEUE_DIR


@dataclass(frozen=True)
class BrokerStore:
    node_dir: str  # DLedger's files: dledger-<selfId>
    root: str | None  # the store root holding consumequeue/, when there is one

    @property
    def has_consume_queues(self) -> bool:
        return self.root is not None


def resolve_broker(path: str, self_id: str | None = None) -> BrokerStore:
    """NotAStoreError (from store.layout) when ``path`` holds no node directory."""
    node = resolve_node_dir(path, self_id).node_dir
    parent = os.path.dirname(os.path.abspath(node))
    root = parent if os.path.isdir(os.path.join(parent, CONSUME_QUEUE_DIR)) else None
    return BrokerStore(node, root)
