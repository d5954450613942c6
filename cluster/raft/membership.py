"""Who the members of a group are: voters and learners, changed one member at a time through
entries of magic 3 (DLedger HEAD's reserved CONFIG_CHANGE). No I/O but the store's reads.

Rules (single-member changes, as in the Raft dissertation):

- A config entry's body states the whole new member list (:meth:`Membership.body`). A node
  uses the last config entry in its log, committed or not, from the moment it is appended;
  a config entry truncated away un-does its change. Before the first one, the node uses its
  *base*: ``--peers`` (every peer a voter, or the node itself a learner with ``--learner``),
  or the membership in force where its log begins, which the leader hands over when it cuts
  the node back or installs a snapshot, and which the node keeps (cluster/node/memberfile.py,
  through RaftCore's ``save_base``) when the config entries it knew are deleted from its head.
- A change adds or removes one voter, or adds or removes learners, or promotes one learner:
  any two majorities of the old and the new voters then overlap.
- A leader makes one change at a time: a new one is refused until the last config entry is
  committed. A new leader finishes (commits) a pending change with its first entries.
- Learners receive entries but neither vote nor count for the commit index.

:class:`Configs` tracks the config entries of one node's log: :meth:`Configs.reconcile`
after the log changed (an append, a truncation, a head deletion) keeps those still there
(same index and term: by the log matching property the same entry), and :meth:`add` records
a new one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from store.format import MAGIC_CONFIG

from .config import ConfigError, Peer, format_peers, parse_peers

class MembershipError(ValueError):
    """A member list or a change that cannot be."""


@dataclass(frozen=True)
class Membership:
    voters: dict[str, Peer]
    learners: dict[str, Peer] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.voters:
            raise MembershipError("a group needs at least one voter")
        both = set(self.voters) & set(self.learners)
        if both:
            raise MembershipError(f"{', '.join(sorted(both))} cannot be voter and learner at once")

    @property
    def members(self) -> dict[str, Peer]:
        return {**self.voters, **self.learners}

    @property
    def quorum(self) -> int:
        return len(self.voters) // 2 + 1

    def role_of(self, node: str) -> str | None:
        return "voter" if node in self.voters else "learner" if node in self.learners else None

    def body(self) -> bytes:
        """The body of a config entry: JSON, the peers in ``--peers`` form."""
        return json.dumps({"voters": format_peers(self.voters), "learners": format_peers(self.learners)},
                          separators=(",", ":")).encode()

    @classmethod
    def from_body(cls, body: bytes) -> "Membership":
        try:
            o = json.loads(bytes(body))
            voters, learners = o["voters"], o.get("learners", "")
            if not isinstance(voters, str) or not isinstance(learners, str):
                raise TypeError("voters and learners must be strings")
            return cls(parse_peers(voters), parse_peers(learners) if learners else {})
        except (ValueError, KeyError, TypeError, ConfigError, RecursionError) as exc:  # (nested too deep: a peer's)
            raise MembershipError(f"not a member list: {exc}") from None

    def describe(self) -> str:
        out = "voters " + ", ".join(self.voters)
        return out + ("; learners " + ", ".join(self.learners) if self.learners else "")

    def __eq__(self, other) -> bool:
        return (isinstance(other, Membership) and _addresses(self.voters) == _addresses(other.voters)
                and _addresses(self.learners) == _addresses(other.learners))

    def __hash__(self) -> int:
        return hash((tuple(sorted(_addresses(self.voters).items())), tuple(sorted(_addresses(self.learners).items()))))

    # -- changes (each one member, or learners only) --------------------------------------
    def adding_learner(self, node: str, address: str) -> "Membership":
        if node in self.members:
            raise MembershipError(f"{node} is a member already ({self.role_of(node)})")
        peer = parse_peers(f"{node}-{address}")[node]
        if any(p.address == peer.address for p in self.members.values()):
            raise MembershipError(f"{peer.address} is the address of another member")
        return Membership(dict(self.voters), {**self.learners, node: peer})

    def promoting(self, node: str) -> "Membership":
        if node not in self.learners:
            raise MembershipError(f"{node} is not a learner")
        learners = dict(self.learners)
        return Membership({**self.voters, node: learners.pop(node)}, learners)

    def removing(self, node: str) -> "Membership":
        if node in self.learners:
            learners = dict(self.learners)
            learners.pop(node)
            return Membership(dict(self.voters), learners)
        if node not in self.voters:
            raise MembershipError(f"{node} is not a member")
        if len(self.voters) == 1:
            raise MembershipError(f"{node} is the last voter")
        voters = dict(self.voters)
        voters.pop(node)
        return Membership(voters, dict(self.learners))


def _addresses(peers: dict[str, Peer]) -> dict[str, str]:
    return {k: p.address for k, p in peers.items()}


def initial(peers: dict[str, Peer], self_id: str, learner: bool = False) -> Membership:
    """The membership ``--peers`` states: all voters, or this node a learner (``--learner``)."""
    if not learner:
        return Membership(dict(peers))
    voters = {k: p for k, p in peers.items() if k != self_id}
    return Membership(voters, {self_id: peers[self_id]})


@dataclass
class Configs:
    """The config entries of one node's log, over its base membership."""

    base: Membership
    base_index: int = -1  # the base is in force up to and including this index
    entries: list[tuple[int, int, Membership]] = field(default_factory=list)  # (index, term, membership)

    @property
    def current(self) -> Membership:
        return self.entries[-1][2] if self.entries else self.base

    @property
    def last_index(self) -> int:
        """The index of the last config entry, -1 when there is none in the log."""
        return self.entries[-1][0] if self.entries else -1

    def at(self, index: int) -> Membership:
        """The membership in force at ``index`` (the last config entry at or before it)."""
        found = self.base
        for i, _t, m in self.entries:
            if i > index:
                break
            found = m
        return found

    def known(self, node: str) -> bool:
        """Is ``node`` a member of any membership this log knows? (A leader this node's
        uncommitted change left out must still be heard: its log may undo the change.)"""
        return node in self.base.members or any(node in m.members for _i, _t, m in self.entries)

    def add(self, index: int, term: int, membership: Membership) -> None:
        self.entries = [e for e in self.entries if e[0] < index]
        self.entries.append((index, term, membership))

    def reconcile(self, store) -> bool:
        """Keep the config entries the log still holds (same index and term); one deleted
        from the head becomes the base. True when the base changed (to be kept on disk)."""
        begin, end = store.begin_index, store.end_index
        keep, changed = [], False
        for i, t, m in self.entries:
            if begin >= 0 and i < begin:
                self.base, self.base_index, changed = m, max(self.base_index, i), True  # deleted with the head
            elif i <= end and (begin < 0 or i >= begin) and store.term_of(i) == t:
                keep.append((i, t, m))
        self.entries = keep
        return changed

    def reset(self, base: Membership, base_index: int) -> None:
        """The log began again (cut back, or a snapshot installed) with the leader's
        membership in force there."""
        self.base, self.base_index, self.entries = base, base_index, []

    def describe(self) -> dict:
        return {"voters": list(self.current.voters), "learners": list(self.current.learners),
                "config_index": self.last_index}


