"""An unclean election against real stores (issue 61): RocketMQ 5.3.3's own store in
controller mode (tests/support/javarocketmq5ha.py, ``allAckInSyncStateSet=true``) leaves a
broker set whose SyncStateSet holds only its master, and the master dies. ``controller
elect-plan`` reads the controller's log (written by RocketMQ's EventSerializer with the
SyncStateSet changes the master reported) and the three stores: no broker may be elected
cleanly; with ``--unclean``, each live one may, and what each choice cuts, acknowledged
messages included. RocketMQ's own ReplicasInfoManager.electMaster (ElectMasterRunner, fed the
live replicas' epochs and max offsets as their heartbeats carry them) elects none, and with
enableElectUncleanMaster the one the plan names; that replica is then made master at the
epoch RocketMQ gave (ReplicasManager's steps in the harness), and the other replicas rejoin as
its slaves: RocketMQ's ``truncateOffset`` lines and their logs afterwards are what elect-plan
and ``mq align`` said, and the acknowledged messages the plan counted are gone from the new
master. No timing is asserted; every wait is bounded; every process is killed at the end.
"""

from __future__ import annotations

import json

from store.rocketmq.electplan import INT_MAX
from tests.java.test_controller_elect_plan_java import NOT_AVAILABLE, built, rocketmq_elects  # noqa: F401 (fixture)
from tests.java.test_rocketmq5_ha_java import commitlog_digest, group, java  # noqa: F401 (fixtures)
from tests.support import javarocketmq5
from tests.support.commands import invoke_clean

BODY = 200
TOPIC = "TopicU"
OPTIONS = {"allAckInSyncStateSet": "true", "slaveTimeout": 800, "haSendHeartbeatInterval": 1000}
CLUSTER, BROKER = "DefaultCluster", "broker-a"


def put_acked(replica, count, prefix):
    """``count`` messages on the master ``replica``, each acknowledged by its whole SyncStateSet:
    a put whose acknowledgement came after slaveTimeout (a starved slave on a busy machine)
    answers FLUSH_SLAVE_TIMEOUT though written; then the master's confirm offset (the least
    its SyncStateSet acknowledged) must still reach the end."""
    r = replica.put(TOPIC, 0, count, BODY, prefix)
    assert set(r["counts"]) <= {"PUT_OK", "FLUSH_SLAVE_TIMEOUT"} and sum(r["counts"].values()) == count, r["counts"]
    end = r["max_phy_offset"]
    replica.wait_until(lambda s: s["confirm_offset"] >= end, f"{replica.broker_id}'s confirm offset {end}")
    return r


def stop_in_sync(g, master, slave) -> None:
    """Stop ``slave`` cleanly once it holds the master's log and its confirm offset (a slave
    whose confirm offset lags its log does not shut down), and the master's SyncStateSet
    has dropped it."""
    end = g.wait_caught_up(master)
    g[slave].wait_until(lambda s: s["confirm_offset"] == end, f"{slave}'s confirm offset {end}")
    assert g[slave].quit() == 0
    g[master].wait_until(lambda s: slave not in s["local_sync_state_set"], f"{master}'s SyncStateSet without {slave}")


def controller_events(master_state: dict) -> list[dict]:
    """What the controller's log holds for this broker set: the three registrations, the
    election of 1 at epoch 1, then each SyncStateSet change the master reported and the
    controller accepted (the harness accepts them as the controller would)."""
    out = [{"event": "apply", "clusterName": CLUSTER, "brokerName": BROKER, "brokerAddress": f"127.0.0.1:{30000 + i}",
            "newBrokerId": i, "registerCheckCode": f"k{i}"} for i in (1, 2, 3)]
    out.append({"event": "elect", "brokerName": BROKER, "newMasterElected": True, "newMasterBrokerId": 1})
    for r in master_state["roles"]["reported"]:
        if r["accepted"]:
            out.append({"event": "alter", "brokerName": BROKER, "newSyncStateSet": r["sync_state_set"]})
    return out


