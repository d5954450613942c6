#!/usr/bin/env python3
"""Backups: how fast, and what a live one costs the group's appends (issue 64). One run.

A 3-node local group (flush=async, 64 MiB data files) is filled with ``--entries`` entries of
``--body`` bytes. Then, alternating rounds:

- offline: one member stopped; ``store backup`` of its directory (store/backup.py) against
  ``cp -r`` of the same directory (the page cache warm for both: the same files are read);
- live: ``cluster backup`` of the running group (dledgerctl/ops/backup.py) on its own;
- appends' slowdown: 8 clients appending batches of 64 for ``--seconds`` with a live backup
  running the whole time (started again as each ends), against the same with none.

Rounds alternate so a slow moment of this shared machine falls on all alike; the medians are
printed with their ratios.

Usage: python benchmarks/bench_backup.py [--entries 200000] [--body 512] [--rounds 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from dledgerctl.ops import backup as live  # noqa: E402
from dledgerctl.ops import find_target, logio  # noqa: E402
from store.backup import backup_store  # noqa: E402

DLEDGERCTL = [sys.executable, "-m", "dledgerctl"]


def cli(*args: str) -> str:
    r = subprocess.run([*DLEDGERCTL, *args], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def fill(target, entries: int, body: int) -> None:
    payload = b"x" * body
    left = entries
    while left > 0:
        n = min(left, 20000)
        for _ in logio.append(target, (payload for _ in range(n)), batch=256):
            pass
        left -= n


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def appends_for(target, seconds: float, clients: int = 8) -> float:
    """Appends per second of ``clients`` threads, each appending batches of 64 for ``seconds``."""
    counts = [0] * clients
    end = time.monotonic() + seconds

    def one(i: int) -> None:
        body = b"y" * 512
        while time.monotonic() < end:
            for rows in logio.append(target, [body] * 64, batch=64):
                counts[i] += len(rows)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=200000)
    ap.add_argument("--body", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-backup-")
    base = os.path.join(work, "c")
    try:
        cli("cluster", "up", "--base-dir", base, "--nodes", "3", "--port-base", "27911", "--wait", "40",
            "--data-file-size", "64MiB", "--index-file-size", "8MiB")
        target = find_target(base_dir=base, timeout=10.0)
        started = time.monotonic()
        fill(target, args.entries, args.body)
        print(f"filled {args.entries} entries of {args.body} bytes in {time.monotonic() - started:.1f} s",
              file=sys.stderr)
        res: dict[str, list[float]] = {k: [] for k in ("store backup", "cp -r", "cluster backup", "appends alone",
                                                       "appends with backup")}
        size = 0
        for rnd in range(args.rounds):
            # offline, on a stopped member
            cli("cluster", "stop", "--base-dir", base, "n2")
            node = os.path.join(base, "dledger-n2")
            size = dir_bytes(os.path.join(node, "data"))
            for kind in (("cp -r", "store backup") if rnd % 2 else ("store backup", "cp -r")):
                out = os.path.join(work, "out")
                t = time.monotonic()
                if kind == "cp -r":
                    subprocess.run(["cp", "-r", node, out], check=True)
                else:
                    backup_store(node, out)
                res[kind].append(time.monotonic() - t)
                shutil.rmtree(out) if os.path.isdir(out) else os.unlink(out)
            cli("cluster", "start", "--base-dir", base, "n2", "--wait", "30")
            # live, alone
            out = os.path.join(work, "live")
            t = time.monotonic()
            made = live.backup(target, out)
            res["cluster backup"].append(time.monotonic() - t)
            live_bytes = made.entry_bytes
            os.unlink(out)
            # appends with and without a live backup running
            for kind in (("appends with backup", "appends alone") if rnd % 2 else
                         ("appends alone", "appends with backup")):
                if kind == "appends alone":
                    res[kind].append(appends_for(target, args.seconds))
                    continue
                stop = threading.Event()

                def backups() -> None:
                    i = 0
                    while not stop.is_set():
                        path = os.path.join(work, f"during-{i}")
                        live.backup(target, path)
                        os.unlink(path)
                        i += 1
                th = threading.Thread(target=backups)
                th.start()
                res[kind].append(appends_for(target, args.seconds))
                stop.set()
                th.join()
        med = {k: statistics.median(v) for k, v in res.items()}
        mib = size / (1 << 20)
        print(f"\nbackup of {args.entries} entries ({mib:.0f} MiB of data files, {live_bytes / (1 << 20):.0f} MiB "
              f"of entries), medians of {args.rounds} rounds\n")
        print("| case | time | MiB/s | ratio |")
        print("|---|---|---|---|")
        print(f"| `cp -r` of a stopped member's directory | {med['cp -r']:.2f} s | {mib / med['cp -r']:.0f} | 1.00 |")
        print(f"| `store backup` of it | {med['store backup']:.2f} s | {mib / med['store backup']:.0f} | "
              f"{med['store backup'] / med['cp -r']:.2f} |")
        print(f"| `cluster backup` of the running group | {med['cluster backup']:.2f} s | "
              f"{live_bytes / (1 << 20) / med['cluster backup']:.0f} | {med['cluster backup'] / med['cp -r']:.2f} |")
        print(f"\n| appends (8 clients x 64) | appends/s | ratio |\n|---|---|---|")
        print(f"| no backup | {med['appends alone']:,.0f} | 1.00 |")
        print(f"| a live backup running throughout | {med['appends with backup']:,.0f} | "
              f"{med['appends with backup'] / med['appends alone']:.2f} |")
    finally:
        subprocess.run([*DLEDGERCTL, "cluster", "down", "--base-dir", base], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
