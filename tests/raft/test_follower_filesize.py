"""A follower whose data files are not the leader's size (issue 44, item 21).

A member started without the group's data file size runs on DLedger's 1 GiB default; the
brokers of a RocketMQ group roll their (smaller) files, and from the first roll the leader
puts entries where this member's log would not. It learns the leader's size from that entry
and takes it when no entry of its log moves (cluster/raft/filesize.py); when it cannot (the
size was configured, its log spans several files, its files are smaller), it refuses the
entry, counts it and says the fix once. Here: the pure rule, the follower over memory and
file stores, whole groups in the seeded simulation (tests/support/sim.py), and real dledgerctl
processes (the refusal in the log, cluster status and the metrics; the fix). The same with
the real Java DLedger as leader: tests/java/test_follower_filesize_java.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request

import pytest

from cluster.raft.filesize import leader_file_size
from cluster.raft.follower import REFUSAL_NOTE_MS, FollowerLog
from cluster.raft.rpc import Code, PushRequest, PushType
from store.errors import StoreUsageError
from store.filestore import FileStore
from store.memstore import MemoryStore
from tests.support.commands import cli
from tests.support.group import wait_for
from tests.support.paths import ROOT
from tests.support.ports import free_port_base
from tests.support.sim import Sim, SimStore

KIB = 1024
SMALL = 64 * KIB  # the leader's data files
BODY = 700  # bytes: 92 entries of 748 a 64 KiB file, 68 bytes of BLANK at its end


def leader_log(store, n: int, term: int = 1):
    for k in range(n):
        store.append_leader([b"%05d" % k + b"x" * (BODY - 5)], term)
    return store


def push(f: FollowerLog, leader, first: int, count: int, term: int = 1):
    raw = b"".join(leader.get_bytes(i) for i in range(first, first + count))
    return f.handle(PushRequest("g", "n0", term, PushType.APPEND, first + count - 1, first, count, raw))


def feed(f: FollowerLog, leader, batch: int):
    """The leader's log pushed to ``f`` ``batch`` entries at a time, as far as it takes them."""
    f.handle(PushRequest("g", "n0", 1, PushType.COMPARE, -1, -1, 0, b""))
    i = f.store.end_index + 1
    while i <= leader.end_index:
        n = min(batch, leader.end_index - i + 1)
        resp = push(f, leader, i, n)
        if resp.code != Code.SUCCESS:
            return resp
        i += n
    return None


# -- the rule -----------------------------------------------------------------------------

def test_the_rule_takes_the_size_from_the_leaders_first_roll_only():
    # the numbers: 1 GiB here, entry 6217 at 1048576 while this log ends at 1048453
    assert leader_file_size(1 << 30, 0, 1048453, 1048576, 200) == 1 << 20
    # a log cut back to the leader's first entry at 3 MiB: its next file begins at 4 MiB
    assert leader_file_size(1 << 30, 3 << 20, (4 << 20) - 100, 4 << 20, 200) == 1 << 20
    # nothing to learn:
    assert leader_file_size(1 << 30, 0, 1048453, 1048576, 50) is None  # the entry fitted before pos: no roll
    assert leader_file_size(1 << 30, 0, 1048572, 1048576, 200) is None  # no room for the BLANK the leader writes
    assert leader_file_size(1 << 30, 0, 1048576, 1048000, 200) is None  # behind this log's end
    assert leader_file_size(1 << 20, 0, 1048453, 1048576, 200) is None  # the same size: not a size matter
    assert leader_file_size(1 << 19, 0, 400_000, 1048576, 200) is None  # larger than ours: we would have rolled
    assert leader_file_size(1 << 30, 3 << 20, (5 << 20) - 100, 5 << 20, 200) is None  # 3 MiB is not a 2 MiB file start
    assert leader_file_size(1 << 30, 0, 40, 64, 60) is None  # the entry would not fit such files
    assert leader_file_size(1 << 30, -1, 0, 1048576, 200) is None  # an empty log shows no file start


# -- the follower --------------------------------------------------------------------------

