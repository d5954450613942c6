#!/usr/bin/env python3
"""The same bytes without Raft: what a replicated append costs this machine below any log.

A three-process relay on 127.0.0.1 moves exactly the bytes a dledgerctl group moves for
1 KiB entries (issue 63's "loopback throughput measured alone with the same byte volume"),
and does nothing else:

- the load generator: N clients, each sending its next request of B entries (1,024-byte
  bodies, 48-byte headers: the on-disk size, 1,072 bytes each) as soon as the previous one
  is answered, each on a connection of its own;
- the "leader": takes every complete client request of one event-loop iteration, writes
  them with one ``pwritev`` to its data file and sends them with one ``writelines`` to each
  "follower"; answers a client once one follower has acknowledged its bytes (a majority
  of three);
- the "followers": write what each read returns at once (one ``pwritev``), and
  acknowledge the last push a read completes.

No member copies a byte in its own memory: what a read returns is written, checksummed
and sent from where it lies.

Data files are sparse 512 MiB files, rolled as the members' are; a thread in each member
fdatasyncs its file every 10 ms (flush=async's periodic flush). With ``--crc`` each member
also computes the CRC-32 of every byte it writes, with the store's compiled CRC
(store/_lanes.c, the one the members use): the body checksum a leader records and a follower
checks. No entry is framed, parsed, indexed or checked otherwise, and no Raft state is kept.
The event loop is uvloop's when installed, as the members' is.

What this prints is a floor made of kernel work (loopback TCP, page-cache writes, writeback,
wakeups) and the least Python an asyncio member can have per request: the rate of
replicated 1 KiB appends this machine allows before any log is kept, and the CPU each
process spends per entry at it, to set beside bench_cluster.py's figures for the same cases
(bench_cluster.py runs it in the same run).

Usage: python benchmarks/bench_floor.py [--seconds 5] [--crc] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ENTRY = 1072  # 48-byte header + 1 KiB body: an entry as it lies in a data file
FILE_SIZE = 512 << 20
CASES = [(16, 64), (16, 256)]
HEAD = struct.Struct(">IQ")  # leader -> follower: length of what follows the sequence number, sequence number
ACK = struct.Struct(">Q")
CLIENT = struct.Struct(">I")


def _loop_policy() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


class DataFile:
    """Sparse FILE_SIZE files in ``directory``, written in order and rolled when full, and
    a thread that fdatasyncs the current one every 10 ms; ``crc``: each write's bytes are
    also checksummed."""

    def __init__(self, directory: str, crc: bool) -> None:
        os.makedirs(directory, exist_ok=True)
        self.directory, self.n, self.fd, self.off = directory, 0, -1, FILE_SIZE
        self.crc = None
        if crc:
            from store import _lanes
            self.crc = _lanes.crc32
        self.lock = threading.Lock()
        threading.Thread(target=self._syncer, daemon=True).start()

    def write(self, parts: list, size: int) -> None:
        """``parts`` (buffers, ``size`` bytes in all) with one pwritev (a few for many parts)."""
        if self.crc is not None:
            for p in parts:
                self.crc(p)
        if self.off + size > FILE_SIZE:
            fd = os.open(os.path.join(self.directory, f"{self.n:020d}"), os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fd, FILE_SIZE)
            with self.lock:
                old, self.fd, self.off, self.n = self.fd, fd, 0, self.n + 1
            if old >= 0:
                os.close(old)
                os.unlink(os.path.join(self.directory, f"{self.n - 2:020d}"))
        for i in range(0, len(parts), 1024):  # (IOV_MAX)
            self.off += os.pwritev(self.fd, parts[i:i + 1024], self.off)

    def _syncer(self) -> None:
        while True:  # (a daemon thread: it ends with the member)
            time.sleep(0.01)
            with self.lock:
                fd = os.dup(self.fd) if self.fd >= 0 else -1
            if fd >= 0:
                os.fdatasync(fd)
                os.close(fd)


class _Frames:
    """Length-prefixed frames (``head``: its first field is the length of what follows it)
    cut from a stream's chunks without copying their bytes."""

    def __init__(self, head: struct.Struct) -> None:
        self.head, self.hbuf = head, bytearray()
        self.fields: tuple | None = None  # the head of the frame being read
        self.left = 0  # its bytes still to come
        self.parts: list = []  # (feed) its bytes read so far

    def feed(self, chunk: bytes) -> list[tuple]:
        """The frames this chunk completes: (the head's fields, views of their bytes)."""
        out = []
        for item in self._cut(chunk):
            if isinstance(item, tuple):
                out.append((item, self.parts))
                self.parts = []
            else:
                self.parts.append(item)
        return out

    def stream(self, chunk: bytes) -> tuple[list, list]:
        """(views of the frame bytes in this chunk, in order; the heads of the frames it
        ends): for a reader that takes each byte as it comes."""
        items = self._cut(chunk)
        return [v for v in items if not isinstance(v, tuple)], [f for f in items if isinstance(f, tuple)]

    def _cut(self, chunk: bytes) -> list:
        """In stream order: a view of frame bytes, or a head's fields where its frame ends."""
        out, mv, at, n = [], memoryview(chunk), 0, len(chunk)
        while at < n:
            if self.fields is None:
                take = min(self.head.size - len(self.hbuf), n - at)
                self.hbuf += mv[at:at + take]
                at += take
                if len(self.hbuf) < self.head.size:
                    break
                self.fields = self.head.unpack(self.hbuf)
                self.hbuf.clear()
                self.left = self.fields[0]
            take = min(self.left, n - at)
            if take:
                out.append(mv[at:at + take])
                at += take
                self.left -= take
            if self.left == 0:
                out.append(self.fields)
                self.fields = None
        return out


