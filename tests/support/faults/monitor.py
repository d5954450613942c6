"""Watching the group: :class:`Monitor` asks every node for METADATA several times a second.
The group "has a leader" when a node leads and a quorum of nodes (itself included) follows it
in its term (:func:`quorum_leader`); it has :func:`converged` when every node is in the
leader's term with the leader's end, all of it committed.
"""

from __future__ import annotations

import asyncio
import functools

import msgspec

from cluster.net.channel import Channel
from cluster.net.client import Client, ClientError
from cluster.net.frames import ProtocolError
from cluster.net.tls import expect_member
from cluster.net.transport import TransportError
from cluster.raft.config import Peer
from tests.support.faults.network import GROUP


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
            return p, sample_of(await self.client.metadata(p, self.timeout))
        except (TransportError, ProtocolError, ClientError):
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


def sample_of(state) -> dict:
    """A member's METADATA answer (cluster.net.answers.NodeState) as the dict of its fields
    the checks read (what it said and was not typed, ``other``, included)."""
    out = {f: getattr(state, f) for f in state.__struct_fields__ if f != "other"}
    return {**state.other, **{k: v for k, v in out.items() if v is not msgspec.UNSET}}


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
