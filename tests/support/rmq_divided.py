"""A DLedger-mode broker store whose DLedger log follows an old master-slave commit log, written
by hand for tests (store/rocketmq/divided.py has RocketMQ's rules; tests/java/test_mq_divided_java.py
has RocketMQ write the real thing): ``commitlog/`` with the old messages, a blank record where
the switch to DLedger mode put one, then ``dledger-<id>/`` whose first data file starts at the
divided offset (the old log's last file's end) and whose index starts at 0, and the consume
queues of both, queue offsets running on across the switch."""

from __future__ import annotations

import os
import struct

from store.format import BLANK_HEADER, ENTRY_HEADER, HEADER_SIZE, INDEX_RECORD, MIN_BLANK_LEN
from store.metafiles import write_checkpoint
from store.rocketmq.commitlog import BLANK_MAGIC_CODE, CommitLogWriter
from store.rocketmq.message import decode, tags_code
from tests.support.rmq_encode import cq_unit, encode_message
from tests.support.rmq_store import write_queue

INDEX_FILE_SIZE = 32 * 1024


def write_divided_store(root: str, old: list[dict], new: list[dict], *, file_size: int = 64 << 10,
                        self_id: str = "n0", blank: bool = True, committed: int | None = None,
                        per_file: int = 1000, zero_file: bool = False) -> dict:
    """``old`` messages (encode_message's keywords) in ``root/commitlog`` (files of ``file_size``;
    ``blank``: the blank record the switch writes after the last one), then ``new`` ones as
    DLedger entries from the divided offset on; consume queues for all. Returns ``divided``,
    ``old`` and ``new`` (per message: phy_offset, size, queue_offset, topic, queue_id) and
    ``committed`` (the checkpoint's committed index: the last entry's unless given). ``zero_file``
    with no ``old`` message: the old log is one file of zeros (the DLedger log starts after it)."""
    qoff: dict[tuple[str, int], int] = {}
    units: dict[tuple[str, int], list[bytes]] = {}

    def prepare(spec: dict) -> dict:
        spec = dict(spec)
        key = (spec.get("topic", "TopicTest"), spec.get("queue_id", 0))
        spec.setdefault("queue_offset", qoff.get(key, 0))
        qoff[key] = spec["queue_offset"] + 1
        return spec

    def record(spec: dict, phy: int) -> dict:
        m = decode(encode_message(**spec))
        key = (m.topic, m.queue_id)
        units.setdefault(key, []).append(cq_unit(phy, m.size, tags_code(m.tags)))
        return {"phy_offset": phy, "size": m.size, "queue_offset": m.queue_offset, "topic": m.topic,
                "queue_id": m.queue_id}

    out_old = []
    log_dir = os.path.join(root, "commitlog")
    os.makedirs(log_dir, exist_ok=True)
    divided = 0
    if old:
        w = CommitLogWriter(log_dir, file_size)
        for spec in old:
            spec = prepare(spec)
            at = w.append(encode_message(**spec))
            out_old.append(record(spec, at))
        end, left = w.offset, w.left
        w.close()
        last = end - (file_size - left)
        divided = last + file_size
        if blank and left >= MIN_BLANK_LEN:
            with open(os.path.join(log_dir, f"{last:020d}"), "r+b") as fh:
                fh.seek(end - last)
                fh.write(struct.pack(">ii", left, BLANK_MAGIC_CODE))
    elif zero_file:
        with open(os.path.join(log_dir, f"{0:020d}"), "wb") as fh:
            fh.write(bytes(file_size))
        divided = file_size
    node = os.path.join(root, f"dledger-{self_id}")
    out_new, files, index = [], {}, bytearray()
    pos = divided
    for i, spec in enumerate(new):
        spec = prepare(spec)
        probe = encode_message(**spec)
        size = HEADER_SIZE + len(probe)
        rel = pos % file_size
        if size + MIN_BLANK_LEN > file_size - rel:
            buf = files.setdefault(pos - rel, bytearray(file_size))
            BLANK_HEADER.pack_into(buf, rel, -1, file_size - rel)
            pos += file_size - rel
            rel = 0
        body = encode_message(**{**spec, "phy_offset": pos + HEADER_SIZE})
        buf = files.setdefault(pos - rel, bytearray(file_size))
        ENTRY_HEADER.pack_into(buf, rel, 1, size, i, 0, pos, 0, 0, 0, len(body))
        buf[rel + HEADER_SIZE:rel + size] = body
        index += INDEX_RECORD.pack(1, pos, size, i, 0)
        out_new.append(record(spec, pos + HEADER_SIZE))
        pos += size
    if not files:
        files[divided] = bytearray(file_size)  # (the switch creates the first data file)
    os.makedirs(os.path.join(node, "data"))
    os.makedirs(os.path.join(node, "index"))
    for start, buf in files.items():
        with open(os.path.join(node, "data", f"{start:020d}"), "wb") as fh:
            fh.write(buf)
    with open(os.path.join(node, "index", f"{0:020d}"), "wb") as fh:
        fh.write(bytes(index).ljust(INDEX_FILE_SIZE, b"\0"))
    committed = len(new) - 1 if committed is None else committed
    write_checkpoint(node, len(new) - 1, committed)
    for (topic, qid), us in units.items():
        write_queue(root, topic, qid, us, per_file)
    os.makedirs(os.path.join(root, "index"), exist_ok=True)
    return {"divided": divided, "old": out_old, "new": out_new, "committed": committed}
