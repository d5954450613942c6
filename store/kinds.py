"""What a directory an operator names is: the one detection every command that takes a
directory uses, so a command given the wrong kind says what it got and what it takes,
instead of reading it as something else (a master-slave store root's ``index/``, the
broker's key index, read as a DLedger node's index said "nothing is cut").

The kinds, told apart by what the directory holds (the first that fits):

- ``master-slave``: a broker store root with ``commitlog/`` and no DLedger log
  (``data/`` or ``dledger-<id>/``), as RocketMQ's master-slave brokers and ``mq migrate``
  leave it; ``controller-mode`` when ``epochFileCheckpoint`` (or its ``.bak``) is beside it
  (RocketMQ 5's AutoSwitchHAService);
- ``node``: a DLedger node directory (``data/``; or ``index/`` with no broker's files
  beside it: ``consumequeue/``, ``commitlog/``, ``dledger-<id>/``);
- ``dledger-broker``: a broker store root in DLedger mode (``dledger-<id>/`` beside
  ``consumequeue/``, ``config/`` or the broker's ``index/``);
- ``base``: a directory holding ``dledger-<id>/`` node directories and nothing of a broker
  (a cluster's store base, a controller's ``controllerStorePath``);
- ``other``: none of these (an empty directory, a broker root whose log is gone).

What a DLedger log holds (:func:`log_content`) is read only when a command asks: the first
entries' bodies are RocketMQ messages (a broker's log), controller events (a RocketMQ 5
DLedger controller's log), or neither. Pure file reads, a few KiB; no store is opened.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass

from .errors import NotAStoreError
from .format import HEADER_SIZE, MAGIC_NORMAL, parse_file_name
from .layout import DATA_DIR, INDEX_DIR, NODE_DIR_PREFIX, find_node_dirs, looks_like_node_dir, resolve_node_dir

# The broker's own names (RocketMQ's StorePathConfigHelper / MessageStoreConfig); the modules
# that read these files (store/rocketmq/commitlog.py, consumequeue.py, controller_check.py)
# keep the same names: repeated here so telling kinds apart loads none of them.
COMMIT_LOG_DIR = "commitlog"  # MessageStoreConfig.storePathCommitLog
CONSUME_QUEUE_DIR = "consumequeue"  # StorePathConfigHelper.getStorePathConsumeQueue
CONFIG_DIR = "config"  # storePathRootDir/config: topics.json, consumerOffset.json, ...
EPOCH_FILE = "epochFileCheckpoint"  # MessageStoreConfig.getStorePathEpochFile

NODE = "node"
BASE = "base"
DLEDGER_BROKER = "dledger-broker"
MASTER_SLAVE = "master-slave"
CONTROLLER_MODE = "controller-mode"
OTHER = "other"

DLEDGER_KINDS = frozenset({NODE, BASE, DLEDGER_BROKER})  # a DLedger log is in it (or in its dledger-<id>/)
BROKER_KINDS = frozenset({NODE, DLEDGER_BROKER, MASTER_SLAVE, CONTROLLER_MODE})  # what the mq commands read

_WHAT = {
    NODE: "a DLedger node directory",
    BASE: "a base directory of DLedger node directories",
    DLEDGER_BROKER: "a DLedger-mode broker's store root (dledger-<id>/ beside its consume queues)",
    MASTER_SLAVE: "a master-slave broker's store root (commitlog/, no DLedger log)",
    CONTROLLER_MODE: "a controller-mode broker's store root (commitlog/ and epochFileCheckpoint, no DLedger log)",
    OTHER: "no store (no data/, index/, dledger-<id>/ or commitlog/)",
}

# What a DLedger log's first entries hold (log_content)
MESSAGES = "messages"
EVENTS = "events"
_SAMPLE = 8  # entries with a body looked at
_MESSAGE_MAGICS = frozenset({-626843481, -626843477})  # MessageDecoder.MESSAGE_MAGIC_CODE, _V2
_EVENT_TYPES = range(1, 7)  # the RocketMQ 5 controller's EventType ids (store/rocketmq/controller.py)


@dataclass(frozen=True)
class DirKind:
    """A directory and what it is. ``nodes``: its DLedger node directories (a node
    directory: itself); ``commit_log``: a master-slave root's ``commitlog/``."""

    path: str
    kind: str
    nodes: tuple[str, ...] = ()
    commit_log: str | None = None

    def describe(self) -> str:
        return _WHAT[self.kind]


def _isdir(*parts: str) -> bool:
    return os.path.isdir(os.path.join(*parts))


def _broker_files(path: str) -> bool:
    return _isdir(path, CONSUME_QUEUE_DIR) or _isdir(path, CONFIG_DIR) or _isdir(path, INDEX_DIR)


