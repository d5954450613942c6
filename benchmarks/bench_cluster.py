#!/usr/bin/env python3
"""Cluster append throughput and latency: dledgerctl against etcd and PySyncObj in one run.

Three members on 127.0.0.1, 1 KiB entries. For each system and flush policy the same load
generator (one asyncio process, on uvloop when it is installed, as the nodes are; N
concurrent clients, each sending its next append as soon as the previous one is
acknowledged) runs for a fixed time per case:

- 1, 16 and 64 concurrent clients, one entry per request;
- 16 clients, 64 entries per request (batched);
- 16 clients, 256 entries per request (large batches; dledgerctl only: etcd refuses a txn of
  more than 128 operations by default, and the others have no batched request).

It prints entries/s, p50 and p99 latency per case, the CPU time (user + system, from
/proc) each process spent per acknowledged entry, the load generator's included, and the
ratio of dledgerctl's throughput to each peer's on the same case. Beside them, the rate at
which this process appends the same entries to a store of its own (FileStore.append_leader,
256 per call, flush=async: what bench_store.py measures), and each dledgerctl case's
throughput as a share of it: how near replication comes to the store's own append rate. And
the floor under the batched cases (benchmarks/bench_floor.py): three processes that move the
same bytes (client -> leader, pwrite, leader -> two followers, pwrite, acknowledgement) and
checksum them, with no Raft, framing or index, and each dledgerctl case as a share of it:
how near replication comes to what the kernel and the CRCs leave. ``--repeat N`` runs
every case N times, in rounds on the same cluster, and reports the run with the median
throughput (the lower of the middle two for an even N) with every run's entries/s: the
shared 2-core machine's speed changes by a third from one minute to the next.

Peers:
- etcd 3.4 (Debian's ``etcd-server``; ``--install`` runs apt-get), driven through its v3
  HTTP/JSON gateway with keep-alive connections; batched = a txn of 64 puts. etcd always
  fsyncs, so it is compared with dledgerctl ``flush=sync`` (and shown beside async).
- PySyncObj 0.3 (PyPI ``pysyncobj``, imported from this interpreter; ``--install`` pip-installs
  it): three ``benchmarks/pysyncobj_node.py`` processes, each a SyncObj whose ``@replicated
  append(body)`` counts entries and bytes, served over a length-prefixed TCP protocol on its
  own client port. The load generator pipelines all clients over one connection to the
  leader, matched by request id; a request is acknowledged when PySyncObj's callback reports
  every entry committed and applied on the leader. Batched = one request of 64 bodies = 64
  replicated calls (64 Raft entries), answered when all 64 are applied. Settings:
  ``journalFile`` + ``fullDumpFile``, ``appendEntriesUseBatch=True``, default Raft timeouts,
  but ``autoTickPeriod=0.002`` and ``appendEntriesPeriod=0.005`` instead of 0.05 and 0.1 s
  (at those defaults each commit waits ~100 ms for the next AppendEntries: 10 entries/s for
  one client, about 600 for 64 clients; see pysyncobj_node.py; ``--pysyncobj-conf
  KEY=VALUE`` overrides any SyncObjConf setting).
  PySyncObj cannot fsync: its journal is an mmap never msync'ed while running (page cache
  only, survives a process crash but not a power loss), so compare it with dledgerctl
  ``flush=async``.
- Java DLedger 0.2.7 itself (``dledger 0.2.7``), built from sources by tests/support/javadledger.py
  (the mirrors and Debian jars that README names; skipped, saying why, when missing): three
  ``BossCommand server`` processes with DLedger's defaults (flush every 10 ms, page-cache
  acknowledgement like dledgerctl ``flush=async``, ``enableBatchPush=false``), JIT warmed
  for a few seconds first. Driven over DLedger's own client protocol (AppendEntryRequest:
  one body per request, base64 in JSON), all clients pipelined over one connection to the
  leader; it has no batched append on the wire, so "64 entries" = 64 appends in flight
  per client, the call done when all 64 are acknowledged.

- Mutual TLS (``dledgerctl async tls``, ``etcd tls``; ``--no-tls`` skips them): every
  connection between members and from the load generator encrypted and both sides
  authenticated, with certificates from cluster/node/pki.py (EC P-256), the same for both.

Usage: python benchmarks/bench_cluster.py [--seconds 5] [--quick] [--repeat N] [--no-etcd] [--no-pysyncobj]
                                          [--no-java] [--no-tls] [--no-sync] [--pysyncobj-conf KEY=VALUE] [--install] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import importlib.util
import itertools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from cluster.node import runtime  # noqa: E402
from cluster.net.client import Client  # noqa: E402
from cluster.raft.config import parse_peers  # noqa: E402
from cluster.node.launcher import down, up  # noqa: E402
import bench_floor  # noqa: E402

BODY = os.urandom(1024)
CASES = [(1, 1), (16, 1), (64, 1), (16, 64), (16, 256)]  # (clients, entries per request)
LARGE = {(16, 256)}  # dledgerctl only (see the docstring)
STORE_BATCH = 256


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def free_ports(n: int) -> int:
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n < 65000 and all(_free(base + k) for k in range(n)):
            return base
    raise RuntimeError("no free ports")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def stop_processes(procs) -> None:
    """SIGTERM every process, then SIGKILL (and reap) any still alive after 10 s."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def drive(make_call, clients: int, batch: int, seconds: float, members: dict[str, int] | None = None) -> dict:
    """Run ``clients`` loops of ``await call(batch)`` for ``seconds``; throughput and latency,
    and with ``members`` (name -> pid) the CPU time per acknowledged entry, in us, of
    each member and of this load generator (``cpu_us``)."""
    calls = [await make_call() for _ in range(clients)]
    lat: list[float] = []
    done = 0
    stop = time.monotonic() + seconds

    async def loop(call):
        nonlocal done
        while time.monotonic() < stop:
            t = time.perf_counter()
            await call(batch)
            lat.append(time.perf_counter() - t)
            done += batch

    pids = {**(members or {}), "loadgen": os.getpid()}
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
    t0 = time.monotonic()
    await asyncio.gather(*(loop(c) for c in calls))
    dt = time.monotonic() - t0
    lat.sort()
    out = {"entries_per_s": done / dt, "requests_per_s": len(lat) / dt,
           "p50_ms": lat[len(lat) // 2] * 1000 if lat else None,
           "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000 if lat else None}
    if members and done:
        out["cpu_us"] = {k: (cpu_seconds(p) - cpu0[k]) / done * 1e6 for k, p in pids.items()}
    return out


async def run_cases(name: str, make_call, seconds: float, members: dict[str, int], repeat: int,
                    large: bool = False) -> dict:
    """Every case ``repeat`` times, in rounds (each round runs every case once, so a
    slow minute falls on every case alike); per case the run with the median throughput
    (the lower middle one for an even count; with its latency and CPU figures) and,
    under ``runs``, every run's entries/s in the order run. The LARGE cases only with ``large``."""
    cases = [c for c in CASES if large or c not in LARGE]
    runs: dict[str, list[dict]] = {f"{c}x{b}": [] for c, b in cases}
    for rnd in range(repeat):
        for clients, batch in cases:
            key = f"{clients}x{batch}"
            r = await drive(make_call, clients, batch, seconds, members)
            runs[key].append(r)
            log(f"  {name} {clients} clients x {batch}: {r['entries_per_s']:,.0f} entries/s"
                + (f" (round {rnd + 1} of {repeat})" if repeat > 1 else ""))
    out = {}
    for key, rs in runs.items():
        ranked = sorted(rs, key=lambda r: r["entries_per_s"])
        out[key] = {**ranked[(len(ranked) - 1) // 2], "runs": [r["entries_per_s"] for r in rs]}
    return out


# -- dledgerctl -----------------------------------------------------------------------------

def _certs(directory: str, group: str, members: list[str]):
    """Member certificates and an operator's (cluster/node/pki.py) in ``directory``: the
    operator's cluster/net/tls.py Tls, for the load generator."""
    from cluster.node import pki
    from cluster.net.tls import Identity, Tls, TlsFiles

    for m in members:
        pki.issue(directory, Identity(group, "member", m))
    cert, key = pki.issue(directory, Identity(group, "operator", "bench"))
    return Tls(TlsFiles(cert, key, os.path.join(directory, pki.CA_CERT)))


def bench_dledger(flush: str, seconds: float, tmp: str, repeat: int = 1, tls: bool = False) -> dict:
    base = os.path.join(tmp, f"dledger-{flush}{'-tls' if tls else ''}")
    tls_dir = os.path.join(base, "tls") if tls else None
    client_tls = _certs(tls_dir, "bench", ["n0", "n1", "n2"]) if tls else None
    rec, _procs = up(base, 3, free_ports(3), "bench", flush, ["--data-file-size", "512MiB"], tls_dir=tls_dir)
    peers = parse_peers(rec["peers"])
    try:
        async def run():
            client = Client(peers, "bench", timeout=30, tls=client_tls)
            leader = await client.find_leader(asyncio.get_running_loop().time() + 30)
            await client.append([b"warm-up"])
            members = {("leader " if n["id"] == leader else "follower ") + n["id"]: n["pid"] for n in rec["nodes"]}

            async def make_call():
                async def call(batch):
                    await client.append([BODY] * batch)
                return call

            out = await run_cases(f"dledgerctl flush={flush}{' tls' if tls else ''}", make_call, seconds, members,
                                  repeat, large=True)
            await client.close()
            return out

        return runtime.run(run)
    finally:
        down(base)
        shutil.rmtree(base, ignore_errors=True)


def store_alone(directory: str, seconds: float) -> float:
    """Entries/s of 1 KiB this process appends to a store of its own, STORE_BATCH per
    FileStore.append_leader call, flush=async, 512 MiB data files (the members' setting),
    for about ``seconds``: bench_store.py's batched append, the rate replication is held to."""
    from store.filestore import FileStore

    node = os.path.join(directory, "store-alone")
    full = [BODY] * STORE_BATCH
    store = FileStore.open(node, flush="async", data_file_size=512 << 20)
    try:
        for _ in range(64):  # (the first data file made and its first pages touched before the clock starts)
            store.append_leader(full, term=1)
        count, t = 0, time.perf_counter()
        while True:
            store.append_leader(full, term=1)
            count += STORE_BATCH
            if count % (STORE_BATCH * 16) == 0 and time.perf_counter() - t >= seconds:
                break
        return count / (time.perf_counter() - t)
    finally:
        store.close()
        shutil.rmtree(node, ignore_errors=True)


def tls_crypto_us_per_kib(directory: str) -> float:
    """CPU time, in us, to encrypt one KiB on one side of a TLS connection and decrypt it on
    the other, through Python's ssl memory BIOs (the path uvloop's TLS transport takes),
    with certificates from cluster/node/pki.py; in 64 KiB writes, over about a second."""
    import ssl as _ssl

    tls = _certs(directory, "floor", ["m0", "m1"])
    a_in, a_out, b_in, b_out = (_ssl.MemoryBIO() for _ in range(4))
    a = tls.client.wrap_bio(a_in, a_out, server_hostname=None)
    b = tls.server.wrap_bio(b_in, b_out, server_side=True)
    for _ in range(10):  # the handshake: shuttle bytes until both sides are done
        for obj in (a, b):
            try:
                obj.do_handshake()
            except _ssl.SSLWantReadError:
                pass
        b_in.write(a_out.read())
        a_in.write(b_out.read())
    chunk, done = os.urandom(64 * 1024), 0
    t0 = time.process_time()
    while time.process_time() - t0 < 1.0:
        a.write(chunk)
        b_in.write(a_out.read())
        got = 0
        while got < len(chunk):
            got += len(b.read(len(chunk)))
        done += len(chunk)
    return (time.process_time() - t0) / (done / 1024) * 1e6


def tls_ceiling(results: dict, crypto_us: float) -> list[str]:
    """What encryption alone leaves of plaintext's throughput per case: each 1 KiB entry
    is encrypted and decrypted three times (load generator -> leader, leader -> each of
    two followers). With every core busy the ceiling is plaintext's CPU per entry over that
    plus the crypto; with the leader the bottleneck, the leader's CPU over its own plus
    the 1.5 pairs it does (one decryption, two encryptions)."""
    plain = results.get("dledgerctl async") or {}
    whole, leader = [], []
    for c, b in CASES:
        cpu = (plain.get(f"{c}x{b}") or {}).get("cpu_us")
        if not cpu:
            return []
        lead = sum(v for k, v in cpu.items() if k.startswith("leader"))
        total = sum(cpu.values())
        whole.append(f"{total / (total + 3 * crypto_us):.2f}")
        leader.append(f"{lead / (lead + 1.5 * crypto_us):.2f}")
    return [f"TLS crypto on this machine: {crypto_us:.2f} us to encrypt and decrypt 1 KiB "
            "(ssl memory BIOs, 64 KiB writes);",
            f"  ceiling of tls / plaintext from that alone, with every core busy: {'  '.join(whole)}",
            f"  and with the leader the bottleneck: {'  '.join(leader)}"]


# -- Java DLedger 0.2.7 -------------------------------------------------------------------------

def bench_java(seconds: float, tmp: str, repeat: int = 1) -> dict | None:
    from tests.support import javadledger
    from cluster.net import dialect
    from cluster.net.channel import Channel
    from cluster.net.frames import Frame
    from cluster.net.wire import APPEND, decode_response

    try:
        java = javadledger.build()
    except javadledger.Unavailable as exc:
        log(f"  skipped: {exc}")
        return None
    base = os.path.join(tmp, "dledger-java")
    port = free_ports(3)
    ids = ["n0", "n1", "n2"]
    peers_text = ";".join(f"{n}-127.0.0.1:{port + k}" for k, n in enumerate(ids))
    procs = []
    for n in ids:
        out = open(os.path.join(tmp, f"java-{n}.log"), "ab")
        procs.append(subprocess.Popen(java.server_command("bench", n, peers_text, base, log_level="warn"),
                                      stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
    members = {n: p.pid for n, p in zip(ids, procs)}
    try:
        async def run():
            client = Client(parse_peers(peers_text), "bench", timeout=60)
            leader = await client.find_leader(asyncio.get_running_loop().time() + 60)
            await client.close()
            channel = Channel("127.0.0.1", port + ids.index(leader), connect_timeout=5)
            body = dialect.encode({"body": BODY, "code": 200, "group": "bench", "remoteId": leader, "term": -1})

            async def one():
                answer = decode_response(await channel.request(Frame(APPEND, body=body), 30), APPEND)
                if answer.get("code") != 200:
                    raise RuntimeError(f"Java DLedger {leader} answered {answer}")

            async def make_call():
                async def call(batch):
                    if batch == 1:
                        await one()
                    else:
                        await asyncio.gather(*(one() for _ in range(batch)))
                return call

            log("  warming the JIT up (16 clients, 64 in flight each, 8 s)")
            await drive(make_call, 16, 64, 8.0)
            named = {("leader " if n == leader else "follower ") + n: pid for n, pid in members.items()}
            out = await run_cases("dledger 0.2.7", make_call, seconds, named, repeat)
            await channel.close()
            return out

        return runtime.run(run)
    finally:
        stop_processes(procs)
        shutil.rmtree(base, ignore_errors=True)


# -- etcd -------------------------------------------------------------------------------------

class Http:
    """A minimal keep-alive HTTP/1.1 JSON POST client (one connection, one request at a time)."""

    def __init__(self, host: str, port: int, ssl=None) -> None:
        self.host, self.port, self.ssl = host, port, ssl
        self.reader = self.writer = None

    async def post(self, path: str, obj: dict) -> dict:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port, ssl=self.ssl)
        body = json.dumps(obj).encode()
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (line.partition(b":") for line in head.split(b"\r\n")[1:] if b":" in line)}
        if b"content-length" in headers:
            data = await self.reader.readexactly(int(headers[b"content-length"]))
        else:  # chunked
            data = b""
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                data += chunk[:-2]
        if status != 200:
            raise RuntimeError(f"etcd answered {status}: {data[:200]!r}")
        return json.loads(data) if data else {}


def bench_etcd(seconds: float, tmp: str, repeat: int = 1, tls: bool = False) -> dict | None:
    exe = shutil.which("etcd")
    if exe is None:
        log("  etcd: not installed (apt-get install etcd-server, or run with --install)")
        return None
    base = free_ports(6)
    names = [f"e{i}" for i in range(3)]
    scheme = "https" if tls else "http"
    cluster = ",".join(f"{n}={scheme}://127.0.0.1:{base + 3 + i}" for i, n in enumerate(names))
    data = os.path.join(tmp, "etcd-tls" if tls else "etcd")
    client_ssl = None
    if tls:  # mutual TLS between members and from the client, certificates as dledgerctl's
        d = os.path.join(data, "certs")
        client_ssl = _certs(d, "bench", names).client
    procs = []
    try:
        for i, n in enumerate(names):
            cmd = [exe, "--name", n, "--data-dir", os.path.join(data, n),
                   "--listen-client-urls", f"{scheme}://127.0.0.1:{base + i}",
                   "--advertise-client-urls", f"{scheme}://127.0.0.1:{base + i}",
                   "--listen-peer-urls", f"{scheme}://127.0.0.1:{base + 3 + i}",
                   "--initial-advertise-peer-urls", f"{scheme}://127.0.0.1:{base + 3 + i}",
                   "--initial-cluster", cluster, "--initial-cluster-state", "new", "--log-level", "error"]
            if tls:
                cert, key, ca = (os.path.join(d, f) for f in (f"member-{n}.pem", f"member-{n}.key", "ca.pem"))
                cmd += ["--cert-file", cert, "--key-file", key, "--trusted-ca-file", ca, "--client-cert-auth",
                        "--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", ca,
                        "--peer-client-cert-auth"]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        async def run():
            key = base64.b64encode(b"k").decode()
            value = base64.b64encode(BODY).decode()
            deadline = time.monotonic() + 30
            while True:  # wait until the cluster takes writes
                try:
                    await Http("127.0.0.1", base, client_ssl).post("/v3/kv/put", {"key": key, "value": value})
                    break
                except (OSError, RuntimeError, asyncio.IncompleteReadError):
                    if time.monotonic() > deadline:
                        raise RuntimeError("etcd did not come up")
                    await asyncio.sleep(0.2)
            counter = iter(range(1 << 62))
            keys = [base64.b64encode(b"k%d" % k).decode() for k in range(128)]

            async def make_call():
                http = Http("127.0.0.1", base + next(counter) % 3, client_ssl)

                async def call(batch):
                    if batch == 1:
                        await http.post("/v3/kv/put", {"key": key, "value": value})
                    else:  # a txn may not put one key twice
                        await http.post("/v3/kv/txn", {"success": [{"requestPut": {"key": keys[k], "value": value}}
                                                                   for k in range(batch)]})
                return call

            return await run_cases("etcd tls" if tls else "etcd", make_call, seconds,
                                   {f"member {i}": p.pid for i, p in enumerate(procs)}, repeat)

        return runtime.run(run)
    finally:
        stop_processes(procs)


# -- PySyncObj --------------------------------------------------------------------------------

PYSYNCOBJ_NODE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pysyncobj_node.py")
PYSYNCOBJ_LEGEND = ("pysyncobj: journalFile + fullDumpFile, mmap journal never fsynced (compare with flush=async); "
                    "appendEntriesUseBatch=True, autoTickPeriod 0.002 s, appendEntriesPeriod 0.005 s, "
                    "default Raft timeouts; 64 entries = 64 replicated calls")


class Framed:
    """Client of pysyncobj_node.py: many requests in flight on one connection, matched by id."""

    HEAD = struct.Struct("<IBQ")  # length of what follows the u32, op or status, request id

    def __init__(self, port: int) -> None:
        self.port = port
        self.writer = None
        self.waiting: dict[int, asyncio.Future] = {}
        self.ids = itertools.count(1)
        self.reader_task = None

    async def connect(self) -> None:
        reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.reader_task = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                n, status, rid = self.HEAD.unpack(await reader.readexactly(13))
                payload = await reader.readexactly(n - 9)
                fut = self.waiting.pop(rid, None)
                if fut is not None and not fut.done():
                    fut.set_result((status, payload))
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            for fut in self.waiting.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"pysyncobj node :{self.port} closed: {exc}"))
            self.waiting.clear()

    async def request(self, op: bytes, payload: bytes = b"", timeout: float = 30) -> tuple[int, bytes]:
        if self.writer is None:
            await self.connect()
        rid = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.waiting[rid] = fut
        self.writer.write(self.HEAD.pack(9 + len(payload), op[0], rid) + payload)
        await self.writer.drain()
        return await asyncio.wait_for(fut, timeout)

    async def status(self) -> dict:
        _, payload = await self.request(b"S", timeout=2)
        return json.loads(payload)

    async def append(self, payload: bytes) -> None:
        status, _ = await self.request(b"A", payload)
        if status != 0:
            raise RuntimeError(f"pysyncobj node :{self.port} answered FAIL_REASON {status}")

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader_task.cancel()


def pack_append(bodies: list[bytes]) -> bytes:
    return struct.pack("<I", len(bodies)) + b"".join(struct.pack("<I", len(b)) + b for b in bodies)


def bench_pysyncobj(seconds: float, tmp: str, conf: list[str] = (), repeat: int = 1) -> dict | None:
    """``conf``: extra SyncObjConf settings as KEY=VALUE, passed to every node."""
    try:
        importlib.invalidate_caches()
        version = importlib.import_module("pysyncobj.version").VERSION
    except ImportError:
        log(f"  pysyncobj: not installed ({sys.executable} -m pip install pysyncobj, or run with --install)")
        return None
    log(f"  pysyncobj {version}")
    base = free_ports(6)
    raft = [f"127.0.0.1:{base + i}" for i in range(3)]
    client_ports = [base + 3 + i for i in range(3)]
    root = os.path.join(tmp, "pysyncobj")
    procs = []
    try:
        for i in range(3):
            d = os.path.join(root, f"n{i}")
            os.makedirs(d)
            cmd = [sys.executable, PYSYNCOBJ_NODE, "--self", raft[i], "--client-port", str(client_ports[i]), "--dir", d]
            for j in range(3):
                if j != i:
                    cmd += ["--partner", raft[j]]
            for kv in conf:
                cmd += ["--conf", kv]
            with open(os.path.join(d, "stderr"), "wb") as err:
                procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL))

        async def find_leader(deadline: float) -> int:
            while True:
                for i, port in enumerate(client_ports):
                    if procs[i].poll() is not None:
                        raise RuntimeError(f"pysyncobj node {i} exited with {procs[i].returncode}")
                    c = Framed(port)
                    try:
                        st = await c.status()
                        if st["leader"] and st["ready"]:
                            return i
                    except (OSError, asyncio.TimeoutError):
                        pass
                    finally:
                        await c.close()
                if time.monotonic() > deadline:
                    raise RuntimeError("pysyncobj elected no ready leader within 30 s")
                await asyncio.sleep(0.2)

        async def run():
            leader = await find_leader(time.monotonic() + 30)
            conn = Framed(client_ports[leader])
            await conn.append(pack_append([b"warm-up"]))
            payloads = {batch: pack_append([BODY] * batch) for _, batch in CASES}
            acked = 1

            async def make_call():
                async def call(batch):
                    nonlocal acked
                    await conn.append(payloads[batch])
                    acked += batch
                return call

            out = await run_cases("pysyncobj", make_call, seconds, {f"member {i}": p.pid for i, p in enumerate(procs)},
                                  repeat)
            # every acknowledged entry must be in the leader's state machine, and the
            # followers must catch up to it
            deadline = time.monotonic() + 10
            while True:
                counts = []
                for port in client_ports:
                    c = Framed(port)
                    try:
                        counts.append((await c.status())["entries"])
                    finally:
                        await c.close()
                if min(counts) >= acked or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            if counts[leader] < acked or min(counts) < acked:
                raise RuntimeError(f"pysyncobj: {acked} entries acknowledged, applied per node {counts}")
            log(f"  pysyncobj: {acked:,} entries acknowledged, applied per node {counts}")
            await conn.close()
            return out

        try:
            return runtime.run(run)
        except Exception:
            for i in range(3):
                with open(os.path.join(root, f"n{i}", "stderr"), "rb") as f:
                    tail = f.read()[-2000:].decode(errors="replace").strip()
                if tail:
                    log(f"  pysyncobj node {i} stderr:\n{tail}")
            raise
    finally:
        stop_processes(procs)
        shutil.rmtree(root, ignore_errors=True)


