"""Every message of a node directory, read through the store's own entry scan.

The entries come from store/scan.py's FileScan (its run lane where the index file agrees,
so healthy stretches cost no per-entry Python), the messages from message.py's decoder:
no second parser of either. Damage in the data files ends a file's scan as it ends
``store inspect-data``'s, and is yielded as such; entries that are not messages (a no-op,
a config entry, another kind of body) are yielded as what they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ..format import HEADER_SIZE, MAGIC_CONFIG, MAGIC_NOOP, MAGIC_NORMAL
from ..inspect import Selection, open_lists, start_file
from ..layout import NodeLayout
from ..scan import FileScan, Run
from .message import MESSAGE_MAGIC_CODE, Message, NotAMessage, body_crc, body_of, compression_of, decode

KINDS = {MAGIC_NORMAL: "message", MAGIC_NOOP: "no-op", MAGIC_CONFIG: "config"}


@dataclass(slots=True)
class Item:
    """One entry: ``message`` when its body decoded, else ``note`` says what it is."""

    kind: str  # message | no-op | config | not-a-message | damage
    index: int
    term: int
    pos: int  # the entry's logical offset
    size: int  # the entry's size
    file: str  # data/<name>
    buf: object  # the data file's bytes (the message's offsets are within it)
    message: Message | None = None
    note: str = ""


def items(node_dir: str, sel: Selection | None = None, *, data_file_size: int | None = None,
          index_file_size: int | None = None) -> Iterator[Item]:
    """The entries ``sel`` asks for, in log order, each decoded as a message when it is a
    normal entry. The buffers are the data files' maps: use an item before the next one
    is asked for (they are closed when the walk ends)."""
    sel = sel or Selection()
    data, index = open_lists(NodeLayout(node_dir), data_file_size, index_file_size)
    try:
        first = start_file(data, index, sel)
        prev = (None, None, None)
        for f in data.files[first:]:
            fname = f"data/{f.name}"
            buf = f.mm
            scan = FileScan(f.view(), f.start, file_size=data.file_size, prev_index=prev[0], prev_term=prev[1],
                            prev_chain=prev[2], check_crc=False, run_headers=True)
            done = False
            for got in scan.walk(index):
                if type(got) is Run:
                    h = got.headers
                    rows = zip(h["magic"].tolist(), h["size"].tolist(), h["index"].tolist(), h["term"].tolist(),
                               h["pos"].tolist(), h["bsize"].tolist())
                else:
                    if got.kind != "entry":
                        continue
                    rows = ((got.magic, got.size, got.index, got.term, got.offset, got.body_size),)
                for magic, size, idx, term, pos, bsize in rows:
                    if sel.past(idx, pos):
                        done = True
                        break
                    if not sel.wants(idx, pos):
                        continue
                    yield _item(buf, fname, f.start, magic, size, idx, term, pos, bsize)
                if done:
                    break
            prev = (scan.prev_index, scan.prev_term, scan.prev_chain)
            if done:
                return
            stop = scan.stop
            if stop is not None and not stop.clean:
                yield Item("damage", -1, -1, stop.offset, 0, fname, buf, None, f"{stop.reason}: {stop.detail}")
                prev = (None, None, None)
    finally:
        data.close()
        index.close()


def _item(buf, fname: str, fstart: int, magic: int, size: int, idx: int, term: int, pos: int, bsize: int) -> Item:
    kind = KINDS.get(magic, "not-a-message")
    if kind != "message":
        return Item(kind, idx, term, pos, size, fname, buf, None, f"DLedger entry of magic {magic}")
    try:
        m = decode(buf, pos - fstart + HEADER_SIZE, bsize)
    except NotAMessage as exc:
        return Item("not-a-message", idx, term, pos, size, fname, buf, None, str(exc))
    return Item("message", idx, term, pos, size, fname, buf, m)


@dataclass
class Filter:
    """Which messages ``mq messages`` lists (None: any). Times are store times in ms."""

    topic: str | None = None
    queue_id: int | None = None
    tag: str | None = None
    key: str | None = None
    msg_id: str | None = None
    uniq_key: str | None = None
    since: int | None = None
    until: int | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.topic, self.queue_id, self.tag, self.key, self.msg_id, self.uniq_key,
                                           self.since, self.until))

    def wants(self, m: Message) -> bool:
        return ((self.topic is None or m.topic == self.topic)
                and (self.queue_id is None or m.queue_id == self.queue_id)
                and (self.tag is None or m.tags == self.tag)
                and (self.key is None or self.key in (m.keys or "").split())
                and (self.msg_id is None or m.msg_id == self.msg_id.upper())
                and (self.uniq_key is None or m.uniq_key == self.uniq_key)
                and (self.since is None or m.store_timestamp >= self.since)
                and (self.until is None or m.store_timestamp <= self.until))


def msg_id_pos(msg_id: str) -> int:
    """The entry pos a message id names (its commit-log offset - 48); ValueError if it is
    not a message id (32 hex digits for an IPv4 store host, 56 for IPv6)."""
    if len(msg_id) not in (32, 56) or not all(c in "0123456789abcdefABCDEF" for c in msg_id):
        raise ValueError(f"{msg_id!r} is not a message id (32 or 56 hex digits)")
    return int(msg_id[-16:], 16) - HEADER_SIZE


MESSAGE_FIELDS = ["kind", "index", "pos", "phy_offset", "msg_id", "topic", "queue_id", "queue_offset", "sys_flag",
                  "flag", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
                  "prepared_tx_offset", "body_size", "body_crc_ok", "tags", "keys", "uniq_key", "properties", "note"]


def message_rows(node_dir: str, sel: Selection | None = None, flt: Filter | None = None, *, body=None,
                 data_file_size: int | None = None, index_file_size: int | None = None) -> Iterator[dict]:
    """``mq messages``: a row per entry (MESSAGE_FIELDS, and ``body`` rendered by
    ``body(bytes)`` when given: uncompressed). With a filter, messages that match only."""
    flt = flt or Filter()
    sel = sel or Selection()
    if flt.msg_id is not None and sel.pos is None:
        sel = Selection(sel.index, sel.from_index, sel.to_index, msg_id_pos(flt.msg_id))
    for it in items(node_dir, sel, data_file_size=data_file_size, index_file_size=index_file_size):
        m = it.message
        if m is None:
            if flt.any:
                continue
            row = dict.fromkeys(MESSAGE_FIELDS)
            row.update(kind=it.kind, index=None if it.index < 0 else it.index, pos=it.pos, note=it.note)
            if body is not None:
                row["body"] = None
            yield row
            continue
        if not flt.wants(m):
            continue
        raw = it.buf[m.body_at:m.body_at + m.body_size]
        note = ""
        if m.magic != MESSAGE_MAGIC_CODE:
            note = "RocketMQ 5 (V2) message"
        compressed = compression_of(m.sys_flag)
        if compressed:
            note = f"{note}; " if note else ""
            note += f"body {compressed}-compressed ({m.body_size} bytes stored)"
        row = {"kind": "message", "index": it.index, "pos": it.pos, "phy_offset": m.phy_offset, "msg_id": m.msg_id,
               "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset, "sys_flag": m.sys_flag,
               "flag": m.flag, "born_timestamp": m.born_timestamp, "born_host": m.born_host,
               "store_timestamp": m.store_timestamp, "store_host": m.store_host,
               "reconsume_times": m.reconsume_times, "prepared_tx_offset": m.prepared_tx_offset,
               "body_size": m.body_size, "body_crc_ok": body_crc(raw) == m.body_crc, "tags": m.tags, "keys": m.keys,
               "uniq_key": m.uniq_key, "properties": m.properties, "note": note}
        if body is not None:
            try:
                row["body"] = body(body_of(it.buf, m))
            except NotAMessage as exc:
                row["body"], row["note"] = None, f"{note}; {exc}" if note else str(exc)
        yield row
