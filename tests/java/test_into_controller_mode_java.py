"""A DLedger-mode broker group moved into controller mode with every message (issue 60), proven
on RocketMQ's own code: the group's three DLedger-mode replicas as a group leaves them
(written by RocketMQ 4.9.4's DefaultMessageStore in DLedger mode with DLedger 0.2.6, and by
5.3.3's with DLedger 0.3.1.2: the leader's store; a follower behind it, its log cut back and its queues and checkpoint with it; a
follower holding entries no quorum committed), each moved with ``mq migrate --cut <the
group's committed index> --controller-mode``, ``mq align`` proving them aligned, then
5.3.3's store in controller mode on each (AutoSwitchHAService, three processes over
loopback, driven as ReplicasManager drives it: tests/support/javarocketmq5ha.py; the test
plays a fresh controller, whose first masterEpoch for a new broker set is 1).

What must hold, from RocketMQ's own log lines and files: each slave's first handshake
truncates nothing (its ``truncateOffset`` is its own max offset), the behind slave catches
up, the three commit logs are then byte-identical and every message is read back the same
from each (``mq messages``), consumer offsets stay valid (``mq consumers``), new puts
replicate, and a failover to a slave at the next epoch loses no acknowledged message."""

from __future__ import annotations

import json
import os
import shutil
import zlib

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from store.filestore import FileStore
from store.metafiles import read_checkpoint, write_checkpoint
from tests.java import test_mq_migrate_java, test_mq_migrate_java5
from tests.rocketmq.test_mq_commitment import unpoint
from tests.support import javarocketmq, javarocketmq5ha, javarocketmq5store
from tests.support.javabuild import Unavailable
from tests.support.javarocketmq5ha import HaGroup
from tests.support.rmq_encode import encode_message

runner = CliRunner()
CL_FILE = 1 << 20
CQ_FILE_SIZE = 20 * 1000  # (what write_store gives the sources' consume queues)
OPTIONS = {"mappedFileSizeCommitLog": CL_FILE, "mappedFileSizeConsumeQueue": CQ_FILE_SIZE,
           "maxHashSlotNum": 1000, "maxIndexNum": 4000}
# the DLedger-mode writers: RocketMQ 4.9.4 with DLedger 0.2.6 (its own specs: no V2 topic), 5.3.3 with 0.3.1.2
SOURCES = {"4.9.4": (lambda: javarocketmq.build("4.9.4"), test_mq_migrate_java.specs),
           "5.3.3": (javarocketmq5store.build, test_mq_migrate_java5.specs)}


@pytest.fixture(scope="module", params=sorted(SOURCES))
def java(request):
    build, specs = SOURCES[request.param]
    try:
        return build(), javarocketmq5ha.build(), specs
    except Unavailable as exc:
        pytest.skip(str(exc))


def mq(*args):
    return runner.invoke(app, ["mq", *map(str, args)])


