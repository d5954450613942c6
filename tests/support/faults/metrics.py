"""The nodes' Prometheus endpoints while a run goes: :class:`MetricsWatch`."""

from __future__ import annotations

import asyncio
import collections
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


class MetricsWatch:
    """Scrapes every running node's Prometheus endpoint every ``period`` seconds while a run
    goes: the endpoint must never stop a node, nor say what cannot be. Per scrape: exactly one
    role, committed index <= end index, begin index <= end index + 1; per process (its start
    time), counters never go down. Each node started must answer at least one whole scrape."""

    COUNTERS = ("dledger_appended_entries_total", "dledger_leader_changes_total", "dledger_received_entries_total",
                "dledger_append_latency_seconds_count", "dledger_flush_latency_seconds_count")

    def __init__(self, nodes: dict, period: float = 1.0) -> None:
        self.nodes, self.period = nodes, period
        self.problems: list[str] = []
        self.scrapes = collections.Counter()  # whole scrapes, per node
        self.unanswered = 0  # a node paused, killed or starting, or a loop too busy to answer in time
        self.last: dict[tuple[str, float], dict[str, float]] = {}
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        while not self.stopping.is_set():
            for i, n in list(self.nodes.items()):
                await self._scrape(i, n)
            try:
                await asyncio.wait_for(self.stopping.wait(), self.period)
            except asyncio.TimeoutError:
                pass

    async def _scrape(self, i: str, n) -> None:
        if n.state == "up" and n.metrics:
            try:
                text = await asyncio.to_thread(_fetch, n.metrics)
            except (OSError, ValueError):
                self.unanswered += 1
                return
            self._check(i, text)

    async def last_pass(self, bound: float = 10.0) -> None:
        """Once the run is over: scrape each running node no scrape reached yet (a spare
        started less than a period before the end), until it answers or ``bound`` s pass."""
        loop = asyncio.get_running_loop()
        end = loop.time() + bound
        while loop.time() < end:
            left = [(i, n) for i, n in list(self.nodes.items()) if not self.scrapes[i] and n.state == "up"]
            if not left:
                return
            for i, n in left:
                await self._scrape(i, n)
            await asyncio.sleep(0.2)

    def _check(self, node: str, text: str) -> None:
        values: dict[str, float] = {}
        roles = 0
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == "dledger_role":
                    roles += s.value == 1
                elif not s.labels.keys() - {"group", "node"}:
                    values[s.name] = s.value
        if "dledger_term" not in values:  # (only the process metrics: the loop did not answer in time)
            self.unanswered += 1
            return
        self.scrapes[node] += 1
        bad = []
        if roles != 1:
            bad.append(f"{roles} roles at once")
        if values["dledger_committed_index"] > values["dledger_end_index"]:
            bad.append(f"committed {values['dledger_committed_index']:.0f} > end {values['dledger_end_index']:.0f}")
        if values["dledger_begin_index"] > values["dledger_end_index"] + 1:
            bad.append(f"begin {values['dledger_begin_index']:.0f} > end + 1")
        key = (node, values.get("process_start_time_seconds", 0.0))
        before = self.last.get(key)
        if before is not None:
            bad += [f"{c} went down from {before[c]:.0f} to {values[c]:.0f}" for c in self.COUNTERS
                    if values.get(c, 0) < before.get(c, 0)]
        self.last[key] = values
        self.problems += [f"metrics of {node}: {b}" for b in bad]

    def missing(self, started: list[str]) -> list[str]:
        return [f"metrics of {i}: no whole scrape answered in the whole run" for i in started if not self.scrapes[i]]


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=3) as resp:
        return resp.read().decode()
