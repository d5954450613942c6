#!/usr/bin/env python3
"""What the Prometheus endpoint costs appends: the same run, alternating rounds, metrics on and off.

Two 3-node clusters (flush=async) are up at once, driven one at a time by the same load
generator as bench_cluster.py:

- ``metrics``: every node with ``--metrics-address``, and every node scraped every
  ``--scrape-interval`` seconds (default 1 s; Prometheus's default is 15 s) while the load runs;
- ``no metrics``: no endpoint (the counting on the hot path is there in both: it is not an option).

Each round runs both clusters with 64 clients of one 1 KiB entry per request, then with
16 clients of 64-entry batches. Rounds alternate (and which cluster goes first), so a slow
minute of this shared machine falls on both alike; the median round per cluster is compared. Target (issue 7/7): no
measurable cost, i.e. a ratio within the spread of the rounds.

Usage: python benchmarks/bench_metrics.py [--seconds 5] [--rounds 4] [--scrape-interval 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from bench_cluster import drive, free_ports, log  # noqa: E402
from cluster.node import runtime  # noqa: E402
from cluster.net.client import Client  # noqa: E402
from cluster.raft.config import parse_peers  # noqa: E402
from cluster.node.launcher import down, up  # noqa: E402

SHAPES = {"64x1": (64, 1), "16x64": (16, 64)}


class Scraper:
    """Scrapes every URL every ``interval`` seconds in a thread while on; keeps how long each took."""

    def __init__(self, urls: list[str], interval: float) -> None:
        self.urls, self.interval = urls, interval
        self.took: list[float] = []
        self.failed = 0
        self.on = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            if self.on.wait(0.1):
                for u in self.urls:
                    t = time.perf_counter()
                    try:
                        with urllib.request.urlopen(u, timeout=10) as resp:
                            resp.read()
                        self.took.append(time.perf_counter() - t)
                    except OSError:
                        self.failed += 1
                self.stopping.wait(self.interval)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(15)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--scrape-interval", type=float, default=1.0)
    args = ap.parse_args()
    body = b"v" * 1024
    results: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_metrics.") as tmp:
        clusters, scraper = {}, None
        try:
            for name in ("metrics", "no metrics"):
                base = os.path.join(tmp, name.replace(" ", "-"))
                mports = free_ports(3) if name == "metrics" else None
                rec, _ = up(base, 3, free_ports(3), "bench", "async", ["--data-file-size", "256MiB"],
                            metrics_port_base=mports)
                clusters[name] = rec
                if mports is not None:
                    scraper = Scraper([f"http://127.0.0.1:{mports + i}/metrics" for i in range(3)],
                                      args.scrape_interval)

            async def run():
                clients = {}
                for name, rec in clusters.items():
                    c = Client(parse_peers(rec["peers"]), "bench", timeout=30)
                    await c.find_leader(asyncio.get_running_loop().time() + 30)
                    await c.append([b"warm up"])
                    clients[name] = c
                for rnd in range(args.rounds):
                    for shape, (n, batch) in SHAPES.items():
                        order = list(clients.items())
                        for name, c in (order if rnd % 2 == 0 else order[::-1]):  # (who goes first alternates too)
                            async def make_call(c=c):
                                async def call(k):
                                    await c.append([body] * k)
                                return call
                            if name == "metrics":
                                scraper.on.set()
                            r = await drive(make_call, n, batch, args.seconds)
                            scraper.on.clear()
                            results.setdefault((name, shape), []).append(r["entries_per_s"])
                            log(f"  round {rnd + 1}: {shape} {name}: {r['entries_per_s']:,.0f} entries/s")
                for c in clients.values():
                    await c.close()

            runtime.run(run)
        finally:
            if scraper is not None:
                scraper.close()
            for rec in clusters.values():
                down(rec["base_dir"])
    print(f"1 KiB entries, {args.rounds} alternating rounds of {args.seconds:g} s; the metrics cluster scraped every "
          f"{args.scrape_interval:g} s per node while loaded ({len(scraper.took)} scrapes, {scraper.failed} failed, "
          f"median {statistics.median(scraper.took) * 1000:.1f} ms, max {max(scraper.took) * 1000:.1f} ms)")
    for shape in SHAPES:
        on, off = results[("metrics", shape)], results[("no metrics", shape)]
        spread = (max(off) - min(off)) / statistics.median(off)
        print(f"{shape:<6} metrics   median {statistics.median(on):>9,.0f}  runs: "
              + "  ".join(f"{x:,.0f}" for x in on))
        print(f"{shape:<6} no metrics median {statistics.median(off):>8,.0f}  runs: "
              + "  ".join(f"{x:,.0f}" for x in off))
        print(f"{shape:<6} metrics / no metrics: {statistics.median(on) / statistics.median(off):.3f} "
              f"(the no-metrics rounds spread {spread:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
