"""Store speed: the project and a reference side by side in one process, with ratios.

Not a test: it measures and prints a table (``--json`` for machine-readable results).

append   ``FileStore.open(dir, flush="async")`` + ``append_leader(batch, term=1)`` (batches of
         ``--batch`` bodies; "x256" rows) and single-entry ``append(body, 1)`` ("x1" rows),
         against the reference: raw ``mmap`` slice writes of the SAME entry bytes, encoded
         beforehand with ``store.format.encode_entry`` (outside the timed part), into files
         created the way the store creates them (ftruncate + posix_fallocate, same size,
         same names, BLANK padding at file ends). Both timed parts include creating and
         mapping their files; neither includes the final msync/close. The project also
         writes a 32-byte index record per entry; the reference writes data bytes only (it
         is the floor). The first round checks that the project's data files equal the
         reference's byte for byte (``--no-compare`` skips it; untimed). An informational
         second reference also faults pages in ahead with MADV_POPULATE_WRITE, as the store
         does.
verify   ``store.verify.verify_store(node_dir)`` (full CRC) over a store the project wrote,
         against the reference: a plain sequential read of the same data files in 8 MiB
         chunks with ``readinto`` plus ``zlib.crc32`` over every chunk. Page cache stays
         warm (nothing is dropped); each side runs twice and the best run counts (the
         second run is skipped when the first took longer than ``--repeat-limit`` s).
memory   peak RSS (getrusage ru_maxrss; the kernel's high-water mark is reset through
         /proc/self/clear_refs before each verify where allowed), and the peak anonymous
         and file-backed RSS sampled during verify (mapped data and index pages count as
         file-backed RSS: they are page cache, not heap). ``--memory-check`` also verifies
         a store twice the size and prints the growth.

Memory on VMs. Where the hypervisor takes back guest pages freed a few seconds ago
(virtio-balloon free page reporting), the first touch of a page costs several
microseconds -- at 64 KiB entries more than the copying itself, and it lands on whichever
side happens to need pages nobody freed just before. So before every timed append part
the script writes and deletes a ballast file as large as that part's page cache (untimed;
``--no-ballast`` turns it off), appends run in rounds (every side once per round) and the
best round of each side counts; the notes give the slowest/best ratio per side so a noisy
run is visible.

Rates: entries/s, and MB/s = 10^6 bytes/s of entry bytes (48-byte header + body); the
verify reference's MB/s counts all bytes read. Ratio = project / reference rate (for
verify: reference time / project time over the same files); 1.00 = as fast as the
reference, higher is better.

Usage: python benchmarks/bench_store.py [--quick] [--json] [--memory-check] [--dir DIR]
Default mode takes ~2-4 minutes on a 2-core machine; ``--quick`` about 30 s.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import mmap
import os
import platform
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:  # run from a checkout without the editable install
    sys.path.insert(0, ROOT)

from store.filestore import FileStore  # noqa: E402
from store.format import (  # noqa: E402
    BLANK_HEADER,
    BLANK_MAGIC,
    CHAIN_CRC_OFFSET,
    HEADER_SIZE,
    MIN_BLANK_LEN,
    encode_entry,
    file_name,
)
from store.verify import verify_store  # noqa: E402

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
READ_CHUNK = 8 * MiB
T0 = time.perf_counter()

TARGET_APPEND_1K_EPS = 300_000
TARGET_APPEND_64K_BPS = 1e9
TARGET_VERIFY_1K_RATIO = 0.5
TARGET_VERIFY_100_EPS = 1_000_000


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def human(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size and n % (size // 16) == 0:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def parse_size(text: str) -> int:
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    mult = {"k": KiB, "m": MiB, "g": GiB}.get(t[-1:], 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


# --- layout: the store's placement rule, without the store -----------------------------------
def entries_for(total: int, esize: int, fsize: int) -> int:
    """How many entries of ``esize`` bytes the store's layout places in ``total`` logical bytes
    (an entry goes to the next file when it plus an 8-byte BLANK does not fit)."""
    per_file = (fsize - MIN_BLANK_LEN) // esize
    full, rem = divmod(total, fsize)
    return full * per_file + max(0, min(per_file, (rem - MIN_BLANK_LEN) // esize))


def encode_all(body: bytes, n: int, fsize: int, term: int = 1) -> list[bytes]:
    """The n entries exactly as the store writes them (index, pos, chained CRCs)."""
    out = []
    chain = 0
    pos = 0
    esize = HEADER_SIZE + len(body)
    unpack_chain = struct.Struct(">i").unpack_from
    for i in range(n):
        rel = pos % fsize
        if esize + MIN_BLANK_LEN > fsize - rel:
            pos += fsize - rel
        enc = encode_entry(body, index=i, term=term, pos=pos, prev_chain=chain)
        chain = unpack_chain(enc, CHAIN_CRC_OFFSET)[0]
        out.append(enc)
        pos += esize
    return out


MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux >= 5.14


# --- reference writer -----------------------------------------------------------------------
def _ref_new_file(directory: str, start: int, fsize: int):
    path = os.path.join(directory, file_name(start))
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, fsize)
    os.posix_fallocate(fd, 0, fsize)
    return fd, mmap.mmap(fd, fsize)


def reference_append(directory: str, encoded: list[bytes], fsize: int, populate: bool = False) -> float:
    """Raw mmap slice writes of pre-encoded entries; returns seconds.

    ``populate``: also fault pages in ahead of the writer with MADV_POPULATE_WRITE, 8 MiB at
    a time, as the store does (a second, informational reference)."""
    os.makedirs(directory, exist_ok=True)
    maps = []
    blank = BLANK_HEADER.pack_into
    chunk = 8 * MiB
    t = time.perf_counter()
    start = 0
    fd, mm = _ref_new_file(directory, start, fsize)
    maps.append((fd, mm))
    rel = 0
    if populate:
        populated = 0
        for enc in encoded:
            size = len(enc)
            if size + MIN_BLANK_LEN > fsize - rel:
                blank(mm, rel, BLANK_MAGIC, fsize - rel)
                start += fsize
                fd, mm = _ref_new_file(directory, start, fsize)
                maps.append((fd, mm))
                rel = populated = 0
            if rel + size > populated:
                lo = populated - populated % mmap.PAGESIZE
                hi = min(fsize, max(rel + size, populated + chunk))
                mm.madvise(MADV_POPULATE_WRITE, lo, hi - lo)
                populated = hi
            mm[rel : rel + size] = enc
            rel += size
    else:
        for enc in encoded:
            size = len(enc)
            if size + MIN_BLANK_LEN > fsize - rel:
                blank(mm, rel, BLANK_MAGIC, fsize - rel)
                start += fsize
                fd, mm = _ref_new_file(directory, start, fsize)
                maps.append((fd, mm))
                rel = 0
            mm[rel : rel + size] = enc
            rel += size
    elapsed = time.perf_counter() - t
    for fd, mm in maps:
        mm.close()
        os.close(fd)
    return elapsed


def digest_data(directory: str, end_pos: int, fsize: int) -> list[tuple[str, int, int]]:
    """(name, bytes, crc32) of every data file up to logical ``end_pos``, to compare two sides."""
    out = []
    buf = bytearray(8 * MiB)
    view = memoryview(buf)
    for name in sorted(os.listdir(directory)):
        upto = max(0, min(fsize, end_pos - int(name)))
        crc = done = 0
        with open(os.path.join(directory, name), "rb", buffering=0) as fh:
            while done < upto:
                k = fh.readinto(view[: min(len(buf), upto - done)])
                if not k:
                    break
                crc = zlib.crc32(view[:k], crc)
                done += k
        out.append((name, done, crc))
    return out


def sync() -> None:
    """Write back dirty pages so one side's writeback does not land in the other's timing."""
    os.sync()


BALLAST_LOG: list[tuple[int, float]] = []


def prepare(directory: str, nbytes: int, enabled: bool = True) -> None:
    """Before a timed part: write back dirty pages, then write and delete a ballast file of
    ``nbytes`` so the timed part's page cache reuses just-freed, guest-backed pages (see the
    module notes on memory). The ballast is deleted before it is written back."""
    sync()
    if enabled and nbytes > 0:
        t = time.perf_counter()
        path = os.path.join(directory, "ballast")
        block = bytes(8 * MiB)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for _ in range(-(-nbytes // len(block))):
                os.write(fd, block)
        finally:
            os.close(fd)
            os.unlink(path)
        BALLAST_LOG.append((nbytes, time.perf_counter() - t))
    gc.collect()


# --- append -----------------------------------------------------------------------------------
def _project_batches(node_dir: str, body: bytes, n: int | None, seconds: float, args) -> tuple[float, int, int]:
    """append_leader in batches into a new store; returns (seconds, entries, end pos).

    ``n`` None: as many batches as fit in ``seconds``."""
    batch = args.batch
    full = [body] * batch
    store = FileStore.open(node_dir, flush="async", data_file_size=args.data_file_size)
    append_leader = store.append_leader
    if n is None:
        t = time.perf_counter()
        limit = t + seconds
        count = 0
        while True:
            append_leader(full, term=1)
            count += batch
            if count % (batch * 16) == 0 and time.perf_counter() >= limit:
                break
        elapsed = time.perf_counter() - t
        n = count
    else:
        calls, tail = divmod(n, batch)
        last = [body] * tail
        t = time.perf_counter()
        for _ in range(calls):
            append_leader(full, term=1)
        if tail:
            append_leader(last, term=1)
        elapsed = time.perf_counter() - t
    end_pos = store.write_pos
    if store.end_index != n - 1:
        raise AssertionError(f"store ends at index {store.end_index} after {n} appends")
    store.close()
    return elapsed, n, end_pos


def _project_single(node_dir: str, body: bytes, n: int, seconds: float, args) -> tuple[float, int]:
    """append() one entry per call, up to ``n`` entries or ``seconds``; returns (seconds, entries)."""
    store = FileStore.open(node_dir, flush="async", data_file_size=args.data_file_size)
    append = store.append
    count = 0
    t = time.perf_counter()
    limit = t + seconds
    while count < n:
        for _ in range(min(1024, n - count)):
            append(body, 1)
        count += min(1024, n - count)
        if time.perf_counter() >= limit:
            break
    elapsed = time.perf_counter() - t
    store.close()
    return elapsed, count


def bench_append(tmp: str, body_size: int, n: int | None, seconds: float, args) -> dict:
    """Batched append_leader, single-entry append and the reference(s), for one body size.

    ``n`` entries per run, or (``n`` None) as many as the project batch-appends in
    ``seconds`` in the first round (later rounds and the reference use that count).
    Each round runs every side once, deleting its files at once, so the next run's page
    cache reuses just-freed pages; the best round counts (see the module notes on memory).
    The first round also compares the project's data bytes with the reference's."""
    fsize = args.data_file_size
    esize = HEADER_SIZE + body_size
    body = os.urandom(body_size)
    case_dir = os.path.join(tmp, f"append-{body_size}")
    pdir = os.path.join(case_dir, "dledger-p")
    rdir = os.path.join(case_dir, "ref")
    sdir = os.path.join(case_dir, "dledger-s")
    encoded = encode_all(body, n, fsize) if n is not None else None
    os.makedirs(case_dir)
    ballast = not args.no_ballast
    # what one run maps: data + index records + the store's 8 MiB populate lookahead (x2 files)
    footprint = lambda count: count * (esize + 32) + 32 * MiB  # noqa: E731
    est = n if n is not None else int(seconds * 1_200_000)
    proj_t, ref_t, pop_t, single = [], [], [], []
    identical = None
    for rnd in range(args.rounds):
        prepare(case_dir, footprint(est), ballast)
        elapsed, n, end_pos = _project_batches(pdir, body, n, seconds, args)
        est = n
        proj_t.append(elapsed)
        if encoded is None:
            encoded = encode_all(body, n, fsize)
        pdigest = digest_data(os.path.join(pdir, "data"), end_pos, fsize) if rnd == 0 and not args.no_compare else None
        shutil.rmtree(pdir)

        prepare(case_dir, footprint(n), ballast)
        ref_t.append(reference_append(rdir, encoded, fsize))
        if pdigest is not None:
            rdigest = digest_data(rdir, end_pos, fsize)
            identical = pdigest == rdigest
            if not identical:
                log(f"WARNING append {body_size} B: project data files differ from the reference: "
                    f"{pdigest} vs {rdigest}")
        shutil.rmtree(rdir)

        if not args.no_populated_reference:
            prepare(case_dir, footprint(n), ballast)
            pop_t.append(reference_append(rdir, encoded, fsize, populate=True))
            shutil.rmtree(rdir)

        prepare(case_dir, footprint(min(n, int(args.single_seconds * 600_000))), ballast)
        single.append(_project_single(sdir, body, n, args.single_seconds, args))
        shutil.rmtree(sdir)
    del encoded
    shutil.rmtree(case_dir, ignore_errors=True)
    best_single = min(single, key=lambda st: st[0] / st[1])
    return {
        "body_size": body_size,
        "entry_size": esize,
        "batch": args.batch,
        "entries": n,
        "bytes": n * esize,
        "project_s": min(proj_t),
        "reference_s": min(ref_t),
        "reference_populate_s": min(pop_t) if pop_t else None,
        "single_entries": best_single[1],
        "single_s": best_single[0],
        "project_runs_s": proj_t,
        "reference_runs_s": ref_t,
        "reference_populate_runs_s": pop_t,
        "single_runs": [{"entries": c, "s": t} for t, c in single],
        "bytes_identical": identical,
    }


# --- verify ---------------------------------------------------------------------------------
def reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def proc_status() -> dict[str, int]:
    out = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                key, _, val = line.partition(":")
                if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                    out[key] = int(val.split()[0]) * 1024
    except OSError:
        pass
    return out


def maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class RssSampler:
    """Samples /proc/self/status every ``interval`` s in a thread; keeps the peaks."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.peak: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for k, v in proc_status().items():
                if v > self.peak.get(k, -1):
                    self.peak[k] = v
            self._stop.wait(self.interval)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        for k, v in proc_status().items():
            self.peak[k] = max(self.peak.get(k, -1), v)


