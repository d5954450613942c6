"""The nemesis: runs a schedule's faults against a cluster. Kills, partitions, slow links,
pauses and hostile frames are here; faults on the disk (torn writes, bit rot, damaged tails)
are :class:`~tests.support.faults.nemesis_disk.DiskFaults`, membership changes
:class:`~tests.support.faults.nemesis_members.MemberChanges`.
"""

from __future__ import annotations

import asyncio
import collections
import random

from tests.support import hostile
from tests.support.faults.clients import Appender
from tests.support.faults.course import Course, Targets
from tests.support.faults.nemesis_disk import DiskFaults
from tests.support.faults.nemesis_members import MemberChanges
from tests.support.faults.network import GROUP, HOST
from tests.support.faults.processes import Cluster
from tests.support.faults.schedule import Step


class Nemesis:
    """Runs a schedule against a cluster: each step injects a fault, holds it, undoes it,
    waits a little. Every undo that leaves the cluster whole is a heal: the time from it to
    the monitor's next leader is recorded."""

    def __init__(self, cluster: Cluster, steps: list[Step], seed: int, log, appender: Appender | None = None) -> None:
        self.c = cluster
        self.steps = steps
        self.rng = random.Random(seed)
        self.targets = Targets(cluster, self.rng)
        self.course = Course(cluster.monitor, log)
        self.heal_waits: list[float] = []  # seconds from each heal to a leader
        # (appender: rot-tail records its probes there)
        self.disk = DiskFaults(cluster, self.targets, self.course, appender)
        self.members = MemberChanges(cluster, self.targets, self.course)

    @property
    def counts(self) -> collections.Counter:
        return self.course.counts

    @property
    def problems(self) -> list[str]:
        return self.course.problems

    async def run(self, seconds: float) -> None:
        """Inject faults for ``seconds``: a fault that would outlast them is held for less."""
        self.course.end = asyncio.get_running_loop().time() + seconds
        for step in self.steps:
            if self.course.left() <= 0:
                break
            hold = min(step.hold, max(0.2, self.course.left()))
            self.course.counts[step.kind] += 1
            await self._step(step, hold)
            await self._healed()
            await asyncio.sleep(min(step.gap, self.course.left()))

    async def sync_after_heal(self) -> None:
        """The members of a change the run's time ended before syncing, now."""
        await self.members.sync_after_heal()

    async def _step(self, s: Step, hold: float) -> None:
        c, net, kind = self.c, self.c.net, s.kind
        if kind.startswith("hostile"):
            await self._hostile(s, hold)
        elif kind.startswith("kill") and kind != "kill+partition":
            n, q = len(c.ids), len(c.ids) // 2 + 1
            count = {"kill-leader": 1, "kill-follower": 1, "kill-minority": n - q, "kill-majority": q,
                     "kill-all": n}[kind]
            first = self.targets.follower(s.pick) if kind == "kill-follower" else self.targets.leader_or_any(s.pick)
            victims = self.targets.shuffled(first)[:count]
            self.course.log(f"{kind}: kill -9 {', '.join(victims)}")
            for v in victims:
                c.nodes[v].kill()
            await asyncio.sleep(hold)
            for v in victims:
                c.nodes[v].start()
        elif kind in ("partition-halves", "isolate-leader", "majority-ring", "one-way", "flaky-link"):
            if kind == "partition-halves":
                ids = self.targets.shuffled()
                cut = len(ids) // 2 + (self.rng.random() < 0.5)
                groups = [ids[:cut], ids[cut:]]
                net.partition(groups, s.mode)
                what = " | ".join(",".join(g) for g in groups)
            elif kind == "isolate-leader":
                leader = self.targets.leader_or_any(s.pick)
                net.partition([[leader], [i for i in c.ids if i != leader]], s.mode)
                what = f"{leader} alone"
            elif kind == "majority-ring":
                ids = self.targets.shuffled(self.targets.leader_or_any(s.pick))
                n = len(ids)
                if n > 3:  # ring neighbours only: every node sees a majority, no two the same one
                    keep = {(ids[k], ids[(k + 1) % n]) for k in range(n)}
                    what = "ring " + "-".join(ids)
                else:  # three nodes: a bridge (the leader, or a follower) between two that cannot meet
                    bridge = ids[0] if s.pick < 0.5 else ids[1]
                    keep = {(bridge, o) for o in ids if o != bridge}
                    what = f"bridge {bridge}"
                net.only(keep, s.mode)
            elif kind == "one-way":
                leader = self.targets.leader_or_any(s.pick)
                outbound = self.rng.random() < 0.5
                pairs = [(leader, o) if outbound else (o, leader) for o in c.ids if o != leader]
                net.cut(pairs, s.mode)
                what = f"{leader} {'cannot reach the others' if outbound else 'unreachable by the others'} (one way)"
            else:
                a, b = self.targets.shuffled()[:2]
                net.cut([(a, b), (b, a)], s.mode)
                what = f"{a} <-> {b}"
            self.course.log(f"{kind} ({s.mode}): {what}")
            await asyncio.sleep(hold)
            net.heal()
        elif kind == "slow-links":
            hi = self.rng.choice((20, 50, 150))
            net.slow((hi / 4, hi))
            self.course.log(f"slow-links: every link delayed {hi / 4:g}-{hi} ms")
            await asyncio.sleep(hold)
            net.heal()
        elif kind in ("pause-leader", "pause-follower"):
            v = self.targets.leader_or_any(s.pick) if kind == "pause-leader" else self.targets.follower(s.pick)
            self.course.log(f"{kind}: SIGSTOP {v}")
            c.nodes[v].pause()
            await asyncio.sleep(hold)
            c.nodes[v].resume()
        elif kind == "partition+pause":
            ids = self.targets.shuffled()
            cut = len(ids) // 2
            net.partition([ids[:cut], ids[cut:]], s.mode)
            v = self.targets.choose(ids[cut:], s.pick)
            c.nodes[v].pause()
            self.course.log(f"partition+pause ({s.mode}): {','.join(ids[:cut])} | {','.join(ids[cut:])}, SIGSTOP {v}")
            await asyncio.sleep(hold)
            net.heal()
            c.nodes[v].resume()
        elif kind == "kill+partition":
            leader = self.targets.leader_or_any(s.pick)
            others = [i for i in self.targets.shuffled() if i != leader]
            v = others[0]
            c.nodes[v].kill()
            net.partition([[leader], others], s.mode)
            self.course.log(f"kill+partition ({s.mode}): kill -9 {v}, {leader} cut off")
            await asyncio.sleep(hold)
            net.heal()
            c.nodes[v].start()
        elif kind == "torn-write":
            await self.disk.torn_write(s, hold)
        elif kind == "bitrot":
            await self.disk.bitrot(s)
        elif kind == "rot-tail":
            await self.disk.rot_tail(s, hold)
        elif kind == "rot-follower-tail":
            await self.disk.rot_follower_tail(s, hold)
        elif kind.startswith("replace"):
            await self.members.replace(s, hold)
        else:
            raise ValueError(f"unknown fault {kind!r}")

    async def _hostile(self, s: Step, hold: float) -> None:
        """Hostile frames (tests/support/hostile.py) to every member that is up, straight to its port,
        for ``hold`` seconds; with ``+kill-leader`` the leader is killed first, with
        ``+partition`` the group is cut in two meanwhile. Every frame must be refused: the
        run's checks (one leader after the heal, every acknowledged append in every log,
        logs identical, no traceback in a node's log) say whether they changed anything."""
        c, kind = self.c, s.kind
        victim = None
        if kind == "hostile+kill-leader":
            victim = self.targets.leader_or_any(s.pick)
            c.nodes[victim].kill()
        elif kind == "hostile+partition":
            ids = self.targets.shuffled()
            c.net.partition([ids[:len(ids) // 2], ids[len(ids) // 2:]], s.mode)
        self.course.log(f"{kind}: hostile frames to every member for {hold:g} s"
                        + (f", {victim} killed" if victim else ""))
        rng = random.Random(self.rng.random())
        end = asyncio.get_running_loop().time() + hold
        sent = collections.Counter()
        while asyncio.get_running_loop().time() < end:
            for n in [i for i in c.ids if c.nodes[i].state == "up"]:
                frames = hostile.hostile_frames(rng, GROUP, list(c.ids), 40)
                try:
                    sent.update(await asyncio.to_thread(hostile.send_all, HOST, c.ports[n], frames, 2.0))
                except OSError:
                    sent["unreachable"] += 1  # (killed or restarting meanwhile)
        self.course.log(f"{kind}: {sent['answered']} answered, {sent['closed']} closed the connection")
        if victim is not None:
            c.nodes[victim].start()
        if kind == "hostile+partition":
            c.net.heal()

    async def _healed(self) -> None:
        """The fault is undone: if the cluster is whole, time how long until it has a leader."""
        c = self.c
        self.course.problems += c.died()
        for n in c.nodes.values():  # a node that crashed by itself (reported) is started again
            if n.state == "down":
                n.start()
        if not (c.net.healthy and all(n.state == "up" for n in c.nodes.values())):
            return
        took = await c.time_to_leader(c.heal_bound)
        self.heal_waits.append(took if took is not None else float("inf"))
        if took is None:
            self.course.problems.append(f"no leader within {c.heal_bound:g} s after a heal")
