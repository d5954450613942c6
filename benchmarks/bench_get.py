#!/usr/bin/env python3
"""How fast ``get`` dumps a range of a live log, against reading the same range offline from
a member's files: ``dledgerctl get -i 0 -c N --format jsonl`` against ``dledgerctl store
inspect-data DIR --from-index 0 --to-index N-1 --format jsonl --body utf8`` (the same rows), side
by side in one run, in alternating rounds; the median round counts. Output goes to
/dev/null; the times include each command's start.

One 3-node cluster (flush=async), N entries of 1 KiB appended first in batches. Then
``get --follow`` runs while 64 clients append 1 KiB entries for a minute: every 5 s, how far
behind the commit index its output is.
Targets (issue 7/7): get >= 0.8x inspect-data, and >= 150,000 entries/s; the follow lag
does not grow.

Usage: python benchmarks/bench_get.py [--entries 200000] [--rounds 3] [--follow-seconds 60]
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
    ap.add_argument("--follow-seconds", type=float, default=60.0, help="get --follow under load (0: skip)")
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
            lags = follow_lag(base, rec, args.follow_seconds) if args.follow_seconds > 0 else []
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
    if lags:
        print("get --follow behind 64 appending clients (1 KiB each), every 5 s: entries appended and committed "
              "but not yet printed:")
        print("  " + "  ".join(f"{t:.0f}s:{lag:,}" for t, lag, _rate in lags))
        print(f"  appends committed meanwhile: {lags[-1][2]:,.0f}/s; the lag must not grow")
    return 0


def follow_lag(base: str, rec: dict, seconds: float) -> list[tuple[float, int, float]]:
    """``get --follow`` from the commit index on, while 64 clients append for ``seconds``:
    every 5 s, how far the last index it printed is behind the leader's commit index."""
    import threading

    from bench_cluster import drive

    proc = subprocess.Popen(CLI + ["get", "--base-dir", base, "--follow", "--format", "csv", "--body", "none"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    printed = [-1]

    def reader():
        for line in proc.stdout:
            head = line.split(b",", 1)[0]
            if head.isdigit():
                printed[0] = int(head)
    threading.Thread(target=reader, daemon=True).start()
    out: list[tuple[float, int, float]] = []
    try:
        async def run():
            c = Client(parse_peers(rec["peers"]), "bench", timeout=30)
            await c.find_leader(asyncio.get_running_loop().time() + 30)
            body = b"y" * 1024

            async def make_call():
                async def call(_batch):
                    await c.append([body])
                return call
            load = asyncio.ensure_future(drive(make_call, 64, 1, seconds))
            t0 = time.monotonic()
            start_commit = None
            while not load.done():
                await asyncio.sleep(5)
                md = await c.metadata(c.leader)
                committed = md.committed_index
                start_commit = committed if start_commit is None else start_commit
                elapsed = time.monotonic() - t0
                out.append((elapsed, committed - printed[0], (committed - start_commit) / max(1e-9, elapsed - 5)))
                log(f"  follow: {elapsed:.0f} s: lag {committed - printed[0]:,} entries")
            await load
            await c.close()
        runtime.run(run)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return out


if __name__ == "__main__":
    sys.exit(main())
