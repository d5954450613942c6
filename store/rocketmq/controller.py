"""The RocketMQ 5 controller's log: its entries read as events (the state that replaying
them gives: controller_state.py).

In controller mode (RocketMQ >= 5) the DLedger controller (``DLedgerController``) is a
DLedger 0.3.1.2 group; each entry's body is empty (the proposal a new leader appends in its
role-change handler) or ONE event as ``EventSerializer`` writes it: the event type id as a
big-endian i16, then the event as fastjson JSON (``FastJsonSerializer``: the getters'
properties, null ones left out, ``eventType`` as the enum's name).

Facts from apache/rocketmq, tag rocketmq-all-5.3.3, controller/src/main/java/org/apache/
rocketmq/controller/impl/:

- ``event/EventType``: 1 ALTER_SYNC_STATE_SET_EVENT, 2 APPLY_BROKER_ID_EVENT,
  3 ELECT_MASTER_EVENT, 4 READ_EVENT, 5 CLEAN_BROKER_DATA_EVENT, 6 UPDATE_BROKER_ADDRESS;
- ``event/EventSerializer.deserialize``: fewer than 2 bytes, an id <= 0, an unknown id or
  READ_EVENT give null, which ``DLedgerControllerStateMachine.onApply`` hands to
  ``ReplicasInfoManager.applyEvent`` (a NullPointerException there); JSON fastjson does not
  read as the event throws. Either way the entry's apply fails;
- an AlterSyncStateSetEvent without ``newSyncStateSet`` does not deserialize (its
  constructor copies the set: checked in tests/java/test_controller_hostile_java.py);
- what applying the events gives (``ReplicasInfoManager``), and where the controller
  stops: controller_state.py.

The controller keeps no snapshot (``onSnapshotSave`` does nothing): its state exists only
by replaying from index 0. Event JSON is read by jsonread.py (bounded: depth, integer
digits), then converted to the event's type. Pure: no files are opened here except through
the store's scan.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from typing import Annotated, Iterator, Optional

import msgspec

from ..errors import NotAStoreError
from ..format import ENTRY_HEADER, HEADER_SIZE, MAGIC_CONFIG, MAGIC_NOOP, MAGIC_NORMAL, body_crc
from ..layout import DATA_DIR
from ..reading import Selection, render_body
from .jsonread import JsonError, loads
from .message import NotAMessage
from .message import decode as decode_message
from .scan import batches

EVENT_TYPE_SIZE = 2  # EventSerializer.putShort: the type id as a big-endian short before the JSON


Long = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]  # java.lang.Long: fastjson fails past it


class _Event(msgspec.Struct, rename="camel", forbid_unknown_fields=False):
    """Fields default as a missing JSON property leaves them in Java (null, 0, false)."""

    broker_name: Optional[str] = None


class AlterSyncStateSet(_Event):  # event/AlterSyncStateSetEvent
    new_sync_state_set: Optional[list[Optional[Long]]] = None  # (a Set<Long>: a null in it is kept)


class ApplyBrokerId(_Event):  # event/ApplyBrokerIdEvent
    cluster_name: Optional[str] = None
    broker_address: Optional[str] = None
    new_broker_id: Long = 0  # (a primitive long)
    register_check_code: Optional[str] = None


class ElectMaster(_Event):  # event/ElectMasterEvent
    new_master_elected: bool = False  # (a primitive boolean)
    new_master_broker_id: Optional[Long] = None  # (absent when none was elected)


class CleanBrokerData(_Event):  # event/CleanBrokerDataEvent
    broker_id_set_to_clean: Optional[list[Optional[Long]]] = None  # (null or empty: the whole broker set)


class UpdateBrokerAddress(_Event):  # event/UpdateBrokerAddressEvent
    cluster_name: Optional[str] = None
    broker_address: Optional[str] = None
    broker_id: Optional[Long] = None


# EventType: id -> (enum name, getName(), event class; None for READ_EVENT, which is never logged)
EVENT_TYPES: dict[int, tuple[str, str, type | None]] = {
    1: ("ALTER_SYNC_STATE_SET_EVENT", "AlterSyncStateSetEvent", AlterSyncStateSet),
    2: ("APPLY_BROKER_ID_EVENT", "ApplyBrokerIdEvent", ApplyBrokerId),
    3: ("ELECT_MASTER_EVENT", "ElectMasterEvent", ElectMaster),
    4: ("READ_EVENT", "ReadEvent", None),
    5: ("CLEAN_BROKER_DATA_EVENT", "CleanBrokerDataEvent", CleanBrokerData),
    6: ("UPDATE_BROKER_ADDRESS", "UpdateBrokerAddressEvent", UpdateBrokerAddress),
}
_json = msgspec.json.Encoder()

# what a row's ``type`` says for an entry that is no event
PROPOSAL = "leader-proposal"
NOT_AN_EVENT = "not-an-event"
OTHER_ENTRY = {MAGIC_NOOP: "no-op", MAGIC_CONFIG: "config"}
MESSAGE_NOTE = "a RocketMQ message (what a broker's DLedger commit log holds), not an event"


def type_names(tid: int) -> tuple[str, ...]:
    """The names ``--type`` accepts for a type id (case-insensitively): the id, the enum's
    name, ``getName()`` and that without ``Event``."""
    enum, name, _ = EVENT_TYPES[tid]
    return (str(tid), enum.lower(), name.lower(), name.lower().removesuffix("event"))


def parse_type(text: str) -> int:
    """The type id a ``--type`` value names; ValueError when none."""
    want = text.strip().lower().replace("-", "_")
    for tid in EVENT_TYPES:
        if want in type_names(tid) or want.replace("_", "") in type_names(tid):
            return tid
    # (the names as the docs and --help give them first: elect-master, as ElectMasterEvent is meant)
    raise ValueError(f"{text!r} is no controller event type (one of: "
                     + ", ".join(enum.lower().removesuffix("_event").replace("_", "-") for enum, _, _ in
                                 EVENT_TYPES.values())
                     + "; or their class names, such as ElectMasterEvent, enum names, such as ELECT_MASTER_EVENT, "
                       "or ids 1-6)")


@dataclass
class Decoded:
    """One entry's body: ``event`` when it is one, else ``note`` says what it is instead."""

    type_id: int | None
    type: str  # the event's getName(), PROPOSAL or NOT_AN_EVENT
    event: _Event | None = None
    note: str = ""


