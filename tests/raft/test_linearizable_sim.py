"""Linearizable reads (ReadIndex, cluster/raft/reads.py) in the seeded simulation, checked
with the tests' linearizability checker (tests/support/linearizability.py).

Clients put and get keys of a key-value table kept by the log (entries ``key=value``),
each talking to the node it believes leads. The leader is partitioned away with a client
still on its side, then the partition heals. Every operation is recorded with the
simulated times of its invocation and completion; a put whose outcome is unknown (timed
out, or its leader changed before it committed) is recorded as such. With linearizable
reads every history passes the checker; with serializable reads (a node answers from its
own state at once, as ``--consistency serializable`` does) the deposed leader's stale
answers make some of the same runs fail it, which shows the checker can fail.
"""

from __future__ import annotations

import random

import pytest

from cluster.raft.member import Role
from cluster.raft.rpc import Code
from tests.support.linearizability import Op, check
from tests.support.sim import NetConfig, Sim

KEYS = ("a", "b", "c")


class KvView:
    """A node's key-value table as its state machine has it: the committed entries folded in."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.upto: dict[str, int] = {}
        self.values: dict[str, dict] = {}

    def value(self, node: str, key: str):
        store = self.sim.stores[node]
        upto, values = self.upto.get(node, -1), self.values.setdefault(node, {})
        if store.committed_index < upto or (store.begin_index > upto + 1 and upto >= 0):
            raise AssertionError(f"{node}'s state went back")  # (not in these runs: no lost disks)
        for i in range(max(upto + 1, store.begin_index, 0), store.committed_index + 1):
            e = store.get(i)
            k, sep, v = e.body.decode().partition("=")
            if sep:
                values[k] = v
        self.upto[node] = store.committed_index
        return values.get(key)


class Client:
    def __init__(self, name: str, sim: Sim, rng: random.Random, view: KvView, consistency: str, history: list):
        self.name, self.sim, self.rng, self.view = name, sim, rng, view
        self.consistency, self.history = consistency, history
        self.leader = sim.leader() or sim.ids[0]
        self.pinned = False  # stays with its node (on the deposed leader's side of a partition)
        self.op = None  # (kind, key, value, start, handle)
        self.next_at = 0
        self.seq = 0

    def step(self) -> None:
        now = self.sim.now
        if self.op is None:
            if now >= self.next_at and self.sim.nodes[self.leader] is not None:
                self._start(now)
            return
        kind, key, value, start, h = self.op
        if not h.done:
            return
        self.op = None
        self.next_at = now + self.rng.randint(0, 10)
        if kind == "put":
            if h.code == Code.SUCCESS:
                self.history.append(Op(key, "put", value, start, now, self.name))
            elif h.code in (Code.NOT_LEADER, Code.LEADER_TRANSFERRING):
                self._retarget(h.leader_id)  # refused: nothing was appended
            else:  # appended but not known to commit: it may still take effect
                self.history.append(Op(key, "put", value, start, None, self.name))
                self._retarget(None)
        elif h.code == Code.SUCCESS:
            self.history.append(Op(key, "get", self.view.value(self.leader, key), start, now, self.name))
        else:
            self._retarget(h.leader_id)

    def _start(self, now: int) -> None:
        key = self.rng.choice(KEYS)
        node = self.leader
        if self.rng.random() < 0.5:
            self.seq += 1
            value = f"{self.name}-{self.seq}"
            p = self.sim.propose(node, [f"{key}={value}".encode()])
            self.op = ("put", key, value, now, p)
        elif self.consistency == "linearizable":
            self.op = ("get", key, None, now, self.sim.read(node))
        else:  # serializable: the node's own state, at once (if it believes it leads)
            if self.sim.nodes[node].member.role == Role.LEADER:
                self.history.append(Op(key, "get", self.view.value(node, key), now, now, self.name))
            else:
                self._retarget(self.sim.nodes[node].member.leader_id)
            self.next_at = now + self.rng.randint(1, 10)

    def _retarget(self, hint) -> None:
        if self.pinned:
            return
        live = [i for i, n in self.sim.nodes.items() if n is not None]
        self.leader = hint if hint in live else self.rng.choice(live)


def run(seed: int, consistency: str, **cfg) -> tuple[list[Op], Sim]:
    rng = random.Random(seed)
    sim = Sim(3, seed=seed, net=NetConfig(delay=(1, 8), drop=0.01), **cfg)
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    view, history = KvView(sim), []
    clients = [Client(f"c{k}", sim, rng, view, consistency, history) for k in range(4)]

    def go(ms: int) -> None:
        end = sim.now + ms
        while sim.now < end:
            sim.run(2)
            for c in clients:
                c.step()

    go(rng.randint(300, 800))
    old = sim.leader()
    clients[0].leader, clients[0].pinned = old, True  # one client stays with the deposed leader
    sim.partition([old], [i for i in sim.ids if i != old])
    go(rng.randint(2500, 4000))  # the majority elects another; the old one steps down after check-quorum
    sim.heal()
    clients[0].pinned = False
    go(1500)
    for c in clients:  # let what is in flight finish
        c.next_at = 1 << 60
    go(4000)
    return history, sim


@pytest.mark.parametrize("seed", range(1, 9))
def test_linearizable_reads_pass_the_checker_through_a_partition(seed):
    history, sim = run(seed, "linearizable")
    gets = [o for o in history if o.kind == "get"]
    assert len(gets) > 50 and len([o for o in history if o.kind == "put"]) > 50
    r = check(history)
    assert r, f"seed {seed}: key {r.bad_key} is not linearizable ({r.ops} operations)"


@pytest.mark.parametrize("seed", range(1, 9))
def test_reads_on_a_lease_pass_the_checker_through_a_partition(seed):
    history, sim = run(seed, "linearizable", read_lease=True)
    assert len([o for o in history if o.kind == "get"]) > 50 and sim.lease_reads > 50
    r = check(history)
    assert r, f"seed {seed}: key {r.bad_key} is not linearizable ({r.ops} operations)"


def test_serializable_reads_are_found_stale_on_some_seeds():
    failed = [seed for seed in range(1, 9) if not check(run(seed, "serializable")[0])]
    assert failed, "the deposed leader's own answers never contradicted an acknowledged put"


def test_a_new_leader_confirms_reads_only_after_an_entry_of_its_term_commits():
    fresh_seen = False
    for seed in range(1, 6):
        sim = Sim(3, seed=seed)
        sim.run_until(lambda: sim.leader() is not None, 10_000)
        leader = sim.leader()
        core = sim.nodes[leader]
        first = core.role.term_first_index  # its no-op, appended the moment it was elected
        assert sim.stores[leader].get(first).term == core.member.term
        fresh = not core.role.term_committed()
        r = sim.read(leader)  # asked at once: the no-op may not be committed yet
        sim.run_until(lambda: r.done, 2_000)
        assert r.code == Code.SUCCESS and r.index >= first, (seed, fresh, r)
        fresh_seen |= fresh
    assert fresh_seen  # (some reads came before the no-op committed, and waited for it)


def test_reads_arriving_together_share_one_heartbeat_round():
    sim = Sim(3, seed=4)
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    leader = sim.leader()
    sim.run(200)
    before = sim.sent["HeartBeatRequest"]
    reads = [sim.read(leader) for _ in range(50)]
    sim.run_until(lambda: all(r.done for r in reads), 2_000)
    assert all(r.code == Code.SUCCESS for r in reads)
    # one round for the first, at most one more for those that came while it was out
    assert sim.sent["HeartBeatRequest"] - before <= 4 + 2 * 2


def test_reads_registered_together_wait_for_one_round_begun_when_output_is_taken():
    sim = Sim(3, seed=6)
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    leader = sim.leader()
    sim.run(200)
    core = sim.nodes[leader]
    before, rounds = sim.sent["HeartBeatRequest"], core.reads.read_round
    reads = sim.reads(leader, 30)
    assert core.reads.read_round == rounds + 1 and {r.round for r in reads} == {rounds + 1}
    assert sim.sent["HeartBeatRequest"] - before == 2  # (one round: a heartbeat to each follower)
    sim.run_until(lambda: all(r.done for r in reads), 2_000)
    assert all(r.code == Code.SUCCESS for r in reads)


def test_a_read_joins_a_round_only_while_it_is_out():
    sim = Sim(3, seed=7)
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    leader = sim.leader()
    sim.run(200)
    core = sim.nodes[leader]
    first = sim.read(leader)
    k = first.round
    assert k in core.reads.read_rounds
    # arrived before round k's heartbeats left (the caller vouches): no round of its own
    before = sim.sent["HeartBeatRequest"]
    joined = sim.reads(leader, 5, joins=k)
    assert {r.round for r in joined} == {k} and sim.sent["HeartBeatRequest"] == before
    sim.run_until(lambda: first.done, 2_000)
    assert all(r.done and r.code == Code.SUCCESS for r in joined)
    # round k is confirmed and gone: a read naming it waits for a round of its own
    late = sim.reads(leader, 1, joins=k)[0]
    assert late.round > k and not late.done
    sim.run_until(lambda: late.done, 2_000)
    assert late.code == Code.SUCCESS and late.index >= first.index


def test_an_isolated_leader_cannot_confirm_a_read():
    sim = Sim(3, seed=5)
    sim.run_until(lambda: sim.leader() is not None, 10_000)
    leader = sim.leader()
    sim.isolate(leader)
    r = sim.read(leader)
    sim.run_until(lambda: r.done, 10_000)
    assert r.code in (Code.NOT_LEADER, Code.TIMEOUT), r
    assert sim.nodes[leader].member.role != Role.LEADER or r.code == Code.TIMEOUT
