"""Every message of a node directory, read through the store's own entry scan.

The entries come from store/scan.py's FileScan (its run lane where the index file agrees,
so healthy stretches cost no per-entry Python), the messages from message.py's decoder:
no second parser of either. Damage in the data files ends a file's scan as it ends
``store inspect-data``'s, and is yielded as such; entries that are not messages (a no-op,
a config entry, another kind of body) are yielded as what they are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np

from ..format import HEADER_SIZE, MAGIC_CONFIG, MAGIC_NOOP, MAGIC_NORMAL
from ..reading import Selection, open_lists, start_file
from ..scan import FileScan, Run
from . import commitlog, divided
from .columns import body_crcs
from .entries import Batch, Item
from .lookup import IndexFile, NotFound, open_index, queue_unit
from .message import (MAX_MESSAGE_SIZE, MESSAGE_MAGIC_CODE, Message, NotAMessage, body_crc, body_of, compression_of,
                      decode)

KINDS = {MAGIC_NORMAL: "message", MAGIC_NOOP: "no-op", MAGIC_CONFIG: "config"}


def batches(node_dir: str, sel: Selection | None = None, *, data_file_size: int | None = None,
            index_file_size: int | None = None) -> Iterator[Batch]:
    """The entries ``sel`` asks for, in log order, a healthy stretch at a time (the scan's
    run lane; entries the per-entry lane yields come in batches of their own). The buffers
    are the data files' maps: use a batch before the next one is asked for.

    The one place that decides which log a store has: a master-slave ``commitlog/``
    (commitlog.batches), a DLedger node directory, or a DLedger node directory whose log
    follows an old commit log in its store root (divided.py): then the old log's messages
    first (``index`` -1: no DLedger entry), then the DLedger log's; ``sel.pos`` reads from
    the one log RocketMQ reads that offset from."""
    sel = sel or Selection()
    if _is_commit_log(node_dir):
        yield from _commit_log(node_dir, sel)
        return
    old = divided.old_log_dir(node_dir)
    lo = sel.lower()
    if old is not None and (lo is None or lo <= divided.NO_INDEX):  # (an index selection wants entries only)
        split = divided.divided_offset(node_dir)
        if sel.pos is None or divided.in_old_log(sel.pos + HEADER_SIZE, split):
            done = yield from _old_log(old, sel, split)
            if done or split is None or sel.pos is not None:
                return
    yield from _dledger_log(node_dir, sel, data_file_size, index_file_size)


def _dledger_log(node_dir: str, sel: Selection, data_file_size: int | None,
                 index_file_size: int | None) -> Iterator[Batch]:
    data, index = open_lists(node_dir, data_file_size, index_file_size)
    try:
        first = start_file(data, index, sel)
        prev = (None, None, None)
        before = None  # the data file read before this one
        for f in data.files[first:]:
            fname = f"data/{f.name}"
            buf = f.mm
            if before is not None and f.start > before.start + data.file_size:
                yield _gap(data, before, f, prev[0])
                prev = (None, None, None)  # (nothing to continue across it)
            before = f
            scan = FileScan(f.view(), f.start, file_size=data.file_size, prev_index=prev[0], prev_term=prev[1],
                            prev_chain=prev[2], check_crc=False, run_headers=True)
            done = False
            singles: list = []
            for got in scan.walk(index):
                if type(got) is not Run:
                    if got.kind == "entry":
                        singles.append((got.magic, got.size, got.index, got.term, got.offset, got.body_size,
                                        got.body_crc, got.chain_crc))
                    if len(singles) < 4096:
                        continue
                pending = [_batch(fname, f.start, buf, np.array(singles, _SINGLE))] if singles else []
                singles = []
                if type(got) is Run:
                    pending.append(_batch(fname, f.start, buf, got.headers))
                for b in pending:
                    b, done = _select(b, sel)
                    if len(b):
                        yield b
                    if done:
                        break
                if done:
                    break
            if singles and not done:
                b, done = _select(_batch(fname, f.start, buf, np.array(singles, _SINGLE)), sel)
                if len(b):
                    yield b
            prev = (scan.prev_index, scan.prev_term, scan.prev_chain)
            if done:
                return
            stop = scan.stop
            if stop is not None and not stop.clean:
                yield Batch(fname, f.start, buf, damage=f"{stop.reason}: {stop.detail}", at=stop.offset)
                prev = (None, None, None)
    finally:
        data.close()
        index.close()


def _gap(data, before, f, last_index: int | None) -> Batch:
    """The damage batch of the data files missing between ``before`` and ``f`` (as ``store
    verify`` says: "leaves a gap"): whatever entries they held are not in the log."""
    expect = before.start + data.file_size
    n = (f.start - expect) // data.file_size
    missing = f"data/{expect:020d}" + (f" and {n - 1} more data files" if n > 1 else "")
    after = f" after entry {last_index}" if last_index is not None else ""
    return Batch(f"data/{f.name}", f.start, f.mm, damage=f"gap: {missing} missing between data/{before.name} and "
                                                          f"data/{f.name}: the log's entries{after} up to this file's "
                                                          f"first are not there ('store verify' says: leaves a gap)",
                 at=f.start)


def _is_commit_log(node_dir: str) -> bool:
    return os.path.basename(os.path.normpath(node_dir)) == commitlog.COMMIT_LOG_DIR and \
        not os.path.isdir(os.path.join(node_dir, "data"))


def _lowest_pos(node_dir: str) -> int:
    """The lowest ``pos`` an entry can have: 0 in a DLedger log, -48 in a commit log or a
    DLedger log that follows one (its first message, at offset 0, stands as an entry at
    0 - 48)."""
    return -HEADER_SIZE if _is_commit_log(node_dir) or divided.old_log_dir(node_dir) else 0


def _commit_log(log_dir: str, sel: Selection) -> Iterator[Batch]:
    """A master-slave broker's commit log as batches (commitlog.batches: ``index`` the
    message's ordinal, ``pos`` its offset - 48), ``sel`` applied. The message at a ``pos``
    (and no index asked for) is read at its offset, as the broker reads one by its offset
    or msgId, not found by a walk from the first file; its ordinal is then not known (-1)."""
    by_offset = sel.pos is not None and sel.lower() is None and sel.upper() is None
    if commitlog.is_empty_log(log_dir):
        return  # (a store with no message yet: RocketMQ creates the first file at the first put)
    for b in commitlog.batches(log_dir, at=sel.pos + HEADER_SIZE if by_offset else None):
        if b.damage:
            yield b
            return
        b, done = _select(b, sel)
        if len(b):
            yield b
        if done:
            return


def _old_log(log_dir: str, sel: Selection, split: int | None):
    """The old commit log's messages before a DLedger log that starts at ``split`` (None:
    it has no file yet), ``sel`` applied, each with ``index`` -1; whether the walk is past
    what ``sel`` wants. Damage ends the old log only (the DLedger log is read on: RocketMQ
    keeps the two apart). A message at or past ``split`` is one RocketMQ never reads (it
    reads those offsets from the DLedger log): the old log ends there, as damage."""
    for b in commitlog.batches(log_dir, at=None if sel.pos is None else sel.pos + HEADER_SIZE):
        if b.damage:
            yield b
            return False
        b.index = np.full(len(b), divided.NO_INDEX, np.int64)
        shadowed = np.flatnonzero(b.pos + HEADER_SIZE >= split) if split is not None else []
        if len(shadowed):
            at = int(b.pos[shadowed[0]])
            b = _take(b, np.arange(len(b)) < shadowed[0])
        b, done = _select(b, sel)
        if len(b):
            yield b
        if done:
            return True
        if len(shadowed):
            yield Batch(b.file, b.start, b.buf, damage=f"old commit-log damage: a message at offset {at + HEADER_SIZE}, "
                                                       f"where the DLedger log begins ({split}) or past it (RocketMQ "
                                                       f"reads those offsets from the DLedger log)",
                        at=at, shift=HEADER_SIZE)
            return False
    return False


_SINGLE = np.dtype([("magic", np.int64), ("size", np.int64), ("index", np.int64), ("term", np.int64),
                    ("pos", np.int64), ("bsize", np.int64), ("bcrc", np.int64), ("chain", np.int64)])


def _batch(fname: str, fstart: int, buf, h) -> Batch:
    return Batch(fname, fstart, buf, np.asarray(h["magic"], np.int64), np.asarray(h["size"], np.int64),
                 np.asarray(h["index"], np.int64), np.asarray(h["term"], np.int64), np.asarray(h["pos"], np.int64),
                 np.asarray(h["bsize"], np.int64), bcrc=np.asarray(h["bcrc"], np.int64),
                 chain=np.asarray(h["chain"], np.int64))


def _select(b: Batch, sel: Selection) -> tuple[Batch, bool]:
    """The entries of ``b`` that ``sel`` wants, and whether the walk is past them all."""
    lo, hi = sel.lower(), sel.upper()
    keep = np.ones(len(b), bool)
    done = False
    if lo is not None:
        keep &= b.index >= lo
    if hi is not None:
        keep &= b.index <= hi
        done = bool(len(b) and b.index[-1] > hi)
    if sel.pos is not None:
        keep &= b.pos == sel.pos
        done = done or bool(len(b) and b.pos[-1] > sel.pos)
    return (b if keep.all() else _take(b, keep)), done


def _take(b: Batch, keep: np.ndarray) -> Batch:
    return b.take(keep)


def crc_damaged(b: Batch, rows: np.ndarray | None = None) -> np.ndarray:
    """Per entry of ``b`` (those ``rows`` selects, when given), whether the DLedger entry holds
    a bodyCrc (bodyCrc or chainCrc not 0: DLedger 0.2.7 and Java write both 0, none recorded)
    that its body does not match: its bytes changed since it was written, what ``store
    verify`` reports as bad-body-crc. A commit log's entries have none. Compiled (columns.body_crcs)."""
    n = len(b) if rows is None else len(rows)
    out = np.zeros(n, bool)
    if b.bcrc is None or not n:
        return out
    bcrc, chain = (b.bcrc, b.chain) if rows is None else (b.bcrc[rows], b.chain[rows])
    k = np.flatnonzero((bcrc != 0) | (chain != 0))
    if len(k):
        at = (b.pos if rows is None else b.pos[rows])[k] - b.start + HEADER_SIZE
        got = body_crcs(b.buf, at, (b.bsize if rows is None else b.bsize[rows])[k])
        out[k] = got.astype(np.int64) != bcrc[k]
    return out


