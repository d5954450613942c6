"""The deciding logic (cluster/raft/core.py, cluster/raft/dispatcher.py) against hostile requests: a
refused request changes nothing, a term out of reach is refused, and a follower that a
forged push left holding a "committed" entry of its own is found and cut back by the
leader. Driven without sockets: cores by hand, and whole clusters in the simulator."""

from __future__ import annotations

import random

from cluster.raft.config import NodeConfig, parse_peers
from cluster.raft.core import TERM_STEP_MAX, RaftCore
from cluster.raft.member import MemoryTermStore, Role
from cluster.raft.rpc import Code, HeartBeatRequest, PushRequest, PushType, VoteRequest, VoteResponse, VoteResult
from tests.support.sim import Sim
from store.format import encode_entry
from store.memstore import MemoryStore

PEERS = parse_peers("n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3")


def _follower(term: int = 3):
    core = RaftCore(NodeConfig("g", "n0", PEERS), MemoryStore(), MemoryTermStore(term), random.Random(1), 0)
    return core


def _state(core) -> tuple:
    m = core.member
    return m.term, m.voted_for, m.role, m.leader_id, core.elections.election_at, core.elections.last_leader_contact, set(core.java_peers)


def test_a_refused_request_changes_nothing_not_even_a_java_mark():
    core = _follower()
    was = _state(core)
    refused = [
        HeartBeatRequest("other", "n1", 4),  # another group
        VoteRequest("g", "intruder", 4, 10, 3),  # no member (a leader's beat from one is taken: see below)
        HeartBeatRequest("g", "intruder", 2),  # no member, and an expired term
        HeartBeatRequest("g", "n1", 2),  # an expired term
        HeartBeatRequest("g", "n1", 3 + TERM_STEP_MAX + 1),  # out of reach
        VoteRequest("g", "n1", 3 + TERM_STEP_MAX + 1, 10, 3),
        PushRequest("g", "n1", 3 + TERM_STEP_MAX + 1, PushType.COMMIT, 5),
    ]
    for req in refused:
        resp = core.handle(req, 50, java=True)
        assert resp.code != Code.SUCCESS, req
        assert _state(core) == was, req
    # the same heartbeat, taken: now its sender is known to lead, and to be a Java node
    resp = core.handle(HeartBeatRequest("g", "n1", 4), 60, java=True)
    assert resp.code == Code.SUCCESS and core.member.term == 4 and core.member.leader_id == "n1"
    assert core.java_peers == {"n1"}


def test_a_leader_this_node_does_not_know_is_followed():
    """A leader's beat from a member no config of this node names (one added while it was
    down) is taken, as Raft takes it: refused, this node could never receive the config entry
    that names that leader (tests/raft/test_membership_sim.py has the whole case). A vote from
    one is not: it could otherwise disrupt a group it is no member of."""
    core = _follower()
    resp = core.handle(HeartBeatRequest("g", "n7", 3), 50)
    assert resp.code == Code.SUCCESS and core.member.leader_id == "n7"


def test_a_term_within_reach_is_taken_as_raft_says():
    core = _follower()
    resp = core.handle(HeartBeatRequest("g", "n1", 3 + TERM_STEP_MAX), 50)
    assert resp.code == Code.SUCCESS and core.member.term == 3 + TERM_STEP_MAX


def test_an_answer_with_a_term_out_of_reach_is_ignored():
    core = _follower()
    core.tick(10_000)  # no leader heard: a pre-vote
    pre = [s for s in core.take().sends if isinstance(s.request, VoteRequest)]
    core.on_response("n1", pre[0].request, VoteResponse(3 + TERM_STEP_MAX + 1, VoteResult.REJECT_ALREADY_VOTED),
                     10_001)
    assert core.member.term == 3 and core.member.role == Role.CANDIDATE


def _forge(sim: Sim):
    """A push forged as the leader at its term on a follower: an entry of its own after the
    log's end, committed there. Log safety cannot hold across that (it is the invariant the
    forgery breaks), so the simulator stops checking it; the test checks the group heals."""
    leader = sim.leader()
    victim = next(i for i in sim.ids if i != leader)
    s = sim.stores[victim]
    end, term = s.end_index, sim.nodes[leader].member.term
    forged = encode_entry(b"forged", index=end + 1, term=term, pos=s.write_pos, prev_chain=s.last_chain)
    sim.check = lambda: None
    resp = sim.nodes[victim].handle(PushRequest("sim", leader, term, PushType.APPEND, end + 1, end + 1, 1, forged),
                                    sim.now)
    assert resp.code == Code.SUCCESS and s.end_index == end + 1
    return leader, victim, end


def _converge_notes(sim: Sim, leader: str) -> list[str]:
    return [str(t) for _at, n, t in sim.notes if n == leader and "does not converge" in str(t)]


def test_a_forged_committed_entry_past_the_leaders_end_is_cut_back():
    sim = Sim(3, seed=11)
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    p = sim.propose(sim.leader(), [b"a", b"b"])
    sim.run_until(lambda: p.done and sim.logs_equal(), 10_000)
    leader, victim, end = _forge(sim)
    assert sim.stores[victim].committed_index == end + 1
    # the leader's COMMIT meets an end past its own; its TRUNCATE is refused (committed there)
    sim.run_until(lambda: sim.logs_equal() and sim.stores[victim].end_index == end, 5_000)
    assert len(_converge_notes(sim, leader)) == 1
    assert any(f"cut {victim} back from {end + 1}" in str(t) for _a, n, t in sim.notes if n == leader)
    # and replication goes on as before
    p = sim.propose(leader, [b"c"])
    sim.run_until(lambda: p.done and sim.logs_equal(), 5_000)
    assert p.code == Code.SUCCESS and sim.stores[victim].get(end + 1).body == b"c"


def test_a_forged_committed_entry_under_the_leaders_own_is_replaced():
    sim = Sim(3, seed=12)
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    p = sim.propose(sim.leader(), [b"a"])
    sim.run_until(lambda: p.done and sim.logs_equal(), 10_000)
    leader, victim, end = _forge(sim)
    # the leader writes its own entry at that index, in the same term: same index and term,
    # other bytes, which the follower refuses to replace (it counts its own as committed)
    p = sim.propose(leader, [b"real"])
    sim.run_until(lambda: p.done and sim.logs_equal(), 5_000)
    assert p.code == Code.SUCCESS and sim.stores[victim].get(end + 1).body == b"real"
    assert len(_converge_notes(sim, leader)) == 1


def test_a_follower_that_converges_is_never_deep_compared():
    sim = Sim(3, seed=13)
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    for k in range(20):
        p = sim.propose(sim.leader(), [b"x%d" % k])
        sim.run_until(lambda: p.done, 10_000)
    sim.run_until(sim.logs_equal, 10_000)
    assert not _converge_notes(sim, sim.leader())
