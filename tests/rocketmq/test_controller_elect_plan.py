"""``controller elect-plan`` (issue 61): a controller log written by tests/support/controller_encode.py
and replicas copied from a store ``mq migrate`` made, given epochs, identities and cut logs. Whether
RocketMQ's own controller elects as planned is checked in tests/java/test_controller_elect_plan_java.py."""

from __future__ import annotations

import json
import os

import pytest

from store.rocketmq.align import digest
from store.rocketmq.electplan import INT_MAX, Broker, LogDifference, SetState, controller_elects, hashset_order
from store.rocketmq.epochs import EpochEntry
from store.rocketmq.replica import Replica, log_extent, read_replica
from tests.rocketmq.test_mq_align import replica
from tests.support.commitlogs import BORN_AT, boundaries, cut_log
from tests.rocketmq.test_mq_epochs import root  # noqa: F401 (the module's migrated store)
from tests.support.commands import invoke_clean as run
from tests.support.controller_encode import alter_sync_state_set, apply_broker_id, elect_master, write_controller_log

E = EpochEntry


def log(tmp_path, *, sync=(1, 2, 3), master=1, elections=1):
    entries = [(1, b"")] + [(1, apply_broker_id("c1", "b1", f"10.0.0.{i}:30911", i, f"k{i}")) for i in (1, 2, 3)]
    for _ in range(elections):
        entries.append((1, elect_master("b1", master)))
    entries.append((1, alter_sync_state_set("b1", sync)))
    return write_controller_log(str(tmp_path / "ctl"), entries)


def broker(root, tmp_path, bid, epochs, cut=None):  # noqa: F811
    d = replica(root, tmp_path, f"r{bid}", epochs)
    (d / "brokerIdentity").write_text(f"c1#b1#{bid}")
    if cut is not None:
        cut_log(d, cut)
    return d


def plan(*args):
    r = run("controller", "elect-plan", *map(str, args), "-f", "json")
    rows = json.loads(r.stdout) if r.stdout.strip() else []
    return r.exit_code, rows, r.stderr


def by_row(rows, kind):
    return {row["broker"]: row for row in rows if row["row"] == kind}


def test_in_sync_replicas_cut_nothing_and_the_controller_keeps_a_live_old_master(root, tmp_path):  # noqa: F811
    ctl = log(tmp_path)
    stores = [broker(root, tmp_path, i, [E(1, 0)]) for i in (1, 2, 3)]
    code, rows, err = plan(ctl, *stores)
    assert code == 0, err
    cands = by_row(rows, "candidate")
    assert {i: c["may_elect"] for i, c in cands.items()} == {1: "in-sync", 2: "in-sync", 3: "in-sync"}
    assert cands[1]["controller_choice"] and cands[1]["new_epoch"] is None
    v = by_row(rows, "verdict")
    (v,) = v.values()
    assert v["ok"] and v["brokers"] == [1, 2, 3] and v["controller_choice"] == 1
    assert "keeps 1 itself" in v["note"]


def test_a_slave_behind_the_set_is_cut_when_the_longest_is_not_elected(root, tmp_path):  # noqa: F811
    ctl = log(tmp_path, sync=(1, 2))
    ends = boundaries(root)
    a = broker(root, tmp_path, 1, [E(1, 0)])
    b = broker(root, tmp_path, 2, [E(1, 0)], cut=ends[60])
    c = broker(root, tmp_path, 3, [E(1, 0), E(2, ends[40])], cut=ends[70])  # (a tail in an epoch of its own)
    code, rows, err = plan(ctl, a, b, c, "--down", 1)
    assert code == 0, err
    cands = by_row(rows, "candidate")
    assert cands[1]["may_elect"] == "no" and cands[2]["may_elect"] == "in-sync" and cands[3]["may_elect"] == "no"
    assert cands[2]["controller_choice"] and cands[2]["new_epoch"] == 2
    losses = [r for r in rows if r["row"] == "loss" and r["candidate"] == 2]
    cut = {r["broker"]: r for r in losses}
    # 1 (down, in sync) ends past 2: electing 2 cuts it back, below nothing acknowledged (2 ends where the set does)
    assert cut[1]["truncate_to"] == ends[60] and cut[1]["acked_bytes"] == 0 and cut[1]["messages"] == len(ends) - 60
    # 3 holds epoch 2 from ends[40]; 2's new epoch 2 starts at ends[60]: the consistent point is epoch 1's end
    assert cut[3]["truncate_to"] == ends[40]
    v = [r for r in rows if r["row"] == "verdict"][0]
    assert v["ok"] and v["brokers"] == [2] and "elects 2 itself" in v["note"]


