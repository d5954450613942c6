"""Pushes that arrive damaged (issue 63): a range of the leader's entries torn at any byte,
or with one byte changed (tests/support/garble.py), through the simulator.

A follower stores nothing that is not the leader's bytes: it refuses the damaged push, or
keeps only the whole, checked entries before the damage, and its answer makes the leader
send the rest again. Nothing acknowledged is lost, and the copies end byte-identical.
"""

from __future__ import annotations

import random

from cluster.raft.member import Role
from tests.support.garble import entry_starts, garble
from tests.support.sim import NetConfig, Sim, random_run
from tests.support.simsteps import body


def _holds_only_the_leaders_bytes(sim: Sim, leader: str) -> None:
    lead = sim.stores[leader]
    for i in sim.ids:
        s = sim.stores[i]
        if i == leader or s.end_index < 0:
            continue
        for idx in range(max(s.begin_index, lead.begin_index), min(s.end_index, lead.end_index) + 1):
            assert s.get_bytes(idx) == lead.get_bytes(idx), f"{i} holds an entry {idx} that is not the leader's"


def test_every_push_damaged_stores_nothing_foreign_and_the_group_heals():
    sim = Sim(3, seed=5, net=NetConfig(delay=(1, 3)))
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    leader = sim.leader()
    sim.net.garble = 1.0  # from here, every push with entries arrives damaged
    proposals = [sim.propose(leader, [body(k) for k in range(j * 20, j * 20 + 20)]) for j in range(10)]
    for _ in range(150):
        sim.run(20)
        assert sim.nodes[leader].member.role == Role.LEADER
        _holds_only_the_leaders_bytes(sim, leader)
    damaged = len(sim.garbled)
    assert damaged >= 20, damaged
    assert {what.split()[0] for *_x, what in sim.garbled} == {"torn", "byte"}
    # (an append that waited that long was answered WAIT_QUORUM_ACK_TIMEOUT: not known yet)
    sim.net.garble = 0.0
    lead = sim.stores[leader]
    sim.run_until(lambda: all(p.done for p in proposals) and sim.logs_equal()
                  and min(s.committed_index for s in sim.stores.values()) == lead.end_index, 20_000)
    _holds_only_the_leaders_bytes(sim, leader)
    bodies = [lead.get(i).body for i in range(lead.begin_index, lead.end_index + 1)]
    assert [b for b in bodies if b.endswith(b"x" * 94)] == [body(k) for k in range(200)]
    # and with one push in three damaged, appends are acknowledged
    sim.net.garble = 0.3
    more = [sim.propose(leader, [body(k)]) for k in range(200, 230)]
    sim.run_until(lambda: all(p.done for p in more), 20_000)
    assert [p.code.name for p in more] == ["SUCCESS"] * len(more)


def test_random_runs_with_damaged_pushes():
    """The seeded random lives of tests/raft/test_cluster_sim.py (partitions, loss,
    duplicates, crashes; invariants checked at every tick, every acknowledged append in
    every log at the end), with one push of entries in ten arriving damaged."""
    damaged = sum(len(random_run(seed, garble=0.1).garbled) for seed in range(24))
    assert damaged >= 50, damaged


def test_a_flip_is_made_only_where_a_check_covers_it():
    from store.format import encode_entry

    raw = b"".join(encode_entry(b"x" * n, index=i, term=1, pos=0) for i, n in enumerate((0, 10, 300)))
    rng = random.Random(3)
    starts = entry_starts(raw)
    for _ in range(500):
        what, out = garble(raw, rng)
        if what.startswith("torn"):
            assert len(out) < len(raw) and raw.startswith(out)
            continue
        at = int(what.split()[1])
        start = max(s for s in starts if s <= at)
        assert at - start not in (0, 1, 2, 3, 32, 33, 34, 35)
        assert sum(a != b for a, b in zip(raw, out)) == 1
