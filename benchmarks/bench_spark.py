"""Spark audit speed: ``spark audit`` against ``store verify`` on the same node directories,
side by side in one run, with a ratio. Not a test: it measures and prints a table.

stores   3 node directories written by the project (``FileStore.append_leader``, batches of
         256 bodies of ``--body`` bytes, a new term every quarter), ``--node-mib`` MiB of
         entries each (default 720: about 2.1 GiB in all). Written twice: with data files
         of 1 GiB (DLedger's default; one file, one Spark task per node) and of 128 MiB
         (six files per node: more tasks, so Spark's cost per task shows); ``--file-mib``
         picks other sizes. Under ``--dir`` (default /tmp/dledgerctl-bench-spark), deleted
         at the end unless ``--keep``.
verify   ``store.verify.verify_store(node)`` -- what ``dledgerctl store verify`` runs, in
         process -- on the three directories one after another, full CRC checks.
audit    ``dledgerctl.pipeline.audit.audit_rows(spark, dirs)`` -- what ``dledgerctl spark
         audit`` runs and prints -- with ``--master`` (default local[2]; the machine this
         was written on has 2 cores) over the same three directories. Spark's start-up is timed on its
         own: starting the session, and a first audit of a small store (it starts the
         Python workers and warms the JVM up); both happen once per Spark application.
ratio    verify time / audit time over the same bytes = audit's throughput as a share of
         verify's (target: >= 0.5). Page cache warm for both (each side runs ``--rounds``
         times, interleaved; the best round counts; all rounds are printed).
memory   peak resident memory of each Python worker process of Spark while auditing all
         three nodes, and while auditing one node (a third of the data): anonymous memory
         (heap, Arrow batches) and file pages (the mapped data and index files). Bounded
         by a data file's batches, it does not grow with the store.

Usage: python benchmarks/bench_spark.py [--quick] [--keep] [--json] [--dir DIR]
``--quick``: 3 x 240 MiB, 2 rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:  # run from a checkout without the editable install
    sys.path.insert(0, ROOT)

from store.filestore import FileStore  # noqa: E402
from store.format import HEADER_SIZE, INDEX_UNIT_SIZE  # noqa: E402
from store.verify import verify_store  # noqa: E402

NODES = 3
MIB = 1 << 20


def write_stores(base: str, node_mib: int, file_mib: int, body: int) -> list[str]:
    """Three node directories of about ``node_mib`` MiB of entries each (kept if present
    and written with the same parameters)."""
    stamp = os.path.join(base, "PARAMS")
    want = json.dumps({"node_mib": node_mib, "file_mib": file_mib, "body": body})
    nodes = [os.path.join(base, f"dledger-n{i}") for i in range(NODES)]
    if os.path.exists(stamp) and open(stamp).read() == want and all(os.path.isdir(n) for n in nodes):
        return nodes
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    rng = random.Random(7)
    bodies = [rng.randbytes(body) for _ in range(256)]
    per_batch = 256 * (HEADER_SIZE + body)
    batches = max(1, node_mib * MIB // per_batch)
    index_size = INDEX_UNIT_SIZE * max(1024, (batches * 256 + 1023) // 1024 * 1024)
    for node in nodes:
        with FileStore.open(node, data_file_size=file_mib * MIB, index_file_size=min(index_size, 160 * MIB)) as s:
            for k in range(batches):
                s.append_leader(bodies, term=1 + 4 * k // batches)
            s.set_committed(s.end_index)
    small = os.path.join(base, "warmup", "dledger-w")
    with FileStore.open(small, data_file_size=4 * MIB, index_file_size=64 * 1024) as s:
        s.append_leader(bodies[:64], term=1)
    with open(stamp, "w") as fh:
        fh.write(want)
    return nodes


# --- memory of Spark's Python workers -------------------------------------------------------------

def _children(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = []
        try:
            tasks = os.listdir(f"/proc/{p}/task")  # children are listed by the thread that forked them
        except OSError:
            tasks = []
        for tid in tasks:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as fh:
                    kids.extend(int(x) for x in fh.read().split())
            except OSError:
                pass
        out.extend(kids)
        todo.extend(kids)
    return out


def _python_workers(jvm_pid: int) -> list[int]:
    pids = []
    for p in _children(jvm_pid):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if b"pyspark" in cmd or b"python" in cmd:
            pids.append(p)
    return pids


def _rss(pid: int, store_dir: str) -> tuple[int, int, int] | None:
    """(anonymous, file-backed, of which pages of files under ``store_dir``) resident bytes."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
        store = 0
        in_store = False
        with open(f"/proc/{pid}/smaps") as fh:
            for line in fh:
                if line[0] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
                    parts = line.split(None, 5)
                    in_store = len(parts) == 6 and parts[5].startswith(store_dir)
                elif in_store and line.startswith("Rss:"):
                    store += int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    anon = int(fields.get("RssAnon", "0 kB").split()[0]) * 1024
    filed = int(fields.get("RssFile", "0 kB").split()[0]) * 1024
    return anon, filed, store