def test_every_choice_cutting_acknowledged_messages_exits_1(root, tmp_path):  # noqa: F811
    ctl = log(tmp_path, sync=(1, 2))
    ends = boundaries(root)
    a = broker(root, tmp_path, 1, [E(1, 0)])
    b = broker(root, tmp_path, 2, [E(1, 0)], cut=ends[60])
    c = broker(root, tmp_path, 3, [E(1, 0)], cut=ends[20])
    code, rows, err = plan(ctl, a, b, c, "--down", 1, "--down", 2, "--unclean")
    assert code == 1
    cands = by_row(rows, "candidate")
    assert cands[3]["may_elect"] == "unclean" and cands[3]["controller_choice"]
    assert cands[3]["acked_bytes"] == ends[60] - ends[20] and cands[3]["acked_messages"] == 40
    assert "Error: every choice cuts acknowledged messages" in err
    code, rows, err = plan(ctl, a, b, c, "--down", 1, "--down", 2)
    assert code == 1 and "Error: no broker the controller may elect" in err
    assert by_row(rows, "candidate")[3]["may_elect"] == "no"


def test_bytes_kept_that_differ_from_the_new_master_are_acknowledged_ones_lost(root, tmp_path):  # noqa: F811
    ctl = log(tmp_path, sync=(1, 2))
    ends = boundaries(root)
    a = broker(root, tmp_path, 1, [E(1, 0)])
    b = broker(root, tmp_path, 2, [E(1, 0)], cut=ends[60])
    c = broker(root, tmp_path, 3, [E(1, 0)], cut=ends[70])
    with open(c / "commitlog" / sorted(os.listdir(c / "commitlog"))[0], "r+b") as fh:
        fh.seek(ends[30] + BORN_AT)  # (no CRC covers it: RocketMQ keeps the message; a body failing its CRC
        fh.write(b"\xff")            # would end c's log there instead: test_mq_align's crc test)
    code, rows, err = plan(ctl, a, b, c, "--down", 1, "--down", 2, "--unclean")
    assert code == 1, err
    cut = {r["broker"]: r for r in rows if r["row"] == "loss" and r["candidate"] == 3}
    assert cut[1]["truncate_to"] == ends[70] and cut[1]["diverged_at"] == ends[30] + BORN_AT
    assert cut[1]["acked_bytes"] == ends[60] - ends[30] - BORN_AT and cut[1]["acked_messages"] == 30
    assert cut[2]["truncate_to"] is None and cut[2]["diverged_at"] == ends[30] + BORN_AT
    assert "a divergence it does not repair" in cut[2]["note"]
    assert "every choice cuts acknowledged messages: 3 cuts" in err


