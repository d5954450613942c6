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
import json
import os
import zlib

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app

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


def first_handshake(replica) -> int:
    """The consistent point of the replica's first handshake since its last start
    (AutoSwitchHAClient's ``truncateOffset is N``). A slave may handshake again (a reconnect):
    no later one cut below the first."""
    offsets = replica.run_handshakes()
    assert offsets and None not in offsets and min(offsets) == offsets[0], offsets
    return offsets[0]


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
    assert group[1].flush()["flushed_where"] == end
    for i in (1, 2, 3):
        assert group[i].quit() == 0
        assert group[i].epoch_file()["text"] + "\n" == epoch_text([(1, 0)]) == "1\n1725254278\n1-0\n"
        with open(os.path.join(group[i].root, "brokerIdentity")) as fh:
            assert fh.read().strip() == f"DefaultCluster#broker-a#{i}"
    for i in (2, 3):  # (a reconnect once it holds epoch 1 compares it: nothing cut)
        shakes = group[i].run_handshakes()
        assert shakes[:1] == [None] and all(o is None or 0 <= o <= end for o in shakes[1:]), shakes
    digests = {commitlog_digest(group[i].root, end) for i in (1, 2, 3)}
    assert len(digests) == 1


def test_failover_truncates_the_old_masters_tail_to_the_consistent_point(group):
    """Master 1 at epoch 1 with slaves 2 and 3; 50 messages reach all three (offset A).
    Slaves 2 and 3 stopped (clean shutdown); 30 more messages put on 1 alone (its tail, to B);
    1 stopped. 2 and 3 restarted; the controller's election: 2 master at epoch 2 (SyncStateSet
    {2}), 3 its slave; 20 messages put on 2 (to C). Old master 1 restarted as a slave of 2 at
    epoch 2. Seen:

    - 2's changeToMaster appended epoch 2 at its max offset: epochs ``1-0``, ``2-A``;
    - 3's handshake: local epochs [1 from 0] ending at A, the master's [1 from 0, 2 from A]:
      consistent point A, ``truncateOffset is A``, nothing cut (its max offset stayed A);
    - 1's handshake: local [1 from 0] ending at B, the master's epoch 1 ending at A:
      ``truncateOffset is A``, so its 30-message tail (B - A bytes) was cut: max offset A right
      after the handshake, then C, its commit log byte-identical to 2's and 3's up to C, its
      consume queue holding 50 + 20 messages; its epoch file ``1-0``, ``2-A`` like the others.

    ``mq align`` over the stopped old master and 2 and 3's files predicts exactly that cut
    (to A, B - A bytes, TopicF's 30 messages) before the old master starts.

    With 200-byte bodies: A = 19,590, B = 31,400 (a tail of 11,810 bytes), C = 27,420."""
    group.start_master_and_slaves(master_id=1, epoch=1)
    a = put_ok(group[1], "TopicF", 50, "p1")["max_phy_offset"]
    assert group.wait_caught_up(1) == a
    for i in (2, 3):
        assert group[i].quit() == 0
    b = put_ok(group[1], "TopicF", 30, "tail")["max_phy_offset"]
    assert b > a
    assert group[1].quit() == 0

    # the election: 2 at epoch 2 (its SyncStateSet {2}); 3 follows it
    for i in (2, 3):
        group[i].start()
    group[2].auto_accept(True)
    m = group[2].master(2, 2, [2])
    assert m["path"] == "changeToMaster" and m["max_phy_offset"] == a
    assert [(e["epoch"], e["start"]) for e in m["epochs"]] == [(1, 0), (2, a)]
    group[3].slave(group[2], 2)
    s3 = group[3].wait_until(lambda s: group[3].run_handshakes() and s["client"]["state"] == "TRANSFER",
                             "3's handshake with 2")
    assert first_handshake(group[3]) == a and s3["max_phy_offset"] == a
    c = put_ok(group[2], "TopicF", 20, "p2")["max_phy_offset"]
    assert c == group.wait_caught_up(2)  # (1 is not running yet)

    # what mq align predicts the old master's handshake with 2 cuts, from the files (1 stopped, 2 and
    # 3 at rest): RocketMQ then does exactly that
    r = CliRunner().invoke(app, ["mq", "align", group[2].root, group[1].root, group[3].root, "--master",
                                 group[2].root, "-f", "json"])
    assert r.exit_code == 1, r.output  # (1 would lose its tail)
    rows = json.loads(r.stdout)
    old, = [x for x in rows if x["replica"] == group[1].root and x["row"] == "replica"]
    assert (old["truncate_to"], old["cut_bytes"]) == (a, b - a)
    assert [(x["topic"], x["count"]) for x in rows if x["row"] == "cut"] == [("TopicF", 30)]

    # the old master comes back as a slave of the new one
    group[1].start()
    assert group[1].state()["max_phy_offset"] == b
    group[1].slave(group[2], 2)
    group[1].wait_until(lambda s: group[1].run_handshakes(), "1's handshake")
    assert first_handshake(group[1]) == a
    group[1].wait_log(f"Truncate slave log to {a} success", "1's truncation")
    s1 = group[1].wait_until(lambda s: s["max_phy_offset"] == c and s["queues"].get("TopicF/0") == 70,
                             "1 caught up with 2")
    assert [(e["epoch"], e["start"]) for e in s1["epochs"]] == [(1, 0), (2, a)]
    for i in (1, 2, 3):
        assert group[i].quit() == 0
        assert group[i].epoch_file()["text"] + "\n" == epoch_text([(1, 0), (2, a)])
    assert len({commitlog_digest(group[i].root, c) for i in (1, 2, 3)}) == 1
    # (the numbers the docstring gives, for this body size)
    assert (a, b, c) == (19590, 31400, 27420)


