"""Membership changes as faults: ``peer replace`` through the leader (a spare joins as a
learner, is promoted, a member leaves), alone or racing a crash of the leader or a partition,
and keeping the harness's idea of the group's members in step with the group's.
"""

from __future__ import annotations

import asyncio

from cluster.net.client import Client, ClientError
from tests.support.faults.course import Course, Targets
from tests.support.faults.network import GROUP, HOST
from tests.support.faults.processes import Cluster
from tests.support.faults.schedule import Step


class MemberChanges:
    """The membership changes of a run; ``unsynced``: a change's config entry the run's time
    ended before syncing (synced after the final heal)."""

    def __init__(self, cluster: Cluster, targets: Targets, course: Course) -> None:
        self.c, self.targets, self.course = cluster, targets, course
        self.rng = targets.rng
        self.unsynced: int | None = None

    async def replace(self, s: Step, hold: float) -> None:
        """peer replace through the leader: a spare joins as a learner, is promoted once
        caught up, then a follower (or the leader) is removed and stopped for good; with
        ``+kill-leader`` the leader is killed, and with ``+partition`` the group cut in two,
        right after the learner is asked for, while it catches up."""
        c, kind = self.c, s.kind
        leader = c.monitor.leader
        victim = self.targets.leader_or_any(s.pick) if kind == "replace-leader" else self.targets.follower(s.pick)
        new = c.start_spare()
        if new is None or leader is None:
            self.course.counts["replace skipped"] += 1
            if new is not None:
                c.set_members(c.ids, len(c.ids))
            return
        admin = Client(dict(c.direct), GROUP, timeout=5.0, tls=c.tls)
        self.course.log(f"{kind}: {new} joins as a learner to replace {victim}")
        undo = None
        at = -1  # the config entry the last change that went through committed
        try:
            add = asyncio.ensure_future(admin.change_members("add", new, f"{HOST}:{c.ports[new]}"))
            if kind == "replace+kill-leader":
                await asyncio.sleep(self.rng.uniform(0, 0.3))
                c.nodes[leader].kill()
                self.course.log(f"{kind}: kill -9 {leader} while the change is under way")
                undo = lambda: c.nodes[leader].start()  # noqa: E731
            elif kind == "replace+partition":
                await asyncio.sleep(self.rng.uniform(0, 0.3))
                ids = self.targets.shuffled()
                groups = [ids[:len(ids) // 2], ids[len(ids) // 2:] + [new]]
                c.net.partition(groups, s.mode)
                self.course.log(f"{kind} ({s.mode}): {' | '.join(','.join(g) for g in groups)} "
                                "while the change is under way")
                undo = c.net.heal
            try:
                at = (await add).index
            except ClientError as exc:
                self.course.log(f"{kind}: adding {new}: {exc}")
            if undo is not None:
                await asyncio.sleep(hold)
                undo()
            # A change cut from the log by a new leader (the old one was cut off before it
            # committed) did not take: the spare is no member, and nothing waits for it.
            c.monitor.set_members(sorted(set(c.ids) | {new}), len(c.ids))
            await c.monitor.sample()  # (a sample from before the change would not show it)
            if not await self.course.wait(lambda m: m.leader is not None and (m.last[m.leader] or {}).get(
                    "config_index", -1) >= at, c.heal_bound, f"no leader showing config entry {at} within "
                                                             f"{c.heal_bound:g} s after adding {new}"):
                return
            md = c.monitor.last[c.monitor.leader] or {}
            if new not in md.get("voters", []) + md.get("learners", []):
                self.course.log(f"{kind}: {new} is no member (the change did not take); {victim} stays")
                self.course.counts["replace undone"] += 1
                return
            # once it is a voter (the leader promotes it when caught up), the victim goes
            promoted = await self.course.wait(lambda m: m.leader is not None and new in (m.last[m.leader] or {}).get(
                "voters", []), c.catch_up_bound, f"{new} was not made a voter within {c.catch_up_bound:g} s")
            if promoted:
                for _ in range(3):
                    try:
                        at = (await admin.change_members("remove", victim)).index
                        self.course.log(f"{kind}: {victim} removed")
                        break
                    except ClientError as exc:
                        self.course.log(f"{kind}: removing {victim}: {exc}")
                        if "not a member" in str(exc):
                            break
                        await asyncio.sleep(1.0)
        finally:
            await admin.close()
            await self._sync_members(at)

    async def _sync_members(self, at: int, final: bool = False) -> None:
        """Take the group's members from its leader, once it shows config entry ``at`` or a
        later one: nodes no longer members are stopped for good. When the run's time ends
        first, the change is remembered (``unsynced``) and synced after the final heal
        (``final``): the checks must judge the members the group has, not those before it."""
        c = self.c
        members_now = set(c.ids) | set(c.nodes)
        c.monitor.set_members(sorted(members_now), len(c.ids))  # (the new node too: it may lead by now)
        await c.monitor.sample()
        shows = lambda m: m.leader is not None and (m.last[m.leader] or {}).get("config_index", -1) >= at  # noqa: E731
        problem = f"no leader showing config entry {at} within {c.heal_bound:g} s after a change"
        if final:
            synced = await c.monitor.wait(shows, c.heal_bound)
            if not synced:
                self.course.problems.append(problem)
        else:
            synced = await self.course.wait(shows, c.heal_bound, problem)
        if not synced:
            # (the new node stays watched: it may lead the group that keeps the change, and a
            # monitor of the members from before it would see no leader at all)
            self.unsynced = None if final else at
            c.monitor.set_members(sorted(members_now), len(c.ids))
            return
        self.unsynced = None
        md = c.monitor.last[c.monitor.leader]
        members = list(md.get("voters", [])) + list(md.get("learners", []))
        gone = c.set_members(members, len(md.get("voters", [])))
        self.course.log(f"members now: voters {','.join(md.get('voters', []))}"
                        + (f"; learners {','.join(md['learners'])}" if md.get("learners") else "")
                        + (f"; stopped for good: {', '.join(gone)}" if gone else ""))
        await c.monitor.sample()

    async def sync_after_heal(self) -> None:
        """The members of a change the run's time ended before syncing (``unsynced``), now."""
        if self.unsynced is not None:
            await self._sync_members(self.unsynced, final=True)
