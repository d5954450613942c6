"""Membership changes (``peer add | remove | replace``): the steps (start the new member, add
it as a learner, wait for its promotion; remove), their checks, and taking an add back after
Ctrl-C (:func:`undo_add`). Progress goes to ``say``, one line per step."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable

import msgspec

from cluster.net.api import ChangeAnswer
from cluster.net.client import Client, ClientError, Refused
from cluster.node import launcher
from cluster.raft.config import address_problem, id_problem, parse_address
from cluster.raft.rpc import Code

from .targets import OpsError, Target

Say = Callable[[str], None]


def quiet(text: str) -> None:
    """A ``say`` that says nothing."""


class Step(msgspec.Struct):
    """One step of a change: ``step`` add or remove, the member it was about and what it is
    now (voter, learner, removed), the config entry that made it, the members then, and how
    long the step took."""

    step: str
    id: str
    address: str | None
    member: str
    config_index: int | None
    voters: str
    learners: str
    elapsed_ms: int


class UndoLeft(OpsError):
    """An undo of an add that did not finish (a second Ctrl-C, the group unreachable): the
    message says what is left and how to finish it."""


def check_new(node: str, address: str, id_what: str, address_what: str) -> tuple[str, str]:
    """A new member's id and address, each checked on its own (an id with a '-' in it is
    refused, not cut at the '-'); OpsError (usage) naming the option when malformed."""
    if (problem := id_problem(node)) is not None:
        raise OpsError(f"{id_what} {node!r} {problem}", usage=True)
    if (problem := address_problem(address)) is not None:
        raise OpsError(f"{address_what} {address!r} {problem}", usage=True)
    return node, address.strip()


def parse_new(spec: str) -> tuple[str, str]:
    """``ID=HOST:PORT`` (or ``ID-HOST:PORT``, as ``--with`` takes it) -> (id, address)."""
    node, sep, address = spec.partition("=")
    if not sep:
        node, sep, address = spec.partition("-")
    if not sep:
        raise OpsError(f"--with {spec!r} is not ID=HOST:PORT", usage=True)
    return check_new(node.strip(), address, f"--with {spec!r}: id", f"--with {spec!r}: address")


def _step(step: str, node: str, answer: ChangeAnswer, start: float, now: float) -> Step:
    member = "voter" if node in answer.voters else "learner" if node in answer.learners else "removed"
    return Step(step, node, answer.peers.get(node), member, answer.index, ",".join(answer.voters),
                ",".join(answer.learners), round((now - start) * 1000))


@dataclass
class Adding:
    """How far an add got, so that Ctrl-C can undo it (:func:`undo_add`)."""
    node: str
    base_dir: str | None = None  # the record of the process started for it
    made: list[str] | None = None  # what starting it created (launcher.new_paths)
    asked: bool = False  # the change was sent: the group may have it
    done: bool = False  # a voter, the add complete: nothing to undo


async def add(c: Client, node: str, address: str, wait: float, base_dir: str | None, start_it: bool,
              adding: Adding | None = None, say: Say = quiet) -> Step:
    """Start the new member (with a record), add it as a learner, wait until it is a voter;
    ``adding`` records how far it got."""
    adding = adding or Adding(node)
    loop = asyncio.get_running_loop()
    start = loop.time()
    leader = await c.find_leader(start + c.timeout)
    md = await c.metadata(leader)
    if node in md.peers:
        raise ClientError(f"{node} is a member already ({'voter' if node in (md.voters or []) else 'learner'})")
    taken = [p for p, a in md.peers.items() if a == address]
    if taken:
        raise ClientError(f"{address} is the address of member {taken[0]}")
    made: list[str] = []
    if start_it:
        made = launcher.new_paths(base_dir, [node])
        try:
            host, port = parse_address(address)
            launcher.check_ports(host, {port: node})
            adding.base_dir, adding.made = base_dir, made
            launcher.add_member(base_dir, node, address, md.peers)
        except (launcher.LauncherError, OSError) as exc:
            adding.base_dir = adding.made = None
            launcher.discard(made)
            raise ClientError(f"cannot start {node}: {exc}") from None
        say(f"{node}: started as a learner at {address} (log in {base_dir}/logs/{node}.log)")
    try:
        adding.asked = True
        resp = await change(c, "add", node, address, start + wait, say)
    except Refused:
        adding.asked = False
        if start_it:  # refused: the member started for it goes again, with what it made (not after a timeout:
            launcher.forget_member(base_dir, node)  # the change may have been made)
            launcher.discard(made)
        raise
    say(f"{node}: config entry {resp.index} committed: a learner; catching up")
    said = None
    while loop.time() - start < wait:
        c.leader = None
        leader = await c.find_leader(loop.time() + c.timeout)
        md = await c.metadata(leader)
        if node in (md.voters or []):
            resp = msgspec.structs.replace(resp, voters=md.voters, learners=md.learners or [],
                                           peers=md.peers, index=md.config_index)
            say(f"{node}: a voter (config entry {md.config_index})")
            adding.done = True
            return _step("add", node, resp, start, loop.time())
        mark = next((r for r in md.replication if r.peer == node), None)
        now_said = (f"{node}: learner, {mark.lag_entries} entries behind ({mark.state})" if mark
                    else f"{node}: not yet replicated to")
        if now_said != said:
            say(now_said)
            said = now_said
        await asyncio.sleep(0.2)
    raise ClientError(f"{node} joined as a learner but was not promoted within {wait:g} s (is it running, and "
                      f"reachable at {address}?); it will be once it has caught up")


async def change(c: Client, kind: str, node: str, address: str | None, until: float,
                 say: Say = quiet) -> ChangeAnswer:
    """The leader's answer to a member change; a refusal that passes by itself (another change
    not committed yet, a transfer under way, a voter just started that the leader has not
    heard from yet: no live majority without it) is waited out until ``until``, saying so."""
    loop = asyncio.get_running_loop()
    said = None
    while True:
        try:
            return await c.change_members(kind, node, address)
        except Refused as exc:
            if exc.code not in (Code.ILLEGAL_MEMBER_STATE, Code.LEADER_TRANSFERRING) or loop.time() + 0.2 >= until:
                raise
            if exc.remark != said:
                said = exc.remark
                say(f"waiting: {exc.peer} cannot make the change yet ({exc.remark})")
            c.leader = None
            await asyncio.sleep(0.2)


async def remove(c: Client, node: str, base_dir: str | None, stop_it: bool, say: Say = quiet) -> Step:
    """Remove ``node`` (and with ``stop_it``, stop its recorded process and forget it)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    resp = await change(c, "remove", node, None, start + c.timeout, say)
    say(f"{node}: config entry {resp.index} committed: removed")
    if stop_it:
        rows = launcher.forget_member(base_dir, node)
        if rows:
            say(f"{node}: process {rows[0]['result']}, dropped from the record")
    c.leader = None
    return _step("remove", node, resp, start, loop.time())


