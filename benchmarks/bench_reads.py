#!/usr/bin/env python3
"""What linearizable reads cost: ``kv get`` linearizable against serializable, and appends
while each kind of read runs, side by side in one run.

One 3-node cluster (flush=async, ``--state-machine kv``, 1,000 keys written first) is
driven by the load generator of bench_cluster.py (one asyncio process; each client sends
its next request when the previous one is answered), in alternating rounds so a slow minute
of this shared machine falls on all cases alike; the median round of each case counts:

- ``kv get serializable``: 64 clients of QUERY with ``consistency: serializable`` (the
  leader answers from its state at once);
- ``kv get linearizable``: the same with ``consistency: linearizable`` (the default: the
  leader confirms its read index with a heartbeat round answered by a majority, shared by
  the reads that arrive together, then answers);
- ``kv get linearizable, lease``: the same on a second cluster (idle meanwhile) whose nodes
  run with ``--read-lease``: the leader answers at once while a majority answered a
  heartbeat within its lease;
- ``appends, serializable reads`` and ``appends, linearizable reads``: 64 clients of 1 KiB
  appends while 16 clients read, of the one kind or the other (what the read rounds cost
  the write path).

Targets (issue 4/5): linearizable at least 0.7x serializable; appends unaffected (ratio
within the rounds' spread).

Usage: python benchmarks/bench_reads.py [--seconds 4] [--rounds 3]
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
from cluster.net.client import Client  # noqa: E402
from cluster.node import runtime  # noqa: E402
from cluster.node.launcher import down, up  # noqa: E402
from cluster.raft.config import parse_peers  # noqa: E402

KEYS = 1000
LEASE = "kv get linearizable, lease"
CASES = ("kv get serializable", "kv get linearizable", LEASE, "appends, serializable reads",
         "appends, linearizable reads")


def roles(cpu_us: dict[str, float], leader: str | None) -> tuple[float, float, float]:
    """CPU time per read, us: the leader's, the followers' (each, on average), the load generator's."""
    followers = [v for k, v in cpu_us.items() if k not in (leader, "loadgen")]
    return cpu_us.get(leader, 0.0), sum(followers) / max(1, len(followers)), cpu_us["loadgen"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    results: dict[str, list[float]] = {k: [] for k in CASES}
    cpu: dict[str, list[tuple]] = {k: [] for k in CASES}  # per round: leader, followers (each), load generator
    with tempfile.TemporaryDirectory(prefix="bench_reads.") as tmp:
        base, leased = os.path.join(tmp, "c"), os.path.join(tmp, "lease")
        node_args = ["--data-file-size", "64MiB", "--state-machine", "kv"]
        rec, _ = up(base, 3, free_ports(3), "bench", "async", node_args)
        try:
            rec_lease, _ = up(leased, 3, free_ports(3), "bench", "async", node_args + ["--read-lease"])
        except BaseException:
            down(base)
            raise
        try:
            async def run():
                c = Client(parse_peers(rec["peers"]), "bench", timeout=30)
                c_lease = Client(parse_peers(rec_lease["peers"]), "bench", timeout=30)
                for client in (c, c_lease):
                    await client.find_leader(asyncio.get_running_loop().time() + 30)
                    for k in range(0, KEYS, 100):
                        await client.append([f"k{j}=v{j}".encode() for j in range(k, k + 100)])
                counter = iter(range(1 << 62))

                def reader(level, client=c):
                    async def make_call():
                        async def call(_batch):
                            await client.query(b"k%d" % (next(counter) % KEYS), consistency=level)
                        return call
                    return make_call

                async def make_writer():  # (other keys: every round reads the same short values)
                    async def call(_batch):
                        await c.append([f"w{next(counter) % KEYS}={'v' * 1000}".encode()])
                    return call

                members = {n["id"]: n["pid"] for n in rec["nodes"]}
                members_lease = {n["id"]: n["pid"] for n in rec_lease["nodes"]}
                for rnd in range(args.rounds):
                    for name, level, client, pids in (("kv get serializable", "serializable", c, members),
                                                      ("kv get linearizable", "linearizable", c, members),
                                                      (LEASE, "linearizable", c_lease, members_lease)):
                        r = await drive(reader(level, client), 64, 1, args.seconds, pids)
                        results[name].append(r["entries_per_s"])
                        cpu[name].append(roles(r["cpu_us"], client.leader))
                        log(f"  round {rnd + 1}: {name}: {r['entries_per_s']:,.0f}/s (p50 {r['p50_ms']:.2f} ms)")
                    for level in ("serializable", "linearizable"):
                        reads = asyncio.ensure_future(drive(reader(level), 16, 1, args.seconds))
                        w = await drive(make_writer, 64, 1, args.seconds)
                        await reads
                        results[f"appends, {level} reads"].append(w["entries_per_s"])
                        log(f"  round {rnd + 1}: appends with {level} reads: {w['entries_per_s']:,.0f}/s")
                await c.close()
                await c_lease.close()

            runtime.run(run)
        finally:
            down(base)
            down(leased)
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"3 nodes, flush=async, --state-machine kv; {args.rounds} alternating rounds of {args.seconds:g} s; "
          "medians")
    print(f"{'case':<30} {'per s':>10}   rounds")
    for name in CASES:
        print(f"{name:<30} {med[name]:>10,.0f}   " + "  ".join(f"{x:,.0f}" for x in results[name]))
    print("CPU time per read, us (user + system, from /proc), in the median round: leader, each follower, "
          "load generator")
    for name in CASES[:3]:
        at = results[name].index(med[name]) if med[name] in results[name] else 0
        lead, follower, gen = cpu[name][at]
        print(f"{name:<30} {lead:>6.1f} {follower:>6.1f} {gen:>6.1f}")
    print(f"kv get linearizable / serializable: {med['kv get linearizable'] / med['kv get serializable']:.2f} "
          "(target >= 0.7)")
    print(f"kv get linearizable on a lease (node start --read-lease) / serializable: "
          f"{med[LEASE] / med['kv get serializable']:.2f}")
    print(f"appends with linearizable / serializable reads: "
          f"{med['appends, linearizable reads'] / med['appends, serializable reads']:.2f} (target: within noise)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
