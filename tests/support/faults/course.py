"""What a run's faults share: whom a fault hits (:class:`Targets`, drawn with the run's one
random generator, so a seed replays the same choices) and the run's :class:`Course` (when
the faults must end, each kind counted, the problems found, the log, and waits bounded by
both the fault's bound and the run's end).
"""

from __future__ import annotations

import asyncio
import collections
import random

from tests.support.faults.monitor import Monitor
from tests.support.faults.processes import Cluster


class Targets:
    """Whom a fault hits, as the monitor sees the group now."""

    def __init__(self, cluster: Cluster, rng: random.Random) -> None:
        self.c = cluster
        self.rng = rng  # the nemesis's: every fault family draws from this one

    def choose(self, items: list, pick: float):
        return items[min(len(items) - 1, int(pick * len(items)))]

    def leader_or_any(self, pick: float) -> str:
        up = [n for n in self.c.ids if self.c.nodes[n].state == "up"]
        leader = self.c.monitor.leader
        return leader if leader in up else self.choose(up or self.c.ids, pick)

    def follower(self, pick: float) -> str:
        leader = self.c.monitor.leader
        others = [n for n in self.c.ids if n != leader and self.c.nodes[n].state == "up"]
        return self.choose(others or self.c.ids, pick)

    def shuffled(self, first: str | None = None) -> list[str]:
        ids = list(self.c.ids)
        self.rng.shuffle(ids)
        if first is not None:
            ids.remove(first)
            ids.insert(0, first)
        return ids


class Course:
    """The faults of a run as they go: ``end`` (loop time they stop at, set by the nemesis),
    ``counts`` per kind (and skips), ``problems`` found, and ``log``."""

    def __init__(self, monitor: Monitor, log) -> None:
        self.monitor, self.log = monitor, log
        self.counts: collections.Counter = collections.Counter()
        self.problems: list[str] = []
        self.end = 0.0

    def left(self) -> float:
        return max(0.0, self.end - asyncio.get_running_loop().time())

    async def wait(self, cond, bound: float, problem: str) -> bool:
        """Wait for ``cond(monitor)`` up to ``bound`` s, but not past the end of the run (the
        final heal and convergence take over); a problem only when ``bound`` ran out."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        if await self.monitor.wait(cond, min(bound, max(self.left(), 0.5))):
            return True
        if loop.time() - t0 >= bound - 0.01:
            self.problems.append(problem)
        return False
