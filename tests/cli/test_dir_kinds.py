"""One detection of what a directory is (store/kinds.py), and every command that takes a
directory refusing the wrong kind in one line that says what it got and what it takes
(issue 58 item 4: a migrated store's root was read as a DLedger node directory, so
``store elect DEST2`` answered "must lead: nothing is cut" and ``controller state DEST2``
printed no rows, exit 0)."""

from __future__ import annotations

import json
import os

import pytest

from store import kinds
from store.filestore import FileStore
from tests.support.commands import invoke
from tests.support.rmq_store import write_broker_store

EVENT = b"\x00\x03" + b'{"brokerName":"broker-a","newMasterElected":false}'  # ElectMasterEvent


def one_error(r, *words: str) -> str:
    assert r.exit_code == 1, r.output
    lines = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert "Traceback" not in r.output + r.stderr
    return lines[0]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Each kind of directory: a DLedger-mode broker root, its node directory, the
    master-slave root mq migrate makes of it, the same as a controller-mode root, a
    controller's log (node and base directory), an empty directory."""
    base = tmp_path_factory.mktemp("kinds")
    broker = str(base / "broker")
    write_broker_store(broker, [{"topic": "T", "body": b"m%d" % i} for i in range(10)])
    ms = str(base / "dest2")
    r = invoke("mq", "migrate", broker, ms, "--commitlog-file-size", "64KiB")
    assert r.exit_code == 0, r.output
    cm = str(base / "controller-mode")
    r = invoke("mq", "migrate", broker, cm, "--commitlog-file-size", "64KiB")
    assert r.exit_code == 0, r.output
    with open(os.path.join(cm, "epochFileCheckpoint"), "w") as fh:
        fh.write("1\n0\n1-0\n")
    controller = str(base / "controller")
    with FileStore.open(os.path.join(controller, "dledger-c0")) as s:
        s.append_leader([b"", EVENT, EVENT], 1)
    empty = base / "empty"
    empty.mkdir()
    return {"broker": broker, "node": os.path.join(broker, "dledger-n0"), "master-slave": ms,
            "controller-mode": cm, "controller": controller, "controller-node": os.path.join(controller, "dledger-c0"),
            "empty": str(empty)}


def test_each_kind_is_told_apart(stores):
    want = {"broker": kinds.DLEDGER_BROKER, "node": kinds.NODE, "master-slave": kinds.MASTER_SLAVE,
            "controller-mode": kinds.CONTROLLER_MODE, "controller": kinds.BASE, "controller-node": kinds.NODE,
            "empty": kinds.OTHER}
    assert {name: kinds.detect(path).kind for name, path in stores.items()} == want
    assert kinds.detect(stores["master-slave"]).commit_log == os.path.join(stores["master-slave"], "commitlog")
    assert kinds.detect(stores["broker"]).nodes == (stores["node"],)
    assert kinds.log_content(stores["node"]) == kinds.MESSAGES
    assert kinds.log_content(stores["controller-node"]) == kinds.EVENTS


@pytest.mark.parametrize("root", ["master-slave", "controller-mode"])
@pytest.mark.parametrize("cmd", [["store", "elect"], ["store", "verify"], ["store", "inspect-data"],
                                 ["store", "checkpoint"], ["store", "inspect-index"], ["controller", "state"],
                                 ["controller", "events"]])
def test_a_master_slave_root_is_no_dledger_log(stores, root, cmd):
    r = invoke(*cmd, stores[root])
    line = one_error(r, stores[root], f"a {root} broker's store root")
    assert ("store elect reads DLedger" in line if cmd[1] == "elect" else
            "controller commands read" in line if cmd[0] == "controller" else "it reads DLedger logs" in line)
    assert r.stdout == ""


@pytest.mark.parametrize("what", ["broker", "node"])
@pytest.mark.parametrize("cmd", [["controller", "state"], ["controller", "events"]])
def test_a_brokers_log_is_no_controller_log(stores, what, cmd):
    r = invoke(*cmd, stores[what])
    one_error(r, "DLedger-mode broker" if what == "broker" else "RocketMQ messages", "controller")


@pytest.mark.parametrize("what", ["controller", "controller-node"])
def test_a_controller_log_is_no_brokers_store(stores, what):
    r = invoke("mq", "messages", stores[what])
    one_error(r, "controller events", "controller commands")
    r = invoke("controller", "events", stores[what], "--format", "json")  # (and what reads it still does)
    assert r.exit_code == 0, r.output
    assert [x["type"] for x in json.loads(r.stdout)][1:] == ["ElectMasterEvent", "ElectMasterEvent"]


def test_the_mq_commands_read_every_brokers_store(stores):
    for name in ("broker", "node", "master-slave", "controller-mode"):
        r = invoke("mq", "messages", stores[name], "--format", "json")
        assert r.exit_code == 0, (name, r.output)
        assert len(json.loads(r.stdout)) == 10, name


def test_an_empty_commit_log_is_a_master_slave_store(tmp_path):
    """A store migrated from a log with nothing committed: commitlog/ empty, index/ beside it."""
    root = tmp_path / "ms"
    for d in ("commitlog", "index", "consumequeue"):
        (root / d).mkdir(parents=True)
    assert kinds.detect(str(root)).kind == kinds.MASTER_SLAVE
    r = invoke("mq", "messages", str(root), "--format", "json")
    assert "not a node directory" not in r.output + r.stderr and "Traceback" not in r.output + r.stderr
    one_error(invoke("store", "elect", str(root)), "master-slave")


def test_a_directory_that_is_no_store_says_so(stores):
    one_error(invoke("store", "elect", stores["empty"]), stores["empty"])
    one_error(invoke("mq", "messages", stores["empty"]), stores["empty"])
    one_error(invoke("controller", "state", stores["empty"]), stores["empty"])
