"""Backup files (store/backup.py) and what is made from them (store/restore.py), on real
stores written by FileStore: a backup holds exactly the committed prefix, any flipped byte is
found and named, restored members are byte-identical followers of the backup's log, and a
forced survivor keeps its whole log."""

from __future__ import annotations

import json
import os

import pytest

from store.backup import BackupError, BackupReader, BackupWriter, backup_store
from store.errors import StoreInUseError, StoreUsageError
from store.filestore import FileStore
from store.format import MAGIC_CONFIG
from store.layout import NodeLayout
from store.lock import lock_node_dir, unlock_node_dir
from store.metafiles import read_checkpoint, read_currterm, write_checkpoint
from store.restore import force_apply, force_plan, restore_store
from tests.support.stores import file_digests, write_project_store

BODY = b'{"voters":"a-127.0.0.1:1;b-127.0.0.1:2","learners":""}'


@pytest.fixture
def source(tmp_path):
    node = tmp_path / "dledger-n0"
    raw = write_project_store(node, count=300, config_at=40, committed=289)
    return str(node), raw


def test_backup_holds_the_committed_prefix(source, tmp_path):
    node, raw = source
    out = str(tmp_path / "b")
    m = backup_store(node, out, group="g")
    assert (m.first_index, m.last_index, m.entries, m.group) == (0, 289, 290, "g")
    assert m.members == {"voters": "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913", "learners": ""}
    assert m.data_file_size == 4096 and len(m.chunks) > 10  # (a chunk per data file at most)
    with BackupReader(out) as r:
        assert r.verify() is None
        assert b"".join(d for _i, _c, d in r.chunks()) == b"".join(raw[:290])
    assert not os.path.exists(out + ".partial")


def test_every_flipped_byte_is_named(source, tmp_path):
    node, _raw = source
    out = str(tmp_path / "b")
    backup_store(node, out)
    data = open(out, "rb").read()
    with BackupReader(out) as r:
        chunks = r.manifest.chunks
    for at in range(12, len(data), 997):
        bad = bytearray(data)
        bad[at] ^= 0x10
        path = str(tmp_path / "bad")
        with open(path, "wb") as fh:
            fh.write(bad)
        try:
            with BackupReader(path) as r:
                problem = r.verify()
        except BackupError:
            continue  # (the manifest or the tail)
        assert problem is not None, at
        c = next(i for i, c in enumerate(chunks) if c.offset <= at < c.offset + c.length)
        assert problem.chunk == c and problem.text.startswith(f"chunk {c} "), (at, problem)


@pytest.mark.parametrize("content, words", [
    (b"", "not a dledgerctl backup"),
    (b"PK\x03\x04 a zip file", "not a dledgerctl backup"),
    (b"DLBACKUP\x00\x00\x00\x07" + b"\x00" * 40, "format version 7"),
    (b"DLBACKUP\x00\x00\x00\x01" + b"\x00" * 40, "no manifest"),
])
def test_other_files_are_refused(tmp_path, content, words):
    path = tmp_path / "x"
    path.write_bytes(content)
    with pytest.raises(BackupError, match=words):
        BackupReader(str(path))


def test_a_truncated_backup_is_refused(source, tmp_path):
    node, _raw = source
    out = str(tmp_path / "b")
    backup_store(node, out)
    data = open(out, "rb").read()
    (tmp_path / "t").write_bytes(data[:len(data) // 2])
    with pytest.raises(BackupError, match="no manifest"):
        BackupReader(str(tmp_path / "t"))


def test_a_failed_backup_leaves_nothing(tmp_path):
    out = str(tmp_path / "b")
    with pytest.raises(StoreUsageError):
        with BackupWriter(out) as w:
            w.finish(group=None, source="test")  # (no entries)
    assert os.listdir(tmp_path) == []
    (tmp_path / "b").write_bytes(b"x")
    with pytest.raises(StoreUsageError, match="exists already"):
        BackupWriter(out)


def test_restored_members_are_identical_followers(source, tmp_path):
    node, raw = source
    out = str(tmp_path / "b")
    backup_store(node, out)
    dirs = []
    for member in ("a", "b"):
        d = str(tmp_path / "new" / f"dledger-{member}")
        with BackupReader(out) as r:
            done = restore_store(r, d, BODY, 9)
        assert (done.last_index, done.config_index, done.term) == (289, 290, 9)
        dirs.append(d)
    assert file_digests(dirs[0]) == file_digests(dirs[1])
    with FileStore.open(dirs[0], read_only=True) as s:
        assert [s.get_bytes(i) for i in range(290)] == raw[:290]
        cfg = s.get(290)
        assert (cfg.magic, cfg.term, bytes(cfg.body)) == (MAGIC_CONFIG, 9, BODY)
    assert read_checkpoint(dirs[0]).committed_index == 290
    assert read_currterm(dirs[0]).term == 9


def test_restore_refuses_a_damaged_backup_and_a_used_directory(source, tmp_path):
    node, _raw = source
    out = str(tmp_path / "b")
    backup_store(node, out)
    data = bytearray(open(out, "rb").read())
    data[9000] ^= 1
    (tmp_path / "bad").write_bytes(data)
    target = str(tmp_path / "new" / "dledger-a")
    with BackupReader(str(tmp_path / "bad")) as r:
        with pytest.raises(BackupError, match="chunk .*nothing restored"):
            restore_store(r, target, BODY, 9)
    assert not os.path.exists(target)
    os.makedirs(target)
    (tmp_path / "new" / "dledger-a" / "x").write_bytes(b"")
    with BackupReader(out) as r:
        with pytest.raises(StoreUsageError, match="not empty"):
            restore_store(r, target, BODY, 9)
    assert os.listdir(target) == ["x"]


def test_force_plans_then_commits_the_whole_log(source):
    node, raw = source
    before = file_digests(node)
    plan = force_plan(node)
    assert [u["index"] for u in plan.uncommitted] == list(range(290, 300))
    assert plan.new_term == 4 and file_digests(node) == before  # (a plan changes nothing)
    index = force_apply(plan, BODY)
    assert index == 300
    with FileStore.open(node, read_only=True) as s:
        assert [s.get_bytes(i) for i in range(300)] == raw
        assert (s.get(300).magic, s.get(300).term) == (MAGIC_CONFIG, 4)
    assert read_checkpoint(node).committed_index == 300 and read_currterm(node).term == 4


def test_force_is_refused_on_a_running_store(source):
    node, _raw = source
    layout = NodeLayout(node)
    fd = lock_node_dir(layout)
    try:
        with pytest.raises(StoreInUseError, match="running node"):
            force_plan(node)
    finally:
        unlock_node_dir(layout, fd)
    plan = force_plan(node)
    write_checkpoint(node, 300, 299)
    with FileStore.open(node) as s:  # (changed after the plan)
        s.append_leader([b"x"], 5)
    with pytest.raises(StoreUsageError, match="changed since the plan"):
        force_apply(plan, BODY)
    assert json.loads(BODY)  # (the body is a member list, as membership.py writes it)
