"""The built-in key-value state machine (``node start --state-machine kv``): put a value, read
the latest values."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec

from cluster.net.client import Client, ClientError

from .targets import OpsError, Target, run


class Put(msgspec.Struct):
    """A put, committed at ``index`` in ``term``."""

    key: str
    value: str
    index: int
    term: int


class Value(msgspec.Struct):
    """A key's latest value (None: never set), as of the answering member's ``applied_index``."""

    key: str
    value: Any
    applied_index: Any


def check_key(key: str) -> None:
    """OpsError (usage) for a key a put cannot set."""
    if not key or "=" in key:
        raise OpsError(f"a key may be neither empty nor hold '=': {key!r}", usage=True)


def put(target: Target, key: str, value: str) -> Put:
    """Set ``key`` to ``value``: append ``key=value`` and wait until it is committed. Refused
    (nothing appended) when the group runs no kv state machine."""
    check_key(key)

    async def work(c: Client) -> Put:
        md = await c.metadata(await c.find_leader(asyncio.get_running_loop().time() + c.timeout))
        if md.state_machine != "kv":  # (nothing would apply the entry: refuse before appending it)
            sm = md.state_machine
            raise ClientError(f"the group's state machine is {sm!r}, not kv" if sm else
                              "the group runs no state machine (start its members with --state-machine kv)")
        resp = await c.append([f"{key}={value}".encode()])
        index, term, _pos, _size = resp.entries[0]
        return Put(key, value, index, term)

    return run(target, work)


def get(target: Target, keys: list[str], node: str | None = None, consistency: str | None = None) -> list[Value]:
    """The latest value of each key: from the leader (linearizable), or from ``node`` (what it
    has applied; ``consistency`` as Client.query takes it)."""
    if node is not None and node not in target.peers:
        raise OpsError(f"--node {node!r} is not a member ({', '.join(target.peers)})", usage=True)

    async def work(c: Client) -> list[Value]:
        rows = []
        for key in keys:
            answer = await c.query(key.encode(), node, consistency=consistency)
            try:
                value = json.loads(answer.result)["value"]
            except (ValueError, KeyError, TypeError):
                raise ClientError("the nodes' state machine is not kv (start them with --state-machine kv)") from None
            rows.append(Value(key, value, answer.applied_index))
        return rows

    return run(target, work)
