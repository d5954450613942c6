"""Whom a RocketMQ 5 controller may make master of a broker set, and what each choice cuts
from the other replicas (``dledgerctl controller elect-plan``), from the controller's log
(its replayed state: controller_state.py) and the replicas' stores or digests (replica.py,
align.py).

Facts from apache/rocketmq, tag rocketmq-all-5.3.3 (tests/java/test_controller_elect_plan_java.py
runs the controller's own ReplicasInfoManager.electMaster with DefaultElectPolicy on the same
state and compares):

- ``ReplicasInfoManager.electMaster`` passes the policy the SyncStateSet, all registered
  broker ids only when ``enableElectUncleanMaster`` (else none), the old master, and the
  requested broker id when the request designates one (``mqadmin electMaster -b ID``). A
  result equal to the old master changes nothing (CONTROLLER_MASTER_STILL_EXIST); another
  one becomes master at masterEpoch + 1 with the SyncStateSet {it}; none elected, on the
  controller's own trigger, applies an ElectMasterEvent without a master.
- ``DefaultElectPolicy.elect``: first among the SyncStateSet, then (unclean) among all
  replicas, each time keeping the brokers the controller sees alive (``isBrokerActive``):
  the old master if among them and no other broker is designated; a designated broker if
  among them, else none from this set; else the first by (epoch desc, maxOffset desc,
  electionPriority asc) from each one's heartbeat (``BrokerLiveInfo``: the epoch file's last
  epoch, the store's max offset, ``brokerElectionPriority``, Integer.MAX_VALUE by default).
  Its comparator casts the offset difference to an int and its TreeSet keeps one of brokers
  that compare equal (the first in HashSet order): both are kept here.
- Broker side (epochs.py): the new master appends its epoch at its max offset
  (``changeToMaster``, :func:`epochs.as_master`); each other replica's first handshake
  truncates to ``findConsistentPoint`` against the master's epochs (:func:`epochs.handshake`).
  It compares epochs only: bytes a replica keeps that differ from the new master's stay
  (:class:`LogDifference` finds them, to the byte or to a digest's chunk).

"Acknowledged" (the rule this module applies, conservatively, whatever the ack mode): every
byte below the smallest max offset among the SyncStateSet members' stores given. Those bytes
are held by every in-sync replica. Under ``allAckInSyncStateSet`` (with brokerRole
SYNC_MASTER) a put returns PUT_OK only once every SyncStateSet member has acknowledged its
end (``GroupTransferService.doWaitTransfer``: ackNums == MixAll.ALL_ACK_IN_SYNC_STATE_SET), so
any acknowledged message lies below it, and any message below it may have been
acknowledged; under an ASYNC_MASTER every message on the master was acknowledged on write,
so these were too (the master's bytes past them, also acknowledged then, count as cut, not
as acknowledged). An in-sync replica's bytes cut below that offset, or kept there but differing
from the new master's, are acknowledged messages lost; a replica outside the SyncStateSet
holds nothing acknowledged of its own.

:func:`plan` is pure (the broker set's state and the replicas in, rows out; reading the
messages of a cut and comparing logs are functions handed to it); :func:`read_brokers`,
:func:`controller_state`, :func:`local_messages` and :class:`LogDifference` read the files.
"""

from __future__ import annotations

import json
import mmap
import os
from dataclasses import dataclass, field
from typing import Callable

from ..errors import NotAStoreError, StoreUsageError
from ..kinds import refuse_for_controller
from ..layout import resolve_node_dir
from .commitlog import COMMIT_LOG_DIR, log_files, walk_file
from .align import (CHUNK, Cut, Digest, digest, digest_difference, digest_from_dict, first_difference, messages_between,
                    replica_from_digest)
from .controller import require_controller_log
from .controller_state import replay
from .epochs import EpochEntry, as_master, handshake
from .replica import Replica, read_replica

INT_MAX = (1 << 31) - 1  # BrokerConfig.brokerElectionPriority's default (Integer.MAX_VALUE)
DIGEST_LIMIT = 256 << 20  # bytes read of a digest file
IN_SYNC, UNCLEAN, NO = "in-sync", "unclean", "no"


