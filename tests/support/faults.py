"""A fault harness for real node processes on 127.0.0.1: the Jepsen promise on one machine.

The promise (DLedger's, checked with Jepsen's set checker): every acknowledged append is
read back. Here, harsher: every acknowledged append is present, once, at the index it was
acknowledged with, with the same body and term, in every node's committed log; no append
the leader refused appears anywhere; committed logs are identical (``store diff``); every
store passes ``store verify``; and a leader is elected within a bound after each heal.

Pieces, each usable alone:

- :class:`LinkProxy` / :class:`Network`: one loopback TCP proxy per directed link (from ->
  to). Each node gets its own peers string: its own entry is its real listen address,
  every other member's entry is the proxy of the link from it to that member (a node
  reaches a peer only through its own channel, so the connection of link a->b carries
  a's requests to b and b's answers). A link passes, delays, drops (connections reset and
  refused) or black-holes (bytes swallowed, connections left open) its traffic.
  Clients and the monitor reach the nodes directly.
- :class:`NodeProc`: a node process (``cluster.node.launcher.node_command``) that can be
  killed (-9), paused (SIGSTOP/SIGCONT), restarted and stopped cleanly; :func:`tear`
  damages the tail of a killed node's last data file the way a crash mid-write does.
- :class:`Appender`: concurrent clients, each appending 1-3 unique bodies per request and
  recording every request as ok / failed / unknown (``AppendError.outcome``: a timeout or
  a lost answer is unknown, never failed).
- :class:`Monitor`: METADATA of every node several times a second. The cluster "has a
  leader" when a node leads and a quorum of nodes (itself included) follows it in its term.
- :func:`make_schedule` and :class:`Nemesis`: faults drawn from a seed and injected on a
  schedule; after each fault is undone and the cluster is whole again, the time until it
  has a leader is measured.
- :func:`check`: reads every node's store offline up to its committed index and checks
  the promise, then runs ``dledgerctl store verify`` and ``store diff``.

:func:`run` puts them together: start, load and faults, heal, wait for one leader and for
every node to reach its committed index, stop the nodes, check. The schedule is a
function of the seed; what the faults hit (which node leads at that moment) depends on
timing, so a replay repeats the faults, not the exact interleaving.

Torn writes stay inside the failure model (Raft survives losing one node's disk state
only while the others hold every committed entry): the victim is paused first and torn
only once every other node holds everything a leader other than it has, and no further
fault is injected until it has caught up again.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import functools
import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

from cluster.node import pki
from cluster.net.channel import Channel
from cluster.net.client import AppendError, Client, ClientError
from cluster.net.frames import ProtocolError
from cluster.net.tls import Identity, Tls, TlsFiles, expect_member
from cluster.net.transport import TransportError
from cluster.node.launcher import node_command
from cluster.raft.config import Peer
from store.errors import StoreError
from store.filestore import FileStore
from store.format import (CHAIN_INPUT, CRC_MASK, ENTRY_HEADER, HEADER_SIZE, INDEX_RECORD, INDEX_UNIT_SIZE, MAGIC_CONFIG,
                          MAGIC_NOOP, MAGIC_NORMAL, crc32)
from tests.support import commands, hostile, linearizability
from tests.support.kvclients import KvClients
from tests.support.paths import ROOT
from tests.support.ports import free_ports  # noqa: F401 (tests take it from here too)

HOST = "127.0.0.1"
GROUP = "faults"
PASS, DROP, BLACKHOLE = "pass", "drop", "blackhole"
SMALL_FILES = ["--data-file-size", "1MiB", "--index-file-size", "256KiB"]  # many files, little disk


# -- the network: one proxy per directed link ----------------------------------------------
class _Direction:
    """Bytes one way through a proxied connection, in order, each chunk held back by the
    link's delay when it has one."""

    def __init__(self, link: "LinkProxy", reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.link, self.reader, self.writer = link, reader, writer
        self.queue: collections.deque = collections.deque()
        self.wake = asyncio.Event()
        self.busy = False
        self.last_due = 0.0

    async def read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        link = self.link
        while True:
            data = await self.reader.read(1 << 16)
            if not data:
                return
            if link.mode == BLACKHOLE:
                link.swallowed += len(data)
                continue
            lo, hi = link.delay_ms
            if hi <= 0 and not self.queue and not self.busy:
                self.writer.write(data)
                if self.writer.transport.get_write_buffer_size() > 1 << 20:
                    await self.writer.drain()
                continue
            due = max(self.last_due, loop.time() + link.rng.uniform(lo, hi) / 1000)
            self.last_due = due
            self.queue.append((due, data))
            self.wake.set()

    async def write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self.queue:
                self.wake.clear()
                await self.wake.wait()
            due, data = self.queue.popleft()
            self.busy = True
            try:
                if due > loop.time():
                    await asyncio.sleep(due - loop.time())
                if self.link.mode == BLACKHOLE:
                    self.link.swallowed += len(data)
                    continue
                self.writer.write(data)
                await self.writer.drain()
            finally:
                self.busy = False


class LinkProxy:
    """The directed link ``frm -> to``: a listening port that forwards to ``to``'s address."""

    def __init__(self, frm: str, to: str, target: tuple[str, int], seed: int = 0) -> None:
        self.frm, self.to, self.target = frm, to, target
        self.mode = PASS
        self.delay_ms: tuple[float, float] = (0.0, 0.0)
        self.rng = random.Random(seed)
        self.port: int | None = None
        self.server: asyncio.base_events.Server | None = None
        self.conns: set = set()
        self.swallowed = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, HOST, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        self.reset()
        if self.server is not None:
            await self.server.wait_closed()

    def set(self, mode: str | None = None, delay_ms: tuple[float, float] | None = None) -> None:
        """Change the link. Going to DROP resets its connections; leaving BLACKHOLE too
        (bytes were swallowed mid-stream, so what follows would not parse)."""
        old = self.mode
        if mode is not None:
            self.mode = mode
        if delay_ms is not None:
            self.delay_ms = delay_ms
        if self.mode == DROP or (old == BLACKHOLE and self.mode != BLACKHOLE):
            self.reset()

    def reset(self) -> None:
        for tasks, writers in list(self.conns):
            for w in writers:
                w.transport.abort()
            for t in tasks:
                t.cancel()
        self.conns.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == DROP:
            writer.transport.abort()
            return
        try:
            ureader, uwriter = await asyncio.wait_for(asyncio.open_connection(*self.target), 1.0)
        except (OSError, asyncio.TimeoutError):
            writer.transport.abort()
            return
        if self.mode == DROP:  # dropped while connecting
            writer.transport.abort()
            uwriter.transport.abort()
            return
        ends = (_Direction(self, reader, uwriter), _Direction(self, ureader, writer))
        tasks = [asyncio.ensure_future(f) for d in ends for f in (d.read_loop(), d.write_loop())]
        conn = (tuple(tasks), (writer, uwriter))
        self.conns.add(conn)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            writer.transport.abort()
            uwriter.transport.abort()
            self.conns.discard(conn)


class Network:
    """Every directed link between ``ids``; ``addresses[id]`` is the node's real port."""

    def __init__(self, ids: list[str], ports: dict[str, int], seed: int = 0) -> None:
        self.ids, self.ports = ids, ports
        self.links = {(a, b): LinkProxy(a, b, (HOST, ports[b]), seed * 1000 + k)
                      for k, (a, b) in enumerate((a, b) for a in ids for b in ids if a != b)}

    async def start(self) -> None:
        for link in self.links.values():
            await link.start()

    async def close(self) -> None:
        for link in self.links.values():
            await link.close()

    def peers_for(self, node: str, ids: list[str] | None = None) -> str:
        """``node``'s peers string (of ``ids``, default all): itself at its real address, the
        others behind its links."""
        return ";".join(f"{p}-{HOST}:{self.ports[p] if p == node else self.links[(node, p)].port}"
                        for p in (ids or self.ids))

    def cut(self, pairs, mode: str) -> None:
        for a, b in pairs:
            self.links[(a, b)].set(mode)

    def partition(self, groups: list[list[str]], mode: str) -> None:
        """Cut every link between nodes of different groups (both directions)."""
        where = {i: g for g, members in enumerate(groups) for i in members}
        self.cut([(a, b) for (a, b) in self.links if where.get(a, -1) != where.get(b, -2)], mode)

    def only(self, allowed: set[tuple[str, str]], mode: str) -> None:
        """Cut every link not in ``allowed`` (pairs, both directions of each kept)."""
        keep = allowed | {(b, a) for a, b in allowed}
        self.cut([p for p in self.links if p not in keep], mode)

    def slow(self, delay_ms: tuple[float, float], pairs=None) -> None:
        for p in pairs or list(self.links):
            self.links[p].set(delay_ms=delay_ms)

    def heal(self) -> None:
        for link in self.links.values():
            link.set(PASS, (0.0, 0.0))

    @property
    def healthy(self) -> bool:
        return all(link.mode == PASS and link.delay_ms[1] <= 0 for link in self.links.values())


# -- node processes ----------------------------------------------------------------------
def _die_with_the_harness() -> None:
    """In a node process before it runs: have the kernel SIGKILL it when the process that
    started it dies, however that dies (Linux's PR_SET_PDEATHSIG). The nodes run in
    sessions of their own, so without this a harness killed mid-run left them running,
    holding elections for nobody."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: stop() and kill() still clean up a harness that ends normally


class NodeProc:
    """One node process; its store lives in ``<base_dir>/dledger-<id>``."""

    def __init__(self, node_id: str, port: int, peers: str, base_dir: str, flush: str, extra: list[str],
                 log_dir: str, tls_dir: str | None = None, metrics_port: int | None = None) -> None:
        self.id, self.port = node_id, port
        self.base_dir = base_dir
        self.dir = os.path.join(base_dir, f"dledger-{node_id}")
        self.log = os.path.join(log_dir, f"{node_id}.log")
        self.metrics = None if metrics_port is None else f"http://{HOST}:{metrics_port}/metrics"
        # (the metrics stay plain HTTP under TLS too: MetricsWatch scrapes without a certificate)
        self.cmd = node_command(GROUP, node_id, peers, base_dir, flush, extra, tls_dir,
                                None if metrics_port is None else f"{HOST}:{metrics_port}", metrics_tls=False)
        self.proc: subprocess.Popen | None = None
        self.state = "down"  # up | paused | down
        self.starts = 0

    def start(self) -> None:
        os.makedirs(self.base_dir, exist_ok=True)
        with open(self.log, "ab") as out:
            out.write(f"--- start {self.starts} at {time.strftime('%H:%M:%S')}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, cwd=self.base_dir,
                                         env=dict(os.environ, PYTHONPATH=ROOT), preexec_fn=_die_with_the_harness)
        self.starts += 1
        self.state = "up"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.state = "down"

    def pause(self) -> None:
        if self.state == "up":
            self.proc.send_signal(signal.SIGSTOP)
            self.state = "paused"

    def resume(self) -> None:
        if self.state == "paused":
            self.proc.send_signal(signal.SIGCONT)
            self.state = "up"

    def exited(self) -> bool:
        return self.proc is None or self.proc.poll() is not None

    async def stop(self, timeout: float = 20.0) -> bool:
        """SIGTERM and wait; True when it exited on its own (False: killed after ``timeout``)."""
        if self.proc is None or self.proc.poll() is not None:
            self.state = "down"
            return True
        self.resume()
        self.proc.send_signal(signal.SIGTERM)
        end = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < end:
            await asyncio.sleep(0.05)
        clean = self.proc.poll() is not None
        if not clean:
            self.kill()
        self.state = "down"
        return clean

    def log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log, "rb") as fh:
                fh.seek(0, 2)
                fh.seek(max(0, fh.tell() - 16384))
                return "\n".join(fh.read().decode(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def tear(node_dir: str, rng: random.Random) -> str:
    """Damage the tail of a stopped node's last data file as a crash in the middle of a
    write leaves it; returns what was done. Modes: ``cut`` (the file ends inside one of
    the last entries), ``zero`` (from inside one of the last entries to the end of what
    was written, the pages never reached the disk), ``corrupt`` (bytes of one of the last
    entries changed), ``garbage`` (a torn partial entry after the last one)."""
    if not os.path.isdir(node_dir):
        return "nothing to tear (no store yet)"
    with FileStore.open(node_dir, read_only=True) as s:
        if s.end_index < 0:
            return "nothing to tear (empty log)"
        fsize = s.data.file_size
        last_file = (s.write_pos - 1) // fsize * fsize
        tail = []
        i = s.end_index
        while i >= s.begin_index and len(tail) < 3:
            try:
                e = s.get(i)
            except StoreError:  # killed between writing an entry and its index record: the record is missing
                i -= 1
                continue
            if e.pos < last_file:
                break
            tail.append(e)
            i -= 1
        write_pos, end_index, end_term, last_chain = s.write_pos, s.end_index, s.end_term, s.last_chain
    path = os.path.join(node_dir, "data", f"{last_file:020d}")
    mode = rng.choice(("cut", "zero", "corrupt", "garbage"))
    with_body = [e for e in tail if len(e.body) > 0]
    if not tail or (mode == "corrupt" and not with_body):
        mode = "garbage"
    if mode == "garbage":
        # the next entry, header and a part of its body, as a write cut short leaves it
        rel = write_pos - last_file
        body = rng.randbytes(rng.randint(20, 200))
        bcrc = crc32(body) & CRC_MASK
        chain = crc32(CHAIN_INPUT.pack(last_chain, end_index + 1, end_term, bcrc)) & CRC_MASK
        entry = ENTRY_HEADER.pack(MAGIC_NORMAL, HEADER_SIZE + len(body), end_index + 1, end_term, write_pos, 0,
                                  chain, bcrc, len(body)) + body
        junk = entry[: min(fsize - rel, rng.randint(8, len(entry) - 1))]
        with open(path, "r+b") as fh:
            fh.seek(rel)
            fh.write(junk)
        return f"garbage: {len(junk)} of the {len(entry)} bytes of an entry {end_index + 1} after the last one"
    victim = rng.choice(with_body if mode == "corrupt" else tail)
    if mode == "corrupt":  # the rest of its body overwritten (sectors holding other bytes)
        cut_at = victim.pos - last_file + HEADER_SIZE + rng.randint(0, len(victim.body) - 1)
        end = victim.pos - last_file + victim.size
        with open(path, "r+b") as fh:
            fh.seek(cut_at)
            fh.write(rng.randbytes(end - cut_at))
        return f"corrupt: bytes {cut_at}..{end} of {os.path.basename(path)} overwritten, in entry {victim.index}"
    cut_at = victim.pos - last_file + rng.randint(1, victim.size - 1)
    if mode == "cut":
        os.truncate(path, cut_at)
        return f"cut: {os.path.basename(path)} truncated to {cut_at} bytes, inside entry {victim.index}"
    end = write_pos - last_file
    with open(path, "r+b") as fh:
        fh.seek(cut_at)
        fh.write(bytes(end - cut_at))
    return f"zero: bytes {cut_at}..{end} of {os.path.basename(path)} zeroed, from inside entry {victim.index}"


# -- clients -----------------------------------------------------------------------------
def flip_committed(node_dir: str, index: int, rng: random.Random) -> str:
    """Flip one byte of entry ``index`` in a running member's files (through the files, as a
    failing disk would; its mappings see it): of its body, its header or its index record.
    What was flipped, for the log."""
    recs = sorted((int(n), n) for n in os.listdir(os.path.join(node_dir, "index")) if n.isdigit())
    off = index * INDEX_UNIT_SIZE
    start, name = [r for r in recs if r[0] <= off][-1]
    ipath = os.path.join(node_dir, "index", name)
    with open(ipath, "rb") as fh:
        fh.seek(off - start)
        _m, pos, size, _i, _t = INDEX_RECORD.unpack(fh.read(INDEX_UNIT_SIZE))
    where = rng.choice(("body", "header", "record")) if size > HEADER_SIZE else rng.choice(("header", "record"))
    if where == "record":
        path, at = ipath, off - start + 4 + rng.randrange(2, 8)  # a byte of its pos
    else:
        files = sorted((int(n), n) for n in os.listdir(os.path.join(node_dir, "data")) if n.isdigit())
        fstart, fname = [f for f in files if f[0] <= pos][-1]
        rel = pos - fstart + (rng.randrange(HEADER_SIZE, size) if where == "body" else rng.choice((3, 15, 23, 39)))
        path, at = os.path.join(node_dir, "data", fname), rel
    with open(path, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)[0]
        fh.seek(at)
        fh.write(bytes([b ^ (1 << rng.randrange(8))]))
    return f"entry {index} {where} byte {at} of {os.path.basename(path)}"


def flip_tail(node_dir: str, committed: int, rng: random.Random, body: bytes | None = None) -> str:
    """Flip one body byte of the last entry in a running (or paused) member's files when it
    lies past ``committed`` (and, given ``body``, holds it); what was done, for the log."""
    try:
        with FileStore.open(node_dir, read_only=True) as st:
            end = st.end_index
            if end <= committed or end < 0:
                return f"nothing past the commit index {committed} to damage (log ends at {end})"
            if body is not None and st.get(end).body != body:
                return f"its last entry {end} is not the probe (the probe was not taken)"
            pos, size = st.locate(end)
            fstart = pos - pos % st.data_file_size
    except StoreError as exc:
        return f"log unreadable ({exc})"
    if size <= HEADER_SIZE:
        return f"entry {end} has no body to damage"
    at = pos - fstart + rng.randrange(HEADER_SIZE, size)
    path = os.path.join(node_dir, "data", f"{fstart:020d}")
    with open(path, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)[0]
        fh.seek(at)
        fh.write(bytes([b ^ (1 << rng.randrange(8))]))
    return f"entry {end} (past commit index {committed}) body byte {at} of {os.path.basename(path)}"


@dataclass
class Request:
    client: int
    seq: int
    bodies: list[bytes]
    start: float
    end: float = 0.0
    outcome: str = "pending"  # ok | failed | unknown
    entries: list = field(default_factory=list)  # ok: [index, term, pos, size] per body
    error: str = ""
    code: object = None  # the last answer's code (cluster.raft.rpc.Code), when there was one


class Appender:
    """``clients`` concurrent appenders, each sending its next request when the previous
    one has an outcome. Bodies are unique: ``<tag>:c<client>:r<seq>:e<k>`` plus padding."""

    def __init__(self, peers: dict[str, Peer], clients: int, seed: int, tag: str, timeout: float = 3.0,
                 tls=None) -> None:
        self.peers, self.clients, self.timeout, self.tls = peers, clients, timeout, tls
        self.rng = random.Random(seed)
        self.tag = tag.encode()
        self.requests: list[Request] = []
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        await asyncio.gather(*(self._client(c) for c in range(self.clients)))

    async def _client(self, c: int) -> None:
        loop = asyncio.get_running_loop()
        client = Client(self.peers, GROUP, timeout=self.timeout, tls=self.tls)
        rng = random.Random(self.rng.random())
        seq = 0
        try:
            while not self.stopping.is_set():
                n = rng.choice((1, 1, 1, 2, 3))
                bodies = [b"%s:c%d:r%d:e%d:" % (self.tag, c, seq, k) + b"x" * rng.randint(0, 200) for k in range(n)]
                req = Request(c, seq, bodies, loop.time())
                self.requests.append(req)
                seq += 1
                try:
                    resp = await client.append(bodies, resend_unknown=False)
                    req.outcome, req.entries = "ok", [list(e) for e in resp["entries"]]
                except AppendError as exc:
                    req.outcome, req.error, req.code = exc.outcome, str(exc), exc.code
                except Exception as exc:  # noqa: BLE001 - anything else: the entries may be in
                    req.outcome, req.error = "unknown", f"{type(exc).__name__}: {exc}"
                req.end = loop.time()
                if req.outcome != "ok":
                    await asyncio.sleep(0.05)
        finally:
            await client.close()

    def counts(self) -> dict[str, int]:
        out = collections.Counter(r.outcome for r in self.requests)
        return {k: out.get(k, 0) for k in ("ok", "failed", "unknown", "pending")}


# -- watching the cluster ----------------------------------------------------------------
class Monitor:
    """METADATA of every node every ``period`` s, straight to the nodes (no proxies)."""

    def __init__(self, peers: dict[str, Peer], period: float = 0.1, timeout: float = 0.3, tls=None) -> None:
        self.peers, self.period, self.timeout = peers, period, timeout
        self.client = Client(peers, GROUP, timeout=timeout, tls=tls)
        ssl = {} if tls is None else {"ssl": tls.client, "expect": functools.partial(expect_member, GROUP)}
        for p, peer in peers.items():  # a restarted node is seen within a period, not after a long back-off
            if ssl:
                ssl["expect"] = functools.partial(expect_member, GROUP, p)
            self.client.channels[p] = Channel(peer.host, peer.port, connect_timeout=timeout, backoff_max=period,
                                              **ssl)
        self.quorum = len(peers) // 2 + 1
        self.members = list(peers)  # whom it samples (the group's members; membership changes move it)
        self.last: dict[str, dict | None] = {p: None for p in peers}
        self.leader: str | None = None
        self.leader_at: float | None = None  # when the current leader was first seen
        self.leaderless_since: float | None = None
        self.max_leaderless = 0.0
        self.samples = 0
        self.changed = asyncio.Event()
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        self.leaderless_since = asyncio.get_running_loop().time()
        try:
            while not self.stopping.is_set():
                await self.sample()
                try:
                    await asyncio.wait_for(self.stopping.wait(), self.period)
                except asyncio.TimeoutError:
                    pass
        finally:
            await self.client.close()

    async def _one(self, p: str):
        try:
            return p, await self.client.metadata(p, self.timeout)
        except (TransportError, ProtocolError):
            return p, None

    def set_members(self, members: list[str], voters: int) -> None:
        self.members, self.quorum = list(members), voters // 2 + 1
        self.last = {p: self.last.get(p) for p in self.members}

    async def sample(self) -> None:
        got = dict(await asyncio.gather(*(self._one(p) for p in self.members)))
        now = asyncio.get_running_loop().time()
        self.last = got
        self.samples += 1
        leader = quorum_leader(got, self.quorum)
        if leader is None:
            if self.leaderless_since is None:
                self.leaderless_since = now
            self.max_leaderless = max(self.max_leaderless, now - self.leaderless_since)
        else:
            if self.leaderless_since is not None:
                self.max_leaderless = max(self.max_leaderless, now - self.leaderless_since)
                self.leaderless_since = None
            if leader != self.leader:
                self.leader_at = now
        self.leader = leader
        self.changed.set()

    def restart_clock(self) -> None:
        """Count time without a leader from now on (not the first election)."""
        self.max_leaderless = 0.0
        if self.leaderless_since is not None:
            self.leaderless_since = asyncio.get_running_loop().time()

    async def wait(self, cond, timeout: float) -> bool:
        """Wait until ``cond(self)`` holds after a sample, at most ``timeout`` s."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while not cond(self):
            left = end - loop.time()
            if left <= 0:
                return False
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                return bool(cond(self))
        return True


