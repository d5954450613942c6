"""``controller events`` and ``controller state`` against RocketMQ's own code: a controller log
written by RocketMQ 5.3.3's event classes and EventSerializer into DLedger 0.3.1.2's own
file store, and ReplicasInfoManager's tables after applying each entry as
DLedgerControllerStateMachine.onApply does (tests/support/javarocketmq5.py builds them from the
mirrors). Every event is reproduced; the state equals RocketMQ's after every entry."""

from __future__ import annotations

import json
import os
import random

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from store.filestore import FileStore
from store.format import HEADER_SIZE
from store.rocketmq.controller import entries
from store.rocketmq.controller_state import ControllerState
from store.rocketmq.controller_check import read_epoch_file
from tests.support import controller_encode, javarocketmq5
from tests.support.commands import invoke_clean
from tests.support.javabuild import Unavailable

runner = CliRunner()


@pytest.fixture(scope="module")
def built():
    try:
        return javarocketmq5.build()
    except Unavailable as exc:
        pytest.skip(str(exc))


def ev(term, kind, **fields):
    return {"term": term, "event": kind, **fields}


A1, A2 = "10.0.0.1:30911", "10.0.0.2:30911"
ENTRIES = [
    {"term": 1},
    ev(1, "apply", clusterName="c1", brokerName="b1", brokerAddress=A1, newBrokerId=1, registerCheckCode="k1"),
    ev(1, "elect", brokerName="b1", newMasterElected=True, newMasterBrokerId=1),
    ev(1, "apply", clusterName="c1", brokerName="b1", brokerAddress=A2, newBrokerId=2, registerCheckCode="k2"),
    ev(1, "alter", brokerName="b1", newSyncStateSet=[1, 2]),
    ev(1, "apply", clusterName="c1", brokerName="b1", brokerAddress="10.0.0.7:1", newBrokerId=2,
       registerCheckCode="again"),
    {"term": 2},
    ev(2, "elect", brokerName="b1", newMasterElected=False),
    ev(2, "elect", brokerName="b1", newMasterElected=True, newMasterBrokerId=2),
    ev(2, "update", clusterName="c1", brokerName="b1", brokerAddress="10.0.0.9:30911", brokerId=1),
    ev(2, "update", clusterName="c1", brokerName="nobody", brokerAddress="x:1", brokerId=1),  # NPE in RocketMQ
    ev(2, "alter", brokerName="nobody", newSyncStateSet=[1]),
    ev(2, "elect", brokerName="nobody", newMasterElected=True, newMasterBrokerId=1),
    ev(2, "apply", clusterName="c2", brokerName="b2", brokerAddress="10.0.1.1:30911", newBrokerId=1,
       registerCheckCode="x1"),
    ev(2, "elect", brokerName="b2", newMasterElected=True, newMasterBrokerId=1),
    ev(3, "apply", clusterName="c2", brokerName="b3", brokerAddress="10.0.2.1:30911", newBrokerId=1,
       registerCheckCode="y1"),
    ev(3, "elect", brokerName="b3", newMasterElected=True, newMasterBrokerId=1),
    ev(3, "alter", brokerName="b3", newSyncStateSet=[1, 2]),  # (2 is no registered id: RocketMQ takes it)
    ev(3, "clean", brokerName="b3", brokerIdSetToClean=[1]),  # its replica table empties, its sync set does not
    ev(3, "clean", brokerName="b1", brokerIdSetToClean=[1]),
    ev(3, "clean", brokerName="b2", brokerIdSetToClean=[]),  # the whole set
    {"term": 3, "raw": b"\x00"},
    {"term": 3, "raw": b"\x00\x09{}"},
    {"term": 4, "raw": b"\x00\x03{not json"},
    ev(4, "apply", clusterName="c1", brokerName="b1", brokerAddress="10.0.0.3:30911", newBrokerId=3,
       registerCheckCode="k3"),
]


@pytest.fixture(scope="module")
def written(built, tmp_path_factory):
    base = str(tmp_path_factory.mktemp("controller"))
    return base, javarocketmq5.write_log(built, base, ENTRIES)


def run(*args):
    r = invoke_clean(*args)
    assert r.exit_code == 0, r.output + r.stderr
    return r


