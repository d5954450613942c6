"""A node under a flood of idle connections and a slowloris client keeps serving appends, with
its descriptors and memory bounded (cluster/net/server.py FrameServer limits). Real processes."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import sys
import time

from cluster.net.client import Client
from cluster.raft.config import parse_peers
from tests.support.group import wait_for
from tests.support.paths import ROOT
from tests.support.ports import free_port_base

MAX_CONNECTIONS = 200


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def test_idle_flood_and_slowloris_do_not_stop_appends(tmp_path):
    port = free_port_base(1)
    peers = f"n0-127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=ROOT)
    log = open(tmp_path / "n0.log", "wb")
    node = subprocess.Popen([sys.executable, "-m", "dledgerctl", "-v", "node", "start", "--id", "n0", "--peers", peers,
                             "--store-base-dir", str(tmp_path / "s"), "--data-file-size", "8MiB",
                             "--index-file-size", "1MiB", "--max-connections", str(MAX_CONNECTIONS),
                             "--idle-timeout", "3", "--frame-timeout", "2"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    idle: list[socket.socket] = []
    try:
        async def leader():
            c = Client(parse_peers(peers), "default", timeout=2)
            try:
                return await c.find_leader(asyncio.get_running_loop().time() + 2)
            finally:
                await c.close()

        def up():
            try:
                return asyncio.run(leader()) == "n0"
            except Exception:  # noqa: BLE001 - not up yet
                return False
        wait_for(up, 30, "the node to lead")
        fds_before, rss_before = _fds(node.pid), _rss_mib(node.pid)

        async def run() -> dict:
            c = Client(parse_peers(peers), "default", timeout=5)
            stats = {"ok": 0, "failed": 0, "slowest": 0.0, "max_fds": 0, "max_rss": 0.0}
            stop = asyncio.Event()

            async def appender():
                k = 0
                while not stop.is_set():
                    t = time.monotonic()
                    try:
                        await c.append([b"while flooded %d" % k])
                        stats["ok"] += 1
                    except Exception:  # noqa: BLE001 - counted: must stay 0
                        stats["failed"] += 1
                    stats["slowest"] = max(stats["slowest"], time.monotonic() - t)
                    k += 1
                    await asyncio.sleep(0.01)

            async def flood():
                loop = asyncio.get_running_loop()
                for _ in range(2000):  # idle connections: connected, never a byte
                    s = socket.socket()
                    s.setblocking(False)
                    try:
                        await loop.sock_connect(s, ("127.0.0.1", port))
                    except OSError:
                        s.close()
                        continue
                    idle.append(s)
                    if len(idle) % 100 == 0:
                        stats["max_fds"] = max(stats["max_fds"], _fds(node.pid))
                        stats["max_rss"] = max(stats["max_rss"], _rss_mib(node.pid))
                        await asyncio.sleep(0)

            async def slowloris() -> float | None:
                """A frame announced as 4 KiB, sent a byte every 0.25 s: when is it cut off?"""
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(struct.pack(">i", 4096))
                start = time.monotonic()
                try:
                    for _ in range(60):
                        writer.write(b"x")
                        await writer.drain()
                        try:
                            if await asyncio.wait_for(reader.read(1), 0.25) == b"":
                                return time.monotonic() - start
                        except asyncio.TimeoutError:
                            pass
                except (ConnectionError, OSError):
                    return time.monotonic() - start
                finally:
                    writer.close()
                return None

            task = asyncio.ensure_future(appender())
            cut_after, _ = await asyncio.gather(slowloris(), flood())
            stats["slowloris_closed_after"] = cut_after
            for _ in range(20):  # the flood has settled: appends go on
                stats["max_fds"] = max(stats["max_fds"], _fds(node.pid))
                stats["max_rss"] = max(stats["max_rss"], _rss_mib(node.pid))
                await asyncio.sleep(0.25)
            stop.set()
            await task
            await c.close()
            return stats

        stats = asyncio.run(run())
        assert stats["failed"] == 0 and stats["ok"] > 50, stats
        assert stats["slowest"] < 2.0, stats
        assert stats["slowloris_closed_after"] is not None and stats["slowloris_closed_after"] < 6, stats
        assert stats["max_fds"] <= fds_before + MAX_CONNECTIONS + 10, (fds_before, stats)
        assert stats["max_rss"] < rss_before + 30, (rss_before, stats)  # (no buffer per idle connection)
        # the idle ones are closed in time: the node's descriptors come back down
        for s in idle:
            s.close()
        wait_for(lambda: _fds(node.pid) <= fds_before + 5, 15, "the flood's descriptors to be released")
        assert node.poll() is None
    finally:
        for s in idle:
            s.close()
        node.terminate()
        node.wait(20)
