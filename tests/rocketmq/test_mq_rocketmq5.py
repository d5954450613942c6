"""What RocketMQ 5 stores hold beside 4.9's, and what ``mq migrate`` and ``mq rebuild`` do with
it (RocketMQ 5.3.3's own store writing and reading such stores: tests/java/test_mq_migrate_java5.py):

- ``compaction/`` (5.x's CompactionStore: compacted logs of compaction topics, at their own
  offsets, and ``position-checkpoint``, in queue offsets): migrate copies it as it is;
- ``batchconsumequeue/`` (topics of queue.type BatchCQ): their messages have no unit in
  ``consumequeue/``; migrate and rebuild refuse such a store, leaving it and DEST as they were;
- ``timerlog/`` and ``timerwheel`` (5.x's timer): the timer log's units name commit-log
  offsets; migrate moves them to the new ones (store/rocketmq/timer.py), the wheel as it is;
- the checkpoint's 5.x fields (masterFlushedOffset at 24, confirmPhyOffset at 32): rebuild
  keeps them; migrate writes 0 for both (no master has flushed anything for this store yet;
  RocketMQ's recovery sets the confirm offset).
"""

from __future__ import annotations

import json
import os
import struct

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from tests.support.rmq_store import write_broker_store
from tests.support.stores import file_crcs

runner = CliRunner()


@pytest.fixture
def src(tmp_path):
    root = tmp_path / "src"
    write_broker_store(str(root), [{"topic": f"T{i % 2}", "body": b"m%d" % i, "properties": {"KEYS": f"k{i}"}}
                                   for i in range(20)], data_file_size=16 << 10, cq_units_per_file=16)
    return root


def files(root) -> dict:
    return {os.path.relpath(os.path.join(d, n), root): open(os.path.join(d, n), "rb").read()
            for d, _, names in os.walk(root) for n in names}


def test_migrate_copies_the_compaction_store_as_it_is(src, tmp_path):
    comp = src / "compaction"
    os.makedirs(comp / "compactionLog" / "Kv" / "0")
    os.makedirs(comp / "compactionCq" / "Kv" / "0")
    (comp / "position-checkpoint").write_text('{"empty":false,"queueOffsetMap":{"Kv:0":7}}')
    (comp / "compactionLog" / "Kv" / "0" / "00000000000000000000").write_bytes(bytes(range(256)) * 4)
    (comp / "compactionCq" / "Kv" / "0" / "00000000000000000000").write_bytes(b"\1" * 200)
    dest = tmp_path / "dest"
    r = runner.invoke(app, ["mq", "migrate", str(src), str(dest), "--commitlog-file-size", 8 << 10])
    assert r.exit_code == 0, r.output
    assert files(dest / "compaction") == files(comp)


def bcq_store(src):
    qdir = src / "batchconsumequeue" / "Batched" / "0"
    os.makedirs(qdir)
    (qdir / "00000000000000000000").write_bytes(struct.pack(">qiqqqhii", 0, 100, 0, 1700000000000, 0, 3, 0, 0))
    return src


def test_migrate_refuses_a_store_with_batch_consume_queues(src, tmp_path):
    bcq_store(src)
    before = file_crcs(src)
    dest = tmp_path / "dest"
    r = runner.invoke(app, ["mq", "migrate", str(src), str(dest)])
    assert r.exit_code == 1, r.output
    assert f"{src}/batchconsumequeue/Batched: RocketMQ 5 batch consume queues" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert file_crcs(src) == before and sorted(os.listdir(tmp_path)) == ["src"]


def test_rebuild_refuses_a_store_with_batch_consume_queues(src):
    bcq_store(src)
    before = file_crcs(src)
    r = runner.invoke(app, ["mq", "rebuild", str(src)])
    assert r.exit_code == 1, r.output
    assert "batchconsumequeue/Batched: RocketMQ 5 batch consume queues" in r.stderr and "nothing changed" in r.stderr
    assert file_crcs(src) == before


