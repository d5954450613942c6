"""Faults on the disk, each within the failure model (a majority always holds every
committed entry sound): a torn tail after a crash mid-write, bytes flipped in committed
entries (the member's scrub must repair them from a replica), and bytes flipped in entries
no one committed yet (the leader's, while its followers are paused; a follower's last one).
"""

from __future__ import annotations

import asyncio

from cluster.net.client import Client
from tests.support.faults.clients import Appender, Request
from tests.support.faults.course import Course, Targets
from tests.support.faults.damage import flip_committed, flip_tail, tear
from tests.support.faults.network import GROUP
from tests.support.faults.processes import Cluster
from tests.support.faults.schedule import Step


class DiskFaults:
    """The disk faults of a run; ``appender``'s requests get the rot-tail probes (each of
    unknown outcome), numbered by ``probes``."""

    def __init__(self, cluster: Cluster, targets: Targets, course: Course, appender: Appender | None) -> None:
        self.c, self.targets, self.course = cluster, targets, course
        self.rng = targets.rng
        self.appender = appender
        self.probes = 0

    async def torn_write(self, s: Step, hold: float) -> None:
        """Tear the tail of a node's log, within the failure model: the node is paused (it
        acknowledges nothing more), then every other node must hold everything a leader
        other than it has (so whatever its acknowledgements helped commit survives on all
        the others); then it is killed, torn and restarted, and the next fault waits until
        it has caught up again."""
        c, m = self.c, self.c.monitor
        v = self.targets.leader_or_any(s.pick) if s.pick < 0.4 else self.targets.follower(s.pick)
        others = [i for i in c.ids if i != v]
        c.nodes[v].pause()
        self.course.log(f"torn-write: SIGSTOP {v} until the others hold all a leader has")
        if not await self.course.wait(lambda m: m.leader not in (None, v), c.heal_bound,
                                      f"no leader besides {v} within {c.heal_bound:g} s of pausing it"):
            c.nodes[v].resume()
            self.course.counts["torn-write skipped"] += 1
            return
        end = m.last[m.leader]["end_index"]
        if not await self.course.wait(lambda m: all((m.last[i] or {}).get("committed_index", -2) >= end
                                                    for i in others),
                                      c.catch_up_bound,
                                      f"{', '.join(others)} did not commit up to {end} within {c.catch_up_bound:g} s"):
            c.nodes[v].resume()
            self.course.counts["torn-write skipped"] += 1
            return
        c.nodes[v].kill()  # still stopped: it sends nothing more
        what = tear(c.nodes[v].dir, self.rng)
        self.course.log(f"torn-write: kill -9 {v}, {what}")
        await asyncio.sleep(min(hold, 1.5))
        c.nodes[v].start()
        await self.course.wait(lambda m: all(m.last.values()), c.heal_bound,
                               f"{v} did not answer {c.heal_bound:g} s after its restart")
        target = max((x["committed_index"] for x in m.last.values() if x), default=-1)
        await self.course.wait(lambda m: (m.last.get(v) or {}).get("committed_index", -2) >= target,
                               c.catch_up_bound,
                               f"{v} did not catch up to {target} within {c.catch_up_bound:g} s after a torn write")

    async def bitrot(self, s: Step) -> None:
        """Flip a byte in one to three committed entries of one running member (a body byte, a
        header byte or its index record), within the failure model: one member at a time,
        and the next fault waits until that member's scrub has repaired them, so a majority
        always holds every entry sound. A problem when the scrub does not within the bound."""
        c, m = self.c, self.c.monitor
        v = self.targets.leader_or_any(s.pick) if s.pick < 0.4 else self.targets.follower(s.pick)
        md = m.last.get(v) or {}
        scrub = md.get("scrub")
        if c.nodes[v].state != "up" or not scrub or md.get("committed_index", -1) <= max(0, md["begin_index"]):
            self.course.counts["bitrot skipped"] += 1
            return
        lo, hi = max(0, md["begin_index"]), md["committed_index"]
        hit = sorted({self.rng.randint(lo, hi) for _ in range(self.rng.randint(1, 3))})
        said = [flip_committed(c.nodes[v].dir, i, self.rng) for i in hit]
        self.course.log(f"bitrot: {v}: {'; '.join(said)}")
        passes = scrub["passes"]

        def repaired(m) -> bool:
            now = (m.last.get(v) or {}).get("scrub")
            return bool(now) and now["passes"] >= passes + 2 and not now["damaged"]
        if not await m.wait(repaired, c.catch_up_bound + 30):
            self.course.problems.append(f"{v}'s scrub did not repair entries {hit} within {c.catch_up_bound + 30:g} s")

    async def rot_tail(self, s: Step, hold: float) -> None:
        """Damage an entry no one committed: every follower is paused, so what the leader takes
        meanwhile waits for a quorum; then a body byte of the leader's last entry is flipped in
        its files, and the followers come back one at a time (the first alone cannot win
        without the old leader's vote, whose log is longer: so it leads again with the damage).
        Nothing damaged was acknowledged: the run's checks say nothing acknowledged was lost,
        and the longest time without an acknowledged append says whether the group stalled."""
        c, m = self.c, self.c.monitor
        leader = m.leader
        followers = [i for i in c.ids if i != leader and c.nodes[i].state == "up"]
        if leader is None or c.nodes[leader].state != "up" or not followers:
            self.course.counts["rot-tail skipped"] += 1
            return
        for f in followers:
            c.nodes[f].pause()
        # An entry only the leader holds: a probe appended to it alone (the clients' appends in
        # flight may have reached the followers before they stopped), recorded as a request
        # whose outcome is unknown. Then the leader steps down, having heard from no quorum, so
        # it no longer serves its latest writes from memory and meets the damage on disk.
        probe = await self._probe(leader)
        await asyncio.sleep(max(2.5, min(hold, 4.0)))
        committed = max((x or {}).get("committed_index", -1) for x in m.last.values())
        scrub = (m.last.get(leader) or {}).get("scrub")
        said = flip_tail(c.nodes[leader].dir, committed, self.rng, body=probe)
        self.course.log(f"rot-tail: SIGSTOP {', '.join(followers)}; {leader}: {said}")
        for k, f in enumerate(self.targets.shuffled()):
            if f in followers:
                c.nodes[f].resume()
                if k < len(followers) - 1:
                    await asyncio.sleep(min(1.0, max(0.2, hold / 2)))
        if not scrub:
            return
        # The probe's push may have reached the followers before they stopped (seen: seed 7): then
        # the damaged entry is the old leader's copy of one they hold sound, committed once a leader
        # of the next term commits past it, and, as for bitrot, its scrub must repair it before the
        # next fault (or the run's end) judges the copies. Cut instead, it leaves no damage to find.
        passes = scrub["passes"]

        def clean(m) -> bool:
            now = (m.last.get(leader) or {}).get("scrub")
            return c.nodes[leader].state != "up" or (bool(now) and now["passes"] >= passes + 2 and not now["damaged"])
        if not await m.wait(clean, c.catch_up_bound + 30):
            self.course.problems.append(f"{leader}'s scrub did not pass twice without damage within "
                                        f"{c.catch_up_bound + 30:g} s after its tail was damaged")

    async def _probe(self, leader: str) -> bytes | None:
        """Append one body to ``leader`` alone, waiting at most a second for an answer (none
        comes without a quorum); the body, recorded as a request of unknown outcome."""
        if self.appender is None:
            return None
        loop = asyncio.get_running_loop()
        self.probes += 1
        body = b"%s:c99:r%d:e0:rot-tail probe" % (self.appender.tag, self.probes)
        req = Request(99, self.probes, [body], loop.time(), outcome="unknown")
        self.appender.requests.append(req)
        client = Client({leader: self.c.direct[leader]}, GROUP, timeout=1.0, tls=self.c.tls)
        try:
            await client.append([body], resend_unknown=False)
            req.outcome = "ok"  # (a quorum after all: then the entry is committed, and it stays sound)
        except Exception as exc:  # noqa: BLE001 - no quorum: its outcome stays unknown
            req.error = f"{type(exc).__name__}: {exc}"
        finally:
            req.end = loop.time()
            await client.close()
        return body

    async def rot_follower_tail(self, s: Step, hold: float) -> None:
        """Damage a follower's last entry, past the commit index it knows (a follower learns
        commits a push later), while it is paused; then it resumes, or is killed and started
        again (its recovery cuts a damaged tail nothing says was committed). It may have
        acknowledged that entry already: then it is one member's damaged copy of a committed
        entry, and, as for bitrot, the next fault waits until its scrub has repaired it."""
        c, m = self.c, self.c.monitor
        v = self.targets.follower(s.pick)
        scrub = (m.last.get(v) or {}).get("scrub")
        if c.nodes[v].state != "up" or v == m.leader or not scrub:
            self.course.counts["rot-follower-tail skipped"] += 1
            return
        c.nodes[v].pause()
        known = (m.last.get(v) or {}).get("committed_index", -1)
        said = flip_tail(c.nodes[v].dir, known, self.rng)
        restart = s.pick < 0.5
        self.course.log(f"rot-follower-tail: SIGSTOP {v}; {said}" + ("; kill -9 and start" if restart else ""))
        await asyncio.sleep(min(hold, 1.0))
        if restart:
            c.nodes[v].kill()
            c.nodes[v].start()
        else:
            c.nodes[v].resume()
        passes = 0 if restart else scrub["passes"]

        def repaired(m) -> bool:
            now = (m.last.get(v) or {}).get("scrub")
            return bool(now) and now["passes"] >= passes + 2 and not now["damaged"]
        if not await m.wait(repaired, c.catch_up_bound + 30):
            self.course.problems.append(f"{v}'s scrub did not pass twice without damage within "
                                        f"{c.catch_up_bound + 30:g} s after its tail was damaged")
