"""The harness's append clients: :class:`Appender`, concurrent clients each appending 1-3
unique bodies per request, and :class:`Request`, the record of each request as ok / failed /
unknown (``AppendError.outcome``: a timeout or a lost answer is unknown, never failed).
"""

from __future__ import annotations

import asyncio
import collections
import random
from dataclasses import dataclass, field

from cluster.net.client import AppendError, Client
from cluster.raft.config import Peer
from tests.support.faults.network import GROUP


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
                    req.outcome, req.entries = "ok", [list(e) for e in resp.entries]
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
