"""Reads on a leader's lease (``node start --read-lease``, cluster/raft/reads.py) in the
seeded simulation: answered with no heartbeat round while a majority keeping the lease
promise answered recently; never by a leader whose lease another leader's election could
overlap; and the promise itself (no vote within leader-lost of hearing from a leader, or of
starting). The linearizability checker runs over them in test_linearizable_sim.py.
"""

from __future__ import annotations

from cluster.raft.member import Role
from cluster.raft.rpc import Code, VoteRequest, VoteResult
from tests.support.sim import NetConfig, Sim


def settled(sim: Sim, ms: int = 1500) -> str:
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    sim.run(ms)
    return sim.leader()


def test_a_leader_on_its_lease_answers_reads_with_no_round():
    sim = Sim(3, seed=11, read_lease=True)
    leader = settled(sim)
    core = sim.nodes[leader]
    assert core.reads.lease_until > sim.now
    before = sim.sent["HeartBeatRequest"]
    reads = sim.reads(leader, 20)
    assert all(r.done and r.code == Code.SUCCESS and r.index == sim.stores[leader].committed_index for r in reads)
    assert sim.sent["HeartBeatRequest"] == before and sim.lease_reads == 20


def test_without_the_option_or_the_promise_reads_take_a_round():
    for per_node in ({}, {"n0": {"read_lease": True}}):  # (a leader alone keeping it has no majority)
        sim = Sim(3, seed=12, per_node=per_node)
        leader = settled(sim)
        r = sim.read(leader)
        assert not r.done and r.round > 0
        sim.run_until(lambda: r.done, 2_000)
        assert r.code == Code.SUCCESS and sim.lease_reads == 0


def test_an_isolated_leader_stops_before_another_is_elected():
    sim = Sim(3, seed=13, net=NetConfig(delay=(1, 5)), read_lease=True)
    old = settled(sim)
    core = sim.nodes[old]
    sim.isolate(old)
    lease_until = core.reads.lease_until
    assert lease_until > sim.now
    served_until = elected_at = None
    while elected_at is None and sim.now < lease_until + 10_000:
        sim.run(1)
        other = [i for i, n in sim.nodes.items() if i != old and n.member.role == Role.LEADER]
        if other:
            elected_at = sim.now
        if core.member.role == Role.LEADER:
            r = sim.read(old)
            if r.done and r.code == Code.SUCCESS:
                served_until = sim.now
    assert elected_at is not None and served_until is not None
    assert served_until < lease_until <= elected_at, (served_until, lease_until, elected_at)


def test_a_member_keeping_the_promise_votes_for_nobody_just_after_it_starts():
    sim = Sim(3, seed=14, read_lease=True)
    settled(sim)
    follower = next(i for i in sim.ids if i != sim.leader())
    sim.crash(follower)
    sim.restart(follower)
    core = sim.nodes[follower]
    lost = sim.configs[follower].leader_lost_ms
    candidate = next(i for i in sim.ids if i != follower)
    s = sim.stores[follower]

    def ask(pre: bool, take: bool = False):
        return core.handle(VoteRequest("sim", candidate, core.member.term + 5, s.end_index, s.end_term, pre, take),
                           sim.now)

    assert ask(True).vote_result == VoteResult.REJECT_ALREADY_HAS_LEADER
    assert ask(False).vote_result == VoteResult.REJECT_ALREADY_HAS_LEADER
    assert ask(False, take=True).vote_result == VoteResult.ACCEPT  # (a transfer its leader asked for)
    plain = Sim(3, seed=14)  # (without the option a member just started grants it)
    settled(plain)
    f2 = next(i for i in plain.ids if i != plain.leader())
    plain.crash(f2)
    plain.restart(f2)
    c2, s2 = plain.nodes[f2], plain.stores[f2]
    req = VoteRequest("sim", next(i for i in plain.ids if i != f2), c2.member.term + 5, s2.end_index, s2.end_term,
                      True)
    assert c2.handle(req, plain.now).vote_result == VoteResult.ACCEPT
    assert core.elections.election_at >= core.elections.started_at + lost


def test_handing_leadership_over_ends_the_lease():
    sim = Sim(3, seed=15, read_lease=True)
    leader = settled(sim)
    core = sim.nodes[leader]
    target = next(i for i in sim.ids if i != leader)
    core.start_transfer(target, sim.now)
    sim.run_until(lambda: core.role.transfer is None or core.role.transfer.asked, 2_000)
    assert core.reads.lease_void and core.reads.lease_until == -1
    if core.member.role == Role.LEADER:
        r = sim.read(leader)
        assert not (r.done and r.code == Code.SUCCESS)