def table(results: dict, conf: list[str] = ()) -> str:
    systems = [s for s in results if s not in ("tls_crypto_us_per_kib", "store_alone_entries_per_s", "relay")]
    lines = [f"{'case':<22}" + "".join(f"{s:>34}" for s in systems)]
    lines.append(f"{'':<22}" + "".join(f"{'entries/s   p50 ms   p99 ms':>34}" for _ in systems))
    for clients, batch in CASES:
        key = f"{clients}x{batch}"
        label = f"{clients} client{'s' if clients > 1 else ''} x {batch} entr{'ies' if batch > 1 else 'y'}"
        row = f"{label:<22}"
        for s in systems:
            r = (results[s] or {}).get(key)
            row += f"{r['entries_per_s']:>15,.0f}{r['p50_ms']:>9.2f}{r['p99_ms']:>10.2f}" if r else f"{'-':>34}"
        lines.append(row)
    ratio_lines = []

    def ratios(a: str, b: str) -> str:
        """``a``'s entries/s over ``b``'s, per case both ran."""
        return "  ".join(f"{results[a][k]['entries_per_s'] / results[b][k]['entries_per_s']:.2f}"
                         for k in (f"{c}x{n}" for c, n in CASES) if k in results[a] and k in results[b])

    for peer in [p for p in ("dledger 0.2.7", "etcd", "pysyncobj") if results.get(p)]:
        for s in systems:
            if s.startswith("dledgerctl") and not s.endswith("tls") and results[s]:
                ratio_lines.append(f"{s} / {peer}: " + ratios(s, peer))
    for a, b in (("dledgerctl async tls", "dledgerctl async"), ("dledgerctl async tls", "etcd tls"),
                 ("etcd tls", "etcd")):
        if results.get(a) and results.get(b):
            ratio_lines.append(f"{a} / {b}: " + ratios(a, b))
    alone = results.get("store_alone_entries_per_s")
    if alone:
        ratio_lines.append(f"the store alone (append_leader, {STORE_BATCH} x 1 KiB per call, flush=async, in the load "
                           f"generator's process): {alone:,.0f} entries/s; replicated / alone:")
        for s in systems:
            if s.startswith("dledgerctl") and results[s]:
                shares = [f"{c} x {n} {results[s][f'{c}x{n}']['entries_per_s'] / alone:.3f}"
                          for c, n in CASES if n > 1 and f"{c}x{n}" in results[s]]
                ratio_lines.append(f"  {s}: " + "  ".join(shares))
    relay = results.get("relay")
    if relay:
        ratio_lines.append("the same bytes without Raft (bench_floor.py: a leader that only writes, checksums and "
                           "forwards, followers that only write, checksum and acknowledge):")
        ratio_lines += bench_floor.lines(relay, "relay")
        for s in systems:
            if s.startswith("dledgerctl") and results[s]:
                shares = [f"{k.replace('x', ' x ')} {results[s][k]['entries_per_s'] / relay[k]['entries_per_s']:.3f}"
                          for k in relay if k in results[s]]
                ratio_lines.append(f"  {s} / relay: " + "  ".join(shares))
    if results.get("tls_crypto_us_per_kib"):
        ratio_lines += tls_ceiling(results, results["tls_crypto_us_per_kib"])
    if ratio_lines:
        lines += [""] + ratio_lines
    if any(len(r.get("runs", ())) > 1 for s in systems if results[s] for r in results[s].values()):
        lines += ["", "entries/s of every run, in the order run (the table shows the median run's figures):"]
        for s in systems:
            for clients, batch in CASES:
                r = (results[s] or {}).get(f"{clients}x{batch}")
                if r:
                    lines.append(f"{s:<18} {clients:>2} x {batch:<4}" + "  ".join(f"{v:>9,.0f}" for v in r["runs"]))
    lines += ["", "CPU time per acknowledged entry, us (user + system, from /proc): the leader, the followers",
              "(each, on average) and the load generator; for etcd and PySyncObj all three members together."]
    lines.append(f"{'case':<22}" + "".join(f"{s:>27}" for s in systems))
    lines.append(f"{'':<22}" + "".join(f"{'leader follower loadgen' if s.startswith('dledger') else 'members loadgen':>27}"
                                       for s in systems))
    for clients, batch in CASES:
        key = f"{clients}x{batch}"
        row = f"{clients} x {batch:<18}"
        for s in systems:
            cpu = ((results[s] or {}).get(key) or {}).get("cpu_us")
            if not cpu:
                row += f"{'-':>27}"
                continue
            lg = cpu.get("loadgen", 0.0)
            if s.startswith("dledger"):
                lead = sum(v for k, v in cpu.items() if k.startswith("leader"))
                fol = [v for k, v in cpu.items() if k.startswith("follower")]
                row += f"{lead:>12.1f}{sum(fol) / max(1, len(fol)):>8.1f}{lg:>7.1f}"
            else:
                row += f"{sum(v for k, v in cpu.items() if k != 'loadgen'):>20.1f}{lg:>7.1f}"
        lines.append(row)
    if results.get("pysyncobj"):
        lines.append("")
        lines.append(PYSYNCOBJ_LEGEND if not conf else f"{PYSYNCOBJ_LEGEND}; overridden: {' '.join(conf)}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each case (default 5)")
    ap.add_argument("--quick", action="store_true", help="2 s per case")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run every case N times, in rounds, and report the run with the median throughput "
                         "(the table then lists every run's entries/s too)")
    ap.add_argument("--no-etcd", action="store_true", help="skip etcd")
    ap.add_argument("--no-pysyncobj", action="store_true", help="skip PySyncObj")
    ap.add_argument("--no-java", action="store_true", help="skip Java DLedger 0.2.7")
    ap.add_argument("--no-tls", action="store_true", help="skip the mutual-TLS columns (dledgerctl async and etcd)")
    ap.add_argument("--no-sync", action="store_true", help="skip dledgerctl flush=sync")
    ap.add_argument("--pysyncobj-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="override a SyncObjConf setting of the PySyncObj nodes (repeatable)")
    ap.add_argument("--install", action="store_true",
                    help="apt-get install etcd-server and pip install pysyncobj if they are missing")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    seconds = 2.0 if args.quick else args.seconds
    if args.install and shutil.which("etcd") is None and not args.no_etcd:
        subprocess.run(["apt-get", "update", "-q"], check=False, stdout=sys.stderr)
        subprocess.run(["apt-get", "install", "-y", "-q", "etcd-server"], check=False, stdout=sys.stderr)
    if args.install and not args.no_pysyncobj and importlib.util.find_spec("pysyncobj") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "pysyncobj>=0.3,<0.4"], check=False,
                       stdout=sys.stderr)
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_cluster.") as tmp:
        log("the store alone")
        results["store_alone_entries_per_s"] = store_alone(tmp, seconds)
        log(f"  {results['store_alone_entries_per_s']:,.0f} entries/s")
        log("the same bytes without Raft (bench_floor.py's relay, with CRCs)")
        results["relay"] = bench_floor.floor(seconds, tmp, crc=True, log=log)
        for flush in ("async",) if args.no_sync else ("async", "sync"):
            log(f"dledgerctl flush={flush}")
            results[f"dledgerctl {flush}"] = bench_dledger(flush, seconds, tmp, args.repeat)
        if not args.no_tls:
            log("dledgerctl flush=async, mutual TLS")
            results["dledgerctl async tls"] = bench_dledger("async", seconds, tmp, args.repeat, tls=True)
            results["tls_crypto_us_per_kib"] = tls_crypto_us_per_kib(os.path.join(tmp, "floor"))
        if not args.no_java:
            log("dledger 0.2.7 (Java)")
            results["dledger 0.2.7"] = bench_java(seconds, tmp, args.repeat)
        if not args.no_etcd:
            log("etcd")
            results["etcd"] = bench_etcd(seconds, tmp, args.repeat)
            if not args.no_tls:
                log("etcd, mutual TLS")
                results["etcd tls"] = bench_etcd(seconds, tmp, args.repeat, tls=True)
        if not args.no_pysyncobj:
            log("pysyncobj")
            results["pysyncobj"] = bench_pysyncobj(seconds, tmp, args.pysyncobj_conf, args.repeat)
    print(json.dumps(results, indent=2) if args.json else table(results, args.pysyncobj_conf))
    return 0


if __name__ == "__main__":
    sys.exit(main())