def elect_plan(ctl: str, roots: list[str], *args) -> tuple[int, dict, dict, dict]:
    r = invoke_clean("controller", "elect-plan", ctl, *roots, *map(str, args), "-f", "json")
    assert r.exit_code in (0, 1), r.output
    rows = json.loads(r.stdout)
    verdict, = [x for x in rows if x["row"] == "verdict"]
    cands = {x["broker"]: x for x in rows if x["row"] == "candidate"}
    losses = {(x["candidate"], x["broker"]): x for x in rows if x["row"] == "loss"}
    return r.exit_code, verdict, cands, losses


def test_unclean_election_of_the_longest_slave_cuts_the_dead_masters_acknowledged_tail(built, group, tmp_path):
    """1 master at epoch 1 (SyncStateSet {1, 2, 3}): 40 messages on all three (to A); 2 stops
    ({1, 3}): 30 more, acknowledged by 1 and 3 (to B); 3 stops ({1}): 20 more, acknowledged by
    1 alone (to C); 1 crashes. The controller's SyncStateSet is {1}, its only member dead.

    Plan and RocketMQ: without unclean election nobody may be elected (electMaster:
    CONTROLLER_MASTER_NOT_AVAILABLE); with it, 3 (epoch 1 like 2, the longer log) at epoch 2,
    which cuts from 1 its tail past B (C - B bytes, 20 messages, all acknowledged) and nothing
    from 2; electing 2 instead would cut 1 to A (every acknowledged byte past A) and 3 to A.
    Then: 3 master at epoch 2 (epochs 1-0, 2-B); 2's handshake: truncateOffset A, nothing
    cut; 1's: truncateOffset B, its tail cut; the 20 acknowledged messages are not on 3."""
    g = group
    for r in g.replicas.values():
        r.options.update(OPTIONS)
    g.start_master_and_slaves(master_id=1, epoch=1)
    g[1].wait_until(lambda s: s["local_sync_state_set"] == [1, 2, 3], "SyncStateSet {1,2,3}")
    a = put_acked(g[1], 40, "u1")["max_phy_offset"]
    stop_in_sync(g, 1, 2)
    b = put_acked(g[1], 30, "u2")["max_phy_offset"]
    stop_in_sync(g, 1, 3)
    tail = put_acked(g[1], 20, "u3")  # (acknowledged by 1 alone: its SyncStateSet is {1})
    c = tail["max_phy_offset"]
    last = g[1].state()
    assert last["local_sync_state_set"] == [1] and last["roles"]["sync_state_set"] == [1]
    g[1].kill()
    assert a < b < c

    ctl = str(tmp_path / "ctl")
    events = controller_events(last)
    assert events[-1]["newSyncStateSet"] == [1]
    javarocketmq5.write_log(built, ctl, [{"term": 1}] + [{"term": 1, **e} for e in events])
    roots = [g[i].root for i in (1, 2, 3)]

    code, verdict, cands, _ = elect_plan(ctl, roots, "--down", 1)
    assert code == 1 and not verdict["ok"] and verdict["controller_choice"] is None
    assert cands[2]["may_elect"] == cands[3]["may_elect"] == "no"
    code, verdict, cands, losses = elect_plan(ctl, roots, "--down", 1, "--unclean")
    assert code == 1 and not verdict["ok"], verdict  # (every choice cuts acknowledged messages)
    assert verdict["controller_choice"] == 3 and cands[3]["may_elect"] == cands[2]["may_elect"] == "unclean"
    assert cands[3]["new_epoch"] == 2
    cut1 = losses[(3, 1)]
    assert (cut1["truncate_to"], cut1["cut_bytes"], cut1["messages"]) == (b, c - b, 20)
    assert (cut1["acked_bytes"], cut1["acked_messages"]) == (c - b, 20)
    assert (3, 2) not in losses and cands[3]["losing"] == [1]  # (2 loses nothing: no loss row)
    assert (cands[3]["cut_bytes"], cands[3]["acked_bytes"], cands[3]["acked_messages"]) == (c - b, c - b, 20)
    # (electing 2 instead: 1 to A, every byte past A acknowledged; 3 to A, not a SyncStateSet member's)
    assert (losses[(2, 1)]["truncate_to"], losses[(2, 1)]["cut_bytes"], losses[(2, 1)]["acked_bytes"]) == \
        (a, c - a, c - a)
    assert (losses[(2, 3)]["truncate_to"], losses[(2, 3)]["cut_bytes"], losses[(2, 3)]["messages"]) == (a, b - a, 30)

    # mq align on the same files, 3 as master at epoch 2
    r = invoke_clean("mq", "align", g[3].root, g[1].root, g[2].root, "--master", g[3].root, "--master-epoch", 2,
                     "-f", "json")
    rows = {x["replica"]: x for x in json.loads(r.stdout) if x["row"] == "replica"}
    assert r.exit_code == 1
    assert (rows[g[1].root]["truncate_to"], rows[g[1].root]["cut_bytes"]) == (b, c - b)
    assert (rows[g[2].root]["truncate_to"], rows[g[2].root]["cut_bytes"]) == (None, 0)
    cut, = [x for x in json.loads(r.stdout) if x["row"] == "cut"]
    assert (cut["replica"], cut["count"], cut["first_queue_offset"], cut["last_queue_offset"]) == \
        (g[1].root, 20, tail["queue_offsets"][0], tail["queue_offsets"][-1])

    # RocketMQ's controller, on the heartbeats of the live replicas
    for i in (2, 3):
        g[i].start()
    live = {i: (g[i].state()["last_epoch"], g[i].state()["max_phy_offset"], INT_MAX) for i in (2, 3)}
    assert live == {2: (1, a, INT_MAX), 3: (1, b, INT_MAX)}
    clean = rocketmq_elects(built, events, live, broker=BROKER, cluster=CLUSTER)
    assert clean["code"] == NOT_AVAILABLE and clean["masterBrokerId"] is None
    elected = rocketmq_elects(built, events, live, unclean=True, broker=BROKER, cluster=CLUSTER)
    assert elected["code"] == 0 and elected["masterBrokerId"] == 3 and elected["masterEpoch"] == 2

    # ... and what its brokers then do (ReplicasManager's steps; the set {3}, its epoch one past the last)
    sse = 1 + sum(e["event"] in ("elect", "alter") for e in events)
    g[3].auto_accept(True)
    m = g[3].master(elected["masterEpoch"], sse, [3])
    assert m["path"] == "changeToMaster" and [(e["epoch"], e["start"]) for e in m["epochs"]] == [(1, 0), (2, b)]
    g[2].slave(g[3], 2)
    g[2].wait_until(lambda s: g[2].run_handshakes(), "2's handshake with 3")
    assert g[2].run_handshakes()[0] == a  # (its consistent point: its own end, nothing cut)
    assert g[1].start()["max_phy_offset"] == c  # (its recovery kept the tail elect-plan read)
    g[1].slave(g[3], 2)
    g[1].wait_until(lambda s: g[1].run_handshakes(), "1's handshake with 3")
    assert g[1].run_handshakes()[0] == b
    g[1].wait_log(f"Truncate slave log to {b} success", "1's truncation")
    g[3].wait_until(lambda s: s["local_sync_state_set"] == [1, 2, 3], "3's SyncStateSet {1,2,3}")
    after = put_acked(g[3], 10, "u4")
    end = g.wait_caught_up(3)
    assert end == after["max_phy_offset"]

    # the 20 acknowledged messages elect-plan counted are gone: their queue offsets hold the new ones
    top = g[3].wait_until(lambda s: s["queues"].get(f"{TOPIC}/0") == 80, "3's queue dispatched")["queues"][f"{TOPIC}/0"]
    served = g[3].read_queue(TOPIC, 0, 0, top)
    keys = [m["keys"] for m in served]
    assert keys == [f"u1-{i}" for i in range(40)] + [f"u2-{i}" for i in range(30)] + [f"u4-{i}" for i in range(10)]
    assert after["queue_offsets"][0] == tail["queue_offsets"][0] == 70
    for i in (1, 2):
        g[i].wait_until(lambda s: s["confirm_offset"] == end, f"{i}'s confirm offset at {end}")
    for i in (1, 2, 3):
        assert g[i].quit() == 0
        assert g[i].epoch_file()["entries"] == [(1, 0), (2, b)]
    assert len({commitlog_digest(g[i].root, end) for i in (1, 2, 3)}) == 1


