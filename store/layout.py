"""Where a node's files live: ``<store-base-dir>/dledger-<self-id>/{data,index,checkpoint,currterm}``."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import NotAStoreError

NODE_DIR_PREFIX = "dledger-"  # DLedgerConfig.getDefaultPath(): storeBaseDir/dledger-<selfId>
DATA_DIR = "data"
INDEX_DIR = "index"
LOCK_FILE = "lock"  # ours, not DLedger's: held (flock) by whoever has the store open for writing


@dataclass(frozen=True)
class NodeLayout:
    node_dir: str

    @property
    def data_dir(self) -> str:
        return os.path.join(self.node_dir, DATA_DIR)

    @property
    def index_dir(self) -> str:
        return os.path.join(self.node_dir, INDEX_DIR)

    @property
    def lock_path(self) -> str:
        return os.path.join(self.node_dir, LOCK_FILE)

    @property
    def node_id(self) -> str:
        name = os.path.basename(os.path.normpath(self.node_dir))
        return name[len(NODE_DIR_PREFIX):] if name.startswith(NODE_DIR_PREFIX) else name


def node_dir_for(base_dir: str, self_id: str) -> str:
    return os.path.join(base_dir, NODE_DIR_PREFIX + self_id)


# A broker's store root keeps these beside its own index/ (a hash index of keys), which
# makes no node directory of it (store/kinds.py tells the kinds of directory apart)
_BROKER_ROOT_DIRS = ("commitlog", "consumequeue")


def looks_like_node_dir(path: str) -> bool:
    """data/, or index/ alone; a RocketMQ broker's store root has an index/ of its own (a
    hash index of keys) beside its dledger-<id>/ directories, or its commitlog/ (master-
    slave) or consumequeue/, and is no node directory."""
    if os.path.isdir(os.path.join(path, DATA_DIR)):
        return True
    return os.path.isdir(os.path.join(path, INDEX_DIR)) and not _holds_node_dirs(path) and \
        not any(os.path.isdir(os.path.join(path, d)) for d in _BROKER_ROOT_DIRS)


def _holds_node_dirs(path: str) -> bool:
    try:
        return any(n.startswith(NODE_DIR_PREFIX) and os.path.isdir(os.path.join(path, n, DATA_DIR))
                   for n in os.listdir(path))
    except OSError:
        return False


def resolve_node_dir(path: str, self_id: str | None = None) -> NodeLayout:
    """Accept a node directory, a base directory holding exactly one, or base + self id."""
    if not os.path.exists(path):
        raise NotAStoreError(f"{path}: no such directory")
    if not os.path.isdir(path):
        raise NotAStoreError(f"{path}: not a directory")
    if self_id is not None:
        candidate = node_dir_for(path, self_id)
        if not os.path.isdir(candidate):
            raise NotAStoreError(f"{path}: no node directory {NODE_DIR_PREFIX}{self_id}")
        return NodeLayout(candidate)
    if looks_like_node_dir(path):
        return NodeLayout(path)
    nodes = find_node_dirs(path)
    if len(nodes) == 1:
        return NodeLayout(nodes[0])
    if not nodes:
        raise NotAStoreError(f"{path}: not a node directory (no data/ or index/) and holds no {NODE_DIR_PREFIX}<id> directory")
    names = ", ".join(os.path.basename(n) for n in nodes)
    raise NotAStoreError(f"{path}: holds several node directories ({names}); pass one or use --self-id")


def find_node_dirs(base_dir: str) -> list[str]:
    try:
        names = sorted(os.listdir(base_dir))
    except OSError:
        return []
    return [
        os.path.join(base_dir, n)
        for n in names
        if n.startswith(NODE_DIR_PREFIX) and looks_like_node_dir(os.path.join(base_dir, n))
    ]
