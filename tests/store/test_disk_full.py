"""A full disk: the store puts back a write that fails half-way, the leader refuses appends
with DISK_FULL (nothing appended), a follower that cannot write answers DISK_FULL and is
retried after a back-off, and everything resumes when space returns. Store and simulation
level; real processes on a size-limited tmpfs are in tests/node/test_faults.py."""

from __future__ import annotations

import errno
import hashlib
import os

import pytest

import store.opening as filestore
from cluster.raft.member import MemoryTermStore, Role
from cluster.raft.rpc import Code, HeartBeatRequest, PushRequest, PushType
from tests.support.sim import Sim
from store.errors import StoreIOError
from store.filestore import FileStore


class Disk:
    """Makes the creation of new store files fail with ENOSPC while ``full``."""

    def __init__(self, monkeypatch) -> None:
        self.full = False
        self.refused = 0
        real = filestore._preallocate

        def preallocate(fd, size):
            if self.full:
                self.refused += 1
                raise StoreIOError(errno.ENOSPC, "disk full: cannot allocate a new store file")
            real(fd, size)

        monkeypatch.setattr(filestore, "_preallocate", preallocate)


def snapshot(node) -> dict[str, str]:
    out = {}
    for sub in ("data", "index"):
        for name in sorted(os.listdir(os.path.join(node, sub))):
            with open(os.path.join(node, sub, name), "rb") as fh:
                out[f"{sub}/{name}"] = hashlib.sha256(fh.read()).hexdigest()
    return out


SIZES = {"data_file_size": 4096, "index_file_size": 512}  # 16 index records per index file


@pytest.mark.parametrize("what", ["data", "index"])
def test_a_leader_batch_that_needs_a_new_file_on_a_full_disk_is_not_appended_at_all(tmp_path, monkeypatch, what):
    disk = Disk(monkeypatch)
    node = str(tmp_path / "dledger-n0")
    with FileStore.open(node, **SIZES) as s:
        if what == "data":
            s.append_leader([b"a" * 1000] * 3, 1)  # ~3.1 KiB of the first 4 KiB data file
            batch = [b"b" * 500] * 4  # the second of these needs the next data file
        else:
            s.append_leader([b"a" * 10] * 14, 1)  # 14 of the 16 records of the first index file
            batch = [b"b" * 10] * 4
        before = (s.end_index, s.end_term, s.write_pos, s.last_chain)
        s.flush()
        files = snapshot(node)
        disk.full = True
        with pytest.raises(StoreIOError) as info:
            s.append_leader(batch, 2)
        assert info.value.errno == errno.ENOSPC and disk.refused == 1
        assert (s.end_index, s.end_term, s.write_pos, s.last_chain) == before
        s.flush()
        assert snapshot(node) == files  # the part that fitted was zeroed, the new file is gone
        assert s.get(before[0]).body[:1] == b"a"
        disk.full = False  # space returns: the same batch goes in whole
        got = s.append_leader(batch, 2)
        assert [a.index for a in got] == list(range(before[0] + 1, before[0] + 5))
    with FileStore.open(node, **SIZES) as s:
        assert not s.recovery.changed
        assert [e.body[:1] for e in s.entries()][-5:] == [b"a", b"b", b"b", b"b", b"b"]


def test_a_follower_push_that_needs_a_new_file_on_a_full_disk_leaves_the_log_as_it_was(tmp_path, monkeypatch):
    disk = Disk(monkeypatch)
    leader, follower = str(tmp_path / "dledger-n0"), str(tmp_path / "dledger-n1")
    with FileStore.open(leader, **SIZES) as L, FileStore.open(follower, **SIZES) as F:
        L.append_leader([b"x" * 900] * 8, 1)
        F.append_follower(L.read_entries(0, 3, 1 << 20)[0])
        before = (F.end_index, F.write_pos)
        F.flush()
        files = snapshot(follower)
        disk.full = True
        with pytest.raises(StoreIOError):
            F.append_follower(L.read_entries(3, 5, 1 << 20)[0])  # entries 3.. reach the second data file
        F.flush()
        assert (F.end_index, F.write_pos) == before and snapshot(follower) == files
        disk.full = False
        F.append_follower(L.read_entries(3, 5, 1 << 20)[0])
        assert [F.get_bytes(i) for i in range(8)] == [L.get_bytes(i) for i in range(8)]


