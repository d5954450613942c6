"""Whole clusters of the deciding logic (cluster/raft/core.py) in a seeded simulation (tests/support/sim.py):
elections, replication, commit, partitions, lossy networks, crashes, lost disk state,
leadership transfer and back-pressure. Invariants are checked throughout the runs."""

from __future__ import annotations

import pytest

from cluster.raft.member import Role
from cluster.raft.rpc import Code
from tests.support.sim import NetConfig, Sim
from tests.support.simsteps import commit, elect


def test_three_nodes_elect_a_leader_and_commit():
    sim = Sim(3, seed=1)
    took = sim.run_until(lambda: sim.leader() is not None, 10_000)
    leader = sim.leader()
    assert took < 4000
    assert sum(n.member.role == Role.LEADER for n in sim.nodes.values()) == 1
    p = sim.propose(leader, [b"a", b"b", b""])
    sim.run_until(lambda: p.done, 5000)
    assert p.code == Code.SUCCESS and p.last_index - p.first_index == 2
    sim.run_until(lambda: all(s.committed_index >= p.last_index for s in sim.stores.values()), 3000)
    assert sim.logs_equal()
    noop = sim.stores[leader].get(p.first_index - 1)
    assert noop.magic == 2 and noop.body == b""  # the leader's no-op comes first
    assert [sim.stores[leader].get(i).body for i in range(p.first_index, p.last_index + 1)] == [b"a", b"b", b""]


def test_followers_refuse_appends_and_name_the_leader():
    sim = Sim(3, seed=2)
    leader = elect(sim)
    sim.run(500)  # let heartbeats reach everyone
    follower = next(i for i in sim.ids if i != leader)
    p = sim.propose(follower, [b"x"])
    assert p.code == Code.NOT_LEADER and p.leader_id == leader


def test_isolated_leader_steps_down_and_its_uncommitted_entries_are_replaced():
    sim = Sim(3, seed=3)
    old = elect(sim)
    assert commit(sim, [b"before"]).code == Code.SUCCESS
    sim.isolate(old)
    lost = sim.propose(old, [b"never committed"])
    assert lost.code is None
    sim.run_until(lambda: sim.leader() not in (None, old), 10_000)
    new = sim.leader()
    assert sim.nodes[new].member.term > sim.nodes[old].member.term or sim.nodes[old].member.role != Role.LEADER
    assert commit(sim, [b"after"]).code == Code.SUCCESS
    sim.run_until(lambda: lost.done, 5000)
    assert lost.code in (Code.TERM_CHANGED, Code.WAIT_QUORUM_ACK_TIMEOUT)
    assert sim.nodes[old].member.role != Role.LEADER  # check quorum: it stepped down on its own
    sim.heal()
    sim.run_until(lambda: sim.logs_equal(), 10_000)
    bodies = [e.body for e in sim.stores[old].entries()]
    assert b"never committed" not in bodies and b"after" in bodies and b"before" in bodies


def test_pre_vote_keeps_a_returning_node_from_disrupting_the_leader():
    sim = Sim(3, seed=4)
    leader = elect(sim)
    term = sim.nodes[leader].member.term
    loner = next(i for i in sim.ids if i != leader)
    sim.isolate(loner)
    sim.run(30_000)
    assert sim.nodes[loner].member.term == term  # pre-votes failed: no term inflation
    sim.heal()
    sim.run(5_000)
    assert sim.leader() == leader and sim.nodes[leader].member.term == term
    assert commit(sim, [b"still here"]).code == Code.SUCCESS


def test_minority_cannot_commit_majority_can():
    sim = Sim(5, seed=5)
    leader = elect(sim)
    minority = [leader, next(i for i in sim.ids if i != leader)]
    majority = [i for i in sim.ids if i not in minority]
    sim.partition(minority, majority)
    p = sim.propose(leader, [b"minority"])
    sim.run_until(lambda: sim.leader() in majority, 15_000)
    q = sim.propose(sim.leader(), [b"majority"])
    sim.run_until(lambda: p.done and q.done, 10_000)
    assert p.code != Code.SUCCESS and q.code == Code.SUCCESS
    sim.heal()
    sim.run_until(lambda: sim.logs_equal(), 15_000)


