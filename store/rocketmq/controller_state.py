"""The RocketMQ 5 controller's state: ``ReplicasInfoManager``'s two tables, as replaying
the controller's log (controller.py's entries) builds them.

Facts from apache/rocketmq, tag rocketmq-all-5.3.3, controller/src/main/java/org/apache/
rocketmq/controller/impl/ (each rule of :meth:`ControllerState.apply` names its method):

- ``manager/ReplicasInfoManager.applyEvent`` dispatches by type to its ``handle*``
  methods; ``masterEpoch`` and ``syncStateSetEpoch`` are in no event: they count
  ``SyncStateInfo.updateMasterInfo`` and ``updateSyncStateSetInfo`` calls;
- its tables are ConcurrentHashMaps: an event without ``brokerName`` fails its apply (a
  NullPointerException looking up a null key), whatever its type; so does a null id in a
  registered set's ``brokerIdSetToClean``; other missing fields default as in Java
  (tests/java/test_controller_hostile_java.py runs each against RocketMQ's code);
- DLedger 0.3.1.2's ``StateMachineCaller.doCommitted`` moves ``lastAppliedIndex`` only
  when ``onApply`` returns: an entry whose apply throws is tried again at every commit and
  nothing past it is ever applied. :func:`replay` stops there as the controller does; the
  entries past it are counted, not applied.

Pure: the log is read through controller.entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from ..reading import Selection
from .controller import (EVENT_TYPES, OTHER_ENTRY, PROPOSAL, AlterSyncStateSet, ApplyBrokerId, CleanBrokerData,
                         Decoded, ElectMaster, UpdateBrokerAddress, entries)


@dataclass
class ReplicaInfo:  # manager/BrokerReplicaInfo
    cluster_name: str | None
    broker_ids: dict[int, tuple[str | None, str | None]] = field(default_factory=dict)  # id -> (address, check code)
    next_assign_broker_id: int = 1  # MixAll.FIRST_BROKER_CONTROLLER_ID

    def add_broker(self, broker_id: int, address, code) -> None:  # BrokerReplicaInfo.addBroker
        self.broker_ids[broker_id] = (address, code)
        self.next_assign_broker_id += 1


@dataclass
class SyncInfo:  # manager/SyncStateInfo
    cluster_name: str | None
    master_epoch: int = 0
    sync_state_set_epoch: int = 0
    sync_state_set: frozenset = frozenset()
    master_broker_id: int | None = None

    def update_master(self, broker_id: int | None) -> None:  # SyncStateInfo.updateMasterInfo
        self.master_broker_id = broker_id
        self.master_epoch += 1

    def update_sync_state_set(self, ids) -> None:  # SyncStateInfo.updateSyncStateSetInfo
        self.sync_state_set = frozenset(ids)
        self.sync_state_set_epoch += 1


class Applied(NamedTuple):
    """What applying one entry did: ``note`` when RocketMQ's apply did not take it as an
    ordinary event; ``fails`` when it throws there (the controller stops at that entry)."""

    note: str = ""
    fails: bool = False


NPE = "RocketMQ's apply fails here (NullPointerException)"


def _fails(note: str) -> Applied:
    return Applied(note, True)


class ControllerState:
    """``ReplicasInfoManager``'s two tables, as applying events builds them. :meth:`apply`
    says when RocketMQ's own apply would not get through the event (``fails``) or ignores
    it (a note only)."""

    def __init__(self) -> None:
        self.replicas: dict[str, ReplicaInfo] = {}  # replicaInfoTable
        self.sync: dict[str, SyncInfo] = {}  # syncStateSetInfoTable

    def _contains(self, name) -> bool:  # isContainsBroker: in both tables
        return name in self.replicas and name in self.sync

    def apply(self, d: Decoded) -> Applied:
        e = d.event
        if e is None:
            if d.type == PROPOSAL or d.type in OTHER_ENTRY.values():
                return Applied()
            how = "EventSerializer cannot read it" if d.type_id in EVENT_TYPES and d.type_id != 4 else \
                "applyEvent of null"
            return _fails(f"RocketMQ's apply fails on this entry ({how})" + (f": {d.note}" if d.note else ""))
        name = e.broker_name
        if name is None:  # (every handler looks the set up in a ConcurrentHashMap: a null key throws)
            return _fails(f"{d.type} without brokerName: {NPE}")
        if isinstance(e, AlterSyncStateSet):  # handleAlterSyncStateSet
            if self._contains(name):  # (decode_event: an event without newSyncStateSet is none)
                self.sync[name].update_sync_state_set(e.new_sync_state_set)
                return Applied()
            return Applied(f"broker set {name} is not registered: ignored")
        if isinstance(e, ApplyBrokerId):  # handleApplyBrokerId
            if self._contains(name):
                if e.new_broker_id not in self.replicas[name].broker_ids:
                    self.replicas[name].add_broker(e.new_broker_id, e.broker_address, e.register_check_code)
                    return Applied()
                return Applied(f"broker id {e.new_broker_id} is already registered: ignored")
            info = ReplicaInfo(e.cluster_name)  # first time: the broker set's tables begin
            info.add_broker(e.new_broker_id, e.broker_address, e.register_check_code)
            self.replicas[name] = info
            self.sync[name] = SyncInfo(e.cluster_name)
            return Applied()
        if isinstance(e, UpdateBrokerAddress):  # handleUpdateBrokerAddress
            info = self.replicas.get(name)
            if info is None:
                return _fails(f"broker set {name} is not registered: {NPE}")
            if e.broker_id is not None and e.broker_id in info.broker_ids:
                info.broker_ids[e.broker_id] = (e.broker_address, info.broker_ids[e.broker_id][1])
                return Applied()
            return Applied(f"broker id {e.broker_id} is not registered: ignored")
        if isinstance(e, ElectMaster):  # handleElectMaster
            if not self._contains(name):
                return Applied(f"broker set {name} is not registered: ignored")
            sync = self.sync[name]
            if e.new_master_elected:
                sync.update_master(e.new_master_broker_id)
                sync.update_sync_state_set((e.new_master_broker_id,))
            else:  # the old master is gone and no replica could take over: the set is kept
                sync.update_master(None)
            return Applied()
        if isinstance(e, CleanBrokerData):  # handleCleanBrokerDataEvent
            ids = e.broker_id_set_to_clean
            if not ids:
                self.replicas.pop(name, None)
                self.sync.pop(name, None)
                return Applied()
            if not self._contains(name):
                return Applied(f"broker set {name} is not registered: ignored")
            if None in ids:  # (brokerIdInfo, a ConcurrentHashMap, removes a null key: it throws; a
                # HashSet iterates null first, so nothing was removed before)
                return _fails(f"a null id in brokerIdSetToClean: {NPE}")
            info, sync = self.replicas[name], self.sync[name]
            for i in ids:
                info.broker_ids.pop(i, None)
                sync.sync_state_set = sync.sync_state_set - {i}  # (removeFromSyncState: no epoch change)
            if not info.broker_ids:
                del self.replicas[name]
            if not sync.sync_state_set:
                del self.sync[name]
            return Applied()
        return Applied()

    def broker_rows(self) -> list[dict]:
        """Per broker set (sorted by name): what ``ReplicasInfoManager`` holds for it."""
        rows = []
        for name in sorted(set(self.replicas) | set(self.sync)):
            rows.append(self.broker_row(name))
        return rows

    def broker_row(self, name: str) -> dict:
        info, sync = self.replicas.get(name), self.sync.get(name)
        master = sync.master_broker_id if sync else None
        brokers = info.broker_ids if info else {}
        return {
            "broker_name": name,
            "cluster_name": (info or sync).cluster_name if (info or sync) else None,
            "master_broker_id": master,
            "master_address": brokers.get(master, (None, None))[0] if master is not None else None,
            "master_epoch": sync.master_epoch if sync else None,
            "sync_state_set": _ids(sync.sync_state_set) if sync else None,
            "sync_state_set_epoch": sync.sync_state_set_epoch if sync else None,
            "brokers": [{"broker_id": i, "address": a, "register_check_code": c}
                        for i, (a, c) in sorted(brokers.items())],
            "next_assign_broker_id": info.next_assign_broker_id if info else None,
        }


STATE_COLUMNS = ["broker_name", "cluster_name", "master_broker_id", "master_address", "master_epoch",
                 "sync_state_set", "sync_state_set_epoch", "brokers"]
HISTORY_COLUMNS = ["index", "term", "type", "master_broker_id", "master_address", "master_epoch", "sync_state_set",
                   "sync_state_set_epoch", "change", "note"]


@dataclass
class Replay:
    """The state after the entries up to ``at_index`` (all when None), or up to the entry
    RocketMQ's apply fails on (``stop``), and what was seen."""

    state: ControllerState
    first_index: int | None  # the first entry read (not 0: the head files are gone)
    last_index: int | None  # the last entry applied (or skipped as RocketMQ skips it)
    notes: list[tuple[int, str]]  # (index, note) where RocketMQ ignored an entry, and damaged data
    stop: tuple[int, int, str] | None = None  # (index, term, why): the controller applies nothing past it
    past: int = 0  # entries read past ``stop`` (through ``at_index``), none of them applied
    past_last: int | None = None  # the last of them

    @property
    def stop_text(self) -> str:
        """``stop`` and what lies past it, in one line ("" when the replay did not stop)."""
        if self.stop is None:
            return ""
        index, _, why = self.stop
        text = (f"index {index}: {why}; the controller stops at this entry (DLedger 0.3.1.2 applies nothing past "
                f"it and tries it again at every commit): this is its state before it")
        if self.past:
            text += (f"; {self.past} {'entry' if self.past == 1 else 'entries'} past it "
                     f"({'index ' + str(self.past_last) if self.past == 1 else f'index {index + 1}..{self.past_last}'})"
                     " never applied")
        return text