def build_store(node_dir: str, body_size: int, total: int, args) -> tuple[int, int]:
    """A store written by the project (with CRCs); returns (entries, data bytes used)."""
    fsize = args.data_file_size
    esize = HEADER_SIZE + body_size
    n = entries_for(total, esize, fsize)
    body = os.urandom(body_size)
    store = FileStore.open(node_dir, flush="async", data_file_size=fsize)
    calls, tail = divmod(n, 1024)
    full = [body] * 1024
    for _ in range(calls):
        store.append_leader(full, term=1)
    if tail:
        store.append_leader([body] * tail, term=1)
    store.set_committed(store.end_index)
    store.close()
    return n, n * esize


def reference_verify(node_dir: str) -> tuple[int, int]:
    """Sequential read + zlib.crc32 of every data file; returns (bytes read, crc of last file)."""
    data = os.path.join(node_dir, "data")
    buf = bytearray(READ_CHUNK)
    view = memoryview(buf)
    total = 0
    crc = 0
    for name in sorted(os.listdir(data)):
        with open(os.path.join(data, name), "rb", buffering=0) as fh:
            crc = 0
            while k := fh.readinto(buf):
                crc = zlib.crc32(view[:k], crc)
                total += k
    return total, crc


def timed_runs(fn, limit: float, repeat: int):
    """Run fn up to ``repeat`` times (fewer when a run exceeds ``limit`` s); best time wins."""
    times = []
    result = None
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
        if times[-1] > limit:
            break
    return min(times), times, result


