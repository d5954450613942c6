"""An operator's cut (REPAIR) is kept by the keepers the store was opened with, nothing swapped
(store/base.py ``LogStore.cut_ordered``): by ``keeper`` (--keep-truncated) when there is one,
else by ``operator_keeper`` (the node's, into its directory); a leader's own forced cut keeps
only with ``keeper``; the follower's answer names the file kept."""

from __future__ import annotations

import os

import pytest

from cluster.raft.follower import FollowerLog
from cluster.raft.rpc import Code, RepairRequest
from store.filestore import FileStore
from store.kept import KEEP_ALL, KEPT_IN, Keeper, iter_kept, kept_files
from store.memstore import MemoryStore


def _store(kind: str, tmp_path, keeper, operator_keeper):
    if kind == "file":
        s = FileStore.open(str(tmp_path / "n"), data_file_size=1 << 12, index_file_size=1 << 12, keeper=keeper,
                           operator_keeper=operator_keeper)
    else:
        s = MemoryStore(data_file_size=1 << 12)
        s.keeper, s.operator_keeper = keeper, operator_keeper
    s.append_leader([b"e%d" % i * 20 for i in range(20)], 1)
    s.set_committed(15)
    return s


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_without_keep_truncated_only_the_operators_cut_is_kept_in_the_operator_keepers_dir(tmp_path, kind):
    ops = str(tmp_path / "ops")
    s = _store(kind, tmp_path, None, Keeper(ops, KEEP_ALL))
    assert s.truncate(18, force=True) == 2  # (a leader's own forced cut: nothing keeps it)
    assert not os.path.exists(ops)
    want = [s.get_bytes(i) for i in range(12, 18)]
    dropped, path = s.cut_ordered(12)  # (committed entries too)
    assert dropped == 6 and s.end_index == 11 and s.committed_index == 11
    assert [p for p, _ in kept_files(ops)] == [path] and os.path.basename(path).startswith("truncated-12-17-")
    assert [h.index for _o, h, _b in iter_kept(path)] == list(range(12, 18))
    with open(path, "rb") as fh:
        assert fh.read() == b"".join(want)
    assert s.cut_ordered(12) == (0, None)  # (nothing left there to cut)
    s.close()


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_with_keep_truncated_every_cut_is_kept_there(tmp_path, kind):
    keep, ops = str(tmp_path / "keep"), str(tmp_path / "ops")
    s = _store(kind, tmp_path, Keeper(keep), Keeper(ops, KEEP_ALL))
    s.truncate(18, force=True)
    dropped, path = s.cut_ordered(10)
    assert dropped == 8 and os.path.dirname(path) == keep
    assert sorted(os.path.basename(p).split("-")[1] for p, _ in kept_files(keep)) == ["10", "18"]
    assert not os.path.exists(ops)
    s.close()


def test_a_store_without_keepers_cuts_and_keeps_nothing(tmp_path):
    s = _store("memory", tmp_path, None, None)
    assert s.cut_ordered(5) == (15, None) and s.end_index == 4


def test_the_repair_answer_names_the_file_kept(tmp_path):
    s = _store("memory", tmp_path, None, Keeper(str(tmp_path / "ops"), KEEP_ALL))
    f = FollowerLog(s)
    resp = f.repair(RepairRequest("g", "n0", 3, 14), 3)
    (path, _), = kept_files(str(tmp_path / "ops"))
    assert resp.code == Code.SUCCESS and resp.dropped == 6 and resp.remark == f"{KEPT_IN}{path}"
    resp = f.repair(RepairRequest("g", "n0", 3, 14), 3)  # (past the end: nothing cut, nothing named)
    assert resp.code == Code.SUCCESS and resp.dropped == 0 and resp.remark == ""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    s.operator_keeper = Keeper(str(blocker), KEEP_ALL)
    resp = f.repair(RepairRequest("g", "n0", 3, 10), 3)  # (a keep that fails cuts nothing)
    assert resp.code == Code.UNEXPECTED_ARGUMENT and s.end_index == 13 and "not-a-dir" in resp.remark