def replay(node_dir: str, at_index: int | None = None, *, history_of: str | None = None, history: list | None = None,
           **sizes) -> Replay:
    """Apply the log from its first entry through ``at_index``, as the controller does:
    up to the first entry RocketMQ's apply fails on, which ends the replay (``stop``; the
    entries past it are counted). With ``history_of``, every event naming that broker set
    appends a row to ``history`` (the state after it, and what changed)."""
    r = Replay(ControllerState(), None, None, [])
    for e in entries(node_dir, Selection(to_index=at_index), **sizes):
        if e.damage:
            r.notes.append((-1, f"damaged data at pos {e.pos}: {e.decoded.note}"))
            continue
        if r.stop is not None:
            r.past += 1
            r.past_last = e.index
            continue
        r.first_index = e.index if r.first_index is None else r.first_index
        d = e.decoded
        before = r.state.broker_row(history_of) if history_of is not None else None
        note, fails = r.state.apply(d)
        if fails:
            r.stop = (e.index, e.term, note)
        else:
            r.last_index = e.index
            if note:
                r.notes.append((e.index, note))
        if history_of is not None and history is not None and d.event is not None and \
                d.event.broker_name == history_of:
            after = r.state.broker_row(history_of)
            history.append({"index": e.index, "term": e.term, "type": d.type,
                            **{k: after[k] for k in HISTORY_COLUMNS if k in after and k not in ("type",)},
                            "change": _change(before, after) if not fails else "none: the controller stops here",
                            "note": note})
    return r


