"""A member that never leads (``node start --never-lead``, NodeConfig.never_lead), in the
seeded simulation (tests/support/sim.py): the third replica of a RocketMQ broker group, where the
leader must be a broker. It votes and counts for the quorum; it stands for election only
when a voter whose log is behind its own cannot be elected without it, and then leads just
long enough to bring that voter up to date and hand leadership to it, writing nothing of
its own. The same member against real RocketMQ brokers: tests/java/test_rocketmq_group.py."""

from __future__ import annotations

import pytest

from cluster.raft.config import ConfigError, NodeConfig, parse_peers
from cluster.raft.member import Role
from cluster.raft.rpc import Code, LeadershipTransferRequest
from tests.support.sim import NetConfig, Sim

NEVER = {"n2": {"never_lead": True}}


class Watch:
    """Steps a simulation and records who led when (simulated ms)."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.spans: list[list] = []  # [leader, term, from, to]

    def run(self, ms: int, step: int = 5) -> None:
        end = self.sim.now + ms
        while self.sim.now < end:
            self.sim.run(step)
            self._look()

    def until(self, cond, limit_ms: int, step: int = 5) -> None:
        start = self.sim.now
        while not cond():
            assert self.sim.now - start < limit_ms, f"condition not reached within {limit_ms} simulated ms"
            self.sim.run(step)
            self._look()

    def _look(self) -> None:
        leader = self.sim.leader()
        term = self.sim.nodes[leader].member.term if leader else None
        last = self.spans[-1] if self.spans else None
        if last is not None and last[0] == leader and last[1] == term:
            last[3] = self.sim.now
        else:
            self.spans.append([leader, term, self.sim.now, self.sim.now])

    def led(self, node: str) -> list[tuple[int, int]]:
        """(term, ms) of each time ``node`` led."""
        return [(t, b - a) for who, t, a, b in self.spans if who == node]


def broker_leader(w: Watch, limit=20_000) -> str:
    w.until(lambda: w.sim.leader() in ("n0", "n1"), limit)
    return w.sim.leader()


def commit_on(w: Watch, leader: str, bodies, limit=10_000):
    p = w.sim.propose(leader, bodies)
    w.until(lambda: p.done, limit)
    assert p.code == Code.SUCCESS, (p.code, p.remark)
    return p


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_it_never_leads_while_the_others_can(seed):
    # leaders crash and come back, the network loses and delays: it always votes, never leads
    w = Watch(Sim(3, seed=seed, net=NetConfig(delay=(1, 20), drop=0.02), per_node=NEVER))
    for round_ in range(4):
        leader = broker_leader(w)
        commit_on(w, leader, [b"r%d-%d" % (round_, i) for i in range(5)])
        w.until(w.sim.logs_equal, 10_000)  # (the other broker holds all n2 holds)
        w.sim.crash(leader)
        other = "n1" if leader == "n0" else "n0"
        w.until(lambda: w.sim.leader() == other, 20_000)  # elected with n2's vote
        w.sim.restart(leader)
        w.run(500)
    assert w.led("n2") == []
    w.until(w.sim.logs_equal, 10_000)


def behind_after_a_crash(seed: int) -> tuple[Watch, list, str]:
    """A broker leads; the other is cut off while the leader commits with n2; the leader
    crashes and the other comes back: n2 holds committed entries it lacks, and it cannot be
    elected without n2's vote. Returns the watch, the acknowledged proposals, the other broker."""
    w = Watch(Sim(3, seed=seed, per_node=NEVER))
    leader = broker_leader(w)
    other = "n1" if leader == "n0" else "n0"
    commit_on(w, leader, [b"before"])
    w.sim.isolate(other)
    acked = [commit_on(w, leader, [b"only-with-n2-%d" % i]) for i in range(20)]
    assert w.sim.stores[other].end_index < w.sim.stores["n2"].end_index
    w.sim.crash(leader)
    w.sim.heal()
    return w, acked, other


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_it_leads_only_to_bring_a_voter_behind_it_up_to_date(seed):
    w, acked, other = behind_after_a_crash(seed)
    w.until(lambda: w.sim.leader() == other, 30_000)
    led = w.led("n2")
    assert led, f"n2 had to lead: {other} could not be elected without its vote"
    # as long as the catch-up and the handover take (a transfer waits at most max_wait_ack_ms)
    assert all(ms <= 3_000 for _t, ms in led), led
    last = acked[-1].last_index
    p = commit_on(w, other, [b"after"])  # it leads, with n2's acknowledgements
    assert p.first_index > last
    s = w.sim.stores[other]
    assert [s.get(i).body for i in range(last - 19, last + 1)] == [b"only-with-n2-%d" % i for i in range(20)]
    # n2 wrote nothing while it led: no entry anywhere is of a term it led in
    n2_terms = {t for t, _ms in led}
    w.until(w.sim.logs_equal, 10_000)
    held = {s.get(i).term for i in range(s.end_index + 1)}
    assert not held & n2_terms, (held, n2_terms)


def test_while_it_leads_it_refuses_appends_and_names_where_leadership_goes():
    w, _acked, other = behind_after_a_crash(4)
    w.until(lambda: w.sim.leader() == "n2", 30_000)
    p = w.sim.propose("n2", [b"x"])
    assert p.done and p.code == Code.NOT_LEADER and "never leads" in p.remark
    end = w.sim.stores["n2"].end_index
    w.until(lambda: w.sim.nodes["n2"].role.transfer is not None, 5_000)
    p = w.sim.propose("n2", [b"y"])
    assert p.code == Code.NOT_LEADER and p.leader_id == other and other in p.remark
    # what peer watermarks and cluster status show of it
    assert w.sim.nodes["n2"].watermarks(w.sim.now)[0]["note"] == f"never leads: handing leadership to {other}"
    assert w.sim.nodes["n2"].describe()["never_lead"] is True
    assert w.sim.nodes["n2"].change_members("remove", other, None, w.sim.now).code == Code.NOT_LEADER
    assert w.sim.stores["n2"].end_index == end  # no no-op, no config entry, nothing
    w.until(lambda: w.sim.leader() == other, 30_000)


def test_it_refuses_to_take_leadership_when_asked():
    w = Watch(Sim(3, seed=6, per_node=NEVER))
    leader = broker_leader(w)
    n2 = w.sim.nodes["n2"]
    m = n2.member
    resp = n2.handle(LeadershipTransferRequest("sim", leader, "n2", m.term, take=True, end_index=0), w.sim.now)
    assert resp.code == Code.TAKE_LEADERSHIP_FAILED and "never leads" in resp.remark
    # and a leader's own transfer to it finds it no transferee
    w.sim.nodes[leader].start_transfer("n2", w.sim.now)
    w.run(4_000)
    assert w.led("n2") == []


def test_one_broker_and_it_are_a_majority():
    w = Watch(Sim(3, seed=7, per_node=NEVER))
    leader = broker_leader(w)
    w.sim.crash("n1" if leader == "n0" else "n0")
    commit_on(w, leader, [b"two-of-three"])  # committed with n2's acknowledgement
    w.run(3_000)
    assert w.sim.leader() == leader and w.led("n2") == [] and w.sim.nodes["n2"].member.role == Role.FOLLOWER


def test_it_cannot_be_the_preferred_leader():
    peers = parse_peers("n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3")
    with pytest.raises(ConfigError, match="--never-lead: n2 cannot also be the --preferred-leader"):
        NodeConfig("g", "n2", peers, never_lead=True, preferred_leader="n2")
    assert NodeConfig("g", "n2", peers, never_lead=True, preferred_leader="n0").never_lead
