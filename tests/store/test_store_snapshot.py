"""State-machine snapshots on disk (store/snapshot.py): DLedger HEAD's layout, whole or not at
all, checked when read, received in resumable chunks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import zlib

import pytest

from store.errors import StoreError
from store.snapshot import DATA_FILE, DIR_PREFIX, INSTALL_TMP_DIR, META_FILE, SNAPSHOT_DIR, TMP_DIR, SnapshotStore
from tests.support.paths import ROOT

MIRROR = os.environ.get("DLEDGER_MIRROR") or os.path.join(
    os.path.dirname(ROOT), ".mirror",
    "openmessaging+dledger", "repo")


def test_write_list_latest_and_read(tmp_path):
    node = tmp_path / "dledger-n0"
    s = SnapshotStore(str(node))
    assert s.list() == [] and s.latest() is None
    s.write(13, 1, b"state at 13")
    info = s.write(26, 2, b"state at 26")
    assert (info.index, info.term, info.size, info.problem) == (26, 2, 11, None)
    assert [x.index for x in s.list()] == [13, 26] and s.latest().index == 26
    assert s.read(s.latest()) == b"state at 26"
    meta = json.loads((node / SNAPSHOT_DIR / f"{DIR_PREFIX}26" / META_FILE).read_text())
    assert meta == {"lastIncludedIndex": 26, "lastIncludedTerm": 2, "dataSize": 11, "dataCrc": zlib.crc32(b"state at 26")}
    assert sorted(os.listdir(node / SNAPSHOT_DIR)) == ["snapshot_13", "snapshot_26"]
    assert [x.index for x in s.prune(1)] == [13] and [x.index for x in s.list()] == [26]


def test_leftovers_of_a_crash_are_never_a_snapshot(tmp_path):
    node = tmp_path / "dledger-n0"
    s = SnapshotStore(str(node))
    s.write(5, 1, b"five")
    for d in (TMP_DIR, INSTALL_TMP_DIR):  # a writer and an installer that crashed half way
        os.makedirs(node / SNAPSHOT_DIR / d)
        (node / SNAPSHOT_DIR / d / DATA_FILE).write_bytes(b"half")
    assert [x.index for x in SnapshotStore(str(node), writable=False).list()] == [5]
    reopened = SnapshotStore(str(node))  # opened for writing: a half-written one goes...
    assert sorted(os.listdir(node / SNAPSHOT_DIR)) == ["install_tmp", "snapshot_5"]
    # ... one half received stays for the leader to resume, yet is no snapshot
    assert [x.index for x in reopened.list()] == [5] and reopened.latest().index == 5


def test_damaged_snapshots_are_named_and_passed_over(tmp_path):
    node = tmp_path / "dledger-n0"
    s = SnapshotStore(str(node))
    s.write(1, 1, b"one")
    s.write(2, 1, b"two")
    s.write(3, 1, b"three")
    s.write(4, 1, b"four")
    base = node / SNAPSHOT_DIR
    (base / "snapshot_4" / DATA_FILE).write_bytes(b"FOUR")  # same size, other bytes
    (base / "snapshot_3" / DATA_FILE).write_bytes(b"thr")  # cut short
    (base / "snapshot_2" / META_FILE).write_text('{"lastIncludedIndex": 7, "lastIncludedTerm": 1}')
    os.makedirs(base / "snapshot_9")  # no meta
    problems = {x.index: x.problem for x in s.list()}
    assert problems[1] is None
    assert "says index 7" in problems[2]
    assert "3 bytes, the meta says 5" in problems[3]
    assert "crc32" in problems[4]
    assert problems[9] == f"no {META_FILE}"
    assert s.latest().index == 1  # the newest good one
    # a meta DLedger wrote (no size or crc) is taken as it is
    os.makedirs(base / "snapshot_10")
    (base / "snapshot_10" / META_FILE).write_text('{"lastIncludedIndex":10,"lastIncludedTerm":2}')
    (base / "snapshot_10" / DATA_FILE).write_bytes(b"from java")
    assert s.latest().index == 10 and s.latest().crc == zlib.crc32(b"from java")


def test_an_install_resumes_and_is_checked_before_it_is_placed(tmp_path):
    node = tmp_path / "dledger-n0"
    s = SnapshotStore(str(node))
    data = os.urandom(300_000)
    crc = zlib.crc32(data)
    inst = s.installer(40, 3, len(data), crc)
    assert inst.write(0, data[:100_000]) == 100_000
    # the receiver restarts: a new installer for the same snapshot continues
    inst = s.installer(40, 3, len(data), crc)
    assert inst.received == 100_000
    with pytest.raises(StoreError, match="only 100000 bytes"):
        inst.write(150_000, data[150_000:])
    inst.write(50_000, data[50_000:200_000])  # a chunk sent again overlaps: written again
    with pytest.raises(StoreError, match="200000 of 300000"):
        inst.finish()
    inst.write(200_000, data[200_000:])
    assert s.list() == []  # nothing is a snapshot until finish
    info = inst.finish()
    assert (info.index, info.term, info.problem) == (40, 3, None) and s.read(s.latest()) == data
    assert not os.path.exists(node / SNAPSHOT_DIR / INSTALL_TMP_DIR)
    # another snapshot arriving starts over; bytes that do not match are discarded
    inst = s.installer(50, 3, 4, 12345)
    assert inst.received == 0
    inst.write(0, b"abcd")
    with pytest.raises(StoreError, match="discarded"):
        inst.finish()
    assert [x.index for x in s.list()] == [40]
    with pytest.raises(StoreError, match="read-only"):
        SnapshotStore(str(node), writable=False).write(1, 1, b"x")


def test_the_layout_is_dledger_heads():
    """The names are DLedger HEAD's (SnapshotManager, DLedgerConfig), read from its sources."""
    if not os.path.isdir(MIRROR):
        pytest.skip(f"DLedger git mirror not found at {MIRROR} (set DLEDGER_MIRROR)")
    src = subprocess.run(["git", "-C", MIRROR, "show", "master:dledger/src/main/java/io/openmessaging/storage/dledger/"
                          "snapshot/SnapshotManager.java"], capture_output=True, text=True)
    if src.returncode != 0:
        pytest.skip("the mirror has no DLedger HEAD snapshot manager")
    consts = dict(re.findall(r'static final String (\w+) = "([^"]*)"', src.stdout))
    assert (consts["SNAPSHOT_META_FILE"], consts["SNAPSHOT_DATA_FILE"], consts["SNAPSHOT_DIR_PREFIX"],
            consts["SNAPSHOT_TEMP_DIR"], consts["SNAPSHOT_INSTALL_TEMP_DIR"]) == (
        META_FILE, DATA_FILE, DIR_PREFIX, TMP_DIR, INSTALL_TMP_DIR)
    cfg = subprocess.run(["git", "-C", MIRROR, "show", "master:dledger/src/main/java/io/openmessaging/storage/dledger/"
                          "DLedgerConfig.java"], capture_output=True, text=True).stdout
    assert f'getDefaultPath() + File.separator + "{SNAPSHOT_DIR}"' in cfg
    meta = subprocess.run(["git", "-C", MIRROR, "show", "master:dledger/src/main/java/io/openmessaging/storage/dledger/"
                           "snapshot/SnapshotMeta.java"], capture_output=True, text=True).stdout
    assert "long lastIncludedIndex" in meta and "long lastIncludedTerm" in meta


def test_inspect_data_names_the_latest_snapshot(tmp_path):
    from tests.support.commands import cli
    from tests.support.stores import write_project_store

    node = tmp_path / "dledger-n0"
    write_project_store(str(node), count=5, terms=(1,))
    plain = cli("store", "inspect-data", str(node), "--format", "json")
    assert plain.returncode == 0 and "snapshot" not in plain.stderr
    SnapshotStore(str(node)).write(3, 1, b"state")
    noted = cli("store", "inspect-data", str(node), "--format", "json")
    assert noted.returncode == 0 and noted.stdout == plain.stdout  # (the rows stay as they were)
    assert "Note: snapshot 3 (term 1) holds the state machine's state up to entry 3" in noted.stderr
    assert cli("store", "snapshot", str(node), "--format", "json").returncode == 0
