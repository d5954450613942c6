"""Which entries ``mq migrate`` and ``mq rebuild`` take as committed (store/rocketmq/commitment.py):
the checkpoint's committed index, or further what the broker's consume queues (or its key
index) point at, since the broker dispatches only committed entries. A broker killed with -9
leaves a checkpoint behind its queues; nothing a queue gave consumers may be left out.
RocketMQ's own store killed mid-write: tests/java/test_mq_commitment_java.py."""

from __future__ import annotations

import json
import os
import shutil
import struct

from typer.testing import CliRunner

from dledgerctl.app import app
from store.metafiles import read_checkpoint, write_checkpoint
from store.rocketmq.commitment import commit_bound
from tests.support.rmq_store import write_broker_store

runner = CliRunner()
CL = 8 << 10
BLANK_SIZE = (1 << 31) - 1


def unpoint(root, from_phy: int) -> None:
    """Zero every consume-queue unit that points at commit-log offset ``from_phy`` or past it:
    the queues of a broker that dispatched (so: committed) only the messages before it."""
    for d, _, names in os.walk(os.path.join(root, "consumequeue")):
        for n in names:
            path = os.path.join(d, n)
            with open(path, "rb") as fh:
                b = bytearray(fh.read())
            for k in range(len(b) // 20):
                off, size = struct.unpack_from(">qi", b, k * 20)
                if 0 < size != BLANK_SIZE and off >= from_phy:
                    b[k * 20:(k + 1) * 20] = bytes(20)
            with open(path, "wb") as fh:
                fh.write(b)


def messages(n=120):
    return [{"topic": f"T{i % 3}", "queue_id": i % 2, "body": bytes([i % 251]) * (50 + i * 37 % 700),
             "properties": {"KEYS": f"k{i}", "TAGS": f"t{i % 4}"}, "store_timestamp": 1700000000000 + i}
            for i in range(n)]


def lagging_store(root, n=120, committed=59):
    """A store whose queues hold every message while its checkpoint says entry ``committed``
    (as a broker killed a few seconds after its member last wrote the checkpoint leaves it)."""
    written = write_broker_store(str(root), messages(n), data_file_size=16 << 10, cq_units_per_file=16)
    node = str(root / "dledger-n0")
    cp = read_checkpoint(node)
    write_checkpoint(node, cp.end_index, written[committed]["index"])
    return written


def run(*args):
    return runner.invoke(app, [*map(str, args)])


def test_the_bound_is_the_furthest_proof(tmp_path):
    root = tmp_path / "src"
    written = lagging_store(root)
    b = commit_bound(str(root / "dledger-n0"), str(root))
    assert b.checkpoint == written[59]["index"] and b.proven == written[-1]["phy_offset"]
    assert b.certain([written[119]["index"]], [written[119]["pos"]]).tolist() == [True]
    assert b.certain([written[119]["index"] + 1], [written[119]["pos"] + 1]).tolist() == [False]
    assert b.highest == written[119]["index"]
    assert f"points at commit-log offset {b.proven}, at or past entry {written[119]['index']}'s message" in b.note()
    unpoint(root, written[100]["phy_offset"])
    b = commit_bound(str(root / "dledger-n0"), str(root))
    assert b.proven == written[99]["phy_offset"]
    assert commit_bound(str(root / "dledger-n0"), None).proven == -1


def test_migrate_moves_every_message_a_queue_points_at_past_a_lagging_checkpoint(tmp_path):
    root = tmp_path / "src"
    written = lagging_store(root)
    r = run("mq", "migrate", root, tmp_path / "ms", "--commitlog-file-size", CL, "--format", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)[0]
    assert (s["messages"], s["left_out"], s["units"]) == (120, 0, 120)
    assert s["committed_index"] == written[119]["index"]
    assert f"the checkpoint says committed index {written[59]['index']}" in s["note"]
    assert "the broker dispatches only committed entries" in s["note"]
    r = run("mq", "check", tmp_path / "ms")
    assert r.exit_code == 0 and "120 messages" in r.stderr, r.output


def test_messages_past_what_the_queues_reached_are_still_left_out(tmp_path):
    root = tmp_path / "src"
    written = lagging_store(root)
    unpoint(root, written[100]["phy_offset"])  # the queues reached message 99
    r = run("mq", "migrate", root, tmp_path / "ms", "--commitlog-file-size", CL, "--format", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)[0]
    assert (s["messages"], s["left_out"], s["committed_index"]) == (100, 20, written[99]["index"])


def test_no_committed_index_but_queues_that_prove_it(tmp_path):
    root = tmp_path / "src"
    write_broker_store(str(root), messages(30), data_file_size=16 << 10, cq_units_per_file=16)
    for n in os.listdir(root / "dledger-n0"):
        if n.startswith("checkpoint"):
            os.unlink(root / "dledger-n0" / n)
    r = run("mq", "migrate", root, tmp_path / "ms", "--commitlog-file-size", CL, "--format", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)[0]
    assert (s["messages"], s["left_out"]) == (30, 0) and "holds no committed index" in s["note"]


def test_rebuild_keeps_every_queue_whole_past_a_lagging_checkpoint(tmp_path):
    root = tmp_path / "src"
    written = lagging_store(root)
    r = run("mq", "rebuild", root, "--format", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)[0]
    assert (s["messages"], s["units"], s["left_out"]) == (120, 120, 0)
    assert "no longer holds" not in s["note"] and "the broker dispatches only committed entries" in s["note"]
    assert s["committed_index"] == written[119]["index"]
    r = run("mq", "check", root)
    assert r.exit_code == 0 and "0 findings" in r.stderr, r.output


def test_rebuild_without_queues_takes_the_key_indexs_end_as_proof(tmp_path):
    root = tmp_path / "src"
    written = lagging_store(root)
    assert run("mq", "rebuild", root).exit_code == 0  # (an index/ of every message, as the broker's)
    for n in os.listdir(root):
        if ".old-" in n:
            shutil.rmtree(root / n) if os.path.isdir(root / n) else os.unlink(root / n)
    shutil.rmtree(root / "consumequeue")
    r = run("mq", "rebuild", root, "--format", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)[0]
    assert (s["messages"], s["left_out"]) == (120, 0) and "index/" in s["note"]
    assert s["committed_index"] == written[119]["index"]
