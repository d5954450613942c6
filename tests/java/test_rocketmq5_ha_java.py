"""RocketMQ 5.3.3's own message store in controller mode (``enableControllerMode=true``: the
store makes an ``AutoSwitchHAService``), three replica processes over loopback, driven as
RocketMQ's broker drives it (ReplicasManager's changeToMaster / changeToSlave with master
epochs, SyncStateSets and broker ids; the test plays the controller): the harness of
tests/support/javarocketmq5ha.py, for issues 60 and 61. What RocketMQ did in each case is
asserted from its own log lines (AutoSwitchHAClient's ``truncateOffset is N``, the master's
reasons), its max offsets and its files (``epochFileCheckpoint``, ``commitlog/``), so later
tests can compare dledgerctl's predictions with it. No timing is asserted; every wait is
bounded. Skipped, saying why, when Java, a mirror or a Debian jar is missing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import zlib

import pytest

from tests.support import javarocketmq5ha
from tests.support.javabuild import Unavailable
from tests.support.javarocketmq5ha import HaGroup

BODY = 200  # bytes of each message body


@pytest.fixture(scope="module")
def java():
    try:
        return javarocketmq5ha.build()
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def group(java, tmp_path):
    """A group of three (ids 1, 2, 3); afterwards no process of it is left running."""
    g = HaGroup(java, str(tmp_path))
    try:
        yield g
    finally:
        g.close()
        for pid in g.pids():
            assert not os.path.exists(f"/proc/{pid}") or _zombie_free(pid), f"replica process {pid} still running"


def _zombie_free(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


def epoch_text(entries: list[tuple[int, int]]) -> str:
    """What RocketMQ's CheckpointFile writes for these entries: count, CRC32 & 0x7FFFFFFF of
    the entry lines (UtilAll.crc32), then the ``epoch-startOffset`` lines."""
    lines = "".join(f"{e}-{s}\n" for e, s in entries)
    return f"{len(entries)}\n{zlib.crc32(lines.encode()) & 0x7FFFFFFF}\n{lines}"


def commitlog_digest(root: str, end: int) -> str:
    """sha256 of the commit log's bytes [0, end) (files named by their first offset)."""
    h = hashlib.sha256()
    left = end
    d = os.path.join(root, "commitlog")
    for name in sorted(os.listdir(d)):
        if left <= 0:
            break
        with open(os.path.join(d, name), "rb") as fh:
            data = fh.read(left)
        h.update(data)
        left -= len(data)
    assert left == 0, f"{d} holds fewer than {end} bytes"
    return h.hexdigest()


def put_ok(replica, topic, count, prefix):
    r = replica.put(topic, 0, count, BODY, prefix)
    assert r["counts"] == {"PUT_OK": count}, r["counts"]
    return r


def test_master_and_two_slaves_replicate_from_empty_roots(group):
    """Three empty roots; 1 made master at epoch 1 (SyncStateSet {1}, epoch 1), 2 and 3 its
    slaves. Seen: each slave's first handshake found its epoch cache empty ("Slave local
    epochCache is empty, skip truncate log": no truncateOffset line); 100 puts of 200-byte
    bodies (38,590 bytes, PUT_OK each) reach both slaves, whose commit logs are byte-identical
    to the master's; the master took epoch 1 at offset 0 and each slave copied it from the
    first transfer's header, so every epochFileCheckpoint reads ``1``, ``1725254278``, ``1-0``;
    the master's alterSyncStateSet reports grew the SyncStateSet to {1, 2, 3} as the slaves
    caught up; the broker identity file reads ``DefaultCluster#broker-a#<id>``."""
    group.start_master_and_slaves(master_id=1, epoch=1)
    r = put_ok(group[1], "TopicA", 100, "a")
    end = r["max_phy_offset"]
    assert r["offsets"][0] == 0 and end == r["offsets"][-1] + r["sizes"][-1]
    assert group.wait_caught_up(1) == end
    master = group[1].wait_until(lambda s: s["local_sync_state_set"] == [1, 2, 3], "SyncStateSet {1,2,3}")
    assert master["role"] == "SYNC_MASTER" and master["epochs"][0]["epoch"] == 1
    for i in (1, 2, 3):
        s = group[i].wait_until(lambda s: s["queues"].get("TopicA/0") == 100, "the consume queue dispatched")
        assert [(e["epoch"], e["start"]) for e in s["epochs"]] == [(1, 0)]
        if i != 1:
            assert s["role"] == "SLAVE" and s["client"]["state"] == "TRANSFER"
    for i in (1, 2, 3):
        assert group[i].quit() == 0
        assert group[i].epoch_file()["text"] + "\n" == epoch_text([(1, 0)]) == "1\n1725254278\n1-0\n"
        with open(os.path.join(group[i].root, "brokerIdentity")) as fh:
            assert fh.read().strip() == f"DefaultCluster#broker-a#{i}"
    assert group[2].truncate_offsets() == [] == group[3].truncate_offsets()
    assert "Slave local epochCache is empty, skip truncate log" in group[2].log_text()
    digests = {commitlog_digest(group[i].root, end) for i in (1, 2, 3)}
    assert len(digests) == 1
