"""Reading a broker's messages: dledgerctl's ``mq`` commands against RocketMQ's own decoder,
side by side over the same files, with ratios.

Not a test: it measures and prints a table (``--json`` for the numbers).

The store: ``--messages`` messages of ``--body`` bytes (default 300,000 of 1 KiB) over
``--topics`` topics of 4 queues each, with TAGS, KEYS and UNIQ_KEY properties as a producer
sets them, in 1 GiB data files (RocketMQ's default), with their consume queues. It is
written by this project's store and encoder (tests/rmq_store.py), which is fast; with
``--writer rocketmq`` RocketMQ's own message store writes it instead (slow past a few tens
of thousands: it is driven through a JSON file).

reference  RocketMQ 4.9.4's ``MessageDecoder.decode(buffer, readBody=true, deCompressBody=false)``
           over every entry body of the same data files (tests/javarocketmq.py
           ``decode_all``): files mapped and paged in first, one warm-up pass for the JIT, then
           the fastest of ``--repeat`` timed passes of the decode loop alone (JVM start and
           file reading not counted). It builds a MessageExt per message, as a broker does
           when it reads one back: the work ``mq check`` and ``mq topics`` need is less (they
           check the BODYCRC too, which the decoder does not).
columns    store/rocketmq/columns.py's loop (the compiled one when built) over the same
           mapped files, paged in first, timed alone: the counterpart of the reference's
           timed loop; with and without the BODYCRC check the reference does not make.
mq check   ``store.rocketmq.check.check_broker`` in this process: every message's framing,
           BODYCRC and PHYSICALOFFSET, queue order, every consume-queue unit; the files
           opened and read from the page cache within the time. Also the whole command
           (``dledgerctl mq check``, interpreter start included), wall clock.
mq topics  ``topic_rows`` in this process, and the whole command.
messages   ``dledgerctl mq messages --body none --format jsonl > /dev/null``: rows/s, the whole
           command.

Ratio = project rate / reference rate (higher is better). Each side runs ``--repeat`` times;
the best run counts. Needs Java and the mirrors for the reference (see
tests/javarocketmq.py); without them the project's rates are printed alone.

Usage: python benchmarks/bench_mq.py [--messages N] [--body BYTES] [--repeat K] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import javarocketmq  # noqa: E402
from rmq_store import write_broker_store  # noqa: E402
from store.rocketmq import columns  # noqa: E402
from store.rocketmq.check import check_broker, topic_rows  # noqa: E402
from store.rocketmq.layout import resolve_broker  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def specs(n: int, body: int, topics: int) -> list[dict]:
    payload = b"m" * body
    return [{"topic": f"Topic{i % topics}", "queue_id": (i // topics) % 4, "body": payload,
             "properties": {"TAGS": f"tag{i % 7}", "KEYS": f"order-{i} user-{i % 1000}", "UNIQ_KEY": f"U{i:012d}"}}
            for i in range(n)]


def write(root: str, args) -> None:
    if args.writer == "rocketmq":
        rmq = javarocketmq.build("4.9.4")
        msgs = [{"topic": s["topic"], "queue_id": s["queue_id"], "body": s["body"], "tags": s["properties"]["TAGS"],
                 "keys": s["properties"]["KEYS"]} for s in specs(args.messages, args.body, args.topics)]
        javarocketmq.write_store(rmq, root, msgs, data_file_size=1 << 30, timeout=3600)
    else:
        write_broker_store(root, specs(args.messages, args.body, args.topics), data_file_size=1 << 30,
                           cq_units_per_file=300_000, batch=1024)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def loop_rates(node_dir: str, n: int, repeat: int) -> tuple[float, float]:
    """messages/s of columns.message_columns over every data file, with and without the
    BODYCRC check: the files mapped, their entries found and their pages read first
    (untimed), as the reference's timed loop has them."""
    from store.inspect import open_lists
    from store.layout import NodeLayout
    from store.scan import FileScan, Run

    data, index = open_lists(NodeLayout(node_dir), None, None)
    try:
        work = []
        for f in data.files:
            scan = FileScan(f.view(), f.start, file_size=data.file_size, check_crc=False, run_headers=True)
            runs = [g for g in scan.walk(index) if type(g) is Run]
            if runs:
                offs = np.concatenate([r.headers["pos"].astype(np.int64) for r in runs]) - f.start + 48
                lens = np.concatenate([r.headers["bsize"].astype(np.int64) for r in runs])
                work.append((f.mm, offs, lens))
        assert sum(len(o) for _m, o, _l in work) == n
        for mm, offs, lens in work:  # (pages in, as the reference's warm-up pass has them)
            columns.message_columns(mm, offs, lens, True)
        rates = []
        for crc in (True, False):
            t = best(lambda: [columns.message_columns(mm, o, ln, crc) for mm, o, ln in work], repeat)
            rates.append(n / t)
        return rates[0], rates[1]
    finally:
        data.close()
        index.close()


