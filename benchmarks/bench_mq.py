"""Reading a broker's messages: dledgerctl's ``mq`` commands against RocketMQ's own decoder,
side by side over the same files, with ratios.

Not a test: it measures and prints a table (``--json`` for the numbers).

The store: ``--messages`` messages of ``--body`` bytes (default 300,000 of 1 KiB) over
``--topics`` topics of 4 queues each, with TAGS, KEYS and UNIQ_KEY properties as a producer
sets them, in 1 GiB data files (RocketMQ's default), with their consume queues. It is
written by this project's store and encoder (tests/support/rmq_store.py), which is fast; with
``--writer rocketmq`` RocketMQ's own message store writes it instead (slow past a few tens
of thousands: it is driven through a JSON file).

reference  RocketMQ 4.9.4's ``MessageDecoder.decode(buffer, readBody=true, deCompressBody=false)``
           over every entry body of the same data files (tests/support/javarocketmq.py
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
tests/support/javarocketmq.py); without them the project's rates are printed alone.

With ``--sizes N,M,...`` it measures memory instead (issue 51): for each size a store of
``--topics`` topics of 4 queues (``--body`` bytes a message) is written fast by this
benchmark's own writer (one encoded message per topic and queue, copied with numpy, its queue
offset and PHYSICALOFFSET patched; packed appends to the project's store; consume queues
written as they go; a consumer group's offsets half way through every queue), then each
command runs as the whole command (``dledgerctl mq check``, ``mq topics``; with
``--with-messages``, ``--with-consumers``, ``--with-migrate``, ``--with-get``, those too) in
a child process whose RssAnon is sampled from /proc every 10 ms (peak anonymous memory:
pages of the mapped store are file pages, not counted; VmHWM, which counts them, is in
``--json``). ``get --decode rocketmq -f jsonl`` reads every entry from a one-member group
started on the store's node directory (its leader appends a no-op entry: it runs last).
``--only`` picks commands: ``mq migrate`` writes a second store as large as the first, so
on a small disk run it alone on stores of smaller bodies (``--only migrate --body 128``:
its memory follows the number of messages, not their bytes). Then ``check_broker`` and
``topic_rows`` run in this process for msgs/s (best of ``--repeat``; 0 skips them). The
last column is the ratio of the largest size's peak to the smallest's. Each store is
deleted once measured (``--keep`` keeps it).

Usage: python benchmarks/bench_mq.py [--messages N] [--body BYTES] [--repeat K] [--json]
       python benchmarks/bench_mq.py --sizes 3000000,30000000 [--dir DIR] [--keep] [--with-messages]
              [--with-consumers] [--with-migrate] [--with-get] [--only CMD,...] [--body BYTES]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # the project's packages, and tests.support (not installed)

from tests.support import javarocketmq  # noqa: E402
from tests.support.rmq_encode import encode_message  # noqa: E402
from tests.support.rmq_store import write_broker_store  # noqa: E402
from store.filestore import FileStore  # noqa: E402
from store.format import HEADER_SIZE, MIN_BLANK_LEN  # noqa: E402
from store.packed import PackedBodies  # noqa: E402
from store.rocketmq.message import tags_code  # noqa: E402
from store.rocketmq import check, columns  # noqa: E402
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


QUEUES = 4
UNIT = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])


def write_fast(root: str, n: int, body: int, topics: int, *, data_file_size: int = 1 << 30,
               cq_units: int = 300_000, batch: int = 8192) -> None:
    """``n`` messages round-robin over ``topics`` x 4 queues, written at disk speed: message
    ``i`` is slot ``i % slots``'s encoded message with its queue offset (``i // slots``)
    and PHYSICALOFFSET (its entry's pos + 48) patched in."""
    slots = [(t, q) for q in range(QUEUES) for t in range(topics)]
    payload = b"m" * body
    tmpl = [encode_message(topic=f"Topic{t:02d}", queue_id=q, body=payload,
                           properties={"TAGS": f"tag{t:02d}", "KEYS": f"order-{t:02d}-{q}", "UNIQ_KEY": "U" + "0" * 12})
            for t, q in slots]
    size = len(tmpl[0])
    assert all(len(m) == size for m in tmpl)
    tmpl = np.frombuffer(b"".join(tmpl), np.uint8).reshape(len(slots), size)
    codes = [tags_code(f"tag{t:02d}") for t, _q in slots]
    entry = HEADER_SIZE + size
    cap = (data_file_size - entry - MIN_BLANK_LEN) // entry + 1  # entries a data file takes
    node = os.path.join(root, "dledger-n0")
    os.makedirs(os.path.join(root, "index"), exist_ok=True)
    store = FileStore.open(node, data_file_size=data_file_size, index_file_size=64 << 20)
    cq = [None] * len(slots)  # (file, units written to it)
    try:
        for lo in range(0, n, batch):
            i = np.arange(lo, min(n, lo + batch), dtype=np.int64)
            slot = i % len(slots)
            pos = (i // cap) * data_file_size + (i % cap) * entry
            rows = tmpl[slot]
            rows[:, 20:28] = (i // len(slots)).astype(">i8").view(np.uint8).reshape(-1, 8)
            rows[:, 28:36] = (pos + HEADER_SIZE).astype(">i8").view(np.uint8).reshape(-1, 8)
            packed = PackedBodies([(np.full(len(i), size, ">i4").tobytes() + rows.tobytes(), len(i))])
            done = store.append_leader(packed, 1)
            assert done[0].pos == pos[0] and done[-1].pos == pos[-1], (done[0].pos, pos[0])
            for s in np.unique(slot).tolist():
                sel = slot == s
                units = np.zeros(int(sel.sum()), UNIT)
                units["offset"], units["size"], units["tags"] = pos[sel] + HEADER_SIZE, size, codes[s]
                qoff = int(i[sel][0]) // len(slots)
                _cq_write(root, slots[s], cq, s, units, qoff, cq_units)
        store.set_committed(store.end_index)
    finally:
        store.close()
        for fh, _n in filter(None, cq):
            fh.truncate(cq_units * 20)
            fh.close()
    # a consumer group half way through every queue (what mq consumers reads)
    per_slot = -(-n // len(slots))
    table = {f"Topic{t:02d}@bench": {str(q): per_slot // 2 for _t, q in slots if _t == t} for t in range(topics)}
    os.makedirs(os.path.join(root, "config"), exist_ok=True)
    with open(os.path.join(root, "config", "consumerOffset.json"), "w") as fh:
        json.dump({"offsetTable": table}, fh)


def _cq_write(root, slot, cq, s, units, qoff, per_file) -> None:
    while len(units):
        if cq[s] is None or cq[s][1] == per_file:
            if cq[s] is not None:
                cq[s][0].close()
            d = os.path.join(root, "consumequeue", f"Topic{slot[0]:02d}", str(slot[1]))
            os.makedirs(d, exist_ok=True)
            cq[s] = [open(os.path.join(d, f"{qoff * 20:020d}"), "wb"), 0]
        take = min(len(units), per_file - cq[s][1])
        cq[s][0].write(units[:take].tobytes())
        cq[s][1] += take
        units, qoff = units[take:], qoff + take


def peak_memory(what: str, root: str, n: int, *more: str) -> tuple[int, int]:
    """(peak RssAnon, VmHWM) in bytes of a child process running ``dledgerctl what root more...``."""
    return peak_of([sys.executable, "-m", "dledgerctl", *what.split(), root, *more])


def peak_of(argv: list[str]) -> tuple[int, int]:
    """(peak RssAnon, VmHWM) in bytes of a child process running ``argv`` (RssAnon sampled
    every 10 ms); it must exit 0."""
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=ROOT))
    peak = hwm = 0
    while child.poll() is None:
        try:
            with open(f"/proc/{child.pid}/status") as fh:
                for line in fh:
                    if line.startswith("RssAnon:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
                    elif line.startswith("VmHWM:"):
                        hwm = max(hwm, int(line.split()[1]) * 1024)
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.01)
    assert child.wait() == 0, f"{argv[3:5]}: exit status {child.returncode} (a finding, or a failed assertion)"
    return peak, hwm


def get_peak(root: str, n: int) -> tuple[int, int, float]:
    """``get --decode rocketmq -f jsonl`` of every entry: a one-member group started on the
    store's node directory (its leader appends a no-op entry at the end: run last), then
    the command's peak memory (the client's; the node is not counted) and seconds."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    peers = f"n0-127.0.0.1:{port}"
    cli_ = [sys.executable, "-m", "dledgerctl"]
    node = subprocess.Popen(cli_ + ["node", "start", "--id", "n0", "--peers", peers, "--store-base-dir", root,
                                    "--data-file-size", str(1 << 30), "--index-file-size", str(64 << 20),
                                    "--no-force-clean", "--file-reserved-hours", "1000000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        deadline = time.monotonic() + 600
        while subprocess.run(cli_ + ["get", "--peers", peers, "-i", "0", "--timeout", "2", "--format", "json"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=dict(os.environ, PYTHONPATH=ROOT)).returncode:
            assert node.poll() is None, f"the node exited ({node.returncode})"
            assert time.monotonic() < deadline, "the node did not answer within 600 s"
            time.sleep(0.5)
        t = time.perf_counter()  # (the rate is the get's alone, without the node's start)
        peak, hwm = peak_of(cli_ + ["get", "--peers", peers, "-i", "0", "--to-index", str(n - 1), "--decode", "rocketmq",
                               "--body", "none", "--format", "jsonl", "--timeout", "60"])
        return peak, hwm, time.perf_counter() - t
    finally:
        node.terminate()
        try:
            node.wait(60)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()


COMMANDS = {  # --only's names: (label, the command's argv after 'dledgerctl', or a CHILD job)
    "check": ("mq check", "mq check"), "topics": ("mq topics", "mq topics --format json"),
    "messages": ("mq messages -f jsonl", "mq messages --body none --format jsonl"),
    "consumers": ("mq consumers", "mq consumers --format json"),
    "migrate": ("mq migrate", "mq migrate --format json"),
    "get": ("get --decode rocketmq", None),  # (a group started on the store: get_peak)
}


def sizes_main(args) -> int:
    sizes = [int(x) for x in args.sizes.split(",")]
    wanted = ["check", "topics"] + ["messages"] * args.with_messages + ["consumers"] * args.with_consumers + \
        ["migrate"] * args.with_migrate + ["get"] * args.with_get
    if args.only:
        wanted = [w for w in wanted if w in args.only.split(",")] or args.only.split(",")
    work = args.dir or tempfile.mkdtemp(prefix="bench-mq-")
    results = []
    try:
        for n in sizes:
            root = os.path.join(work, f"store-{n}")
            if not os.path.isdir(root):
                log(f"writing {n:,} messages of {args.body} bytes")
                t = time.perf_counter()
                write_fast(root, n, args.body, args.topics)
                log(f"written in {time.perf_counter() - t:.0f} s")
            broker = resolve_broker(root)
            row = {"messages": n, "body": args.body}
            for what in wanted:
                log(f"{n:,}: {COMMANDS[what][0]}, peak memory of a child process")
                more = ()
                if what == "migrate":
                    dest = os.path.join(work, f"migrated-{n}")
                    more = (dest,)
                t = time.perf_counter()
                if what == "get":
                    row["get_anon"], row["get_hwm"], took = get_peak(root, n)
                else:
                    row[f"{what}_anon"], row[f"{what}_hwm"] = peak_memory(COMMANDS[what][1], root, n, *more)
                    took = time.perf_counter() - t
                row[f"{what}_rate"] = n / took
                if what == "migrate":
                    shutil.rmtree(dest, ignore_errors=True)
                log(f"{n:,}: {what}: peak RssAnon {row[what + '_anon'] / (1 << 20):.1f} MB, "
                    f"{row[what + '_rate']:,.0f} msgs/s")
            if args.repeat and {"check", "topics"} & set(wanted):
                log(f"{n:,}: in-process rates")
                row["check"] = n / best(lambda: check_broker(broker), args.repeat)
                row["topics"] = n / best(lambda: topic_rows(broker), args.repeat)
            if not args.no_whole:  # (today's path before issue 51, in the same run: the machine is shared)
                log(f"{n:,}: in-process rates of the whole-log path")
                row["check_whole"] = n / best(lambda: check.check_whole(broker), 1)
                row["topics_whole"] = n / best(lambda: check.topic_rows_whole(broker), 1)
            log(f"row {json.dumps(row)}")
            results.append(row)
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if args.dir is None and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(results))
        return 0
    mb = 1 << 20
    print(f"\n{args.topics} topics x {QUEUES} queues, {args.body}-byte bodies; peak RssAnon of each command in a "
          f"child process (rate: messages / the child's wall time)\n")
    print(f"{'command':<22}" + "".join(f"{r['messages']:>17,} msgs" for r in results)
          + ("   ratio  (largest / smallest)" if len(results) > 1 else ""))
    for what in wanted:
        cells = "".join(f"{r[what + '_anon'] / mb:>8.1f} MB {r[what + '_rate'] / 1e3:>6,.0f}k/s" for r in results)
        ratio = f"{results[-1][what + '_anon'] / results[0][what + '_anon']:>8.3f}" if len(results) > 1 else ""
        print(f"{COMMANDS[what][0]:<22}{cells}{ratio}")
    print(f"{'largest peak':<22}" + "".join(f"{max(r[w + '_anon'] for w in wanted) / mb:>8.1f} MB{'':>11}"
                                                for r in results))
    if any("check" in r for r in results):
        print(f"\nin this process, best of {args.repeat}:")
        for r in results:
            print(f"{r['messages']:>12,} check {r['check']:,.0f} msgs/s, topics {r['topics']:,.0f} msgs/s")
    for r in results:
        if "check_whole" in r:
            print(f"{r['messages']:>12,} whole-log path (before issue 51, same run): check {r['check_whole']:,.0f} "
                  f"msg/s, topics {r['topics_whole']:,.0f} msg/s")
    return 0


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
    from store.reading import open_lists
    from store.scan import FileScan, Run

    data, index = open_lists(node_dir, None, None)
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
    ap.add_argument("--sizes", default=None, help="memory mode: comma-separated store sizes (messages)")
    ap.add_argument("--keep", action="store_true", help="keep the stores written (with --sizes)")
    ap.add_argument("--no-whole", action="store_true", help="with --sizes: skip the whole-log path's rates")
    ap.add_argument("--with-consumers", action="store_true", help="with --sizes: also mq consumers' peak memory")
    ap.add_argument("--with-migrate", action="store_true",
                    help="with --sizes: also mq migrate's peak memory and rate (writes a copy of the store)")
    ap.add_argument("--with-messages", action="store_true",
                    help="with --sizes: also the peak memory of 'dledgerctl mq messages --format jsonl' (slow)")
    ap.add_argument("--with-get", action="store_true",
                    help="with --sizes: also 'get --decode rocketmq -f jsonl' of every entry from a one-member group "
                         "started on the store (run last: its leader appends a no-op entry)")
    ap.add_argument("--only", default=None, help="with --sizes: only these commands (comma-separated: check, "
                    "topics, messages, consumers, migrate, get), e.g. --only migrate --body 128")
    args = ap.parse_args(argv)
    if args.sizes:
        return sizes_main(args)
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