# -- the members ----------------------------------------------------------------------------

class _Conn(asyncio.Protocol):
    """A connection that keeps its transport."""

    def connection_made(self, transport) -> None:
        self.transport = transport


class _Follower(_Conn):
    def __init__(self, data: DataFile) -> None:
        self.data, self.frames = data, _Frames(HEAD)

    def data_received(self, chunk: bytes) -> None:
        views, ended = self.frames.stream(chunk)
        if views:
            self.data.write(views, sum(len(v) for v in views))
        if ended:
            self.transport.write(ACK.pack(ended[-1][1]))


class _Leader:
    """What the client connections and the follower links share: the requests of this
    loop iteration, the clients waiting per sequence number, the highest acknowledged."""

    def __init__(self, data: DataFile) -> None:
        self.data, self.links = data, []
        self.pending: list = []  # (client transport, request size, its parts) of this iteration
        self.waiting: list = []  # (seq, [client transports]) in order
        self.seq = self.acked = 0
        self.loop = asyncio.get_running_loop()

    def take(self, client, size: int, parts: list) -> None:
        if not self.pending:
            self.loop.call_soon(self.flush)
        self.pending.append((client, size, parts))

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        parts = [p for _c, _n, ps in pending for p in ps]
        size = sum(n for _c, n, _ps in pending)
        self.data.write(parts, size)
        self.seq += 1
        head = HEAD.pack(size, self.seq)
        for link in self.links:
            link.transport.writelines([head, *parts])
        self.waiting.append((self.seq, [c for c, _n, _ps in pending]))

    def ack(self, seq: int) -> None:
        if seq <= self.acked:
            return
        self.acked = seq
        done = 0
        for s, clients in self.waiting:
            if s > seq:
                break
            for c in clients:
                c.write(b"\0\0\0\0")
            done += 1
        del self.waiting[:done]


class _Link(_Conn):
    def __init__(self, leader: _Leader) -> None:
        self.leader, self.buf = leader, bytearray()

    def data_received(self, chunk: bytes) -> None:
        self.buf += chunk
        k = len(self.buf) // ACK.size
        if k:
            self.leader.ack(ACK.unpack_from(self.buf, (k - 1) * ACK.size)[0])
            del self.buf[:k * ACK.size]


class _ClientConn(_Conn):
    def __init__(self, leader: _Leader) -> None:
        self.leader, self.frames = leader, _Frames(CLIENT)

    def data_received(self, chunk: bytes) -> None:
        for (n,), parts in self.frames.feed(chunk):
            self.leader.take(self.transport, n, parts)


