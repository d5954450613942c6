"""``controller elect-plan`` against RocketMQ 5.3.3's own controller: the scenarios of its
ReplicasInfoManagerTest (the old master kept, a higher epoch, a higher offset, a higher
priority, a designated broker, no valid broker in the SyncStateSet, unclean election),
reproduced on a controller log written by RocketMQ's EventSerializer into DLedger's store
(ControllerLogWriter) and replicas whose epoch files RocketMQ's EpochFileCache wrote
(EpochFileWriter). For each, ReplicasInfoManager.electMaster with DefaultElectPolicy
(tests/support/java/rocketmq5/ElectMasterRunner.java), fed each live replica's last epoch and
max offset as its heartbeats would carry them, elects what the plan says the controller
elects; and the policy alone agrees on made-up heartbeats (offsets 2^32 apart included)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess

import pytest

from store.rocketmq.electplan import INT_MAX, Broker, SetState, controller_elects
from store.rocketmq.epochs import EpochEntry
from store.rocketmq.replica import Replica, log_extent, read_replica
from tests.rocketmq.test_mq_align import boundaries, cut_log
from tests.rocketmq.test_mq_epochs import root  # noqa: F401 (the module's migrated store)
from tests.support import javarocketmq5
from tests.support.commands import invoke_clean
from tests.support.javabuild import Unavailable

RUNNER = "ElectMasterRunner"
# ResponseCode.CONTROLLER_MASTER_STILL_EXIST, CONTROLLER_ELECT_MASTER_FAILED, CONTROLLER_MASTER_NOT_AVAILABLE
STILL_EXIST, ELECT_FAILED, NOT_AVAILABLE = 2011, 2012, 2004


@pytest.fixture(scope="module")
def built():
    try:
        return javarocketmq5.build()
    except Unavailable as exc:
        pytest.skip(str(exc))


def ev(kind, **fields):
    return {"event": kind, "brokerName": "b1", **fields}


REGISTER = [ev("apply", clusterName="c1", brokerAddress=f"10.0.0.{i}:30911", newBrokerId=i, registerCheckCode=f"k{i}")
            for i in (1, 2, 3)]
# mockMetaData's history, then 2 elected in epoch 2: master 2, masterEpoch 2, SyncStateSet {1, 2, 3}
HISTORY = REGISTER + [ev("elect", newMasterElected=True, newMasterBrokerId=1), ev("alter", newSyncStateSet=[1, 2, 3]),
                      ev("elect", newMasterElected=True, newMasterBrokerId=2), ev("alter", newSyncStateSet=[1, 2, 3])]


def rocketmq_elects(built, events, live, *, unclean=False, designate=None, broker="b1", cluster="c1") -> dict:
    """ReplicasInfoManager.electMaster after ``events``: ``live`` {id: (epoch, maxOffset, priority)}."""
    lines = [json.dumps(e) for e in events]
    lines.append(json.dumps({"elect": {"clusterName": cluster, "brokerName": broker, "unclean": unclean,
                                       "designate": designate, "brokerId": None,
                                       "live": [{"brokerId": i, "epoch": e, "maxOffset": o, "priority": p}
                                                for i, (e, o, p) in sorted(live.items())]}}))
    proc = subprocess.run(built.command(main=RUNNER), input="\n".join(lines) + "\n", capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def chosen(result: dict):
    """The broker electMaster left as master (None: none elected)."""
    return result["masterBrokerId"] if result["code"] in (0, STILL_EXIST) else None


@pytest.fixture
def stores(built, root, tmp_path):  # noqa: F811
    """make(id, epochs, end): a replica of broker ``id`` (identity file, epochs by RocketMQ's
    EpochFileCache, its log cut at message ``end``)."""
    ends = boundaries(root)

    def make(bid, epochs, end=None):
        d = tmp_path / f"r{bid}"
        shutil.copytree(root, d)
        (d / "brokerIdentity").write_text(f"c1#b1#{bid}")
        assert javarocketmq5.write_epoch_file(built, str(d / "epochFileCheckpoint"),
                                              [(e, ends[k]) for e, k in epochs]) == [True] * len(epochs)
        if end is not None:
            cut_log(d, ends[end])
        return d
    return make


def plan(built, tmp_path, events, dirs, *args):
    base = str(tmp_path / "ctl")
    shutil.rmtree(base, ignore_errors=True)
    javarocketmq5.write_log(built, base, [{"term": 1}] + [{"term": 1, **e} for e in events])
    r = invoke_clean("controller", "elect-plan", base, *map(str, dirs), *map(str, args), "-f", "json")
    assert r.exit_code in (0, 1) and "Traceback" not in r.stderr, r.stderr
    rows = json.loads(r.stdout)
    return [x for x in rows if x["row"] == "verdict"][0], {x["broker"]: x for x in rows if x["row"] == "candidate"}


def live_of(dirs, down=(), priority=None):
    out = {}
    for d in dirs:
        r = read_replica(str(d))
        bid = int(r.identity[0].broker_id)
        if bid not in down:
            out[bid] = (r.entries[-1].epoch if r.entries else -1, r.max_offset, (priority or {}).get(bid, INT_MAX))
    return out


def agree(built, tmp_path, events, dirs, *, down=(), unclean=False, designate=None, priority=None):
    """The plan's controller choice and RocketMQ's, on the same log and replicas."""
    args = [a for i in down for a in ("--down", i)] + (["--unclean"] if unclean else []) + \
        (["--prefer", designate] if designate is not None else []) + \
        [a for i, p in (priority or {}).items() for a in ("--priority", f"{i}={p}")]
    verdict, cands = plan(built, tmp_path, events, dirs, *args)
    java = rocketmq_elects(built, events, live_of(dirs, down, priority), unclean=unclean, designate=designate)
    assert verdict["controller_choice"] == chosen(java), (verdict, java)
    return verdict, cands, java


def test_the_old_master_alive_and_in_sync_is_kept(built, stores, tmp_path):
    dirs = [stores(1, [(1, 0)], 50), stores(2, [(1, 0), (2, 50)]), stores(3, [(1, 0), (2, 50)], 80)]
    verdict, cands, java = agree(built, tmp_path, HISTORY, dirs)
    assert java["code"] == STILL_EXIST and verdict["controller_choice"] == 2 and cands[2]["new_epoch"] is None
    assert verdict["ok"] and verdict["brokers"] == [2]


def test_a_higher_epoch_wins_over_a_longer_log(built, stores, tmp_path):
    dirs = [stores(1, [(1, 0)], 100), stores(2, [(1, 0), (2, 50)]), stores(3, [(1, 0), (2, 50)], 80)]
    _verdict, cands, java = agree(built, tmp_path, HISTORY, dirs, down=[2])
    assert java["masterBrokerId"] == 3 and java["masterEpoch"] == 3 and cands[3]["new_epoch"] == 3


def test_a_higher_offset_wins_when_epochs_are_equal(built, stores, tmp_path):
    dirs = [stores(1, [(1, 0), (2, 50)], 70), stores(2, [(1, 0), (2, 50)]), stores(3, [(1, 0), (2, 50)], 80)]
    verdict, _cands, java = agree(built, tmp_path, HISTORY, dirs, down=[2])
    assert java["masterBrokerId"] == 3 and verdict["brokers"] == [3]


@pytest.mark.parametrize("prio, winner", [({1: 3, 3: 1}, 3), ({1: 1, 3: 3}, 1)])
def test_a_higher_priority_wins_when_epoch_and_offset_are_equal(built, stores, tmp_path, prio, winner):
    dirs = [stores(1, [(1, 0), (2, 50)], 80), stores(2, [(1, 0), (2, 50)]), stores(3, [(1, 0), (2, 50)], 80)]
    _verdict, _cands, java = agree(built, tmp_path, HISTORY, dirs, down=[2], priority=prio)
    assert java["masterBrokerId"] == winner


@pytest.mark.parametrize("designate, down, expected", [(1, [2], 1), (2, [], 2), (1, [1], None), (3, [2], 3)])
def test_a_designated_broker(built, stores, tmp_path, designate, down, expected):
    dirs = [stores(1, [(1, 0)], 50), stores(2, [(1, 0), (2, 50)]), stores(3, [(1, 0), (2, 50)], 80)]
    _verdict, _cands, java = agree(built, tmp_path, HISTORY, dirs, down=down, designate=designate)
    assert chosen(java) == expected
    assert java["code"] == (STILL_EXIST if designate == 2 else ELECT_FAILED if expected is None else 0)


def test_no_valid_broker_in_the_sync_state_set_elects_none_unless_unclean(built, stores, tmp_path):
    events = HISTORY + [ev("alter", newSyncStateSet=[2])]  # (testAllReplicasShutdownAndRestart)
    dirs = [stores(1, [(1, 0)], 50), stores(2, [(1, 0), (2, 50)]), stores(3, [(1, 0), (2, 50)], 80)]
    verdict, cands, java = agree(built, tmp_path, events, dirs, down=[2])
    assert java["code"] == NOT_AVAILABLE and java["events"] == [{"newMasterElected": False, "newMasterBrokerId": None}]
    assert not verdict["ok"] and cands[1]["may_elect"] == cands[3]["may_elect"] == "no"
    verdict, cands, java = agree(built, tmp_path, events, dirs, down=[2], unclean=True)
    assert java["masterBrokerId"] == 3 and cands[3]["may_elect"] == "unclean"
    # 3 lacks what 2 (the only in-sync replica) holds past message 80: every byte of it acknowledged
    assert cands[3]["acked_bytes"] == log_extent(str(dirs[1]))[1] - boundaries(dirs[1])[80]
    assert not verdict["ok"]


def test_unclean_election_sorts_epoch_then_offset_then_priority(built, stores, tmp_path):
    events = REGISTER + [ev("elect", newMasterElected=True, newMasterBrokerId=1), ev("alter", newSyncStateSet=[1])]
    dirs = [stores(1, [(1, 0)]), stores(2, [(1, 0)], 90), stores(3, [(1, 0)], 90)]
    for prio, winner in (({2: 5, 3: 4}, 3), ({2: 4, 3: 5}, 2)):
        _verdict, _cands, java = agree(built, tmp_path, events, dirs, down=[1], unclean=True, priority=prio)
        assert java["masterBrokerId"] == winner


def _broker(bid, epoch, offset, priority):
    return Broker(bid, "", Replica("", 0, offset, [], None, [EpochEntry(epoch, 0)], []), True, True, priority)


def test_the_policy_on_made_up_heartbeats_agrees_with_rocketmq(built):
    """Random heartbeats (epochs, offsets up to 2^34, some 2^32 apart, priorities) and
    SyncStateSets, with and without unclean election and a designated broker."""
    rnd = random.Random(61)
    cases = []
    for _ in range(40):
        sync = sorted(rnd.sample([1, 2, 3, 4], rnd.randint(1, 3)))
        live = {i: (rnd.randint(0, 3), rnd.choice([0, 1 << 32, rnd.randint(0, 1 << 34), 5000]), rnd.randint(0, 3))
                for i in (1, 2, 3, 4) if rnd.random() < 0.7}
        cases.append((sync, live, rnd.random() < 0.5, rnd.choice([None, None, 2, 3])))
    # (Java's int cast: offsets 2^32 apart compare equal, then priority; 3 * 2^31 apart, the wrong way round)
    cases += [([1, 2, 3], {2: (1, 0, 5), 3: (1, 1 << 32, 1)}, False, None),
              ([1, 2, 3], {2: (1, 3 << 31, 0), 3: (1, 0, 0)}, False, None)]
    elected = quirks = 0
    for sync, live, unclean, designate in cases:
        events = [ev("apply", clusterName="c1", brokerAddress=f"h{i}:1", newBrokerId=i, registerCheckCode="k")
                  for i in (1, 2, 3, 4)] + [ev("elect", newMasterElected=True, newMasterBrokerId=sync[0]),
                                            ev("alter", newSyncStateSet=sync)]
        java = rocketmq_elects(built, events, live, unclean=unclean, designate=designate)
        s = SetState("b1", sync[0], 1, frozenset(sync), frozenset({1, 2, 3, 4}))
        ours, _kept = controller_elects(s, {i: _broker(i, *v) for i, v in live.items()}, unclean=unclean,
                                        prefer=designate)
        assert ours == chosen(java), (sync, live, unclean, designate, java)
        elected += ours is not None
        naive = _naive(s, live, unclean, designate)
        quirks += naive != ours
    assert elected >= 20 and quirks >= 2  # (the int cast of offsets 2^32 apart changed some choice)


def _naive(s, live, unclean, designate):
    """The policy without Java's int cast and TreeSet: epoch, offset, priority as numbers."""
    for ids in (s.sync_state_set, s.registered if unclean else ()):
        valid = sorted(i for i in ids if i in live)
        if not valid:
            continue
        if s.master in valid and designate in (None, s.master):
            return s.master
        if designate is not None:
            if designate in valid:
                return designate
            continue
        return min(valid, key=lambda i: (-live[i][0], -live[i][1], live[i][2], i))
    return None


