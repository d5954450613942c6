"""``mq check`` on what RocketMQ 5.3.3's own controller-mode store leaves when a slave's
handshake truncation is killed (SIGKILL) half-way (issue 61; apache/rocketmq#10666), and what
RocketMQ then does when it starts on those files. Three replica processes of
tests/support/javarocketmq5ha.py (AutoSwitchHAService), the test playing the controller.
RocketMQ's side is asserted from its own log lines, states and files; no timing is asserted,
every wait is bounded. Skipped, saying why, when Java, a mirror or a Debian jar is missing."""

from __future__ import annotations

import json
import os
import shutil
import struct

from typer.testing import CliRunner

from dledgerctl.app import app
from store.rocketmq.replica import log_extent
from tests.java.test_rocketmq5_ha_java import first_handshake, group, java, put_ok  # noqa: F401 (fixtures)

runner = CliRunner()


def check(root):
    r = runner.invoke(app, ["mq", "check", str(root), "-f", "json"])
    assert "Traceback" not in r.output, r.output
    return r.exit_code, json.loads(r.stdout) if r.stdout.strip() else [], r.stderr


def confirm_offset(root) -> int:
    with open(os.path.join(root, "checkpoint"), "rb") as fh:
        return struct.unpack_from(">q", fh.read(40), 32)[0]


def truncated_and_killed(replica, offset: int) -> None:
    """Wait for the handshake's truncation to ``offset`` and its confirm offset in the
    checkpoint (StoreCheckpoint.flush, each second), then SIGKILL the replica."""
    replica.wait_log(f"Truncate slave log to {offset} success", "the truncation")
    replica.wait_until(lambda s: confirm_offset(replica.root) == offset, f"checkpoint confirm offset {offset}")
    replica.kill()


def test_a_slave_killed_right_after_its_truncation_keeps_a_stale_tail(group, tmp_path):
    """Master 1 at epoch 1 with slaves 2, 3; 50 messages reach all (to A); 2 and 3 stop; 30
    more on 1 alone (its tail, to B); 1 stops. 2 master at epoch 2 ({2}), 3 its slave, no
    puts; 1 comes back as 2's slave: ``Truncate slave log to A success``, then SIGKILL.

    Seen: on disk 1's log still holds its whole tail to B as valid messages (MappedFileQueue
    .truncateDirtyFiles moved positions in memory only), ``abort`` is there and the checkpoint's
    confirmPhyOffset is A: ``mq check`` finds ``unconfirmed-tail`` (B - A bytes), nothing else.
    RocketMQ started on those files recovers the tail (max offset B). As 2's slave again, its
    next handshake cuts to A once more (a second ``truncateOffset is A``); cleanly stopped,
    ``mq check`` finds nothing. Started instead on a copy of the killed files and made master
    at epoch 3, it appends epoch 3 at B: the stale tail is now its history (#10666)."""
    group.start_master_and_slaves(master_id=1, epoch=1)
    a = put_ok(group[1], "TopicS", 50, "p1")["max_phy_offset"]
    assert group.wait_caught_up(1) == a
    for i in (2, 3):
        assert group[i].quit() == 0
    b = put_ok(group[1], "TopicS", 30, "tail")["max_phy_offset"]
    assert group[1].quit() == 0
    for i in (2, 3):
        group[i].start()
    group[2].auto_accept(True)
    group[2].master(2, 2, [2])
    group[3].slave(group[2], 2)
    group[1].start()
    group[1].slave(group[2], 2)
    truncated_and_killed(group[1], a)
    assert first_handshake(group[1]) == a

    root = group[1].root
    assert log_extent(root)[1] == b and os.path.exists(os.path.join(root, "abort"))
    code, rows, err = check(root)
    assert code == 1 and [r["finding"] for r in rows] == ["unconfirmed-tail"], rows
    assert f"{b - a} bytes of log past its confirm offset {a} (to {b})" in rows[0]["detail"]
    killed = tmp_path / "killed"
    shutil.copytree(root, killed)

    # as a slave again: RocketMQ recovers the tail, and its next handshake cuts it
    assert group[1].start()["max_phy_offset"] == b
    group[1].slave(group[2], 2)
    group[1].wait_until(lambda s: group[1].run_handshakes(), "the handshake after the restart")
    # (a loaded machine may see the slave reconnect and shake hands again: to the same point)
    assert set(group[1].run_handshakes()) == {a}, group[1].log_tail()
    assert group[1].wait_until(lambda s: s["client"]["state"] == "TRANSFER", "transfer")["max_phy_offset"] == a
    assert group[1].quit() == 0
    code, rows, _ = check(root)
    assert (code, rows) == (0, [])

    # elected master before any handshake: the tail becomes history
    shutil.rmtree(root)
    shutil.copytree(killed, root)
    assert group[1].start()["max_phy_offset"] == b
    m = group[1].master(3, 3, [1])
    assert m["max_phy_offset"] == b and (m["epochs"][-1]["epoch"], m["epochs"][-1]["start"]) == (3, b)
    assert group[1].quit() == 0


