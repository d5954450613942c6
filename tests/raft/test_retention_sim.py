"""The log's beginning moves, in the seeded simulation (tests/support/sim.py) driving the real core:
retention deletes head "files" of the memory stores (cluster/raft/retention.py over
store.retention), and a leader cuts back a follower whose log no longer meets its own.
The simulation's invariants (one leader per term, committed entries never change nor go
back) are checked at every tick."""

from __future__ import annotations

import random

import pytest

from cluster.raft.dispatcher import DispatchState
from cluster.raft.retention import parse_delete_when
from cluster.raft.rpc import Code
from tests.support.sim import Sim
from tests.support.simsteps import body, commit, elect, fill

FILE = 4096  # ~27 entries of 100 bytes per "data file"
RETAIN = dict(data_file_size=FILE, file_reserved_hours=1 / 3600, retention_check_ms=200)  # files expire after 1 s


def full_disks(sim: Sim, ratio: float) -> None:
    for i in sim.ids:
        sim.disk_usage[i] = ratio


def in_order(sim: Sim, node: str, indexes: list[int]) -> list[bytes]:
    s = sim.stores[node]
    return [s.get(i).body for i in indexes if i >= s.begin_index]


def test_nothing_is_deleted_while_no_check_is_due():
    sim = Sim(3, seed=1, **RETAIN)  # local noon, disk usage unknown: not deleteWhen's hour, no ratio
    elect(sim)
    fill(sim, 0, 200)
    sim.run(5000)
    assert all(s.begin_index == 0 for s in sim.stores.values())


def test_a_follower_away_while_the_head_was_deleted_is_cut_back_and_caught_up():
    sim = Sim(3, seed=2, **RETAIN)
    leader = elect(sim)
    away = next(i for i in sim.ids if i != leader)
    fill(sim, 0, 30)
    sim.crash(away)
    idx = fill(sim, 30, 300)
    full_disks(sim, 0.75)  # above the check ratio (0.70): expired files go at any hour
    sim.run(3000)
    lead = sim.stores[leader]
    assert lead.begin_index > sim.stores[away].end_index + 1  # its log no longer meets the leader's
    assert any("clean space: deleted" in t for _at, n, t in sim.notes if n == leader)
    assert lead.committed_index >= idx[-1] and lead.begin_index <= idx[-1]  # never past the commit index

    sim.restart(away)
    d = sim.nodes[leader].role.dispatchers[away]
    sim.run_until(lambda: d.note.startswith("cutting back"), 10_000)  # watermarks show it while it happens
    sim.run_until(lambda: sim.logs_equal() and sim.stores[away].committed_index == lead.committed_index, 20_000)
    back = sim.stores[away]
    assert back.begin_index >= lead.begin_index and back.end_index == lead.end_index
    assert in_order(sim, away, idx) == [body(30 + k) for k, i in enumerate(idx) if i >= back.begin_index]
    assert back.begin_index > 0 and d.note == ""  # cut back to a first entry of the leader's, then filled


def test_a_cut_back_whose_entry_was_deleted_before_it_was_sent_goes_to_the_new_first_entry():
    """A follower whose log no longer meets the leader's stops while the leader is cutting it
    back (TRUNCATE at the leader's first entry), before the cut back reaches it; retention then
    deletes that entry too. The leader cuts it back to its new first entry instead of reading
    the deleted one (IndexOutOfRange, which stopped the leader's tick loop), keeps leading and
    committing, and the follower, back, ends up with the leader's log."""
    sim = Sim(3, seed=5, **RETAIN)
    leader = elect(sim)
    away = next(i for i in sim.ids if i != leader)
    fill(sim, 0, 30)
    sim.crash(away)
    fill(sim, 30, 300)
    full_disks(sim, 0.75)
    sim.run(3000)
    core, lead, back = sim.nodes[leader], sim.stores[leader], sim.stores[away]
    term = core.member.term
    assert lead.begin_index > back.end_index + 1  # its log no longer meets the leader's

    sim.restart(away)
    d = core.role.dispatchers[away]
    sim.run_until(lambda: d.state == DispatchState.TRUNCATE, 10_000, step=1)  # it answered the compare ...
    sim.crash(away)  # ... and stops before the cut back reaches it
    cut_at, away_end = d.truncate_index, back.end_index
    assert cut_at == lead.begin_index > away_end + 1 and d.note.startswith(f"cutting back to {cut_at}")

    idx = fill(sim, 300, 300)  # newer files, while the cut back goes unanswered
    sim.run_until(lambda: lead.begin_index > cut_at, 10_000)  # the entry it was to be cut back to is gone
    sim.run(2000)  # the unanswered cut back is sent again meanwhile: at the new first entry
    assert sim.nodes[leader] is core and sim.leader() == leader and core.member.term == term
    assert d.state == DispatchState.TRUNCATE and d.truncate_index == lead.begin_index > cut_at
    assert f"entry {cut_at} was deleted before it was cut back there" in d.note
    assert back.end_index == away_end  # (nothing reached it)
    p = commit(sim, [b"after the deletion"])
    assert p.code == Code.SUCCESS and p.first_index == idx[-1] + 1 and sim.leader() == leader

    sim.restart(away)
    sim.run_until(lambda: sim.logs_equal() and back.committed_index == lead.committed_index, 20_000)
    assert sim.leader() == leader and core.member.term == term
    assert back.begin_index >= lead.begin_index > cut_at and back.end_index == lead.end_index == p.last_index
    assert in_order(sim, away, idx) == [body(300 + k) for k, i in enumerate(idx) if i >= back.begin_index]
    assert back.get(p.first_index).body == b"after the deletion"
    sim.run_until(lambda: d.note == "" and d.state == DispatchState.COMMIT, 1000)  # caught up: cut back, then filled