def crc_note(b: Batch, k: int) -> str:
    """What is wrong with entry ``k`` of ``b`` (one :func:`crc_damaged` marks)."""
    got = int(body_crcs(b.buf, b.pos[k:k + 1] - b.start + HEADER_SIZE, b.bsize[k:k + 1])[0])
    return (f"entry {int(b.index[k])}'s DLedger bodyCrc {int(b.bcrc[k])} does not match its body (crc32 {got}): "
            f"its bytes changed since the entry was written (a message's properties are not under its BODYCRC)")


def items(node_dir: str, sel: Selection | None = None, *, data_file_size: int | None = None,
          index_file_size: int | None = None) -> Iterator[Item]:
    """The entries ``sel`` asks for, in log order, each decoded as a message when it is a
    normal entry (the same walk as :func:`batches`, an object per entry)."""
    return _items_of(batches(node_dir, sel, data_file_size=data_file_size, index_file_size=index_file_size))


def _items_of(bs: Iterator[Batch]) -> Iterator[Item]:
    for b in bs:
        if b.damage:
            yield Item("damage", -1, -1, b.at, 0, b.file, b.buf, None, b.damage)
            continue
        bad = crc_damaged(b)
        for k, (magic, size, idx, term, pos, bsize) in enumerate(zip(b.magic.tolist(), b.size.tolist(),
                                                                     b.index.tolist(), b.term.tolist(),
                                                                     b.pos.tolist(), b.bsize.tolist())):
            it = entry_item(b.buf, b.file, b.start, magic, size, idx, term, pos, bsize)
            if bad[k]:
                it.crc_note = crc_note(b, k)
            yield it


