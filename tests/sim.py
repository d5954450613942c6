"""A deterministic cluster simulation for the deciding logic in cluster/core.py.

Nodes are RaftCore objects over memory stores; the network is a seeded event queue that
delays, drops, duplicates and reorders requests and responses, and can partition nodes.
Time is simulated milliseconds: a minute of cluster life runs in about a second, and the
same seed gives the same run. Invariants are checked as the run goes:

- election safety: at most one leader per term;
- log safety: every entry a node holds as committed is byte-identical to the entry any
  other node committed at that index, and a node's committed index never goes back.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

from cluster.config import NodeConfig, parse_peers
from cluster.core import RaftCore
from cluster.member import MemoryTermStore, Role
from store.memstore import MemoryStore


class InvariantBroken(AssertionError):
    pass


@dataclass
class NetConfig:
    delay: tuple[int, int] = (1, 4)  # ms, uniform
    drop: float = 0.0  # chance a request or a response is lost
    duplicate: float = 0.0  # chance a request is delivered twice
    rpc_timeout: int = 1000  # a lost request or response is reported this late, as the transport would


@dataclass(order=True)
class _Event:
    at: int
    seq: int
    kind: str = field(compare=False)
    args: tuple = field(compare=False)


class Sim:
    def __init__(self, n: int = 3, seed: int = 1, net: NetConfig | None = None, tick_ms: int = 2, **cfg) -> None:
        self.rng = random.Random(seed)
        self.net = net or NetConfig()
        self.ids = [f"n{i}" for i in range(n)]
        peers = parse_peers(";".join(f"{i}-127.0.0.1:{20911 + k}" for k, i in enumerate(self.ids)))
        self.configs = {i: NodeConfig("sim", i, peers, **cfg) for i in self.ids}
        self.stores = {i: MemoryStore(data_file_size=1 << 20) for i in self.ids}
        self.terms = {i: MemoryTermStore() for i in self.ids}
        self.now = 0
        self.tick_ms = tick_ms
        self.nodes: dict[str, RaftCore | None] = {}
        for i in self.ids:
            self.nodes[i] = RaftCore(self.configs[i], self.stores[i], self.terms[i],
                                     random.Random(self.rng.random()), self.now)
        self.queue: list[_Event] = []
        self.seq = itertools.count()
        self.pending: set[int] = set()  # request ids awaiting a response
        self.blocked: set[tuple[str, str]] = set()  # directed links that lose everything
        self.leaders: dict[int, str] = {}  # term -> leader (election safety)
        self.committed: dict[int, bytes] = {}  # index -> bytes first seen committed
        self.seen_committed: dict[str, int] = {i: -1 for i in self.ids}
        self.done = []  # finished proposals
        self.notes: list[tuple[int, str, str]] = []
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
        rid = next(self.seq)
        self.pending.add(rid)
        self._push(self.now + self.net.rpc_timeout, "timeout", frm, to, req, rid)
        if self._lost(frm, to):
            return
        self._push(self.now + self._delay(), "request", frm, to, req, rid)
        if self.rng.random() < self.net.duplicate:
            self._push(self.now + self._delay() + 5, "request", frm, to, req, rid)

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
    def crash(self, node: str) -> None:
        self.nodes[node] = None

    def restart(self, node: str) -> None:
        self.nodes[node] = RaftCore(self.configs[node], self.stores[node], self.terms[node],
                                    random.Random(self.rng.random()), self.now)

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

    def _drain(self, node: str) -> None:
        n = self.nodes[node]
        if n is None:
            return
        ready = n.take()
        for s in ready.sends:
            self._send(node, s.to, s.request)
        self.done.extend(ready.done)
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
            frm, to, req, rid = ev.args
            target = self.nodes[to]
            if target is None:
                return
            resp = target.handle(req, self.now)
            self._drain(to)
            if not self._lost(to, frm):
                self._push(self.now + self._delay(), "response", to, frm, req, resp, rid)
        elif ev.kind == "response":
            frm, to, req, resp, rid = ev.args
            if rid not in self.pending or self.nodes[to] is None:
                return  # matched already (a duplicate), or the requester is gone
            self.pending.discard(rid)
            self.nodes[to].on_response(frm, req, resp, self.now)
            self._drain(to)
        elif ev.kind == "timeout":
            frm, to, req, rid = ev.args
            if rid not in self.pending:
                return
            self.pending.discard(rid)
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
            if c < self.seen_committed[i]:
                raise InvariantBroken(f"{i}: committed index went back from {self.seen_committed[i]} to {c}")
            for idx in range(self.seen_committed[i] + 1, c + 1):
                raw = store.get_bytes(idx)
                first = self.committed.setdefault(idx, raw)
                if first != raw:
                    raise InvariantBroken(f"{i}: committed entry {idx} differs from another node's")
            self.seen_committed[i] = c

    def logs_equal(self, upto: int | None = None) -> bool:
        live = [i for i, n in self.nodes.items() if n is not None]
        ends = {self.stores[i].end_index for i in live}
        if len(ends) != 1:
            return False
        end = ends.pop() if upto is None else upto
        return all(len({self.stores[i].get_bytes(k) for i in live}) == 1 for k in range(0, end + 1))