class WorkerMemory:
    """Samples the Python workers of a Spark application every 20 ms while running."""

    def __init__(self, jvm_pid: int, store_dir: str) -> None:
        self.jvm_pid = jvm_pid
        self.store_dir = os.path.abspath(store_dir)
        self.peak: dict[int, tuple[int, int, int]] = {}  # pid -> (total, anon, file) at its peak
        self.store_peak = 0  # most resident pages of store files in one worker
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            for pid in _python_workers(self.jvm_pid):
                got = _rss(pid, self.store_dir)
                if not got:
                    continue
                self.store_peak = max(self.store_peak, got[2])
                if got[0] + got[1] > self.peak.get(pid, (0,))[0]:
                    self.peak[pid] = (got[0] + got[1], got[0], got[1])

    def __enter__(self) -> "WorkerMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        if not self.peak:
            return {"workers": 0, "peak_mib": None, "anon_mib": None, "file_mib": None, "store_pages_mib": None}
        top = max(self.peak.values())
        return {"workers": len(self.peak), "peak_mib": round(top[0] / MIB, 1),
                "anon_mib": round(max(v[1] for v in self.peak.values()) / MIB, 1),
                "file_mib": round(max(v[2] for v in self.peak.values()) / MIB, 1),
                "store_pages_mib": round(self.store_peak / MIB, 1)}


# --- the run --------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp/dledgerctl-bench-spark")
    ap.add_argument("--node-mib", type=int, default=720)
    ap.add_argument("--file-mib", default="1024,128", help="data file sizes to compare, MiB, comma-separated")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the stores for the next run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.node_mib, args.rounds = 240, 2
    sizes = [int(x) for x in str(args.file_mib).split(",") if x.strip()]
    try:
        stores = {}
        for fm in sizes:
            t = time.perf_counter()
            stores[fm] = (write_stores(os.path.join(args.dir, f"files-{fm}MiB"), args.node_mib, fm, args.body),
                          time.perf_counter() - t)
        return run(args, stores)
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)


def measure(args, spark, jvm_pid, nodes: list[str]) -> dict:
    """verify and audit over ``nodes``, interleaved rounds; worker memory."""
    from dledgerctl.pipeline import audit as audit_job

    verify_times, audit_times, reports, mem_all = [], [], None, None
    for _ in range(args.rounds):
        t = time.perf_counter()
        reports = [verify_store(n) for n in nodes]
        verify_times.append(time.perf_counter() - t)
        with WorkerMemory(jvm_pid, args.dir) as mem:
            t = time.perf_counter()
            rows = audit_job.audit_rows(spark, nodes)
            audit_times.append(time.perf_counter() - t)
        if mem_all is None or (mem.summary()["peak_mib"] or 0) > (mem_all["peak_mib"] or 0):
            mem_all = mem.summary()
        got = {r["node_dir"]: (r["verdict"], r["entries"], r["bytes"]) for r in rows}
        want = {os.path.abspath(rep.node_dir): ("ok" if rep.ok else "damaged", rep.entries, rep.bytes) for rep in reports}
        assert got == want, (got, want)
    with WorkerMemory(jvm_pid, args.dir) as mem:
        audit_job.audit_rows(spark, nodes[:1])
    return {
        "entries": sum(r.entries for r in reports), "bytes": sum(r.bytes for r in reports),
        "data_files": sum(r.data_files for r in reports),
        "verify_s": [round(x, 3) for x in verify_times], "audit_s": [round(x, 3) for x in audit_times],
        "ratio": round(min(verify_times) / min(audit_times), 2),
        "memory_all_nodes": mem_all, "memory_one_node": mem.summary(),
    }