def bench_verify(tmp: str, body_size: int, total: int, args, name: str) -> dict:
    node = os.path.join(tmp, name, "dledger-v")
    log(f"verify {body_size} B: writing a {human(total)} store with the project")
    t = time.perf_counter()
    n, used = build_store(node, body_size, total, args)
    build_s = time.perf_counter() - t
    sync()  # the store is on disk and in page cache; no writeback during the timed runs
    file_bytes = sum(os.path.getsize(os.path.join(node, "data", f)) for f in os.listdir(os.path.join(node, "data")))

    log(f"verify {body_size} B: project verify_store over {n:,} entries")
    before = proc_status()
    reset_ok = reset_peak_rss()
    with RssSampler() as proj_mem:
        proj, proj_times, rep = timed_runs(lambda: verify_store(node), args.repeat_limit, args.repeat)
    proj_maxrss = maxrss_bytes()
    problems = [f"{p.code}: {p.message}" for p in rep.problems if p.severity == "error"][:3]
    if not rep.ok or rep.entries != n:
        log(f"WARNING verify {body_size} B: report ok={rep.ok} entries={rep.entries} (expected {n}) {problems}")

    log(f"verify {body_size} B: reference read+crc32 over {human(file_bytes)} of data files")
    reset_peak_rss()
    with RssSampler() as ref_mem:
        ref, ref_times, (read_bytes, _crc) = timed_runs(lambda: reference_verify(node), args.repeat_limit, args.repeat)
    ref_maxrss = maxrss_bytes()
    return {
        "node_dir": node,
        "body_size": body_size,
        "entry_size": HEADER_SIZE + body_size,
        "entries": n,
        "bytes": used,
        "file_bytes": file_bytes,
        "read_bytes": read_bytes,
        "build_s": build_s,
        "project_s": proj,
        "project_runs_s": proj_times,
        "reference_s": ref,
        "reference_runs_s": ref_times,
        "report_ok": rep.ok,
        "report_entries": rep.entries,
        "report_crc_checked": rep.crc_checked,
        "report_problems": problems,
        "rss_before": before.get("VmRSS"),
        "anon_before": before.get("RssAnon"),
        "peak_rss_reset": reset_ok,
        "project_peak_rss": proj_maxrss,
        "project_peak_anon": proj_mem.peak.get("RssAnon"),
        "project_peak_file": proj_mem.peak.get("RssFile"),
        "reference_peak_rss": ref_maxrss,
        "reference_peak_anon": ref_mem.peak.get("RssAnon"),
    }