def quorum_leader(md: dict[str, dict | None], quorum: int) -> str | None:
    """The node that leads with a quorum following it in its term, if any."""
    for p, m in md.items():
        if not m or m.get("role") != "leader":
            continue
        term = m.get("term")
        followers = sum(1 for q, o in md.items() if o and o.get("term") == term and (q == p or o.get("leader") == p))
        if followers >= quorum:
            return p
    return None


def converged(md: dict[str, dict | None], quorum: int) -> bool:
    """One leader; every node in its term with the leader's end, all of it committed."""
    leader = quorum_leader(md, quorum)
    if leader is None or not all(md.values()):
        return False
    lm = md[leader]
    return lm.get("pending", 0) == 0 and all(
        m["term"] == lm["term"] and m["end_index"] == m["committed_index"] == lm["end_index"] for m in md.values())


# -- the schedule ------------------------------------------------------------------------
# kind -> weight (copies in the deck a schedule is dealt from)
KILL_FAULTS = {"kill-leader": 3, "kill-follower": 2, "kill-minority": 1, "kill-majority": 1, "kill-all": 1}
PARTITION_FAULTS = {"partition-halves": 2, "isolate-leader": 2, "majority-ring": 2, "one-way": 2, "slow-links": 1,
                    "flaky-link": 1}