def cli(*args: str) -> float:
    t = time.perf_counter()
    with open(os.devnull, "wb") as out:
        subprocess.run([sys.executable, "-m", "dledgerctl", *args], stdout=out, stderr=subprocess.DEVNULL,
                       check=False, env=dict(os.environ, PYTHONPATH=ROOT))
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--body", type=int, default=1024, help="body bytes of each message")
    ap.add_argument("--topics", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--writer", choices=["ours", "rocketmq"], default="ours")
    ap.add_argument("--dir", default=None, help="where the store goes (default: a temporary directory)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    work = args.dir or tempfile.mkdtemp(prefix="bench-mq-")
    root = os.path.join(work, "store")
    shutil.rmtree(root, ignore_errors=True)
    try:
        log(f"writing {args.messages} messages of {args.body} bytes ({args.writer})")
        write(root, args)
        broker = resolve_broker(root)
        n = args.messages
        results = {"messages": n, "body": args.body, "compiled": columns._columns is not None}
        ref = None
        try:
            rmq = javarocketmq.build("4.9.4")
            log("RocketMQ's MessageDecoder over the same files")
            got = javarocketmq.decode_all(rmq, broker.node_dir, warmup=1, repeat=args.repeat)
            assert got["messages"] == n and got["failed"] == 0, got
            ref = n / got["seconds"]
            results["reference"] = ref
        except javarocketmq.Unavailable as exc:
            log(f"no reference: {exc}")
        log("the columns loop alone, over mapped files (what the reference times)")
        results["loop_crc"], results["loop"] = loop_rates(broker.node_dir, n, args.repeat)
        findings = []

        def check():
            f, s = check_broker(broker)
            assert not f and s["messages"] == n, (f[:3], s)
            findings.append(len(f))
        log("mq check (in process)")
        results["check"] = n / best(check, args.repeat)
        log("mq topics (in process)")
        results["topics"] = n / best(lambda: topic_rows(broker), args.repeat)
        log("whole commands")
        results["check_cli"] = n / min(cli("mq", "check", root) for _ in range(args.repeat))
        results["topics_cli"] = n / min(cli("mq", "topics", root, "--format", "json") for _ in range(args.repeat))
        results["messages_cli"] = n / min(cli("mq", "messages", root, "--body", "none", "--format", "jsonl")
                                          for _ in range(args.repeat))
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"\n{n:,} messages of {args.body} bytes; columns {'compiled' if results['compiled'] else 'in Python'}; "
          f"best of {args.repeat}\n")
    print(f"{'case':<34} {'messages/s':>12} {'ratio':>7}")
    if ref is not None:
        print(f"{'RocketMQ MessageDecoder.decode':<34} {ref:>12,.0f} {1:>7.2f}")
    for key, label in (("loop_crc", "columns loop, BODYCRC checked"), ("loop", "columns loop"),
                       ("check", "mq check (in process)"), ("topics", "mq topics (in process)"),
                       ("check_cli", "dledgerctl mq check (command)"), ("topics_cli", "dledgerctl mq topics (command)"),
                       ("messages_cli", "mq messages --format jsonl (rows)")):
        ratio = f"{results[key] / ref:>7.2f}" if ref else f"{'-':>7}"
        print(f"{label:<34} {results[key]:>12,.0f} {ratio}")
    return 0


T0 = time.perf_counter()

if __name__ == "__main__":
    sys.exit(main())