@pytest.mark.parametrize("batch", [1, 7, 500])
def test_a_follower_without_a_configured_size_takes_the_leaders_at_its_first_roll(batch):
    leader = leader_log(MemoryStore(data_file_size=SMALL), 400)  # 4 files and more
    f = FollowerLog(MemoryStore(data_file_size=1 << 30), learn_file_size=True)
    assert feed(f, leader, batch) is None
    assert f.store.end_index == leader.end_index and f.store.data_file_size == SMALL
    assert all(f.store.get_bytes(i) == leader.get_bytes(i) for i in range(400))
    notes = f.take_notes(0)
    assert [n[1]["event"] for n in notes] == ["data_file_size"], notes
    assert "took the leader's data file size, 65536 bytes (this member had 1073741824)" in notes[0][0]
    assert f.refused == {} and f.refusing is None and f.describe() == {}


def test_a_configured_size_is_kept_and_the_push_refused_with_the_fix_said_once():
    leader = leader_log(MemoryStore(data_file_size=SMALL), 200)
    f = FollowerLog(MemoryStore(data_file_size=1 << 30), learn_file_size=False)
    resp = feed(f, leader, 10)
    assert resp is not None and resp.code == Code.INCONSISTENT_STATE
    assert f.store.end_index == 86 and f.store.data_file_size == 1 << 30  # (87 entries fit the first file)
    assert "entry 87 is at pos 65536, the local log continues at 65076" in resp.remark
    assert ("start this member with --data-file-size 65536, the leader's, its store moved aside (its files are "
            "1073741824 bytes)") in resp.remark
    for _ in range(5):  # the leader compares and pushes again, again and again
        assert push(f, leader, 87, 3).code == Code.INCONSISTENT_STATE
    assert f.refused == {"position": 6}
    assert f.describe() == {"push_refused": resp.remark, "pushes_refused": {"position": 6}}
    first = f.take_notes(1000)
    assert len(first) == 1 and first[0][0] == resp.remark and first[0][1]["event"] == "push_refused"
    push(f, leader, 87, 3)
    assert f.take_notes(2000) == []  # (said once: not again for every push)
    again = f.take_notes(1000 + REFUSAL_NOTE_MS)
    assert len(again) == 1 and again[0][0].endswith("(1 refused since it was last said)")


def test_a_follower_with_smaller_files_than_the_leaders_cannot_learn_and_says_so():
    leader = leader_log(MemoryStore(data_file_size=SMALL), 200)
    f = FollowerLog(MemoryStore(data_file_size=32 * KIB), learn_file_size=True)
    resp = feed(f, leader, 10)
    assert resp.code == Code.INCONSISTENT_STATE and f.store.data_file_size == 32 * KIB
    assert "the leader's data files are larger than this member's 32768 bytes" in resp.remark
    assert "--data-file-size N, the leader's data file size" in resp.remark
    assert f.refused == {"position": 1}
    # started again with the right size, it takes the pushes from there
    f = FollowerLog(MemoryStore(data_file_size=SMALL), learn_file_size=False)
    assert feed(f, leader, 10) is None and f.refused == {}


def test_a_refused_cut_back_counts_too():
    # the leader's log begins at its 3rd file (older ones deleted); ours cannot begin there
    leader = leader_log(MemoryStore(data_file_size=SMALL), 300)
    leader.set_committed(299)
    leader.delete_head(2)
    first = leader.begin_index
    f = FollowerLog(MemoryStore(data_file_size=1 << 30), learn_file_size=True)
    resp = f.handle(PushRequest("g", "n0", 1, PushType.TRUNCATE, -1, first, 1, leader.get_bytes(first),
                                begin_index=first))
    assert resp.code == Code.INCONSISTENT_STATE
    assert f"at pos {2 * SMALL} does not start a data file of 1073741824 bytes" in resp.remark
    assert f.refused == {"position": 1} and "--data-file-size N" in f.refusing
    assert "moved aside" not in f.refusing  # (nothing here to move: a restart with the size will do)


# -- the file store ------------------------------------------------------------------------

