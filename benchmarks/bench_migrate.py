#!/usr/bin/env python3
"""``mq migrate`` against ``cp -r`` of the same DLedger-mode store, on the same disk, one run.

Writes a DLedger-mode broker store (tests/support/rmq_store.py: N messages of ``--body`` bytes over
8 topics x 4 queues, each with a UNIQ_KEY and two KEYS, so three index keys a message), drops
nothing from the page cache (both read it warm: the first ``cp -r`` warms it), then times:

- ``cp -r SRC`` (the floor a move of the same bytes has on this disk);
- ``migrate`` (store/rocketmq/migrate.py with RocketMQ's default index shape, 5,000,000 slots
  and 20,000,000 entries a file): the whole move, the index's part (hashing and writing the
  keys, as the index writer times it; and with taking each message's keys in the move's
  pass), and the rest.

Prints MB/s of the messages' bytes for each, the ratios to cp, and index keys/s. Targets (issue 52):
migrate without the index at least half of cp's speed; the index at least 1M keys/s.
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

from tests.support.rmq_store import write_broker_store  # noqa: E402
from store.rocketmq.layout import resolve_broker  # noqa: E402
from store.rocketmq.migrate import migrate  # noqa: E402


def tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--body", type=int, default=200, help="body bytes")
    ap.add_argument("--dir", default=None, help="where to work (default: a temporary directory)")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-migrate-", dir=a.dir)
    try:
        src = os.path.join(work, "src")
        t = time.perf_counter()
        specs = ({"topic": f"Topic{i % 8}", "queue_id": i % 4, "body": b"x" * a.body,
                  "properties": {"UNIQ_KEY": f"7F000001{i:024X}", "KEYS": f"order-{i} user-{i % 1000}",
                                 "TAGS": f"t{i % 3}"}, "store_timestamp": 1700000000000 + i}
                 for i in range(a.messages))
        write_broker_store(src, list(specs), data_file_size=1 << 30)
        size = tree_bytes(src)
        print(f"source: {a.messages} messages, {size / 1e6:.1f} MB (written in {time.perf_counter() - t:.1f}s)")
        subprocess.run(["cp", "-r", src, os.path.join(work, "warm")], check=True)
        shutil.rmtree(os.path.join(work, "warm"))

        t = time.perf_counter()
        subprocess.run(["cp", "-r", src, os.path.join(work, "copy")], check=True)
        subprocess.run(["sync", "-f", os.path.join(work, "copy")], check=True)
        cp_s = time.perf_counter() - t
        shutil.rmtree(os.path.join(work, "copy"))

        t = time.perf_counter()
        s = migrate(resolve_broker(src), os.path.join(work, "ms"), commitlog_file_size=1 << 30)
        mig_s = time.perf_counter() - t
        rest_s = mig_s - s.index_wall_seconds
        mb = s.bytes / 1e6  # (the messages' bytes: SRC's data files are sparse past them)
        print(f"moved: {s.messages} messages, {mb:.1f} MB of messages")
        print(f"cp -r:                 {cp_s:7.2f}s  {mb / cp_s:8.1f} MB/s")
        print(f"mq migrate (all):      {mig_s:7.2f}s  {mb / mig_s:8.1f} MB/s  ratio to cp {cp_s / mig_s:.2f}")
        print(f"  without the index:   {rest_s:7.2f}s  {mb / rest_s:8.1f} MB/s  ratio to cp {cp_s / rest_s:.2f} "
              f"(target >= 0.5)")
        print(f"  index rebuild:       {s.index_seconds:7.2f}s  {s.index_keys} keys in {s.index_files} file(s): "
              f"{s.index_keys / s.index_seconds / 1e6:.2f} M keys/s hashed and written (target >= 1)")
        print(f"  index step, whole:   {s.index_wall_seconds:7.2f}s  (taking each message's keys too): "
              f"{s.index_keys / s.index_wall_seconds / 1e6:.2f} M keys/s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