def decode_event(body: bytes | memoryview) -> Decoded:
    """An entry body as ``EventSerializer.deserialize`` reads it. Never raises, whatever the
    bytes (jsonread bounds the JSON's depth and integers)."""
    body = bytes(body)
    if not body:
        return Decoded(None, PROPOSAL, note="empty body: the proposal a new leader appends")
    if len(body) < EVENT_TYPE_SIZE:
        return Decoded(None, NOT_AN_EVENT, note=f"{len(body)}-byte body: shorter than an event type id")
    tid = int.from_bytes(body[:EVENT_TYPE_SIZE], "big", signed=True)
    known = EVENT_TYPES.get(tid)
    if known is None:
        try:
            decode_message(body, 0, len(body))
            return Decoded(tid, NOT_AN_EVENT, note=MESSAGE_NOTE)
        except NotAMessage:
            pass
        return Decoded(tid, NOT_AN_EVENT, note=f"unknown event type id {tid}")
    if known[2] is None:
        return Decoded(tid, known[1], note="a read event, which is never applied (RocketMQ cannot deserialize it)")
    try:
        doc = loads(body[EVENT_TYPE_SIZE:])
        if not isinstance(doc, dict):
            raise JsonError(f"a JSON {type(doc).__name__.replace('dict', 'object')}, not an object")
        event = msgspec.convert(doc, known[2])
        if isinstance(event, AlterSyncStateSet) and event.new_sync_state_set is None:
            # (its constructor copies the set: fastjson's deserialization throws, whatever the broker set)
            raise JsonError("no newSyncStateSet, which AlterSyncStateSetEvent's constructor copies")
    except (JsonError, msgspec.ValidationError) as exc:
        return Decoded(tid, NOT_AN_EVENT, note=f"type {tid} ({known[1]}) with a body that is no such event: {exc}")
    return Decoded(tid, known[1], event)


def event_fields(event: _Event | None) -> dict:
    """The event's properties under their Java names (null ones left out, as fastjson does)."""
    if event is None:
        return {}
    return {k: v for k, v in msgspec.to_builtins(event).items() if v is not None}


@dataclass
class EventFilter:
    broker: str | None = None
    types: frozenset[int] = frozenset()  # empty: any

    def wants(self, d: Decoded) -> bool:
        if self.types and d.type_id not in self.types:
            return False
        if self.broker is not None and (d.event is None or d.event.broker_name != self.broker):
            return False
        return True

    @property
    def any(self) -> bool:
        return self.broker is not None or bool(self.types)


@dataclass
class Entry:
    """An entry of the controller's log, decoded (``damage``: where a data file is damaged)."""

    index: int
    term: int
    pos: int
    decoded: Decoded
    damage: str = ""


def entry_event(magic: int, body) -> Decoded:
    """A DLedger entry (its magic and body) as the controller reads it."""
    if magic != MAGIC_NORMAL:
        return Decoded(None, OTHER_ENTRY.get(magic, f"magic-{magic}"), note=f"DLedger entry of magic {magic}, not an "
                       "event")
    return decode_event(body)


def event_columns(d: Decoded) -> dict:
    """An entry's event as a row's columns (``fields``: all but brokerName)."""
    fields = event_fields(d.event)
    fields.pop("brokerName", None)
    return {"type": d.type, "type_id": d.type_id, "broker_name": d.event.broker_name if d.event is not None else None,
            "fields": fields, "note": d.note}


