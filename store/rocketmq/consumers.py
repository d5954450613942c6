"""Consumer offsets against the consume queues (``mq consumers``).

The broker keeps each group's committed offsets in ``<store root>/config/consumerOffset.json``
(``ConsumerOffsetManager``, written with fastjson): ``{"offsetTable": {"<topic>@<group>":
{<queueId>: <offset>, ...}, ...}}``. fastjson writes the Integer queue ids as bare numbers
(``{0:250,1:249}``), which is not JSON: store/rocketmq/jsonread.py (the one bounded reader
of RocketMQ's JSON) reads it. ``ConfigManager.load``: a missing or empty file, or one that does not
decode, is replaced by ``consumerOffset.json.bak`` (the broker's previous version).

For each group, topic and queue: the committed offset, the queue's min and max (what the
broker answers for ``getMinOffsetInQueue``/``getMaxOffsetInQueue``: min is the first unit
that points at a message at or past the log's first, max the offset after its last unit),
the backlog (max - committed, never below 0), and a status: ``ok``; ``past the end``
(committed > max: what a truncation or a failover leaves behind; the broker resets it
when the group next pulls, ``OFFSET_OVERFLOW_BADLY``), the only finding; ``before min``
(the messages below min are gone; the consumer resets to min); ``no queue`` (no such
consume queue: min = max = 0; ``past the end (no queue)`` when committed > 0). Read-only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np

from ..errors import StoreUsageError
from ..format import HEADER_SIZE, MAGIC_NORMAL
from ..reading import Selection
from .commitlog import log_files
from .consumequeue import find_queues, plan_units, read_piece
from .consumequeue import file_size as file_size_of
from .layout import BrokerStore
from .divided import old_log_dir
from .jsonread import JsonError, read_json_file
from .scan import batches

OFFSET_FILE = os.path.join("config", "consumerOffset.json")  # BrokerPathConfigHelper.getConsumerOffsetPath
TOPIC_GROUP_SEPARATOR = "@"  # ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR
PAST_END = "past the end"
# A queue id (an Integer key) as fastjson reads it, Integer.parseInt: a sign, then decimal digits
# (Unicode's: "\u0661" is 1 to the broker too, run in tests/java/test_consumer_offsets_java.py);
# Python's int() would also take " 0" and "1_0", which the broker refuses (it reads the .bak)
_QUEUE_ID = re.compile(r"[+-]?\d{1,64}")
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1  # java.lang.Integer
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1  # java.lang.Long
CHUNK = 1 << 14  # units of a queue read at a time (330 KB): a whole file is 6 MB by default


class OffsetsError(StoreUsageError):
    """The offsets file cannot be read (the text says which and why)."""


@dataclass
class Row:
    group: str
    topic: str
    queue_id: int
    committed: int
    min: int
    max: int
    backlog: int
    status: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def read_offsets(root: str) -> tuple[dict[str, dict[int, int]], str, list[str]]:
    """The offset table (``topic@group`` -> queue id -> offset), the file it came from, and
    notes (the .bak was used, and why). OffsetsError when neither file gives one."""
    path = os.path.join(root, OFFSET_FILE)
    bad: OffsetsError | None = None
    try:
        table = _parse(path)
        if table is not None:
            return table, path, []
        why = f"{OFFSET_FILE} is missing or empty"
    except OffsetsError as exc:
        bad, why = exc, str(exc)
    bak = path + ".bak"
    try:
        table = _parse(bak)
    except OffsetsError as exc:
        raise OffsetsError(f"{bad}; and {exc}" if bad else str(exc)) from None
    if table is None:
        if bad is not None:
            raise bad
        raise OffsetsError(f"{path}: no such file or empty, nor {os.path.basename(bak)} (no consumer offsets)")
    return table, bak, [f"{why}: read {OFFSET_FILE}.bak, as the broker does"]


def _parse(path: str) -> dict[str, dict[int, int]] | None:
    """The offset table of one file; None when it is missing or empty. OffsetsError when
    ConfigManager.decode would not load it: no fastjson JSON (jsonread's bounds), no
    offsetTable, a queue id that is no Integer or an offset that is no Long.

    What a broker writes is read as it reads it (tests/java/test_consumer_offsets_java.py
    runs RocketMQ's ConfigManager.load on the same files). Hand-made oddities fastjson
    coerces are refused here instead: an offset written as a string or a fraction ("5",
    5.7), a queue id "1.0", objects nested 515 to some thousands deep (jsonread's bound)."""
    try:
        doc = read_json_file(path)
    except JsonError as exc:
        raise OffsetsError(str(exc)) from None
    if doc is None:
        return None
    table = doc.get("offsetTable") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise OffsetsError(f"{path}: no offsetTable object in it")
    out: dict[str, dict[int, int]] = {}
    for key, queues in table.items():
        if TOPIC_GROUP_SEPARATOR not in key or not isinstance(queues, dict):
            raise OffsetsError(f"{path}: offsetTable entry {key!r} is not \"topic@group\": {{queueId: offset}}")
        row = {}
        for qid, off in queues.items():
            if not _QUEUE_ID.fullmatch(qid) or not INT_MIN <= int(qid) <= INT_MAX:
                raise OffsetsError(f"{path}: {key}: queue id {qid[:40]!r} is not a number (an Integer: a sign "
                                   "and digits, no spaces or underscores)")
            q = int(qid)
            if isinstance(off, bool) or not isinstance(off, int) or not LONG_MIN <= off <= LONG_MAX:
                raise OffsetsError(f"{path}: {key} queue {q}: offset {_short(off)} is not a whole number (a Long)")
            row[q] = off
        out[key] = row
    return out


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def log_min_offset(broker: BrokerStore) -> int:
    """The commit-log offset of the store's first message (``CommitLog.getMinOffset`` for a
    master-slave store: its first file's start; a DLedger log's that follows an old commit
    log: the old log's first file's start while one is left, divided.py); 0 when it holds none."""
    if broker.commit_log:
        return log_files(broker.node_dir)[0][0]
    old = old_log_dir(broker.node_dir)
    if old is not None:
        return log_files(old)[0][0]
    for b in batches(broker.node_dir, Selection()):
        normal = np.flatnonzero(b.magic == MAGIC_NORMAL) if not b.damage else []
        if len(normal):
            return int(b.pos[normal[0]]) + HEADER_SIZE
    return 0


def queue_bounds(root: str, log_min: int) -> tuple[dict[tuple[str, int], tuple[int, int]], list[str]]:
    """(topic, queue id) -> (min, max) for every consume queue; and notes on damaged ones.
    Bounded memory: a queue's files are planned (consumequeue.plan_units), and only the
    units of its first run up to the first that points at ``log_min`` or later are read,
    ``CHUNK`` at a time."""
    queues = find_queues(root)
    fsize = file_size_of(queues)
    out, notes = {}, []
    for q in queues:
        pieces = plan_units(q, fsize)
        if q.damaged:
            where, off, what = q.damaged[0]
            notes.append(f"{where} (offset {off}): {what} (see 'dledgerctl mq check')")
        out[(q.topic, q.queue_id)] = (q.first + _below(pieces, q, log_min), q.end)
    return out, notes


def _below(pieces, q, log_min: int) -> int:
    """How many units of the queue's first run come before the first that points at
    ``log_min`` or later (all of the run's when none does)."""
    if not q.spans:
        return 0
    run_end = q.spans[0][0] + q.spans[0][1]
    below = 0
    for p in pieces:
        if p.at >= run_end:
            break
        for skip in range(0, p.count, CHUNK):
            at_or_past = np.flatnonzero(read_piece(p, skip, min(CHUNK, p.count - skip))["offset"] >= log_min)
            if len(at_or_past):
                return below + skip + int(at_or_past[0])
        below += p.count
    return below


def consumer_rows(broker: BrokerStore) -> tuple[list[Row], str, list[str]]:
    """Every committed offset against its queue; the offsets file read; notes."""
    if broker.root is None:
        raise OffsetsError(f"{broker.node_dir}: no consumequeue/ beside it: give a broker's store root")
    table, used, notes = read_offsets(broker.root)
    bounds, more = queue_bounds(broker.root, log_min_offset(broker))
    notes += more
    rows = []
    for key in sorted(table):
        topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
        for qid in sorted(table[key]):
            committed = table[key][qid]
            lo, hi = bounds.get((topic, qid), (0, 0))
            if (topic, qid) not in bounds:
                status = f"{PAST_END} (no queue)" if committed > 0 else "no queue"
            elif committed > hi:
                status = PAST_END
            elif committed < lo:
                status = "before min"
            else:
                status = "ok"
            rows.append(Row(group, topic, qid, committed, lo, hi, max(0, hi - committed), status))
    return rows, used, notes
