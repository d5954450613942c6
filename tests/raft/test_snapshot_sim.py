"""State machines, snapshots and INSTALL_SNAPSHOT in the seeded simulation (tests/support/sim.py),
driving the real core, dispatcher, follower and Applier over real snapshot files.

At every tick the simulation checks, besides one leader per term and committed entries
never changing: no entry is applied twice or out of order, and nodes that applied up to
the same index hold the same state."""

from __future__ import annotations

import os
import random

import pytest

from cluster.raft.dispatcher import DispatchState
from store.snapshot import INSTALL_TMP_DIR, SNAPSHOT_DIR
from tests.support.sim import Sim
from tests.support.simsteps import body, elect, fill

FILE = 4096  # ~27 entries of 100 bytes per "data file"
SNAP = dict(data_file_size=FILE, snapshot_threshold=60)


def make(tmp_path, seed: int, **kw) -> Sim:
    return Sim(3, seed=seed, snapshots_dir=str(tmp_path), **{**SNAP, **kw})


def same_state(sim: Sim) -> bool:
    """Every live node applied everything committed, and holds one state."""
    live = [i for i in sim.ids if sim.nodes[i] is not None]
    return (len({sim.stores[i].committed_index for i in live}) == 1
            and all(sim.appliers[i].applied == sim.stores[i].committed_index for i in live)
            and len({sim.appliers[i].sm.state() for i in live}) == 1)


def away_while_the_log_moves(sim: Sim, start: int = 0) -> tuple[str, str]:
    """A follower crashes; the leader goes on until it snapshotted and deleted the log the
    follower needs. Returns (leader, the follower away)."""
    leader = elect(sim)
    fill(sim, start, 30)
    away = next(i for i in sim.ids if i != leader)
    sim.crash(away)
    sim.run(3000)  # (no longer a live follower whose needs keep the log)
    fill(sim, start + 30, 400)
    s = sim.stores[leader]
    assert s.begin_index > sim.stores[away].end_index + 1, "the leader deleted what the follower needs"
    assert sim.appliers[leader].snapshot_index >= s.begin_index - 1
    return leader, away


def installing(sim: Sim, leader: str, follower: str, past: int = 1) -> bool:
    d = sim.nodes[leader].role.dispatchers.get(follower)
    return (d is not None and d.state == DispatchState.INSTALL_SNAPSHOT and d.sending is not None
            and d.sending.offset >= past)


def test_snapshots_delete_the_log_they_cover_on_every_node(tmp_path):
    sim = make(tmp_path, 1)
    elect(sim)
    fill(sim, 0, 400)
    sim.run_until(lambda: same_state(sim), 10_000)
    for i in sim.ids:
        a, s = sim.appliers[i], sim.stores[i]
        assert a.snapshot_index >= 300, i
        assert 0 < s.begin_index <= a.snapshot_index + 1, (i, s.begin_index, a.snapshot_index)
        assert len(a.snapshots.list()) <= sim.configs[i].snapshots_kept
    assert any("covered by it" in text for _t, _n, text in sim.notes)


def test_keep_entries_leaves_that_many_before_the_snapshot_and_minus_one_keeps_the_log(tmp_path):
    sim = make(tmp_path / "keep", 2, snapshot_keep_entries=150)
    elect(sim)
    fill(sim, 0, 400)
    sim.run_until(lambda: same_state(sim), 10_000)
    for i in sim.ids:
        assert sim.appliers[i].snapshot_index - 150 - FILE // 100 <= sim.stores[i].begin_index
        assert sim.stores[i].begin_index <= sim.appliers[i].snapshot_index - 150 + 1
    sim = make(tmp_path / "all", 2, snapshot_keep_entries=-1)
    elect(sim)
    fill(sim, 0, 400)
    sim.run_until(lambda: same_state(sim), 10_000)
    assert all(s.begin_index == 0 for s in sim.stores.values())


def test_a_follower_away_while_the_log_moved_installs_the_snapshot_and_catches_up(tmp_path):
    sim = make(tmp_path, 3, snapshot_pad=5000, install_chunk_bytes=1000)
    leader, away = away_while_the_log_moves(sim)
    sim.restart(away)
    sim.run_until(lambda: sim.nodes[leader].role.dispatchers[away].installs == 1, 10_000)
    fill(sim, 430, 20)
    sim.run_until(lambda: same_state(sim) and sim.logs_equal(), 10_000)
    a = sim.appliers[away]
    assert a.snapshot_index > 0 and sim.stores[away].begin_index <= a.snapshot_index + 1
    assert sim.nodes[leader].role.dispatchers[away].installs == 1
    assert any(n == away and "installed snapshot" in text for _t, n, text in sim.notes)
    assert not os.path.exists(os.path.join(str(tmp_path), away, SNAPSHOT_DIR, INSTALL_TMP_DIR))


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_an_install_interrupted_by_the_follower_crashing_resumes(tmp_path, seed):
    sim = make(tmp_path, seed, snapshot_pad=20_000, install_chunk_bytes=1000)
    leader, away = away_while_the_log_moves(sim)
    sim.restart(away)
    sim.run_until(lambda: installing(sim, leader, away, past=8000), 10_000)
    sim.crash(away)
    held = os.path.getsize(os.path.join(str(tmp_path), away, SNAPSHOT_DIR, INSTALL_TMP_DIR, "data"))
    assert 8000 <= held < 20_000
    sim.run(500)
    sim.restart(away)
    before = sim.sent["InstallSnapshotRequest"]
    sim.run_until(lambda: sim.nodes[leader].role.dispatchers[away].installs == 1, 10_000)
    # the leader went on from what the follower held, not from the start (a few chunks may
    # be sent twice: those in flight at the crash, and the one that learns where to go on)
    chunks = sim.sent["InstallSnapshotRequest"] - before
    assert chunks <= (20_000 - held) // 1000 + 4, (chunks, held)
    fill(sim, 430, 10)
    sim.run_until(lambda: same_state(sim) and sim.logs_equal(), 10_000)


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_an_install_interrupted_by_the_leader_crashing_completes_from_the_next_leader(tmp_path, seed):
    sim = make(tmp_path, seed, snapshot_pad=20_000, install_chunk_bytes=1000)
    leader, away = away_while_the_log_moves(sim)
    sim.restart(away)
    sim.run_until(lambda: installing(sim, leader, away, past=5000), 10_000)
    sim.crash(leader)
    nxt = elect(sim)
    assert nxt not in (leader, away)  # the follower being installed cannot win: its log is behind
    fill(sim, 430, 10)
    # the new leader deleted the same log (it snapshotted too): it installs its own snapshot
    sim.run_until(lambda: same_state(sim) and sim.logs_equal(), 20_000)
    assert sim.nodes[nxt].role.dispatchers[away].installs == 1
    sim.restart(leader)
    fill(sim, 440, 10)
    sim.run_until(lambda: same_state(sim) and sim.logs_equal(), 20_000)