def test_a_live_follower_keeps_the_head_unless_the_disk_forces_it():
    # a follower that lags by more than 10 KB gets at most 3 KB/s: one back from a crash
    # catches up slowly, alive (it acknowledges), while the other keeps up
    sim = Sim(3, seed=3, peer_push_throttle_point=10_000, peer_push_quota=3000, push_batch_bytes=1000, **RETAIN)
    leader = elect(sim)
    slow = next(i for i in sim.ids if i != leader)
    fill(sim, 0, 20)
    sim.crash(slow)
    fill(sim, 20, 400, batch=40)
    sim.restart(slow)
    full_disks(sim, 0.75)
    sim.run(3000)
    core, lead = sim.nodes[leader], sim.stores[leader]
    lag = core.role.dispatchers[slow]
    assert lag.watermark + 100 < lead.committed_index and core.role.peer_alive(slow, sim.now)
    assert 0 < lead.begin_index <= lag.watermark + 1  # expired files went, but not what it still needs
    kept_at = lead.begin_index

    full_disks(sim, 0.9)  # above the force ratio (0.85): the oldest files go, needed or not
    needed = lag.watermark + 1
    sim.run_until(lambda: lead.begin_index > kept_at, 2000)
    assert lead.begin_index > needed  # what it needed is gone: it was cut off ...
    assert lag.note.startswith("cut off by retention") or lag.state == DispatchState.TRUNCATE
    assert any(f"{slow} needed entry" in t for _at, n, t in sim.notes if n == leader)
    full_disks(sim, 0.75)
    sim.run_until(lambda: sim.logs_equal() and sim.stores[slow].committed_index == lead.committed_index, 300_000)
    assert sim.stores[slow].begin_index >= lead.begin_index  # ... then cut back and filled
    assert lag.note == ""


def test_appends_are_refused_above_the_full_ratio_and_taken_again_below():
    sim = Sim(3, seed=4, **RETAIN)
    leader = elect(sim)
    fill(sim, 0, 20)
    full_disks(sim, 0.95)
    sim.run(500)
    p = commit(sim, [b"x"])
    assert p.code == Code.DISK_FULL and "full ratio" in p.remark
    full_disks(sim, 0.5)
    sim.run(500)
    assert commit(sim, [b"y"]).code == Code.SUCCESS
    assert any("appends refused with DISK_FULL" in t for _at, n, t in sim.notes if n == leader)


@pytest.mark.parametrize("seed", range(12))
def test_deletion_racing_leader_changes_loses_no_committed_entry(seed):
    rng = random.Random(seed)
    sim = Sim(3, seed=100 + seed, **RETAIN)
    full_disks(sim, 0.75)
    acked: dict[int, bytes] = {}
    k = 0
    for _round in range(6):
        leader = elect(sim)
        for _ in range(rng.randint(3, 8)):
            bodies = [body(k + j) for j in range(rng.randint(1, 15))]
            p = sim.propose(leader, bodies)
            sim.run_until(lambda: p.done, 10_000)
            if p.code == Code.SUCCESS:
                acked.update(zip(range(p.first_index, p.last_index + 1), bodies))
            k += len(bodies)
            sim.run(rng.randint(0, 400))
        victim = rng.choice([leader, rng.choice(sim.ids)])
        sim.crash(victim)
        sim.run(rng.randint(300, 3000))  # deletion goes on meanwhile on the others
        sim.restart(victim)
    sim.run_until(lambda: sim.logs_equal() and len({s.committed_index for s in sim.stores.values()}) == 1, 60_000)
    begins = {i: s.begin_index for i, s in sim.stores.items()}
    assert max(begins.values()) > 0, "retention never deleted anything"
    for i, s in sim.stores.items():
        for index, b in acked.items():
            if index >= s.begin_index:
                assert s.get(index).body == b, (i, index)


def test_a_follower_that_lost_entries_below_the_leaders_beginning_is_cut_back():
    """A follower restarted from an older disk state (its end now below what it acknowledged)
    while the leader's log begins after that end: the compare it is sent back to would be
    at an index the leader no longer holds; it is cut back instead."""
    sim = Sim(3, seed=9, **RETAIN)
    leader = elect(sim)
    idx = fill(sim, 0, 300)
    full_disks(sim, 0.75)
    sim.run(3000)
    lead = sim.stores[leader]
    assert lead.begin_index > 40
    victim = next(i for i in sim.ids if i != leader)
    sim.crash(victim)
    st = sim.stores[victim]
    st._entries, st.end_index, st.write_pos = [], -1, 0  # its disk came back empty
    st.begin_index, st._committed, st.durable = -1, -1, -1
    sim.seen_committed[victim] = -1
    sim.restart(victim)
    sim.run_until(lambda: sim.logs_equal() and st.committed_index == lead.committed_index, 30_000)
    assert st.begin_index >= lead.begin_index and st.end_index == lead.end_index == idx[-1] + 0


@pytest.mark.parametrize("text", ["²", "0²", "١", "04;²", "-1", "24"])
def test_delete_when_refuses_hours_that_are_not_ascii_hours(text):
    # "²".isdigit() is true and int("²") raises: the refusal must be the ValueError naming the option
    with pytest.raises(ValueError, match="delete-when"):
        parse_delete_when(text)


def test_delete_when_takes_hours():
    assert parse_delete_when("03; 04") == frozenset({3, 4})