def test_the_follower_handler_answers_disk_full_and_keeps_its_log(tmp_path, monkeypatch):
    from cluster.raft.follower import FollowerLog

    disk = Disk(monkeypatch)
    with FileStore.open(str(tmp_path / "dledger-n0"), **SIZES) as L, \
            FileStore.open(str(tmp_path / "dledger-n1"), **SIZES) as F:
        L.append_leader([b"x" * 900] * 8, 1)
        h = FollowerLog(F)
        assert h.handle(PushRequest("g", "n0", 1, PushType.COMPARE, -1, -1)).code == Code.SUCCESS
        raw, n = L.read_entries(0, 8, 1 << 20)
        disk.full = True
        resp = h.handle(PushRequest("g", "n0", 1, PushType.APPEND, 7, 0, n, raw))
        assert resp.code == Code.DISK_FULL and resp.end_index == -1 and "disk full" in resp.remark
        assert F.committed_index == -1
        disk.full = False
        resp = h.handle(PushRequest("g", "n0", 1, PushType.APPEND, 7, 0, n, raw))
        assert resp.code == Code.SUCCESS and resp.end_index == 7 and F.committed_index == 7


class FullableSim(Sim):
    """A simulated cluster whose nodes' disks can be full: appends to a full node's store
    raise ENOSPC before writing anything (what the file store guarantees, tested above)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.full: set[str] = set()
        self.pushes: dict[str, int] = {i: 0 for i in self.ids}
        for i, st in self.stores.items():
            for name in ("append_leader", "append_follower"):
                real = getattr(st, name)

                def refusing(*args, _real=real, _node=i, **kw):
                    if _node in self.full:
                        raise StoreIOError(errno.ENOSPC, "disk full")
                    return _real(*args, **kw)

                setattr(st, name, refusing)

    def _send(self, frm, to, req):
        if isinstance(req, PushRequest) and req.type == PushType.APPEND:
            self.pushes[to] += 1
        super()._send(frm, to, req)


def test_simulated_cluster_leader_refuses_with_disk_full_then_recovers():
    sim = FullableSim(3, seed=11)
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    leader = sim.leader()
    ok = sim.propose(leader, [b"before"])
    sim.run_until(lambda: ok.done, 5000)
    assert ok.code == Code.SUCCESS
    sim.full.add(leader)
    refused = sim.propose(leader, [b"refused-1", b"refused-2"])
    assert refused.done and refused.code == Code.DISK_FULL and "disk full" in refused.remark
    sim.run(3000)
    assert sim.leader() == leader  # a full disk does not cost the leadership (heartbeats need no disk)
    sim.full.discard(leader)
    after = sim.propose(leader, [b"after"])
    sim.run_until(lambda: after.done, 5000)
    assert after.code == Code.SUCCESS and after.first_index == ok.last_index + 1
    sim.run_until(lambda: sim.logs_equal(), 5000)
    bodies = [e.body for e in sim.stores[leader].entries()]
    assert b"refused-1" not in bodies and b"after" in bodies


def test_simulated_follower_with_a_full_disk_is_retried_after_a_back_off_and_catches_up():
    sim = FullableSim(3, seed=12)
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    leader = sim.leader()
    full, other = [i for i in sim.ids if i != leader]
    sim.full.add(full)
    done = []
    for k in range(20):
        p = sim.propose(leader, [b"e%d" % k])
        sim.run_until(lambda: p.done, 5000)
        done.append(p)
        sim.run(50)
    assert all(p.code == Code.SUCCESS for p in done)  # the leader and the other follower commit
    sim.pushes[full] = 0
    sim.run(2000)
    assert sim.pushes[full] <= 40  # about one push per 100 ms back-off, not one per tick
    d = sim.nodes[leader].role.dispatchers[full]
    assert "DISK_FULL" in d.last_error and d.watermark < sim.stores[leader].end_index
    assert sim.nodes[full].member.leader_id == leader  # still following, not electing
    sim.full.discard(full)
    sim.run_until(lambda: sim.logs_equal() and sim.stores[full].committed_index == sim.stores[leader].end_index,
                  5000)


class FullableTerms:
    """A term store whose disk can be full: save raises ENOSPC and changes nothing."""

    def __init__(self, inner) -> None:
        self.inner, self.full = inner, False

    def load(self):
        return self.inner.load()

    def save(self, term, voted_for):
        if self.full:  # as store.metafiles raises it
            cause = OSError(errno.ENOSPC, "No space left on device")
            raise StoreIOError(f"cannot write currterm: {cause.strerror}") from cause
        self.inner.save(term, voted_for)


def test_simulated_nodes_that_cannot_persist_a_term_neither_raise_nor_act_in_it():
    """A disk-full exploration of the fault harness: with every disk full, the leader
    killed and the others unable to write ``currterm``, the core raised StoreIOError out of
    on_response/handle (tracebacks in the node's log, a leader kept in a term it could not
    leave). Now a node that cannot persist a term does not enter it: no vote, no election,
    no push accepted from a leader of that term, and the cluster elects once space returns."""
    sim = FullableSim(3, seed=13, term_store=lambda: FullableTerms(MemoryTermStore()))
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    old = sim.leader()
    p = sim.propose(old, [b"before"])
    sim.run_until(lambda: p.done, 5000)
    terms = {i: sim.nodes[i].member.term for i in sim.ids}
    for i in sim.ids:
        sim.terms[i].full = True
        sim.full.add(i)
    sim.crash(old)
    sim.run(8000)  # pre-votes succeed, real elections cannot start: nobody leads, nothing raises
    live = [i for i in sim.ids if i != old]
    assert sim.leader() is None
    assert all(sim.nodes[i].member.term == terms[i] for i in live)
    assert any("cannot" in text and "term" in text for _t, _n, text in sim.notes)
    for i in sim.ids:
        sim.terms[i].full = False
        sim.full.discard(i)
    sim.restart(old)
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    after = sim.propose(sim.leader(), [b"after"])
    sim.run_until(lambda: after.done, 5000)
    assert after.code == Code.SUCCESS
    sim.run_until(lambda: sim.logs_equal(), 5000)


def test_a_leader_that_cannot_persist_a_higher_term_steps_down_in_its_own():
    sim = FullableSim(3, seed=14, term_store=lambda: FullableTerms(MemoryTermStore()))
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    old = sim.leader()
    term = sim.nodes[old].member.term
    sim.terms[old].full = True
    sim.isolate(old)
    sim.run_until(lambda: sim.leader() not in (None, old), 10_000)
    sim.heal()
    sim.run(3000)  # it hears of the higher term but cannot write it: a follower in its own term
    n = sim.nodes[old]
    assert n.member.role != Role.LEADER and n.member.term == term
    new = sim.leader()
    beat = n.handle(HeartBeatRequest("sim", new, sim.nodes[new].member.term), sim.now)
    assert beat.code == Code.DISK_FULL and n.member.term == term  # refused, not followed in a term not on disk
    assert sim.stores[old].end_index <= sim.stores[sim.leader()].end_index
    sim.terms[old].full = False
    sim.run_until(lambda: sim.nodes[old].member.term == sim.nodes[sim.leader()].member.term and sim.logs_equal(),
                  10_000)


# --- on a real full disk (a tmpfs the test mounts; skipped where it cannot) ----------------------

def test_appending_on_a_real_full_disk_is_an_error_naming_the_file_and_the_store_keeps_its_log(tmp_path):
    from tests.support.smallfs import small_tmpfs

    mnt = str(tmp_path / "mnt")
    with small_tmpfs(mnt, "3m"):
        node = os.path.join(mnt, "dledger-n0")
        with FileStore.open(node, data_file_size=1 << 20, index_file_size=64 << 10) as s:
            with pytest.raises(StoreIOError) as info:
                for _ in range(100):  # (3 MiB hold two data files and their index: the third does not fit)
                    s.append_leader([bytes(1000) + b"x"] * 100, 1)
            end = s.end_index
        text = str(info.value)
        assert info.value.errno == errno.ENOSPC and text.startswith(node) and "disk full" in text, text
        assert "bytes" in text and "[Errno" not in text, text
        with FileStore.open(node, data_file_size=1 << 20, index_file_size=64 << 10) as s:
            assert s.end_index == end and not s.recovery.changed
            assert s.get(end).body.endswith(b"x")


ZEROING = """
import sys
from store.filestore import FileStore
with FileStore.open(sys.argv[1], data_file_size=1 << 20, index_file_size=64 << 10) as s:
    print(s.end_index)
