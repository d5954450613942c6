"""``mq consumers`` finds a queue's minimum offset (its first unit at or past the log's first
message) reading the units a chunk at a time, not a whole file of them (issue 51): with
chunks of 1 to 5 units it reads no more than that at once and gives the same bounds."""

from __future__ import annotations

import os

import pytest

from tests.support.rmq_encode import cq_unit
from tests.support.rmq_store import write_broker_store, write_queue
from store.rocketmq import consumers
from store.rocketmq.consumers import log_min_offset, queue_bounds
from store.rocketmq.layout import resolve_broker


@pytest.mark.parametrize("chunk", [1, 2, 3, 5])
def test_the_minimum_is_found_a_chunk_at_a_time(tmp_path, monkeypatch, chunk):
    root = tmp_path / "src"
    w = write_broker_store(str(root), [{"topic": "T", "body": b"m%d" % i} for i in range(20)]
                           + [{"topic": "U", "body": b"u%d" % i} for i in range(4)], cq_units_per_file=16)
    qdir = root / "consumequeue" / "T" / "0"
    for n in os.listdir(qdir):
        os.unlink(qdir / n)
    # 23 units below the log's first message (its head files deleted), then the messages'
    below = [cq_unit(i, 1, 0) for i in range(23)]
    write_queue(str(root), "T", 0, below + [cq_unit(x["phy_offset"], x["size"], 0) for x in w[:20]], per_file=16,
                first=3, blanks=3)
    log_min = log_min_offset(resolve_broker(str(root)))
    want = queue_bounds(str(root), log_min)
    assert want[0][("T", 0)] == (3 + 23, 3 + 43) and want[0][("U", 0)] == (0, 4)
    reads = []
    real = consumers.read_piece

    def spy(p, skip=0, count=None):
        reads.append(count)
        return real(p, skip, count)

    monkeypatch.setattr(consumers, "CHUNK", chunk)
    monkeypatch.setattr(consumers, "read_piece", spy)
    assert queue_bounds(str(root), log_min) == want
    assert reads and None not in reads and max(reads) <= chunk