def test_a_file_store_takes_the_size_cuts_its_file_and_opens_again_with_it(tmp_path):
    leader = leader_log(MemoryStore(data_file_size=SMALL), 300)
    node = str(tmp_path / "dledger-n2")
    with FileStore.open(node, data_file_size=1 << 20) as s:  # (1 MiB here, not 1 GiB on a test machine's disk)
        f = FollowerLog(s, learn_file_size=True)
        assert feed(f, leader, 16) is None
        assert s.data_file_size == SMALL
    names = sorted(os.listdir(os.path.join(node, "data")))
    assert names == [f"{k * SMALL:020d}" for k in range(4)]
    assert {os.path.getsize(os.path.join(node, "data", n)) for n in names} == {SMALL}
    with FileStore.open(node) as s:  # no size given: the files say it
        assert s.data_file_size == SMALL and s.end_index == 299
        assert all(s.get_bytes(i) == leader.get_bytes(i) for i in range(300))
        s.append_leader([b"after a restart"], 1)  # goes on where the leader would
        assert s.locate(300)[0] == leader.append_leader([b"after a restart"], 1)[0].pos


def test_a_file_store_whose_log_spans_files_refuses_a_new_size(tmp_path):
    with FileStore.open(str(tmp_path / "dledger-n2"), data_file_size=128 * KIB) as s:
        leader_log(s, 200)  # two files of 128 KiB
        with pytest.raises(StoreUsageError, match="spans 2 data files"):
            s.adopt_data_file_size(SMALL)
        assert s.data_file_size == 128 * KIB
    with FileStore.open(str(tmp_path / "dledger-n3"), data_file_size=128 * KIB) as s:
        leader_log(s, 100)  # 74,800 bytes: more than one 64 KiB file holds
        with pytest.raises(StoreUsageError, match="does not fit one data file of 65536"):
            s.adopt_data_file_size(SMALL)


# -- whole groups, simulated ---------------------------------------------------------------

def _group(seed: int, n2_size: int, **n2_cfg) -> Sim:
    """n0, n1 with 64 KiB data files (the brokers); n2 never leads, its store of ``n2_size``."""
    sim = Sim(3, seed=seed, data_file_size=SMALL, per_node={"n2": {"never_lead": True, **n2_cfg}})
    sim.stores["n2"] = SimStore(False, n2_size, sim.wall)
    sim.nodes["n2"] = sim._core("n2")
    return sim


def _until(sim: Sim, cond, limit_ms: int) -> None:
    start = sim.now
    while not cond():
        assert sim.now - start < limit_ms, f"not reached within {limit_ms} simulated ms"
        sim.run(5)


def _commit(sim: Sim, rounds: int) -> None:
    for r in range(rounds):
        _until(sim, lambda: sim.leader() in ("n0", "n1"), 20_000)
        p = sim.propose(sim.leader(), [b"r%03d-%02d" % (r, k) + b"y" * BODY for k in range(20)])
        _until(sim, lambda: p.done, 10_000)
        assert p.code == Code.SUCCESS, (p.code, p.remark)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_never_lead_member_on_the_default_size_keeps_replicating_past_the_brokers_rolls(seed):
    sim = _group(seed, 1 << 30)
    _commit(sim, 12)  # 240 entries: the brokers' log spans 3 files
    _until(sim, sim.logs_equal, 10_000)
    assert sim.stores["n2"].data_file_size == SMALL
    assert len(sim.stores["n2"].head_files()) >= 3
    said = [t for _, node, t in sim.notes if node == "n2" and "data file size" in t]
    assert len(said) == 1 and said[0].startswith("took the leader's data file size, 65536 bytes"), said
    # with a broker down, the group commits with n2
    sim.crash("n1" if sim.leader() == "n0" else "n0")
    _commit(sim, 2)
    assert sim.nodes["n2"].follower.refused == {}


def test_a_never_lead_member_with_a_wrong_configured_size_refuses_and_says_it_once():
    sim = _group(1, 1 << 30, data_file_size=1 << 30)
    _commit(sim, 8)  # past the first roll
    _until(sim, lambda: sim.nodes["n2"].follower.refused.get("position", 0) >= 5, 10_000)
    sim.run(3000)  # the leader keeps trying
    assert sim.stores["n2"].end_index < sim.stores[sim.leader()].end_index
    said = [t for _, node, t in sim.notes if node == "n2" and "refusing the leader's entries" in t]
    assert len(said) == 1, said
    assert "start this member with --data-file-size 65536, the leader's" in said[0]
    d = sim.nodes["n2"].describe()
    assert "--data-file-size 65536" in d["push_refused"] and d["pushes_refused"]["position"] >= 5