"""


def test_recovery_zeroes_a_cut_tail_on_a_full_disk_without_new_blocks(tmp_path):
    """A copied store's files are sparse where they held zeros (cp --sparse), so they are not
    reserved; recovery's zeroing of a cut tail wrote 1 MiB chunks through the mapping,
    holes and all, and on a full disk that was SIGBUS. Now it writes only where bytes are not
    zero (holes are skipped), so it needs no block at all. On ext4 (smallfs: tmpfs allocates
    a page for a read of a hole through a mapping too). A real process: SIGBUS would end the
    test run."""
    import subprocess
    import sys

    from tests.support.paths import ROOT
    from tests.support.smallfs import fill, small_ext4

    src = str(tmp_path / "dledger-n0")
    with FileStore.open(src, data_file_size=1 << 20, index_file_size=64 << 10) as s:
        got = s.append_leader([b"\1" + bytes(64 << 10) + b"\1"] * 10, 1)  # (zero pages in every body)
        s.set_committed(4)
    last = got[-1]
    with open(os.path.join(src, "data", "00000000000000000000"), "r+b") as fh:
        fh.seek(last.pos + 48)
        fh.write(b"\2")  # entry 9's body no longer matches its CRC: recovery cuts it
    mnt = str(tmp_path / "mnt")
    with small_ext4(mnt, str(tmp_path / "disk.img"), "8M"):
        node = os.path.join(mnt, "dledger-n0")
        subprocess.run(["cp", "-a", "--sparse=always", src, node], check=True, timeout=60)
        fill(mnt, leave=16 << 10)  # (room for the checkpoint written at close, not for entry 9's 64 KiB of holes)
        r = subprocess.run([sys.executable, "-c", ZEROING, node], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
        assert r.stdout.split() == ["8"]
