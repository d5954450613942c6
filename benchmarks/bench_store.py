"""Store speed, project vs reference side by side in one process; prints ratios.

append: FileStore.append_leader (batches of 256) vs raw mmap slice writes of the same
pre-encoded bytes into a preallocated file.  verify: verify_store (full CRC) vs sequential
read + zlib.crc32 of the same data files.  Usage: python benchmarks/bench_store.py [--quick]
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import tempfile
import time
import zlib

from store.filestore import FileStore
from store.format import encode_entry
from store.verify import verify_store


def bench_append(tmp, body_size, total):
    n = max(256, total // (body_size + 48)) // 256 * 256
    body = os.urandom(body_size)
    s = FileStore.open(os.path.join(tmp, f"a{body_size}"))
    t = time.perf_counter()
    for _ in range(n // 256):
        s.append_leader([body] * 256, term=1)
    proj = time.perf_counter() - t
    s.close()
    shutil.rmtree(os.path.join(tmp, f"a{body_size}"))
    enc = encode_entry(body, index=0, term=1, pos=0)
    size = 1 << 30
    path = os.path.join(tmp, "ref")
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.posix_fallocate(fd, 0, size)
    mm = mmap.mmap(fd, size)
    t = time.perf_counter()
    off = 0
    for _ in range(n):
        if off + len(enc) > size:
            off = 0
        mm[off : off + len(enc)] = enc
        off += len(enc)
    ref = time.perf_counter() - t
    mm.close(); os.close(fd); os.unlink(path)
    return n, proj, ref


def bench_verify(tmp, body_size, total):
    node = os.path.join(tmp, f"v{body_size}", "dledger-n0")
    s = FileStore.open(node)
    body = os.urandom(body_size)
    n = max(256, total // (body_size + 48)) // 256 * 256
    for _ in range(n // 256):
        s.append_leader([body] * 256, term=1)
    s.close()
    t = time.perf_counter()
    rep = verify_store(node)
    proj = time.perf_counter() - t
    assert rep.ok and rep.entries == n
    buf = bytearray(8 << 20)
    t = time.perf_counter()
    nbytes = 0
    for name in sorted(os.listdir(os.path.join(node, "data"))):
        with open(os.path.join(node, "data", name), "rb") as fh:
            c = 0
            while k := fh.readinto(buf):
                c = zlib.crc32(memoryview(buf)[:k], c)
                nbytes += k
    ref = time.perf_counter() - t
    shutil.rmtree(os.path.dirname(node))
    return n, rep.bytes, nbytes, proj, ref


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(dir=a.dir)
    big = (256 << 20) if a.quick else (1 << 30)
    try:
        print(f"{'case':24} {'project':>22} {'reference':>22} {'ratio':>6}  target")
        for bs, tot, target in ((100, big // 8, ""), (1024, big, ">= 300,000 entries/s"), (65536, big, ">= 1 GB/s")):
            n, p, r = bench_append(tmp, bs, tot)
            mb = n * (bs + 48) / 1e6
            print(f"append {bs:>6} B bodies  {n / p:>10,.0f} e/s {mb / p:>6,.0f} MB/s {n / r:>10,.0f} e/s {mb / r:>6,.0f} MB/s"
                  f" {r / p:>6.2f}  {target}")
        for bs, target in ((1024, "ratio >= 0.5"), (100, ">= 1,000,000 entries/s")):
            n, used, nbytes, p, r = bench_verify(tmp, bs, big if bs == 1024 else big // 4)
            print(f"verify {bs:>6} B entries {n / p:>10,.0f} e/s {used / p / 1e6:>6,.0f} MB/s {'read+crc32':>14} "
                  f"{nbytes / r / 1e6:>6,.0f} MB/s {(used / p) / (nbytes / r):>6.2f}  {target}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