def ours(row: dict) -> dict:
    """Our state row in the shape of ControllerLogWriter's (RocketMQ's tables)."""
    out = {"inReplicaInfoTable": row["next_assign_broker_id"] is not None,
           "inSyncStateSetInfoTable": row["master_epoch"] is not None, "clusterName": row["cluster_name"]}
    if out["inReplicaInfoTable"]:
        out["nextAssignBrokerId"] = row["next_assign_broker_id"]
        out["brokers"] = [{"brokerId": b["broker_id"], "address": b["address"],
                           "registerCheckCode": b["register_check_code"]} for b in row["brokers"]]
    if out["inSyncStateSetInfoTable"]:
        out.update(masterBrokerId=row["master_broker_id"], masterEpoch=row["master_epoch"],
                   syncStateSet=row["sync_state_set"], syncStateSetEpoch=row["sync_state_set_epoch"])
    return out


def test_events_reproduce_what_rocketmq_wrote(written):
    base, java = written
    assert [(j["index"], j["term"]) for j in java] == [(i, e["term"]) for i, e in enumerate(ENTRIES)]
    rows = json.loads(run("controller", "events", base, "-f", "json").stdout)
    assert [(r["index"], r["term"]) for r in rows] == [(j["index"], j["term"]) for j in java]
    names = {"apply": "ApplyBrokerIdEvent", "elect": "ElectMasterEvent", "alter": "AlterSyncStateSetEvent",
             "clean": "CleanBrokerDataEvent", "update": "UpdateBrokerAddressEvent"}
    for spec, row in zip(ENTRIES, rows):
        if "event" in spec:
            want = {k: v for k, v in spec.items() if k not in ("term", "event", "brokerName")}
            assert (row["type"], row["broker_name"], row["fields"]) == (names[spec["event"]], spec["brokerName"],
                                                                       want), row
        elif "raw" in spec:
            assert row["type"] == "not-an-event" and row["note"], row
        else:
            assert row["type"] == "leader-proposal", row


def test_state_equals_replicas_info_manager_after_every_entry_up_to_the_first_it_fails_on(written):
    """ControllerLogWriter applies every entry (it catches what applyEvent throws); a real
    controller (DLedger 0.3.1.2's StateMachineCaller) applies nothing past the first entry
    that throws: our state stays RocketMQ's state from before that entry."""
    base, java = written
    first_error = next(j["index"] for j in java if j["error"])
    for j in java:
        r = run("controller", "state", base, "--at-index", j["index"], "-f", "json")
        got = {row["broker_name"]: ours(row) for row in json.loads(r.stdout)}
        want = j["state"] if j["index"] < first_error else java[first_error - 1]["state"]
        assert got == want, f"after index {j['index']}"
        if j["index"] >= first_error:  # where RocketMQ's apply throws, a note says so, and that it stops there
            assert f"Note: index {first_error}: " in r.stderr and "fails" in r.stderr, (j, r.stderr)
            assert "the controller stops at this entry" in r.stderr


def test_state_at_the_end_and_the_errors_rocketmq_met(written):
    base, java = written
    assert [j["index"] for j in java if j["error"]] == [10, 21, 22, 23]
    r = run("controller", "state", base, "-f", "json")
    end = {row["broker_name"]: row for row in json.loads(r.stdout)}
    assert set(end) == {"b1"}  # (b2 and b3 registered past index 10, where the controller stops)
    assert (end["b1"]["master_broker_id"], end["b1"]["master_epoch"], end["b1"]["sync_state_set"]) == (2, 3, [2])
    assert "14 entries past it (index 11..24) never applied" in r.stderr


ENCODERS = {"apply": lambda s: controller_encode.apply_broker_id(s["clusterName"], s["brokerName"],
                                                                  s["brokerAddress"], s["newBrokerId"],
                                                                  s["registerCheckCode"]),
            "elect": lambda s: controller_encode.elect_master(s["brokerName"], s.get("newMasterBrokerId"),
                                                              s["newMasterElected"]),
            "alter": lambda s: controller_encode.alter_sync_state_set(s["brokerName"], s["newSyncStateSet"]),
            "clean": lambda s: controller_encode.clean_broker_data(s["brokerName"], s["brokerIdSetToClean"]),
            "update": lambda s: controller_encode.update_broker_address(s["clusterName"], s["brokerName"],
                                                                        s["brokerAddress"], s["brokerId"])}