@dataclass
class Broker:
    """One replica as the controller would see it: its id, what its files say, whether it is
    taken as alive (sending heartbeats), and its election priority."""

    broker_id: int
    source: str  # the store root or digest file given
    replica: Replica
    local: bool  # a store root here: the messages of a cut can be read
    alive: bool = True
    priority: int = INT_MAX
    digest: Digest | None = None  # what a digest file given says (local False)

    @property
    def epoch(self) -> int:  # BrokerLiveInfo.epoch: EpochFileCache.lastEpoch (-1 with none)
        return self.replica.entries[-1].epoch if self.replica.entries else -1

    @property
    def max_offset(self) -> int:  # BrokerLiveInfo.maxOffset: getMaxPhyOffset
        return self.replica.max_offset


@dataclass
class SetState:
    """A broker set as the controller's state holds it (controller_state.broker_row)."""

    name: str
    master: int | None
    master_epoch: int
    sync_state_set: frozenset
    registered: frozenset  # BrokerReplicaInfo.getAllBroker

    @classmethod
    def from_row(cls, row: dict) -> "SetState":
        return cls(row["broker_name"], row["master_broker_id"], row["master_epoch"] or 0,
                   frozenset(i for i in row["sync_state_set"] or () if i is not None),
                   frozenset(b["broker_id"] for b in row["brokers"] if b["broker_id"] is not None))


# -- the controller's rule ------------------------------------------------------------------------

