"""A broker store written by this project's store and encoder, for tests only: the layout
a RocketMQ broker in DLedger mode leaves (``dledger-<id>/`` beside ``consumequeue/``), with
each message's PHYSICALOFFSET set to its entry's pos + 48 as RocketMQ's append hook sets
it, and the consume queues RocketMQ would build. tests/support/javarocketmq.py writes the real
thing; this one writes what that cannot (V2 magic, damage) and large stores quickly."""

from __future__ import annotations

import os
import struct

from tests.support.rmq_encode import cq_unit, encode_message
from store.filestore import FileStore
from store.format import HEADER_SIZE, MIN_BLANK_LEN
from store.rocketmq.message import (
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    decode,
    tags_code,
)


def _place(write_pos: int, size: int, file_size: int) -> int:
    """Where the store puts an entry of ``size`` bytes when its log ends at ``write_pos``."""
    rel = write_pos % file_size
    return write_pos + (file_size - rel if size + MIN_BLANK_LEN > file_size - rel else 0)


def write_broker_store(root: str, messages: list[dict], *, self_id: str = "n0", data_file_size: int = 64 << 20,
                       cq_units_per_file: int = 1000, batch: int = 256) -> list[dict]:
    """Append ``messages`` (encode_message's keyword arguments; queue offsets are given in
    order per topic and queue unless a message says its own) to ``root/dledger-<id>``, write
    their consume queues, and return what was written: index, pos, phy_offset, size,
    queue_offset of each."""
    node = os.path.join(root, f"dledger-{self_id}")
    os.makedirs(os.path.join(root, "index"), exist_ok=True)  # (a broker's hash index of keys lives there)
    store = FileStore.open(node, data_file_size=data_file_size, index_file_size=32 * 1024 * 1024)
    next_qoff: dict[tuple[str, int], int] = {}
    units: dict[tuple[str, int], list[bytes]] = {}
    out = []
    try:
        pos = store.write_pos
        pending = []
        for spec in messages:
            spec = dict(spec)
            key = (spec.get("topic", "TopicTest"), spec.get("queue_id", 0))
            flag = spec.get("sys_flag", 0) & TRANSACTION_ROLLBACK_TYPE
            dispatched = flag not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
            if "queue_offset" not in spec:
                spec["queue_offset"] = next_qoff.get(key, 0) if dispatched else 0
            if dispatched:
                next_qoff[key] = spec["queue_offset"] + 1
            size = HEADER_SIZE + len(encode_message(**spec))
            at = _place(pos, size, data_file_size)
            spec.setdefault("phy_offset", at + HEADER_SIZE)
            body = encode_message(**spec)
            pending.append(body)
            m = decode(body)
            if dispatched:
                units.setdefault(key, []).append(cq_unit(at + HEADER_SIZE, m.size, tags_code(m.tags)))
            out.append({"pos": at, "phy_offset": at + HEADER_SIZE, "size": m.size, "queue_offset": m.queue_offset})
            pos = at + size
            if len(pending) >= batch:
                _append(store, pending, out)
                pending = []
        if pending:
            _append(store, pending, out)
        store.set_committed(store.end_index)
    finally:
        store.close()
    for (topic, qid), us in units.items():
        write_queue(root, topic, qid, us, cq_units_per_file)
    return out


def _append(store, bodies: list[bytes], out: list[dict]) -> None:
    done = store.append_leader(bodies, 1)
    rows = out[len(out) - len(bodies):]
    for a, row in zip(done, rows):
        assert a.pos == row["pos"], (a.pos, row["pos"])
        row["index"] = a.index


def write_queue(root: str, topic: str, queue_id: int, units: list[bytes], per_file: int = 1000, first: int = 0,
                blanks: int = 0) -> str:
    """A consume queue's files: ``blanks`` fillPreBlank units, then ``units``, from queue offset ``first``."""
    d = os.path.join(root, "consumequeue", topic, str(queue_id))
    os.makedirs(d, exist_ok=True)
    allu = [cq_unit(0, (1 << 31) - 1, 0)] * blanks + list(units)
    start = first - blanks
    for k in range(0, max(len(allu), 1), per_file):
        chunk = b"".join(allu[k:k + per_file])
        name = f"{(start + k) * 20:020d}"
        with open(os.path.join(d, name), "wb") as fh:
            fh.write(chunk + b"\0" * (per_file * 20 - len(chunk)))
    return d


COMMITLOG_BLANK_MAGIC = -875286124  # the filler after a commitlog file's last message


def commitlog_walk(broker) -> list[tuple[int, bytes, int, int]]:
    """Each message of a broker's commitlog/ (a Path) in order: (file start offset, the
    file's bytes, position in the file, size)."""
    out = []
    for n in sorted(os.listdir(broker / "commitlog")):
        with open(broker / "commitlog" / n, "rb") as fh:
            b = fh.read()
        p = 0
        while p + 8 <= len(b):
            size, magic = struct.unpack_from(">ii", b, p)
            if magic == COMMITLOG_BLANK_MAGIC or size == 0:
                break
            out.append((int(n), b, p, size))
            p += size
    return out