async def _serve(role: str, port: int, followers: list[int], directory: str, crc: bool) -> None:
    loop = asyncio.get_running_loop()
    data = DataFile(directory, crc)
    if role == "follower":
        server = await loop.create_server(lambda: _Follower(data), "127.0.0.1", port)
    else:
        leader = _Leader(data)
        for p in followers:
            _t, link = await loop.create_connection(lambda: _Link(leader), "127.0.0.1", p)
            leader.links.append(link)
        server = await loop.create_server(lambda: _ClientConn(leader), "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


# -- the load generator ---------------------------------------------------------------------

class _Client(_Conn):
    def __init__(self) -> None:
        self.got = 0
        self.waiter: asyncio.Future | None = None

    def data_received(self, chunk: bytes) -> None:
        self.got += len(chunk)
        if self.got >= 4 and self.waiter is not None and not self.waiter.done():
            self.got -= 4
            self.waiter.set_result(None)

    async def call(self, request: bytes) -> None:
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        await self.waiter


def _free_ports(n: int) -> list[int]:
    import socket
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def floor(seconds: float, tmp: str, crc: bool = False, cases=CASES, log=lambda m: None) -> dict:
    """Run the relay for every (clients, entries per request) case: entries/s, p50/p99 ms
    and CPU us per entry of the leader, each follower (averaged) and the load generator,
    keyed as bench_cluster.py keys its cases."""
    base = tempfile.mkdtemp(prefix="floor.", dir=tmp)
    ports = _free_ports(3)
    procs = []
    try:
        for i, (role, port) in enumerate([("follower", ports[1]), ("follower", ports[2]), ("leader", ports[0])]):
            cmd = [sys.executable, os.path.abspath(__file__), "--member", role, "--port", str(port),
                   "--dir", os.path.join(base, f"m{i}"), "--followers", f"{ports[1]},{ports[2]}"]
            p = subprocess.Popen(cmd + (["--crc"] if crc else []), stdout=subprocess.PIPE, text=True)
            procs.append(p)
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the relay's {role} did not start")
        pids = {"follower a": procs[0].pid, "follower b": procs[1].pid, "leader": procs[2].pid}
        _loop_policy()
        label = "the relay with CRCs" if crc else "the relay"
        return asyncio.run(_drive(ports[0], pids, seconds, cases, lambda m: log(f"  {label} {m}")))
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(base, ignore_errors=True)


async def _drive(port: int, pids: dict, seconds: float, cases, log) -> dict:
    loop = asyncio.get_running_loop()
    out = {}
    for clients, batch in cases:
        conns = [(await loop.create_connection(_Client, "127.0.0.1", port))[1] for _ in range(clients)]
        body = os.urandom(ENTRY * batch)
        request = CLIENT.pack(len(body)) + body
        for c in conns:  # (warm-up)
            await c.call(request)
        lat: list[float] = []
        stop = time.monotonic() + seconds

        async def one(c):
            while time.monotonic() < stop:
                t = time.perf_counter()
                await c.call(request)
                lat.append(time.perf_counter() - t)

        every = {**pids, "loadgen": os.getpid()}
        cpu0 = {k: cpu_seconds(p) for k, p in every.items()}
        t0 = time.monotonic()
        await asyncio.gather(*(one(c) for c in conns))
        dt = time.monotonic() - t0
        done = len(lat) * batch
        cpu = {k: (cpu_seconds(p) - cpu0[k]) / done * 1e6 for k, p in every.items()}
        lat.sort()
        out[f"{clients}x{batch}"] = {
            "entries_per_s": done / dt, "p50_ms": lat[len(lat) // 2] * 1000,
            "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
            "cpu_us": {"leader": cpu["leader"], "follower": (cpu["follower a"] + cpu["follower b"]) / 2,
                       "loadgen": cpu["loadgen"]}}
        log(f"{clients} clients x {batch}: {done / dt:,.0f} entries/s")
        for c in conns:
            c.transport.close()
    return out


def lines(result: dict, label: str) -> list[str]:
    """The relay's rows: entries/s and CPU us per entry, per case."""
    out = []
    for key, r in result.items():
        c = r["cpu_us"]
        out.append(f"  {label} {key.replace('x', ' x ')}: {r['entries_per_s']:,.0f} entries/s; CPU us per entry: "
                   f"leader {c['leader']:.2f}, follower {c['follower']:.2f}, load generator {c['loadgen']:.2f}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each case (default 5)")
    ap.add_argument("--crc", action="store_true", help="each member also checksums what it writes")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the rows")
    ap.add_argument("--member", choices=["leader", "follower"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--followers", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.member:
        _loop_policy()
        asyncio.run(_serve(args.member, args.port, [int(p) for p in args.followers.split(",")], args.dir, args.crc))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench_floor.") as tmp:
        result = floor(args.seconds, tmp, args.crc)
    print(json.dumps(result, indent=2) if args.json else "\n".join(lines(result, "the relay")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
