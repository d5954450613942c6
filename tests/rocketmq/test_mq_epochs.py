"""``mq epochs`` (issue 61): a controller-mode broker's epoch files and identity against its
commit log, on a master-slave store written by ``mq migrate`` from a store of this project's
writer (tests/support/rmq_store.py). What RocketMQ's own store does with such files is in
tests/java/ (the controller-mode harness)."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from store.rocketmq.epochs import EpochEntry, epoch_file_text
from store.rocketmq.replica import log_extent, read_replica
from tests.rocketmq.test_mq_migrate import messages
from tests.support.rmq_store import write_broker_store

runner = CliRunner()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("epochs")
    src = base / "src"
    write_broker_store(str(src), messages(), data_file_size=16 << 10, cq_units_per_file=16)
    os.makedirs(src / "config")
    dest = base / "dest"
    r = runner.invoke(app, ["mq", "migrate", str(src), str(dest), "--commitlog-file-size", "65536"])
    assert r.exit_code == 0, r.output
    return dest


@pytest.fixture
def store(root, tmp_path):
    import shutil
    d = tmp_path / "s"
    shutil.copytree(root, d)
    return d


def epochs(store, *args):
    r = runner.invoke(app, ["mq", "epochs", str(store), "-f", "json", *args])
    return r.exit_code, json.loads(r.stdout) if r.stdout.strip() else [], r.stderr


def test_the_log_extent_is_where_the_last_message_ends(store):
    lo, hi = log_extent(str(store))
    assert lo == 0 and hi > 0
    sizes = sum(os.path.getsize(store / "commitlog" / n) for n in os.listdir(store / "commitlog"))
    assert hi < sizes  # (the last file is preallocated past its last message)


def test_a_store_without_epochs_is_a_new_replica(store):
    code, rows, _ = epochs(store)
    assert code == 0
    assert [r["code"] for r in rows if r["row"] == "note"] == ["no-epochs"]


def test_epochs_against_the_log(store):
    _lo, hi = log_extent(str(store))
    (store / "epochFileCheckpoint").write_text(epoch_file_text([EpochEntry(1, 0), EpochEntry(2, hi // 2)]))
    code, rows, err = epochs(store)
    assert code == 0, rows
    spans = [(r["epoch"], r["start_offset"], r["end_offset"]) for r in rows if r["row"] == "epoch"]
    assert spans == [(1, 0, hi // 2), (2, hi // 2, hi)]
    used, = [r for r in rows if r["row"] == "file" and r["used"]]
    assert used["path"].endswith("epochFileCheckpoint") and used["entries"] == [[1, 0], [2, hi // 2]]
    assert "2 epochs from" in err


def test_an_epoch_past_the_log_and_out_of_order_are_errors(store):
    _lo, hi = log_extent(str(store))
    (store / "epochFileCheckpoint").write_text(epoch_file_text([EpochEntry(2, 0), EpochEntry(1, 10),
                                                                EpochEntry(3, hi + 100)]))
    code, rows, _ = epochs(store)
    assert code == 1
    codes = sorted(r["code"] for r in rows if r["row"] == "error")
    assert codes == ["epoch-order", "epoch-past-log"]


def test_a_broken_main_file_falls_back_to_the_bak_and_says_which(store):
    (store / "epochFileCheckpoint").write_text("1\n12345\n1-0\n")  # (a CRC that fails)
    (store / "epochFileCheckpoint.bak").write_text(epoch_file_text([EpochEntry(1, 0)]))
    code, rows, _ = epochs(store)
    assert code == 0
    warned = {r["code"] for r in rows if r["row"] == "warning"}
    assert warned == {"epoch-file-broken", "epoch-file-fallback"}
    used, = [r for r in rows if r["row"] == "file" and r["used"]]
    assert used["path"].endswith(".bak")
    r = read_replica(str(store))
    assert r.entries == [EpochEntry(1, 0)]


def test_a_number_java_cannot_parse_stops_the_store(store):
    (store / "epochFileCheckpoint").write_text("one\n0\n1-0\n")
    (store / "epochFileCheckpoint.bak").write_text(epoch_file_text([EpochEntry(1, 0)]))
    code, rows, _ = epochs(store)
    assert code == 1
    err, = [r for r in rows if r["row"] == "error"]
    assert err["code"] == "epoch-file-unloadable" and "cannot load its epochs" in err["detail"]


def test_identity_files_and_an_unfinished_registration(store):
    (store / "brokerIdentity").write_text("DefaultCluster#broker-a#1")
    (store / "brokerIdentity-temp").write_text("DefaultCluster#broker-a#2#abc")
    code, rows, _ = epochs(store)
    ids = [(r["broker"], r["broker_id"]) for r in rows if r["row"] == "identity"]
    assert code == 0 and ids == [("broker-a", 1), ("broker-a", 2)]
    assert "registering" in {r["code"] for r in rows if r["row"] == "note"}


def test_what_is_no_such_store_root_is_one_line(tmp_path):
    r = runner.invoke(app, ["mq", "epochs", str(tmp_path / "nope")])
    assert r.exit_code == 1 and r.stderr == f"Error: {tmp_path / 'nope'}: no such directory\n"
    write_broker_store(str(tmp_path / "dl"), messages(3), data_file_size=16 << 10)
    r = runner.invoke(app, ["mq", "epochs", str(tmp_path / "dl")])
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "it reads a controller-mode" in r.stderr, r.stderr


def test_a_log_whose_last_file_closes_with_a_blank_ends_where_the_blank_starts(tmp_path):
    """As CommitLog.recoverNormally walks it: a blank moves to the next file, whose start is
    the end; with no next file the log ends where the blank starts."""
    write_broker_store(str(tmp_path / "src"), messages(), data_file_size=16 << 10, cq_units_per_file=16)
    store = tmp_path / "dest"
    r = runner.invoke(app, ["mq", "migrate", str(tmp_path / "src"), str(store), "--commitlog-file-size", "8192",
                            "--include-uncommitted"])
    assert r.exit_code == 0, r.output
    names = sorted(os.listdir(store / "commitlog"))
    assert len(names) >= 2
    prev = store / "commitlog" / names[-2]
    from store.rocketmq.commitlog import walk_file
    b = prev.read_bytes()
    _offs, _sizes, p, end = walk_file(b, len(b))
    assert end.blank
    assert log_extent(str(store))[1] > int(names[-2]) + len(b) - 1  # (the next file exists: its start, or past)
    (store / "commitlog" / names[-1]).write_bytes(bytes(os.path.getsize(store / "commitlog" / names[-1])))
    assert log_extent(str(store))[1] == int(names[-1])  # (an unwritten next file: its start)
    os.unlink(store / "commitlog" / names[-1])
    assert log_extent(str(store))[1] == int(names[-2]) + p