def memory_check(tmp: str, args, base: dict) -> dict:
    """Verify a store twice the size of ``base`` (1 KiB entries); compare peak RSS."""
    node = os.path.join(tmp, "verify-2x", "dledger-v")
    total = 2 * args.verify_bytes
    log(f"memory check: writing a {human(total)} store with the project")
    n, used = build_store(node, 1024, total, args)
    sync()
    log(f"memory check: verify_store over {n:,} entries")
    before = proc_status()
    reset_peak_rss()
    with RssSampler() as mem:
        t = time.perf_counter()
        rep = verify_store(node)
        secs = time.perf_counter() - t
    peak = maxrss_bytes()
    shutil.rmtree(os.path.dirname(node))
    return {
        "entries": n,
        "bytes": used,
        "seconds": secs,
        "report_ok": rep.ok,
        "peak_rss": peak,
        "peak_anon": mem.peak.get("RssAnon"),
        "peak_file": mem.peak.get("RssFile"),
        "rss_before": before.get("VmRSS"),
        "base_peak_rss": base["project_peak_rss"],
        "base_peak_anon": base["project_peak_anon"],
        "base_rss_before": base["rss_before"],
        "growth_peak_rss": peak - base["project_peak_rss"],
        "growth_peak_anon": (mem.peak.get("RssAnon") or 0) - (base["project_peak_anon"] or 0),
    }