def test_our_test_encoder_writes_the_bytes_rocketmq_writes(written):
    """tests/support/controller_encode.py (used where no JDK is) against EventSerializer's bytes."""
    base, _ = written
    with FileStore.open(os.path.join(base, "dledger-n0"), read_only=True) as store:
        for i, spec in enumerate(ENTRIES):
            if "event" in spec:
                assert store.get_bytes(i)[HEADER_SIZE:] == ENCODERS[spec["event"]](spec), spec


def test_epoch_files_written_by_rocketmq_read_and_check(built, written, tmp_path):
    base, java = written
    path = str(tmp_path / "broker" / "epochFileCheckpoint")
    os.makedirs(os.path.dirname(path))
    # b1's masterEpochs: 1 (broker 1), 2 (none elected), 3 (broker 2)
    assert javarocketmq5.write_epoch_file(built, path, [(1, 0), (3, 4096)]) == [True, True]
    assert read_epoch_file(os.path.dirname(path))[0] == [(1, 0), (3, 4096)]
    # (the log's index 10 is an entry RocketMQ's apply fails on: a finding of its own, b1's epochs come before it)
    r = runner.invoke(app, ["controller", "check", base, "--broker-store", f"b1={os.path.dirname(path)}", "-f",
                            "json"])
    assert r.exit_code == 1 and [(f["finding"], f["epoch"]) for f in json.loads(r.stdout)] == [("apply-stops", None)]
    assert javarocketmq5.write_epoch_file(built, path, [(4, 8192)]) == [True]  # (an epoch b1 never reached)
    r = runner.invoke(app, ["controller", "check", base, "--broker-store", f"b1={os.path.dirname(path)}", "-f",
                            "json"])
    assert r.exit_code == 1 and [(f["finding"], f["epoch"]) for f in json.loads(r.stdout)] == [
        ("apply-stops", None), ("epoch-unknown", 4)]


def _random_events(seed: int, n: int) -> list[dict]:
    rnd = random.Random(seed)
    names, out, term = ["b1", "b2", "b3"], [], 1
    for _ in range(n):
        if rnd.random() < 0.05:
            term += 1
            out.append({"term": term})
            continue
        name, kind = rnd.choice(names), rnd.choice(["apply", "apply", "elect", "elect", "alter", "update", "clean"])
        ids = sorted(rnd.sample(range(1, 5), rnd.randint(0, 3)))
        one = rnd.randint(1, 4)
        if kind == "apply":
            address = f"10.0.0.{one}:{rnd.randint(1, 9)}"
            out.append(ev(term, kind, clusterName="c", brokerName=name, brokerAddress=address, newBrokerId=one,
                          registerCheckCode=f"k{rnd.randint(0, 99)}"))
        elif kind == "elect":
            elected = rnd.random() < 0.8
            out.append(ev(term, kind, brokerName=name, newMasterElected=elected,
                          **({"newMasterBrokerId": one} if elected else {})))
        elif kind == "alter":
            out.append(ev(term, kind, brokerName=name, newSyncStateSet=ids))
        elif kind == "update" and name != "b3":  # (b3 may be unknown: RocketMQ's apply throws, as tested above)
            out.append(ev(term, kind, clusterName="c", brokerName=name, brokerAddress=f"10.1.0.{one}:1", brokerId=one))
        elif kind == "clean":
            out.append(ev(term, kind, brokerName=name, brokerIdSetToClean=ids if rnd.random() < 0.7 else []))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_logs_replay_as_replicas_info_manager_applies_them(built, tmp_path, seed):
    """300 random events (seeded): our replay's tables equal RocketMQ's after every entry."""
    specs = _random_events(seed, 300)
    java = javarocketmq5.write_log(built, str(tmp_path), specs)
    assert len(java) == len(specs)
    state = ControllerState()
    for j, e in zip(java, entries(str(tmp_path / "dledger-n0"))):
        assert (e.index, e.term) == (j["index"], j["term"])
        note, fails = state.apply(e.decoded)
        got = {row["broker_name"]: ours(row) for row in state.broker_rows()}
        assert got == j["state"], f"seed {seed}, after index {j['index']} ({specs[j['index']]})"
        assert fails == bool(j["error"]), (j, note)
