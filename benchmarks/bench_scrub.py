#!/usr/bin/env python3
"""What the background scrub costs appends: the same run, alternating rounds, scrub on and off.

Two 3-node clusters (flush=async) are up at once, driven one at a time by the same load
generator as bench_cluster.py:

- ``scrub``: every node at the default ``--scrub-rate`` (4MiB/s), or ``--rate``;
- ``no scrub``: ``--scrub-rate 0``.

Each round runs both clusters with 64 clients of one 1 KiB entry per request, then with
16 clients of 64-entry batches. Rounds alternate (and which cluster goes first), so a slow
minute of this shared machine falls on both alike; the median round per cluster is
compared. Target (issue 5/6): scrub / no scrub at least 0.95. It also prints how many bytes
the scrubbing members checked, from their METADATA, so a scrub that did nothing cannot pass.

Usage: python benchmarks/bench_scrub.py [--seconds 5] [--rounds 4] [--rate 4MiB]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from bench_cluster import drive, free_ports, log  # noqa: E402
from cluster.node import runtime  # noqa: E402
from cluster.net.client import Client  # noqa: E402
from cluster.raft.config import parse_peers  # noqa: E402
from cluster.node.launcher import down, up  # noqa: E402

SHAPES = {"64x1": (64, 1), "16x64": (16, 64)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--rate", default=None, help="the scrubbing cluster's --scrub-rate (default: the nodes' own)")
    args = ap.parse_args()
    body = b"v" * 1024
    results: dict[tuple[str, str], list[float]] = {}
    checked: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench_scrub.") as tmp:
        clusters = {}
        try:
            for name, extra in (("scrub", [] if args.rate is None else ["--scrub-rate", args.rate]),
                                ("no scrub", ["--scrub-rate", "0"])):
                base = os.path.join(tmp, name.replace(" ", "-"))
                rec, _ = up(base, 3, free_ports(3), "bench", "async", ["--data-file-size", "256MiB", *extra])
                clusters[name] = rec

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
                        for name, c in (order if rnd % 2 == 0 else order[::-1]):
                            async def make_call(c=c):
                                async def call(k):
                                    await c.append([body] * k)
                                return call
                            r = await drive(make_call, n, batch, args.seconds)
                            results.setdefault((name, shape), []).append(r["entries_per_s"])
                            log(f"  round {rnd + 1}: {shape} {name}: {r['entries_per_s']:,.0f} entries/s")
                c = clients["scrub"]
                for p in parse_peers(clusters["scrub"]["peers"]):
                    md = await c.metadata(p, 5)
                    checked[p] = (md.scrub or {}).get("position", -1), (md.scrub or {}).get("passes", 0)
                for c in clients.values():
                    await c.close()

            runtime.run(run)
        finally:
            for rec in clusters.values():
                down(rec["base_dir"])
    print(f"1 KiB entries, {args.rounds} alternating rounds of {args.seconds:g} s; scrub rate "
          f"{args.rate or 'default (4MiB/s)'}; scrubbing members at the end (entry, passes done): "
          + ", ".join(f"{p} {pos}/{n}" for p, (pos, n) in sorted(checked.items())))
    for shape in SHAPES:
        on, off = results[("scrub", shape)], results[("no scrub", shape)]
        spread = (max(off) - min(off)) / statistics.median(off)
        print(f"{shape:<6} scrub    median {statistics.median(on):>9,.0f}  runs: " + "  ".join(f"{x:,.0f}" for x in on))
        print(f"{shape:<6} no scrub median {statistics.median(off):>9,.0f}  runs: " + "  ".join(f"{x:,.0f}" for x in off))
        print(f"{shape:<6} scrub / no scrub: {statistics.median(on) / statistics.median(off):.3f} "
              f"(the no-scrub rounds spread {spread:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
