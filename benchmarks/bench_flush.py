"""A node's periodic flush: the compiled flush thread against the pool thread, side by side.

Not a test: it measures and prints a table (``--json`` for machine-readable results).

A node's event loop is busy in Python while its flushes run elsewhere
(cluster.node.background.BackgroundSync). This script makes one process look like that: the loop
thread writes ``--bytes`` (default 235,840: 220 entries of 1,072 bytes, what a node
writes in 10 ms at 22k entries/s) every ``--interval-ms`` into a file and otherwise runs
plain Python work, counting it; after each write it starts a flush of the file unless the
last one is still running. Both ways run the same loop in rounds (every way once per
round), each ``--seconds`` long:

compiled   store._flusher: a thread of its own that never takes the interpreter lock;
           an eventfd wakes the loop (the project's way);
pool       store.files.sync_fds in the loop's default executor (the reference: how nodes
           flushed before store._flusher, and still do where it is not built).

Per way, the median round: the loop's Python work done (millions of steps; more is
better), flushes completed, and CPU time per flush spent outside the loop thread (process
CPU minus the loop thread's). Ratio = compiled / pool for work, pool / compiled for CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cluster.node import runtime  # noqa: E402
from cluster.node.background import BackgroundSync  # noqa: E402
from store.files import Flusher, SyncJob  # noqa: E402


async def one_round(path: str, compiled: bool, seconds: float, nbytes: int, interval: float) -> dict:
    loop = asyncio.get_running_loop()
    sync = BackgroundSync(loop, compiled=compiled)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        buf, pos, work, flushes, fut = os.urandom(nbytes), 0, 0, 0, None
        ru0, thread0 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            os.pwrite(fd, buf, pos)
            pos += nbytes
            if fut is None or fut.done():
                if fut is not None:
                    fut.result()
                    flushes += 1
                fut = sync.run([SyncJob(os.dup(fd), True, 0, 0)])
            until = time.monotonic() + interval
            while time.monotonic() < until:
                for _ in range(200):
                    work += 1
                await asyncio.sleep(0)
        await fut
        flushes += 1
        ru1, thread1 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
    finally:
        sync.close()
        os.close(fd)
        os.unlink(path)
    cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    return {"work_m": work / 1e6, "flushes": flushes, "other_cpu_us_per_flush": (cpu - (thread1 - thread0)) / flushes * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bytes", type=int, default=220 * 1072)
    ap.add_argument("--interval-ms", type=float, default=10.0)
    ap.add_argument("--dir", default=None, help="where the test file goes (default: a temporary directory)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if Flusher is None:
        sys.exit("store._flusher is not built: nothing to compare")
    ways = {"compiled": True, "pool": False}
    runs: dict[str, list[dict]] = {w: [] for w in ways}
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        for rnd in range(a.rounds):
            for way, compiled in ways.items():
                r = runtime.run(lambda: one_round(os.path.join(tmp, "flush.bin"), compiled, a.seconds, a.bytes,
                                                  a.interval_ms / 1000))
                runs[way].append(r)
                print(f"  round {rnd + 1}: {way}: {r['work_m']:.1f}M steps, {r['flushes']} flushes, "
                      f"{r['other_cpu_us_per_flush']:.0f} us CPU per flush outside the loop", file=sys.stderr)
    med = {w: sorted(rs, key=lambda r: r["work_m"])[(len(rs) - 1) // 2] for w, rs in runs.items()}
    out = {"ways": med, "runs": runs,
           "ratio_work": med["compiled"]["work_m"] / med["pool"]["work_m"],
           "ratio_cpu": med["pool"]["other_cpu_us_per_flush"] / max(1e-9, med["compiled"]["other_cpu_us_per_flush"])}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{'way':10s} {'loop work (M steps)':>20s} {'flushes':>8s} {'CPU/flush outside loop':>24s}")
    for w, r in med.items():
        print(f"{w:10s} {r['work_m']:20.1f} {r['flushes']:8d} {r['other_cpu_us_per_flush']:21.0f} us")
    print(f"ratio: loop work x{out['ratio_work']:.2f}, CPU per flush outside the loop x{out['ratio_cpu']:.1f} less "
          f"(compiled against pool; medians of {a.rounds} rounds)")
    print("work per round (M steps): " + "; ".join(f"{w} " + " ".join(f"{r['work_m']:.0f}" for r in rs)
                                             for w, rs in runs.items()))


if __name__ == "__main__":
    main()
