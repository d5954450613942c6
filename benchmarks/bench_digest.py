#!/usr/bin/env python3
"""``mq digest`` against ``sha256sum`` of the same commit-log files, one run (issue 60: floor,
as fast).

Writes a DLedger-mode broker store (tests/support/rmq_store.py), moves it to a master-slave
store with ``mq migrate`` (commit-log files of ``--file-size``), reads the files once to warm
the page cache, then times, alternating ``--repeat`` times:

- ``sha256sum`` of the commit-log files (one process, the files one after the other: what an
  operator would run to compare replicas by hand);
- ``digest()`` (store/rocketmq/align.py: the log's extent, then per 4 MiB chunk, per file and
  whole, files in parallel on the machine's cores).

Prints MB/s of the log's bytes for each (the best of the runs) and the ratio digest/sha256sum
(above 1: faster).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the project's packages, and tests.support (not installed)

from store.rocketmq.align import digest  # noqa: E402
from store.rocketmq.layout import resolve_broker  # noqa: E402
from store.rocketmq.migrate import migrate  # noqa: E402
from tests.support.rmq_store import write_broker_store  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=400_000)
    ap.add_argument("--body", type=int, default=1000, help="body bytes")
    ap.add_argument("--file-size", type=int, default=128 << 20, help="commit-log file size")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to work (default: a temporary directory)")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-digest-", dir=a.dir)
    try:
        src, dest = os.path.join(work, "src"), os.path.join(work, "dest")
        specs = ({"topic": f"Topic{i % 8}", "queue_id": i % 4, "body": b"x" * a.body,
                  "properties": {"UNIQ_KEY": f"7F000001{i:024X}"}, "store_timestamp": 1700000000000 + i}
                 for i in range(a.messages))
        write_broker_store(src, list(specs), data_file_size=1 << 30)
        migrate(resolve_broker(src), dest, commitlog_file_size=a.file_size)
        files = sorted(os.path.join(dest, "commitlog", n) for n in os.listdir(os.path.join(dest, "commitlog")))
        size = sum(os.path.getsize(f) for f in files)
        subprocess.run(["cat", *files], check=True, stdout=subprocess.DEVNULL)  # (warm)
        print(f"commit log: {len(files)} files, {size / 1e6:.0f} MB; {os.cpu_count()} cores")
        best = {"sha256sum": float("inf"), "mq digest": float("inf")}
        for _ in range(a.repeat):
            t = time.perf_counter()
            subprocess.run(["sha256sum", *files], check=True, stdout=subprocess.DEVNULL)
            best["sha256sum"] = min(best["sha256sum"], time.perf_counter() - t)
            t = time.perf_counter()
            d = digest(dest)
            best["mq digest"] = min(best["mq digest"], time.perf_counter() - t)
        hashed = sum(f.used for f in d.files)
        for name, s in best.items():
            print(f"{name:10s} {s:7.3f} s  {(size if name == 'sha256sum' else hashed) / s / 1e6:8.0f} MB/s")
        print(f"ratio (sha256sum time / mq digest time): {best['sha256sum'] / best['mq digest']:.2f}x "
              f"(mq digest hashes the log up to its max offset, {hashed / 1e6:.0f} MB of the {size / 1e6:.0f})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