def test_follower_that_lost_entries_is_caught_up():
    sim = Sim(3, seed=6)
    leader = elect(sim)
    for k in range(5):
        assert commit(sim, [b"e%d" % k] * 20).code == Code.SUCCESS
    sim.run(1000)
    follower = next(i for i in sim.ids if i != leader)
    sim.crash(follower)
    st = sim.stores[follower]
    sim.lose_entries(follower, 40)  # restarted from an older disk state
    assert st.end_index == 39
    sim.restart(follower)
    for k in range(3):
        assert commit(sim, [b"more%d" % k]).code == Code.SUCCESS
    sim.run_until(lambda: sim.logs_equal() and st.committed_index == sim.stores[leader].committed_index, 10_000)


def test_crashed_leader_returns_as_follower_and_catches_up():
    sim = Sim(3, seed=7)
    old = elect(sim)
    assert commit(sim, [b"one"]).code == Code.SUCCESS
    sim.crash(old)
    new = elect(sim)
    assert new != old
    assert commit(sim, [b"two"]).code == Code.SUCCESS
    sim.restart(old)
    sim.run_until(lambda: sim.logs_equal(), 10_000)
    assert sim.nodes[old].member.role == Role.FOLLOWER and sim.nodes[old].member.leader_id == new


@pytest.mark.parametrize("seed", range(10, 22))
def test_lossy_reordering_network_with_partitions(seed):
    net = NetConfig(delay=(1, 40), drop=0.08, duplicate=0.05, rpc_timeout=800)
    sim = Sim(5 if seed % 2 else 3, seed=seed, net=net)
    rng = sim.rng
    proposals = []
    for rnd in range(12):
        leader = sim.leader()
        if leader is not None:
            proposals.append(sim.propose(leader, [b"%d-%d" % (rnd, k) for k in range(rng.randint(1, 5))]))
        if rnd % 4 == 1:
            ids = list(sim.ids)
            rng.shuffle(ids)
            cut = rng.randint(1, len(ids) - 1)
            sim.partition(ids[:cut], ids[cut:])
        elif rnd % 4 == 3:
            sim.heal()
        sim.run(rng.randint(200, 3000))
    sim.heal()
    last = commit(sim, [b"final"], limit=30_000)
    assert last.code == Code.SUCCESS
    sim.run_until(lambda: all(p.done for p in proposals), 10_000)
    sim.run_until(lambda: sim.logs_equal() and len({s.committed_index for s in sim.stores.values()}) == 1, 20_000)
    committed = [e.body for e in sim.stores[sim.leader()].entries()]
    for p in proposals:  # every success is in the log, exactly once and in order
        if p.code == Code.SUCCESS:
            bodies = [sim.stores[sim.leader()].get(i).body for i in range(p.first_index, p.last_index + 1)]
            assert all(committed.count(b) == 1 for b in bodies)


def test_leadership_transfer_and_preferred_leader():
    sim = Sim(3, seed=8)
    leader = elect(sim)
    assert commit(sim, [b"x"]).code == Code.SUCCESS
    target = next(i for i in sim.ids if i != leader)
    sim.nodes[leader].start_transfer(target, sim.now)
    sim._drain(leader)
    sim.run_until(lambda: sim.leader() == target, 5000)
    assert commit(sim, [b"y"]).code == Code.SUCCESS

    pref = Sim(3, seed=9, preferred_leader="n2")
    pref.run_until(lambda: pref.leader() == "n2", 15_000)
    pref.run(5000)
    assert pref.leader() == "n2"


def test_back_pressure_when_too_many_appends_wait():
    sim = Sim(3, seed=11, max_pending_requests=3)
    leader = elect(sim)
    sim.run(200)
    for i in sim.ids:
        if i != leader:
            sim.crash(i)
    ps = [sim.propose(leader, [b"w"]) for _ in range(3)]
    assert all(p.code is None for p in ps)
    full = sim.propose(leader, [b"w"])
    assert full.code == Code.LEADER_PENDING_FULL
    sim.run_until(lambda: all(p.done for p in ps), 5000)
    assert {p.code for p in ps} <= {Code.TERM_CHANGED, Code.WAIT_QUORUM_ACK_TIMEOUT}


def test_same_seed_same_run():
    def trace(seed):
        sim = Sim(3, seed=seed, net=NetConfig(delay=(1, 20), drop=0.05))
        commit(sim, [b"a"])
        sim.run(3000)
        return [(t, n, s) for t, n, s in sim.notes], [st.end_index for st in sim.stores.values()]

    assert trace(12) == trace(12)


