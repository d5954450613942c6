#!/usr/bin/env python3
"""What retention costs appends: two 3-node dledgerctl clusters side by side, one deleting
expired data files as it goes, one with retention off, driven alternately by the same load
generator (benchmarks/bench_cluster.py's), and the longest append while a 1 GiB data file
is deleted.

1. Throughput: 64 clients of single 1 KiB appends. Cluster "on" has 64 MiB data files that
   expire after ``--reserved`` seconds, checked every second (the check ratio is set to a
   sliver, so it deletes at any hour); cluster "off" has every ratio at 1 and deleteWhen at
   an hour 12 hours away. Rounds alternate on/off; the table shows the median round of
   each and their ratio (target >= 0.95), and how many files "on" deleted meanwhile.
2. Stall: a cluster with DLedger's 1 GiB data files is filled past its first file with
   batched appends, then one client appends one entry at a time while the first file
   expires and goes. The longest append around the deletion is set beside the longest
   append of the same client before it (target: the deletion adds no more than 10 ms).

Usage: python benchmarks/bench_retention.py [--seconds 5] [--rounds 4] [--reserved 8] [--quick] [--no-stall] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_cluster import BODY, drive, free_ports, log  # noqa: E402
from cluster.node import runtime  # noqa: E402
from cluster.net.client import Client  # noqa: E402
from cluster.raft.config import parse_peers  # noqa: E402
from cluster.node.launcher import down, up  # noqa: E402


def deletions(base: str) -> int:
    n = 0
    for name in os.listdir(os.path.join(base, "logs")):
        with open(os.path.join(base, "logs", name), errors="replace") as fh:
            n += sum("clean space: deleted" in line for line in fh)
    return n


def start(base: str, extra: list[str]) -> dict:
    rec, _procs = up(base, 3, free_ports(3), "bench", "async", extra)
    return rec


def throughput(tmp: str, seconds: float, rounds: int, reserved: float) -> dict:
    off_hour = f"{(time.localtime().tm_hour + 12) % 24:02d}"
    on = os.path.join(tmp, "on")
    off = os.path.join(tmp, "off")
    recs = {
        "on": start(on, ["--data-file-size", "64MiB", "--file-reserved-hours", str(reserved / 3600),
                         "--disk-ratio-check", "0.0001"]),
        "off": start(off, ["--data-file-size", "64MiB", "--delete-when", off_hour, "--disk-ratio-check", "1",
                           "--disk-ratio-force", "1", "--disk-full-ratio", "1"]),
    }
    try:
        async def run():
            clients = {}
            for name, rec in recs.items():
                c = Client(parse_peers(rec["peers"]), "bench", timeout=30)
                await c.find_leader(asyncio.get_running_loop().time() + 30)
                await c.append([b"warm-up"])
                clients[name] = c
            runs = {"on": [], "off": []}
            for rnd in range(rounds):
                for name in (("on", "off") if rnd % 2 == 0 else ("off", "on")):
                    c = clients[name]

                    async def make_call(c=c):
                        async def call(batch):
                            await c.append([BODY] * batch)
                        return call

                    r = await drive(make_call, 64, 1, seconds)
                    runs[name].append(r["entries_per_s"])
                    log(f"  retention {name}: {r['entries_per_s']:,.0f} appends/s (round {rnd + 1} of {rounds})")
            for c in clients.values():
                await c.close()
            return runs

        runs = runtime.run(run)
        return {"on": statistics.median(runs["on"]), "off": statistics.median(runs["off"]), "runs": runs,
                "files_deleted_by_on": deletions(on), "files_deleted_by_off": deletions(off)}
    finally:
        down(on)
        down(off)


def stall(tmp: str, reserved: float) -> dict:
    base = os.path.join(tmp, "stall")
    rec = start(base, ["--file-reserved-hours", str(reserved / 3600), "--disk-ratio-check", "0.0001"])
    peers = parse_peers(rec["peers"])
    try:
        async def run():
            c = Client(peers, "bench", timeout=30)
            await c.find_leader(asyncio.get_running_loop().time() + 30)
            # past the first 1 GiB file: 1.1 GiB of batched 1 KiB entries
            need = (1 << 30) * 11 // 10 // (len(BODY) + 48)
            sent = 0
            batch = [BODY] * 256

            async def filler():
                nonlocal sent
                while sent < need:
                    await c.append(batch)
                    sent += len(batch)
            await asyncio.gather(*(filler() for _ in range(8)))
            filled_at = time.monotonic()
            log(f"  stall: {sent:,} entries written; one client appends until the first file is deleted")
            lat: list[tuple[float, float]] = []
            begin_changed_at = None
            deadline = filled_at + reserved + 60
            probe = Client(peers, "bench", timeout=5)
            while time.monotonic() < deadline:
                t = time.perf_counter()
                await c.append([BODY])
                lat.append((time.monotonic(), (time.perf_counter() - t) * 1000))
                if begin_changed_at is None and len(lat) % 200 == 0:
                    md = await probe.metadata(c.leader)
                    if (md.begin_index or 0) > 0:
                        begin_changed_at = time.monotonic()
                        deadline = min(deadline, begin_changed_at + 5)
            await probe.close()
            await c.close()
            return lat, begin_changed_at, filled_at

        lat, changed, filled = runtime.run(run)
        if changed is None:
            return {"deleted": False}
        before = [ms for at, ms in lat if at < changed - 3]
        around = [ms for at, ms in lat if changed - 3 <= at <= changed + 5]
        return {"deleted": True, "max_before_ms": max(before, default=None),
                "p99_before_ms": sorted(before)[int(len(before) * 0.99)] if before else None,
                "max_around_ms": max(around, default=None),
                "p99_around_ms": sorted(around)[int(len(around) * 0.99)] if around else None,
                "appends_before": len(before), "appends_around": len(around)}
    finally:
        down(base)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds per throughput run")
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds of on and off")
    ap.add_argument("--reserved", type=float, default=8.0, help="seconds a data file is kept")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 3 s, no stall test")
    ap.add_argument("--no-stall", action="store_true", help="skip the 1 GiB deletion test")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.rounds, args.no_stall = 3.0, 2, True
    tmp = tempfile.mkdtemp(prefix="bench-retention-")
    try:
        out = {"throughput": throughput(tmp, args.seconds, args.rounds, args.reserved)}
        if not args.no_stall:
            out["stall"] = stall(tmp, args.reserved)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    t = out["throughput"]
    ratio = t["on"] / t["off"]
    print(f"64 clients x 1 KiB, median of {args.rounds} alternating rounds of {args.seconds:g} s:")
    print(f"  retention on  {t['on']:>10,.0f} appends/s   ({t['files_deleted_by_on']} deletions logged)")
    print(f"  retention off {t['off']:>10,.0f} appends/s   ({t['files_deleted_by_off']} deletions logged)")
    print(f"  on / off      {ratio:10.3f}   target >= 0.95 {'ok' if ratio >= 0.95 else 'MISSED'}")
    print("  rounds: on " + " ".join(f"{x:,.0f}" for x in t["runs"]["on"]) + " | off "
          + " ".join(f"{x:,.0f}" for x in t["runs"]["off"]))
    s = out.get("stall")
    if s:
        if not s["deleted"]:
            print("1 GiB deletion: the first file was not deleted in time (nothing measured)")
        else:
            extra = s["max_around_ms"] - s["max_before_ms"]
            print(f"1 GiB deletion, one client of single appends: longest append {s['max_around_ms']:.2f} ms "
                  f"around it ({s['appends_around']} appends), {s['max_before_ms']:.2f} ms before it "
                  f"({s['appends_before']}); p99 {s['p99_around_ms']:.2f} against {s['p99_before_ms']:.2f} ms; "
                  f"added {extra:.2f} ms, target <= 10 {'ok' if extra <= 10 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