MIXED_FAULTS = {"kill-leader": 1, "kill-follower": 1, "kill-minority": 1, "partition-halves": 1, "isolate-leader": 1,
                "majority-ring": 1, "one-way": 1, "pause-leader": 2, "pause-follower": 1, "torn-write": 3,
                "partition+pause": 1, "kill+partition": 1}
# membership changes (peer replace: a spare joins as a learner, then a member leaves), alone
# and racing a crash of the leader or a partition, among the other faults
MEMBER_FAULTS = {"replace-follower": 2, "replace-leader": 2, "replace+kill-leader": 2, "replace+partition": 2,
                 "kill-leader": 1, "kill-follower": 1, "isolate-leader": 1, "partition-halves": 1, "pause-leader": 1,
                 "torn-write": 1}
# frames an attacker or a buggy peer sends (tests/support/hostile.py) to every member, alone and
# while the group is already shaken
HOSTILE_FAULTS = {"hostile": 4, "hostile+kill-leader": 1, "hostile+partition": 1, "kill-follower": 1,
                  "isolate-leader": 1}
# bytes flipped in committed entries of one running member at a time (its scrub must find and
# repair them from a replica), among kills, pauses and partitions
BITROT_FAULTS = {"bitrot": 4, "kill-follower": 1, "pause-leader": 1, "partition-halves": 1, "isolate-leader": 1}
# bytes flipped in entries nobody committed yet: the leader's tail while its followers are
# paused, and a follower's last entry (issue 59), among kills and pauses
ROTTAIL_FAULTS = {"rot-tail": 4, "rot-follower-tail": 2, "kill-follower": 1, "pause-leader": 1}
PROFILES = {"kills": KILL_FAULTS, "partitions": PARTITION_FAULTS, "mixed": MIXED_FAULTS, "members": MEMBER_FAULTS,
            "hostile": HOSTILE_FAULTS, "bitrot": BITROT_FAULTS, "rot-tail": ROTTAIL_FAULTS}
SPARES = {"members": 40}  # ids a profile's runs may add


@dataclass
class Step:
    kind: str
    hold: float  # seconds the fault lasts
    gap: float  # seconds of calm after it is undone
    mode: str  # DROP or BLACKHOLE for cuts
    pick: float  # in [0, 1): which of the candidates the fault hits


def make_schedule(seed: int, profile: str, seconds: float) -> list[Step]:
    """The faults of a run, from the seed alone (enough of them to fill ``seconds``). Kinds
    are dealt from a shuffled deck holding each kind as often as its weight, so a short run
    still sees most of them."""
    rng = random.Random(f"{profile}:{seed}")
    deck: list[str] = []
    steps, t = [], 0.0
    while t < seconds:
        if not deck:
            deck = [k for k, w in PROFILES[profile].items() for _ in range(w)]
            rng.shuffle(deck)
        step = Step(deck.pop(), round(rng.uniform(1.0, 5.0), 2), round(rng.uniform(0.3, 2.5), 2),
                    rng.choice((DROP, BLACKHOLE)), rng.random())
        steps.append(step)
        t += step.hold + step.gap
    return steps


