"""The byte paths a replicated entry takes, each against the zero-copy way it could take instead.

Not a test: it measures and prints a table (``--json`` for machine-readable results).

A dledgerctl push moves the leader's data-file bytes to a follower over loopback TCP on this
machine, and the follower writes them into its own data file. Two zero-copy ways exist for
those steps (issue 63), and this script measures each against the way the nodes take now, in
alternating rounds, on the machine at hand, in chunks of ``--chunk`` bytes (default 400 KiB:
what one push carried in a 16 x 64-entry bench_cluster run):

send       the leader writes a push from memory (``socket.send``; a node's writev) to a
           reader process on 127.0.0.1 (``recv_into`` a 1 MiB buffer);
sendfile   the same bytes sent from the file in the page cache (``os.sendfile``): no copy
           from user memory on the sender's side;
pwrite     a follower writes what it received into a new data file (``os.pwrite``);
mmap       the same bytes copied into a shared mapping of the file (the file made as a node
           makes it: its full size with ``ftruncate``), as receiving into a mapped data
           file would; each new page is a page fault.

Per way, the median round: CPU seconds per GiB of the sender and of the receiver (for the
socket ways) or of the writer; ratio = zero-copy / current (above 1: the zero-copy way costs
more here).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import socket
import statistics
import sys
import tempfile
import time

GIB = 1 << 30


def _socket_round(way: str, path: str, chunk: int, total: int) -> tuple[float, float]:
    """(sender CPU s, receiver CPU s) to move ``total`` bytes of ``path`` over loopback TCP."""
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    data = memoryview(os.pread(fd, size, 0))
    srv = socket.create_server(("127.0.0.1", 0))
    addr = srv.getsockname()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the reader: its CPU time back through the pipe
        try:
            srv.close()
            conn = socket.create_connection(addr)
            buf = memoryview(bytearray(1 << 20))
            got, t0 = 0, time.process_time()
            while got < total:
                n = conn.recv_into(buf)
                if not n:
                    break
                got += n
            os.write(w, f"{time.process_time() - t0}".encode())
        finally:
            os._exit(0)
    os.close(w)
    conn, _ = srv.accept()
    srv.close()
    sent, off, sfd = 0, 0, conn.fileno()
    t0 = time.process_time()
    while sent < total:
        if off + chunk > size:
            off = 0
        n = conn.send(data[off:off + chunk]) if way == "send" else os.sendfile(sfd, fd, off, chunk)
        sent, off = sent + n, off + n
    sender = time.process_time() - t0
    conn.close()
    with os.fdopen(r, "rb") as fh:
        receiver = float(fh.read() or "nan")
    os.waitpid(pid, 0)
    os.close(fd)
    return sender, receiver


def _write_round(way: str, directory: str, chunk: int, total: int) -> float:
    """Writer CPU s to put ``total`` bytes into a new file of that size, ``chunk`` at a time."""
    path = os.path.join(directory, f"write-{way}")
    src = memoryview(os.urandom(chunk))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, total)
        t0 = time.process_time()
        off = 0
        if way == "pwrite":
            while off + chunk <= total:
                off += os.pwrite(fd, src, off)
        else:
            with mmap.mmap(fd, total) as m:
                while off + chunk <= total:
                    m[off:off + chunk] = src
                    off += chunk
        return time.process_time() - t0
    finally:
        os.close(fd)
        os.unlink(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunk", type=int, default=400 << 10, help="bytes per send or write (default 400 KiB)")
    ap.add_argument("--gib", type=float, default=2.0, help="GiB moved per way and round (default 2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the files go (default: the system's temporary directory)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    total = int(args.gib * GIB)
    out: dict[str, list] = {w: [] for w in ("send", "sendfile", "pwrite", "mmap")}
    with tempfile.TemporaryDirectory(prefix="bench_copies.", dir=args.dir) as tmp:
        source = os.path.join(tmp, "source")
        with open(source, "wb") as fh:
            fh.write(os.urandom(64 << 20))
        for rnd in range(args.rounds):
            order = ("send", "sendfile") if rnd % 2 == 0 else ("sendfile", "send")
            for way in order:
                out[way].append(_socket_round(way, source, args.chunk, total))
            for way in (("pwrite", "mmap") if rnd % 2 == 0 else ("mmap", "pwrite")):
                out[way].append(_write_round(way, tmp, args.chunk, total))
                os.sync()
            print(f"round {rnd + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    per_gib = total / GIB
    med = {w: (statistics.median(s for s, _ in v) / per_gib, statistics.median(r for _, r in v) / per_gib)
           if w in ("send", "sendfile") else statistics.median(v) / per_gib for w, v in out.items()}
    if args.json:
        print(json.dumps({"chunk": args.chunk, "gib": args.gib, "rounds": args.rounds, "cpu_s_per_gib": med}))
        return 0
    print(f"CPU seconds per GiB, median of {args.rounds} rounds of {args.gib:g} GiB in {args.chunk:,}-byte chunks")
    print(f"{'way':<10}{'sender':>9}{'receiver':>10}")
    for w in ("send", "sendfile"):
        print(f"{w:<10}{med[w][0]:>9.3f}{med[w][1]:>10.3f}")
    print(f"sendfile / send: sender {med['sendfile'][0] / med['send'][0]:.2f}, "
          f"receiver {med['sendfile'][1] / med['send'][1]:.2f}")
    print(f"{'way':<10}{'writer':>9}")
    for w in ("pwrite", "mmap"):
        print(f"{w:<10}{med[w]:>9.3f}")
    print(f"mmap / pwrite: {med['mmap'] / med['pwrite']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