def _remove_epoch_files(root: str) -> None:
    for name in ("epochFileCheckpoint", "epochFileCheckpoint.bak"):
        if os.path.exists(os.path.join(root, name)):
            os.unlink(os.path.join(root, name))


def _write_epoch_file(root: str, entries: list[tuple[int, int]]) -> None:
    _remove_epoch_files(root)
    with open(os.path.join(root, "epochFileCheckpoint"), "w") as fh:
        fh.write(epoch_text(entries))


def test_first_handshake_without_epoch_files(group):
    """Replicas that enter controller mode without epoch files, as a master-slave store has
    none. Made here with RocketMQ's store itself: 1 master, 2 and 3 slaves; 500 messages of
    1,000-byte bodies reach all three (to Y = 596,390), 3 is stopped, 500 more reach 1 and 2
    (to X = 1,192,929: past the first 1 MiB commit-log file, which ends in a blank record),
    all stopped, every ``epochFileCheckpoint`` (and ``.bak``) deleted. Then:

    - restarted, 1 master at epoch 1: it took epoch 1 at its max offset (``1-1192929``);
    - 2 (identical to 1) as its slave: "Slave local epochCache is empty, skip truncate log",
      no truncateOffset line, max offset still X; it copied ``1-1192929`` from a transfer
      header; 10 more puts of 200-byte bodies (to X' = 1,196,839) reached it;
    - 3 (the first 500 messages, to Y) as its slave: also "epochCache is empty", nothing
      truncated, and it did not catch up: the master logged "Failed to find an epochEntry to
      match nextTransferFromWhere 596390" (its only epoch starts at X), then, its transfer
      epoch still unset (end offset 0), sent a transfer header whose body size is 0 - Y, and
      3's reader failed on it, again and again, with ``NegativeArraySizeException: -596390``;
      3's max offset stayed Y and it wrote no epoch file while 2 took the 10 further puts;
    - all stopped, each epoch file rewritten as ``1-0`` (one epoch from offset 0), 1 master at
      epoch 2 (``1-0``, ``2-1196839``): 3's handshake found the consistent point Y
      (``truncateOffset is 596390``: nothing cut) and 3 caught up to X'; 2's consistent point
      was X' (nothing cut). A slave records epoch 2 only when a transfer header of epoch 2
      reaches it (data, or a heartbeat every haSendHeartbeatInterval, 5 s): after 10 more puts
      (to 1,200,749) every epoch file reads ``1-0``, ``2-1196839`` and the three commit logs
      are byte-identical.
    """
    group.start_master_and_slaves(master_id=1, epoch=1)
    y = group[1].put("TopicE", 0, 500, 1000, "e1")["max_phy_offset"]
    assert group.wait_caught_up(1) == y
    assert group[3].quit() == 0
    x = group[1].put("TopicE", 0, 500, 1000, "e2")["max_phy_offset"]
    group[2].wait_until(lambda s: s["max_phy_offset"] == x, "2 caught up")
    for i in (1, 2):
        assert group[i].quit() == 0
    for i in (1, 2, 3):
        _remove_epoch_files(group[i].root)
    assert (y, x) == (596390, 1192929) and sorted(os.listdir(os.path.join(group[1].root, "commitlog"))) == [
        "00000000000000000000", "00000000000001048576"]

    for i in (1, 2, 3):
        group[i].start()
    group[1].auto_accept(True)
    m = group[1].master(1, 1)
    assert [(e["epoch"], e["start"]) for e in m["epochs"]] == [(1, x)] and m["max_phy_offset"] == x
    for i in (2, 3):
        group[i].slave(group[1], 1)
    s2 = group[2].wait_until(lambda s: s["epochs"], "2 took an epoch")
    assert s2["max_phy_offset"] == x and [(e["epoch"], e["start"]) for e in s2["epochs"]] == [(1, x)]
    refusal = f"Failed to find an epochEntry to match nextTransferFromWhere {y}"
    failure = f"NegativeArraySizeException: -{y}"
    group[3].wait_until(lambda s: refusal in group[1].log_text() and failure in group[3].log_text(),
                        "the master's refusal and 3's failure")
    x2 = put_ok(group[1], "TopicE", 10, "e3")["max_phy_offset"]
    group[2].wait_until(lambda s: s["max_phy_offset"] == x2, "2 caught up")
    s3 = group[3].state()
    assert s3["max_phy_offset"] == y and s3["epochs"] == []
    # (2 may reconnect once it holds epoch 1 and compare it then, cutting nothing; 3's cache stays empty)
    shakes = group[2].run_handshakes()
    assert shakes[:1] == [None] and all(o is None or x <= o <= x2 for o in shakes[1:]), shakes
    shakes = group[3].run_handshakes()
    assert shakes and set(shakes) == {None}, shakes
    for i in (1, 2, 3):
        assert group[i].quit() == 0
    assert group[3].epoch_file() is None

    # one epoch from 0 on every replica, and the master at epoch 2
    for i in (1, 2, 3):
        _write_epoch_file(group[i].root, [(1, 0)])
        group[i].start()
    group[1].auto_accept(True)
    m = group[1].master(2, 1)
    assert [(e["epoch"], e["start"]) for e in m["epochs"]] == [(1, 0), (2, x2)]
    for i in (2, 3):
        group[i].slave(group[1], 2)
    assert group.wait_caught_up(1) == x2
    assert first_handshake(group[3]) == y and first_handshake(group[2]) == x2
    x3 = put_ok(group[1], "TopicE", 10, "e4")["max_phy_offset"]  # (data in epoch 2: each slave records it)
    assert group.wait_caught_up(1) == x3
    for i in (1, 2, 3):
        assert group[i].quit() == 0
        assert group[i].epoch_file()["text"] + "\n" == epoch_text([(1, 0), (2, x2)])
    assert len({commitlog_digest(group[i].root, x3) for i in (1, 2, 3)}) == 1
    assert (x2, x3) == (1196839, 1200749)