class Nemesis:
    """Runs a schedule against a cluster: each step injects a fault, holds it, undoes it,
    waits a little. Every undo that leaves the cluster whole is a heal: the time from it to
    the monitor's next leader is recorded."""

    def __init__(self, cluster: "Cluster", steps: list[Step], seed: int, log) -> None:
        self.c = cluster
        self.steps = steps
        self.rng = random.Random(seed)
        self.log = log
        self.counts: collections.Counter = collections.Counter()
        self.heal_waits: list[float] = []  # seconds from each heal to a leader
        self.unsynced: int | None = None  # a membership change's config entry the run ended before syncing
        self.problems: list[str] = []
        self.end = 0.0
        self.appender: "Appender | None" = None  # (set by run: rot-tail records its probes there)
        self.probes = 0

    def _choose(self, items: list, pick: float):
        return items[min(len(items) - 1, int(pick * len(items)))]

    def _leader_or_any(self, pick: float) -> str:
        up = [n for n in self.c.ids if self.c.nodes[n].state == "up"]
        leader = self.c.monitor.leader
        return leader if leader in up else self._choose(up or self.c.ids, pick)

    def _follower(self, pick: float) -> str:
        leader = self.c.monitor.leader
        others = [n for n in self.c.ids if n != leader and self.c.nodes[n].state == "up"]
        return self._choose(others or self.c.ids, pick)

    def _shuffled(self, first: str | None = None) -> list[str]:
        ids = list(self.c.ids)
        self.rng.shuffle(ids)
        if first is not None:
            ids.remove(first)
            ids.insert(0, first)
        return ids

    def _left(self) -> float:
        return max(0.0, self.end - asyncio.get_running_loop().time())

    async def run(self, seconds: float) -> None:
        """Inject faults for ``seconds``: a fault that would outlast them is held for less."""
        self.end = asyncio.get_running_loop().time() + seconds
        for step in self.steps:
            if self._left() <= 0:
                break
            hold = min(step.hold, max(0.2, self._left()))
            self.counts[step.kind] += 1
            await self._step(step, hold)
            await self._healed()
            await asyncio.sleep(min(step.gap, self._left()))

    async def _step(self, s: Step, hold: float) -> None:
        c, net, kind = self.c, self.c.net, s.kind
        if kind.startswith("hostile"):
            await self._hostile(s, hold)
        elif kind.startswith("kill") and kind != "kill+partition":
            n, q = len(c.ids), len(c.ids) // 2 + 1
            count = {"kill-leader": 1, "kill-follower": 1, "kill-minority": n - q, "kill-majority": q,
                     "kill-all": n}[kind]
            first = self._follower(s.pick) if kind == "kill-follower" else self._leader_or_any(s.pick)
            victims = self._shuffled(first)[:count]
            self.log(f"{kind}: kill -9 {', '.join(victims)}")
            for v in victims:
                c.nodes[v].kill()
            await asyncio.sleep(hold)
            for v in victims:
                c.nodes[v].start()
        elif kind in ("partition-halves", "isolate-leader", "majority-ring", "one-way", "flaky-link"):
            if kind == "partition-halves":
                ids = self._shuffled()
                cut = len(ids) // 2 + (self.rng.random() < 0.5)
                groups = [ids[:cut], ids[cut:]]
                net.partition(groups, s.mode)
                what = " | ".join(",".join(g) for g in groups)
            elif kind == "isolate-leader":
                leader = self._leader_or_any(s.pick)
                net.partition([[leader], [i for i in c.ids if i != leader]], s.mode)
                what = f"{leader} alone"
            elif kind == "majority-ring":
                ids = self._shuffled(self._leader_or_any(s.pick))
                n = len(ids)
                if n > 3:  # ring neighbours only: every node sees a majority, no two the same one
                    keep = {(ids[k], ids[(k + 1) % n]) for k in range(n)}
                    what = "ring " + "-".join(ids)
                else:  # three nodes: a bridge (the leader, or a follower) between two that cannot meet
                    bridge = ids[0] if s.pick < 0.5 else ids[1]
                    keep = {(bridge, o) for o in ids if o != bridge}
                    what = f"bridge {bridge}"
                net.only(keep, s.mode)
            elif kind == "one-way":
                leader = self._leader_or_any(s.pick)
                outbound = self.rng.random() < 0.5
                pairs = [(leader, o) if outbound else (o, leader) for o in c.ids if o != leader]
                net.cut(pairs, s.mode)
                what = f"{leader} {'cannot reach the others' if outbound else 'unreachable by the others'} (one way)"
            else:
                a, b = self._shuffled()[:2]
                net.cut([(a, b), (b, a)], s.mode)
                what = f"{a} <-> {b}"
            self.log(f"{kind} ({s.mode}): {what}")
            await asyncio.sleep(hold)
            net.heal()
        elif kind == "slow-links":
            hi = self.rng.choice((20, 50, 150))
            net.slow((hi / 4, hi))
            self.log(f"slow-links: every link delayed {hi / 4:g}-{hi} ms")
            await asyncio.sleep(hold)
            net.heal()
        elif kind in ("pause-leader", "pause-follower"):
            v = self._leader_or_any(s.pick) if kind == "pause-leader" else self._follower(s.pick)
            self.log(f"{kind}: SIGSTOP {v}")
            c.nodes[v].pause()
            await asyncio.sleep(hold)
            c.nodes[v].resume()
        elif kind == "partition+pause":
            ids = self._shuffled()
            cut = len(ids) // 2
            net.partition([ids[:cut], ids[cut:]], s.mode)
            v = self._choose(ids[cut:], s.pick)
            c.nodes[v].pause()
            self.log(f"partition+pause ({s.mode}): {','.join(ids[:cut])} | {','.join(ids[cut:])}, SIGSTOP {v}")
            await asyncio.sleep(hold)
            net.heal()
            c.nodes[v].resume()
        elif kind == "kill+partition":
            leader = self._leader_or_any(s.pick)
            others = [i for i in self._shuffled() if i != leader]
            v = others[0]
            c.nodes[v].kill()
            net.partition([[leader], others], s.mode)
            self.log(f"kill+partition ({s.mode}): kill -9 {v}, {leader} cut off")
            await asyncio.sleep(hold)
            net.heal()
            c.nodes[v].start()
        elif kind == "torn-write":
            await self._torn_write(s, hold)
        elif kind == "bitrot":
            await self._bitrot(s)
        elif kind == "rot-tail":
            await self._rot_tail(s, hold)
        elif kind == "rot-follower-tail":
            await self._rot_follower_tail(s, hold)
        elif kind.startswith("replace"):
            await self._replace(s, hold)
        else:
            raise ValueError(f"unknown fault {kind!r}")

    async def _hostile(self, s: Step, hold: float) -> None:
        """Hostile frames (tests/support/hostile.py) to every member that is up, straight to its port,
        for ``hold`` seconds; with ``+kill-leader`` the leader is killed first, with
        ``+partition`` the group is cut in two meanwhile. Every frame must be refused: the
        run's checks (one leader after the heal, every acknowledged append in every log,
        logs identical, no traceback in a node's log) say whether they changed anything."""
        c, kind = self.c, s.kind
        victim = None
        if kind == "hostile+kill-leader":
            victim = self._leader_or_any(s.pick)
            c.nodes[victim].kill()
        elif kind == "hostile+partition":
            ids = self._shuffled()
            c.net.partition([ids[:len(ids) // 2], ids[len(ids) // 2:]], s.mode)
        self.log(f"{kind}: hostile frames to every member for {hold:g} s"
                 + (f", {victim} killed" if victim else ""))
        rng = random.Random(self.rng.random())
        end = asyncio.get_running_loop().time() + hold
        sent = collections.Counter()
        while asyncio.get_running_loop().time() < end:
            for n in [i for i in c.ids if c.nodes[i].state == "up"]:
                frames = hostile.hostile_frames(rng, GROUP, list(c.ids), 40)
                try:
                    sent.update(await asyncio.to_thread(hostile.send_all, HOST, c.ports[n], frames, 2.0))
                except OSError:
                    sent["unreachable"] += 1  # (killed or restarting meanwhile)
        self.log(f"{kind}: {sent['answered']} answered, {sent['closed']} closed the connection")
        if victim is not None:
            c.nodes[victim].start()
        if kind == "hostile+partition":
            c.net.heal()

    async def _healed(self) -> None:
        """The fault is undone: if the cluster is whole, time how long until it has a leader."""
        c = self.c
        self.problems += c.died()
        for n in c.nodes.values():  # a node that crashed by itself (reported) is started again
            if n.state == "down":
                n.start()
        if not (c.net.healthy and all(n.state == "up" for n in c.nodes.values())):
            return
        took = await c.time_to_leader(c.heal_bound)
        self.heal_waits.append(took if took is not None else float("inf"))
        if took is None:
            self.problems.append(f"no leader within {c.heal_bound:g} s after a heal")

    async def _torn_write(self, s: Step, hold: float) -> None:
        """Tear the tail of a node's log, within the failure model: the node is paused (it
        acknowledges nothing more), then every other node must hold everything a leader
        other than it has (so whatever its acknowledgements helped commit survives on all
        the others); then it is killed, torn and restarted, and the next fault waits until
        it has caught up again."""
        c, m = self.c, self.c.monitor
        v = self._leader_or_any(s.pick) if s.pick < 0.4 else self._follower(s.pick)
        others = [i for i in c.ids if i != v]
        c.nodes[v].pause()
        self.log(f"torn-write: SIGSTOP {v} until the others hold all a leader has")
        if not await self._wait(lambda m: m.leader not in (None, v), c.heal_bound,
                                f"no leader besides {v} within {c.heal_bound:g} s of pausing it"):
            c.nodes[v].resume()
            self.counts["torn-write skipped"] += 1
            return
        end = m.last[m.leader]["end_index"]
        if not await self._wait(lambda m: all((m.last[i] or {}).get("committed_index", -2) >= end for i in others),
                                c.catch_up_bound,
                                f"{', '.join(others)} did not commit up to {end} within {c.catch_up_bound:g} s"):
            c.nodes[v].resume()
            self.counts["torn-write skipped"] += 1
            return
        c.nodes[v].kill()  # still stopped: it sends nothing more
        what = tear(c.nodes[v].dir, self.rng)
        self.log(f"torn-write: kill -9 {v}, {what}")
        await asyncio.sleep(min(hold, 1.5))
        c.nodes[v].start()
        await self._wait(lambda m: all(m.last.values()), c.heal_bound, f"{v} did not answer {c.heal_bound:g} s "
                         f"after its restart")
        target = max((x["committed_index"] for x in m.last.values() if x), default=-1)
        await self._wait(lambda m: (m.last.get(v) or {}).get("committed_index", -2) >= target, c.catch_up_bound,
                         f"{v} did not catch up to {target} within {c.catch_up_bound:g} s after a torn write")

    async def _bitrot(self, s: Step) -> None:
        """Flip a byte in one to three committed entries of one running member (a body byte, a
        header byte or its index record), within the failure model: one member at a time,
        and the next fault waits until that member's scrub has repaired them, so a majority
        always holds every entry sound. A problem when the scrub does not within the bound."""
        c, m = self.c, self.c.monitor
        v = self._leader_or_any(s.pick) if s.pick < 0.4 else self._follower(s.pick)
        md = m.last.get(v) or {}
        scrub = md.get("scrub")
        if c.nodes[v].state != "up" or not scrub or md.get("committed_index", -1) <= max(0, md["begin_index"]):
            self.counts["bitrot skipped"] += 1
            return
        lo, hi = max(0, md["begin_index"]), md["committed_index"]
        hit = sorted({self.rng.randint(lo, hi) for _ in range(self.rng.randint(1, 3))})
        said = [flip_committed(c.nodes[v].dir, i, self.rng) for i in hit]
        self.log(f"bitrot: {v}: {'; '.join(said)}")
        passes = scrub["passes"]

        def repaired(m) -> bool:
            now = (m.last.get(v) or {}).get("scrub")
            return bool(now) and now["passes"] >= passes + 2 and not now["damaged"]
        if not await m.wait(repaired, c.catch_up_bound + 30):
            self.problems.append(f"{v}'s scrub did not repair entries {hit} within {c.catch_up_bound + 30:g} s")

    async def _rot_tail(self, s: Step, hold: float) -> None:
        """Damage an entry no one committed: every follower is paused, so what the leader takes
        meanwhile waits for a quorum; then a body byte of the leader's last entry is flipped in
        its files, and the followers come back one at a time (the first alone cannot win
        without the old leader's vote, whose log is longer: so it leads again with the damage).
        Nothing damaged was acknowledged: the run's checks say nothing acknowledged was lost,
        and the longest time without an acknowledged append says whether the group stalled."""
        c, m = self.c, self.c.monitor
        leader = m.leader
        followers = [i for i in c.ids if i != leader and c.nodes[i].state == "up"]
        if leader is None or c.nodes[leader].state != "up" or not followers:
            self.counts["rot-tail skipped"] += 1
            return
        for f in followers:
            c.nodes[f].pause()
        # An entry only the leader holds: a probe appended to it alone (the clients' appends in
        # flight may have reached the followers before they stopped), recorded as a request
        # whose outcome is unknown. Then the leader steps down, having heard from no quorum, so
        # it no longer serves its latest writes from memory and meets the damage on disk.
        probe = await self._probe(leader)
        await asyncio.sleep(max(2.5, min(hold, 4.0)))
        committed = max((x or {}).get("committed_index", -1) for x in m.last.values())
        said = flip_tail(c.nodes[leader].dir, committed, self.rng, body=probe)
        self.log(f"rot-tail: SIGSTOP {', '.join(followers)}; {leader}: {said}")
        for k, f in enumerate(self._shuffled()):
            if f in followers:
                c.nodes[f].resume()
                if k < len(followers) - 1:
                    await asyncio.sleep(min(1.0, max(0.2, hold / 2)))

    async def _probe(self, leader: str) -> bytes | None:
        """Append one body to ``leader`` alone, waiting at most a second for an answer (none
        comes without a quorum); the body, recorded as a request of unknown outcome."""
        if self.appender is None:
            return None
        loop = asyncio.get_running_loop()
        self.probes += 1
        body = b"%s:c99:r%d:e0:rot-tail probe" % (self.appender.tag, self.probes)
        req = Request(99, self.probes, [body], loop.time(), outcome="unknown")
        self.appender.requests.append(req)
        client = Client({leader: self.c.direct[leader]}, GROUP, timeout=1.0, tls=self.c.tls)
        try:
            await client.append([body], resend_unknown=False)
            req.outcome = "ok"  # (a quorum after all: then the entry is committed, and it stays sound)
        except Exception as exc:  # noqa: BLE001 - no quorum: its outcome stays unknown
            req.error = f"{type(exc).__name__}: {exc}"
        finally:
            req.end = loop.time()
            await client.close()
        return body

    async def _rot_follower_tail(self, s: Step, hold: float) -> None:
        """Damage a follower's last entry, past the commit index it knows (a follower learns
        commits a push later), while it is paused; then it resumes, or is killed and started
        again (its recovery cuts a damaged tail nothing says was committed). It may have
        acknowledged that entry already: then it is one member's damaged copy of a committed
        entry, and, as for bitrot, the next fault waits until its scrub has repaired it."""
        c, m = self.c, self.c.monitor
        v = self._follower(s.pick)
        scrub = (m.last.get(v) or {}).get("scrub")
        if c.nodes[v].state != "up" or v == m.leader or not scrub:
            self.counts["rot-follower-tail skipped"] += 1
            return
        c.nodes[v].pause()
        known = (m.last.get(v) or {}).get("committed_index", -1)
        said = flip_tail(c.nodes[v].dir, known, self.rng)
        restart = s.pick < 0.5
        self.log(f"rot-follower-tail: SIGSTOP {v}; {said}" + ("; kill -9 and start" if restart else ""))
        await asyncio.sleep(min(hold, 1.0))
        if restart:
            c.nodes[v].kill()
            c.nodes[v].start()
        else:
            c.nodes[v].resume()
        passes = 0 if restart else scrub["passes"]

        def repaired(m) -> bool:
            now = (m.last.get(v) or {}).get("scrub")
            return bool(now) and now["passes"] >= passes + 2 and not now["damaged"]
        if not await m.wait(repaired, c.catch_up_bound + 30):
            self.problems.append(f"{v}'s scrub did not pass twice without damage within {c.catch_up_bound + 30:g} s "
                                 f"after its tail was damaged")

    async def _replace(self, s: Step, hold: float) -> None:
        """peer replace through the leader: a spare joins as a learner, is promoted once
        caught up, then a follower (or the leader) is removed and stopped for good; with
        ``+kill-leader`` the leader is killed, and with ``+partition`` the group cut in two,
        right after the learner is asked for, while it catches up."""
        c, kind = self.c, s.kind
        leader = c.monitor.leader
        victim = self._leader_or_any(s.pick) if kind == "replace-leader" else self._follower(s.pick)
        new = c.start_spare()
        if new is None or leader is None:
            self.counts["replace skipped"] += 1
            if new is not None:
                c.set_members(c.ids, len(c.ids))
            return
        admin = Client(dict(c.direct), GROUP, timeout=5.0, tls=c.tls)
        self.log(f"{kind}: {new} joins as a learner to replace {victim}")
        undo = None
        at = -1  # the config entry the last change that went through committed
        try:
            add = asyncio.ensure_future(admin.change_members("add", new, f"{HOST}:{c.ports[new]}"))
            if kind == "replace+kill-leader":
                await asyncio.sleep(self.rng.uniform(0, 0.3))
                c.nodes[leader].kill()
                self.log(f"{kind}: kill -9 {leader} while the change is under way")
                undo = lambda: c.nodes[leader].start()  # noqa: E731
            elif kind == "replace+partition":
                await asyncio.sleep(self.rng.uniform(0, 0.3))
                ids = self._shuffled()
                groups = [ids[:len(ids) // 2], ids[len(ids) // 2:] + [new]]
                c.net.partition(groups, s.mode)
                self.log(f"{kind} ({s.mode}): {' | '.join(','.join(g) for g in groups)} while the change is under way")
                undo = c.net.heal
            try:
                at = (await add).get("index", -1)
            except ClientError as exc:
                self.log(f"{kind}: adding {new}: {exc}")
            if undo is not None:
                await asyncio.sleep(hold)
                undo()
            # A change cut from the log by a new leader (the old one was cut off before it
            # committed) did not take: the spare is no member, and nothing waits for it.
            c.monitor.set_members(sorted(set(c.ids) | {new}), len(c.ids))
            await c.monitor.sample()  # (a sample from before the change would not show it)
            if not await self._wait(lambda m: m.leader is not None and (m.last[m.leader] or {}).get(
                    "config_index", -1) >= at, c.heal_bound, f"no leader showing config entry {at} within "
                                                             f"{c.heal_bound:g} s after adding {new}"):
                return
            md = c.monitor.last[c.monitor.leader] or {}
            if new not in md.get("voters", []) + md.get("learners", []):
                self.log(f"{kind}: {new} is no member (the change did not take); {victim} stays")
                self.counts["replace undone"] += 1
                return
            # once it is a voter (the leader promotes it when caught up), the victim goes
            promoted = await self._wait(lambda m: m.leader is not None and new in (m.last[m.leader] or {}).get(
                "voters", []), c.catch_up_bound, f"{new} was not made a voter within {c.catch_up_bound:g} s")
            if promoted:
                for _ in range(3):
                    try:
                        at = (await admin.change_members("remove", victim)).get("index", at)
                        self.log(f"{kind}: {victim} removed")
                        break
                    except ClientError as exc:
                        self.log(f"{kind}: removing {victim}: {exc}")
                        if "not a member" in str(exc):
                            break
                        await asyncio.sleep(1.0)
        finally:
            await admin.close()
            await self._sync_members(at)

    async def _sync_members(self, at: int, final: bool = False) -> None:
        """Take the group's members from its leader, once it shows config entry ``at`` or a
        later one: nodes no longer members are stopped for good. When the run's time ends
        first, the change is remembered (``unsynced``) and synced after the final heal
        (``final``): the checks must judge the members the group has, not those before it."""
        c = self.c
        members_now = set(c.ids) | set(c.nodes)
        c.monitor.set_members(sorted(members_now), len(c.ids))  # (the new node too: it may lead by now)
        await c.monitor.sample()
        shows = lambda m: m.leader is not None and (m.last[m.leader] or {}).get("config_index", -1) >= at  # noqa: E731
        problem = f"no leader showing config entry {at} within {c.heal_bound:g} s after a change"
        if final:
            synced = await c.monitor.wait(shows, c.heal_bound)
            if not synced:
                self.problems.append(problem)
        else:
            synced = await self._wait(shows, c.heal_bound, problem)
        if not synced:
            # (the new node stays watched: it may lead the group that keeps the change, and a
            # monitor of the members from before it would see no leader at all)
            self.unsynced = None if final else at
            c.monitor.set_members(sorted(members_now), len(c.ids))
            return
        self.unsynced = None
        md = c.monitor.last[c.monitor.leader]
        members = list(md.get("voters", [])) + list(md.get("learners", []))
        gone = c.set_members(members, len(md.get("voters", [])))
        self.log(f"members now: voters {','.join(md.get('voters', []))}"
                 + (f"; learners {','.join(md['learners'])}" if md.get("learners") else "")
                 + (f"; stopped for good: {', '.join(gone)}" if gone else ""))
        await c.monitor.sample()

    async def sync_after_heal(self) -> None:
        """The members of a change the run's time ended before syncing (``unsynced``), now."""
        if self.unsynced is not None:
            await self._sync_members(self.unsynced, final=True)

    async def _wait(self, cond, bound: float, problem: str) -> bool:
        """Wait for ``cond(monitor)`` up to ``bound`` s, but not past the end of the run (the
        final heal and convergence take over); a problem only when ``bound`` ran out."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        if await self.c.monitor.wait(cond, min(bound, max(self._left(), 0.5))):
            return True
        if loop.time() - t0 >= bound - 0.01:
            self.problems.append(problem)
        return False


# -- the whole run -----------------------------------------------------------------------
class Cluster:
    """Node processes behind a proxied network, a monitor, and the bounds a run checks."""

    def __init__(self, workdir: str, nodes: int, seed: int, flush: str = "async", extra: list[str] | None = None,
                 base_dirs: dict[str, str] | None = None, heal_bound: float = 15.0,
                 catch_up_bound: float = 30.0, tls: bool = False, spares: int = 0) -> None:
        self.workdir = workdir
        self.ids = [f"n{i}" for i in range(nodes)]  # the group's members now
        # ids that may join later (membership changes), each with a port and links from the start
        self.spares = [f"n{i}" for i in range(nodes, nodes + spares)]
        self.all_ids = self.ids + self.spares
        self.gone: list[str] = []  # removed from the group and stopped for good
        self.retired: dict[str, NodeProc] = {}
        self.with_spares = spares > 0
        self.ports = dict(zip(self.all_ids, free_ports(len(self.all_ids))))
        self.metrics_ports = dict(zip(self.all_ids, free_ports(len(self.all_ids))))
        self.seed, self.flush = seed, flush
        self.extra = SMALL_FILES + (extra or [])
        self.base_dirs = base_dirs or {i: os.path.join(workdir, "store") for i in self.all_ids}
        self.log_dir = os.path.join(workdir, "logs")
        self.net = Network(self.all_ids, self.ports, seed)
        self.direct = {i: Peer(i, HOST, self.ports[i]) for i in self.all_ids}
        self.nodes: dict[str, NodeProc] = {}
        # with TLS: a certificate per member and one for the harness (an operator), end to end
        # through the proxies (they forward bytes)
        self.tls_dir, self.tls = None, None
        if tls:
            self.tls_dir = os.path.join(workdir, "tls")
            for i in self.all_ids:
                pki.issue(self.tls_dir, Identity(GROUP, "member", i))
            cert, key = pki.issue(self.tls_dir, Identity(GROUP, "operator", "harness"))
            self.tls = Tls(TlsFiles(cert, key, os.path.join(self.tls_dir, pki.CA_CERT)))
        self.monitor = Monitor(self.direct, tls=self.tls)
        self.monitor.set_members(self.ids, nodes)
        self.quorum = nodes // 2 + 1
        self.heal_bound, self.catch_up_bound = heal_bound, catch_up_bound
        self._monitor_task: asyncio.Task | None = None

    async def start(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        await self.net.start()
        for i in self.ids:
            self.nodes[i] = self._proc(i, self.ids)
            self.nodes[i].start()
        self._monitor_task = asyncio.ensure_future(self.monitor.run())

    def _proc(self, i: str, members: list[str], learner: bool = False) -> "NodeProc":
        """A node whose --peers are ``members`` (and itself) behind its links, and which
        reaches every other id, a spare's too, through its own link to it."""
        extra = list(self.extra) + (["--learner"] if learner else [])
        if self.with_spares:
            for p in self.all_ids:
                if p != i:
                    extra += ["--peer-address", f"{p}={HOST}:{self.net.links[(i, p)].port}"]
        return NodeProc(i, self.ports[i], self.net.peers_for(i, sorted(set(members) | {i})), self.base_dirs[i],
                        self.flush, extra, self.log_dir, self.tls_dir, self.metrics_ports[i])

    def start_spare(self) -> str | None:
        """Start the next spare id as a learner knowing the current members; its id."""
        if not self.spares:
            return None
        i = self.spares.pop(0)
        self.nodes[i] = self._proc(i, self.ids, learner=True)
        self.nodes[i].start()
        return i

    def set_members(self, members: list[str], voters: int) -> list[str]:
        """The group's members are now ``members``: started nodes that are not are stopped
        for good (removed, or added but never made members); their ids."""
        for i in members:  # a member stopped on an older view of the group: started again
            if i not in self.nodes and i in self.retired:
                self.nodes[i] = self.retired.pop(i)
                self.nodes[i].start()
                self.gone.remove(i)
        self.ids = [i for i in self.all_ids if i in members and i in self.nodes]
        self.quorum = voters // 2 + 1
        self.monitor.set_members(self.ids, voters)
        out = [i for i in self.nodes if i not in members]
        for i in out:
            self.retired[i] = self.nodes.pop(i)
            self.retired[i].kill()
            self.gone.append(i)
        return out

    async def time_to_leader(self, bound: float) -> float | None:
        """Seconds until the monitor sees a leader (0 when it already does), None past ``bound``."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await self.monitor.sample()
        if await self.monitor.wait(lambda m: m.leader is not None, bound):
            return loop.time() - t0
        return None

    def tracebacks(self) -> list[str]:
        """A node that logged a traceback hit a bug (a peer's bad message included): a finding."""
        out = []
        for n in list(self.nodes.values()) + list(self.retired.values()):
            try:
                with open(n.log, errors="replace") as fh:
                    text = fh.read()
            except OSError:
                continue
            if "Traceback (most recent call last)" in text:
                at = text.index("Traceback (most recent call last)")
                out.append(f"{n.id} logged a traceback: " + " | ".join(text[at:at + 2000].splitlines()[-4:]))
        return out

    def died(self) -> list[str]:
        """Nodes that exited without being killed or stopped (a crash: a finding), marked down."""
        out = []
        for n in self.nodes.values():
            if n.state != "down" and n.exited():
                out.append(f"{n.id} exited by itself (code {n.proc.returncode}): "
                           + " | ".join(n.log_tail(3).splitlines()))
                n.state = "down"
        return out

    def heal_all(self) -> list[str]:
        """Every link passes, paused nodes resume, killed (or crashed) nodes restart."""
        self.net.heal()
        crashed = self.died()
        for n in self.nodes.values():
            if n.state == "paused":
                n.resume()
            elif n.state == "down":
                n.start()
        return crashed

    async def converge(self, timeout: float) -> bool:
        """Converged, as seen by a sample taken wholly after this call (an older one may
        predate the last appends: a follower learns the final commit index a few ms after
        the leader, from the next push or an idle COMMIT)."""
        fresh = self.monitor.samples + 2
        return await self.monitor.wait(lambda m: m.samples >= fresh and converged(m.last, self.quorum), timeout)

    async def stop(self) -> list[str]:
        """Stop every node (SIGTERM), the monitor and the proxies; problems found doing so."""
        problems = []
        for n in self.nodes.values():
            if n.state == "down" and n.exited():
                continue
            if not await n.stop():
                problems.append(f"{n.id} did not stop within 20 s of SIGTERM (killed)")
            elif n.proc.returncode not in (0, -signal.SIGTERM):
                problems.append(f"{n.id} exited with code {n.proc.returncode}")
        self.monitor.stopping.set()
        if self._monitor_task is not None:
            await asyncio.gather(self._monitor_task, return_exceptions=True)
        await self.net.close()
        return problems

    def kill_all(self) -> None:
        for n in self.nodes.values():
            n.resume()
            n.kill()


class MetricsWatch:
    """Scrapes every running node's Prometheus endpoint every ``period`` seconds while a run
    goes: the endpoint must never stop a node, nor say what cannot be. Per scrape: exactly one
    role, committed index <= end index, begin index <= end index + 1; per process (its start
    time), counters never go down. Each node started must answer at least one whole scrape."""

    COUNTERS = ("dledger_appended_entries_total", "dledger_leader_changes_total", "dledger_received_entries_total",
                "dledger_append_latency_seconds_count", "dledger_flush_latency_seconds_count")

    def __init__(self, nodes: dict, period: float = 1.0) -> None:
        self.nodes, self.period = nodes, period
        self.problems: list[str] = []
        self.scrapes = collections.Counter()  # whole scrapes, per node
        self.unanswered = 0  # a node paused, killed or starting, or a loop too busy to answer in time
        self.last: dict[tuple[str, float], dict[str, float]] = {}
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        while not self.stopping.is_set():
            for i, n in list(self.nodes.items()):
                await self._scrape(i, n)
            try:
                await asyncio.wait_for(self.stopping.wait(), self.period)
            except asyncio.TimeoutError:
                pass

    async def _scrape(self, i: str, n) -> None:
        if n.state == "up" and n.metrics:
            try:
                text = await asyncio.to_thread(_fetch, n.metrics)
            except (OSError, ValueError):
                self.unanswered += 1
                return
            self._check(i, text)

    async def last_pass(self, bound: float = 10.0) -> None:
        """Once the run is over: scrape each running node no scrape reached yet (a spare
        started less than a period before the end), until it answers or ``bound`` s pass."""
        loop = asyncio.get_running_loop()
        end = loop.time() + bound
        while loop.time() < end:
            left = [(i, n) for i, n in list(self.nodes.items()) if not self.scrapes[i] and n.state == "up"]
            if not left:
                return
            for i, n in left:
                await self._scrape(i, n)
            await asyncio.sleep(0.2)

    def _check(self, node: str, text: str) -> None:
        from prometheus_client.parser import text_string_to_metric_families

        values: dict[str, float] = {}
        roles = 0
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == "dledger_role":
                    roles += s.value == 1
                elif not s.labels.keys() - {"group", "node"}:
                    values[s.name] = s.value
        if "dledger_term" not in values:  # (only the process metrics: the loop did not answer in time)
            self.unanswered += 1
            return
        self.scrapes[node] += 1
        bad = []
        if roles != 1:
            bad.append(f"{roles} roles at once")
        if values["dledger_committed_index"] > values["dledger_end_index"]:
            bad.append(f"committed {values['dledger_committed_index']:.0f} > end {values['dledger_end_index']:.0f}")
        if values["dledger_begin_index"] > values["dledger_end_index"] + 1:
            bad.append(f"begin {values['dledger_begin_index']:.0f} > end + 1")
        key = (node, values.get("process_start_time_seconds", 0.0))
        before = self.last.get(key)
        if before is not None:
            bad += [f"{c} went down from {before[c]:.0f} to {values[c]:.0f}" for c in self.COUNTERS
                    if values.get(c, 0) < before.get(c, 0)]
        self.last[key] = values
        self.problems += [f"metrics of {node}: {b}" for b in bad]

    def missing(self, started: list[str]) -> list[str]:
        return [f"metrics of {i}: no whole scrape answered in the whole run" for i in started if not self.scrapes[i]]


def _fetch(url: str) -> str:
    import urllib.request
    with urllib.request.urlopen(url, timeout=3) as resp:
        return resp.read().decode()


@dataclass
class Result:
    seed: int
    profile: str
    nodes: int
    seconds: float
    counts: dict
    entries: dict
    faults: dict
    max_leaderless: float
    max_unavailable: float  # longest time without an acknowledged append while faults ran
    slowest_heal: float
    heals: int
    problems: list[str]
    workdir: str
    elapsed: float = 0.0
    replay: str = ""
    kv: dict | None = None  # with readers: the key-value history's counts and the checker's verdict

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        c, e = self.counts, self.entries
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        lines = [
            f"seed {self.seed}, {self.profile}, {self.nodes} nodes, {self.seconds:g} s of faults: "
            f"{'PASS' if self.ok else 'FAIL'} ({self.elapsed:.0f} s in all)",
            f"  appends: {c['ok']} ok, {c['failed']} failed, {c['unknown']} unknown "
            f"(entries: {e['ok']} ok, {e['failed']} failed, {e['unknown']} unknown, {e['unknown_committed']} of the "
            f"unknown committed)",
            f"  faults injected: {sum(self.faults.values())} ({faults})",
            f"  max time without a leader: {self.max_leaderless:.1f} s; slowest leader after a heal: "
            f"{self.slowest_heal:.1f} s over {self.heals} heals; longest time without an acknowledged append: "
            f"{self.max_unavailable:.1f} s",
        ]
        if self.kv is not None:
            k = self.kv
            lines.append(f"  key-value history: {k['puts']} puts, {k['puts_unknown']} of unknown outcome, {k['gets']} "
                         f"{k['consistency']} gets ({k['unanswered']} unanswered); "
                         f"{'linearizable' if k['linearizable'] else 'NOT linearizable (key ' + k['bad_key'] + ')'}")
        for p in self.problems[:20]:
            lines.append(f"  PROBLEM: {p}")
        if len(self.problems) > 20:
            lines.append(f"  ... and {len(self.problems) - 20} more problems")
        lines.append(f"  replay: {self.replay}")
        return "\n".join(lines)


def replay_command(seed: int, profile: str, nodes: int, seconds: float, flush: str | None = None,
                   tls: bool = False, readers: int = 0) -> str:
    return (f"python benchmarks/fault_runs.py --nodes {nodes} --profile {profile} --seconds {seconds:g} "
            f"--seed {seed}" + (f" --flush {flush}" if flush else "") + (" --tls" if tls else "")
            + (f" --readers {readers}" if readers else ""))


async def run(seed: int, profile: str, seconds: float, workdir: str, *, nodes: int = 3, clients: int = 4,
              flush: str | None = None, heal_bound: float = 15.0, verbose: bool = False, tls: bool = False,
              readers: int = 0, consistency: str = "linearizable") -> Result:
    """One seeded run: start ``nodes`` nodes, append from ``clients`` clients while the
    profile's faults run for ``seconds``, heal, converge, stop, check. With ``readers``, the
    nodes run the kv state machine and that many more clients put and get keys
    (tests/support/kvclients.py, gets of ``consistency``): their history must be linearizable."""
    t0 = time.monotonic()
    flush = flush or ("sync" if profile == "mixed" and seed % 2 else "async")
    events: list[str] = []

    def log(text: str) -> None:
        line = f"{time.monotonic() - t0:7.2f}  {text}"
        events.append(line)
        if verbose:
            print(line, flush=True)

    os.makedirs(workdir, exist_ok=True)
    # (kv with snapshots that never come: the checks read every acknowledged entry back from the logs)
    extra = ["--state-machine", "kv", "--snapshot-threshold", str(1 << 30)] if readers else None
    cluster = Cluster(workdir, nodes, seed, flush, extra=extra, heal_bound=heal_bound, tls=tls,
                      spares=SPARES.get(profile, 0))
    steps = make_schedule(seed, profile, seconds)
    nemesis = Nemesis(cluster, steps, seed, log)
    appender = Appender(cluster.direct, clients, seed, f"s{seed}", timeout=3.0, tls=cluster.tls)
    nemesis.appender = appender
    kv = KvClients(cluster.direct, readers, seed, GROUP, consistency=consistency, tls=cluster.tls) if readers else None
    problems: list[str] = []
    stopped, unknown_committed = False, 0
    kv_load, kv_summary = None, None
    load_from = load_to = 0.0
    watch = MetricsWatch(cluster.nodes)
    watching = None
    try:
        await cluster.start()
        watching = asyncio.ensure_future(watch.run())
        log(f"{nodes} nodes (flush={flush}) on ports {', '.join(map(str, cluster.ports.values()))}")
        first = await cluster.time_to_leader(60)
        if first is None:
            problems.append("no leader within 60 s of the start")
        else:
            log(f"leader {cluster.monitor.leader} after {first:.1f} s")
            cluster.monitor.restart_clock()
            load = asyncio.ensure_future(appender.run())
            kv_load = asyncio.ensure_future(kv.run()) if kv is not None else None
            load_from = asyncio.get_running_loop().time()
            await nemesis.run(seconds)
            load_to = asyncio.get_running_loop().time()
            log("healing: every link passes, paused nodes resume, killed nodes restart")
            problems += cluster.heal_all()
            await nemesis.sync_after_heal()  # (a change that went through as the run ended)
            took = await cluster.time_to_leader(heal_bound)
            if took is None:
                problems.append(f"no leader within {heal_bound:g} s after the final heal")
            else:
                nemesis.heal_waits.append(took)
                log(f"leader {cluster.monitor.leader} {took:.1f} s after the final heal")
            appender.stopping.set()
            try:
                await asyncio.wait_for(load, 30)
            except asyncio.TimeoutError:
                problems.append("append clients did not finish within 30 s of being stopped")
            if kv_load is not None:
                kv.stopping.set()
                try:
                    await asyncio.wait_for(kv_load, 30)
                except asyncio.TimeoutError:
                    problems.append("key-value clients did not finish within 30 s of being stopped")
            if not await cluster.converge(60):
                problems.append("nodes did not converge within 60 s: "
                                + "; ".join(f"{p}: " + (f"{m['role']} term {m['term']} end {m['end_index']} committed "
                                                        f"{m['committed_index']}" if m else "no answer")
                                            for p, m in cluster.monitor.last.items()))
            else:
                log(f"converged at index {cluster.monitor.last[cluster.monitor.leader]['end_index']}")
        watch.stopping.set()
        await watching
        await watch.last_pass()
        problems += watch.problems + watch.missing(list(cluster.nodes))
        log(f"metrics: {sum(watch.scrapes.values())} whole scrapes, {watch.unanswered} unanswered")
        problems += await cluster.stop()
        stopped = True
        problems += cluster.tracebacks()
        problems += nemesis.problems
        found, unknown_committed = check({i: n.dir for i, n in cluster.nodes.items()}, appender.requests,
                                         others=kv.sent if kv else frozenset(),
                                         refused=kv.refused_bodies if kv else frozenset())
        problems += found
        if kv is not None:
            verdict = linearizability.check(kv.history)
            kv_summary = {**kv.counts(), "consistency": consistency, "linearizable": verdict.ok,
                          "bad_key": verdict.bad_key}
            if not verdict.ok:
                problems.append(f"the key-value history ({verdict.ops} operations) is not linearizable: key "
                                f"{verdict.bad_key}")
    finally:
        watch.stopping.set()
        if watching is not None and not watching.done():
            watching.cancel()
        if not stopped:
            cluster.kill_all()
            await cluster.net.close()
    entries = _entry_counts(appender.requests, unknown_committed)
    acked = [load_from] + sorted(r.end for r in appender.requests if r.outcome == "ok" and r.end <= load_to) + [load_to]
    unavailable = max((b - a for a, b in zip(acked, acked[1:])), default=0.0)
    result = Result(seed, profile, nodes, seconds, appender.counts(), entries, dict(nemesis.counts),
                    cluster.monitor.max_leaderless, unavailable, max(nemesis.heal_waits, default=0.0),
                    len(nemesis.heal_waits),
                    problems, workdir, time.monotonic() - t0,
                    replay_command(seed, profile, nodes, seconds, flush, tls, readers), kv_summary)
    with open(os.path.join(workdir, "events.log"), "w") as fh:
        fh.write("\n".join(events) + "\n")
    if problems:
        with open(os.path.join(workdir, "problems.log"), "w") as fh:
            fh.write("\n".join(problems) + "\n\n")
            for n in cluster.nodes.values():
                fh.write(f"--- {n.id} log tail\n{n.log_tail(40)}\n")
    return result


def _entry_counts(requests: list[Request], unknown_committed: int) -> dict:
    out = collections.Counter()
    for r in requests:
        out[r.outcome] += len(r.bodies)
    out["unknown_committed"] = unknown_committed
    return {k: out.get(k, 0) for k in ("ok", "failed", "unknown", "unknown_committed")}


# -- the checker -------------------------------------------------------------------------
def read_committed(node_dir: str) -> tuple[int, list]:
    """(committed index, entries from the log's beginning up to it), read offline."""
    with FileStore.open(node_dir, read_only=True) as s:
        committed = s.committed_index
        if s.begin_index < 0:
            return committed, []
        return committed, [s.get(i) for i in range(s.begin_index, committed + 1)]


def cli(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    return commands.cli(*args, timeout=timeout)


def check(dirs: dict[str, str], requests: list[Request], *, verify: bool = True, others: set = frozenset(),
          refused: set = frozenset(), cleaned: set = frozenset()) -> tuple[list[str], int]:
    """The promise, on the stopped cluster's stores: one line per problem found, and how
    many entries of appends with an unknown outcome are in the committed log. ``others``:
    bodies other clients sent (the key-value clients: their history is checked apart), of
    which ``refused`` were refused, so must be nowhere. ``cleaned``: members whose own
    retention deleted the front of their log (a disk above the force ratio), whose entries
    before their first are not asked of them."""
    problems: list[str] = []
    logs: dict[str, dict[int, object]] = {}
    where: dict[str, dict[bytes, list[int]]] = {}
    ids = list(dirs)
    for i in ids:
        try:
            committed, entries = read_committed(dirs[i])
        except Exception as exc:  # noqa: BLE001 - a store that does not open is a finding
            problems.append(f"{i}: store does not open read-only: {exc}")
            continue
        logs[i] = {e.index: e for e in entries}
        index_of = collections.defaultdict(list)
        for e in entries:
            if e.magic == MAGIC_NOOP:
                if e.body:
                    problems.append(f"{i}: no-op entry {e.index} has a body")
            elif e.magic == MAGIC_CONFIG:
                continue  # a membership change (cluster/raft/membership.py), not a client's
            else:
                index_of[e.body].append(e.index)
        where[i] = index_of
    sent = {b: r for r in requests for b in r.bodies}
    unknown_committed = 0
    for i, index_of in where.items():
        for body, at in index_of.items():
            r = sent.get(body)
            if r is None and body in others:
                if body in refused:
                    problems.append(f"{i}: entry {at[0]} holds {body[:60]!r}, a key-value put that was refused")
                elif len(at) > 1:
                    problems.append(f"{i}: the key-value put {body[:40]!r} is in the log {len(at)} times, at {at}")
            elif r is None:
                problems.append(f"{i}: entry {at[0]} holds a body no client sent: {body[:60]!r}")
            elif len(at) > 1:
                problems.append(f"{i}: {body[:40]!r} ({r.outcome}) is in the log {len(at)} times, at {at}")
    for r in requests:
        for i, index_of in where.items():
            got = [index_of.get(b, []) for b in r.bodies]
            if r.outcome == "ok":
                if len(r.entries) != len(r.bodies):
                    problems.append(f"request c{r.client}/r{r.seq}: {len(r.bodies)} bodies acknowledged with "
                                    f"{len(r.entries)} entries")
                for b, (index, term, _pos, _size) in zip(r.bodies, r.entries):
                    e = logs[i].get(index)
                    if e is None and i in cleaned and index < min(logs[i], default=index + 1):
                        continue
                    if e is None:
                        problems.append(f"{i}: acknowledged entry {index} ({b[:40]!r}) is not in the committed log")
                    elif e.body != b or e.term != term:
                        problems.append(f"{i}: entry {index} is {e.body[:40]!r} of term {e.term}, acknowledged as "
                                        f"{b[:40]!r} of term {term}")
            elif r.outcome == "failed":
                if any(got):
                    problems.append(f"{i}: a failed append is in the log at {got} ({r.error})")
            else:
                present = [g[0] for g in got if g]
                if present and (len(present) != len(r.bodies) or present != list(range(present[0], present[0]
                                                                                         + len(present)))):
                    problems.append(f"{i}: a batch of {len(r.bodies)} with an unknown outcome is in the log only in "
                                    f"part, or out of order: {got}")
                elif present and i == ids[0]:
                    unknown_committed += len(present)
    ends = {i: max(log, default=-1) for i, log in logs.items()}
    if len(set(ends.values())) > 1:
        problems.append(f"committed indexes differ: {ends}")
    if not verify:
        return problems, unknown_committed
    for i in ids:
        r = cli("store", "verify", dirs[i], "--format", "json")
        if r.returncode != 0:
            problems.append(f"{i}: store verify exit {r.returncode}: {(r.stdout + r.stderr).strip()[:400]}")
    for i in ids[1:]:
        r = cli("store", "diff", dirs[ids[0]], dirs[i], "--format", "json")
        if r.returncode != 0:
            problems.append(f"store diff {ids[0]} {i} exit {r.returncode}: {(r.stdout + r.stderr).strip()[:400]}")
    return problems, unknown_committed


def run_seed(seed: int, profile: str, seconds: float, workdir: str, *, keep: bool = False, **kw) -> Result:
    """``run`` in a fresh event loop; the work directory is removed when the run passes
    (unless ``keep``)."""
    result = asyncio.run(run(seed, profile, seconds, workdir, **kw))
    if result.ok and not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return result