# --- output ---------------------------------------------------------------------------------
def rows_from(results: dict) -> list[dict]:
    rows = []
    for a in results["append"]:
        bs, esize = a["body_size"], a["entry_size"]
        ref_eps = a["entries"] / a["reference_s"]
        eps = a["entries"] / a["project_s"]
        target, status = "", None
        if bs == 1024:
            target, status = f">= {TARGET_APPEND_1K_EPS:,} e/s", eps >= TARGET_APPEND_1K_EPS
        elif bs == 65536:
            target, status = f">= {TARGET_APPEND_64K_BPS / 1e9:g} GB/s", eps * esize >= TARGET_APPEND_64K_BPS
        rows.append(dict(case=f"append {bs} B x{a['batch']}", kind="append", body_size=bs,
                         entries=a["entries"], project_eps=eps, project_mbps=eps * esize / 1e6,
                         reference_eps=ref_eps, reference_mbps=ref_eps * esize / 1e6,
                         ratio=eps / ref_eps, target=target, met=status))
        seps = a["single_entries"] / a["single_s"]
        rows.append(dict(case=f"append {bs} B x1", kind="append-single", body_size=bs,
                         entries=a["single_entries"], project_eps=seps, project_mbps=seps * esize / 1e6,
                         reference_eps=ref_eps, reference_mbps=ref_eps * esize / 1e6,
                         ratio=seps / ref_eps, target="", met=None))
    for v in results["verify"]:
        bs, n = v["body_size"], v["entries"]
        eps = n / v["project_s"]
        ref_eps = n / v["reference_s"]  # the same files hold the same entries
        ratio = v["reference_s"] / v["project_s"]
        if bs == 1024:
            target, status = f"ratio >= {TARGET_VERIFY_1K_RATIO}", ratio >= TARGET_VERIFY_1K_RATIO
        elif bs == 100:
            target, status = f">= {TARGET_VERIFY_100_EPS:,} e/s", eps >= TARGET_VERIFY_100_EPS
        else:
            target, status = "", None
        rows.append(dict(case=f"verify {bs} B", kind="verify", body_size=bs, entries=n,
                         project_eps=eps, project_mbps=v["bytes"] / v["project_s"] / 1e6,
                         reference_eps=ref_eps, reference_mbps=v["read_bytes"] / v["reference_s"] / 1e6,
                         ratio=ratio, target=target, met=status))
    return rows