def test_a_leader_change_during_an_install(tmp_path):
    sim = make(tmp_path, 10, snapshot_pad=20_000, install_chunk_bytes=1000)
    leader, away = away_while_the_log_moves(sim)
    sim.restart(away)
    sim.run_until(lambda: installing(sim, leader, away, past=3000), 10_000)
    sim.isolate(leader)  # the old leader is cut off while its install is under way; another is elected
    third = next(i for i in sim.ids if i not in (leader, away))
    sim.run_until(lambda: sim.nodes[third].member.role.name == "LEADER", 20_000)
    fill(sim, 430, 10)
    sim.heal()
    sim.run_until(lambda: same_state(sim) and sim.logs_equal() and sim.leader() == third, 20_000)
    assert sim.nodes[third].role.dispatchers[away].installs == 1


def test_a_snapshot_taken_while_one_is_on_its_way_sends_the_newer_one(tmp_path):
    # one snapshot kept: the next one removes the snapshot being sent
    sim = make(tmp_path, 11, snapshot_pad=30_000, install_chunk_bytes=1000, snapshots_kept=1,
               snapshot_threshold=40)
    leader, away = away_while_the_log_moves(sim)
    first = sim.appliers[leader].snapshot_index
    sim.restart(away)
    sim.run_until(lambda: installing(sim, leader, away, past=2000), 10_000)
    fill(sim, 430, 60)  # a new snapshot on the leader while the install goes on
    assert sim.appliers[leader].snapshot_index > first
    sim.run_until(lambda: sim.nodes[leader].role.dispatchers[away].installs == 1, 20_000)
    assert "is gone" in sim.nodes[leader].role.dispatchers[away].last_error
    assert sim.appliers[away].snapshot_index > first
    sim.run_until(lambda: same_state(sim) and sim.logs_equal(), 20_000)


def test_a_follower_without_a_state_machine_is_cut_back_instead(tmp_path):
    sim = make(tmp_path, 12)
    leader, away = away_while_the_log_moves(sim)
    sim.restart(away)
    sim.nodes[away].applier = sim.appliers[away] = None  # (as a node started without --state-machine)
    sim.run_until(lambda: sim.logs_equal(), 20_000)
    d = sim.nodes[leader].role.dispatchers[away]
    assert d.installs == 0 and sim.stores[away].begin_index == sim.stores[leader].begin_index


@pytest.mark.parametrize("seed", range(20, 30))
def test_random_runs_with_state_machines(tmp_path, seed):
    """Seeded lives of a cluster with state machines: partitions, loss, crashes (losing
    unflushed entries), snapshots and installs; at the end every node holds one state."""
    random_life(str(tmp_path), seed)


def random_life(tmp_path: str, seed: int) -> Sim:
    rng = random.Random(seed)
    sim = make(tmp_path, seed, snapshot_pad=rng.choice((0, 3000)), install_chunk_bytes=1000,
               snapshot_threshold=rng.choice((25, 60)), flush=rng.choice(("async", "sync")))
    k = 0
    for _step in range(14):
        action = rng.random()
        live = [i for i in sim.ids if sim.nodes[i] is not None]
        down = [i for i in sim.ids if sim.nodes[i] is None]
        leader = sim.leader()
        if action < 0.5 and leader is not None:
            sim.propose(leader, [body(k + j) for j in range(rng.randint(5, 40))])
            k += 40
        elif action < 0.6:
            ids = list(sim.ids)
            rng.shuffle(ids)
            sim.partition(ids[:1], ids[1:])
        elif action < 0.7:
            sim.heal()
        elif action < 0.85 and not down and live:
            sim.crash(rng.choice(live), lose=rng.random() < 0.5)
        elif down:
            sim.restart(rng.choice(down))
        sim.run(rng.randint(100, 2500))
    sim.heal()
    for i in sim.ids:
        if sim.nodes[i] is None:
            sim.restart(i)
    fill(sim, 10_000, 30)
    sim.run_until(lambda: same_state(sim) and sim.logs_equal(), 30_000)
    return sim
