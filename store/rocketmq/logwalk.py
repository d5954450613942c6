"""The log's messages a batch at a time, as the columns ``mq check`` and ``mq topics`` need
(:func:`walk`), with what ``mq check`` finds in the log itself: one reader for check.py's
whole-log path and stream.py's bounded one.

A batch is at most ``BATCH`` entries of one data file (the scan's runs are cut to it), so
what it holds is bounded whatever the store's size."""

from __future__ import annotations

import numpy as np

from ..format import HEADER_SIZE, MAGIC_NORMAL, crc32
from ..reading import Selection
from .columns import SLOW, delay_level, message_columns
from .message import (
    PROPERTY_DELAY_TIME_LEVEL,
    SCHEDULE_TOPIC,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    tags_code,
)
from .scan import Batch, batches, crc_damaged, crc_note, entry_item

BATCH = 1 << 16  # messages read into columns at a time
# ScheduleMessageService's default levels (MessageStoreConfig.messageDelayLevel), in ms
DELAY_LEVELS_MS = [s * 1000 for s in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800,
                                      3600, 7200)]
_DISPATCHED_NOT = (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)


def walk(broker, findings: list | None, c, *, data_file_size=None, index_file_size=None, progress=None,
         delay_levels_ms: list[int] | None = None, notes: list | None = None):
    """The log's messages, ``BATCH`` at a time: (batch, columns of its messages), in log
    order, with (``findings`` a list) what ``mq check`` finds in the log itself. ``c`` (a
    :class:`Log`, or check.py's Columns) learns the topics, entries and extent.
    ``delay_levels_ms``: the broker's delay levels (messageDelayLevel), when not the default.
    ``notes`` (a list; without ``findings``): a line for each entry whose own bodyCrc fails
    (every reader says so; ``mq check`` reports them as ``entry-crc``)."""
    delay_table = np.array([0] + list(DELAY_LEVELS_MS if delay_levels_ms is None else delay_levels_ms), np.int64)
    schedule = np.zeros(0, bool)
    # (scan.batches reads a master-slave store's commitlog/ too, and an old one before a DLedger log)
    for whole in batches(broker.node_dir, Selection(), data_file_size=data_file_size, index_file_size=index_file_size):
        c.files.add(whole.start)
        c.places[whole.start] = (whole.file.split("/")[0], whole.shift)
        if whole.damage:
            if findings is not None:
                findings.append(_finding("damage", whole.file, whole.at - whole.start + whole.shift, None,
                                         detail=whole.damage))
            continue
        if progress is not None:
            progress(int(whole.size.sum()))
        for s in range(0, len(whole), BATCH):
            b = whole if len(whole) <= BATCH else _slice(whole, s, s + BATCH)
            c.entries += len(b)
            if c.first_pos < 0:
                c.first_pos = int(b.pos[0])
            c.end_pos = max(c.end_pos, int(b.pos[-1] + b.size[-1]))  # (files that overlap go back)
            c.last = (int(b.pos[-1]), int(b.index[-1]))
            if findings is not None or notes is not None:
                for k in np.flatnonzero(crc_damaged(b)).tolist():
                    if findings is None:
                        notes.append(f"{b.file} offset {int(b.pos[k]) - b.start}: {crc_note(b, k)}")
                        continue
                    findings.append(_finding("entry-crc", b.file, int(b.pos[k]) - b.start + b.shift, int(b.index[k]),
                                             detail=crc_note(b, k)))
            normal = np.flatnonzero(b.magic == MAGIC_NORMAL)
            if not len(normal):
                continue
            pos, index = b.pos[normal], b.index[normal]
            mc = message_columns(b.buf, pos - b.start + HEADER_SIZE, b.bsize[normal], findings is not None)
            ids = np.array([c.topic_id(t.decode("utf-8")) for t in mc.topics] or [0], np.int32)
            topic = ids[mc.topic]
            keep = np.ones(len(normal), bool)
            for k in np.flatnonzero(mc.status == SLOW):  # message.decode says what it is
                it = entry_item(b.buf, b.file, b.start, MAGIC_NORMAL, 0, int(index[k]), 0, int(pos[k]),
                                int(b.bsize[normal[k]]))
                if it.message is None:
                    keep[k] = False
                    if findings is not None:
                        findings.append(_finding("not-a-message", b.file, int(pos[k]) - b.start + b.shift,
                                                 it.index, detail=it.note))
                    continue
                _fill(mc, k, it.message, b.buf, findings is not None)
                topic[k] = c.topic_id(it.message.topic)
            if not keep.any():  # (then no topic may be known yet to index by)
                continue
            if len(schedule) < len(c.topics):
                schedule = np.array([t == SCHEDULE_TOPIC for t in c.topic_names()], bool)
            delay = schedule[topic] & (mc.delay > 0)
            tags = np.where(delay, mc.store_ts + _delay_ms(mc.delay, delay_table), mc.tags)
            # (a negative QUEUEID is damage, not a queue: a broker picks a queue for one, SendMessageProcessor)
            dispatched = ~np.isin(mc.sys_flag & TRANSACTION_ROLLBACK_TYPE, _DISPATCHED_NOT) & (mc.queue_id >= 0)
            cols = dict(index=index, phy=pos + HEADER_SIZE, size=mc.size, topic=topic, queue_id=mc.queue_id,
                        queue_offset=mc.queue_offset, store_ts=mc.store_ts, dispatched=dispatched, tags=tags,
                        delay=delay, fstart=np.full(len(normal), b.start, np.int64))
            if not keep.all():
                cols = {k: v[keep] for k, v in cols.items()}
            if findings is not None:
                _log_findings(b, normal, mc, keep, topic, c, findings)
            yield b, cols