def test_a_digest_and_an_explicit_id_stand_for_a_replica(root, tmp_path):  # noqa: F811
    ctl = log(tmp_path, sync=(1, 2))
    ends = boundaries(root)
    a = broker(root, tmp_path, 1, [E(1, 0)])
    b = broker(root, tmp_path, 2, [E(1, 0)], cut=ends[60])
    os.unlink(b / "brokerIdentity")
    dig = tmp_path / "a.json"
    r = run("mq", "digest", str(a), "--out", str(dig))
    assert r.exit_code == 0, r.stderr
    code, rows, err = plan(ctl, dig, "--store", f"2={b}", "--down", 1, "-f", "json")
    assert code == 0, err
    cut = [r for r in rows if r["row"] == "loss" and r["candidate"] == 2][0]
    assert cut["broker"] == 1 and cut["cut_bytes"] == log_extent(str(a))[1] - ends[60] and cut["messages"] is None
    code, rows, err = plan(ctl, a, b)
    assert code == 1 and "no brokerIdentity gives its broker id" in err and "Traceback" not in err


def test_a_digest_locates_a_difference_to_its_chunk_and_only_below_what_is_kept(root, tmp_path):  # noqa: F811
    a = broker(root, tmp_path, 1, [E(1, 0)])
    b = broker(root, tmp_path, 2, [E(1, 0)])
    with open(b / "commitlog" / sorted(os.listdir(b / "commitlog"))[0], "r+b") as fh:
        fh.seek(10_000)
        fh.write(b"\xff")
    ra, rb = read_replica(str(a)), read_replica(str(b))
    da = digest(str(a), chunk=4096, replica=ra)
    here, there = Broker(2, str(b), rb, True), Broker(1, "a.json", ra, False, digest=da)
    assert LogDifference()(here, there, 20_000) == 8192  # (the chunk holding byte 10,000)
    assert LogDifference()(here, there, 12_000) is None  # (that chunk reaches past 12,000: inconclusive)
    assert LogDifference()(here, Broker(1, str(a), ra, True), 20_000) == 10_000


def _b(bid, epoch, offset, priority=INT_MAX):
    return Broker(bid, "", Replica("", 0, offset, [], None, [E(epoch, 0)], []), True, True, priority)


def test_the_policy_sorts_by_epoch_offset_then_priority():
    s = SetState("b1", 1, 3, frozenset({1, 2, 3}), frozenset({1, 2, 3, 4}))
    live = {2: _b(2, 2, 100), 3: _b(3, 3, 50), 4: _b(4, 4, 500)}
    assert controller_elects(s, live) == (3, False)  # (epoch first)
    assert controller_elects(s, {**live, 1: _b(1, 1, 1)}) == (1, True)  # (the old master kept)
    assert controller_elects(s, live, prefer=2) == (2, False)
    assert controller_elects(s, live, prefer=4) == (None, False)
    assert controller_elects(s, live, prefer=4, unclean=True) == (4, False)
    assert controller_elects(s, {2: _b(2, 3, 100, 5), 3: _b(3, 3, 100, 1)}) == (3, False)
    assert controller_elects(s, {4: _b(4, 4, 500)}) == (None, False)
    assert controller_elects(s, {4: _b(4, 4, 500)}, unclean=True) == (4, False)
    # Java's (int) cast of the offset difference: 2^32 apart compares equal, the TreeSet keeps the first
    assert controller_elects(s, {2: _b(2, 3, 1 << 32), 3: _b(3, 3, 0)}) == (2, False)
    assert controller_elects(s, {2: _b(2, 3, 0), 3: _b(3, 3, 1 << 32)}) == (2, False)
    # 3 * 2^31 apart: the cast turns the difference negative whichever way round (3 goes left of 2)
    assert controller_elects(s, {2: _b(2, 3, 3 << 31), 3: _b(3, 3, 0)}) == (3, False)


def test_hashset_order_of_small_ids_is_ascending():
    assert hashset_order([5, 3, 1, 17]) == [1, 17, 3, 5]  # (17 shares 1's bucket in a table of 16)


@pytest.mark.parametrize("args", [["--priority", "x"], ["--store", "one=/tmp"], []])
def test_bad_options_are_usage_errors(tmp_path, args):
    r = run("controller", "elect-plan", str(tmp_path), *args)
    assert r.exit_code == 2 and "Traceback" not in r.stderr
