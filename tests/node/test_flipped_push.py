"""Pushes damaged in flight, between real node processes (issue 63).

Three members; every connection to n2 passes through a proxy (n0 and n1 reach n2 at
``--peer-address``) that reads the frames, and changes the first APPEND pushes it sees:
one byte of an entry's body, of its chain CRC, of its term, of its body CRC, and one
push torn (its range of entries cut short inside an entry, the frame length made to fit).
n2 must refuse each (its checks cover those bytes) and the leader must send the entries
again; every append is acknowledged, and when the members stop their data files are
byte-identical.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading

from cluster.node.launcher import node_command
from tests.support.commands import cli
from tests.support.group import wait_for
from tests.support.ports import free_ports

HOST = "127.0.0.1"
PUSH = 51004
# what to do to the pushes, in order: (name, offset in the first entry of the range or None to tear)
DAMAGE = [("body", 48 + 3), ("chain", 38), ("term", 23), ("body crc", 42), ("torn", None)]


class FlipProxy:
    """Forwards HOST:port to the target; requests are read frame by frame and the first
    APPEND pushes are damaged as DAMAGE says. Runs its own event loop in a thread."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.done: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def main():
            self.server = await asyncio.start_server(self._accept, HOST, 0)
            self.port = self.server.sockets[0].getsockname()[1]
            self.ready.set()
            await self.server.serve_forever()

        try:
            self.loop.run_until_complete(main())
        except asyncio.CancelledError:
            pass

    def close(self) -> None:
        self.loop.call_soon_threadsafe(lambda: [t.cancel() for t in asyncio.all_tasks(self.loop)])
        self.thread.join(10)

    def _damage(self, frame: bytes) -> bytes:
        """``frame`` (without its length field) as it goes on: changed when it is an APPEND
        push and damage is left to do."""
        if len(self.done) >= len(DAMAGE):
            return frame
        hl = int.from_bytes(frame[:4], "big") & 0xFFFFFF
        header = json.loads(frame[4:4 + hl])
        body_at = 4 + hl
        if header.get("code") != PUSH or header.get("flag", 0) & 1 or \
                (header.get("extFields") or {}).get("type") != "APPEND" or len(frame) - body_at < 48 + 8:
            return frame
        name, at = DAMAGE[len(self.done)]
        self.done.append(name)
        if at is None:  # torn: the range ends 5 bytes into its first entry's body
            return frame[:body_at + 48 + 5]
        out = bytearray(frame)
        out[body_at + at] ^= 0x21
        return bytes(out)

    async def _accept(self, reader, writer) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, self.target)
        except OSError:
            writer.close()
            return

        async def requests():
            while True:
                n = int.from_bytes(await reader.readexactly(4), "big")
                frame = self._damage(await reader.readexactly(n))
                up_writer.write(len(frame).to_bytes(4, "big") + frame)
                await up_writer.drain()

        async def answers():
            while data := await up_reader.read(1 << 16):
                writer.write(data)
                await writer.drain()

        tasks = [asyncio.ensure_future(requests()), asyncio.ensure_future(answers())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            writer.close()
            up_writer.close()


def test_pushes_damaged_in_flight_are_refused_and_sent_again(tmp_path):
    ports = dict(zip(("n0", "n1", "n2"), free_ports(3)))
    proxy = FlipProxy(ports["n2"])
    peers = ";".join(f"{i}-{HOST}:{p}" for i, p in ports.items())
    base = str(tmp_path / "store")
    procs = {}
    try:
        for i in ports:
            extra = ["--data-file-size", "1MiB", "--index-file-size", "256KiB", "--preferred-leader", "n0"]
            if i != "n2":
                extra += ["--peer-address", f"n2={HOST}:{proxy.port}"]
            with open(tmp_path / f"{i}.log", "wb") as out:
                procs[i] = subprocess.Popen(node_command("flips", i, peers, base, "async", extra),
                                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

        def rows():
            r = cli("cluster", "status", "--peers", peers, "--group", "flips", "--format", "json", "--timeout", "1")
            return {x["id"]: x for x in json.loads(r.stdout)} if r.stdout.strip() else {}

        wait_for(lambda: rows().get("n0", {}).get("role") == "leader", 60, "n0 to lead")
        acked = 0
        for _ in range(30):  # (until every damage is done: a member catching up takes requests in fewer pushes)
            lines = "".join(f"entry-{k:04d}-" + "x" * (k % 90) + "\n" for k in range(acked, acked + 200))
            r = cli("append", "--peers", peers, "--group", "flips", "--file", "-", "--lines", "--batch", "50",
                    "--format", "json", "--timeout", "30", input=lines, timeout=120)
            assert r.returncode == 0, r.stderr
            acked += len(json.loads(r.stdout))
            if len(proxy.done) == len(DAMAGE):
                break
        assert proxy.done == [name for name, _at in DAMAGE]

        def level():
            got = rows()
            return len(got) == 3 and len({(x["end_index"], x["committed_index"]) for x in got.values()}) == 1
        wait_for(level, 30, "every member to hold and commit every entry")
        end = rows()["n0"]["end_index"]
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        proxy.close()
    logs = {i: (tmp_path / f"{i}.log").read_text(errors="replace") for i in ports}
    assert "Traceback" not in "".join(logs.values())
    stores = {i: os.path.join(base, f"dledger-{i}") for i in ports}
    for i in ("n1", "n2"):
        d = cli("store", "diff", stores["n0"], stores[i], "--format", "json")
        assert d.returncode == 0 and json.loads(d.stdout)["identical"], d.stdout + d.stderr
    for i in ports:
        v = cli("store", "verify", stores[i])
        assert v.returncode == 0, v.stdout + v.stderr
    # byte for byte, every data file the same on all three, up to the end of the log
    names = sorted(os.listdir(os.path.join(stores["n0"], "data")))
    for name in names:
        blobs = {open(os.path.join(stores[i], "data", name), "rb").read() for i in ports}
        assert len(blobs) == 1, f"data file {name} differs between the members"
    assert end >= acked >= 200
