"""``mq migrate`` rewrites each consume queue a chunk of units at a time (store/rocketmq/requeue.py,
issue 51): with chunks of 2 or 3 units it reads no more than that at once and writes the same
DEST, byte for byte, as with its default chunk (which holds these small queues whole); a unit
that points where no message starts is refused with the same text wherever the chunks fall."""

from __future__ import annotations

import os

import pytest

from tests.rocketmq.test_mq_commitment import unpoint
from tests.support.rmq_encode import cq_unit
from tests.support.rmq_store import write_broker_store, write_queue
from store.metafiles import read_checkpoint, write_checkpoint
from store.rocketmq import requeue
from store.rocketmq.layout import resolve_broker
from store.rocketmq.migrate import MigrateError, migrate

CL = 8 << 10


def tree(root) -> dict[str, bytes]:
    out = {}
    for d, _dirs, files in os.walk(root):
        for n in files:
            with open(os.path.join(d, n), "rb") as fh:
                out[os.path.relpath(os.path.join(d, n), root)] = fh.read()
    return out


def a_store(root) -> None:
    """Two topics of two queues over several 16-unit queue files, a queue that begins with
    fillPreBlank units, one of units below the log only (blank), and the last 7 messages
    past the committed index (their units left out)."""
    msgs = [{"topic": f"T{i % 2}", "queue_id": (i // 2) % 2, "body": b"m%d" % i} for i in range(150)]
    written = write_broker_store(str(root), msgs + [{"topic": "LATE", "body": b"l%d" % i} for i in range(9)],
                                 data_file_size=16 << 10, cq_units_per_file=16)
    late = root / "consumequeue" / "LATE" / "0"
    for n in os.listdir(late):
        os.unlink(late / n)
    write_queue(str(root), "LATE", 0, [cq_unit(w["phy_offset"], w["size"], 0) for w in written[150:]], per_file=16,
                first=21, blanks=21)
    write_queue(str(root), "OLD", 0, [cq_unit(i * 10, 10, 0) for i in range(5)], per_file=16)
    node = root / "dledger-n0"
    cp = read_checkpoint(str(node))
    write_checkpoint(str(node), cp.end_index, written[-7]["index"] - 1)
    unpoint(root, written[-7]["phy_offset"])  # (only committed entries are dispatched)


@pytest.mark.parametrize("chunk", [2, 3])
def test_small_chunks_write_the_same_store_and_read_no_more_at_once(tmp_path, monkeypatch, chunk):
    src = tmp_path / "src"
    a_store(src)
    whole = migrate(resolve_broker(str(src)), str(tmp_path / "whole"), commitlog_file_size=CL)
    assert whole.left_out == 7 and whole.units > 100
    reads = []
    real = requeue.read_piece

    def spy(p, skip=0, count=None):
        reads.append(count)
        return real(p, skip, count)

    monkeypatch.setattr(requeue, "CHUNK", chunk)
    monkeypatch.setattr(requeue, "read_piece", spy)
    small = migrate(resolve_broker(str(src)), str(tmp_path / "small"), commitlog_file_size=CL)
    assert reads and None not in reads and max(reads) <= chunk
    assert small.row() | {"dest": ""} == whole.row() | {"dest": ""}
    assert small.dispatched_until == whole.dispatched_until and small.undispatched == whole.undispatched
    assert tree(tmp_path / "small") == tree(tmp_path / "whole")


@pytest.mark.parametrize("bad", [0, 1, 5, 6, 30, 39])
def test_a_unit_that_points_nowhere_is_refused_alike_with_any_chunk(tmp_path, monkeypatch, bad):
    src = tmp_path / "src"
    written = write_broker_store(str(src), [{"topic": "T", "body": b"m%d" % i} for i in range(41)],
                                 data_file_size=16 << 10, cq_units_per_file=16)
    qdir = src / "consumequeue" / "T" / "0"
    for n in os.listdir(qdir):
        os.unlink(qdir / n)
    units = [cq_unit(w["phy_offset"] + (3 if i == bad else 0), w["size"], 0) for i, w in enumerate(written)]
    write_queue(str(src), "T", 0, units, per_file=16)
    said = []
    for chunk in (1 << 16, 2, 3, 7):
        monkeypatch.setattr(requeue, "CHUNK", chunk)
        with pytest.raises(MigrateError) as exc:
            migrate(resolve_broker(str(src)), str(tmp_path / f"ms-{chunk}"), commitlog_file_size=CL)
        said.append(str(exc.value))
        assert not os.path.exists(tmp_path / f"ms-{chunk}")
    assert f"unit of queue offset {bad} points at {written[bad]['phy_offset'] + 3}" in said[0]
    assert said == [said[0]] * 4
