"""``controller check``: the brokers' epochFileCheckpoint (RocketMQ's CheckpointFile format,
written by tests/support/controller_encode.py) against the master epochs of the controller's log."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.commands import invoke_clean as run
from tests.support.controller_encode import apply_broker_id, elect_master, write_controller_log, write_epoch_file

LOG = [
    (1, b""),
    (1, apply_broker_id("c1", "b1", "10.0.0.1:30911", 1, "k1")),
    (1, apply_broker_id("c1", "b1", "10.0.0.2:30911", 2, "k2")),
    (1, elect_master("b1", 1)),  # epoch 1: broker 1
    (2, elect_master("b1", None, elected=False)),  # epoch 2: no master
    (2, elect_master("b1", 2)),  # epoch 3: broker 2
]


@pytest.fixture
def ctl(tmp_path):
    return write_controller_log(str(tmp_path / "ctl"), LOG)


def test_a_consistent_set_passes(ctl, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_epoch_file(a, [(1, 0), (3, 4096)])
    write_epoch_file(b, [(1, 0), (3, 4096)])
    r = run("controller", "check", ctl, "--broker-store", f"b1={a}", "--broker-store", f"b1={b}/epochFileCheckpoint")
    assert r.exit_code == 0, r.output + r.stderr
    assert r.stdout == "" and "2 broker stores checked: 0 findings" in r.stderr


def test_names_the_broker_and_epoch_that_disagree(ctl, tmp_path):
    a, b, c = str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c")
    write_epoch_file(a, [(1, 0), (2, 100), (3, 4096)])  # epoch 2 had no master
    write_epoch_file(b, [(1, 0), (3, 4096), (5, 9000)])  # the controller never reached 5
    write_epoch_file(c, [(3, 50), (1, 100)])  # out of order
    r = run("controller", "check", ctl, "--broker-store", f"b1={a}", "--broker-store", f"b1={b}",
            "--broker-store", f"b1={c}", "-f", "json")
    assert r.exit_code == 1
    got = [(f["finding"], f["broker_store"], f["epoch"]) for f in json.loads(r.stdout)]
    assert got == [("epoch-without-master", a, 2), ("epoch-unknown", b, 5), ("epoch-order", c, 1)]
    assert "index 4, term 2" in json.loads(r.stdout)[0]["detail"]


def test_an_unreadable_epoch_file_and_its_backup(ctl, tmp_path):
    a = str(tmp_path / "a")
    write_epoch_file(a, [(1, 0), (3, 4096)], crc=12345)
    r = run("controller", "check", ctl, "--broker-store", f"b1={a}", "-f", "json")
    assert r.exit_code == 1
    [f] = json.loads(r.stdout)
    assert f["finding"] == "epoch-file-unreadable" and "CRC32" in f["detail"] and ".bak: no such file" in f["detail"]
    write_epoch_file(a, [(1, 0), (3, 4096)], name="epochFileCheckpoint.bak")  # (CheckpointFile.read falls back)
    assert run("controller", "check", ctl, "--broker-store", f"b1={a}").exit_code == 0
    r = run("controller", "check", ctl, "--broker-store", f"b9={a}", "-f", "json")
    assert [f["finding"] for f in json.loads(r.stdout)] == ["broker-set-unknown"]


def test_a_log_whose_head_was_deleted_is_a_finding(tmp_path):
    base = str(tmp_path / "ctl")
    node = write_controller_log(base, LOG + [(2, b"")] * 200, data_file_size=4096)
    data = sorted(os.listdir(os.path.join(node, "data")))
    os.unlink(os.path.join(node, "data", data[0]))
    a = str(tmp_path / "a")
    write_epoch_file(a, [(1, 0)])
    r = run("controller", "check", base, "--broker-store", f"b1={a}", "-f", "json")
    assert r.exit_code == 1
    findings = json.loads(r.stdout)
    assert findings[0]["finding"] == "log-head-missing" and "not 0" in findings[0]["detail"]
    r = run("controller", "state", base)
    assert "not 0 (its head files are gone)" in r.stderr


@pytest.mark.parametrize("spec", ["b1", "=x", "b1=/no/such/dir"])
def test_bad_broker_store_is_a_usage_error(ctl, spec):
    r = run("controller", "check", ctl, "--broker-store", spec)
    assert r.exit_code == 2 and "--broker-store" in r.stderr
