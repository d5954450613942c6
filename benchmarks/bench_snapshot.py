#!/usr/bin/env python3
"""What state-machine snapshots cost appends: 64 clients, the same run, alternating rounds.

Three 3-node clusters (flush=async) are up at once, driven one at a time by the same load
generator as bench_cluster.py (64 clients, one 1 KiB entry per request, bodies
``k<i mod KEYS>=<value>`` so the built-in kv machine holds ``KEYS`` keys):

- ``snapshots``: ``--state-machine kv --snapshot-threshold T`` (default 5000: at 50k
  appends/s a snapshot of the whole table every 0.1 s, serialised and written in a thread),
  each followed by deleting the 64 MiB data files it covers;
- ``no snapshots``: the same machine with a threshold no run reaches (it applies, never
  snapshots);
- ``no state machine``: for what applying itself costs.

Rounds alternate the three, so a slow minute of this shared machine falls on all alike;
the median round per cluster is compared. Target (issue 5/7): snapshots cost less than 10%
of appends/s against no snapshots.

Usage: python benchmarks/bench_snapshot.py [--seconds 5] [--rounds 4] [--threshold 5000] [--keys 1000]
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threshold", type=int, default=5000)
    ap.add_argument("--keys", type=int, default=1000)
    args = ap.parse_args()
    value = "v" * 1000
    configs = {
        "snapshots": ["--state-machine", "kv", "--snapshot-threshold", str(args.threshold)],
        "no snapshots": ["--state-machine", "kv", "--snapshot-threshold", str(1 << 30)],
        "no state machine": [],
    }
    results: dict[str, list[float]] = {k: [] for k in configs}
    snapshots_taken = {}
    with tempfile.TemporaryDirectory(prefix="bench_snapshot.") as tmp:
        clusters = {}
        try:
            for name, extra in configs.items():
                base = os.path.join(tmp, name.replace(" ", "-"))
                rec, _ = up(base, 3, free_ports(3), "bench", "async", ["--data-file-size", "64MiB", *extra])
                clusters[name] = (base, rec)

            async def run():
                clients = {}
                for name, (_base, rec) in clusters.items():
                    c = Client(parse_peers(rec["peers"]), "bench", timeout=30)
                    await c.find_leader(asyncio.get_running_loop().time() + 30)
                    await c.append([b"warm=up"])
                    clients[name] = c
                counter = iter(range(1 << 62))
                for rnd in range(args.rounds):
                    for name, c in clients.items():
                        async def make_call(c=c):
                            async def call(batch):
                                k = next(counter)
                                await c.append([f"k{k % args.keys}={value}".encode()])
                            return call
                        r = await drive(make_call, 64, 1, args.seconds)
                        results[name].append(r["entries_per_s"])
                        log(f"  round {rnd + 1}: {name}: {r['entries_per_s']:,.0f} appends/s")
                for c in clients.values():
                    await c.close()

            runtime.run(run)
            for name, (base, _rec) in clusters.items():
                with open(os.path.join(base, "logs", "n0.log"), errors="replace") as fh:
                    lines = fh.readlines()
                snapshots_taken[name] = (sum("snapshot saved" in line for line in lines),
                                         sum(int(line.split(": deleted ")[1].split()[0]) for line in lines
                                             if "(covered by it)" in line))
        finally:
            for base, _rec in clusters.values():
                down(base)
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"64 clients, 1 KiB kv entries over {args.keys} keys, {args.rounds} alternating rounds of {args.seconds:g} s")
    for name in configs:
        runs = "  ".join(f"{x:,.0f}" for x in results[name])
        print(f"{name:<18} median {med[name]:>9,.0f} appends/s   runs: {runs}"
              + ("   (n0 saved {} snapshots, deleted {} data files after them)".format(*snapshots_taken[name])
                 if name != "no state machine" else ""))
    print(f"snapshots / no snapshots: {med['snapshots'] / med['no snapshots']:.3f} (target >= 0.90)")
    print(f"no snapshots / no state machine: {med['no snapshots'] / med['no state machine']:.3f} (what applying costs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