def test_puts_follow_the_controller_mode_ack_rules(java, tmp_path):
    """With ``allAckInSyncStateSet=true`` and ``minInSyncReplicas=2`` (MessageStoreConfig), on
    master 1 at epoch 1 with SyncStateSet {1}: a put is refused with
    IN_SYNC_REPLICAS_NOT_ENOUGH and writes nothing (max offset 0). Once slave 2 has caught up
    and the master's alterSyncStateSet report made the set {1, 2}, puts are PUT_OK, each
    acknowledged by 2 (2 held every byte of them when they returned; the master's confirm
    offset, computed from the acks, then reached its max offset). When 2
    stops, the master drops it from the set (removeConnection reports {1}) and puts are
    refused again.

    Seen on the way (RocketMQ 5.3.3's ReputMessageService.doReput): right after the puts, 2's
    confirm offset (the master's, from the last transfer header: in one run 1,564 of 1,955)
    lay on a message boundary below its max offset, and 2's dispatch thread spun at full CPU
    (its outer loop keeps a stale ``isCommitLogAvailable``; the inner loop stops at the
    confirm offset without clearing ``doNext``) until the master's next heartbeat
    (haSendHeartbeatInterval, 5 s) raised the confirm offset to 1,955. A slave stopped in
    that state does not shut down (ReputMessageService's join waits 90 s): the test waits for
    the confirm offset first."""
    with HaGroup(java, str(tmp_path), ids=(1, 2),
                 options={"allAckInSyncStateSet": "true", "minInSyncReplicas": 2}) as g:
        for i in (1, 2):
            g[i].start()
        g[1].auto_accept(True)
        g[1].master(1, 1)
        r = g[1].put("TopicK", 0, 1, BODY, "k0")
        assert r["counts"] == {"IN_SYNC_REPLICAS_NOT_ENOUGH": 1} and r["max_phy_offset"] == 0
        g[2].slave(g[1], 1)
        g[1].wait_until(lambda s: s["local_sync_state_set"] == [1, 2], "SyncStateSet {1,2}")
        r = put_ok(g[1], "TopicK", 5, "k1")
        end = r["max_phy_offset"]
        g[1].wait_until(lambda s: s["confirm_offset"] == end, "the master's confirm offset at its end")
        assert g[2].state()["max_phy_offset"] == end  # acknowledged: 2 had it when the put returned
        g[2].wait_until(lambda s: s["confirm_offset"] == end, "2's confirm offset at its end")
        assert g[2].quit() == 0
        g[1].wait_until(lambda s: s["local_sync_state_set"] == [1], "SyncStateSet {1}")
        r = g[1].put("TopicK", 0, 1, BODY, "k2")
        assert r["counts"] == {"IN_SYNC_REPLICAS_NOT_ENOUGH": 1} and r["max_phy_offset"] == end
        pids = g.pids()
    assert not any(os.path.exists(f"/proc/{p}") and not _zombie_free(p) for p in pids)
