#!/usr/bin/env python3
"""One PySyncObj member for benchmarks/bench_cluster.py: a replicated append-only log
behind a small length-prefixed TCP protocol on 127.0.0.1.

The replicated state is an entry counter and a byte counter (the bodies themselves live in
PySyncObj's Raft journal, not in the state machine, so memory stays flat). Each body is one
``@replicated append(body)`` call, i.e. one Raft log entry; a request with N bodies makes N
calls and is answered once all N callbacks have fired: PySyncObj calls them on the leader
when the entry is committed by a majority and applied (``FAIL_REASON.SUCCESS``), or with
an error code.

PySyncObj settings (``SyncObjConf``, see SETTINGS): ``journalFile`` (file journal) and
``fullDumpFile`` (snapshot written at each log compaction), ``appendEntriesUseBatch=True``,
``autoTickPeriod=0.002`` and ``appendEntriesPeriod=0.005``; everything else at its defaults
(raft election timeouts 0.4-1.4 s, connectionTimeout 3.5 s, leaderFallbackTimeout 30 s,
appendEntriesBatchSizeBytes 64 KiB, log compaction every 5000 entries or 300 s,
commandsQueueSize 100000). The two periods are shortened because with batching on,
PySyncObj sends AppendEntries only once per appendEntriesPeriod and picks queued commands
up only when its tick thread wakes (its poll waits up to autoTickPeriod), and it adds a new
command to the log after that tick's send: at the defaults (0.1 s and 0.05 s) every commit
waits about 100 ms, one client gets 10 entries/s and 64 clients about 600.
``--conf appendEntriesPeriod=0.1 --conf autoTickPeriod=0.05`` restores the defaults.

Durability: PySyncObj has no fsync option. Its file journal is an mmap that is never
msync'ed while running (only on destroy), and the meta file holding term, vote and commit
index is rewritten with no fsync; so the log survives a process crash but not a power
loss -- the same class as dledgerctl ``flush=async``. ``--conf KEY=VALUE`` overrides any
setting (numbers and true/false are parsed).

Protocol (little-endian), one connection may carry many requests at once:

    request:  u32 length | u8 op | u64 request id | payload
              op 'A' (append): u32 count, then count x (u32 size, body)
              op 'S' (status): no payload
    response: u32 length | u8 status | u64 request id | payload
              status 0 = committed and applied; otherwise a pysyncobj FAIL_REASON code
              (255 = malformed request); 'S' answers a JSON object as payload

Usage: pysyncobj_node.py --self 127.0.0.1:P --partner 127.0.0.1:Q --partner 127.0.0.1:R
                         --client-port C --dir DIR [--conf KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import struct
import threading

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

OP_APPEND, OP_STATUS = ord("A"), ord("S")
REQ_HEAD = struct.Struct("<BQ")     # after the u32 length
RESP_HEAD = struct.Struct("<IBQ")   # u32 length (of what follows it), status, request id
U32 = struct.Struct("<I")
MALFORMED = 255
SETTINGS = {"appendEntriesUseBatch": True, "autoTickPeriod": 0.002, "appendEntriesPeriod": 0.005}


class Log(SyncObj):
    # Class-level defaults: SyncObj snapshots only instance attributes created after its
    # __init__, so the counters become instance attributes on the first apply.
    entries = 0
    size = 0

    @replicated
    def append(self, body: bytes) -> int:
        self.entries += 1
        self.size += len(body)
        return self.entries


class Pending:
    __slots__ = ("writer", "rid", "left", "status")

    def __init__(self, writer, rid: int, left: int) -> None:
        self.writer, self.rid, self.left, self.status = writer, rid, left, FAIL_REASON.SUCCESS


class Server:
    def __init__(self, obj: Log, loop: asyncio.AbstractEventLoop) -> None:
        self.obj, self.loop = obj, loop
        self.done: collections.deque = collections.deque()  # (Pending, err) from the tick thread
        self.lock = threading.Lock()
        self.scheduled = False

    # called on PySyncObj's tick thread (or inline, e.g. QUEUE_FULL)
    def _callback(self, pending: Pending, _res, err) -> None:
        self.done.append((pending, err))
        with self.lock:
            if self.scheduled:
                return
            self.scheduled = True
        self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self.lock:
            self.scheduled = False
        out: dict = {}
        while self.done:
            pending, err = self.done.popleft()
            if err != FAIL_REASON.SUCCESS and pending.status == FAIL_REASON.SUCCESS:
                pending.status = err
            pending.left -= 1
            if pending.left == 0:
                out.setdefault(pending.writer, []).append(RESP_HEAD.pack(9, pending.status, pending.rid))
        for writer, chunks in out.items():  # one write per connection per drain
            if not writer.is_closing():
                writer.write(b"".join(chunks))

    def status(self) -> dict:
        obj = self.obj
        leader = obj._getLeader()
        return {"leader": obj._isLeader(), "ready": obj.isReady(),
                "leader_addr": None if leader is None else leader.id,
                "applied": obj.raftLastApplied, "entries": obj.entries}

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (n,) = U32.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(n)
                op, rid = REQ_HEAD.unpack_from(frame)
                if op == OP_STATUS:
                    body = json.dumps(self.status()).encode()
                    writer.write(RESP_HEAD.pack(9 + len(body), 0, rid) + body)
                    continue
                bodies = []
                try:
                    if op != OP_APPEND:
                        raise ValueError(op)
                    (count,) = U32.unpack_from(frame, 9)
                    off = 13
                    for _ in range(count):
                        (size,) = U32.unpack_from(frame, off)
                        bodies.append(frame[off + 4:off + 4 + size])
                        off += 4 + size
                    if not bodies or off != len(frame):
                        raise ValueError("count")
                except (ValueError, struct.error):
                    writer.write(RESP_HEAD.pack(9, MALFORMED, rid))
                    continue
                pending = Pending(writer, rid, len(bodies))
                cb = lambda res, err, p=pending: self._callback(p, res, err)  # noqa: E731
                for body in bodies:
                    self.obj.append(body, callback=cb)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def parse_value(v: str):
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    for kind in (int, float):
        try:
            return kind(v)
        except ValueError:
            pass
    return v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--self", required=True, dest="self_addr")
    ap.add_argument("--partner", action="append", default=[])
    ap.add_argument("--client-port", type=int, required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--conf", action="append", default=[], help="SyncObjConf KEY=VALUE")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    settings = {"journalFile": os.path.join(args.dir, "journal"),
                "fullDumpFile": os.path.join(args.dir, "dump"), **SETTINGS}
    for kv in args.conf:
        k, _, v = kv.partition("=")
        settings[k] = parse_value(v)
    obj = Log(args.self_addr, args.partner, conf=SyncObjConf(**settings))

    async def run() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        server = Server(obj, loop)
        srv = await asyncio.start_server(server.serve, "127.0.0.1", args.client_port)
        await stop.wait()
        srv.close()

    try:
        asyncio.run(run())
    finally:
        obj.destroy()


if __name__ == "__main__":
    main()
