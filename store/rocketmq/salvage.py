"""``mq salvage``: the RocketMQ messages in kept entries (store/kept.py: what a truncation cut)
that a group's log no longer holds, and each as a record a producer can send again.

A kept message counts as held when a log holds a message of the same topic with the same
UNIQ_KEY (the producer's message id; RocketMQ keeps it on its own copies in other topics: a
consumer's retry in %RETRY%<group>, a delayed message's re-put, a transaction's final
message, so a copy in another topic is another message); one without a UNIQ_KEY when a log
holds one with the same topic, queue, queue offset and body CRC. A body that inflates past
the limit (``max_body``) is listed with a note and has no record to send again. Reading: the kept files whole (they are bounded), the
logs through the message scan (scan.items), one entry at a time; memory grows with the kept
messages only. Entries that are not messages (no-op, config) are counted, not listed.
"""

from __future__ import annotations

import base64
import os
import stat
from dataclasses import dataclass, field
from typing import Iterator

from ..errors import NotAStoreError
from ..kept import KEPT_RE, iter_kept
from ..kinds import COMMIT_LOG_DIR
from ..regular import file_kind
from ..format import MAGIC_NORMAL
from .message import MAX_MESSAGE_SIZE, BodyTooLarge, Message, NotAMessage, body_of, decode
from .scan import items


@dataclass
class Kept:
    """One message found in a kept entry."""

    file: str
    index: int
    term: int
    message: Message
    body: bytes | None  # as the producer sent it (inflated when stored compressed); None: see note
    held_by: list = field(default_factory=list)
    note: str = ""

    def key(self) -> tuple:
        m = self.message
        return (("uniq", m.topic, m.uniq_key) if m.uniq_key
                else ("place", m.topic, m.queue_id, m.queue_offset, m.body_crc))

    def row(self) -> dict:
        m = self.message
        return {"file": os.path.basename(self.file), "index": self.index, "term": self.term, "topic": m.topic,
                "queue_id": m.queue_id, "queue_offset": m.queue_offset, "tags": m.tags, "keys": m.keys,
                "uniq_key": m.uniq_key, "body_size": None if self.body is None else len(self.body),
                "store_time": m.store_timestamp,
                "matched_by": "topic+uniq_key" if m.uniq_key else "topic+queue+offset+body_crc",
                "status": "held" if self.held_by else "missing", "held_by": ",".join(self.held_by),
                "note": self.note}

    def resend(self) -> dict:
        """What a producer needs to send it again (RocketMQ's Message: topic, tags, keys,
        properties, body; flag kept)."""
        m = self.message
        return {"topic": m.topic, "tags": m.tags, "keys": m.keys, "flag": m.flag, "properties": dict(m.properties),
                "body": base64.b64encode(self.body).decode("ascii")}


@dataclass
class Salvage:
    kept: list = field(default_factory=list)  # Kept, in file and index order
    entries: int = 0  # kept entries read
    not_messages: int = 0  # of them: no-op, config, or a body that is no message
    logs: list = field(default_factory=list)  # the node directories read
    skipped: list = field(default_factory=list)  # kept-file names that are no regular file, with what they are

    @property
    def missing(self) -> list:
        return [k for k in self.kept if not k.held_by]

    def wanted(self) -> dict:
        """The kept messages by what a log's message must match."""
        out: dict = {}
        for k in self.kept:
            out.setdefault(k.key(), []).append(k)
        return out


def kept_paths(path: str, skipped: list | None = None) -> list[str]:
    """A kept file, or every kept file of a directory (truncated-*.entries), oldest range
    first. In a directory, a name like a kept file's that is no regular file (a FIFO, a link
    to a device) is left out, and named in ``skipped`` with what it is; given alone, it is
    refused when read (store.kept.iter_kept)."""
    if os.path.isdir(path):
        names = sorted((n for n in os.listdir(path) if KEPT_RE.match(n)), key=lambda n: (int(n.split("-")[1]), n))
        if not names:
            raise NotAStoreError(f"{path}: holds no kept file (truncated-<first>-<last>-<time>.entries)")
        out = []
        for n in names:
            p = os.path.join(path, n)
            try:
                mode = os.stat(p).st_mode
            except OSError as exc:
                mode, why = None, exc.strerror or str(exc)
            else:
                why = None if stat.S_ISREG(mode) else file_kind(mode)
            if why is None:
                out.append(p)
            elif skipped is not None:
                skipped.append(f"{p} ({why})")
        return out
    if not os.path.lexists(path):
        raise NotAStoreError(f"{path}: no such file or directory")
    return [path]


def read_kept(paths: list[str], result: Salvage, max_body: int = MAX_MESSAGE_SIZE) -> None:
    for p in paths:
        for _off, h, body in iter_kept(p):
            result.entries += 1
            if h.magic != MAGIC_NORMAL:
                result.not_messages += 1
                continue
            try:
                for m in _messages(body):
                    try:
                        result.kept.append(Kept(p, h.index, h.term, m, body_of(body, m, limit=max_body)))
                    except BodyTooLarge as exc:  # (a message still: listed, with no body to send again)
                        result.kept.append(Kept(p, h.index, h.term, m, None, note=f"{exc}; --max-body raises it"))
            except NotAMessage:
                result.not_messages += 1


def _messages(body: bytes) -> Iterator[Message]:
    """The message of an entry's body; a batch of them back to back (a broker's batch append)."""
    try:
        yield decode(body, 0, len(body))
        return
    except NotAMessage:
        pass
    off, out = 0, []
    while off < len(body):
        m = decode(body, off)
        out.append(m)
        off += m.size
    yield from out


def salvage(kept: str, node_dirs: list[str], max_body: int = MAX_MESSAGE_SIZE) -> Salvage:
    """Read the kept entries at ``kept`` and look for each message in every log of
    ``node_dirs`` (node directories, or master-slave stores' commitlog/); a message any of
    them holds is held."""
    result = start(kept, max_body)
    for node in node_dirs:
        result.logs.append(node)
        match(result, log_name(node), (it.message for it in items(node) if it.message is not None))
    return result


def log_name(log_dir: str) -> str:
    """How ``held_by`` names a log: its node directory (dledger-n0), or for a master-slave
    store's commitlog/ the store root holding it."""
    path = os.path.normpath(os.path.abspath(log_dir))
    name = os.path.basename(path)
    return os.path.basename(os.path.dirname(path)) if name == COMMIT_LOG_DIR else name


def start(kept: str, max_body: int = MAX_MESSAGE_SIZE) -> Salvage:
    """The kept messages at ``kept``, none matched yet (:func:`match` marks those a log holds)."""
    result = Salvage()
    read_kept(kept_paths(kept, result.skipped), result, max_body)
    return result


def match(result: Salvage, name: str, messages) -> None:
    """Mark held, by ``name``, each kept message that one of ``messages`` (a log's, in any
    order) matches."""
    wanted = result.wanted()
    for m in messages:
        found = wanted.get(("uniq", m.topic, m.uniq_key)) if m.uniq_key else None
        if found is None:
            found = wanted.get(("place", m.topic, m.queue_id, m.queue_offset, m.body_crc))
        for k in found or ():
            if name not in k.held_by:
                k.held_by.append(name)


def entry_messages(magic: int, body: bytes) -> list[Message]:
    """The messages of one log entry read over the wire (none when it is not a message)."""
    if magic != MAGIC_NORMAL:
        return []
    try:
        return list(_messages(body))
    except NotAMessage:
        return []
