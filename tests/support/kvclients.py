"""Clients of the key-value state machine that record a history for the linearizability
checker (tests/support/linearizability.py), for the fault runs (tests/support/faults.py ``run(readers=N)``).

Each client puts and gets a few keys through dledgerctl's client (linearizable gets by
default), one operation at a time, reaching every node directly (the fault harness's
proxies sit only between nodes: a client may be on the side of a deposed leader). Every
operation is recorded with its invocation and completion times (one clock: the event
loop's): a put whose outcome is unknown (a timeout, a lost answer, a leader change before
it committed) with no completion, since it may still take effect; a put that was refused
and a get that got no answer are left out (they changed and said nothing).
"""

from __future__ import annotations

import asyncio
import json
import random

from cluster.net.client import AppendError, Client, ClientError
from tests.support.linearizability import Op

KEYS = ("a", "b", "c", "d")


class KvClients:
    def __init__(self, peers, clients: int, seed: int, group: str, *, consistency: str = "linearizable",
                 timeout: float = 3.0, tls=None) -> None:
        self.peers, self.clients, self.group, self.tls = peers, clients, group, tls
        self.consistency, self.timeout = consistency, timeout
        self.rng = random.Random(seed ^ 0x5EED)
        self.history: list[Op] = []
        self.refused = 0
        self.unanswered = 0
        self.sent: set[bytes] = set()  # every put's entry body ...
        self.refused_bodies: set[bytes] = set()  # ... and those refused (so never in a log)
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        await asyncio.gather(*(self._client(c) for c in range(self.clients)))

    async def _client(self, c: int) -> None:
        loop = asyncio.get_running_loop()
        client = Client(self.peers, self.group, timeout=self.timeout, tls=self.tls)
        rng = random.Random(self.rng.random())
        seq = 0
        try:
            while not self.stopping.is_set():
                key = rng.choice(KEYS)
                start = loop.time()
                if rng.random() < 0.5:
                    seq += 1
                    value = f"k{c}-{seq}"
                    body = f"{key}={value}".encode()
                    self.sent.add(body)
                    try:
                        await client.append([body], resend_unknown=False)
                        self.history.append(Op(key, "put", value, start, loop.time(), c))
                    except AppendError as exc:
                        if exc.outcome == "failed":
                            self.refused += 1
                            self.refused_bodies.add(body)
                        else:
                            self.history.append(Op(key, "put", value, start, None, c))
                    except ClientError:
                        self.history.append(Op(key, "put", value, start, None, c))
                else:
                    try:
                        resp = await client.query(key.encode(), consistency=self.consistency)
                        value = json.loads(resp.result)["value"]
                        self.history.append(Op(key, "get", value, start, loop.time(), c))
                    except (ClientError, ValueError, KeyError, TypeError):
                        self.unanswered += 1
                await asyncio.sleep(rng.uniform(0, 0.02))
        finally:
            await client.close()

    def counts(self) -> dict[str, int]:
        puts = [o for o in self.history if o.kind == "put"]
        return {"puts": sum(o.end is not None for o in puts), "puts_unknown": sum(o.end is None for o in puts),
                "gets": sum(o.kind == "get" for o in self.history), "refused": self.refused,
                "unanswered": self.unanswered}
