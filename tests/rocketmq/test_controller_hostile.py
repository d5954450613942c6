"""The controller commands on hostile logs (issue 59 items 3, 4 and 6; issue 58 items 7 and 8):

- an event with a field nested 5,000 deep (RocketMQ's EventSerializer does not read it:
  tests/java/test_controller_hostile_java.py), or an integer of 5,000 digits: a row that says
  so, never a RecursionError, in ``controller events/state/check`` and ``store inspect-data
  --decode rocketmq-controller``;
- an event without brokerName beside one with it: no TypeError; the entry's apply fails as
  RocketMQ's does (a NullPointerException in its ConcurrentHashMaps);
- the controller stops at the first entry its apply fails on (DLedger 0.3.1.2 applies
  nothing past it): the state before it, and one line for what lies past it, not a line per
  entry;
- a log that is no controller's (a garbage data file, bodies that are no events): one
  error line, exit 1; an empty log is still an empty controller log;
- an epochFileCheckpoint that is a FIFO or a link to /dev/zero: a finding, never a hang.

Plus hypothesis: random event shapes (fields missing, of other types, nested, huge) through
decode_event and the replay, which never raise.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.rocketmq.controller import EVENT_TYPES, NOT_AN_EVENT, decode_event, looks_like_controller_log
from store.rocketmq.controller_state import ControllerState
from tests.support.commands import cli
from tests.support.commands import invoke_clean as run
from tests.support.controller_encode import (ENUM, alter_sync_state_set, apply_broker_id, clean_broker_data,
                                             elect_master, write_controller_log, write_epoch_file)

A1, A2 = "10.0.0.1:30911", "10.0.0.2:30911"


def raw_event(tid: int, props: dict) -> bytes:
    """An event body with ``props`` as they are (no null dropped, nothing sorted)."""
    return tid.to_bytes(2, "big") + json.dumps({**props, "eventType": ENUM[tid]}).encode()


def deep(n: int) -> str:
    return '{"x":' * n + "1" + "}" * n


DEEP = (3).to_bytes(2, "big") + ('{"brokerName":"b1","eventType":"ELECT_MASTER_EVENT","ignored":' + deep(5000)
                                 + ',"newMasterBrokerId":2,"newMasterElected":true}').encode()
HUGE = (3).to_bytes(2, "big") + b'{"brokerName":"b1","newMasterBrokerId":' + b"9" * 5000 + b',"newMasterElected":true}'
BASE = [
    (1, b""),  # 0
    (1, apply_broker_id("c1", "b1", A1, 1, "k1")),  # 1
    (1, apply_broker_id("c1", "b1", A2, 2, "k2")),  # 2
    (1, elect_master("b1", 1)),  # 3: epoch 1
]


def state(node, *extra, code=0):
    r = run("controller", "state", node, "-f", "json", *extra)
    assert r.exit_code == code, r.output + r.stderr
    return {row["broker_name"]: row for row in json.loads(r.stdout)} if r.stdout.strip() else {}, r.stderr


@pytest.mark.parametrize("bad,why", [(DEEP, "JSON nested 5001 deep"), (HUGE, "newMasterBrokerId")])
def test_deep_or_huge_json_is_a_row_and_the_controller_stops_there(tmp_path, bad, why):
    node = write_controller_log(str(tmp_path / "c"), BASE + [(1, bad), (2, elect_master("b1", 2))])
    r = run("controller", "events", node, "-f", "json")
    assert r.exit_code == 0, r.output + r.stderr
    rows = json.loads(r.stdout)
    assert rows[4]["type"] == NOT_AN_EVENT and rows[4]["type_id"] == 3 and why in rows[4]["note"], rows[4]
    assert rows[5]["type"] == "ElectMasterEvent"
    s, err = state(node)
    assert s["b1"]["master_broker_id"] == 1 and s["b1"]["master_epoch"] == 1  # (index 5 is never applied)
    assert "index 4: RocketMQ's apply fails on this entry" in err and "1 entry past it (index 5) never applied" in err
    r = run("store", "inspect-data", node, "--decode", "rocketmq-controller", "-f", "json")
    assert r.exit_code == 0, r.output + r.stderr
    got = [row for row in json.loads(r.stdout) if row.get("kind") == "entry"]
    assert got[4]["type"] == NOT_AN_EVENT and why in got[4]["event_note"]
    write_epoch_file(str(tmp_path / "b"), [(1, 0), (2, 100)])
    r = run("controller", "check", node, "--broker-store", f"b1={tmp_path / 'b'}", "-f", "json")
    assert r.exit_code == 1
    assert [(f["finding"], f["epoch"]) for f in json.loads(r.stdout)] == [("apply-stops", None), ("epoch-unknown", 2)]


def test_an_event_without_broker_name_beside_one_with_it(tmp_path):
    node = write_controller_log(str(tmp_path / "c"), BASE + [
        (1, raw_event(2, {"clusterName": "c1", "brokerAddress": A2, "newBrokerId": 1, "registerCheckCode": "k"})),
        (1, elect_master("b1", 2))])  # 4: an ApplyBrokerIdEvent without brokerName; 5
    r = run("controller", "events", node, "-f", "json")
    assert r.exit_code == 0, r.output + r.stderr
    rows = json.loads(r.stdout)
    assert rows[4]["broker_name"] is None and rows[4]["type"] == "ApplyBrokerIdEvent"
    r = run("controller", "events", node, "--broker", "b1", "-f", "json")
    assert [row["index"] for row in json.loads(r.stdout)] == [1, 2, 3, 5]
    s, err = state(node)
    assert set(s) == {"b1"} and s["b1"]["master_epoch"] == 1
    assert "index 4: ApplyBrokerIdEvent without brokerName: RocketMQ's apply fails here (NullPointerException)" in err
    r = run("controller", "state", node, "--history", "--broker", "b1", "-f", "json")
    assert [row["index"] for row in json.loads(r.stdout)] == [1, 2, 3]


@pytest.mark.parametrize("kind", [1, 2, 5, 6])
def test_every_type_without_broker_name_fails_its_apply(kind):
    st_ = ControllerState()
    st_.apply(decode_event(apply_broker_id("c1", "b1", A1, 1, "k1")))
    props = {1: {"newSyncStateSet": [1]}, 2: {"clusterName": "c", "brokerAddress": A2, "newBrokerId": 2,
                                             "registerCheckCode": "k"},
             5: {"brokerIdSetToClean": []}, 6: {"clusterName": "c", "brokerAddress": A2, "brokerId": 1}}[kind]
    note, fails = st_.apply(decode_event(raw_event(kind, props)))
    assert fails and "without brokerName" in note and "NullPointerException" in note


def test_fields_rocketmq_needs_missing_are_applied_as_rocketmq_does():
    s = ControllerState()
    s.apply(decode_event(apply_broker_id("c1", "b1", A1, 1, "k1")))
    # no newSyncStateSet for a registered set: new HashSet<>(null) throws
    assert s.apply(decode_event(raw_event(1, {"brokerName": "b1"}))).fails
    # a null id to clean from a registered set: ConcurrentHashMap.remove(null) throws, nothing removed
    assert s.apply(decode_event(raw_event(5, {"brokerName": "b1", "brokerIdSetToClean": [None, 1]}))).fails
    assert 1 in s.replicas["b1"].broker_ids
    # an ApplyBrokerIdEvent without address or check code registers the id with nulls
    assert s.apply(decode_event(raw_event(2, {"brokerName": "b1", "newBrokerId": 2}))) == ("", False)
    assert s.replicas["b1"].broker_ids[2] == (None, None)
    # an UpdateBrokerAddressEvent without brokerId: BrokerReplicaInfo.updateBrokerAddress returns
    note, fails = s.apply(decode_event(raw_event(6, {"brokerName": "b1", "brokerAddress": "x:1"})))
    assert not fails and "ignored" in note
    # elected without an id: master null, the syncStateSet {null} (Java's HashSet keeps it)
    assert s.apply(decode_event(raw_event(3, {"brokerName": "b1", "newMasterElected": True}))) == ("", False)
    assert s.broker_row("b1")["sync_state_set"] == [None] and s.broker_row("b1")["master_epoch"] == 1


def test_many_entries_past_the_stop_are_one_line(tmp_path):
    bad = [(2, b"\x00\x09{}") if i % 3 == 0 else (2, elect_master("b1", 2)) for i in range(50)]
    node = write_controller_log(str(tmp_path / "c"), BASE + [(1, alter_sync_state_set("nobody", {1}))] * 12
                                + [(2, b"\x00\x00junk")] + bad)
    s, err = state(node)
    stop = 4 + 12
    assert s["b1"]["master_broker_id"] == 1 and s["b1"]["master_epoch"] == 1  # (the elections past it: never)
    lines = err.splitlines()
    assert len(lines) < 16, err
    (line,) = [x for x in lines if "the controller stops at this entry" in x]
    assert line.startswith(f"Note: index {stop}: RocketMQ's apply fails on this entry (applyEvent of null)")
    assert f"50 entries past it (index {stop + 1}..{stop + 50}) never applied" in line
    assert "Note: 2 more entries RocketMQ ignored or could not read (index 14..15)" in err  # (12 ignored: 10 + 1)
    assert f"after index {stop - 1}, where the controller stops" in err
    s2, _ = state(node, "--at-index", stop + 20)
    assert s2 == s
    s3, err3 = state(node, "--at-index", stop - 1)
    assert s3 == s and "the controller stops" not in err3


def test_a_garbage_data_file_is_no_controller_log(tmp_path):
    node = write_controller_log(str(tmp_path / "c"), BASE)
    path = os.path.join(node, "data", "00000000000000000000")
    with open(path, "r+b") as fh:
        fh.write(os.urandom(4096) + b"\xff" * 4096)
    for cmd in (["state"], ["events"], ["check", "--broker-store", f"b1={tmp_path}"]):
        r = run("controller", *cmd, node)
        assert r.exit_code == 1, (cmd, r.output)
        assert r.stderr.startswith("Error: ") and len(r.stderr.splitlines()) == 1, r.stderr
        assert "not a RocketMQ controller's log" in r.stderr and "no DLedger entry" in r.stderr


def test_bodies_that_are_no_events_are_no_controller_log(tmp_path):
    node = write_controller_log(str(tmp_path / "c"), [(1, b"hello %d" % i) for i in range(100)])
    assert looks_like_controller_log(node) == (False, "the first 64 of its entries with a body are no controller "
                                                      "event")
    for cmd in (["state"], ["events"], ["check", "--broker-store", f"b1={tmp_path}"]):
        r = run("controller", *cmd, node)
        assert r.exit_code == 1 and "not a RocketMQ controller's log" in r.stderr, (cmd, r.output)
        assert len(r.stderr.splitlines()) == 1
    # one event among them: a controller's log with bad entries, whose state stops at the first
    node = write_controller_log(str(tmp_path / "d"), BASE + [(1, b"hello")] * 3)
    assert looks_like_controller_log(node) == (True, "")
    _, err = state(node)
    assert "index 4: RocketMQ's apply fails" in err and "2 entries past it" in err


def test_an_empty_log_is_an_empty_controller_log(tmp_path):
    node = write_controller_log(str(tmp_path / "c"), [(1, b"")])
    s, err = state(node)
    assert s == {} and "0 broker sets after index 0" in err
    write_epoch_file(str(tmp_path), [(1, 0)])
    r = run("controller", "check", node, "--broker-store", f"b1={tmp_path}", "-f", "json")
    assert "broker-set-unknown" in r.stdout


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_special_epoch_file_is_a_finding_not_a_hang(tmp_path, kind):
    node = write_controller_log(str(tmp_path / "c"), BASE)
    broker = tmp_path / "broker"
    broker.mkdir()
    if kind == "fifo":
        os.mkfifo(broker / "epochFileCheckpoint")
    else:
        os.symlink("/dev/zero", broker / "epochFileCheckpoint")
    # a process of its own: a hang fails at the timeout instead of holding the test run
    r = cli("controller", "check", node, "--broker-store", f"b1={broker}", "--format", "json", timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    (f,) = json.loads(r.stdout)
    assert f["finding"] == "epoch-file-unreadable" and "not a regular file" in f["detail"], f
    write_epoch_file(str(broker), [(1, 0)], name="epochFileCheckpoint.bak")
    r = cli("controller", "check", node, "--broker-store", f"b1={broker}", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# ---- fuzzing: event shapes ----------------------------------------------------------------

FIELDS = ["brokerName", "clusterName", "brokerAddress", "newBrokerId", "registerCheckCode", "newMasterElected",
          "newMasterBrokerId", "newSyncStateSet", "brokerIdSetToClean", "brokerId", "eventType", "other"]
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70), st.sampled_from(["b1", "b2", ""]),
                    st.text(max_size=5), st.floats(allow_nan=False))
_value = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                      max_leaves=12)
_props = st.dictionaries(st.sampled_from(FIELDS), st.one_of(_value, st.lists(st.one_of(
    st.none(), st.integers(0, 4)), max_size=4)), max_size=8)


def _body(tid: int, props: dict, nest: int, digits: int) -> bytes:
    text = json.dumps(props)
    if nest:
        text = text[:-1] + ("," if props else "") + '"zz":' + ("[" * nest + "]" * nest) + "}"
    if digits:
        text = text[:-1] + ("," if props or nest else "") + '"zd":' + "7" * digits + "}"
    return tid.to_bytes(2, "big", signed=True) + text.encode()


_bodies = st.builds(_body, st.sampled_from([-1, 0, 1, 2, 3, 4, 5, 6, 7, 300]), _props,
                    st.sampled_from([0, 0, 3, 513, 514, 5000]), st.sampled_from([0, 0, 19, 41, 5000]))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(_bodies, st.binary(max_size=24)), min_size=1, max_size=12))
def test_random_event_shapes_decode_and_replay_without_raising(bodies):
    s = ControllerState()
    for body in bodies:
        d = decode_event(body)
        assert d.event is not None or d.note
        if d.event is not None:
            assert d.type == EVENT_TYPES[d.type_id][1]
        note, fails = s.apply(d)
        if d.event is not None and d.event.broker_name is None:
            assert fails
        rows = s.broker_rows()  # (sorting the broker sets never meets a None)
        assert all(isinstance(r["broker_name"], str) for r in rows)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.one_of(_bodies, st.sampled_from([b"", apply_broker_id("c", "b1", A1, 1, "k"),
                                                     elect_master("b1", 1), clean_broker_data("b1", {1})])),
                min_size=1, max_size=8))
def test_random_logs_through_the_commands(tmp_path_factory, bodies):
    node = write_controller_log(str(tmp_path_factory.mktemp("c")), [(1, b) for b in bodies])
    for cmd in (["events"], ["state"], ["state", "--history", "--broker", "b1"]):
        r = run("controller", *cmd, node, "-f", "json")
        assert r.exit_code in (0, 1), (cmd, r.output)
        if r.exit_code == 1 and "--broker" in cmd and "no event of the log names broker set b1" in r.stderr:
            assert json.loads(r.stdout) == []  # (nothing matched --broker: exit 1, as grep does)
        elif r.exit_code == 1:
            assert r.stderr.startswith("Error: ") and "not a RocketMQ controller's log" in r.stderr
            assert len(r.stderr.splitlines()) == 1