def test_random_runs(sim_seed):
    """``--seeds N`` runs N of these (200 by default); a failure names the replay command."""
    from tests.support.sim import random_run

    random_run(sim_seed)


def test_operator_truncation_pauses_cuts_and_refills():
    """``peer truncate`` through a lossy network: refused at or below the commit index,
    a cut past the leader's end resumes replication (it once compared beyond the log),
    and a cut of uncommitted entries is re-filled while no entry commits on copies the
    follower is about to drop."""
    sim = Sim(3, seed=7, net=NetConfig(delay=(1, 10), drop=0.05))
    leader = elect(sim)
    follower, other = [i for i in sim.ids if i != leader]
    assert commit(sim, [b"c%d" % k for k in range(10)]).code == Code.SUCCESS
    committed = sim.stores[leader].committed_index
    assert not sim.operator_truncate(follower, committed)  # committed entries stay
    assert not sim.operator_truncate(leader, committed + 1)  # the leader is no follower
    assert sim.operator_truncate(follower, sim.stores[leader].end_index + 50)
    sim.run(300)
    assert commit(sim, [b"after"]).code == Code.SUCCESS

    # uncommitted entries on the follower: the other follower is cut off and the
    # follower's answers are lost, so its copies are the only ones that could commit them
    sim.isolate(other)
    sim.blocked.add((follower, leader))
    q = sim.propose(leader, [b"v%d" % k for k in range(5)])
    sim.run_until(lambda: sim.stores[follower].end_index >= q.last_index, 2000)
    assert sim.stores[leader].committed_index < q.first_index
    assert sim.operator_truncate(follower, q.first_index)
    dispatcher = sim.nodes[leader].role.dispatchers[follower]
    sim.run_until(lambda: sim.stores[follower].end_index < q.first_index, 2000)  # the cut arrived
    sim.blocked.discard((follower, leader))
    while dispatcher.state.name == "REPAIR":  # its answer is lost: the leader waits for the timeout
        assert sim.stores[leader].committed_index < q.first_index  # nothing commits on dropped copies
        sim.run(5)
    sim.run_until(lambda: q.done, 5000)  # compared again, re-filled, committed
    assert q.code == Code.SUCCESS
    assert [sim.stores[follower].get(i).body for i in range(q.first_index, q.last_index + 1)] == \
        [b"v%d" % k for k in range(5)]
    sim.heal()
    sim.run_until(lambda: sim.logs_equal() and len({s.committed_index for s in sim.stores.values()}) == 1, 10_000)


def test_operator_truncation_never_lets_dropped_copies_count_for_the_quorum():
    """Five members: the follower acknowledged entries that are not committed yet (only it
    and the leader hold them), then an operator cuts them on it. Its acknowledgement must
    stop counting at once, or another member's would make a "majority" of copies that no
    longer exist."""
    sim = Sim(5, seed=3, net=NetConfig(delay=(1, 5), rpc_timeout=3000))
    leader = elect(sim)
    assert commit(sim, [b"base"]).code == Code.SUCCESS
    f, g, h, k = [i for i in sim.ids if i != leader]
    sim.isolate(h)
    sim.isolate(k)
    sim.blocked.add((g, leader))  # g stores what it gets, its answers are lost
    q = sim.propose(leader, [b"q%d" % n for n in range(5)])
    d = sim.nodes[leader].role.dispatchers[f]
    sim.run_until(lambda: d.watermark >= q.last_index, 2000)  # f acknowledged them
    assert sim.stores[leader].committed_index < q.first_index  # leader + f are 2 of 5
    assert sim.operator_truncate(f, q.first_index)
    sim.blocked.add((f, leader))  # the cut's answer is lost: the pause lasts until it times out
    sim.run_until(lambda: sim.stores[f].end_index < q.first_index, 2000)
    sim.blocked.discard((g, leader))  # g's answers get through again (its pushes are resent)
    sim.run_until(lambda: sim.nodes[leader].role.dispatchers[g].watermark >= q.last_index, 5000)
    assert d.state.name == "REPAIR"  # g acknowledged while the cut was still unanswered
    sim.blocked.discard((f, leader))

    def holders() -> int:
        return sum(1 for s in sim.stores.values() if s.end_index >= q.last_index
                   and s.get(q.last_index).body == b"q4")

    def step() -> bool:
        if sim.stores[leader].committed_index >= q.first_index:
            assert holders() >= 3, "committed on fewer than a majority of copies"
        return sim.stores[leader].committed_index >= q.last_index

    # the append itself times out (unknown to its client) while the pause lasts; its
    # entries commit once f is compared again and re-filled
    sim.run_until(step, 10_000, step=2)
    assert holders() >= 3


