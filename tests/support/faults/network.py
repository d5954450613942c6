"""The harness's network: one loopback TCP proxy per directed link (from -> to).

Each node gets its own peers string: its own entry is its real listen address, every other
member's entry is the proxy of the link from it to that member (a node reaches a peer only
through its own channel, so the connection of link a->b carries a's requests to b and b's
answers). A link passes, delays, drops (connections reset and refused) or black-holes (bytes
swallowed, connections left open) its traffic. Clients and the monitor reach the nodes
directly. Also the name and address of the group every part of the harness runs.
"""

from __future__ import annotations

import asyncio
import collections
import random

HOST = "127.0.0.1"
GROUP = "faults"
PASS, DROP, BLACKHOLE = "pass", "drop", "blackhole"


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
