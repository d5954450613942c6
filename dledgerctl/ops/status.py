"""Each member's state as ``cluster status`` shows it: what its METADATA answer says, or why
there is none (down, refusing this client, or another process answering at its address)."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from cluster.net.answers import NodeState
from cluster.net.client import Client
from cluster.node import launcher

from .targets import Target, run

# the columns every row has, after id, address and state (None where the member did not answer)
ANSWERED = ("impl", "role", "member", "term", "leader", "begin_index", "end_index", "committed_index")


class MemberStatus(msgspec.Struct):
    """One member. ``state``: up (it answered), down (no answer: ``error`` says why),
    refused (it refuses this client, its certificate say: ``error``), stranger (another
    process answers at its recorded address: ``error``). The fields after ``committed_index``
    are there only when they apply: a state machine's indexes, never-lead, a refused push,
    the scrub; with a cluster record, the member's pid and uptime (None when not running)."""

    id: str
    address: str | None
    state: str
    impl: Any = None
    role: Any = None
    member: Any = None
    term: Any = None
    leader: Any = None
    begin_index: Any = None
    end_index: Any = None
    committed_index: Any = None
    applied_index: Any | UnsetType = UNSET
    snapshot_index: Any | UnsetType = UNSET
    never_lead: bool | UnsetType = UNSET
    push_refused: Any | UnsetType = UNSET
    scrub: dict | UnsetType = UNSET
    error: Any | UnsetType = UNSET
    pid: int | None | UnsetType = UNSET
    uptime_s: float | None | UnsetType = UNSET


def status(target: Target) -> list[MemberStatus]:
    """One row per member of ``target``, in its peers' order (with its record: the pid and
    uptime of each member's process)."""

    async def ask(c: Client):
        return await c.status(), dict(c.refused)

    answers, refused = run(target, ask)
    return rows_of(target, answers, refused)


def rows_of(target: Target, answers: dict[str, NodeState | str], refused: dict[str, str]) -> list[MemberStatus]:
    """The rows of answers to ``Client.status`` (a NodeState, or the error text) and the members
    that refused the client (``Client.refused``)."""
    procs = {n["id"]: n for n in target.record["nodes"]} if target.record else {}
    rows = []
    for pid, md in answers.items():
        peer = target.peers.get(pid)
        address = peer.address if peer is not None else None
        stranger = _stranger(procs.get(pid), md)
        if pid in refused and not isinstance(md, NodeState):
            r = MemberStatus(pid, address, "refused", error=refused[pid])
        elif stranger is not None:
            r = MemberStatus(pid, address, "stranger", error=stranger)
        elif isinstance(md, NodeState):
            r = MemberStatus(pid, address, "up", **{k: getattr(md, k) for k in ANSWERED},  # (UNSET indexes: no
                             applied_index=md.applied_index, snapshot_index=md.snapshot_index)  # state machine)
            if md.never_lead:  # (node start --never-lead)
                r.never_lead = True
            if md.push_refused:  # (a follower refusing its leader's entries: why, and the fix)
                r.push_refused = md.push_refused
            if md.scrub is not None:  # (the background scrub: where its pass is, what it found)
                r.scrub = md.scrub
        else:
            r = MemberStatus(pid, address, "down", error=md)
        if pid in procs:
            up_s = launcher.uptime(procs[pid])
            r.pid = procs[pid].get("pid") if up_s is not None else None
            r.uptime_s = None if up_s is None else round(up_s, 1)
        rows.append(r)
    return rows


def _stranger(node: dict | None, md: NodeState | str) -> str | None:
    """Why the answer at a recorded member's address is not from that member (another
    process, of another cluster say, listens there), or None."""
    if node is None or not isinstance(md, NodeState) or md.pid is None:
        return None  # (not recorded, no answer, or a node that does not say its pid: Java)
    mine = node.get("pid") if launcher.alive(node) else None
    if md.pid == mine:
        return None
    return (f"pid {md.pid} answers at {node.get('address')}, not {node['id']}'s recorded process "
            f"({'pid ' + str(mine) if mine else 'not running'})")