def test_unclean_election_of_an_older_epoch_cuts_the_dead_masters_whole_epoch(built, group, tmp_path):
    """The newest epoch held only by a dead master. 1 master at epoch 1 ({1, 2, 3}): 30
    messages on all (to A); 2 stops before the controller takes 1's report of it; 4 more on 1,
    copied by 3, each waiting in vain for 2's ack (FLUSH_SLAVE_TIMEOUT: not acknowledged; to
    B); 1 and 3 crash. The controller elects 2 (in sync, the only one alive) at epoch 2
    (``2-A``): 25 messages acknowledged by 2 alone (to C); 2 crashes: its SyncStateSet {2}.

    Unclean, elect-plan and RocketMQ's electMaster both elect one of 1 and 3 (epoch 1; the
    longer log, or by the policy's tie rules) at epoch 3; neither holds epoch 2, so 2's
    handshake finds its consistent point in epoch 1, at A: all 25 acknowledged messages of
    epoch 2 are cut (elect-plan: C - A acknowledged bytes), while the 4 unacknowledged ones of
    epoch 1 stay. RocketMQ's truncateOffset lines and the new master's queue say the same."""
    g = group
    for r in g.replicas.values():
        r.options.update(OPTIONS)
    g.start_master_and_slaves(master_id=1, epoch=1)
    g[1].wait_until(lambda s: s["local_sync_state_set"] == [1, 2, 3], "SyncStateSet {1,2,3}")
    a = put_acked(g[1], 30, "v1")["max_phy_offset"]
    assert g.wait_caught_up(1) == a
    g[2].wait_until(lambda s: s["confirm_offset"] == a, f"2's confirm offset {a}")
    g[1].auto_accept(False)  # (its report that 2 left does not reach the controller)
    assert g[2].quit() == 0
    r = g[1].put(TOPIC, 0, 4, BODY, "v2")
    assert r["counts"] == {"FLUSH_SLAVE_TIMEOUT": 4}, r["counts"]
    b = r["max_phy_offset"]
    g[3].wait_until(lambda s: s["max_phy_offset"] == b, f"3 at {b}")
    events = controller_events(g[1].state())
    assert events[-1]["newSyncStateSet"] == [1, 2, 3]
    for i in (1, 3):
        g[i].kill()

    # the controller elects 2 (in the SyncStateSet, the only one alive) at epoch 2
    g[2].start()
    e2 = rocketmq_elects(built, events, {2: (1, a, INT_MAX)}, broker=BROKER, cluster=CLUSTER)
    assert e2["code"] == 0 and (e2["masterBrokerId"], e2["masterEpoch"]) == (2, 2)
    events.append({"event": "elect", "brokerName": BROKER, "newMasterElected": True, "newMasterBrokerId": 2})
    g[2].auto_accept(True)
    m = g[2].master(2, 1 + sum(e["event"] in ("elect", "alter") for e in events), [2])
    assert [(e["epoch"], e["start"]) for e in m["epochs"]] == [(1, 0), (2, a)]
    epoch2 = put_acked(g[2], 25, "v3")  # (acknowledged by 2 alone: its SyncStateSet is {2})
    c = epoch2["max_phy_offset"]
    g[2].kill()

    ctl = str(tmp_path / "ctl")
    javarocketmq5.write_log(built, ctl, [{"term": 1}] + [{"term": 1, **e} for e in events])
    roots = [g[i].root for i in (1, 2, 3)]
    code, verdict, cands, _ = elect_plan(ctl, roots, "--down", 2)
    assert code == 1 and verdict["controller_choice"] is None and verdict["sync_state_set"] == [2]
    code, verdict, cands, losses = elect_plan(ctl, roots, "--down", 2, "--unclean")
    x = verdict["controller_choice"]
    y = 4 - x  # (the other of 1 and 3)
    assert code == 1 and not verdict["ok"] and x in (1, 3) and cands[x]["new_epoch"] == 3
    for cand in (1, 3):  # (either way, 2 loses its whole epoch: every byte acknowledged)
        lost = losses[(cand, 2)]
        assert (lost["truncate_to"], lost["cut_bytes"], lost["messages"]) == (a, c - a, 25)
        assert (lost["acked_bytes"], lost["acked_messages"]) == (c - a, 25)
    r = invoke_clean("mq", "align", g[x].root, g[y].root, g[2].root, "--master", g[x].root, "--master-epoch", 3,
                     "-f", "json")
    rows = {row["replica"]: row for row in json.loads(r.stdout) if row["row"] == "replica"}
    assert (rows[g[2].root]["truncate_to"], rows[g[2].root]["cut_bytes"]) == (a, c - a)
    y_point = rows[g[y].root]["truncate_to"]
    y_point = rows[g[y].root]["max_offset"] if y_point is None else y_point

    # RocketMQ's controller on the live replicas' heartbeats, then its brokers
    for i in (1, 3):
        g[i].start()
    live = {i: (g[i].state()["last_epoch"], g[i].state()["max_phy_offset"], INT_MAX) for i in (1, 3)}
    assert live[1] == (1, b) + (INT_MAX,) and live[3][:2] == (1, b)
    assert rocketmq_elects(built, events, live, broker=BROKER, cluster=CLUSTER)["code"] == NOT_AVAILABLE
    e3 = rocketmq_elects(built, events, live, unclean=True, broker=BROKER, cluster=CLUSTER)
    assert e3["code"] == 0 and (e3["masterBrokerId"], e3["masterEpoch"]) == (x, 3)
    g[x].auto_accept(True)
    m = g[x].master(3, 1 + sum(e["event"] in ("elect", "alter") for e in events) + 1, [x])
    assert [(e["epoch"], e["start"]) for e in m["epochs"]] == [(1, 0), (3, b)]
    g[y].slave(g[x], 3)
    g[y].wait_until(lambda s: g[y].run_handshakes(), f"{y}'s handshake with {x}")
    assert g[y].run_handshakes()[0] == y_point == b
    assert g[2].start()["max_phy_offset"] == c
    g[2].slave(g[x], 3)
    g[2].wait_until(lambda s: g[2].run_handshakes(), f"2's handshake with {x}")
    assert g[2].run_handshakes()[0] == a
    g[2].wait_log(f"Truncate slave log to {a} success", "2's truncation")
    g[x].wait_until(lambda s: s["local_sync_state_set"] == [1, 2, 3], f"{x}'s SyncStateSet {{1,2,3}}")
    after = put_acked(g[x], 5, "v4")
    end = g.wait_caught_up(x)
    assert end == after["max_phy_offset"]

    # the new master serves epoch 1's unacknowledged tail, and none of epoch 2's acknowledged messages
    top = g[x].wait_until(lambda s: s["queues"].get(f"{TOPIC}/0") == 39, f"{x}'s queue dispatched")["queues"]
    served = [m["keys"] for m in g[x].read_queue(TOPIC, 0, 0, top[f"{TOPIC}/0"])]
    assert served == [f"v1-{i}" for i in range(30)] + [f"v2-{i}" for i in range(4)] + [f"v4-{i}" for i in range(5)]
    assert epoch2["queue_offsets"][0] == 30  # (2 had given them the queue offsets the v2 messages hold)
    for i in (1, 2, 3):
        if i != x:
            g[i].wait_until(lambda s: s["confirm_offset"] == end, f"{i}'s confirm offset at {end}")
    for i in (1, 2, 3):
        assert g[i].quit() == 0
        assert g[i].epoch_file()["entries"] == [(1, 0), (3, b)]
    assert len({commitlog_digest(g[i].root, end) for i in (1, 2, 3)}) == 1