def detect(path: str) -> DirKind:
    """What ``path`` is. NotAStoreError when nothing is there or it is no directory."""
    if not os.path.isdir(path):
        raise NotAStoreError(f"{path}: no such directory" if not os.path.lexists(path) else f"{path}: not a directory")
    nodes = tuple(find_node_dirs(path))
    if _isdir(path, COMMIT_LOG_DIR) and not _isdir(path, DATA_DIR) and not nodes:
        epoch = any(os.path.lexists(os.path.join(path, EPOCH_FILE + s)) for s in ("", ".bak"))
        return DirKind(path, CONTROLLER_MODE if epoch else MASTER_SLAVE, (), os.path.join(path, COMMIT_LOG_DIR))
    if looks_like_node_dir(path):
        return DirKind(path, NODE, (path,))
    if nodes:
        return DirKind(path, DLEDGER_BROKER if _broker_files(path) else BASE, nodes)
    return DirKind(path, OTHER)


def require(path: str, accepted: frozenset, takes: str) -> DirKind:
    """``detect(path)`` when its kind is one of ``accepted``; else NotAStoreError in one
    line: what ``path`` is and what the command (``takes``: "store elect takes ...") reads."""
    k = detect(path)
    if k.kind not in accepted:
        raise NotAStoreError(f"{path}: {k.describe()}; {takes}")
    return k


NOT_DLEDGER = frozenset({MASTER_SLAVE, CONTROLLER_MODE})
DLEDGER_TAKES = ("it reads DLedger logs: a node directory (dledger-<id>) or a directory holding them (the mq commands "
                 "read master-slave stores)")


def refuse(path: str, kinds: frozenset, takes: str) -> None:
    """NotAStoreError in one line when ``path`` is a directory of one of ``kinds``: what it
    is, and ``takes`` (what the command reads). Anything else is left to the command's own
    reader (a missing path, a file, a directory that is no store: it says why)."""
    if os.path.isdir(path):
        k = detect(path)
        if k.kind in kinds:
            raise NotAStoreError(f"{path}: {k.describe()}; {takes}")


def dledger_node_dir(path: str, self_id: str | None = None, takes: str = DLEDGER_TAKES) -> str:
    """The DLedger node directory ``path`` names (store.layout.resolve_node_dir: itself, the
    one under a base directory or broker root, or ``dledger-<self_id>``); a master-slave or
    controller-mode store root is refused (:func:`refuse`)."""
    refuse(path, NOT_DLEDGER, takes)
    return resolve_node_dir(path, self_id).node_dir


CONTROLLER_TAKES = ("the controller commands read a RocketMQ 5 DLedger controller's log: its node directory "
                    "(dledger-<id> under controllerStorePath) or a directory holding them")


def refuse_for_controller(path: str) -> None:
    """NotAStoreError when ``path`` is a broker's store root of any kind: no controller's log.
    What a DLedger log holds is the controller's reader's to judge
    (store/rocketmq/controller.py's looks_like_controller_log, which reads more entries)."""
    refuse(path, NOT_DLEDGER | {DLEDGER_BROKER}, CONTROLLER_TAKES)


def log_content(node_dir: str) -> str | None:
    """What the first entries of a DLedger node directory's log hold: MESSAGES (RocketMQ
    messages: a broker's log), EVENTS (RocketMQ 5 controller events), "other", or None
    (no entry with a body, or no log to read). Reads a few entries of the first data file."""
    first = _first_data_file(node_dir)
    if first is None:
        return None
    seen: list[str] = []
    try:
        fd = os.open(first, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # (a FIFO there is never waited on)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            while len(seen) < _SAMPLE:
                head = fh.read(HEADER_SIZE)
                if len(head) < HEADER_SIZE:
                    break
                magic, size = struct.unpack_from(">ii", head)
                if magic == 0 or size < HEADER_SIZE or size > 64 << 20:  # (the end, padding or damage)
                    break
                body = fh.read(min(size - HEADER_SIZE, 16))
                fh.seek(size - HEADER_SIZE - len(body), os.SEEK_CUR)
                if magic == MAGIC_NORMAL and body:
                    seen.append(_body_kind(body))
    except OSError:
        return None
    if not seen:
        return None
    return seen[0] if all(s == seen[0] for s in seen) else "other"


def _body_kind(head: bytes) -> str:
    if len(head) >= 8 and struct.unpack_from(">i", head, 4)[0] in _MESSAGE_MAGICS:
        return MESSAGES
    if len(head) >= 3 and struct.unpack_from(">h", head)[0] in _EVENT_TYPES and head[2:3] == b"{":
        return EVENTS
    return "other"


def _first_data_file(node_dir: str) -> str | None:
    d = os.path.join(node_dir, DATA_DIR)
    try:
        names = [n for n in os.listdir(d) if parse_file_name(n) is not None]
    except OSError:
        return None
    return os.path.join(d, min(names, key=parse_file_name)) if names else None


__all__ = ["DirKind", "detect", "require", "refuse", "dledger_node_dir", "refuse_for_controller", "log_content",
           "NOT_DLEDGER", "DLEDGER_TAKES", "CONTROLLER_TAKES", "NODE", "BASE", "DLEDGER_BROKER", "MASTER_SLAVE",
           "CONTROLLER_MODE", "OTHER", "DLEDGER_KINDS", "BROKER_KINDS", "MESSAGES", "EVENTS", "NODE_DIR_PREFIX"]
