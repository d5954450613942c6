"""A deterministic cluster simulation for the deciding logic in cluster/raft/core.py.

Nodes are RaftCore objects over memory stores; the network is a seeded event queue that
delays, drops, duplicates and reorders requests and responses, and can partition nodes.
Time is simulated milliseconds: a minute of cluster life runs in about a second, and the
same seed gives the same run. Invariants are checked as the run goes:

- election safety: at most one leader per term;
- log safety: every entry a node holds as committed is byte-identical to the entry any
  other node committed at that index, and a node's committed index never goes back and
  never exceeds its log's end.

Pushes can arrive damaged (``NetConfig.garble``, tests/support/garble.py): torn, or with
a byte changed. Stores can lose what they did not flush when their node crashes (``crash(lose=True)``);
with ``flush="sync"`` every acknowledged entry was flushed first, so nothing committed may
be lost. ``random_run(seed)`` is the scenario the seed tests use; replay one with
``python -m tests.support.sim --seed N`` (add ``-v`` for the nodes' notes).

With ``snapshots_dir``, every node also runs a state machine through the real Applier
(cluster/raft/statemachine.py) with real snapshot files under that directory: it applies what
is committed at every tick, saves a snapshot every ``snapshot_threshold`` entries (the core
then deletes the log it covers), and a leader sends its snapshot to a follower that needs
entries it no longer holds. Then two more invariants hold at every tick: no entry is
applied twice or out of order (:class:`SimMachine` refuses it), and nodes that applied up
to the same index hold the same state.

Operators act too: ``operator_truncate`` does what ``peer truncate`` makes a node do
(pause the follower's dispatcher with its watermark lowered, send it the forced
truncation, compare again when it answers), through the same lossy network.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import json
import os
import random
import time
import zlib
from dataclasses import dataclass, field

from cluster.raft.config import NodeConfig, parse_peers
from cluster.raft.core import RaftCore
from cluster.raft.member import MemoryTermStore, Role
from cluster.raft.membership import initial, load_configs
from cluster.raft.rpc import Code, PushRequest, RepairRequest
from cluster.raft.statemachine import Applier
from store.memstore import MemoryStore
from store.snapshot import SnapshotStore
from tests.support.garble import garble


SIM_EPOCH = time.mktime((2026, 1, 1, 12, 0, 0, 0, 0, -1))  # local noon: no default deleteWhen hour (04)


class InvariantBroken(AssertionError):
    pass


class SimStore(MemoryStore):
    """A memory store that knows what it flushed, so a crash can lose the rest."""

    def __init__(self, sync: bool, data_file_size: int = 1 << 20, clock=None) -> None:
        super().__init__(data_file_size=data_file_size, clock=clock)
        self.sync = sync
        self.durable = -1  # entries up to here survive a crash

    def append_leader(self, bodies, term, magic=1):
        out = super().append_leader(bodies, term, magic)
        if self.sync:
            self.flush()
        return out

    def append_follower(self, raw, *, max_term=None):
        try:
            return super().append_follower(raw, max_term=max_term)
        finally:
            if self.sync:
                self.flush()

    def flush(self, *, index: bool = True) -> None:
        self.durable = self.end_index

    def truncate(self, from_index: int, *, force: bool = False, keep=None) -> int:
        n = super().truncate(from_index, force=force, keep=keep)
        self.durable = min(self.durable, self.end_index)
        return n

    def lose_unflushed(self) -> int:
        if self.end_index <= self.durable or self.begin_index < 0:
            return 0
        return super().truncate(max(self.durable + 1, self.begin_index), force=True)


class SimMachine:
    """A simulated node's state machine: how many entries it applied, the last one, and a
    running crc32 of every (index, body) in the order applied. It refuses an entry at or
    below the last one: applied twice, or out of order."""

    def __init__(self, pad: int = 0) -> None:
        self.last, self.count, self.digest = -1, 0, 0
        self.pad = pad  # bytes of padding in each snapshot (to send one in many chunks)

    def apply(self, index: int, term: int, body: bytes) -> None:
        if index <= self.last:
            raise InvariantBroken(f"entry {index} applied after entry {self.last}: twice or out of order")
        self.last, self.count = index, self.count + 1
        self.digest = zlib.crc32(b"%d:" % index + body, self.digest)

    def state(self) -> tuple[int, int, int]:
        return self.last, self.count, self.digest

    def snapshot(self) -> bytes:
        return json.dumps([*self.state(), "x" * self.pad]).encode()

    def restore(self, data: bytes) -> None:
        self.last, self.count, self.digest = json.loads(data)[:3]


@dataclass
class NetConfig:
    delay: tuple[int, int] = (1, 4)  # ms, uniform
    drop: float = 0.0  # chance a request or a response is lost
    duplicate: float = 0.0  # chance a request is delivered twice
    rpc_timeout: int = 1000  # a lost request or response is reported this late, as the transport would
    garble: float = 0.0  # chance a push's entries arrive torn or with a byte changed (tests/support/garble.py)


@dataclass(order=True)
class _Event:
    at: int
    seq: int
    kind: str = field(compare=False)
    args: tuple = field(compare=False)


class Sim:
    def __init__(self, n: int = 3, seed: int = 1, net: NetConfig | None = None, tick_ms: int = 2,
                 data_file_size: int = 1 << 20, snapshots_dir: str | None = None, snapshot_pad: int = 0,
                 per_node: dict | None = None, term_store=MemoryTermStore, **cfg) -> None:
        """``cfg``: NodeConfig settings of every node; ``per_node``: id -> settings of that one (never_lead=True);
        ``term_store()`` makes each node's term store (one whose disk can fill, tests/store/test_disk_full.py)."""
        self.rng = random.Random(seed)
        self.net = net or NetConfig()
        self.ids = [f"n{i}" for i in range(n)]
        peers = parse_peers(";".join(f"{i}-127.0.0.1:{20911 + k}" for k, i in enumerate(self.ids)))
        self.cfg = cfg
        self.configs = {i: NodeConfig("sim", i, peers, **{**cfg, **(per_node or {}).get(i, {})}) for i in self.ids}
        self.bases: dict[str, tuple] = {}  # what a node keeps in members.json: (membership, index)
        self.gone: set[str] = set()  # removed from the group and stopped for good
        # The wall clock of a simulation: SIM_EPOCH + simulated time. Retention reads it (the
        # hour of day, file ages: the stores' "files" age with it) and each node's disk
        # usage comes from disk_usage (None: unknown, as when statvfs fails).
        self.disk_usage: dict[str, float | None] = {i: None for i in self.ids}
        self.stores = {i: SimStore(cfg.get("flush", "async") == "sync", data_file_size, self.wall)
                       for i in self.ids}
        self.term_store = term_store
        self.terms = {i: term_store() for i in self.ids}
        self.snapshots_dir, self.snapshot_pad = snapshots_dir, snapshot_pad
        self.appliers: dict[str, Applier | None] = {}
        self.states: dict[int, tuple] = {}  # applied index -> the state first seen there
        self.sent: collections.Counter = collections.Counter()  # requests the cores sent, by type
        self.lease_reads = 0  # reads a leader answered on its lease (read_lease), with no round
        self.now = 0
        self.tick_ms = tick_ms
        self.nodes: dict[str, RaftCore | None] = {}
        for i in self.ids:
            self.nodes[i] = self._core(i)
        self.queue: list[_Event] = []
        self.seq = itertools.count()
        self.pending: set[int] = set()  # request ids awaiting a response
        self.asks: dict[int, object] = {}  # request id -> callback, for requests outside the cores' traffic
        self.blocked: set[tuple[str, str]] = set()  # directed links that lose everything
        self.leaders: dict[int, str] = {}  # term -> leader (election safety)
        self.committed: dict[int, bytes] = {}  # index -> bytes first seen committed
        self.seen_committed: dict[str, int] = {i: -1 for i in self.ids}
        self.done = []  # finished proposals
        self.reads_done = []  # finished ReadIndex reads (raft/reads.py)
        self.notes: list[tuple[int, str, str]] = []
        self.garbled: list[tuple] = []  # pushes that arrived damaged: (when, from, to, first index, what)
        self.next_tick = 0

    # -- network ----------------------------------------------------------------------
    def _push(self, at: int, kind: str, *args) -> None:
        heapq.heappush(self.queue, _Event(at, next(self.seq), kind, args))

    def _delay(self) -> int:
        lo, hi = self.net.delay
        return self.rng.randint(lo, hi)

    def _lost(self, a: str, b: str) -> bool:
        return (a, b) in self.blocked or self.rng.random() < self.net.drop

    def _send(self, frm: str, to: str, req) -> None:
        self.sent[type(req).__name__] += 1
        rid = next(self.seq)
        self.pending.add(rid)
        self._push(self.now + self.net.rpc_timeout, "timeout", frm, to, req, rid)
        if self._lost(frm, to):
            return
        wire = req
        if self.net.garble and type(req) is PushRequest and req.entries and self.rng.random() < self.net.garble:
            what, damaged = garble(req.entries, self.rng)
            wire = dataclasses.replace(req, entries=damaged)
            self.garbled.append((self.now, frm, to, req.first_index, what))
        self._push(self.now + self._delay(), "request", frm, to, req, rid, wire)
        if self.rng.random() < self.net.duplicate:
            self._push(self.now + self._delay() + 5, "request", frm, to, req, rid)

    def ask(self, frm: str, to: str, req, done) -> None:
        """Send ``req`` outside the core's own traffic (as a node's operator requests go);
        ``done(response)`` gets the answer, or None when it is lost."""
        rid = next(self.seq)
        self.asks[rid] = done
        self.pending.add(rid)
        self._push(self.now + self.net.rpc_timeout, "timeout", frm, to, req, rid)
        if not self._lost(frm, to):
            self._push(self.now + self._delay(), "request", frm, to, req, rid)

    def operator_truncate(self, peer: str, from_index: int) -> bool:
        """``peer truncate``, as cluster/node/operator.py carries it out; False when the leader
        would refuse (no leader, not a follower, at or below the commit index)."""
        leader = self.leader()
        core = self.nodes[leader] if leader else None
        if core is None or core.refuse_operator(peer) or from_index <= core.store.committed_index:
            return False
        core.pause_peer(peer, from_index - 1, "an operator cuts the follower")
        term = core.member.term

        def done(_resp) -> None:  # answered or lost: compare again either way, as the node does
            if self.nodes[leader] is core:
                core.compare_peer(peer, from_index - 1, "re-filling after the cut", self.now)
                self._drain(leader)

        self.ask(leader, peer, RepairRequest("sim", leader, term, from_index), done)
        self._drain(leader)
        return True

    def partition(self, *groups) -> None:
        """Cut every link between different groups (lists of ids); heal() undoes it."""
        where = {i: g for g, members in enumerate(groups) for i in members}
        self.blocked = {(a, b) for a in self.ids for b in self.ids
                        if a != b and where.get(a, -1) != where.get(b, -2)}

    def isolate(self, node: str) -> None:
        self.blocked |= {(node, b) for b in self.ids if b != node} | {(b, node) for b in self.ids if b != node}

    def heal(self) -> None:
        self.blocked = set()

    # -- nodes ------------------------------------------------------------------------
    def crash(self, node: str, lose: bool = False) -> None:
        """Stop a node; with ``lose``, its store also drops what it had not flushed. Its
        state machine is gone with it (its snapshot files stay)."""
        self.nodes[node] = None
        self.appliers[node] = None
        if lose and self.stores[node].lose_unflushed():
            self.seen_committed[node] = min(self.seen_committed[node], self.stores[node].committed_index)

    def restart(self, node: str) -> None:
        self.nodes[node] = self._core(node)

    def _core(self, i: str) -> RaftCore:
        cfg = self.configs[i]
        # as cluster/node/process.py: the members from the log, over what members.json kept (else --peers)
        base, base_index = self.bases.get(i) or (initial(cfg.peers, i, cfg.learner), -1)
        core = RaftCore(cfg, self.stores[i], self.terms[i], random.Random(self.rng.random()), self.now,
                        clock=self.wall, disk_usage=lambda: self.disk_usage[i],
                        configs=load_configs(self.stores[i], base, base_index),
                        save_base=lambda m, index: self.bases.__setitem__(i, (m, index)))
        if self.snapshots_dir is not None:  # as cluster/node/process.py sets it up
            a = Applier(SimMachine(self.snapshot_pad), self.stores[i], SnapshotStore(os.path.join(self.snapshots_dir, i)),
                        self.configs[i].snapshot_threshold)
            a.recover()
            core.applier, core.compaction.retention_limit = a, a.snapshot_index
            self.appliers[i] = a
        return core

    def _apply(self, i: str) -> None:
        """What cluster/node/process.py does after the commit index moves: apply, and save a snapshot
        when one is due (at once here; the node writes it in a thread)."""
        a, core = self.appliers.get(i), self.nodes[i]
        if a is None or core is None:
            return
        a.step()
        due = a.due()
        if due is not None:
            a.save(*due)
            a.snapshots.prune(self.configs[i].snapshots_kept)
            a.saved(due[0], due[1])
            core.snapshot_saved(due[0], self.now)
            self._drain(i)
        if a.applied >= 0:
            first = self.states.setdefault(a.applied, a.sm.state())
            if first != a.sm.state():
                raise InvariantBroken(f"{i}: state {a.sm.state()} after applying up to {a.applied}, another node "
                                      f"had {first}")

    # -- membership -------------------------------------------------------------------
    def add_node(self, node: str) -> None:
        """Start a new node as a learner (as ``node start --learner`` would), knowing the
        current leader's members and itself."""
        leader = self.leader()
        members = dict(self.nodes[leader].members.members if leader else self.configs[self.ids[0]].peers)
        port = 20911 + len(self.configs)
        members[node] = parse_peers(f"{node}-127.0.0.1:{port}")[node]
        self.configs[node] = NodeConfig("sim", node, members, learner=True, **self.cfg)
        self.ids.append(node)
        self.stores[node] = SimStore(self.cfg.get("flush", "async") == "sync", self.stores[self.ids[0]].data_file_size,
                                     self.wall)
        self.terms[node] = self.term_store()
        self.disk_usage[node] = None
        self.seen_committed[node] = -1
        self.nodes[node] = self._core(node)

    def change(self, kind: str, node: str):
        """``peer add`` (kind "add": the node must have been started with add_node) or
        ``peer remove``, asked of the current leader; the proposal of its config entry (done
        at once when refused)."""
        leader = self.leader()
        address = self.configs[node].peers[node].address if node in self.configs else None
        p = self.nodes[leader].change_members(kind, node, address, self.now)
        self._drain(leader)
        if p.done:
            self.done.append(p)
        return p

    def remove_node(self, node: str) -> None:
        """Stop a node removed from the group, for good."""
        self.crash(node)
        self.gone.add(node)

    def members_of(self, node: str):
        return self.nodes[node].members

    def wall(self) -> float:
        """Wall-clock seconds in the simulation (local noon of a fixed day, plus its time)."""
        return SIM_EPOCH + self.now / 1000

    def lose_entries(self, node: str, from_index: int) -> None:
        """A crashed node comes back from an older disk state: entries from ``from_index``
        are gone (committed ones too, as after an fsync-less crash)."""
        assert self.nodes[node] is None, "crash the node first"
        self.stores[node].truncate(from_index, force=True)
        self.seen_committed[node] = self.stores[node].committed_index

    def leader(self) -> str | None:
        """The leader of the highest term among live nodes, if any."""
        best = None
        for i, n in self.nodes.items():
            if n is not None and n.member.role == Role.LEADER:
                if best is None or n.member.term > self.nodes[best].member.term:
                    best = i
        return best

    def propose(self, node: str, bodies):
        p = self.nodes[node].propose(bodies, self.now)
        self._drain(node)
        if p.done:
            self.done.append(p)
        return p

    def read(self, node: str):
        """A linearizable read's index from ``node`` (raft/reads.py ReadIndex; done at once
        when refused, else when its heartbeat round is answered or it times out)."""
        return self.reads(node, 1)[0]

    def reads(self, node: str, n: int, joins: int = 0) -> list:
        """``n`` linearizable reads registered on ``node`` together (as a node registers the
        reads one socket read brings), then its output sent; ``joins``: the round they may
        join (read_index's argument)."""
        out = [self.nodes[node].read_index(self.now, joins) for _ in range(n)]
        self.lease_reads += sum(1 for r in out if r.code == Code.SUCCESS and r.round == 0)  # (no round: a lease)
        self._drain(node)
        return out

    def _drain(self, node: str) -> None:
        n = self.nodes[node]
        if n is None:
            return
        ready = n.take()
        for s in ready.sends:
            self._send(node, s.to, s.request)
        finished = n.take_finished()
        self.done.extend(finished.proposals)
        self.reads_done.extend(finished.reads)
        self.notes.extend((self.now, node, t) for t in ready.notes)

    # -- running ----------------------------------------------------------------------
    def run(self, ms: int) -> None:
        end = self.now + ms
        while self.now < end:
            nxt = min(self.next_tick, self.queue[0].at if self.queue else self.next_tick)
            self.now = max(self.now, min(nxt, end))
            if self.now >= end and nxt > end:
                break
            while self.queue and self.queue[0].at <= self.now:
                self._deliver(heapq.heappop(self.queue))
            if self.now >= self.next_tick:
                self.next_tick = self.now + self.tick_ms
                for i, n in self.nodes.items():
                    if n is not None:
                        n.tick(self.now)
                        self._drain(i)
                        self._apply(i)
                self.check()

    def run_until(self, cond, limit_ms: int, step: int = 10) -> int:
        """Run until ``cond()`` holds; returns the simulated ms it took. Fails at the limit."""
        start = self.now
        while not cond():
            if self.now - start >= limit_ms:
                raise AssertionError(f"condition not reached within {limit_ms} simulated ms")
            self.run(step)
        return self.now - start

    def _deliver(self, ev: _Event) -> None:
        if ev.kind == "request":
            frm, to, req, rid, *wire = ev.args  # (what arrives: a garbled push's damaged copy)
            target = self.nodes[to]
            if target is None:
                return
            resp = target.handle(wire[0] if wire else req, self.now)
            self._drain(to)
            if not self._lost(to, frm):
                self._push(self.now + self._delay(), "response", to, frm, req, resp, rid)
        elif ev.kind == "response":
            frm, to, req, resp, rid = ev.args
            if rid not in self.pending or self.nodes[to] is None:
                return  # matched already (a duplicate), or the requester is gone
            self.pending.discard(rid)
            if rid in self.asks:
                self.asks.pop(rid)(resp)
                return
            self.nodes[to].on_response(frm, req, resp, self.now)
            self._drain(to)
        elif ev.kind == "timeout":
            frm, to, req, rid = ev.args
            if rid not in self.pending:
                return
            self.pending.discard(rid)
            if rid in self.asks:
                self.asks.pop(rid)(None)
                return
            if self.nodes[frm] is not None:
                self.nodes[frm].on_failure(to, req, "timeout", self.now)
                self._drain(frm)

    # -- invariants -------------------------------------------------------------------
    def check(self) -> None:
        for i, n in self.nodes.items():
            if n is None:
                continue
            m = n.member
            if m.role == Role.LEADER:
                other = self.leaders.setdefault(m.term, i)
                if other != i:
                    raise InvariantBroken(f"two leaders in term {m.term}: {other} and {i}")
            store = self.stores[i]
            c = store.committed_index
            if c > store.end_index:
                raise InvariantBroken(f"{i}: committed index {c} is past the log's end {store.end_index}")
            if c < self.seen_committed[i]:
                raise InvariantBroken(f"{i}: committed index went back from {self.seen_committed[i]} to {c}")
            for idx in range(max(self.seen_committed[i] + 1, store.begin_index), c + 1):
                raw = store.get_bytes(idx)
                first = self.committed.setdefault(idx, raw)
                if first != raw:
                    raise InvariantBroken(f"{i}: committed entry {idx} differs from another node's")
            self.seen_committed[i] = c

    def logs_equal(self, upto: int | None = None) -> bool:
        live = [i for i, n in self.nodes.items() if n is not None and i not in self.gone]
        ends = {self.stores[i].end_index for i in live}
        if len(ends) != 1:
            return False
        end = ends.pop() if upto is None else upto
        begin = max(max(self.stores[i].begin_index, 0) for i in live)  # the entries all of them hold
        return all(len({self.stores[i].get_bytes(k) for i in live}) == 1 for k in range(begin, end + 1))


