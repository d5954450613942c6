#!/usr/bin/env python3
"""How fast ``get`` dumps a range of a live log, against reading the same range offline from
a member's files: ``dledgerctl get -i 0 -c N --format jsonl`` against ``dledgerctl store
inspect-data DIR --from-index 0 --to-index N-1 --format jsonl --body utf8`` (the same rows), side
by side in one run, in alternating rounds; the median round counts. Output goes to
/dev/null; the times include each command's start.

One 3-node cluster (flush=async), N entries of 1 KiB appended first in batches.
Target (issue 7/7): get >= 0.8x inspect-data, and >= 150,000 entries/s.

Usage: python benchmarks/bench_get.py [--entries 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from bench_cluster import free_ports, log  # noqa: E402
from cluster.net.client import Client  # noqa: E402
from cluster.node import runtime  # noqa: E402
from cluster.node.launcher import down, up  # noqa: E402
from cluster.raft.config import parse_peers  # noqa: E402

CLI = [sys.executable, "-m", "dledgerctl"]


def timed(args: list[str]) -> float:
    t = time.perf_counter()
    with open(os.devnull, "wb") as null:
        r = subprocess.run(CLI + args, stdout=null, stderr=subprocess.PIPE, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: {r.stderr.decode().strip()}")
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = args.entries
    with tempfile.TemporaryDirectory(prefix="bench_get.") as tmp:
        base = os.path.join(tmp, "c")
        rec, _ = up(base, 3, free_ports(3), "bench", "async", ["--data-file-size", "256MiB"])
        try:
            async def load():
                c = Client(parse_peers(rec["peers"]), "bench", timeout=30)
                await c.find_leader(asyncio.get_running_loop().time() + 30)
                body = b"x" * 1024
                for k in range(0, n, 1000):
                    await c.append([body] * min(1000, n - k))
                leader = c.leader
                await c.close()
                return leader

            leader = runtime.run(load)
            log(f"{n:,} entries of 1 KiB appended; leader {leader}")
            member = os.path.join(base, f"dledger-{leader}")
            cases = {
                "get --format jsonl": ["get", "--base-dir", base, "-i", "0", "-c", str(n), "--format", "jsonl"],
                "store inspect-data --format jsonl": ["store", "inspect-data", member, "--from-index", "0",
                                                      "--to-index", str(n - 1), "--format", "jsonl", "--body",
                                                      "utf8"],
            }
            times: dict[str, list[float]] = {k: [] for k in cases}
            for rnd in range(args.rounds):
                for name, cmd in cases.items():
                    dt = timed(cmd)
                    times[name].append(dt)
                    log(f"  round {rnd + 1}: {name}: {dt:.2f} s ({n / dt:,.0f} entries/s)")
        finally:
            down(base)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"3 nodes, flush=async; {n:,} entries of 1 KiB; {args.rounds} alternating rounds; medians, "
          "command start included, output to /dev/null")
    print(f"{'case':<36} {'s':>6} {'entries/s':>11}   rounds (s)")
    for name in cases:
        print(f"{name:<36} {med[name]:>6.2f} {n / med[name]:>11,.0f}   " + "  ".join(f"{x:.2f}" for x in times[name]))
    ratio = med["store inspect-data --format jsonl"] / med["get --format jsonl"]
    print(f"get / inspect-data (throughput): {ratio:.2f} (target >= 0.8; get >= 150,000 entries/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
