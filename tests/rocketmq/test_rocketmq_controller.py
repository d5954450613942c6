"""``controller events`` and ``controller state`` over a controller log written by our own
encoder (tests/support/controller_encode.py: fastjson's default output, checked field by field
against apache/rocketmq rocketmq-all-5.3.3's event classes).

The replay rules checked, in controller/src/main/java/org/apache/rocketmq/controller/impl/
manager/ at rocketmq-all-5.3.3 (ReplicasInfoManager.java unless said):

- applyEvent (l. 491-512): dispatch by type; DLedgerControllerStateMachine.onApply skips
  empty bodies (the new leader's proposal);
- handleApplyBrokerId (l. 522-540): a broker set's first id creates both tables; a known
  set adds an id not yet registered, a registered one is ignored; BrokerReplicaInfo.addBroker
  counts nextAssignBrokerId up from 1;
- handleElectMaster (l. 550-572): elected: master = the id, masterEpoch + 1, syncStateSet =
  {id}, syncStateSetEpoch + 1 (SyncStateInfo.updateMasterInfo, updateSyncStateSetInfo); none
  elected: master = null, masterEpoch + 1, the set kept; an unknown set: ignored;
- handleAlterSyncStateSet (l. 514-520): a registered set's syncStateSet replaced, its epoch
  + 1; an unknown set: ignored;
- handleUpdateBrokerAddress (l. 542-548, BrokerReplicaInfo.updateBrokerAddress): a
  registered id's address changes, its register check code is kept;
- handleCleanBrokerDataEvent (l. 574-599): an empty id set removes the whole broker set;
  ids remove those from both tables (no epoch changes); a table left empty is dropped.
"""

from __future__ import annotations

import json
import os

import pytest

from store.metafiles import write_checkpoint
from store.rocketmq.controller import decode_event
from tests.support.commands import invoke_clean as run
from tests.support.controller_encode import (alter_sync_state_set, apply_broker_id, clean_broker_data, elect_master,
                                             update_broker_address, write_controller_log)

A1, A2, A9 = "10.0.0.1:30911", "10.0.0.2:30911", "10.0.0.9:30911"
LOG = [
    (1, b""),  # 0 the leader's proposal
    (1, apply_broker_id("c1", "b1", A1, 1, "code1")),  # 1
    (1, elect_master("b1", 1)),  # 2
    (1, apply_broker_id("c1", "b1", A2, 2, "code2")),  # 3
    (1, alter_sync_state_set("b1", {1, 2})),  # 4
    (1, apply_broker_id("c1", "b1", "10.0.0.7:1", 2, "other")),  # 5 id 2 again: ignored
    (2, b""),  # 6 a new leader
    (2, elect_master("b1", None, elected=False)),  # 7 none elected
    (2, elect_master("b1", 2)),  # 8
    (2, update_broker_address("c1", "b1", A9, 1)),  # 9
    (2, alter_sync_state_set("nobody", {1})),  # 10 unknown set: ignored
    (2, apply_broker_id("c1", "b2", "10.0.1.1:30911", 1, "x1")),  # 11
    (2, elect_master("b2", 1)),  # 12
    (3, clean_broker_data("b1", {1})),  # 13
    (3, clean_broker_data("b2")),  # 14 the whole set
    (3, b"\x00"),  # 15 garbage
    (3, b"\x00\x09{}"),  # 16 unknown type id
    (3, b"\x00\x03{not json"),  # 17 bad JSON
]


@pytest.fixture
def node(tmp_path):
    return write_controller_log(str(tmp_path / "ctl"), LOG)


def state(node, *extra):
    r = run("controller", "state", node, "-f", "json", *extra)
    assert r.exit_code == 0, r.output + r.stderr
    return {row["broker_name"]: row for row in json.loads(r.stdout)}, r.stderr


def brokers(*triples):
    return [{"broker_id": i, "address": a, "register_check_code": c} for i, a, c in triples]


