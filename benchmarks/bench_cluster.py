#!/usr/bin/env python3
"""Cluster append throughput and latency: dledgerctl against etcd (and later peers) in one run.

Three members on 127.0.0.1, 1 KiB entries. For each system and flush policy the same load
generator (one asyncio process, N concurrent clients, each sending its next append as
soon as the previous one is acknowledged) runs for a fixed time per case:

- 1, 16 and 64 concurrent clients, one entry per request;
- 16 clients, 64 entries per request (batched).

It prints entries/s, requests/s, p50 and p99 latency per case, and the ratio of
dledgerctl's throughput to each peer's on the same case.

Peers:
- etcd 3.4 (Debian's ``etcd-server``; ``--install`` runs apt-get), driven through its v3
  HTTP/JSON gateway with keep-alive connections; batched = a txn of 64 puts. etcd always
  fsyncs, so it is compared with dledgerctl ``flush=sync`` (and shown beside async).

Usage: python benchmarks/bench_cluster.py [--seconds 5] [--quick] [--no-etcd] [--install] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from cluster.client import Client  # noqa: E402
from cluster.config import parse_peers  # noqa: E402
from cluster.launcher import down, up  # noqa: E402

BODY = os.urandom(1024)
CASES = [(1, 1), (16, 1), (64, 1), (16, 64)]  # (clients, entries per request)


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


async def drive(make_call, clients: int, batch: int, seconds: float) -> dict:
    """Run ``clients`` loops of ``await call(batch)`` for ``seconds``; throughput and latency."""
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

    t0 = time.monotonic()
    await asyncio.gather(*(loop(c) for c in calls))
    dt = time.monotonic() - t0
    lat.sort()
    return {"entries_per_s": done / dt, "requests_per_s": len(lat) / dt,
            "p50_ms": lat[len(lat) // 2] * 1000 if lat else None,
            "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000 if lat else None}


# -- dledgerctl -----------------------------------------------------------------------------

def bench_dledger(flush: str, seconds: float, tmp: str) -> dict:
    base = os.path.join(tmp, f"dledger-{flush}")
    rec, _procs = up(base, 3, free_ports(3), "bench", flush, ["--data-file-size", "512MiB"])
    peers = parse_peers(rec["peers"])
    try:
        async def run():
            client = Client(peers, "bench", timeout=30)
            await client.find_leader(asyncio.get_running_loop().time() + 30)
            await client.append([b"warm-up"])

            async def make_call():
                async def call(batch):
                    await client.append([BODY] * batch)
                return call

            out = {}
            for clients, batch in CASES:
                out[f"{clients}x{batch}"] = await drive(make_call, clients, batch, seconds)
                log(f"  dledgerctl flush={flush} {clients} clients x {batch}: "
                    f"{out[f'{clients}x{batch}']['entries_per_s']:,.0f} entries/s")
            await client.close()
            return out

        return asyncio.run(run())
    finally:
        down(base)
        shutil.rmtree(base, ignore_errors=True)


# -- etcd -------------------------------------------------------------------------------------

class Http:
    """A minimal keep-alive HTTP/1.1 JSON POST client (one connection, one request at a time)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def post(self, path: str, obj: dict) -> dict:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
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


def bench_etcd(seconds: float, tmp: str) -> dict | None:
    exe = shutil.which("etcd")
    if exe is None:
        log("  etcd: not installed (apt-get install etcd-server, or run with --install)")
        return None
    base = free_ports(6)
    names = [f"e{i}" for i in range(3)]
    cluster = ",".join(f"{n}=http://127.0.0.1:{base + 3 + i}" for i, n in enumerate(names))
    procs = []
    try:
        for i, n in enumerate(names):
            cmd = [exe, "--name", n, "--data-dir", os.path.join(tmp, "etcd", n),
                   "--listen-client-urls", f"http://127.0.0.1:{base + i}",
                   "--advertise-client-urls", f"http://127.0.0.1:{base + i}",
                   "--listen-peer-urls", f"http://127.0.0.1:{base + 3 + i}",
                   "--initial-advertise-peer-urls", f"http://127.0.0.1:{base + 3 + i}",
                   "--initial-cluster", cluster, "--initial-cluster-state", "new", "--log-level", "error"]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        async def run():
            key = base64.b64encode(b"k").decode()
            value = base64.b64encode(BODY).decode()
            deadline = time.monotonic() + 30
            while True:  # wait until the cluster takes writes
                try:
                    await Http("127.0.0.1", base).post("/v3/kv/put", {"key": key, "value": value})
                    break
                except (OSError, RuntimeError, asyncio.IncompleteReadError):
                    if time.monotonic() > deadline:
                        raise RuntimeError("etcd did not come up")
                    await asyncio.sleep(0.2)
            counter = iter(range(1 << 62))
            keys = [base64.b64encode(b"k%d" % k).decode() for k in range(128)]

            async def make_call():
                http = Http("127.0.0.1", base + next(counter) % 3)

                async def call(batch):
                    if batch == 1:
                        await http.post("/v3/kv/put", {"key": key, "value": value})
                    else:  # a txn may not put one key twice
                        await http.post("/v3/kv/txn", {"success": [{"requestPut": {"key": keys[k], "value": value}}
                                                                   for k in range(batch)]})
                return call

            out = {}
            for clients, batch in CASES:
                out[f"{clients}x{batch}"] = await drive(make_call, clients, batch, seconds)
                log(f"  etcd {clients} clients x {batch}: {out[f'{clients}x{batch}']['entries_per_s']:,.0f} entries/s")
            return out

        return asyncio.run(run())
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def table(results: dict) -> str:
    systems = list(results)
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
    if results.get("etcd"):
        lines.append("")
        for s in systems:
            if s.startswith("dledgerctl"):
                ratios = [f"{results[s][f'{c}x{b}']['entries_per_s'] / results['etcd'][f'{c}x{b}']['entries_per_s']:.2f}"
                          for c, b in CASES]
                lines.append(f"{s} / etcd: " + "  ".join(ratios))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of each case (default 5)")
    ap.add_argument("--quick", action="store_true", help="2 s per case")
    ap.add_argument("--no-etcd", action="store_true", help="skip etcd")
    ap.add_argument("--install", action="store_true", help="apt-get install etcd-server if it is missing")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args()
    seconds = 2.0 if args.quick else args.seconds
    if args.install and shutil.which("etcd") is None and not args.no_etcd:
        subprocess.run(["apt-get", "update", "-q"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-q", "etcd-server"], check=False)
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_cluster.") as tmp:
        for flush in ("async", "sync"):
            log(f"dledgerctl flush={flush}")
            results[f"dledgerctl {flush}"] = bench_dledger(flush, seconds, tmp)
        if not args.no_etcd:
            log("etcd")
            results["etcd"] = bench_etcd(seconds, tmp)
    print(json.dumps(results, indent=2) if args.json else table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