def test_a_truncation_across_files_leaves_units_and_index_entries_past_the_end(group, tmp_path):
    """Master 1 at epoch 1, slaves 2, 3; 300 messages of 1,000 bytes reach all (to A); 2 and 3
    stop; 1 alone: 800 more (to X, into the second 1 MiB commit-log file), then master again at
    epoch 2 (``2-X``), 50 more (to B); stopped. 2 master at epoch 3, 3 its slave; 1 as 2's
    slave truncates to A (its epoch 1 ends there on 2) and is killed.

    Seen: the truncation deleted commit-log file 1048576 but left the consume queue's units and
    the index entries that point into it, and rewrote the epoch file without ``2-X``. ``mq
    check``: ``cq-past-log-end`` per unit past the end, one ``index-past-log-end``, and
    ``unconfirmed-tail`` (confirm offset A). With the epoch file as it was before (a crash
    before its rewrite, made by copying it back): ``epoch-past-log`` too. RocketMQ started on
    those files (its max offset then where file 0's blank record starts)
    logs ``maxPhyOffsetOfConsumeQueue(B) >= processOffset(...), truncate dirty logic files``
    and serves 1,150 - (units past the end) messages of the queue; it cuts the units in memory
    only, drops the index file (an abnormal start: IndexService.load) and, the tail past its
    confirm offset undispatched, keeps ``abort`` at its shutdown: ``mq check`` then finds the
    same units, ``epoch-past-log`` and ``unconfirmed-tail``, no index entry past the end."""
    group.start_master_and_slaves(master_id=1, epoch=1)
    a = group[1].put("TopicX", 0, 300, 1000, "x1")["max_phy_offset"]
    assert group.wait_caught_up(1) == a
    for i in (2, 3):
        assert group[i].quit() == 0
    x = group[1].put("TopicX", 0, 800, 1000, "x2")["max_phy_offset"]
    assert x > 1 << 20
    assert group[1].quit() == 0
    group[1].start()
    group[1].auto_accept(True)
    assert [(e["epoch"], e["start"]) for e in group[1].master(2, 2, [1])["epochs"]] == [(1, 0), (2, x)]
    b = group[1].put("TopicX", 0, 50, 1000, "x3")["max_phy_offset"]
    assert group[1].quit() == 0
    before = tmp_path / "epochs-before"
    os.makedirs(before)
    for name in ("epochFileCheckpoint", "epochFileCheckpoint.bak"):
        if os.path.exists(os.path.join(group[1].root, name)):
            shutil.copy(os.path.join(group[1].root, name), before / name)

    for i in (2, 3):
        group[i].start()
    group[2].auto_accept(True)
    group[2].master(3, 3, [2])
    group[3].slave(group[2], 3)
    group[1].start()
    group[1].slave(group[2], 3)
    truncated_and_killed(group[1], a)
    assert first_handshake(group[1]) == a

    root = group[1].root
    assert sorted(os.listdir(os.path.join(root, "commitlog"))) == ["00000000000000000000"]
    assert group[1].epoch_file()["entries"] == [(1, 0)]
    end = log_extent(root)[1]
    assert a < end <= 1 << 20 < x < b
    code, rows, _ = check(root)
    kinds = [r["finding"] for r in rows]
    assert code == 1 and set(kinds) == {"cq-past-log-end", "index-past-log-end", "unconfirmed-tail"}, kinds
    past = kinds.count("cq-past-log-end")
    assert 0 < past <= 850

    for name in os.listdir(before):
        shutil.copy(before / name, os.path.join(root, name))
    code, rows, _ = check(root)
    (ep,) = [r for r in rows if r["finding"] == "epoch-past-log"]
    assert f"epoch 2 starts at offset {x}, past the log's end {end}" in ep["detail"]

    s = group[1].start()
    top = s["max_phy_offset"]
    assert a < top <= end
    assert f"maxPhyOffsetOfConsumeQueue({b}) >= processOffset({top}), truncate dirty logic files" in group[1].log_text()
    assert s["queues"]["TopicX/0"] == 1150 - past
    group[1].quit()
    # RocketMQ cut the units in memory only (they are cut again at each start); its abnormal
    # start dropped the index file (newer than the checkpoint's indexMsgTimestamp: IndexService
    # .load) and dispatch wrote a new one; the tail past its confirm offset was not dispatched,
    # so its shutdown kept abort ("the store may be wrong, so shutdown abnormally")
    assert "shutdown abnormally, and keep abort file" in group[1].log_text()
    code, rows, _ = check(root)
    kinds = [r["finding"] for r in rows]
    assert set(kinds) == {"cq-past-log-end", "epoch-past-log", "unconfirmed-tail"} and kinds.count(
        "cq-past-log-end") == past, kinds