def undo_add(target: Target, adding: Adding, say: Say = quiet) -> None:
    """Ctrl-C during an add: take it back. The member is removed again if the group may have
    it (a learner, or a voter already), then the process started for it is stopped, dropped
    from the record, and what starting it made is deleted. Says what it did; a second Ctrl-C
    leaves the rest (UndoLeft says what is left)."""
    node = adding.node
    if not adding.asked and adding.made is None:
        return
    say(f"interrupted: taking the addition of {node} back")
    try:
        if adding.asked:
            async def take_back() -> ChangeAnswer | None:
                c = target.client()
                try:
                    loop = asyncio.get_running_loop()
                    md = await c.metadata(await c.find_leader(loop.time() + c.timeout))
                    if node not in md.peers:
                        return None
                    return await change(c, "remove", node, None, loop.time() + c.timeout, say)
                finally:
                    await c.close()

            try:
                resp = asyncio.run(take_back())
            except ClientError as exc:
                raise UndoLeft(f"interrupted: {node} may still be a member ({exc}); 'peer remove --id {node}' "
                               "removes it") from None
            say(f"{node}: not a member" if resp is None else f"{node}: config entry {resp.index} "
                 "committed: removed again")
        if adding.made is not None:
            launcher.forget_member(adding.base_dir, node)
            launcher.discard(adding.made)
            say(f"{node}: its process stopped, dropped from the record, its files removed")
    except KeyboardInterrupt:
        raise UndoLeft(f"interrupted again: {node} may still be a member, or its process running ('peer remove "
                       f"--id {node}' removes it; 'cluster status' shows)") from None


def record_dir(peers: str | None, base_dir: str, flag: bool) -> str | None:
    """The base directory whose record --start/--stop act on, None when there is none."""
    if peers is not None or not flag:
        return None
    return base_dir if launcher.read_record(base_dir) is not None else None
