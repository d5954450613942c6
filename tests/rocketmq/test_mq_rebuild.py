"""``mq rebuild``: a broker's consume queues and index made again from its log, in place.

The queues a broker's dispatch writes are the oracle: a store written with the queues
RocketMQ builds (tests/support/rmq_store.py; tests/java/test_mq_rebuild_java.py has RocketMQ's own),
its consumequeue/ deleted, rebuilt: the same units, byte for byte, at the same queue
offsets; ``mq check`` clean after; the old files kept aside; and nothing changed when the
log cannot be read as it stands.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from tests.rocketmq.test_mq_commitment import unpoint
from tests.support.rmq_store import write_broker_store
from tests.support.stores import file_crcs
from store.metafiles import read_checkpoint, write_checkpoint
from store.rocketmq.consumequeue import find_queues, read_units

runner = CliRunner()
PER_FILE = 16  # units per consume-queue file: queues cross files


def specs(n: int = 120) -> list[dict]:
    out = []
    for i in range(n):
        out.append({"topic": f"T{i % 3}", "queue_id": i % 2, "body": b"m%d" % i * (1 + i % 9),
                    "properties": {"TAGS": f"tag{i % 4}", "KEYS": f"k{i} u{i % 5}", "UNIQ_KEY": f"U{i:08d}"}})
    out.append({"topic": "SCHEDULE_TOPIC_XXXX", "queue_id": 2, "body": b"later",
                "properties": {"DELAY": "3", "TAGS": "x"}})
    out.append({"topic": "Tx", "queue_id": 0, "body": b"half", "sys_flag": 0x4})  # a prepared half: no unit
    out.append({"topic": "主题-ü", "queue_id": 0, "body": b"non-ascii"})
    return out


def queues_of(root, sub="consumequeue") -> dict:
    base = os.path.join(root, sub)
    return {os.path.relpath(os.path.join(d, f), base): open(os.path.join(d, f), "rb").read()
            for d, _, files in os.walk(base) for f in files}


def rebuild(path, *args, code=0) -> dict:
    r = runner.invoke(app, ["mq", "rebuild", str(path), "--format", "json", "--max-hash-slot-num", "101",
                            "--max-index-num", "400", *map(str, args)])
    assert r.exit_code == code, r.output
    return (json.loads(r.stdout)[0] if code == 0 else {}) | {"stderr": r.stderr}


def check(path) -> str:
    r = runner.invoke(app, ["mq", "check", str(path)])
    assert r.exit_code == 0, r.output
    return r.stderr


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "broker"
    written = write_broker_store(str(root), specs(), data_file_size=8 << 10, cq_units_per_file=PER_FILE)
    os.makedirs(root / "config")  # (a broker's store root holds its config/ beside the log)
    (root / "config" / "topics.json").write_text('{"topicConfigTable": {}}')
    # the delayed message's unit: its delivery time (store time + level 3's 10 s), as the broker writes it
    return root, written


def test_a_lost_consumequeue_comes_back_byte_for_byte(store):
    root, written = store
    want = queues_of(root)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    s = rebuild(root, "--queue-file-size", PER_FILE * 20)  # (no old file to take the size from)
    got = queues_of(root)
    # the delayed message's tag code differs: the broker's is its delivery time, rmq_store writes the tag hash
    delayed = "SCHEDULE_TOPIC_XXXX/2/00000000000000000000"
    assert got.keys() == want.keys()
    assert {k: v for k, v in got.items() if k != delayed} == {k: v for k, v in want.items() if k != delayed}
    units = read_units([q for q in find_queues(str(root)) if q.topic == "SCHEDULE_TOPIC_XXXX"][0]).units
    assert int(units["tags"][0]) == 1700000000123 + 10_000
    assert (s["messages"], s["units"], s["undispatched"], s["left_out"]) == (len(written), len(written) - 1, 1, 0)
    assert s["queues"] == 3 * 2 + 2 and s["index_keys"] == 120 * 3  # UNIQ_KEY and two KEYS each
    assert s["kept_aside"] == ""  # (nothing was there to keep)
    assert "0 findings" in check(root)
    # every message found by key through the new index
    r = runner.invoke(app, ["mq", "messages", str(root), "--key", "u3", "--topic", "T0", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert sorted(m["keys"] for m in json.loads(r.stdout)) == sorted(
        f"k{i} u{i % 5}" for i in range(120) if i % 3 == 0 and i % 5 == 3)


def test_queues_left_past_a_truncated_log_are_cut_to_it_and_the_old_ones_kept(store, tmp_path):
    root, written = store
    node = root / "dledger-n0"
    old = queues_of(root)
    cut = written[90]["index"]
    r = runner.invoke(app, ["store", "truncate", str(node), "--from-index", str(cut), "--yes", "--force",
                            "--backup", str(tmp_path / "cut")])
    assert r.exit_code == 0, r.output
    assert runner.invoke(app, ["mq", "check", str(root)]).exit_code == 1  # units point past the log
    s = rebuild(root)
    assert s["messages"] == 90 and s["units"] == 90
    assert sorted(s["kept_aside"].split()) == sorted(n for n in os.listdir(root) if ".old-" in n)
    # (rmq_store writes no broker checkpoint: the rebuild writes one)
    assert {n.split(".old-")[0] for n in s["kept_aside"].split()} == {"consumequeue", "index"}
    assert os.path.getsize(root / "checkpoint") == 4096
    aside = [n for n in os.listdir(root) if n.startswith("consumequeue.old-")][0]
    assert queues_of(root, aside) == old  # the old files as they were
    assert "queues end earlier than their old files did" in s["stderr"]
    assert "0 findings" in check(root)


def test_only_committed_entries_are_dispatched_unless_asked(store):
    root, written = store
    node = str(root / "dledger-n0")
    cp = read_checkpoint(node)
    write_checkpoint(node, cp.end_index, written[99]["index"])
    unpoint(root, written[100]["phy_offset"])  # (only committed entries are dispatched)
    s = rebuild(root)
    assert (s["messages"], s["left_out"]) == (100, len(written) - 100)
    assert "not dispatched" in s["stderr"]
    s = rebuild(root, "--include-uncommitted")
    assert (s["messages"], s["left_out"]) == (len(written), 0)


def test_a_damaged_log_changes_nothing(store):
    root, written = store
    data = root / "dledger-n0" / "data"
    f = sorted(os.listdir(data))[0]
    with open(data / f, "r+b") as fh:  # a message's QUEUEID made negative (bytes 12..15 of the message)
        fh.seek(written[5]["pos"] + 48 + 12)
        fh.write(b"\xff\xff\xff\xf0")
        fh.seek(written[5]["pos"] + 36)  # (its entry's chainCrc and bodyCrc 0, as Java writes them: not damage,
        fh.write(bytes(8))                # entry-crc, but what a broker wrote: test_mq_damage.py has that)
    before = file_crcs(root)
    s = rebuild(root, code=1)
    assert "queue-id" in s["stderr"] and "the store was not changed" in s["stderr"]
    assert file_crcs(root) == before and not [n for n in os.listdir(root) if n.startswith(".rebuild")]


def test_a_skipped_queue_offset_is_refused(tmp_path):
    root = tmp_path / "broker"
    msgs = [{"topic": "A", "body": b"x", "queue_offset": q} for q in (0, 1, 3)]
    write_broker_store(str(root), msgs, cq_units_per_file=PER_FILE)
    before = file_crcs(root)
    s = rebuild(root, code=1)
    assert "queue A/0" in s["stderr"] and "queue offset 3" in s["stderr"] and "skipped" in s["stderr"]
    assert file_crcs(root) == before


def test_a_queue_that_starts_past_zero_gets_fill_pre_blank_units(tmp_path):
    root = tmp_path / "broker"
    write_broker_store(str(root), [{"topic": "A", "body": b"m%d" % i, "queue_offset": 37 + i} for i in range(5)],
                       cq_units_per_file=PER_FILE)
    want = queues_of(root)
    shutil.rmtree(root / "consumequeue")
    s = rebuild(root, "--queue-file-size", PER_FILE * 20)
    assert s["blanks"] == 37 - 32
    got = queues_of(root)
    assert list(got) == ["A/0/00000000000000000640"]
    assert got["A/0/00000000000000000640"][:5 * 20] == b"".join(
        (0).to_bytes(8, "big") + ((1 << 31) - 1).to_bytes(4, "big") + bytes(8) for _ in range(5))
    # (rmq_store writes the units from the first file's start: only the units are compared)
    assert got["A/0/00000000000000000640"][5 * 20:10 * 20] == want["A/0/00000000000000000000"][:5 * 20]


def test_a_running_broker_is_refused(store):
    root, _ = store
    fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        code = ("import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDWR)\nfcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)\n"
                "print('held', flush=True)\nsys.stdin.read()\n")
        os.close(fd)
        fd = -1
        holder = subprocess.Popen([sys.executable, "-c", code, str(root / "lock")], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            before = file_crcs(root)
            s = rebuild(root, code=1)
            assert "a running broker holds its lock file" in s["stderr"]
            assert file_crcs(root) == before
        finally:
            holder.stdin.close()
            holder.wait(10)
    finally:
        if fd >= 0:
            os.close(fd)


def test_a_killed_rebuild_leaves_the_store_as_it_was_and_the_next_run_cleans_up(tmp_path):
    root = tmp_path / "broker"
    write_broker_store(str(root), [{"topic": f"T{i % 50}", "queue_id": i % 4, "body": b"x" * 300} for i in range(60000)],
                       data_file_size=4 << 20)
    before = file_crcs(root)
    proc = subprocess.Popen([sys.executable, "-m", "dledgerctl", "mq", "rebuild", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not [n for n in os.listdir(root) if n.startswith(".rebuild-")] and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    left = [n for n in os.listdir(root) if n.startswith(".rebuild-")]
    assert left  # (killed while it wrote)
    assert {k: v for k, v in file_crcs(root).items() if not k.startswith(".rebuild-")} == before
    s = rebuild(root)
    assert f"removed {left[0]}, left by an interrupted run" in s["note"]
    assert not [n for n in os.listdir(root) if n.startswith(".rebuild-")]
    assert "0 findings" in check(root)


def test_a_master_slave_store_is_rebuilt_as_migrate_wrote_it(store, tmp_path):
    root, written = store
    dest = tmp_path / "ms"
    r = runner.invoke(app, ["mq", "migrate", str(root), str(dest), "--commitlog-file-size", "64KiB"])
    assert r.exit_code == 0, r.output
    want = queues_of(dest)
    shutil.rmtree(dest / "consumequeue")
    s = rebuild(dest, "--queue-file-size", PER_FILE * 20)
    got = queues_of(dest)
    delayed = "SCHEDULE_TOPIC_XXXX/2/00000000000000000000"
    assert {k: v for k, v in got.items() if k != delayed} == {k: v for k, v in want.items() if k != delayed}
    assert s["units"] == len(written) - 1
    assert "0 findings" in check(dest)


@pytest.mark.parametrize("args, words", [
    (["--delay-levels", "1s 5x"], "'5x' is not a delay level"),
    (["--queue-file-size", "30"], "a whole number of 20-byte units"),
])
def test_bad_options_are_refused_before_anything(store, args, words):
    root, _ = store
    before = file_crcs(root)
    r = runner.invoke(app, ["mq", "rebuild", str(root), *args])
    assert r.exit_code == 2 and words in r.output, r.output
    assert file_crcs(root) == before


def test_the_brokers_own_delay_levels_give_the_delivery_times(store):
    root, _ = store
    rebuild(root, "--delay-levels", "1s 2s 3s")  # (level 3 is 3 s here, 10 s by default)
    units = read_units([q for q in find_queues(str(root)) if q.topic == "SCHEDULE_TOPIC_XXXX"][0]).units
    assert int(units["tags"][0]) == 1700000000123 + 3_000


def test_a_topic_that_is_no_directory_name_is_refused(tmp_path):
    root = tmp_path / "broker"
    write_broker_store(str(root), [{"topic": "A", "body": b"a"}, {"topic": "../escaped", "body": b"x"}])
    before = file_crcs(tmp_path)
    s = rebuild(root, code=1)
    assert "'../escaped', which cannot be a directory's name" in s["stderr"]
    assert file_crcs(tmp_path) == before and not (tmp_path / "escaped").exists()
    assert not [n for n in os.listdir(root) if n.startswith(".rebuild-")]


def test_a_rename_that_fails_puts_the_store_back(store, monkeypatch):
    root, _ = store
    before = file_crcs(root)
    real, calls = os.rename, []

    def failing(src, dst):
        calls.append((src, dst))
        if len(calls) == 3:  # (consumequeue aside, the new one in, then index aside fails)
            raise OSError(16, "Device or resource busy")
        return real(src, dst)

    monkeypatch.setattr(os, "rename", failing)
    s = rebuild(root, code=1)
    monkeypatch.undo()
    assert "renaming the rebuilt files in failed (Device or resource busy); the store was put back" in s["stderr"]
    assert file_crcs(root) == before
    assert sorted(os.listdir(root)) == ["config", "consumequeue", "dledger-n0", "index"]


def test_the_checkpoint_keeps_what_it_holds_past_the_dispatch_times(store):
    """RocketMQ 5 keeps masterFlushedOffset and confirmPhyOffset after the three times: kept."""
    root, _ = store
    with open(root / "checkpoint", "wb") as fh:
        fh.write((11).to_bytes(8, "big") + (22).to_bytes(8, "big") + (33).to_bytes(8, "big") +
                 (4444).to_bytes(8, "big") + (5555).to_bytes(8, "big") + bytes(4096 - 40))
    rebuild(root)
    with open(root / "checkpoint", "rb") as fh:
        data = fh.read()
    assert len(data) == 4096 and data[:8] == (11).to_bytes(8, "big")  # physicMsgTimestamp kept
    assert int.from_bytes(data[8:16], "big") == int.from_bytes(data[16:24], "big") == 1700000000123
    assert data[24:40] == (4444).to_bytes(8, "big") + (5555).to_bytes(8, "big")