def test_a_followers_lag_in_time_is_the_age_of_the_oldest_entry_it_lacks():
    from cluster.raft.appendtimes import CAP, AppendTimes

    t = AppendTimes(10, now=1000)  # a leadership that began at 1000 with its no-op at 10
    t.record(10, 1000)
    for k in range(1, 101):  # an entry every 5 ms: records of 10 ms
        t.record(10 + k, 1000 + 5 * k)
    assert t.age_ms(5, 2000) == 1000  # from before this leadership: at least since it began
    assert t.age_ms(11, 2000) == 1000 and t.age_ms(12, 2000) == 990  # (to 10 ms)
    assert t.age_ms(110, 2000) == 500 and t.age_ms(111, 2000) == 0  # (110 began a record at 1500)
    big = AppendTimes(0, 0)
    for k in range(CAP + 10):
        big.record(k, 10 * k)
    assert big.age_ms(0, 10 * (CAP + 10)) == 10 * (CAP + 10) - 10 * 10  # older than what is kept: at least

    # a live follower under steady load lags by about a push; a stopped one by the time it is away
    sim = Sim(3, seed=12)
    leader = elect(sim)
    away, live = [i for i in sim.ids if i != leader]
    sim.run(500)
    sim.crash(away)
    for _ in range(200):
        sim.propose(leader, [b"x"])
        sim.run(10)
    rows = {r["peer"]: r for r in sim.nodes[leader].watermarks(sim.now)}
    assert 1900 <= rows[away]["lag_ms"] <= 2100 + 500, rows[away]
    assert rows[live]["lag_ms"] < 200 and rows[leader]["lag_ms"] == 0


def test_a_follower_whose_whole_log_was_lost_is_filled_again_by_the_same_leader():
    # (a fault run found it: a torn write cut a follower's first file inside entry 0; back
    # with an empty log under load, it answered the leader's pushes "a gap", and the leader
    # resent from the watermark it had acknowledged, forever, until leadership changed)
    sim = Sim(3, seed=21)
    leader = elect(sim)
    assert commit(sim, [b"x%d" % i for i in range(50)]).code == Code.SUCCESS
    follower = next(i for i in sim.ids if i != leader)
    sim.run_until(lambda: sim.stores[follower].end_index == sim.stores[leader].end_index, 5000)
    term = sim.nodes[leader].member.term
    sim.crash(follower)
    sim.lose_entries(follower, 0)
    for _ in range(20):  # the leader goes on appending: its pushes to the follower are in flight
        sim.propose(leader, [b"while away"])
        sim.run(5)
    sim.restart(follower)
    for _ in range(400):
        sim.propose(leader, [b"back"])
        sim.run(5)
    assert sim.leader() == leader and sim.nodes[leader].member.term == term
    assert sim.stores[follower].end_index >= sim.stores[leader].end_index - 50, sim.nodes[leader].role.dispatchers[follower].describe(sim.now)
    sim.run_until(lambda: sim.logs_equal(), 5000)


def test_a_leader_told_to_take_leadership_from_itself_refuses_and_keeps_answering():
    """A take (LEADERSHIP_TRANSFER, take=true) naming the leader as the leader it comes from:
    refused INCONSISTENT_LEADER; the leader stays leader and a proposal made before it and one
    made after it are both answered."""
    from cluster.raft.rpc import LeadershipTransferRequest

    sim = Sim(3, seed=1)
    leader = elect(sim)
    core = sim.nodes[leader]
    term = core.member.term
    before = sim.propose(leader, [b"before"])
    resp = core.handle(LeadershipTransferRequest("sim", leader, leader, term, take=True, end_index=0), sim.now)
    assert resp.code == Code.INCONSISTENT_LEADER
    after = sim.propose(leader, [b"after"])
    sim.run_until(lambda: before.done and after.done, 5000)
    assert (before.code, after.code) == (Code.SUCCESS, Code.SUCCESS)
    assert sim.leader() == leader and core.member.term == term and core.member.role == Role.LEADER
