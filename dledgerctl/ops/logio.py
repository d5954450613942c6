"""Appending to a group's log and reading its committed entries, from synchronous code: each
batch's entries come back as it commits, each page as it arrives (``append``, ``get``)."""

from __future__ import annotations

import asyncio
import itertools
from typing import AsyncIterator, Callable, Iterable, Iterator

import msgspec

from cluster.net import paging
from cluster.net.answers import AppendAnswer, EntryRow
from cluster.net.client import AppendError, Client, ClientError
from cluster.net.frames import ProtocolError
from cluster.net.transport import TransportError

from .targets import Target


class Appended(msgspec.Struct):
    """An entry an append committed: its index, term, position and size, and the leader that
    took it."""

    index: int
    term: int
    pos: int
    size: int
    leader: str | None


class AppendRun:
    """What an append has done so far, for the summary it leaves when it stops early: input
    entries 1..``committed`` are committed, the ``unknown`` after them were sent without an
    answer (they may commit yet), the rest were not sent."""

    def __init__(self, word: str = "entry") -> None:
        self.word = word  # what an input entry is called: "line" (--lines) or "entry"
        self.committed = self.unknown = 0
        self.first = self.last = None  # the first and last committed entries' indexes

    def took(self, rows: list[Appended]) -> None:
        self.committed += len(rows)
        if rows:
            self.first = rows[0].index if self.first is None else self.first
            self.last = rows[-1].index

    def summary(self) -> str:
        n = self.committed
        where = f", indexes {self.first}-{self.last}" if n else ""
        out = f"{n} {'entry' if n == 1 else 'entries'} committed{where}"
        if self.unknown:
            a, b = n + 1, n + self.unknown
            words = {"entry": "entries"}.get(self.word, self.word + "s")
            what = f"{self.word} {a} was" if a == b else f"{words} {a}-{b} were"
            out += f"; {what} sent without an answer and may commit yet (check with 'get' before sending again)"
        return out + f"; the rest not sent (resume from {self.word} {n + self.unknown + 1})"


def append(target: Target, bodies: Iterable[bytes], batch: int = 64,
           run: AppendRun | None = None) -> Iterator[list[Appended]]:
    """Append ``bodies`` on the leader (following NOT_LEADER), ``batch`` per request, read from
    ``bodies`` as they are used; yields each batch's entries once it committed. ``run`` keeps
    the count for a summary when it stops early (an AppendError, a ClientError, Ctrl-C)."""
    run = run if run is not None else AppendRun()
    bodies = iter(bodies)
    with asyncio.Runner() as runner:
        client = target.client()
        try:
            while chunk := list(itertools.islice(bodies, batch)):
                run.unknown = len(chunk)  # (from here on they may be in the log)
                rows = _appended(client, runner.run(client.append(chunk)))
                run.unknown = 0
                run.took(rows)
                yield rows
        except AppendError as exc:
            if exc.outcome == "failed":
                run.unknown = 0
            raise
        finally:
            runner.run(client.close())


def _appended(c: Client, resp: AppendAnswer) -> list[Appended]:
    if resp.entries is None:
        raise ClientError(f"{c.leader}: the answer to APPEND lists no entries")
    try:
        rows = list(resp.entries)
    except ProtocolError as exc:  # (read only now: cluster.net.answers.AnswerRows)
        raise ClientError(f"{c.leader}: {exc}") from None
    return [Appended(i, t, p, s, c.leader) for i, t, p, s in rows]


class Reading:
    """Committed entries from ``first`` (None: the next to commit, read from the leader's
    commit index, or ``node``'s) to ``last`` (None with ``follow``: no end; else one entry),
    in pages; with ``follow``, through leader changes as they commit, polling every
    ``interval`` s while none does. ``first`` and ``last`` are known once the first page is
    asked for; ``on_wait`` hears why a follow waits (no leader, say)."""

    def __init__(self, target: Target, first: int | None, last: int | None = None, count: int | None = None, *,
                 follow: bool = False, interval: float = 0.2, consistency: str | None = None,
                 node: str | None = None, on_wait: Callable[[str], None] | None = None) -> None:
        self.target, self.first, self.last, self.count = target, first, last, count
        self.follow, self.interval, self.consistency, self.node = follow, interval, consistency, node
        self.on_wait = on_wait

    async def _pages(self, c: Client) -> AsyncIterator[list[EntryRow]]:
        first = self.first
        if first is None:
            leader = self.node or await c.find_leader(asyncio.get_running_loop().time() + self.target.timeout)
            try:
                committed = (await c.metadata(leader)).committed_index
            except (TransportError, ProtocolError) as exc:
                raise ClientError(f"{leader}: cannot read its commit index: {exc}") from None
            if committed is None:
                raise ClientError(f"{leader}: cannot read its commit index: its METADATA answer does not say it")
            first = committed + 1
        last = self.last if self.last is not None else first + self.count - 1 if self.count is not None else (
            None if self.follow else first)
        self.first, self.last = first, last
        async for page in paging.read(c, first, last, follow=self.follow, poll=self.interval,
                                      consistency=self.consistency, peer=self.node, on_wait=self.on_wait):
            yield page

    def pages(self) -> Iterator[list[EntryRow]]:
        """Each page of entries (cluster.net.answers.EntryRow: index, term, pos, size, magic,
        body, ...) as it arrives."""
        return stream(self.target, self._pages)


def stream(target: Target, pages: Callable[[Client], AsyncIterator[list]]) -> Iterator[list]:
    """Iterate ``pages(client)``, an async generator of lists, from synchronous code (so each
    page is used as it arrives); the client is closed at the end. A ClientError (an index
    the log does not hold: OutOfRange, too) ends it."""
    with asyncio.Runner() as runner:
        client = target.client()
        agen = pages(client)
        try:
            while True:
                try:
                    page = runner.run(agen.__anext__())
                except StopAsyncIteration:
                    return
                # Ctrl-C cancels the page being read; when the cancellation lands as that page
                # completes, asyncio can lose it (wait_for in 3.11) and the page comes back:
                # the runner still counted the interrupt, so stop here all the same
                if getattr(runner, "_interrupt_count", 0):
                    raise KeyboardInterrupt
                yield page
        finally:
            try:
                runner.run(agen.aclose())
            finally:
                runner.run(client.close())
