"""Kept messages (what truncations cut) matched against a running group's committed log
(``mq salvage`` without ``--against``); store/rocketmq/salvage.py does the matching."""

from __future__ import annotations

import asyncio

from cluster.net import paging
from cluster.net.client import Client, ClientError
from store.rocketmq.salvage import Salvage, entry_messages, match

from .logio import stream
from .targets import Target


def match_live(result: Salvage, target: Target) -> None:
    """Match the kept messages of ``result`` against the group's committed log, read from its
    leader (from its first entry to its commit index when the reading began); the log read is
    added to ``result.logs``."""
    seen: dict = {}

    async def pages(c: Client):
        leader = await c.find_leader(asyncio.get_running_loop().time() + target.timeout)
        md = await c.metadata(leader)
        if md.committed_index is None:
            raise ClientError(f"{leader}: its METADATA answer gives no commit index (a Java DLedger member: read its "
                              f"files with --against)")
        first, last = md.begin_index or 0, md.committed_index
        seen.update(leader=leader, first=first, last=last)
        if last >= first:
            async for page in paging.read(c, first, last, peer=leader, consistency="serializable"):
                yield page

    for page in stream(target, pages):
        match(result, seen["leader"], (m for e in page for m in entry_messages(e.magic, e.body)))
    result.logs.append(f"{target.group}'s log on {seen['leader']} (entries {seen['first']}-{seen['last']})")