def test_a_stale_tail_behind_the_masters_data_is_kept_by_the_next_handshake(group):
    """As the first test, with message properties of one length (prefixes ``tl`` and ``p2``:
    every message the same size), and 20 messages on the new master 2 (to C) before 1 comes
    back: 1 truncates to A, takes A..C, writes epoch ``2-A`` and is killed. C falls where one
    of its stale messages starts, so its log goes on past C with the rest of its old tail (to
    B) as valid messages, queue offsets, units and epochs in order: ``mq check`` finds
    ``stale-tail`` at C (stored before epoch 2's first message) and ``unconfirmed-tail``.

    RocketMQ: 20 more puts on 2 (to D, past B), then 1 restarted: its max offset B (the stale
    tail recovered); its handshake's consistent point is B (its epoch 2 ends at B, the
    master's at D), so nothing is cut and the master sends its bytes from B on, though no
    message of its own starts there: 1's log then differs from the master's in [C, B) for
    good, with no error, and at B holds the middle of a master's message. ``mq check``:
    ``damage`` at B (not a message: where RocketMQ's recovery would end the log) and still
    ``stale-tail`` at C."""
    group.start_master_and_slaves(master_id=1, epoch=1)
    a = put_ok(group[1], "TopicT", 50, "p1")["max_phy_offset"]
    assert group.wait_caught_up(1) == a
    for i in (2, 3):
        assert group[i].quit() == 0
    b = put_ok(group[1], "TopicT", 30, "tl")["max_phy_offset"]
    assert group[1].quit() == 0
    for i in (2, 3):
        group[i].start()
    group[2].auto_accept(True)
    group[2].master(2, 2, [2])
    group[3].slave(group[2], 2)
    c = put_ok(group[2], "TopicT", 20, "p2")["max_phy_offset"]
    assert a < c < b
    group[1].start()
    group[1].slave(group[2], 2)
    group[1].wait_until(lambda s: s["max_phy_offset"] == c, "1 caught up with 2")
    group[1].wait_until(lambda s: (2, a) in (group[1].epoch_file() or {}).get("entries", []), "epoch 2 in its file")
    group[1].kill()
    assert first_handshake(group[1]) == a

    root = group[1].root
    assert log_extent(root)[1] == b
    code, rows, _ = check(root)
    assert code == 1 and [r["finding"] for r in rows] == ["stale-tail", "unconfirmed-tail"], rows
    assert (rows[0]["file"], rows[0]["offset"]) == ("commitlog/00000000000000000000", c)
    assert f"the {b - c} bytes from there to the log's end {b}" in rows[0]["detail"]

    d = put_ok(group[2], "TopicT", 20, "p3")["max_phy_offset"]
    assert d > b
    assert group[1].start()["max_phy_offset"] == b
    group[1].slave(group[2], 2)
    group[1].wait_until(lambda s: s["max_phy_offset"] == d, "1 caught up with 2 again")
    shakes = group[1].run_handshakes()
    # (a loaded machine may see the slave reconnect: each later handshake at B, or at D once caught up)
    assert shakes[:1] == [b] and set(shakes[1:]) <= {b, d}, group[1].log_tail()
    assert group[1].quit() == 0 and group[2].quit() == 0
    with open(os.path.join(root, "commitlog", "00000000000000000000"), "rb") as fh:
        mine = fh.read(d)
    with open(os.path.join(group[2].root, "commitlog", "00000000000000000000"), "rb") as fh:
        master = fh.read(d)
    assert mine[:c] == master[:c] and mine[c:b] != master[c:b] and mine[b:d] == master[b:d]
    code, rows, _ = check(root)
    assert [(r["finding"], r["offset"]) for r in rows] == [("damage", b), ("stale-tail", c)], rows
    assert "not a message" in rows[0]["detail"]