# -- real dledgerctl processes -------------------------------------------------------------

def test_real_members_refuse_with_a_wrong_size_then_learn_once_it_is_left_out(tmp_path):
    """n0, n1 write 64 KiB files; n2 (--never-lead) is given 1 MiB: it refuses and says so in
    its log, cluster status and its metrics. Started again on an empty store without the
    size, as docs/rocketmq.md says, it takes the leader's and holds the same log."""
    port = free_port_base(4)
    peers = ";".join(f"n{k}-127.0.0.1:{port + k}" for k in range(3))
    base, metrics = str(tmp_path), f"127.0.0.1:{port + 3}"
    procs: dict[str, subprocess.Popen] = {}

    def start(node: str, *extra: str) -> None:
        with open(os.path.join(base, f"{node}.log"), "ab") as log:
            procs[node] = subprocess.Popen(
                [sys.executable, "-m", "dledgerctl", "-v", "--log-format", "json", "node", "start", "--group", "g",
                 "--id", node, "--peers", peers, "--store-base-dir", base, *extra], stdout=log, stderr=log,
                env=dict(os.environ, PYTHONPATH=ROOT))

    def stop(node: str) -> None:
        p = procs.pop(node)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)

    def status() -> dict:
        r = cli("cluster", "status", "--peers", peers, "--group", "g", "--format", "json", "--timeout", "2")
        return {row["id"]: row for row in json.loads(r.stdout)} if r.stdout.strip() else {}

    def refused() -> float:
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as resp:
            m = re.search(r'^dledger_push_refused_total\{[^}]*reason="position"[^}]*\} (\S+)$', resp.read().decode(),
                          re.M)
        assert m is not None, "dledger_push_refused_total is not served"
        return float(m.group(1))

    def n2_said(event: str) -> list[dict]:
        with open(os.path.join(base, "n2.log"), "rb") as fh:
            recs = [json.loads(line) for line in fh if line.startswith(b"{")]
        return [r for r in recs if r.get("event") == event]

    def identical(a: str, b: str) -> bool:
        r = cli("store", "diff", os.path.join(base, f"dledger-{a}"), os.path.join(base, f"dledger-{b}"), "--format",
                "json")
        return r.returncode == 0 and json.loads(r.stdout)["identical"]

    try:
        for n in ("n0", "n1"):
            start(n, "--data-file-size", "64KiB")
        start("n2", "--never-lead", "--data-file-size", "1MiB", "--metrics-address", metrics)
        leader = wait_for(lambda: next((n for n, r in status().items() if r.get("role") == "leader"), None), 30,
                          "a leader")
        bodies = sum((["-d", f"e{k:03d}-" + "m" * 3000] for k in range(40)), [])
        r = cli("append", "--peers", peers, "--group", "g", *bodies, "--timeout", "20", timeout=120)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: refused() >= 2, 30, "n2 to refuse the leader's pushes")
        row = wait_for(lambda: status().get("n2", {}).get("push_refused"), 30, "cluster status to say why")
        assert "start this member with --data-file-size 65536, the leader's" in row
        table = cli("cluster", "status", "--peers", peers, "--group", "g", "--timeout", "2").stdout
        assert "push_refused" in table and "--data-file-size 65536" in table
        said = n2_said("push_refused")
        assert len(said) == 1 and said[0]["level"] == "WARNING" and "--data-file-size 65536" in said[0]["msg"], said
        # the fix: its store moved aside, started without the size
        stop("n2")
        shutil.move(os.path.join(base, "dledger-n2"), os.path.join(base, "n2-aside"))
        start("n2", "--never-lead", "--metrics-address", metrics)
        wait_for(lambda: identical(leader, "n2"), 60, "n2 to hold the leader's log")
        took = n2_said("data_file_size")
        assert len(took) == 1 and took[0]["data_file_size"] == 64 * KIB, took
        assert refused() == 0 and "push_refused" not in status()["n2"]
    finally:
        for p in procs.values():
            p.kill()
            p.wait(timeout=30)