def entries(node_dir: str, sel: Selection | None = None, *, data_file_size: int | None = None,
            index_file_size: int | None = None) -> Iterator[Entry]:
    """Every entry ``sel`` asks for, in log order, through the store's own scan."""
    for b in batches(node_dir, sel, data_file_size=data_file_size, index_file_size=index_file_size):
        if b.damage:
            yield Entry(-1, -1, b.at, Decoded(None, "damage", note=f"{b.file}: {b.damage}"), damage=b.damage)
            continue
        for magic, idx, term, pos, bsize in zip(b.magic.tolist(), b.index.tolist(), b.term.tolist(), b.pos.tolist(),
                                                b.bsize.tolist()):
            rel = pos - b.start + HEADER_SIZE
            body = b.buf[rel:rel + bsize]
            *_, chain, bcrc, _ = ENTRY_HEADER.unpack_from(b.buf, rel - HEADER_SIZE)
            if (bcrc or chain) and body_crc(body) != bcrc:  # (0 and 0: not recorded, as DLedger writes)
                yield Entry(idx, term, pos, Decoded(None, NOT_AN_EVENT, note=f"body CRC {body_crc(body)} is not the "
                                                    f"{bcrc} its header records: the entry is damaged"))
                continue
            yield Entry(idx, term, pos, entry_event(magic, body))


SAMPLE = 64  # entries with a body read to tell a controller's log from another


def looks_like_controller_log(node_dir: str, **sizes) -> tuple[bool, str]:
    """Is the log at ``node_dir`` a RocketMQ 5 controller's, by its entries? (True, "") when
    it has no entry with a body yet or one of its first SAMPLE entries with a body is an
    event; else (False, what it is instead): no data/, data files that hold no DLedger entry
    at their start, or entries none of which is an event (garbage; RocketMQ messages: a
    broker's DLedger commit log). Reads at most SAMPLE entries, through the controller's
    own decoder. What kind of directory a path is (a broker's store root, say) is
    store/kinds.py's question, asked before this one."""
    if not os.path.isdir(os.path.join(node_dir, DATA_DIR)):
        return False, "no data/ directory: no DLedger log"
    seen = messages = 0
    for e in entries(node_dir, None, **sizes):
        if e.damage:
            if seen == 0:  # (damage past a stretch of entries is a damaged log, not another kind of file)
                return False, f"its data files hold no DLedger entry at their start ({e.decoded.note})"
            continue
        d = e.decoded
        if d.event is not None or d.type_id is not None and d.type_id in EVENT_TYPES and d.type != NOT_AN_EVENT:
            return True, ""
        if d.type == NOT_AN_EVENT or d.type in OTHER_ENTRY.values():
            seen += 1
            messages += d.note == MESSAGE_NOTE
            if seen >= SAMPLE:
                break
    if seen == 0:
        return True, ""  # (no entry with a body: an empty log, or only leaders' proposals)
    what = (f"{'all' if seen < SAMPLE else 'the first'} {seen} of its entries with a body "
            f"{'is' if seen == 1 else 'are'} no controller event")
    if messages:
        what += f" ({messages} of them RocketMQ messages: a broker's DLedger commit log, which the mq commands read)"
    return False, what


class NotAControllerLog(NotAStoreError):
    """The log given is no RocketMQ controller's (the text says what it is instead)."""


def require_controller_log(node_dir: str, **sizes) -> None:
    """NotAControllerLog unless :func:`looks_like_controller_log`."""
    ok, why = looks_like_controller_log(node_dir, **sizes)
    if not ok:
        raise NotAControllerLog(f"{node_dir}: not a RocketMQ controller's log: {why}")


EVENT_COLUMNS = ["index", "term", "type", "broker_name", "fields", "note"]
DECODED_COLUMNS = ["type", "broker_name", "fields"]  # what --decode rocketmq-controller adds to an entry's row


def fields_text(fields: dict) -> str:
    """An event's fields as one JSON object (for a table or csv cell)."""
    return _json.encode(fields).decode("utf-8") if fields else ""


def decoded_columns(magic: int, body, *, text: bool) -> dict:
    """``get`` / ``store inspect-data --decode rocketmq-controller``: the columns an entry's
    row gains (``event_note`` says what an entry that is no event is instead)."""
    cols = event_columns(entry_event(magic, body))
    cols["event_note"] = cols.pop("note")
    if text:
        cols["fields"] = fields_text(cols["fields"])
    return cols


def with_events(rows: Iterator[dict], body: str, *, text: bool) -> Iterator[dict]:
    """``store inspect-data`` rows read with base64 bodies, each entry's with its event's
    columns, the body then shown as ``body`` asks (none: dropped)."""
    for row in rows:
        raw = base64.b64decode(row.pop("body", None) or "")
        if row["kind"] == "entry":
            row.update(decoded_columns(row["magic"], raw, text=text))
        if body != "none":
            row["body"] = render_body(raw, body) if row["kind"] == "entry" else None
        yield row


def event_rows(node_dir: str, sel: Selection | None = None, flt: EventFilter | None = None, **sizes) -> Iterator[dict]:
    """``controller events``: one row per entry (with a filter: per event it wants)."""
    flt = flt or EventFilter()
    for e in entries(node_dir, sel, **sizes):
        if flt.any and not flt.wants(e.decoded):
            continue
        yield {"index": e.index if not e.damage else None, "term": e.term if not e.damage else None, "pos": e.pos,
               **event_columns(e.decoded)}
