"""``get --decode rocketmq-controller`` (a real one-node group on 127.0.0.1 holding controller
events) and ``store inspect-data --decode rocketmq-controller``: each entry as its event,
an empty one as the leader's proposal, one that is no event as a row saying so."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from tests.support.commands import cli
from tests.support.controller_encode import alter_sync_state_set, apply_broker_id, elect_master, write_controller_log
from tests.support.group import append_bodies

BODIES = [apply_broker_id("c1", "b1", "10.0.0.1:30911", 1, "k1"), elect_master("b1", 1), b"",
          alter_sync_state_set("b1", {1, 2}), b"\x00\x07{}"]


@pytest.fixture(scope="module")
def shared_group(module_group):
    """A one-member group holding :data:`BODIES`: its base directory and the first one's index."""
    base = module_group(1)
    return base, append_bodies(base, BODIES).entries[0][0]


def test_get_decodes_controller_events(shared_group):
    base, first = shared_group
    r = cli("get", "--base-dir", base, "-i", str(first), "-c", str(len(BODIES)), "--decode", "rocketmq-controller",
            "-f", "jsonl")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(row["type"], row["broker_name"]) for row in rows] == [
        ("ApplyBrokerIdEvent", "b1"), ("ElectMasterEvent", "b1"), ("leader-proposal", None),
        ("AlterSyncStateSetEvent", "b1"), ("not-an-event", None)]
    assert rows[1]["fields"] == {"newMasterElected": True, "newMasterBrokerId": 1}
    assert "unknown event type id 7" in rows[4]["event_note"]
    r = cli("get", "--base-dir", base, "-i", str(first + 3), "--decode", "rocketmq-controller")
    assert r.returncode == 0 and '{"newSyncStateSet":[1,2]}' in r.stdout.splitlines()[2], r.stdout


def test_inspect_data_decodes_controller_events(tmp_path):
    node = write_controller_log(str(tmp_path / "ctl"), [(1, b) for b in BODIES])
    r = CliRunner().invoke(app, ["store", "inspect-data", node, "--decode", "rocketmq-controller", "-f", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [row["type"] for row in rows] == ["ApplyBrokerIdEvent", "ElectMasterEvent", "leader-proposal",
                                              "AlterSyncStateSetEvent", "not-an-event"]
    assert all("body" not in row for row in rows) and rows[0]["crc"] == "ok"
    r = CliRunner().invoke(app, ["store", "inspect-data", node, "--decode", "rocketmq-controller", "-i", "4",
                                 "--body", "hex", "-f", "jsonl"])
    row = json.loads(r.stdout)
    assert row["body"] == "00077b7d" and row["type_id"] == 7
    r = CliRunner().invoke(app, ["store", "inspect-data", node, "--decode", "rocketmq-controller", "--to-index", "1"])
    lines = r.stdout.splitlines()
    assert "fields" in lines[0] and '{"newMasterElected":true,"newMasterBrokerId":1}' in lines[3]