@pytest.fixture(scope="module")
def ha_java():
    from tests.support import javarocketmq5ha
    try:
        return javarocketmq5ha.build()
    except Unavailable as exc:
        pytest.skip(str(exc))


def test_the_plan_on_rocketmq_stores_and_the_election_rocketmq_then_makes(built, ha_java, tmp_path):
    """RocketMQ's own store in controller mode (tests/support/javarocketmq5ha.py) makes the
    replicas: master 1 at epoch 1, 50 messages on all three (to A), slaves 2 and 3 stopped, 30
    more on 1 alone (to B), 1 stopped. The plan, with 1 down: 2 and 3 are in-sync with equal
    epochs and offsets, the controller elects 2 (RocketMQ's electMaster on the same state
    agrees), and 1's handshake with 2 truncates it to A, cutting 30 messages none of which was
    acknowledged. RocketMQ then does it: 2 master at epoch 2, 1 its slave: truncateOffset A."""
    from tests.support.javarocketmq5ha import HaGroup
    with HaGroup(ha_java, str(tmp_path / "ha")) as g:
        g.start_master_and_slaves(master_id=1, epoch=1)
        a = g[1].put("T", 0, 50, 200, "p1")["max_phy_offset"]
        assert g.wait_caught_up(1) == a
        for i in (2, 3):
            assert g[i].quit() == 0
        b = g[1].put("T", 0, 30, 200, "tail")["max_phy_offset"]
        assert g[1].quit() == 0
        events = [{**e, "brokerName": "broker-a", **({"clusterName": "DefaultCluster"} if "clusterName" in e else {})}
                  for e in REGISTER + [ev("elect", newMasterElected=True, newMasterBrokerId=1),
                                       ev("alter", newSyncStateSet=[1, 2, 3])]]
        base = str(tmp_path / "ctl")
        javarocketmq5.write_log(built, base, [{"term": 1}] + [{"term": 1, **e} for e in events])
        r = invoke_clean("controller", "elect-plan", base, *(g[i].root for i in (1, 2, 3)), "--down", "1",
                         "-f", "json")
        assert r.exit_code == 0, r.stderr
        rows = json.loads(r.stdout)
        verdict = [x for x in rows if x["row"] == "verdict"][0]
        loss = [x for x in rows if x["row"] == "loss" and x["candidate"] == 2 and x["broker"] == 1][0]
        assert verdict["controller_choice"] == 2 and verdict["brokers"] == [2, 3]
        assert (loss["truncate_to"], loss["cut_bytes"], loss["messages"], loss["acked_bytes"]) == (a, b - a, 30, 0)
        live = {i: (1, a, INT_MAX) for i in (2, 3)}
        java = rocketmq_elects(built, events, live, broker="broker-a", cluster="DefaultCluster")
        assert java["code"] == 0 and java["masterBrokerId"] == 2 and java["masterEpoch"] == 2

        # RocketMQ's store does what the plan says
        for i in (2, 1):
            g[i].start()
        g[2].auto_accept(True)
        g[2].master(2, 2, [2])
        g[1].slave(g[2], 2)
        g[1].wait_until(lambda s: g[1].run_handshakes(), "1's handshake with 2")
        assert g[1].run_handshakes()[0] == a