@pytest.fixture(scope="module")
def group_stores(java, tmp_path_factory):
    """(leader, behind, ahead) DLedger-mode store roots of one group, and its committed index."""
    writer, _ha, specs = java
    base = tmp_path_factory.mktemp(f"dledger-group-{writer.version}")
    leader = base / "leader"
    reported = javarocketmq.write_store(writer, str(leader), specs(), data_file_size=96 << 10,
                                        consume_queue_file_size=CQ_FILE_SIZE)
    assert [r["status"] for r in reported] == ["PUT_OK"] * len(reported)
    os.makedirs(leader / "config", exist_ok=True)
    (leader / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": {"Orders0@g": {"0": 3}}}))
    node = next(p for p in os.listdir(leader) if p.startswith("dledger-"))
    committed = read_checkpoint(str(leader / node)).committed_index
    # a follower behind: its log cut back 20 entries, its queues and checkpoint with it (what a
    # broker that dispatched only what it held leaves)
    behind = base / "behind"
    shutil.copytree(leader, behind)
    with FileStore.open(str(behind / node)) as s:
        pos, _size = s.locate(committed - 19)
        s.truncate(committed - 19, force=True)
        end = s.end_index
    write_checkpoint(str(behind / node), end, end)
    unpoint(str(behind), pos + 48)
    # a follower holding entries no quorum committed: appended after the leader's last, past its commit
    ahead = base / "ahead"
    shutil.copytree(leader, ahead)
    with FileStore.open(str(ahead / node)) as s:
        term = s.end_term
        s.append_leader([encode_message(topic="Orders0", queue_id=0, body=b"never committed %d" % k,
                                        queue_offset=10_000 + k) for k in range(3)], term)
        end = s.end_index
    write_checkpoint(str(ahead / node), end, committed)
    return leader, behind, ahead, committed


def test_a_dledger_group_moves_into_controller_mode_with_every_message(java, group_stores, tmp_path):
    _writer, ha, specs = java
    leader, behind, ahead, committed = group_stores
    with HaGroup(ha, str(tmp_path), options=OPTIONS) as g:
        for i, src in ((1, leader), (2, behind), (3, ahead)):
            r = runner.invoke(app, ["mq", "migrate", str(src), g[i].root, "--cut", str(committed),
                                    "--controller-mode", "--commitlog-file-size", str(CL_FILE),
                                    "--max-hash-slot-num", "1000", "--max-index-num", "4000", "--format", "json"])
            assert r.exit_code == 0, r.output
        moved = {i: json.loads(runner.invoke(app, ["mq", "epochs", g[i].root, "-f", "json"]).stdout) for i in (1, 2, 3)}
        ends = {i: next(r["end_offset"] for r in rows if r["row"] == "log") for i, rows in moved.items()}
        assert ends[1] == ends[3] > ends[2]  # (the uncommitted entries were left out; the follower is behind)
        r = mq("align", g[1].root, g[2].root, g[3].root, "--master", g[1].root, "-f", "json")
        assert r.exit_code == 0, r.output
        slaves = [x for x in json.loads(r.stdout) if x["role"] == "slave"]
        assert [(x["first_difference"], x["truncate_to"]) for x in slaves] == [(None, None), (None, None)]

        g.start_master_and_slaves(master_id=1, epoch=1)
        top = g.wait_caught_up(1)
        assert top == ends[1]
        for i in (2, 3):  # RocketMQ's own first handshake: nothing truncated
            assert g[i].truncate_offsets()[:1] == [ends[i]], g[i].log_tail()
        logs = {i: _log_bytes(g[i].root, top) for i in (1, 2, 3)}
        assert logs[1] == logs[2] == logs[3]
        served = {i: _messages(g[i].root) for i in (1, 2, 3)}
        assert served[1] == served[2] == served[3] and len(served[1]) == len(specs())
        for i in (1, 2, 3):
            r = mq("consumers", g[i].root)
            assert r.exit_code == 0, r.output
        # new puts replicate; then a failover to 2 at the next epoch loses nothing acknowledged
        after = g[1].put("Orders0", 0, 20, 300, "new")["max_phy_offset"]
        assert g.wait_caught_up(1) == after
        assert g[1].quit() == 0
        g[2].auto_accept(True)
        g[2].master(2, 2)
        g[3].slave(g[2], 2)
        g[1].start()
        g[1].slave(g[2], 2)
        assert g.wait_caught_up(2) == after
        g[1].wait_until(lambda _s: g[1].truncate_offsets(), "the old master's first handshake as a slave")
        assert g[1].truncate_offsets()[-1:] == [after]  # (the old master keeps all it had)
        assert _log_bytes(g[1].root, after) == _log_bytes(g[2].root, after) == _log_bytes(g[3].root, after)
        r = mq("epochs", g[2].root, "-f", "json")
        assert [(x["epoch"], x["start_offset"]) for x in json.loads(r.stdout) if x["row"] == "epoch"] == \
            [(0, 0), (1, ends[1]), (2, after)]


def _log_bytes(root: str, end: int) -> bytes:
    out = b""
    d = os.path.join(root, "commitlog")
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as fh:
            out += fh.read()
    return out[:end]


def _messages(root: str) -> list:
    r = mq("messages", root, "-f", "json", "--body", "base64")
    assert r.exit_code == 0, r.output
    return [(m["topic"], m["queue_id"], m["queue_offset"], m["uniq_key"], m["keys"], m["tags"], m["body"],
             json.dumps(m["properties"], sort_keys=True)) for m in json.loads(r.stdout)]


def test_with_epoch_1_the_first_master_leaves_its_slaves_no_consistent_point(java, group_stores, tmp_path):
    """Why the moved replicas get epoch 0: a fresh controller gives the first master epoch 1, and
    changeToMaster drops the epochs at or above it and appends its own at its max offset; with
    epoch 1 on every replica the slaves then share no epoch start with it. mq align --master-epoch
    predicts the refusal; RocketMQ's slave refuses, and keeps its log."""
    _writer, ha, _specs = java
    leader, behind, _ahead, committed = group_stores
    with HaGroup(ha, str(tmp_path), ids=(1, 2), options=OPTIONS) as g:
        for i, src in ((1, leader), (2, behind)):
            r = runner.invoke(app, ["mq", "migrate", str(src), g[i].root, "--cut", str(committed),
                                    "--controller-mode", "--commitlog-file-size", str(CL_FILE),
                                    "--max-hash-slot-num", "1000", "--max-index-num", "4000"])
            assert r.exit_code == 0, r.output
            with open(os.path.join(g[i].root, "epochFileCheckpoint"), "w") as fh:
                fh.write("1\n" + str(zlib.crc32(b"1-0\n") & 0x7FFFFFFF) + "\n1-0\n")
        r = mq("align", g[1].root, g[2].root, "--master", g[1].root, "--master-epoch", "1", "-f", "json")
        assert r.exit_code == 1 and "no consistent point" in r.output
        before = _log_bytes(g[2].root, 1 << 30)
        g.start_master_and_slaves(master_id=1, epoch=1)
        g[2].wait_until(lambda _s: "Failed to find a consistent point" in g[2].log_text(),
                        "the slave's refusal")
        assert g[2].truncate_offsets()[:1] == [-1]
        assert _log_bytes(g[2].root, 1 << 30) == before
