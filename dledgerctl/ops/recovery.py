"""A new group's stores from a backup (``store restore``), and a group of one made from a
survivor when a majority is lost for good (``store force-new-group``): the member lists and
the identity of the new group, over store/restore.py's file work.

Identity. A group is told apart on the wire by its name (every member's request carries it,
and a member refuses one for another group: UNKNOWN_GROUP) and by its members (a request from
a member the log never listed is refused: UNKNOWN_MEMBER). A restored group takes a new name
(``--group``; by default the backup's with ``-restored`` after it) and the member list given,
as a config entry at the end of the log; members of the old group, still running on the old
name, are refused by every restored member. A forced survivor keeps its group's name (its
clients go on) and becomes its group's only member; ``members.json`` (the base,
cluster/node/memberfile.py) is rewritten to it too, so members that no config entry of the
log names are refused even when it is started with the old ``--peers``. A survivor whose log
was written with Java DLedger members (DLedger 0.2.7's entries only) gets no config entry,
which Java DLedger and RocketMQ's brokers cannot read: they take their members from their
configuration, so it is started alone by its configuration (the command says which).
"""

from __future__ import annotations

import os

import msgspec

from cluster.node.memberfile import save_base
from cluster.raft.config import DEFAULT_GROUP, ConfigError, group_problem, parse_peers
from cluster.raft.membership import Membership, MembershipError
from store.backup import BackupReader
from store.layout import node_dir_for
from store.restore import force_apply, force_plan, restore_store

from .targets import OpsError

RESTORED_SUFFIX = "-restored"


class RestoreResult(msgspec.Struct):
    """A member's store restored: where, for which group and member, the backup's entries
    (first and last index), the config entry that holds the new member list (committed), and
    the new term."""

    id: str
    node_dir: str
    group: str
    old_group: str | None
    members: str
    first_index: int
    last_index: int
    config_index: int
    term: int
    snapshot_index: int | None
    data_file_size: int


class Uncommitted(msgspec.Struct):
    """An entry the survivor holds past its commit index: committed by the force."""

    index: int
    term: int
    magic: int
    size: int
    pos: int


class ForceResult(msgspec.Struct):
    """A force-new-group plan (``applied`` False) or what it did (True)."""

    node_dir: str
    id: str
    address: str
    begin_index: int
    end_index: int
    end_term: int
    committed_index: int
    new_term: int
    uncommitted: list[Uncommitted]
    applied: bool = False
    config_index: int | None = None
    java_only: bool = False  # its log has DLedger 0.2.7's entries only: no config entry is written


def _peers(text: str) -> dict:
    try:
        return parse_peers(text)
    except ConfigError as exc:
        raise OpsError(str(exc), usage=True) from None


def new_group_name(old: str | None, given: str | None) -> str:
    """The restored group's name: ``given``, else the old one with ``-restored``; never the old one."""
    name = given or f"{old or DEFAULT_GROUP}{RESTORED_SUFFIX}"
    problem = group_problem(name)
    if problem is not None:
        raise OpsError(problem, usage=True)
    if name == (old or DEFAULT_GROUP):
        raise OpsError(f"the restored group needs a name of its own: {name!r} is the backup's group, whose members "
                       f"would be taken for the new group's", usage=True)
    return name


def restore(backup: str, self_id: str, peers: str, store_base_dir: str, *, group: str | None = None,
            data_file_size: int | None = None, index_file_size: int | None = None, progress=None) -> RestoreResult:
    """Member ``self_id``'s store of a new group (the members ``peers``) from ``backup``,
    in ``store_base_dir``/dledger-<id>. Give every member the same ``peers`` and ``group``."""
    members = _peers(peers)
    if self_id not in members:
        raise OpsError(f"--id {self_id!r} is not one of the peers ({', '.join(members)})", usage=True)
    node_dir = node_dir_for(store_base_dir, self_id)
    if os.path.lexists(node_dir) and (not os.path.isdir(node_dir) or os.listdir(node_dir)):
        raise OpsError(f"{node_dir} is not empty: a store is restored into a new directory only")
    with BackupReader(backup) as reader:
        m = reader.manifest
        name = new_group_name(m.group, group)
        membership = Membership(dict(members))
        done = restore_store(reader, node_dir, membership.body(), m.last_term + 1, data_file_size=data_file_size,
                             index_file_size=index_file_size, progress=progress)
    return RestoreResult(self_id, node_dir, name, m.group, peers, done.first_index, done.last_index,
                         done.config_index, done.term, done.snapshot_index, done.data_file_size)


def _survivor(dirs: list[str], peers: str) -> tuple[str, str, str]:
    if len(dirs) != 1:
        raise OpsError(f"{len(dirs)} stores given: a group is forced from one survivor; choose it first with "
                       f"'dledgerctl store elect {' '.join(dirs)}' (who holds the most, what each choice cuts)",
                       usage=True)
    members = _peers(peers)
    if len(members) != 1:
        raise OpsError(f"--peers names {len(members)} members: a forced group is its survivor alone "
                       f"(SELF-HOST:PORT); bring the others back with 'peer add' once it leads", usage=True)
    (self_id, peer), = members.items()
    node_dir = dirs[0]
    name = os.path.basename(os.path.normpath(node_dir))
    if name.startswith("dledger-") and name != f"dledger-{self_id}":
        raise OpsError(f"{node_dir} is member {name[len('dledger-'):]}'s store, not {self_id}'s", usage=True)
    return node_dir, self_id, peer.address


def plan_force(dirs: list[str], peers: str) -> ForceResult:
    """What forcing the one survivor in ``dirs`` into a group of its own (``peers``: itself)
    would do: the entries past its commit index, which become committed. Nothing changes."""
    node_dir, self_id, address = _survivor(dirs, peers)
    p = force_plan(node_dir)
    return ForceResult(node_dir, self_id, address, p.begin_index, p.end_index, p.end_term, p.committed_index,
                       p.new_term, [Uncommitted(**r) for r in p.uncommitted], java_only=p.java_only)


def apply_force(dirs: list[str], peers: str) -> ForceResult:
    """Force the survivor (see :func:`plan_force`): its log kept whole and committed, a config
    entry naming it alone in a new term, members.json the same. A log written with Java
    members (``java_only``) gets no config entry: Java DLedger and RocketMQ's brokers cannot
    read one, and take their members from their configuration (start it alone)."""
    node_dir, self_id, address = _survivor(dirs, peers)
    p = force_plan(node_dir)
    alone = Membership(dict(_peers(peers)))
    index = force_apply(p, None if p.java_only else alone.body())
    try:
        save_base(node_dir, alone, p.begin_index - 1)
    except (OSError, MembershipError) as exc:
        raise OpsError(f"{node_dir}: the log is forced (config entry {index}) but members.json could not be "
                       f"written: {exc}") from None
    return ForceResult(node_dir, self_id, address, p.begin_index, p.end_index, p.end_term, p.committed_index,
                       p.new_term, [Uncommitted(**r) for r in p.uncommitted], True, index, p.java_only)
