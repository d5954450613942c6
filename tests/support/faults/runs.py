"""One seeded run, start to check: :func:`run` (and :func:`run_seed`, in a fresh event loop)
puts the parts together and returns its :class:`Result`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from dataclasses import dataclass

from tests.support import linearizability
from tests.support.faults.checks import _entry_counts, check
from tests.support.faults.clients import Appender
from tests.support.faults.metrics import MetricsWatch
from tests.support.faults.nemesis import Nemesis
from tests.support.faults.network import GROUP
from tests.support.faults.processes import Cluster
from tests.support.faults.schedule import SPARES, make_schedule
from tests.support.kvclients import KvClients


@dataclass
class Result:
    seed: int
    profile: str
    nodes: int
    seconds: float
    counts: dict
    entries: dict
    faults: dict
    max_leaderless: float
    max_unavailable: float  # longest time without an acknowledged append while faults ran
    slowest_heal: float
    heals: int
    problems: list[str]
    workdir: str
    elapsed: float = 0.0
    replay: str = ""
    kv: dict | None = None  # with readers: the key-value history's counts and the checker's verdict

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        c, e = self.counts, self.entries
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        lines = [
            f"seed {self.seed}, {self.profile}, {self.nodes} nodes, {self.seconds:g} s of faults: "
            f"{'PASS' if self.ok else 'FAIL'} ({self.elapsed:.0f} s in all)",
            f"  appends: {c['ok']} ok, {c['failed']} failed, {c['unknown']} unknown "
            f"(entries: {e['ok']} ok, {e['failed']} failed, {e['unknown']} unknown, {e['unknown_committed']} of the "
            f"unknown committed)",
            f"  faults injected: {sum(self.faults.values())} ({faults})",
            f"  max time without a leader: {self.max_leaderless:.1f} s; slowest leader after a heal: "
            f"{self.slowest_heal:.1f} s over {self.heals} heals; longest time without an acknowledged append: "
            f"{self.max_unavailable:.1f} s",
        ]
        if self.kv is not None:
            k = self.kv
            lines.append(f"  key-value history: {k['puts']} puts, {k['puts_unknown']} of unknown outcome, {k['gets']} "
                         f"{k['consistency']} gets ({k['unanswered']} unanswered); "
                         f"{'linearizable' if k['linearizable'] else 'NOT linearizable (key ' + k['bad_key'] + ')'}")
        for p in self.problems[:20]:
            lines.append(f"  PROBLEM: {p}")
        if len(self.problems) > 20:
            lines.append(f"  ... and {len(self.problems) - 20} more problems")
        lines.append(f"  replay: {self.replay}")
        return "\n".join(lines)


def replay_command(seed: int, profile: str, nodes: int, seconds: float, flush: str | None = None,
                   tls: bool = False, readers: int = 0) -> str:
    return (f"python benchmarks/fault_runs.py --nodes {nodes} --profile {profile} --seconds {seconds:g} "
            f"--seed {seed}" + (f" --flush {flush}" if flush else "") + (" --tls" if tls else "")
            + (f" --readers {readers}" if readers else ""))


async def run(seed: int, profile: str, seconds: float, workdir: str, *, nodes: int = 3, clients: int = 4,
              flush: str | None = None, heal_bound: float = 15.0, verbose: bool = False, tls: bool = False,
              readers: int = 0, consistency: str = "linearizable") -> Result:
    """One seeded run: start ``nodes`` nodes, append from ``clients`` clients while the
    profile's faults run for ``seconds``, heal, converge, stop, check. With ``readers``, the
    nodes run the kv state machine and that many more clients put and get keys
    (tests/support/kvclients.py, gets of ``consistency``): their history must be linearizable."""
    t0 = time.monotonic()
    flush = flush or ("sync" if profile == "mixed" and seed % 2 else "async")
    events: list[str] = []

    def log(text: str) -> None:
        line = f"{time.monotonic() - t0:7.2f}  {text}"
        events.append(line)
        if verbose:
            print(line, flush=True)

    os.makedirs(workdir, exist_ok=True)
    # (kv with snapshots that never come: the checks read every acknowledged entry back from the logs)
    extra = ["--state-machine", "kv", "--snapshot-threshold", str(1 << 30)] if readers else None
    cluster = Cluster(workdir, nodes, seed, flush, extra=extra, heal_bound=heal_bound, tls=tls,
                      spares=SPARES.get(profile, 0))
    steps = make_schedule(seed, profile, seconds)
    appender = Appender(cluster.direct, clients, seed, f"s{seed}", timeout=3.0, tls=cluster.tls)
    nemesis = Nemesis(cluster, steps, seed, log, appender)  # (rot-tail records its probes with the appends)
    kv = KvClients(cluster.direct, readers, seed, GROUP, consistency=consistency, tls=cluster.tls) if readers else None
    problems: list[str] = []
    stopped, unknown_committed = False, 0
    kv_load, kv_summary = None, None
    load_from = load_to = 0.0
    watch = MetricsWatch(cluster.nodes)
    watching = None
    try:
        await cluster.start()
        watching = asyncio.ensure_future(watch.run())
        log(f"{nodes} nodes (flush={flush}) on ports {', '.join(map(str, cluster.ports.values()))}")
        first = await cluster.time_to_leader(60)
        if first is None:
            problems.append("no leader within 60 s of the start")
        else:
            log(f"leader {cluster.monitor.leader} after {first:.1f} s")
            cluster.monitor.restart_clock()
            load = asyncio.ensure_future(appender.run())
            kv_load = asyncio.ensure_future(kv.run()) if kv is not None else None
            load_from = asyncio.get_running_loop().time()
            await nemesis.run(seconds)
            load_to = asyncio.get_running_loop().time()
            log("healing: every link passes, paused nodes resume, killed nodes restart")
            problems += cluster.heal_all()
            await nemesis.sync_after_heal()  # (a change that went through as the run ended)
            took = await cluster.time_to_leader(heal_bound)
            if took is None:
                problems.append(f"no leader within {heal_bound:g} s after the final heal")
            else:
                nemesis.heal_waits.append(took)
                log(f"leader {cluster.monitor.leader} {took:.1f} s after the final heal")
            appender.stopping.set()
            try:
                await asyncio.wait_for(load, 30)
            except asyncio.TimeoutError:
                problems.append("append clients did not finish within 30 s of being stopped")
            if kv_load is not None:
                kv.stopping.set()
                try:
                    await asyncio.wait_for(kv_load, 30)
                except asyncio.TimeoutError:
                    problems.append("key-value clients did not finish within 30 s of being stopped")
            if not await cluster.converge(60):
                problems.append("nodes did not converge within 60 s: "
                                + "; ".join(f"{p}: " + (f"{m['role']} term {m['term']} end {m['end_index']} committed "
                                                        f"{m['committed_index']}" if m else "no answer")
                                            for p, m in cluster.monitor.last.items()))
            else:
                log(f"converged at index {cluster.monitor.last[cluster.monitor.leader]['end_index']}")
        watch.stopping.set()
        await watching
        await watch.last_pass()
        problems += watch.problems + watch.missing(list(cluster.nodes))
        log(f"metrics: {sum(watch.scrapes.values())} whole scrapes, {watch.unanswered} unanswered")
        problems += await cluster.stop()
        stopped = True
        problems += cluster.tracebacks()
        problems += nemesis.problems
        found, unknown_committed = check({i: n.dir for i, n in cluster.nodes.items()}, appender.requests,
                                         others=kv.sent if kv else frozenset(),
                                         refused=kv.refused_bodies if kv else frozenset())
        problems += found
        if kv is not None:
            verdict = linearizability.check(kv.history)
            kv_summary = {**kv.counts(), "consistency": consistency, "linearizable": verdict.ok,
                          "bad_key": verdict.bad_key}
            if not verdict.ok:
                problems.append(f"the key-value history ({verdict.ops} operations) is not linearizable: key "
                                f"{verdict.bad_key}")
    finally:
        watch.stopping.set()
        if watching is not None and not watching.done():
            watching.cancel()
        if not stopped:
            cluster.kill_all()
            await cluster.net.close()
    entries = _entry_counts(appender.requests, unknown_committed)
    acked = [load_from] + sorted(r.end for r in appender.requests if r.outcome == "ok" and r.end <= load_to) + [load_to]
    unavailable = max((b - a for a, b in zip(acked, acked[1:])), default=0.0)
    result = Result(seed, profile, nodes, seconds, appender.counts(), entries, dict(nemesis.counts),
                    cluster.monitor.max_leaderless, unavailable, max(nemesis.heal_waits, default=0.0),
                    len(nemesis.heal_waits),
                    problems, workdir, time.monotonic() - t0,
                    replay_command(seed, profile, nodes, seconds, flush, tls, readers), kv_summary)
    with open(os.path.join(workdir, "events.log"), "w") as fh:
        fh.write("\n".join(events) + "\n")
    if problems:
        with open(os.path.join(workdir, "problems.log"), "w") as fh:
            fh.write("\n".join(problems) + "\n\n")
            for n in cluster.nodes.values():
                fh.write(f"--- {n.id} log tail\n{n.log_tail(40)}\n")
    return result


def run_seed(seed: int, profile: str, seconds: float, workdir: str, *, keep: bool = False, **kw) -> Result:
    """``run`` in a fresh event loop; the work directory is removed when the run passes
    (unless ``keep``)."""
    result = asyncio.run(run(seed, profile, seconds, workdir, **kw))
    if result.ok and not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return result