def _slice(b: Batch, lo: int, hi: int) -> Batch:
    return b.take(slice(lo, hi))


def _log_findings(b, normal, mc, keep, topic, c, findings: list) -> None:
    """A batch's messages whose body or PHYSICALOFFSET is wrong."""
    pos, index = b.pos[normal], b.index[normal]
    for k in np.flatnonzero(keep & ~mc.crc_ok):
        it = entry_item(b.buf, b.file, b.start, MAGIC_NORMAL, 0, int(index[k]), 0, int(pos[k]), int(b.bsize[normal[k]]))
        m = it.message
        actual = crc32(b.buf[m.body_at:m.body_at + m.body_size]) & 0x7FFFFFFF
        findings.append(_finding("body-crc", b.file, int(pos[k]) - b.start + b.shift, it.index, m,
                                 detail=f"BODYCRC {m.body_crc}, the body's crc32 is {actual}"))
    names = c.topic_names()
    for k in np.flatnonzero(keep & (mc.queue_id < 0)):
        findings.append(_finding("queue-id", b.file, int(pos[k]) - b.start + b.shift, int(index[k]), topic=names[topic[k]],
                                 queue_id=int(mc.queue_id[k]), queue_offset=int(mc.queue_offset[k]),
                                 detail=f"QUEUEID {int(mc.queue_id[k])} is negative: a broker never stores one (it "
                                        "picks a queue for a negative id), so no queue holds this message"))
    for k in np.flatnonzero(keep & (mc.phy != pos + HEADER_SIZE)):
        findings.append(_finding("phy-offset", b.file, int(pos[k]) - b.start + b.shift, int(index[k]), topic=names[topic[k]],
                                 queue_id=int(mc.queue_id[k]), queue_offset=int(mc.queue_offset[k]),
                                 detail=f"PHYSICALOFFSET {int(mc.phy[k])}, the entry's pos + 48 is "
                                        f"{int(pos[k]) + HEADER_SIZE}"))


def _fill(mc, k: int, m, buf, crc: bool) -> None:
    """Row ``k`` of ``mc`` from a message that message.decode read."""
    mc.size[k], mc.queue_id[k], mc.queue_offset[k], mc.phy[k] = m.size, m.queue_id, m.queue_offset, m.phy_offset
    mc.sys_flag[k], mc.store_ts[k], mc.tags[k] = m.sys_flag, m.store_timestamp, tags_code(m.tags)
    level = m.properties.get(PROPERTY_DELAY_TIME_LEVEL)
    mc.delay[k] = delay_level(level.encode("utf-8")) if level is not None else -1
    if crc:
        mc.crc_ok[k] = crc32(buf[m.body_at:m.body_at + m.body_size]) & 0x7FFFFFFF == m.body_crc


def _delay_ms(levels: np.ndarray, table: np.ndarray) -> np.ndarray:
    """ScheduleMessageService.computeDeliverTimestamp's delay of each level (``table``: 0,
    then each level's delay in ms; a level past the last is the last)."""
    return table[np.clip(levels, 0, len(table) - 1)]


def place(c, fstart: int, phy: int) -> tuple[str, int]:
    """The file (``data/<name>``, or ``commitlog/<name>`` in a commit log) and the byte in it
    of the message at commit-log offset ``phy`` read from the file starting at ``fstart``
    (``c.places``: what :func:`walk` saw of each file)."""
    d, shift = c.places.get(fstart, ("data", 0))
    return f"{d}/{fstart:020d}", phy - HEADER_SIZE - fstart + shift


def _finding(kind: str, file: str, offset: int, index: int | None, m=None, *, topic=None, queue_id=None,
             queue_offset=None, detail: str = "") -> dict:
    if index is not None and index < 0:
        index = None  # (a message of an old commit log before a DLedger log: no DLedger entry)
    if m is not None:
        topic, queue_id, queue_offset = m.topic, m.queue_id, m.queue_offset
    return {"finding": kind, "file": file, "offset": offset, "index": index, "topic": topic, "queue_id": queue_id,
            "queue_offset": queue_offset, "detail": detail}


def _key(topic, queue_id):
    """One int64 of a topic id and a queue id (arrays or ints)."""
    return (np.asarray(topic, np.int64) << 32) | (np.asarray(queue_id, np.int64) & 0xFFFFFFFF)
