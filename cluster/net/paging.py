"""Reading a range of committed entries, or following the log as it commits (``get``,
``get --follow``): pages of GETs through :class:`cluster.net.client.Client`, several in
flight while they come back full, each index given exactly once.
"""

from __future__ import annotations

import asyncio
import collections

from .client import MAX_PAGE, Client, ClientError, OutOfRange, Rejected

PAGES_IN_FLIGHT = 4  # read(): GET pages asked at once while they come back full
BYTES_IN_FLIGHT = 32 << 20  # ... and at most about this many bytes of them


async def read(client: Client, index: int, last: int | None = None, *, follow: bool = False, poll: float = 0.1,
           on_wait=None, consistency: str | None = None, peer: str | None = None):
    """Committed entries ``index..last`` (``last`` None: no end), one list per answer, in
    order, each index exactly once, paging through the node's per-answer caps. While
    pages come back full, up to PAGES_IN_FLIGHT of them are asked at once (within
    BYTES_IN_FLIGHT by the size of the last one), so the answers stream; a page that
    comes back short (a node's byte cap, or the commit index) drops the ones asked after
    it, and the next starts where it ended.

    Without ``follow`` it ends at the commit index (the caller compares what it got
    with what it asked for). With ``follow`` it waits for entries to commit, polling
    every ``poll`` seconds while the log is idle, and rides through leader changes and
    unreachable nodes (``on_wait(text)`` is called once per outage with the reason):
    an entry at or below a node's commit index never changes, so whichever member
    answers next continues exactly after the last entry given. Entries the log no longer
    holds (before its begin index) raise :class:`OutOfRange`, and so does an ``index``
    past the commit index without ``follow``; without ``follow`` unreachable members
    raise ClientError, and with it too members that refuse this client (Rejected)."""
    loop = asyncio.get_running_loop()
    nxt, waiting, depth = index, None, 1
    asked: collections.deque = collections.deque()  # (first index, count, task), in index order

    def drop_asked() -> None:
        for _i, _n, t in asked:
            t.cancel()
            t.add_done_callback(_retrieved)
        asked.clear()

    try:
        while last is None or nxt <= last:
            planned = asked[-1][0] + asked[-1][1] if asked else nxt
            while len(asked) < depth and (last is None or planned <= last):
                want = MAX_PAGE if last is None else min(MAX_PAGE, last - planned + 1)
                asked.append((planned, want, asyncio.ensure_future(
                    client.get(planned, want, peer, consistency=consistency))))
                planned += want
            _first, want, task = asked.popleft()
            try:
                page = await task
            except OutOfRange as exc:
                drop_asked()
                depth = 1
                if exc.begin is not None and nxt < exc.begin:
                    raise OutOfRange(f"{exc.peer}: entry {nxt} is no longer in the log, which now begins at "
                                     f"index {exc.begin}", exc.peer, exc.begin, exc.committed) from None
                if not follow:
                    if nxt == index:
                        raise  # nothing at all from there: an error, as a single GET is
                    return  # (the end of the log; a Java node does not say where it commits)
                page = []
            except Rejected:
                raise  # (members refuse this client for good: following would wait forever)
            except ClientError as exc:
                drop_asked()
                depth = 1
                if not follow:
                    raise
                client.leader = None
                if waiting is None and on_wait is not None:
                    on_wait(f"{exc}; waiting for a leader")
                waiting = loop.time()
                await asyncio.sleep(min(1.0, client.timeout))
                continue
            waiting = None
            if page:
                first = page[0].index
                if first != nxt:
                    raise ClientError(f"{client.leader}: asked for entries from {nxt}, got {first}")
                nxt += len(page)
                yield page
                if len(page) < want:  # (short: what was asked after it starts elsewhere)
                    drop_asked()
                    depth = 1
                else:
                    size = sum(e.size for e in page)
                    depth = max(1, min(PAGES_IN_FLIGHT, BYTES_IN_FLIGHT // max(1, size)))
            elif follow:  # (a Java leader logs a stack trace for each GET past its end: ask it less often)
                drop_asked()
                depth = 1
                await asyncio.sleep(max(poll, 1.0) if client.java.get(client.leader) else poll)
            else:
                return
    finally:
        drop_asked()


def _retrieved(task: asyncio.Future) -> None:
    """A page asked and then dropped: its outcome is of no use (and no warning)."""
    if not task.cancelled():
        task.exception()