def entry_item(buf, fname: str, fstart: int, magic: int, size: int, idx: int, term: int, pos: int, bsize: int) -> Item:
    """The entry at logical ``pos`` of the data file ``fname`` (starting at ``fstart``; its
    bytes ``buf``), decoded as a message when it is a normal entry."""
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
    """Which messages ``mq messages`` lists (empty or None: any). Several topics or keys:
    any of them; ``tags``: the set a consumer's tag expression names (:func:`tag_set`).
    Times are store times in ms. ``msg_id``: RocketMQ's offset message id or, when no
    message has that one, the producer's UNIQ_KEY (see :func:`message_rows`)."""

    topics: tuple[str, ...] = ()
    queue_id: int | None = None
    tags: frozenset[str] | None = None
    keys: tuple[str, ...] = ()
    msg_id: str | None = None
    uniq_key: str | None = None
    since: int | None = None
    until: int | None = None

    @property
    def any(self) -> bool:
        return bool(self.topics or self.keys) or any(
            v is not None for v in (self.queue_id, self.tags, self.msg_id, self.uniq_key, self.since, self.until))

    def wants(self, m: Message) -> bool:
        return ((not self.topics or m.topic in self.topics)
                and (self.queue_id is None or m.queue_id == self.queue_id)
                and (self.tags is None or m.tags in self.tags)
                and (not self.keys or _has_key(m.keys, self.keys))
                and (self.msg_id is None or m.msg_id == self.msg_id.upper())
                and (self.uniq_key is None or m.uniq_key == self.uniq_key)
                and (self.since is None or m.store_timestamp >= self.since)
                and (self.until is None or m.store_timestamp <= self.until))