def test_the_checkpoints_5x_fields(src, tmp_path):
    dest = tmp_path / "dest"
    r = runner.invoke(app, ["mq", "migrate", str(src), str(dest), "--commitlog-file-size", 8 << 10])
    assert r.exit_code == 0, r.output
    with open(dest / "checkpoint", "rb") as fh:
        cp = bytearray(fh.read())
    assert len(cp) == 4096 and struct.unpack_from(">qq", cp, 24) == (0, 0)
    # as a 5.x master-slave broker leaves it: masterFlushedOffset, confirmPhyOffset set
    struct.pack_into(">qq", cp, 24, 4096, 1234)
    with open(dest / "checkpoint", "wb") as fh:
        fh.write(cp)
    r = runner.invoke(app, ["mq", "rebuild", str(dest), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["units"] == 20
    with open(dest / "checkpoint", "rb") as fh:
        after = fh.read()
    assert struct.unpack_from(">qq", after, 24) == (4096, 1234) and after[40:] == cp[40:]


def timer_unit(prev: int, magic: int, offset_py: int, size_py: int) -> bytes:
    """A TimerLog unit as TimerMessageStore.doEnqueue writes it."""
    return struct.pack(">iqiqiqiiq", 52, prev, magic, 1700000000000, 5000, offset_py, size_py, 77, 0)


def test_migrate_moves_the_timer_log_to_the_new_offsets(src, tmp_path):
    """RocketMQ 5's timer log (timerlog/, 52-byte units naming commit-log offsets; a file ends
    in a 16-byte blank record) goes across with each unit's offset at its message's new place,
    a unit of a message not moved pointing nowhere (-1); the wheel (timer-log positions) and
    every other byte as they were."""
    r = runner.invoke(app, ["mq", "messages", str(src), "--format", "jsonl"])
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    fsize = 3 * 52 + 20  # two files: three units, then a blank record of the 20 bytes left
    units = [timer_unit(-1, 1, rows[3]["phy_offset"], 103),
             timer_unit(0, 2, rows[7]["phy_offset"], 107),
             timer_unit(52, 4, 999_999, 40),  # a message no longer in the log
             timer_unit(-1, 1, rows[19]["phy_offset"], 119)]
    os.makedirs(src / "timerlog")
    first = b"".join(units[:3]) + struct.pack(">iqi", 20, 0, -875286124) + b"\0" * 4
    (src / "timerlog" / f"{0:020d}").write_bytes(first)
    (src / "timerlog" / f"{fsize:020d}").write_bytes(units[3] + b"\0" * (fsize - 52))
    (src / "timerwheel").write_bytes(bytes(range(256)) * 3)
    dest = tmp_path / "dest"
    r = runner.invoke(app, ["mq", "migrate", str(src), str(dest), "--commitlog-file-size", 4 << 10, "--format",
                            "json"])
    assert r.exit_code == 0, r.output
    assert "1 timer-log units of messages not moved point nowhere now" in json.loads(r.stdout)[0]["note"]
    r = runner.invoke(app, ["mq", "messages", str(dest), "--format", "jsonl"])
    new = {x["keys"]: x["phy_offset"] for x in map(json.loads, r.stdout.splitlines())}
    assert new[rows[3]["keys"]] != rows[3]["phy_offset"]  # (the move changed the offsets)
    want = [timer_unit(-1, 1, new[rows[3]["keys"]], 103),
            timer_unit(0, 2, new[rows[7]["keys"]], 107), timer_unit(52, 4, -1, 40),
            timer_unit(-1, 1, new[rows[19]["keys"]], 119)]
    got = files(dest / "timerlog")
    assert got == {f"{0:020d}": b"".join(want[:3]) + first[3 * 52:],
                   f"{fsize:020d}": want[3] + b"\0" * (fsize - 52)}
    assert (dest / "timerwheel").read_bytes() == (src / "timerwheel").read_bytes()


def test_migrate_refuses_a_timer_log_it_cannot_read(src, tmp_path):
    os.makedirs(src / "timerlog")
    bad = timer_unit(-1, 1, 100, 10) + struct.pack(">iqi", 40, 0, 1) + b"\0" * 40
    (src / "timerlog" / f"{0:020d}").write_bytes(bad)
    dest = tmp_path / "dest"
    r = runner.invoke(app, ["mq", "migrate", str(src), str(dest)])
    assert r.exit_code == 1, r.output
    assert f"timerlog/{0:020d} offset 52: a unit of 40 bytes" in r.stderr and "nothing was written" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["src"]


def rocksdb_queues(src):
    """consumequeue/ as RocketMQ 5's RocksDBConsumeQueueStore leaves it: a RocksDB database."""
    import shutil
    shutil.rmtree(src / "consumequeue")
    os.makedirs(src / "consumequeue")
    (src / "consumequeue" / "CURRENT").write_text("MANIFEST-000005\n")
    (src / "consumequeue" / "000004.sst").write_bytes(b"\x01" * 100)


def test_migrate_says_it_leaves_rocksdb_queues_to_the_broker(src, tmp_path):
    rocksdb_queues(src)
    dest = tmp_path / "dest"
    r = runner.invoke(app, ["mq", "migrate", str(src), str(dest), "--format", "json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)[0]
    assert (s["messages"], s["units"]) == (20, 0)
    assert "consumequeue/ is a RocksDB database (RocketMQ 5's storeType defaultRocksDB), not read" in s["note"]
    assert "transaction halves" not in s["note"]
    assert os.listdir(dest / "commitlog") and not os.path.exists(dest / "consumequeue")


def test_rebuild_refuses_rocksdb_queues(src):
    rocksdb_queues(src)
    before = file_crcs(src)
    r = runner.invoke(app, ["mq", "rebuild", str(src)])
    assert r.exit_code == 1, r.output
    assert "consumequeue/CURRENT: consumequeue/ is a RocksDB database" in r.stderr and "nothing changed" in r.stderr
    assert file_crcs(src) == before


def test_check_leaves_batch_queued_messages_to_their_queues(tmp_path):
    """Messages of a BatchCQ topic have their units in batchconsumequeue/ (not read by mq check):
    they are not cq-missing; a topic with neither kind of queue still is."""
    import shutil
    from store.rocketmq.check import check_whole
    from store.rocketmq.layout import resolve_broker
    root = tmp_path / "src"
    write_broker_store(str(root), [{"topic": ("Batched", "T", "Lost")[i % 3], "body": b"m%d" % i}
                                   for i in range(30)], data_file_size=16 << 10, cq_units_per_file=16)
    shutil.rmtree(root / "consumequeue" / "Batched")
    shutil.rmtree(root / "consumequeue" / "Lost")
    bcq_store(root)
    r = runner.invoke(app, ["mq", "check", str(root), "--format", "json"])
    assert r.exit_code == 1, r.output
    got = json.loads(r.stdout)
    assert [(f["finding"], f["topic"]) for f in got] == [("cq-missing", "Lost")]
    findings, summary = check_whole(resolve_broker(str(root)))
    assert [(f["finding"], f["topic"]) for f in findings] == [("cq-missing", "Lost")] and summary["findings"] == 1
