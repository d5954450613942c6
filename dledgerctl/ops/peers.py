"""Operator requests to a running group's leader (``peer ...``): replication watermarks, a
forced compare or truncation of a follower, a leadership transfer waited out, and a member
replaced (members.py holds the steps of a change)."""

from __future__ import annotations

import asyncio

import msgspec

from cluster.net.answers import CompareAnswer, NodeState, TruncateAnswer, WatermarkRow
from cluster.net.client import Client, ClientError, Refused
from cluster.raft.rpc import Code

from . import members
from .members import Adding, Say, Step, quiet
from .targets import OpsError, Target, run

TAKE_WAIT_S = 4.0  # a transfer asked: the leader waits up to max_wait_ack_ms (2.5 s) for the target to catch up


def check_member(target: Target, peer: str, what: str = "--peer") -> None:
    """OpsError (usage) unless ``peer`` is one of the target's members."""
    if peer not in target.peers:
        raise OpsError(f"{what} {peer!r} is not a member ({', '.join(target.peers)})", usage=True)


def watermarks(target: Target) -> list[WatermarkRow]:
    """Per member, from the leader: alive, dispatcher state, match index, next index, lag."""
    return run(target, lambda c: c.watermarks())


class Watermarks:
    """WATERMARKS from the leader, refresh after refresh, through one client on a loop of its
    own (its connection stays open between refreshes). Close it when done."""

    def __init__(self, target: Target) -> None:
        self.loop = asyncio.new_event_loop()

        async def make() -> Client:
            return target.client()
        self.client = self.loop.run_until_complete(make())

    def rows(self) -> list[WatermarkRow]:
        return self.loop.run_until_complete(self.client.watermarks())

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.loop.close()


def compare(target: Target, peer: str, deep: bool = False, dry_run: bool = False) -> CompareAnswer:
    """Where ``peer``'s log stops being the leader's; unless ``dry_run``, cut there (the leader
    re-fills it)."""
    check_member(target, peer)
    return run(target, lambda c: c.force_compare(peer, deep=deep, dry_run=dry_run))


def truncate(target: Target, peer: str, from_index: int) -> TruncateAnswer:
    """Cut ``peer``'s log from ``from_index`` on through the leader (refused at or below the
    committed index; OpsError when there was nothing to cut)."""
    check_member(target, peer)
    result = run(target, lambda c: c.force_truncate(peer, from_index))
    if not result.dropped:  # (as store truncate: past the end there is nothing to cut)
        raise OpsError(f"nothing to cut: {peer}'s log ends at index {result.follower_end}")
    return result


class Transfer(msgspec.Struct):
    """A leadership transfer: from the old leader to ``to``, which leads in ``term``."""

    from_: str = msgspec.field(name="from")
    to: str
    leader: str
    term: int | None
    elapsed_ms: int


def transfer_leader(target: Target, to: str, say: Say = quiet) -> Transfer:
    """Hand leadership to ``to`` and wait until it leads (within the target's timeout); a
    target the leader cannot hand over to yet, or a transfer already under way, is waited
    for, saying so."""
    check_member(target, to, "--to")

    async def work(c: Client) -> Transfer:
        loop = asyncio.get_running_loop()
        start = loop.time()
        end = start + c.timeout
        said, seen = None, {}

        def waiting(text: str) -> None:
            nonlocal said
            if said != text:
                said = text
                say(f"waiting: {text}")

        while True:
            if await c.find_leader(end) == to:
                md = await c.metadata(to)
                return Transfer(to, to, to, md.term, 0)
            try:
                old, old_term = await c.transfer_leadership(to)
            except Refused as exc:  # (not yet: the target is not answering the leader, or a transfer is on)
                if exc.code not in (Code.TAKE_LEADERSHIP_FAILED, Code.LEADER_TRANSFERRING) or loop.time() + 0.2 >= end:
                    raise
                waiting(f"{exc.peer} cannot hand leadership to {to} yet ({exc.remark})")
                c.leader = None  # (it may have moved meanwhile)
                await asyncio.sleep(0.2)
                continue
            # the leader waits for the target to catch up, then asks it to take over (a while: TAKE_WAIT_S)
            asked_until = min(end, loop.time() + TAKE_WAIT_S)
            while loop.time() < asked_until:
                seen = await c.status()
                md = seen.get(to)
                if isinstance(md, NodeState) and md.role == "leader" and (md.term or 0) > old_term:
                    return Transfer(old, to, to, md.term, round((loop.time() - start) * 1000))
                await asyncio.sleep(0.05)
            if loop.time() >= end:
                break
            waiting(f"{to} did not take over within {TAKE_WAIT_S:g} s (catching up?); asking again")
            c.leader = None
        leaders = [f"{p} (term {md.term})" for p, md in seen.items()
                   if isinstance(md, NodeState) and md.role == "leader"]
        raise ClientError(f"{to} did not take leadership within {c.timeout:g} s; leader now: "
                          f"{', '.join(leaders) or 'none'}")

    return run(target, work)


def add(target: Target, node: str, address: str, wait: float, base_dir: str | None, adding: Adding,
        say: Say = quiet) -> Step:
    """Add a member (members.add): started first when ``base_dir`` names a cluster record."""
    return run(target, lambda c: members.add(c, node, address, wait, base_dir, base_dir is not None, adding, say))


def remove(target: Target, node: str, base_dir: str | None, say: Say = quiet) -> Step:
    """Remove a member (members.remove): its recorded process stopped when ``base_dir`` is given."""
    return run(target, lambda c: members.remove(c, node, base_dir, base_dir is not None, say))


def replace(target: Target, node: str, new_id: str, address: str, wait: float, start_dir: str | None,
            stop_dir: str | None, adding: Adding, say: Say = quiet) -> list[Step]:
    """Add ``new_id`` at ``address`` as a learner, wait until it is a voter, then remove
    ``node``: one step each. ``adding`` records how far the add got (members.undo_add)."""
    if new_id == node:
        raise OpsError("--with must name another id than --id", usage=True)

    async def work(c: Client) -> list[Step]:
        leader = await c.find_leader(asyncio.get_running_loop().time() + c.timeout)
        md = await c.metadata(leader)
        if node not in md.peers:
            raise ClientError(f"{node} is not a member ({', '.join(md.peers)})")
        added = await members.add(c, new_id, address, wait, start_dir, start_dir is not None, adding, say)
        return [added, await members.remove(c, node, stop_dir, stop_dir is not None, say)]

    return run(target, work)