def test_every_entry_is_a_row_with_its_event(node):
    r = run("controller", "events", node, "-f", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [row["index"] for row in rows] == list(range(len(LOG)))
    assert [row["term"] for row in rows] == [t for t, _ in LOG]
    assert rows[0]["type"] == rows[6]["type"] == "leader-proposal"
    assert rows[1] == {**rows[1], "type": "ApplyBrokerIdEvent", "type_id": 2, "broker_name": "b1",
                       "fields": {"clusterName": "c1", "brokerAddress": A1, "newBrokerId": 1,
                                  "registerCheckCode": "code1"}}
    assert rows[7]["fields"] == {"newMasterElected": False}  # (no newMasterBrokerId: none was elected)
    assert rows[8]["fields"] == {"newMasterElected": True, "newMasterBrokerId": 2}
    assert rows[4]["fields"] == {"newSyncStateSet": [1, 2]}
    assert rows[14]["fields"] == {"brokerIdSetToClean": []}
    assert rows[9]["fields"] == {"clusterName": "c1", "brokerAddress": A9, "brokerId": 1}
    assert [(rows[i]["type"], rows[i]["type_id"]) for i in (15, 16, 17)] == [
        ("not-an-event", None), ("not-an-event", 9), ("not-an-event", 3)]
    assert "shorter than an event type id" in rows[15]["note"]
    assert "unknown event type id 9" in rows[16]["note"]
    assert "ElectMasterEvent" in rows[17]["note"] and "malformed" in rows[17]["note"]


def test_filters_by_broker_type_and_index(node):
    r = run("controller", "events", node, "--broker", "b2", "-f", "json")
    assert [row["index"] for row in json.loads(r.stdout)] == [11, 12, 14]
    r = run("controller", "events", node, "--type", "elect-master", "--type", "6", "-f", "json")
    assert [row["index"] for row in json.loads(r.stdout)] == [2, 7, 8, 9, 12, 17]  # (17: type 3, no event)
    r = run("controller", "events", node, "--type", "ELECT_MASTER_EVENT", "--from-index", 3, "--to-index", 8,
            "-f", "jsonl")
    assert [json.loads(line)["index"] for line in r.stdout.splitlines()] == [7, 8]
    r = run("controller", "events", node, "--type", "VoteEvent")
    assert r.exit_code == 2 and "Error:" in r.stderr and "no controller event type" in r.stderr


def test_table_and_csv_show_fields_as_one_json_object(node):
    r = run("controller", "events", node, "--to-index", 2)
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["index", "term", "type", "broker_name", "fields", "note"]
    assert "ElectMasterEvent" in lines[-1] and '{"newMasterElected":true,"newMasterBrokerId":1}' in lines[-1]
    r = run("controller", "events", node, "--from-index", 4, "--to-index", 4, "-f", "csv")
    header, row = r.stdout.splitlines()
    assert header.startswith("index,term,pos,type,type_id,broker_name,fields,note")
    assert '"{""newSyncStateSet"":[1,2]}"' in row


def test_state_at_the_end(node):
    r = run("controller", "state", node, "-f", "csv")
    assert r.stdout.splitlines()[1].startswith("b1,c1,2,10.0.0.2:30911,3,2,3,2=10.0.0.2:30911/code2")
    s, err = state(node)
    assert set(s) == {"b1"}  # (b2 cleaned whole)
    assert s["b1"] == {"broker_name": "b1", "cluster_name": "c1", "master_broker_id": 2, "master_address": A2,
                       "master_epoch": 3, "sync_state_set": [2], "sync_state_set_epoch": 3,
                       "brokers": brokers((2, A2, "code2")), "next_assign_broker_id": 3}
    # the controller stops at the first entry its apply fails on: one line for it and what lies past it
    assert "index 15: RocketMQ's apply fails on this entry (applyEvent of null)" in err
    assert "2 entries past it (index 16..17) never applied" in err
    assert "index 16:" not in err and "index 17:" not in err
    assert "index 10: broker set nobody is not registered: ignored" in err
    assert "index 5: broker id 2 is already registered: ignored" in err


@pytest.mark.parametrize("at,expect", [
    (0, {}),
    (2, {"b1": (1, A1, 1, [1], 1, [(1, A1, "code1")])}),
    (4, {"b1": (1, A1, 1, [1, 2], 2, [(1, A1, "code1"), (2, A2, "code2")])}),
    (5, {"b1": (1, A1, 1, [1, 2], 2, [(1, A1, "code1"), (2, A2, "code2")])}),
    (7, {"b1": (None, None, 2, [1, 2], 2, [(1, A1, "code1"), (2, A2, "code2")])}),
    (9, {"b1": (2, A2, 3, [2], 3, [(1, A9, "code1"), (2, A2, "code2")])}),
    (12, {"b1": (2, A2, 3, [2], 3, [(1, A9, "code1"), (2, A2, "code2")]),
          "b2": (1, "10.0.1.1:30911", 1, [1], 1, [(1, "10.0.1.1:30911", "x1")])}),
    (13, {"b1": (2, A2, 3, [2], 3, [(2, A2, "code2")]),
          "b2": (1, "10.0.1.1:30911", 1, [1], 1, [(1, "10.0.1.1:30911", "x1")])}),
])
def test_state_at_an_index(node, at, expect):
    s, _ = state(node, "--at-index", at)
    got = {name: (row["master_broker_id"], row["master_address"], row["master_epoch"], row["sync_state_set"],
                  row["sync_state_set_epoch"],
                  [(b["broker_id"], b["address"], b["register_check_code"]) for b in row["brokers"]])
           for name, row in s.items()}
    assert got == expect


def test_history_of_a_broker_set(node):
    r = run("controller", "state", node, "--history", "--broker", "b1", "-f", "json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(row["index"], row["term"], row["master_broker_id"], row["master_epoch"]) for row in rows] == [
        (1, 1, None, 0), (2, 1, 1, 1), (3, 1, 1, 1), (4, 1, 1, 1), (5, 1, 1, 1), (7, 2, None, 2), (8, 2, 2, 3),
        (9, 2, 2, 3), (13, 3, 2, 3)]
    assert rows[5]["change"] == "master 1 -> none"
    assert rows[6]["change"] == "master none -> 2; syncStateSet [1, 2] -> [2]"
    r = run("controller", "state", node, "--history", "--broker", "b1")
    assert r.exit_code == 0 and "master none -> 2; syncStateSet [1, 2] -> [2]" in r.stdout
    r = run("controller", "state", node, "--history", "--broker", "b7")
    assert r.exit_code == 1 and "no event of the log names broker set b7" in r.stderr  # (as grep: issue 58)
    r = run("controller", "state", node, "--broker", "b7")
    assert r.exit_code == 1 and "no broker set b7 in the state" in r.stderr
    assert run("controller", "state", node, "--broker", "b1").exit_code == 0
    r = run("controller", "state", node, "--history")
    assert r.exit_code == 2 and "--broker" in r.stderr


def test_a_base_dir_of_several_controllers_reads_the_longest_log(tmp_path):
    base = str(tmp_path / "ctl")
    write_controller_log(base, LOG[:3], self_id="n0")
    write_controller_log(base, LOG[:5], self_id="n1")
    r = run("controller", "events", base, "-f", "json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)) == 5
    assert "reading dledger-n1" in r.stderr
    r = run("controller", "events", base, "--self-id", "n0", "-f", "json")
    assert len(json.loads(r.stdout)) == 3


@pytest.mark.parametrize("body", [b"\xff\xff\xff", b"\x00\x01\xc3\x28", b"\x00\x02[1,2]", b"\x00\x04{}",
                                  b"\x00\x02{\"newBrokerId\":\"x\"}", b"\x80\x00{}"])
def test_hostile_bodies_never_raise(body):
    d = decode_event(body)
    assert d.event is None and d.note


def test_entries_past_the_checkpoints_committed_index_are_said(node):
    _, err = state(node)
    assert "may not be committed" not in err
    write_checkpoint(node, len(LOG) - 1, 3)
    _, err = state(node)
    assert "Note: entries after index 3 (the checkpoint's committed index" in err
    _, err = state(node, "--at-index", 3)
    assert "may not be committed" not in err


@pytest.mark.parametrize("where", [0, 20, 60, 300, -10])
def test_damaged_data_files_are_rows_not_tracebacks(node, where):
    path = os.path.join(node, "data", sorted(os.listdir(os.path.join(node, "data")))[0])
    with open(path, "r+b") as fh:
        fh.seek(where if where >= 0 else os.path.getsize(path) + where)
        fh.write(b"\xde\xad\xbe\xef" * 4)
    for args in (["events"], ["state"], ["state", "--history", "--broker", "b1"]):
        r = run("controller", *args, node, "-f", "json")
        assert r.exit_code in (0, 1), r.output + r.stderr
        if r.exit_code == 1:
            assert r.stderr.startswith("Error: ") and len(r.stderr.splitlines()) == 1, r.stderr


def test_an_entry_whose_body_crc_fails_says_so(node):
    rows = json.loads(run("controller", "events", node, "-f", "json").stdout)
    pos = rows[2]["pos"]
    path = f"{node}/data/00000000000000000000"
    with open(path, "r+b") as fh:
        fh.seek(pos + 48 + 10)
        fh.write(b"X")
    rows = json.loads(run("controller", "events", node, "-f", "json").stdout)
    assert rows[2]["type"] == "not-an-event" and "body CRC" in rows[2]["note"] and "damaged" in rows[2]["note"]
    assert rows[3]["type"] == "ApplyBrokerIdEvent"