def _has_key(keys: str | None, wanted: tuple[str, ...]) -> bool:
    have = (keys or "").split(KEY_SEPARATOR)
    return any(k in have for k in wanted)


def tag_set(expressions) -> frozenset[str] | None:
    """The tags that consumers subscribing with these tag expressions receive, as RocketMQ
    reads an expression (``FilterAPI.buildSubscriptionData``): ``*`` (or an empty one) is
    every message, ``tag1 || tag2`` either tag (each trimmed; a ``*`` among them is just a
    tag, as there). None: every message.
    ValueError for an expression that names no tag (``||``)."""
    out: set[str] = set()
    for expr in expressions or ():
        if expr.strip() in ("", SUB_ALL):
            return None
        tags = {t.strip() for t in expr.split("||") if t.strip()}
        if not tags:
            raise ValueError(f"{expr!r} names no tag (write tag1||tag2, or * for every message)")
        out |= tags
    return frozenset(out) if expressions else None


SUB_ALL = "*"  # SubscriptionData.SUB_ALL
KEY_SEPARATOR = " "  # MessageConst.KEY_SEPARATOR


def msg_id_pos(msg_id: str) -> int:
    """The entry pos a message id names (its commit-log offset - 48); ValueError if it is
    not a message id (32 hex digits for an IPv4 store host, 56 for IPv6; a UNIQ_KEY has
    the same form)."""
    if len(msg_id) not in (32, 56) or not all(c in "0123456789abcdefABCDEF" for c in msg_id):
        raise ValueError(f"{msg_id!r} is not a message id (32 or 56 hex digits: RocketMQ's offset msgId, or the "
                         "producer's UNIQ_KEY)")
    return int(msg_id[-16:], 16) - HEADER_SIZE


MESSAGE_FIELDS = ["kind", "index", "pos", "phy_offset", "msg_id", "topic", "queue_id", "queue_offset", "sys_flag",
                  "flag", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
                  "prepared_tx_offset", "body_size", "body_crc_ok", "tags", "keys", "uniq_key", "properties", "note"]