def load_configs(store, base: Membership, base_index: int = -1, warn=None) -> Configs:
    """The config entries of ``store``'s log over ``base`` (a malformed one is skipped, and
    ``warn`` told why)."""
    configs = Configs(base, base_index)
    for i in store.indexes_with_magic(MAGIC_CONFIG):
        e = store.get(i)
        try:
            configs.add(i, e.term, Membership.from_body(e.body))
        except MembershipError as exc:
            if warn is not None:
                warn(f"config entry {i} ignored: {exc}")
    return configs


class Roster:
    """Who the members are, as the parts of a node's deciding logic ask it: the node's
    ``configs`` (its config entries over the base), its own id, the members known to be Java
    DLedger nodes (``java_peers``: configured, or learnt from their messages), and where the
    base is kept when it changes (``save_base(membership, index)``, or None)."""

    def __init__(self, self_id: str, configs: Configs, java_peers: set[str], save_base=None) -> None:
        self.self_id, self.configs, self.java_peers, self.save_base = self_id, configs, java_peers, save_base

    @property
    def current(self) -> Membership:
        return self.configs.current

    def others(self) -> list[str]:
        """Every other member, voter or learner (the leader replicates to all of them)."""
        return [p for p in self.configs.current.members if p != self.self_id]

    def voters_but_me(self) -> list[str]:
        return [p for p in self.configs.current.voters if p != self.self_id]

    def is_voter(self) -> bool:
        return self.self_id in self.configs.current.voters
