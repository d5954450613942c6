"""``mq migrate`` and ``mq rebuild`` on a full disk, on a real small filesystem (a tmpfs the
test mounts and unmounts; skipped where it cannot mount): one ``Error:`` line naming the file
that did not fit and the bytes, exit 1, and everything the command wrote removed. Before,
both wrote the index's slot table through a memory map of a sparse file: the first store
into a page the disk had no room for was SIGBUS ("Bus error", exit 135), which left the
disk full and the temporary directory behind.

Run as real processes: a SIGBUS in the test's own process would end the test run."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from tests.support.paths import ROOT
from tests.support.rmq_store import write_broker_store
from tests.support.smallfs import free_bytes, small_tmpfs, used_files
from tests.support.stores import file_crcs


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dledgerctl", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, COLUMNS="200"))


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A DLedger-mode store of about 12 MB of messages (3,000 of 4 KB, each with a key and a
    UNIQ_KEY), its index/ empty: a migrate or rebuild writes index files of RocketMQ's
    default shape, 5,000,000 slots, and the keys' slots (keys unlike each other: their hashes
    spread) lie in most pages of that 20 MB table."""
    root = tmp_path_factory.mktemp("disk-full") / "src"
    keys = [hashlib.sha1(b"%d" % i).hexdigest() for i in range(3000)]
    write_broker_store(str(root), [{"topic": f"T{i % 3}", "queue_id": i % 2, "body": bytes([i % 251]) * 4000,
                                    "properties": {"KEYS": keys[i][:12], "UNIQ_KEY": keys[i][12:]}}
                                   for i in range(3000)], data_file_size=1 << 20)
    os.makedirs(root / "config")
    return root


def one_error_line(r: subprocess.CompletedProcess, where: str) -> str:
    assert r.returncode == 1, (r.returncode, r.stderr[-3000:])
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr[-3000:]
    assert "Traceback" not in r.stderr and where in lines[0] and "disk full" in lines[0], lines[0]
    assert " bytes " in lines[0] or "more bytes needed" in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("size,fails_in", [("14m", "/index/"), ("6m", "/commitlog/")])
def test_migrate_onto_a_disk_too_small_says_which_file_and_leaves_nothing(source, tmp_path, size, fails_in):
    mnt = str(tmp_path / "mnt")
    before = file_crcs(source)
    with small_tmpfs(mnt, size):
        empty = free_bytes(mnt)
        r = run("mq", "migrate", str(source), os.path.join(mnt, "dest"))
        line = one_error_line(r, mnt)
        # 14 MiB: the commit log fits, the index's slot table does not; 6 MiB: the log does not
        assert fails_in in line and ".dest.migrating-" in line, line
        assert used_files(mnt) == [] and free_bytes(mnt) == empty  # (its temporary directory is gone)
    assert file_crcs(source) == before


def test_rebuild_in_place_on_a_full_disk_leaves_the_store_as_it_was(source, tmp_path):
    mnt = str(tmp_path / "mnt")
    with small_tmpfs(mnt, "22m"):
        root = os.path.join(mnt, "broker")
        # (sparse: the store's preallocated, still empty file tails take no room there)
        subprocess.run(["cp", "-a", "--sparse=always", str(source), root], check=True, timeout=120)
        before, names, free = file_crcs(root), used_files(mnt), free_bytes(mnt)
        r = run("mq", "rebuild", root)
        line = one_error_line(r, root)
        assert ".rebuild-" in line, line
        assert used_files(mnt) == names and file_crcs(root) == before and free_bytes(mnt) == free
        # what the failed run wrote is gone: a rebuild that fits (a small index shape) goes through
        ok = run("mq", "rebuild", root, "--max-hash-slot-num", "1000", "--max-index-num", "8000")
        assert ok.returncode == 0, ok.stderr
        assert not [n for n in os.listdir(root) if n.startswith(".rebuild-")]


def test_an_id_map_on_a_full_disk_is_named_and_nothing_is_left(source, tmp_path):
    mnt = str(tmp_path / "mnt")
    with small_tmpfs(mnt, "64k"):  # (the map of 3,000 messages takes about 190 KB)
        empty = free_bytes(mnt)
        r = run("mq", "migrate", str(source), str(tmp_path / "dest"), "--id-map", os.path.join(mnt, "ids.csv"))
        line = one_error_line(r, mnt)
        assert "ids.csv" in line, line
        assert used_files(mnt) == [] and free_bytes(mnt) == empty
    assert not (tmp_path / "dest").exists() and [n for n in os.listdir(tmp_path) if n != "mnt"] == []


def test_a_config_copy_that_does_not_fit_is_named(tmp_path):
    src = tmp_path / "src"
    write_broker_store(str(src), [{"topic": "T", "body": b"m%d" % i, "properties": {"KEYS": f"k{i}"}}
                                  for i in range(50)], data_file_size=1 << 20)
    os.makedirs(src / "config")
    (src / "config" / "topics.json").write_bytes(b"{}" + b" " * (3 << 20))  # (more than the disk takes)
    mnt = str(tmp_path / "mnt")
    with small_tmpfs(mnt, "2m"):
        r = run("mq", "migrate", str(src), os.path.join(mnt, "dest"), "--commitlog-file-size", "64KiB",
                "--max-hash-slot-num", "100", "--max-index-num", "400")
        line = one_error_line(r, mnt)
        assert "/config/topics.json: disk full: 3145730 bytes needed to copy" in line, line
        assert used_files(mnt) == []