def _change(before: dict, after: dict) -> str:
    if (before["master_epoch"] is None) != (after["master_epoch"] is None) or \
            (not before["brokers"]) != (not after["brokers"]):
        return "broker set removed" if after["master_epoch"] is None and not after["brokers"] else \
            "broker set registered: brokers " + ", ".join(str(b["broker_id"]) for b in after["brokers"])
    parts = []
    if before["master_broker_id"] != after["master_broker_id"] or before["master_epoch"] != after["master_epoch"]:
        parts.append(f"master {_id(before['master_broker_id'])} -> {_id(after['master_broker_id'])}")
    if before["sync_state_set"] != after["sync_state_set"] or \
            before["sync_state_set_epoch"] != after["sync_state_set_epoch"]:
        parts.append(f"syncStateSet {before['sync_state_set'] or []} -> {after['sync_state_set'] or []}")
    if before["brokers"] != after["brokers"]:
        parts.append("brokers " + ", ".join(str(b["broker_id"]) for b in after["brokers"]))
    return "; ".join(parts) or "none"


def _ids(ids) -> list:
    """A set of broker ids, sorted; a null one (an event can hold it, Java's HashSet keeps
    it) last."""
    return sorted(i for i in ids if i is not None) + ([None] if None in ids else [])


def _id(v) -> str:
    return "none" if v is None else str(v)