def message_rows(node_dir: str, sel: Selection | None = None, flt: Filter | None = None, *, body=None,
                 max_body: int = MAX_MESSAGE_SIZE, data_file_size: int | None = None,
                 index_file_size: int | None = None, index_root: str | None = None) -> Iterator[dict]:
    """``mq messages``: a row per entry (MESSAGE_FIELDS, and ``body`` rendered by
    ``body(bytes)`` when given: uncompressed, up to ``max_body`` bytes, else a note). With a
    filter, messages that match only.

    With ``flt.msg_id``, as ``mqadmin queryMsgById`` reads an id: first as the offset
    msgId (the entry at the offset it holds, read without a scan), and when no message has
    it, as the producer's UNIQ_KEY (what ``SendResult.getMsgId()`` shows; a scan). Each
    row then says which in ``matched`` (``msg_id`` or ``uniq_key``).

    With ``index_root`` (a broker's store root), keys and UNIQ_KEYs of given topics are
    looked up in its ``index/`` files as ``mqadmin queryMsgByKey`` does, instead of a scan
    (:func:`_indexed_rows`)."""
    flt = flt or Filter()
    sel = sel or Selection()
    opts = dict(body=body, max_body=max_body, data_file_size=data_file_size, index_file_size=index_file_size)
    if flt.msg_id is None:
        yield from _filtered(node_dir, sel, flt, index_root, **opts)
        return
    found = False
    pos = msg_id_pos(flt.msg_id)
    if pos >= _lowest_pos(node_dir) and sel.pos in (None, pos):
        for row in _rows(node_dir, Selection(sel.index, sel.from_index, sel.to_index, pos), flt, **opts):
            found = True
            yield {**row, "matched": "msg_id"}
    uniq = flt.msg_id.upper()  # (RocketMQ's clients write UNIQ_KEY in upper-case hex)
    if not found and flt.uniq_key in (None, uniq):
        for row in _filtered(node_dir, sel, replace(flt, msg_id=None, uniq_key=uniq), index_root, **opts):
            yield {**row, "matched": "uniq_key"}


def _filtered(node_dir: str, sel: Selection, flt: Filter, index_root: str | None, **opts) -> Iterator[dict]:
    index = open_index(index_root) if index_root and flt.topics and (flt.keys or flt.uniq_key) else None
    if index is None:
        return _rows(node_dir, sel, flt, **opts)
    return _indexed_rows(node_dir, sel, flt, index, **opts)


def _indexed_rows(node_dir: str, sel: Selection, flt: Filter, index: list[IndexFile], **opts) -> Iterator[dict]:
    """The messages ``flt`` wants among those the index files hold under its topics and
    keys (or UNIQ_KEY), in log order, each read at its offset and checked (a slot holds a
    hash); then those the index does not reach yet (after the last offset it holds),
    scanned. A message the broker did not index (a rolled-back transaction's) is missed,
    as by mqadmin: ``mq messages --scan`` reads every message."""
    keys = (flt.uniq_key,) if flt.uniq_key is not None else flt.keys
    offsets = sorted({phy for f in index for t in flt.topics for k in keys for phy in f.offsets(f"{t}#{k}")})
    covered = max(f.end_phy for f in index) - HEADER_SIZE  # (the entry of the last message indexed)
    lowest = _lowest_pos(node_dir)
    for phy in offsets:
        pos = phy - HEADER_SIZE
        if pos < lowest or pos > covered or sel.pos not in (None, pos):  # (past ``covered``: the scan below reads it)
            continue
        for row in _rows(node_dir, Selection(sel.index, sel.from_index, sel.to_index, pos), flt, **opts):
            if row["pos"] == pos:
                yield row
    last = next((it for it in items(node_dir, Selection(pos=covered), data_file_size=opts["data_file_size"],
                                    index_file_size=opts["index_file_size"]) if it.pos == covered), None)
    if last is not None and _is_commit_log(node_dir) and sel.lower() is None and sel.upper() is None:
        yield from _commit_log_rows_after(node_dir, covered, flt, **opts)  # (ordinals unknown: from the offset on)
    elif last is not None and last.index >= 0:
        lo = max(last.index + 1, sel.lower() if sel.lower() is not None else 0)
        yield from _rows(node_dir, Selection(None, lo, sel.upper(), sel.pos), flt, **opts)
    else:  # (the index points past the log, or at no entry: scan what follows that offset)
        yield from (row for row in _rows(node_dir, sel, flt, **opts) if row["pos"] > covered)