def _java_int(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _compare(a: Broker, b: Broker) -> int:
    """DefaultElectPolicy's comparator (ints and casts as in Java)."""
    if a.epoch == b.epoch:
        if a.max_offset == b.max_offset:
            return _java_int(a.priority - b.priority)
        return _java_int(b.max_offset - a.max_offset)
    return _java_int(b.epoch - a.epoch)


def hashset_order(ids) -> list[int]:
    """The order a java.util.HashSet<Long> of ``ids`` iterates in (bucket of the spread hash,
    then the id: collisions are rare among small ids)."""
    ids = list(ids)
    cap = 16
    while len(ids) > cap * 3 // 4:
        cap *= 2

    def bucket(i: int) -> int:
        h = _java_int((i ^ (i >> 32)) & 0xFFFFFFFF) & 0xFFFFFFFF  # Long.hashCode
        return (h ^ (h >> 16)) & (cap - 1)  # HashMap.hash, then the table index
    return sorted(ids, key=lambda i: (bucket(i), i))


def _try_elect(ids, live: dict[int, Broker], old_master, prefer) -> int | None:
    """DefaultElectPolicy.tryElect over ``ids``, keeping the brokers in ``live``."""
    valid = [i for i in hashset_order(ids) if i in live]
    if not valid:
        return None
    if old_master in valid and (prefer is None or prefer == old_master):
        return old_master
    if prefer is not None:
        return prefer if prefer in valid else None
    return _tree_first([live[i] for i in valid]).broker_id


def _tree_first(brokers: list[Broker]) -> Broker:
    """TreeSet.add of each in turn, then first(): each goes down from the root by the
    comparator, one comparing equal to a node is dropped. (Java's red-black rotations keep
    the order the walk gives; with the int cast the comparator need not be a total order, and
    this walk over the unbalanced tree is what a tree of these few brokers does.)"""
    root: list | None = None  # [broker, left, right]
    for b in brokers:
        if root is None:
            root = [b, None, None]
            continue
        node = root
        while True:
            c = _compare(b, node[0])
            if c == 0:
                break
            side = 1 if c < 0 else 2
            if node[side] is None:
                node[side] = [b, None, None]
                break
            node = node[side]
    assert root is not None
    while root[1] is not None:
        root = root[1]
    return root[0]


def controller_elects(s: SetState, live: dict[int, Broker], *, unclean: bool = False,
                      prefer: int | None = None) -> tuple[int | None, bool]:
    """(the broker electMaster makes master, or None; whether it is the old master kept). A
    controller-triggered election (no broker asking) unless ``prefer`` designates one."""
    got = _try_elect(s.sync_state_set, live, s.master, prefer)
    if got is None and unclean:
        got = _try_elect(s.registered, live, s.master, prefer)
    return got, got is not None and got == s.master


def may_elect(s: SetState, b: Broker | None, broker_id: int, unclean: bool) -> tuple[str, str]:
    """(IN_SYNC | UNCLEAN | NO, why): whether the controller may make ``broker_id`` master
    (designated or chosen): alive, registered, and in the SyncStateSet (or unclean)."""
    if broker_id not in s.registered:
        return NO, "not a broker id the controller's state registers for this broker set"
    if b is None:
        return NO, "no store given: taken as not alive"
    if not b.alive:
        return NO, "down (--down): the controller elects only brokers it sees alive"
    if broker_id in s.sync_state_set:
        return IN_SYNC, "in the SyncStateSet and alive"
    if unclean:
        return UNCLEAN, "alive but not in the SyncStateSet: electable only as unclean master (enabled here)"
    return NO, "not in the SyncStateSet: only with enableElectUncleanMaster (--unclean)"


# -- what a choice cuts ---------------------------------------------------------------------------

@dataclass
class Loss:
    candidate: int
    broker_id: int
    truncate_to: int | None  # None: nothing truncated
    cut_bytes: int
    acked_bytes: int
    refused: bool = False
    diverged_at: int | None = None  # the first byte it keeps that differs from the new master's
    messages: int | None = None  # None: not read (a digest)
    acked_messages: int | None = None
    cut: list[Cut] = field(default_factory=list)


@dataclass
class Candidate:
    broker_id: int
    may: str
    why: str
    new_epoch: int | None
    kept: bool  # the old master kept: no new epoch
    controller_choice: bool
    cut_bytes: int | None = 0  # None: no store given for it
    acked_bytes: int | None = 0
    messages: int | None = 0
    acked_messages: int | None = 0
    losing: list[int] = field(default_factory=list)  # replicas that lose bytes or keep differing ones
    diverging: list[int] = field(default_factory=list)  # replicas that keep bytes differing from it
    problem: str = ""


def acknowledged_end(s: SetState, brokers: list[Broker]) -> int | None:
    """The offset below which bytes count as acknowledged (module doc): the smallest max
    offset among the SyncStateSet members' stores given; None when none is given."""
    ends = [b.max_offset for b in brokers if b.broker_id in s.sync_state_set]
    return min(ends) if ends else None


MessagesFn = Callable[[Broker, int, int], list[Cut]]
DifferenceFn = Callable[[Broker, Broker, int], "int | None"]


def _loss(c: Broker, entries: list[EpochEntry], r: Broker, acked: int | None, messages: MessagesFn | None,
          difference: DifferenceFn | None) -> Loss:
    """What ``r``'s handshake with ``c`` as master (its epochs ``entries``) cuts. Acknowledged
    bytes are an in-sync replica's below ``acked`` (``acked`` None when r is no member of the
    SyncStateSet: what it holds there may be its own, not what was acknowledged). The
    handshake compares epochs only: bytes ``r`` keeps that differ from ``c``'s (``difference``,
    where both logs can be read) stay, and an in-sync replica's acknowledged bytes from there
    are lost as surely as cut ones."""
    point = handshake(r.replica.entries, r.max_offset, entries, c.max_offset)
    lo = max(r.replica.min_offset, 0)
    if point is not None and point < 0:
        kept = lo  # (refused: nothing is kept)
    else:
        kept = min(r.max_offset if point is None else point, c.max_offset)
    diff = difference(c, r, kept) if difference is not None and kept > lo else None
    diverged = diff if diff is not None and diff < kept else None
    out = Loss(c.broker_id, r.broker_id, None, 0, 0, diverged_at=diverged, messages=0, acked_messages=0)
    frm = r.max_offset  # (where the bytes cut begin)
    if point is not None and point < r.max_offset:
        out.refused = point < 0
        frm = lo if out.refused else point  # (refused: it cannot rejoin until its log is cleared)
        out.truncate_to = None if out.refused else point
        out.cut_bytes = r.max_offset - frm
    lost = frm if diverged is None else min(frm, diverged)  # (acknowledged bytes are lost from here)
    if acked is not None:
        out.acked_bytes = max(0, min(r.max_offset, acked) - lost)
    if not r.local or messages is None:
        out.messages = out.acked_messages = None if out.cut_bytes or out.acked_bytes else 0
    else:
        out.cut = messages(r, frm, r.max_offset) if out.cut_bytes else []
        out.messages = sum(x.count for x in out.cut)
        out.acked_messages = sum(x.count for x in messages(r, lost, min(r.max_offset, acked))) \
            if out.acked_bytes and acked is not None else 0
    return out


def plan(s: SetState, brokers: list[Broker], *, unclean: bool = False, prefer: int | None = None,
         messages: MessagesFn | None = None, difference: DifferenceFn | None = None) -> dict:
    """Every broker of the set as candidate: whether the controller may elect it, and what
    electing it cuts from each other replica given (their next handshakes). Returns
    ``{"candidates", "losses", "acked_end", "choice", "verdict"}``."""
    by_id = {b.broker_id: b for b in brokers}
    live = {b.broker_id: b for b in brokers if b.alive and b.broker_id in s.registered}
    choice, kept = controller_elects(s, live, unclean=unclean, prefer=prefer)
    acked = acknowledged_end(s, brokers)
    cands, losses = [], []
    for i in sorted(set(by_id) | s.registered):
        b = by_id.get(i)
        may, why = may_elect(s, b, i, unclean)
        keep = i == s.master and may == IN_SYNC
        c = Candidate(i, may, why, None if keep else s.master_epoch + 1, keep, i == choice)
        cands.append(c)
        if b is None:
            c.cut_bytes = c.acked_bytes = c.messages = c.acked_messages = None
            continue
        entries = b.replica.entries if keep else as_master(b.replica.entries, s.master_epoch + 1, b.max_offset)
        if entries is None:
            c.problem = (f"holds epoch {b.epoch}, above the next master epoch {s.master_epoch + 1}: its "
                         "changeToMaster refuses")
            if may != NO:
                c.may, c.why = NO, c.problem
            continue
        for r in brokers:
            if r is b:
                continue
            loss = _loss(b, entries, r, acked if r.broker_id in s.sync_state_set else None, messages, difference)
            losses.append(loss)
            if loss.diverged_at is not None:
                c.diverging.append(r.broker_id)
            if loss.cut_bytes or loss.diverged_at is not None:
                c.losing.append(r.broker_id)
                c.cut_bytes += loss.cut_bytes
                c.messages = None if c.messages is None or loss.messages is None else c.messages + loss.messages
            if loss.acked_bytes > c.acked_bytes:  # (every in-sync replica holds the same acknowledged bytes:
                # the most one of them loses is what the broker set loses)
                c.acked_bytes, c.acked_messages = loss.acked_bytes, loss.acked_messages
    return {"candidates": cands, "losses": losses, "acked_end": acked, "choice": choice, "kept": kept,
            "verdict": verdict(s, cands, choice, kept, unclean, acked)}


def verdict(s: SetState, cands: list[Candidate], choice: int | None, kept: bool, unclean: bool,
            acked: int | None) -> dict:
    """Who should be master: of the brokers the controller may elect, one that cuts nothing,
    else the one that cuts the fewest bytes and no acknowledged one. ``ok`` is False when
    none may be elected or every choice cuts acknowledged bytes."""
    able = [c for c in cands if c.may != NO]
    how = _controller_text(s, choice, kept, unclean)
    if not able:
        return {"ok": False, "brokers": [], "text": "no broker the controller may elect: " + how}
    clean = [c for c in able if not c.losing and not c.problem]
    if clean:
        best = clean
        text = f"{_names(best)}: nothing is cut"
    else:
        safe = [c for c in able if not c.acked_bytes and not c.problem]
        if not safe:
            each = "; ".join(f"{c.broker_id} cuts {c.acked_bytes} acknowledged bytes" if not c.problem
                             else f"{c.broker_id}: {c.problem}" for c in able)
            return {"ok": False, "brokers": [], "text": f"every choice cuts acknowledged messages: {each}; {how}"}
        least = min(c.cut_bytes for c in safe)
        best = [c for c in safe if c.cut_bytes == least]
        text = f"{_names(best)}: cuts least, {least} bytes, none acknowledged"
        differ = sorted({i for c in best for i in c.diverging})
        if differ:
            text += (f" (replica {', '.join(map(str, differ))} would keep bytes that differ from the new master's: "
                     "see the loss rows)")
    ids = [c.broker_id for c in best]
    if choice in ids:
        text += f"; the controller {'keeps' if kept else 'elects'} {choice} itself"
    else:
        text += f"; {how}" + (f": designate {ids[0]} (mqadmin electMaster -b {ids[0]})" if choice is not None or
                              any(c.may != NO for c in best) else "")
    if acked is None:
        text += " (no SyncStateSet member's store given: what was acknowledged is not known)"
    return {"ok": True, "brokers": ids, "text": text}


def _controller_text(s: SetState, choice: int | None, kept: bool, unclean: bool) -> str:
    if choice is None:
        return ("the controller elects none (no member of the SyncStateSet is alive" + (")" if unclean else
                "; see --unclean for what enableElectUncleanMaster would allow)"))
    if kept:
        return f"the controller keeps the old master {choice} (alive and in the SyncStateSet)"
    return f"the controller would elect {choice}"


def _names(cands: list[Candidate]) -> str:
    ids = [str(c.broker_id) for c in cands]
    return "broker " + ids[0] if len(ids) == 1 else "one of brokers " + ", ".join(ids)


# -- reading --------------------------------------------------------------------------------------

def controller_state(path: str, broker: str | None, *, self_id: str | None = None, **sizes) -> tuple[SetState, list]:
    """The broker set's state after replaying the controller's log under ``path`` (its node
    directory or a base directory holding it), and the replay's notes (strings). ``broker``
    may be None when the state holds one broker set."""
    refuse_for_controller(path)
    node = resolve_node_dir(path, self_id).node_dir
    require_controller_log(node, **sizes)
    r = replay(node, **sizes)
    rows = {row["broker_name"]: row for row in r.state.broker_rows()}
    notes = [n for _i, n in r.notes]
    if r.stop is not None:
        notes.append(r.stop_text)
    if r.first_index not in (None, 0):
        notes.append(f"the log starts at index {r.first_index}, not 0: this state lacks what its head entries did")
    if broker is None:
        if len(rows) != 1:
            raise StoreUsageError(f"{node}: the controller's state holds {len(rows)} broker sets "
                                  f"({', '.join(sorted(rows)) or 'none'}): give --broker NAME")
        broker = next(iter(rows))
    if broker not in rows:
        raise StoreUsageError(f"{node}: no broker set {broker} in the controller's state "
                              f"(it holds {', '.join(sorted(rows)) or 'none'})")
    row = rows[broker]
    if row["master_epoch"] is None:
        raise StoreUsageError(f"{node}: broker set {broker} has no SyncStateSet in the controller's state")
    return SetState.from_row(row), notes


def _load(path: str) -> tuple[Replica, Digest | None]:
    if os.path.isdir(path):
        return read_replica(path), None
    try:
        with open(path, "rb") as fh:
            d = digest_from_dict(json.loads(fh.read(DIGEST_LIMIT)))
    except FileNotFoundError:
        raise NotAStoreError(f"{path}: no such file or directory") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise NotAStoreError(f"{path}: not a store root nor a digest of mq digest: {exc}") from None
    return replica_from_digest(d), d


def _identity(r: Replica, path: str, broker: str) -> int:
    ids = [i for i in r.identity if not i.problem and i.broker_id is not None and i.register_check_code is None]
    if not ids:
        raise NotAStoreError(f"{path}: no brokerIdentity gives its broker id: name it with --store ID={path}")
    if ids[0].broker and ids[0].broker != broker:
        raise StoreUsageError(f"{path}: brokerIdentity says broker set {ids[0].broker}, not {broker}")
    return ids[0].broker_id


def read_brokers(s: SetState, stores: list[str], named: list[tuple[int, str]], *, down=(),
                 priorities: dict | None = None) -> list[Broker]:
    """The replicas given: ``stores`` (store roots or digest files, each broker id from its
    identity) and ``named`` ((id, path): the id given). Each alive unless in ``down``."""
    out: list[Broker] = []
    for bid, path in [(None, p) for p in stores] + list(named):
        replica, dig = _load(path)
        if bid is None:
            bid = _identity(replica, path, s.name)
        if any(b.broker_id == bid for b in out):
            raise StoreUsageError(f"broker id {bid} given twice ({path} and "
                                  f"{next(b.source for b in out if b.broker_id == bid)})")
        out.append(Broker(bid, path, replica, dig is None, bid not in set(down),
                          (priorities or {}).get(bid, INT_MAX), dig))
    return out


def local_messages(b: Broker, lo: int, hi: int) -> list[Cut]:
    """The messages of ``b``'s log that end past ``lo`` and start below ``hi`` (the one a
    divergence starts inside counts)."""
    return messages_between(b.replica.root, _message_start(b.replica.root, lo), hi)


def _message_start(root: str, offset: int) -> int:
    """The start of the message holding byte ``offset`` (``offset`` itself when none does)."""
    try:
        files = log_files(os.path.join(root, COMMIT_LOG_DIR))
    except NotAStoreError:
        return offset
    for start, path in reversed(files):
        if start > offset:
            continue
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if not size:
                return offset
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            p, end = 0, None
            while end is None and p <= offset - start:  # (a walk of a thousand messages at a time, up to it)
                at, sizes, p, end = walk_file(buf, size, p, 1024)
                for o, n in zip(at, sizes):
                    if o <= offset - start < o + n:
                        return start + o
        finally:
            buf.close()
        return offset
    return offset


class LogDifference:
    """Where two replicas' logs first differ below ``end``: to the byte between two store
    roots (align.first_difference); where a digest stands for one, the start of the first
    chunk whose digests differ (align.digest_difference; a store root's digest is made here),
    counted only when that whole chunk lies below ``end`` (else the difference may be past it,
    in a tail the handshake cuts). None: no difference found (or digests of different chunk
    sizes, which cannot be compared)."""

    def __init__(self) -> None:
        self._seen: dict[tuple, int | None] = {}
        self._digests: dict[tuple, Digest] = {}

    def __call__(self, a: Broker, b: Broker, end: int) -> int | None:
        key = (frozenset((a.broker_id, b.broker_id)), end)
        if key not in self._seen:
            if a.local and b.local:
                self._seen[key] = first_difference(a.replica.root, b.replica.root, end)
            else:
                try:
                    da, db = self._digest(a, b), self._digest(b, a)
                    at = digest_difference(da, db)[0]
                except ValueError:
                    at = None
                self._seen[key] = at if at is not None and at + da.chunk <= end else None
        return self._seen[key]

    def _digest(self, b: Broker, other: Broker) -> Digest:
        """``b``'s digest: the one given, or one of its log made here, ending where the other
        one's digest does, in its chunks (so that every chunk compares)."""
        if b.digest is not None:
            return b.digest
        upto, chunk = (other.digest.max_offset, other.digest.chunk) if other.digest is not None else (None, CHUNK)
        if (b.broker_id, upto, chunk) not in self._digests:
            self._digests[(b.broker_id, upto, chunk)] = digest(b.replica.root, replica=b.replica, upto=upto,
                                                               chunk=chunk)
        return self._digests[(b.broker_id, upto, chunk)]


__all__ = ["Broker", "Candidate", "LogDifference", "Loss", "SetState", "acknowledged_end", "controller_elects",
           "controller_state", "hashset_order", "local_messages", "may_elect", "plan", "read_brokers", "verdict"]
