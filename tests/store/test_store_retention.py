"""The log's beginning moves: which head files may be deleted (store.retention), deleting
them (FileStore.delete_head), and ``store purge`` through the real command line."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from dledgerctl.app import app
from store.errors import StoreUsageError
from store.filestore import FileStore
from store.layout import NodeLayout
from store.lock import lock_node_dir, unlock_node_dir
from store.retention import HeadFile, head_files, plan_head_deletion
from tests.support.commands import invoke as run
from tests.support.stores import all_digests, sample_bodies, write_project_store

DSIZE, ISIZE = 4096, 256


def files(*spans, mtime=0.0):
    """HeadFiles holding entries first..last, one per span."""
    return [HeadFile(f"{k:020d}", k * DSIZE, a, b, mtime) for k, (a, b) in enumerate(spans)]


FOUR = files((0, 9), (10, 19), (20, 29), (30, 35))


@pytest.mark.parametrize("committed,want", [(35, 3), (29, 3), (28, 2), (9, 1), (8, 0), (-1, 0)])
def test_never_the_last_file_nor_one_past_the_commit_index(committed, want):
    plan = plan_head_deletion(FOUR, committed=committed)
    assert len(plan.files) == want
    assert plan.new_begin == (FOUR[want].first_index if want else -1)
    assert plan.kept_because


def test_age_stops_at_the_first_young_file_and_force_ignores_age():
    fs = [HeadFile("a", 0, 0, 9, 100.0), HeadFile("b", 1, 10, 19, 900.0), HeadFile("c", 2, 20, 29, 100.0),
          HeadFile("d", 3, 30, 35, 1000.0)]
    plan = plan_head_deletion(fs, committed=35, now=1000.0, reserved_s=500)
    assert [f.name for f in plan.files] == ["a"] and "b was written 100 s ago" in plan.kept_because
    plan = plan_head_deletion(fs, committed=35, now=1000.0, reserved_s=500, force=True)
    assert [f.name for f in plan.files] == ["a", "b", "c"]


def test_a_live_follower_keeps_what_it_needs_unless_forced():
    plan = plan_head_deletion(FOUR, committed=35, keep_from={"n1": 36, "n2": 15})
    assert len(plan.files) == 1 and plan.new_begin == 10 and plan.cuts_off == []
    assert "n2 still needs" in plan.kept_because
    plan = plan_head_deletion(FOUR, committed=35, keep_from={"n1": 36, "n2": 15}, force=True)
    assert len(plan.files) == 3 and plan.new_begin == 30 and plan.cuts_off == ["n2"]


def test_before_index():
    assert len(plan_head_deletion(FOUR, committed=35, before_index=20).files) == 2
    assert len(plan_head_deletion(FOUR, committed=35, before_index=19).files) == 1
    assert len(plan_head_deletion(FOUR, committed=35, before_index=0).files) == 0


def _store(tmp_path, count=200, committed=150):
    node = tmp_path / "dledger-n0"
    write_project_store(node, count=count, data_file_size=DSIZE, index_file_size=ISIZE, committed=committed,
                        terms=(1, 2, 3))
    return node


def test_delete_head_moves_the_beginning_and_survives_reopening(tmp_path):
    node = _store(tmp_path)
    with FileStore.open(str(node)) as s:
        before = {i: s.get_bytes(i) for i in range(s.begin_index, s.end_index + 1)}
        hf = head_files(s)
        assert hf[0].first_index == 0 and hf[-1].last_index == 199
        assert all(a.last_index + 1 == b.first_index for a, b in zip(hf, hf[1:]))
        plan = plan_head_deletion(hf, committed=s.committed_index, before_index=100)
        data, index = s.delete_head(len(plan.files))
        assert data == [f.name for f in plan.files] and s.begin_index == plan.new_begin > 0
        assert index and all(int(n) + ISIZE <= s.begin_index * 32 for n in index)
        assert [s.get_bytes(i) for i in range(s.begin_index, 200)] == [before[i] for i in range(s.begin_index, 200)]
        with pytest.raises(StoreUsageError):
            s.get(s.begin_index - 1)
        with pytest.raises(StoreUsageError):
            s.delete_head(len(s.data.files))  # the last file is never deleted
        begin = s.begin_index
        s.append_leader(sample_bodies(30, seed=5), term=4)
    with FileStore.open(str(node)) as s:
        assert (s.begin_index, s.end_index, s.committed_index) == (begin, 229, 150)
        assert [s.get_bytes(i) for i in range(begin, 200)] == [before[i] for i in range(begin, 200)]
        assert s.recovery is not None and not s.recovery.changed


def test_delete_head_refuses_entries_past_the_commit_index(tmp_path):
    node = _store(tmp_path, committed=20)
    with FileStore.open(str(node)) as s:
        hf = head_files(s)
        past = next(k for k, f in enumerate(hf) if f.last_index > 20)
        with pytest.raises(StoreUsageError, match="commit index is 20"):
            s.delete_head(past + 1)
        assert s.begin_index == 0 and len(s.data.files) == len(hf)


def test_a_crash_between_data_and_index_deletion_leaves_a_readable_store(tmp_path):
    node = _store(tmp_path)
    names = sorted(os.listdir(node / "data"))[:3]
    for n in names:  # the data files went, the index files below did not
        os.unlink(node / "data" / n)
    with FileStore.open(str(node)) as s:
        assert s.begin_index > 0 and s.end_index == 199
        s.get(s.begin_index)
    r = CliRunner().invoke(app, ["store", "verify", str(node), "--format", "json"])
    assert r.exit_code == 0, r.output


def test_purge_dry_run_changes_nothing_and_purge_deletes(tmp_path):
    node = _store(tmp_path)
    before = all_digests(node)
    r = run("store", "purge", str(node), "--before-index", "100", "--dry-run", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert rows and {x["result"] for x in rows} == {"would delete"} and rows[-1]["last_index"] < 100
    assert all_digests(node) == before

    r = run("store", "purge", str(node), "--before-index", "100", "--yes", "--format", "json")
    assert r.exit_code == 0, r.output
    done = json.loads(r.stdout)
    assert [x for x in done if x["file"].startswith("data/")] == [{**x, "result": "deleted"} for x in rows]
    assert any(x["file"].startswith("index/") for x in done)
    begin = rows[-1]["last_index"] + 1
    assert f"the log begins at {begin}" in r.stderr
    r = run("store", "verify", str(node), "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["summary"]["begin_index"] == begin, r.output


def test_purge_refusals(tmp_path):
    node = _store(tmp_path, committed=80)
    before = all_digests(node)
    r = run("store", "purge", str(node), "--before-index", "120", "--yes")
    assert r.exit_code == 1 and "committed up to 80" in r.stderr
    r = run("store", "purge", str(node), "--yes")
    assert r.exit_code == 2 and "--before-index or --older-than" in r.stderr
    r = run("store", "purge", str(node), "--older-than", "soon", "--yes")
    assert r.exit_code == 2
    r = run("store", "purge", str(node), "--older-than", "1h", "--yes")  # every file was written just now
    assert r.exit_code == 0 and "nothing to delete" in r.stderr
    r = run("store", "purge", str(node), "--before-index", "50")  # no --yes, no answer: not confirmed
    assert r.exit_code == 1 and "not confirmed" in r.stderr
    lock = lock_node_dir(NodeLayout(str(node)))  # as a running node holds it
    try:
        r = run("store", "purge", str(node), "--before-index", "50", "--yes")
        assert r.exit_code == 1 and "in use by another process" in r.stderr
    finally:
        unlock_node_dir(NodeLayout(str(node)), lock)
    assert all_digests(node) == before  # (and no lock file left by any of them)


def test_diff_compares_the_overlap_of_replicas_that_begin_apart(tmp_path):
    a = _store(tmp_path / "a")
    b = _store(tmp_path / "b")
    assert run("store", "purge", str(b), "--before-index", "60", "--yes").exit_code == 0
    r = run("store", "diff", str(a), str(b), "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["identical"] and d["a_begin"] == 0 and d["b_begin"] > 0 and d["compared_from"] == d["b_begin"]


# --- a follower cut back to its leader's first entry (reset_to), both stores alike -------------

def _stores(tmp_path, count=120):
    """The same entries in a FileStore and a MemoryStore."""
    from store.memstore import MemoryStore

    node = _store(tmp_path, count=count, committed=count - 1)
    mem = MemoryStore(data_file_size=DSIZE, clock=lambda: 0.0)
    with FileStore.open(str(node), read_only=True) as ro:
        mem.append_follower(b"".join(ro.get_bytes(i) for i in range(count)))
    mem.set_committed(count - 1)
    return node, mem


def test_both_stores_list_the_same_head_files_and_delete_alike(tmp_path):
    node, mem = _stores(tmp_path)
    with FileStore.open(str(node)) as s:
        want = [(f.name, f.start, f.first_index, f.last_index) for f in head_files(s)]
        assert [(f.name, f.start, f.first_index, f.last_index) for f in head_files(mem)] == want
        s.delete_head(2)
        mem.delete_head(2)
        assert (s.begin_index, s.end_index) == (mem.begin_index, mem.end_index) == (want[2][2], 119)
        assert [s.get_bytes(i) for i in range(s.begin_index, 120)] == [mem.get_bytes(i) for i in range(mem.begin_index, 120)]


def test_reset_to_begins_the_log_again_at_a_leaders_first_entry(tmp_path):
    node, mem = _stores(tmp_path)
    leader = tmp_path / "leader" / "dledger-n0"
    write_project_store(leader, count=300, data_file_size=DSIZE, index_file_size=ISIZE, committed=299,
                        terms=(1, 2, 3), seed=7)
    with FileStore.open(str(leader)) as ld:
        ld.delete_head(8)
        first = ld.get_bytes(ld.begin_index)
        rest = b"".join(ld.get_bytes(i) for i in range(ld.begin_index + 1, 300))
        begin = ld.begin_index
        assert ld.locate(begin)[0] % DSIZE == 0  # a log's first entry starts a data file
        middle = ld.get_bytes(begin + 1)
    for store in (FileStore.open(str(node)), mem):
        with pytest.raises(StoreUsageError, match="does not start a data file"):
            store.reset_to(middle)
        store.reset_to(first)
        assert (store.begin_index, store.end_index, store.committed_index) == (begin, begin, begin - 1)
        store.append_follower(rest)
        assert store.end_index == 299 and store.get_bytes(begin) == first
        if isinstance(store, FileStore):
            store.close()
    with FileStore.open(str(node)) as s:  # recovery finds the log where it now begins
        assert (s.begin_index, s.end_index) == (begin, 299)
        assert not s.recovery.changed
    assert run("store", "verify", str(node)).exit_code == 0
    r = run("store", "diff", str(leader), str(node), "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["identical"], r.output


def test_a_remover_gets_renamed_files_in_order_and_leftovers_are_swept_at_open(tmp_path):
    node = _store(tmp_path)
    handed: list[str] = []
    with FileStore.open(str(node)) as s:
        s.remover = handed.extend  # a node's thread would unlink them; here nobody does
        data, index = s.delete_head(3)
        begin = s.begin_index
    assert [os.path.basename(p) for p in handed] == [n + ".deleted" for n in data] + [n + ".deleted" for n in index]
    assert all(os.path.exists(p) for p in handed)  # renamed, not yet unlinked: the names are free
    assert not any(os.path.exists(node / "data" / n) for n in data)
    with FileStore.open(str(node), read_only=True) as ro:  # a reader ignores them
        assert ro.begin_index == begin
    with FileStore.open(str(node)) as s:  # the next writable open sweeps them
        assert s.begin_index == begin
    assert not any(os.path.exists(p) for p in handed)
    r = run("store", "verify", str(node), "--format", "json")
    assert r.exit_code == 0, r.output