def random_run(seed: int, *, verbose: bool = False, garble: float = 0.0) -> Sim:
    """A seeded random life of a 3- or 5-node cluster: appends, partitions, loss,
    duplicates, reordering, crashes and restarts (losing unflushed data when flush=sync).
    Invariants are checked at every tick; at the end the network heals, every node comes
    back, and every acknowledged append must be in every node's log. ``garble``: the chance
    that a push arrives torn or with a byte changed (NetConfig.garble)."""
    rng = random.Random(seed)
    n = rng.choice((3, 5))
    flush = rng.choice(("async", "sync"))
    net = NetConfig(delay=(1, rng.choice((3, 20, 60))), drop=rng.choice((0.0, 0.03, 0.1)),
                    duplicate=rng.choice((0.0, 0.05)), rpc_timeout=800, garble=garble)
    sim = Sim(n, seed=seed, net=net, flush=flush)
    proposals = []
    try:
        for step in range(rng.randint(8, 16)):
            action = rng.random()
            live = [i for i, node in sim.nodes.items() if node is not None]
            down = [i for i in sim.ids if i not in live]
            leader = sim.leader()
            if action < 0.45 and leader is not None:
                proposals.append(sim.propose(leader, [b"s%d-%d-%d" % (seed, step, k) for k in range(rng.randint(1, 8))]))
            elif action < 0.6:
                ids = list(sim.ids)
                rng.shuffle(ids)
                cut = rng.randint(1, n - 1)
                sim.partition(ids[:cut], ids[cut:])
            elif action < 0.7:
                sim.heal()
            elif action < 0.75 and leader is not None:
                follower = rng.choice([i for i in live if i != leader] or [leader])
                above = sim.stores[leader].committed_index + 1 + rng.randint(0, 6)
                sim.operator_truncate(follower, above)
            elif action < 0.85 and len(down) < n // 2 and live:
                sim.crash(rng.choice(live), lose=flush == "sync" and rng.random() < 0.5)
            elif down:
                sim.restart(rng.choice(down))
            sim.run(rng.randint(50, 2500))
        sim.heal()
        for i in sim.ids:
            if sim.nodes[i] is None:
                sim.restart(i)
        sim.run_until(lambda: sim.leader() is not None, 30_000)
        final = sim.propose(sim.leader(), [b"final-%d" % seed])
        sim.run_until(lambda: final.done, 30_000)
        if final.code is None or final.code.name != "SUCCESS":
            final = sim.propose(sim.leader(), [b"final-%d" % seed]) if sim.leader() else final
            sim.run_until(lambda: final.done, 30_000)
        sim.run_until(lambda: sim.logs_equal() and len({st.committed_index for st in sim.stores.values()}) == 1,
                      30_000)
        log = [e.body for e in sim.stores[sim.ids[0]].entries()]
        for p in proposals + [final]:
            if p.code is not None and p.code.name == "SUCCESS":
                got = log[p.first_index : p.last_index + 1]
                want = [sim.stores[sim.ids[0]].get(i).body for i in range(p.first_index, p.last_index + 1)]
                if got != want or len(got) != p.count:
                    raise InvariantBroken(f"acknowledged append {p.first_index}..{p.last_index} is not in the log")
                for a in p.appended:
                    if sim.stores[sim.ids[0]].get(a.index).term != a.term:
                        raise InvariantBroken(f"acknowledged entry {a.index} was replaced")
    except AssertionError as exc:
        raise type(exc)(f"seed {seed}: {exc}\n  replay: python -m tests.support.sim --seed {seed} -v") from exc
    finally:
        if verbose:
            for t, node, text in sim.notes:
                print(f"{t:>8} {node} {text}")
    return sim


if __name__ == "__main__":  # python -m tests.support.sim --seed N [-v], from the project's root
    import argparse

    ap = argparse.ArgumentParser(description="Replay one seeded cluster simulation.")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    done = random_run(args.seed, verbose=args.verbose)
    print(f"seed {args.seed}: ok, {len(done.ids)} nodes, end index {done.stores[done.ids[0]].end_index}, "
          f"{len(done.leaders)} terms with a leader")