def run(args, stores: dict) -> int:
    from dledgerctl.pipeline import audit as audit_job
    from dledgerctl.pipeline.session import start_session

    t = time.perf_counter()
    spark, _started = start_session(args.master, {"spark.sql.shuffle.partitions": "4"})
    start_s = time.perf_counter() - t
    jvm_pid = spark.sparkContext._gateway.proc.pid
    first = next(iter(stores.values()))[0]
    t = time.perf_counter()
    with WorkerMemory(jvm_pid, args.dir) as idle:
        audit_job.audit_rows(spark, [os.path.join(os.path.dirname(first[0]), "warmup")])
    warm_s = time.perf_counter() - t
    cases = {fm: measure(args, spark, jvm_pid, nodes) for fm, (nodes, _w) in stores.items()}
    spark.stop()
    result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "load_before": os.getloadavg()[0]},
              "master": args.master, "nodes": NODES, "body": args.body, "rounds": args.rounds,
              "spark_start_s": round(start_s, 2), "spark_first_job_s": round(warm_s, 2),
              "memory_after_first_job": idle.summary(), "target": 0.5,
              "cases": {f"{fm} MiB data files": c for fm, c in cases.items()}}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    c0 = next(iter(cases.values()))
    print(f"{NODES} nodes, {c0['entries']:,} entries of {args.body} B bodies, {c0['bytes'] / 2**30:.2f} GiB of entries; "
          f"page cache warm; best of {args.rounds} rounds; {args.master} on {os.cpu_count()} CPUs")
    print()
    print(f"{'data files':>16s}  {'case':34s} {'seconds':>8s} {'entries/s':>11s} {'MB/s':>7s} {'ratio':>6s}  target")
    for fm, c in cases.items():
        vbest, abest = min(c["verify_s"]), min(c["audit_s"])
        label = f"{c['data_files']} x {fm} MiB"
        print(f"{label:>16s}  {'store verify (3 dirs, one by one)':34s} {vbest:8.2f} {c['entries'] / vbest:11,.0f} "
              f"{c['bytes'] / 1e6 / vbest:7,.0f}")
        print(f"{'':>16s}  {'spark audit ' + args.master:34s} {abest:8.2f} {c['entries'] / abest:11,.0f} "
              f"{c['bytes'] / 1e6 / abest:7,.0f} {c['ratio']:6.2f}  >= 0.5 {'ok' if c['ratio'] >= 0.5 else 'MISSED'}")
    print()
    print(f"Spark start-up (once per application, not in the times above): session {start_s:.2f} s, "
          f"first job {warm_s:.2f} s (a 64-entry store: starts the Python workers, warms the JVM)")
    for fm, c in cases.items():
        print(f"rounds, {fm} MiB files (s): verify " + " ".join(f"{x:.2f}" for x in c["verify_s"])
              + " | audit " + " ".join(f"{x:.2f}" for x in c["audit_s"]))
    i = idle.summary()
    print(f"Python worker peak RSS after the first job: {i['peak_mib']} MiB (anonymous {i['anon_mib']} MiB)")
    for fm, c in cases.items():
        for label, m in (("3 nodes", c["memory_all_nodes"]), ("1 node", c["memory_one_node"])):
            print(f"Python worker peak RSS, {fm} MiB files, audit of {label}: {m['peak_mib']} MiB "
                  f"(anonymous {m['anon_mib']} MiB; file-backed {m['file_mib']} MiB, of which store pages "
                  f"{m['store_pages_mib']} MiB, the rest libraries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
