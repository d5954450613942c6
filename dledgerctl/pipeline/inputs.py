"""Which node directories and data files a Spark job reads (driver side, no Spark here).

PATHS name node directories (``dledger-<id>``, holding ``data/`` or ``index/``), base
directories (every ``dledger-<id>`` directory inside), master-slave broker store roots
(``commitlog/`` and no DLedger log, as store/rocketmq/layout.py's ``resolve_broker`` tells
them: such a "node" is the store root, its log the commit log), or globs of any. Each node gets
a short ``name`` that is unique among the inputs: the directory's own name, prefixed by
as many parent names as it takes to tell two nodes apart (``a/dledger-n0`` and
``b/dledger-n0``). A node's ``group`` (the replicas ``spark diverge`` compares) is its
base directory. A node's files are listed and read through the store's reading module
(store/reading.py: ``open_lists``, ``LazyFileList``).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

from store.errors import NotAStoreError
from store.layout import NodeLayout, find_node_dirs, looks_like_node_dir
from store.rocketmq.commitlog import COMMIT_LOG_DIR
from store.rocketmq.layout import resolve_broker

GLOB_CHARS = "*?["


@dataclass(frozen=True)
class Node:
    name: str  # unique among the inputs of one job
    dir: str  # absolute path of the node directory (a master-slave store's: its store root)
    group: str  # absolute path of its base directory
    commit_log: bool = False  # a master-slave broker store: its messages are in dir/commitlog/

    @property
    def log_dir(self) -> str:
        """Where the node's log is: its data/ directory, or a master-slave store's commitlog/."""
        return os.path.join(self.dir, COMMIT_LOG_DIR) if self.commit_log else self.data_dir

    @property
    def data_dir(self) -> str:
        return NodeLayout(self.dir).data_dir

    @property
    def index_dir(self) -> str:
        return NodeLayout(self.dir).index_dir


def is_commit_log_store(path: str) -> bool:
    """A master-slave broker's store root (``commitlog/``, no DLedger log), as ``mq messages``
    tells one (its ``index/`` is the broker's key index, which makes no node directory of it)."""
    try:
        return resolve_broker(path).commit_log
    except NotAStoreError:
        return False


def _nodes_in(path: str) -> list[str]:
    """A directory's nodes: itself (a node directory or a master-slave store root), or the
    dledger-<id> directories inside."""
    if is_commit_log_store(path) or looks_like_node_dir(path):
        return [path]
    return find_node_dirs(path)


def _expand(path: str) -> list[str]:
    """Node directories named by one PATH argument."""
    if any(c in path for c in GLOB_CHARS):
        matches = sorted(glob.glob(path))
        if not matches:
            raise NotAStoreError(f"{path}: matches nothing")
        found = [d for m in matches if os.path.isdir(m) for d in _nodes_in(m)]
        if not found:
            raise NotAStoreError(f"{path}: matches no node directory")
        return found
    if not os.path.exists(path):
        raise NotAStoreError(f"{path}: no such directory")
    if not os.path.isdir(path):
        raise NotAStoreError(f"{path}: not a directory")
    nodes = _nodes_in(path)
    if not nodes:
        raise NotAStoreError(f"{path}: not a node directory (no data/ or index/), holds no dledger-<id> directory, "
                             "and is no master-slave store root (no commitlog/)")
    return nodes


def resolve_nodes(paths: list[str] | tuple[str, ...] | str) -> list[Node]:
    """Every node directory the paths name, once each, in a stable order (by path)."""
    if isinstance(paths, str):
        paths = [paths]
    if not paths:
        raise NotAStoreError("no input paths")
    dirs: dict[str, str] = {}
    for p in paths:
        for d in _expand(os.path.expanduser(str(p))):
            real = os.path.realpath(d)
            dirs.setdefault(real, os.path.abspath(d))
    ordered = sorted(dirs.values())
    names = unique_names(ordered)
    return [Node(n, d, os.path.dirname(d), is_commit_log_store(d)) for n, d in zip(names, ordered)]


def unique_names(dirs: list[str]) -> list[str]:
    """The shortest trailing path of each directory that no other directory shares."""
    parts = [os.path.normpath(d).strip(os.sep).split(os.sep) for d in dirs]
    depth = [1] * len(dirs)
    while True:
        names = ["/".join(p[-k:]) for p, k in zip(parts, depth)]
        seen: dict[str, list[int]] = {}
        for i, n in enumerate(names):
            seen.setdefault(n, []).append(i)
        clashes = [i for ids in seen.values() if len(ids) > 1 for i in ids if depth[i] < len(parts[i])]
        if not clashes:
            return names
        for i in clashes:
            depth[i] += 1