def fmt_mb(n) -> str:
    return "-" if n is None else f"{n / MiB:,.0f} MiB"


def render(results: dict) -> str:
    rows = rows_from(results)
    head = ("case", "entries", "project e/s", "MB/s", "reference e/s", "MB/s", "ratio", "target", "")
    table = [head]
    for r in rows:
        met = "" if r["met"] is None else ("ok" if r["met"] else "MISSED")
        table.append((r["case"], f"{r['entries']:,}", f"{r['project_eps']:,.0f}", f"{r['project_mbps']:,.0f}",
                      f"{r['reference_eps']:,.0f}", f"{r['reference_mbps']:,.0f}", f"{r['ratio']:.2f}",
                      r["target"], met))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    left = {0, 7, 8}
    lines = []
    for k, row in enumerate(table):
        cells = [str(c).ljust(w) if i in left else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    cfg = results["config"]
    lines.append("")
    if results["append"]:
        lines.append(f"append: reference = raw mmap slice writes of the same encoded entries ({human(cfg['data_file_size'])} "
                     f"files, ftruncate+posix_fallocate); x{cfg['batch']} = append_leader batches, x1 = append(); "
                     f"byte-identical: {', '.join(str(a['bytes_identical']) for a in results['append'])}")
    if results["verify"]:
        lines.append("verify: reference = readinto 8 MiB + zlib.crc32 over the same data files; ratio = reference time / "
                     "project time; runs (project/reference): " + ", ".join(
                         f"{len(v['project_runs_s'])}/{len(v['reference_runs_s'])}" for v in results["verify"]))
    pops = [a for a in results["append"] if a.get("reference_populate_s")]
    if pops:
        lines.append("append, reference with MADV_POPULATE_WRITE ahead as the store does (informational): " + "; ".join(
            f"{a['body_size']} B {a['entries'] / a['reference_populate_s']:,.0f} e/s "
            f"{a['bytes'] / a['reference_populate_s'] / 1e6:,.0f} MB/s (project/that {a['reference_populate_s'] / a['project_s']:.2f})"
            for a in pops))
    spread = []
    for a in results["append"]:
        p, r = a["project_runs_s"], a["reference_runs_s"]
        spread.append(f"{a['body_size']} B {min(p) / max(p):.2f}/{min(r) / max(r):.2f}")
    if results["append"]:
        b = results.get("ballast")
        lines.append(f"append: best of {cfg['rounds']} rounds; slowest/best round, project/reference: " + ", ".join(spread)
                     + (f"; ballast before each timed part: {b['files']} files, {b['bytes'] / GiB:.1f} GiB, "
                        f"{b['seconds']:.0f} s" if b else "; no ballast"))
    for v in results["verify"]:
        lines.append(f"memory after verify {v['body_size']} B ({human(v['file_bytes'])} of data files): "
                     f"peak RSS {fmt_mb(v['project_peak_rss'])} (RSS before {fmt_mb(v['rss_before'])}; "
                     f"peak anon {fmt_mb(v['project_peak_anon'])}, peak file-backed {fmt_mb(v['project_peak_file'])}); "
                     f"reference peak RSS {fmt_mb(v['reference_peak_rss'])}")
    if not all(v["peak_rss_reset"] for v in results["verify"]):
        lines.append("  (peak RSS could not be reset before verify: ru_maxrss is the process-wide peak)")
    m = results.get("memory_check")
    if m:
        lines.append(f"memory check: verify of a {m['bytes'] / GiB:.2f} GiB store (2x): peak RSS {fmt_mb(m['peak_rss'])} vs {fmt_mb(m['base_peak_rss'])} (growth "
                     f"{fmt_mb(m['growth_peak_rss'])}); peak anon {fmt_mb(m['peak_anon'])} vs "
                     f"{fmt_mb(m['base_peak_anon'])} (growth {fmt_mb(m['growth_peak_anon'])})")
    env = results["env"]
    lines.append(f"machine: {env['cpus']} CPUs {env['cpu']}, Linux {env['kernel']}, Python {env['python']}, "
                 f"{env['fs']} at {env['tmp']}; store {env['git_head']} (store/ sources sha1 {env['store_sha1']}"
                 f"{', uncommitted changes' if env['store_dirty'] else ''}); total {results['total_s']:.0f} s"
                 f"{' (--quick)' if cfg['quick'] else ''}")
    return "\n".join(lines)


def environment(tmp: str) -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((l.split(":", 1)[1].strip() for l in fh if l.startswith("model name")), "")
    except OSError:
        pass
    fs = "?"
    try:
        best = ""
        with open("/proc/mounts") as fh:
            for line in fh:
                parts = line.split()
                if tmp.startswith(parts[1]) and len(parts[1]) >= len(best):
                    best, fs = parts[1], parts[2]
    except OSError:
        pass
    h = hashlib.sha1()
    sdir = os.path.join(ROOT, "store")
    for name in sorted(os.listdir(sdir)):
        if name.endswith(".py"):
            with open(os.path.join(sdir, name), "rb") as fh:
                h.update(name.encode() + b"\0" + fh.read())

    def git(*a):
        try:
            return subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None

    head = git("rev-parse", "--short", "HEAD")
    dirty = git("diff", "--quiet", "HEAD", "--", "store")
    try:
        import isal  # noqa: F401
        isal_v = getattr(isal, "__version__", "yes")
    except ImportError:
        isal_v = None
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "isal": isal_v,
        "fs": fs,
        "tmp": tmp,
        "git_head": head.stdout.strip() if head and head.returncode == 0 else "?",
        "store_dirty": bool(dirty and dirty.returncode == 1),
        "store_sha1": h.hexdigest()[:12],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, about 30 s")
    ap.add_argument("--json", action="store_true", help="print machine-readable results instead of the table")
    ap.add_argument("--save", metavar="FILE", help="also write the JSON results to FILE")
    ap.add_argument("--dir", default=None, help="parent of the temporary directory (default: /tmp)")
    ap.add_argument("--append-bytes", type=parse_size, default=None,
                    help="data per append run for 1 KiB and 64 KiB bodies (default 1 GiB; quick 256 MiB)")
    ap.add_argument("--small-seconds", type=float, default=None,
                    help="how long the project batch-appends 100 B bodies in the first round (default 2; quick 1)")
    ap.add_argument("--single-seconds", type=float, default=None,
                    help="time bound for each single-entry append() run (default 1.5; quick 0.5)")
    ap.add_argument("--batch", type=int, default=256, help="bodies per append_leader call (default 256)")
    ap.add_argument("--verify-bytes", type=parse_size, default=None,
                    help="size of each verify store, 1 KiB and 100 B entries (default 1 GiB; quick 256 MiB)")
    ap.add_argument("--data-file-size", type=parse_size, default=None,
                    help="data file size for both sides (default 1 GiB, the store's default; quick 256 MiB)")
    ap.add_argument("--repeat", type=int, default=2, help="verify runs per side, best counts (default 2)")
    ap.add_argument("--repeat-limit", type=float, default=None,
                    help="skip further verify runs of a side once one took longer than this (default 40 s)")
    ap.add_argument("--memory-check", action="store_true",
                    help="also verify a store twice --verify-bytes and print the peak RSS growth")
    ap.add_argument("--no-compare", action="store_true", help="skip the byte comparison of project and reference files")
    ap.add_argument("--no-populated-reference", action="store_true",
                    help="skip the informational second append reference (with MADV_POPULATE_WRITE)")
    ap.add_argument("--no-ballast", action="store_true",
                    help="do not write and delete a ballast file before each timed append part")
    ap.add_argument("--rounds", type=int, default=None,
                    help="append rounds (every side once per round), best counts (default 3; quick 2)")
    ap.add_argument("--cases", default="append,verify", help="comma list of append,verify (default both)")
    args = ap.parse_args(argv)

    q = args.quick
    if args.append_bytes is None:
        args.append_bytes = 256 * MiB if q else 1 * GiB
    if args.small_seconds is None:
        args.small_seconds = 1.0 if q else 2.0
    if args.single_seconds is None:
        args.single_seconds = 0.5 if q else 1.5
    if args.verify_bytes is None:
        args.verify_bytes = 256 * MiB if q else 1 * GiB
    if args.data_file_size is None:
        args.data_file_size = 256 * MiB if q else 1 * GiB
    if args.rounds is None:
        args.rounds = 2 if q else 3
    if args.repeat_limit is None:
        args.repeat_limit = 10.0 if q else 40.0
    cases = {c.strip() for c in args.cases.split(",") if c.strip()}
    if not cases or cases - {"append", "verify"}:
        ap.error(f"--cases takes append and/or verify, not {args.cases!r}")
    if args.rounds < 1 or args.repeat < 1 or args.batch < 1:
        ap.error("--rounds, --repeat and --batch must be at least 1")

    parent = args.dir or "/tmp"
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="bench_store.", dir=parent)
    need = max(2 * args.append_bytes, 2 * args.verify_bytes * (2 if args.memory_check else 1)) + 2 * args.data_file_size
    free = shutil.disk_usage(tmp).free
    if free < need:
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"Error: {tmp}: {human(free)} free, the run needs about {human(need)}", file=sys.stderr)
        return 1

    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    results: dict = {
        "config": {
            "quick": q, "append_bytes": args.append_bytes, "small_seconds": args.small_seconds,
            "single_seconds": args.single_seconds, "batch": args.batch, "verify_bytes": args.verify_bytes,
            "data_file_size": args.data_file_size, "repeat": args.repeat, "repeat_limit": args.repeat_limit,
            "rounds": args.rounds, "ballast": not args.no_ballast,
        },
        "env": environment(tmp),
        "append": [],
        "verify": [],
    }
    try:
        if "append" in cases:
            for bs in (100, 1024, 65536):
                esize = HEADER_SIZE + bs
                n = None if bs == 100 else entries_for(args.append_bytes, esize, args.data_file_size)
                log(f"append {bs} B: " + (f"{args.small_seconds:g} s of batches" if n is None else f"{n:,} entries"))
                a = bench_append(tmp, bs, n, args.small_seconds, args)
                results["append"].append(a)
                log(f"append {bs} B: project {a['entries'] / a['project_s']:,.0f} e/s, reference "
                    f"{a['entries'] / a['reference_s']:,.0f} e/s, single {a['single_entries'] / a['single_s']:,.0f} e/s")
        if "verify" in cases:
            for bs in (1024, 100):
                v = bench_verify(tmp, bs, args.verify_bytes, args, f"verify-{bs}")
                results["verify"].append(v)
                log(f"verify {bs} B: project {v['entries'] / v['project_s']:,.0f} e/s "
                    f"({', '.join(f'{t:.2f}' for t in v['project_runs_s'])} s), reference "
                    f"{', '.join(f'{t:.2f}' for t in v['reference_runs_s'])} s")
                shutil.rmtree(os.path.dirname(v["node_dir"]))
                if args.memory_check and bs == 1024:  # right after its 1x run, same process history
                    results["memory_check"] = memory_check(tmp, args, v)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if BALLAST_LOG:
        results["ballast"] = {"files": len(BALLAST_LOG), "bytes": sum(b for b, _ in BALLAST_LOG),
                              "seconds": sum(t for _, t in BALLAST_LOG), "log": BALLAST_LOG}
    results["total_s"] = time.perf_counter() - T0
    results["rows"] = rows_from(results)
    if args.save:
        with open(args.save, "w") as fh:
            json.dump(results, fh, indent=2, default=str)
    if args.json:
        json.dump(results, sys.stdout, indent=2, default=str)
        print()
    else:
        print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
