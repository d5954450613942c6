"""Steps the simulation tests take on a :class:`~tests.support.sim.Sim`: elect a leader,
commit through it, fill the log with numbered bodies."""

from __future__ import annotations

from typing import Callable

from cluster.raft.rpc import Code
from tests.support.sim import Sim


def body(k: int) -> bytes:
    """Body number ``k``: its number in six digits, 100 bytes in all."""
    return b"%06d" % k + b"x" * 94


def elect(sim: Sim, limit=10_000) -> str:
    sim.run_until(lambda: sim.leader() is not None, limit)
    return sim.leader()


def commit(sim: Sim, bodies, limit=10_000):
    """Propose on the current leader (electing one first) and wait for the outcome."""
    leader = elect(sim)
    p = sim.propose(leader, bodies)
    sim.run_until(lambda: p.done, limit)
    return p


def fill(sim: Sim, start: int, count: int, batch: int = 10,
         make: Callable[[int], bytes] = body) -> list[int]:
    """Commit bodies ``make(start)`` .. ``make(start + count - 1)`` through the current
    leader, ``batch`` a proposal; their indexes."""
    out = []
    for k in range(start, start + count, batch):
        p = commit(sim, [make(j) for j in range(k, min(k + batch, start + count))])
        assert p.code == Code.SUCCESS, p.remark
        out += list(range(p.first_index, p.last_index + 1))
    return out