def queue_offset_rows(root: str, node_dir: str, topic: str, queue_id: int, queue_offset: int, *, body=None,
                      max_body: int = MAX_MESSAGE_SIZE, data_file_size: int | None = None,
                      index_file_size: int | None = None) -> Iterator[dict]:
    """``mq messages --queue-offset``, as ``mqadmin queryMsgByOffset``: the message the
    consume queue's unit for ``queue_offset`` points at (one unit read, then the entry at
    its commit-log offset; no scan). A row's note says so when what is there is not the
    message the unit names. NotFound (lookup.py) when the queue has no such unit, or the
    log holds no entry where it points."""
    unit = queue_unit(root, topic, queue_id, queue_offset)
    pos = unit.phy_offset - HEADER_SIZE
    found = False
    for row in _rows(node_dir, Selection(pos=pos), Filter(), body=body, max_body=max_body,
                     data_file_size=data_file_size, index_file_size=index_file_size):
        if row["pos"] != pos:
            continue
        found = True
        if (row["topic"], row["queue_id"], row["queue_offset"]) != (topic, queue_id, queue_offset):
            what = (f"message {row['topic']}/{row['queue_id']} at queue offset {row['queue_offset']}"
                    if row["kind"] == "message" else f"{row['kind']} entry")
            row["note"] = "; ".join(filter(None, [row["note"], f"{unit.file} (byte {unit.offset}) points here, "
                                                                f"but this is a {what}"]))
        yield row
    if not found:
        raise NotFound(f"{unit.file} (byte {unit.offset}) points at commit-log offset {unit.phy_offset}, where the "
                       "log holds no entry")


def _rows(node_dir: str, sel: Selection, flt: Filter, *, body, max_body: int, data_file_size: int | None,
          index_file_size: int | None) -> Iterator[dict]:
    return _item_rows(items(node_dir, sel, data_file_size=data_file_size, index_file_size=index_file_size), flt,
                      body=body, max_body=max_body)


def _commit_log_rows_after(log_dir: str, pos: int, flt: Filter, *, body, max_body: int, **_files) -> Iterator[dict]:
    """The rows of the messages after the one at ``pos`` of a commit log, walked from there."""
    its = _items_of(commitlog.batches(log_dir, at=pos + HEADER_SIZE))
    return (row for row in _item_rows(its, flt, body=body, max_body=max_body) if row["pos"] > pos)


def _item_rows(its: Iterator[Item], flt: Filter, *, body, max_body: int) -> Iterator[dict]:
    for it in its:
        m = it.message
        if m is None:
            if flt.any:
                continue
            row = dict.fromkeys(MESSAGE_FIELDS)
            row.update(kind=it.kind, index=None if it.index < 0 else it.index, pos=it.pos,
                       note="; ".join(filter(None, [it.note, it.crc_note])))
            if body is not None:
                row["body"] = None
            yield row
            continue
        if not flt.wants(m):
            continue
        row = {"kind": "message", "index": None if it.index < 0 else it.index, "pos": it.pos,
               **message_fields(it.buf, m, body, max_body=max_body)}
        if it.crc_note:
            row["note"] = "; ".join(filter(None, [row["note"], it.crc_note]))
        yield row


def message_fields(buf, m: Message, body=None, *, max_body: int = MAX_MESSAGE_SIZE) -> dict:
    """A message's fields as ``mq messages``, ``get --decode rocketmq`` and the Spark jobs
    show them (from ``phy_offset`` on in MESSAGE_FIELDS; ``body`` rendered by ``body(bytes)``
    when given, a compressed one inflated to at most ``max_body`` bytes: past that, or when
    it does not inflate, ``body`` is None and the note says why)."""
    raw = buf[m.body_at:m.body_at + m.body_size]
    notes = ["RocketMQ 5 (V2) message"] if m.magic != MESSAGE_MAGIC_CODE else []
    compressed = compression_of(m.sys_flag)
    if compressed:
        notes.append(f"body {compressed}-compressed ({m.body_size} bytes stored)")
    row = {"phy_offset": m.phy_offset, "msg_id": m.msg_id, "topic": m.topic, "queue_id": m.queue_id,
           "queue_offset": m.queue_offset, "sys_flag": m.sys_flag, "flag": m.flag,
           "born_timestamp": m.born_timestamp, "born_host": m.born_host, "store_timestamp": m.store_timestamp,
           "store_host": m.store_host, "reconsume_times": m.reconsume_times,
           "prepared_tx_offset": m.prepared_tx_offset, "body_size": m.body_size,
           "body_crc_ok": body_crc(raw) == m.body_crc, "tags": m.tags, "keys": m.keys, "uniq_key": m.uniq_key,
           "properties": m.properties, "note": ""}
    if body is not None:
        try:
            row["body"] = body(body_of(buf, m, limit=max_body))
        except NotAMessage as exc:
            row["body"] = None
            notes.append(str(exc))
    row["note"] = "; ".join(notes)
    return row
